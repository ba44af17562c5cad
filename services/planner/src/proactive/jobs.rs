//! The scheduler's builtin maintenance tasks: the turn log's retention and the
//! scratchpad's pruning. (The vaglio prunes its verdict log and the approval service
//! expires its requests where their files and rows are; the per-replica recovery loops —
//! leases, turns whose approval expired — run every few seconds in [`crate::serve`], too
//! often for a scheduler with a minute's tick.)

use std::path::PathBuf;

use crate::proactive::scheduler::{Done, Firing, Job};
use crate::store::Store;
use crate::turnlog;

/// `turn_log_retention`: deletes the daily turn logs older than `keep_days`.
#[derive(Debug)]
pub struct TurnLogRetention {
    pub dir: PathBuf,
    pub keep_days: u32,
}

/// When it runs.
pub const TURN_LOG_RETENTION: (&str, &str) = ("turn_log_retention", "daily@03:15");

/// The turn log's retention task of `replica` (each replica prunes the log in its own
/// data directory): `turn_log_retention.<8 hex of the replica's name>`.
pub fn turn_log_task(replica: &str) -> String {
    use sha2::{Digest, Sha256};
    let hash = hex::encode(Sha256::digest(replica.as_bytes()));
    format!("{}.{}", TURN_LOG_RETENTION.0, &hash[..8])
}

#[tonic::async_trait]
impl Job for TurnLogRetention {
    async fn run(&self, firing: &Firing) -> Result<Done, String> {
        let dir = self.dir.clone();
        let keep = self.keep_days;
        let now = firing.now_ms;
        let removed = tokio::task::spawn_blocking(move || turnlog::prune(&dir, keep, now))
            .await
            .map_err(|e| format!("the pruning task failed: {e}"))?
            .map_err(|e| format!("cannot prune the turn log: {e}"))?;
        Ok(format!("{} day(s) of turn log removed", removed.len()).into())
    }
}

/// `scratchpad_prune`: drops scratchpad entries of finished turns older than the
/// retention.
#[derive(Debug)]
pub struct ScratchpadPrune {
    pub store: Store,
    pub retention_hours: u64,
}

pub const SCRATCHPAD_PRUNE: (&str, &str) = ("scratchpad_prune", "every 10 minutes");

#[tonic::async_trait]
impl Job for ScratchpadPrune {
    async fn run(&self, firing: &Firing) -> Result<Done, String> {
        let retention_ms =
            i64::try_from(self.retention_hours.saturating_mul(3_600_000)).unwrap_or(i64::MAX);
        let pruned = self
            .store
            .prune_scratch(firing.now_ms.saturating_sub(retention_ms))
            .await
            .map_err(|e| format!("cannot prune the scratchpad: {e}"))?;
        Ok(format!("{pruned} scratchpad entries removed").into())
    }
}
