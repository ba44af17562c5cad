//! The scheduler's builtin maintenance tasks: the turn log's retention, the scratchpad's
//! pruning, the conversations' retention and the mnestome's ager. (The vaglio prunes its verdict log and the approval service
//! expires its requests where their files and rows are; the per-replica recovery loops —
//! leases, turns whose approval expired — run every few seconds in [`crate::serve`], too
//! often for a scheduler with a minute's tick.)

use std::path::PathBuf;

use crate::proactive::scheduler::{Builtin, Done, Firing, Job, JobError};
use crate::store::Store;
use crate::turnlog;

/// Why a maintenance task failed.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    #[error("the pruning task failed: {0}")]
    Stopped(#[from] tokio::task::JoinError),
    #[error("cannot prune the turn log: {0}")]
    TurnLog(#[from] std::io::Error),
    #[error("cannot prune the scratchpad: {0}")]
    Scratchpad(#[from] sqlx::Error),
    #[error("cannot prune the conversations: {0}")]
    Threads(#[from] crate::store::threads::ThreadError),
    #[error("cannot age or read the mnestome: {0}")]
    Mnestome(sqlx::Error),
}

/// `turn_log_retention`: deletes the daily turn logs older than `keep_days`.
#[derive(Debug)]
pub struct TurnLogRetention {
    pub dir: PathBuf,
    pub keep_days: u32,
}

/// The turn log's retention task of `replica` (each replica prunes the log in its own
/// data directory): `turn_log_retention.<8 hex of the replica's name>`.
pub fn turn_log_task(replica: &str) -> String {
    use sha2::{Digest, Sha256};
    let hash = hex::encode(Sha256::digest(replica.as_bytes()));
    format!("{}.{}", TurnLogRetention::NAME, &hash[..8])
}

/// When it runs.
impl Builtin for TurnLogRetention {
    const NAME: &'static str = "turn_log_retention";
    const SCHEDULE: &'static str = "daily@03:15";
}

#[tonic::async_trait]
impl Job for TurnLogRetention {
    async fn run(&self, firing: &Firing) -> Result<Done, JobError> {
        let dir = self.dir.clone();
        let keep = self.keep_days;
        let now = firing.now_ms;
        let removed = tokio::task::spawn_blocking(move || turnlog::prune(&dir, keep, now))
            .await
            .map_err(MaintenanceError::Stopped)?
            .map_err(MaintenanceError::TurnLog)?;
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

impl Builtin for ScratchpadPrune {
    const NAME: &'static str = "scratchpad_prune";
    const SCHEDULE: &'static str = "every 10 minutes";
}

#[tonic::async_trait]
impl Job for ScratchpadPrune {
    async fn run(&self, firing: &Firing) -> Result<Done, JobError> {
        let retention_ms =
            i64::try_from(self.retention_hours.saturating_mul(3_600_000)).unwrap_or(i64::MAX);
        let pruned = self
            .store
            .prune_scratch(firing.now_ms.saturating_sub(retention_ms))
            .await
            .map_err(MaintenanceError::Scratchpad)?;
        Ok(format!("{pruned} scratchpad entries removed").into())
    }
}

/// `thread_retention`: removes the threads silent for longer than
/// `conversation.retention_days` (issue 40), with their exchanges.
#[derive(Debug)]
pub struct ThreadRetention {
    pub db: metnos_kit::store::Db,
    pub retention_ms: i64,
}

impl Builtin for ThreadRetention {
    const NAME: &'static str = "thread_retention";
    const SCHEDULE: &'static str = "daily@03:45";
}

#[tonic::async_trait]
impl Job for ThreadRetention {
    async fn run(&self, firing: &Firing) -> Result<Done, JobError> {
        let threads = crate::store::threads::ThreadStore::new(self.db.clone());
        let gone = threads
            .prune(firing.now_ms.saturating_sub(self.retention_ms))
            .await
            .map_err(MaintenanceError::Threads)?;
        Ok(format!("{gone} exchange(s) of silent threads removed").into())
    }
}

/// `apply_ager` (issue 46, seed agent_runtime ch. 11.2): the mnestome's daily decay,
/// demotion and proto purge ([`crate::store::mnestome::Mnestome::age`]).
#[derive(Debug)]
pub struct ApplyAger {
    pub db: metnos_kit::store::Db,
}

impl Builtin for ApplyAger {
    const NAME: &'static str = "apply_ager";
    const SCHEDULE: &'static str = "daily@04:00";
}

#[tonic::async_trait]
impl Job for ApplyAger {
    async fn run(&self, firing: &Firing) -> Result<Done, JobError> {
        let mnestome = crate::store::mnestome::Mnestome::new(self.db.clone());
        let aged = mnestome
            .age(firing.now_ms)
            .await
            .map_err(MaintenanceError::Mnestome)?;
        Ok(format!(
            "{} weight(s) decayed, {} passage(s) back to protos, {} old proto(s) removed",
            aged.decayed, aged.demoted, aged.purged
        )
        .into())
    }
}

/// `synt_suggest` (issue 46, seed agent_runtime ch. 11.2): for each recurring proto (used
/// at least 3 times, weight at least 0.30) a compose-only search for a chain of existing
/// executors; each outcome is logged, and a chain found is offered to the owner as a
/// shortcut through the telos engine ([`crate::proactive::shortcuts`]) when proposals are
/// on.
#[derive(Debug)]
pub struct SyntSuggest {
    pub planner: std::sync::Arc<crate::turn::engine::Planner>,
    pub db: metnos_kit::store::Db,
    pub filters: std::sync::Arc<dyn crate::filters::Filters>,
    /// `[telos] owner_principals`: the first is asked.
    pub owners: Vec<String>,
    /// `[scheduler] enabled`: off, chains are only logged.
    pub enabled: bool,
}

impl SyntSuggest {
    /// For `planner`, asking through `filters`, as `config` says.
    pub fn new(
        planner: &std::sync::Arc<crate::turn::engine::Planner>,
        filters: &std::sync::Arc<dyn crate::filters::Filters>,
        config: &metnos_kit::Config,
    ) -> SyntSuggest {
        SyntSuggest {
            planner: std::sync::Arc::clone(planner),
            db: planner.store().db().clone(),
            filters: std::sync::Arc::clone(filters),
            owners: config.telos.owner_principals.clone(),
            enabled: config.scheduler.enabled,
        }
    }
}

impl Builtin for SyntSuggest {
    const NAME: &'static str = "synt_suggest";
    const SCHEDULE: &'static str = "daily@04:30";
}

#[tonic::async_trait]
impl Job for SyntSuggest {
    async fn run(&self, firing: &Firing) -> Result<Done, JobError> {
        let found = self
            .planner
            .suggest_chains()
            .await
            .map_err(MaintenanceError::Mnestome)?;
        let mut chains = 0;
        let owner = if self.enabled {
            crate::proactive::shortcuts::owner(&self.db, &self.owners)
                .await
                .map_err(MaintenanceError::Mnestome)?
        } else {
            None
        };
        let mut offered = 0;
        for s in &found {
            if let (Some(owner), Some(_)) = (&owner, &s.chain) {
                let made = crate::proactive::shortcuts::offer(
                    &self.db,
                    self.filters.as_ref(),
                    owner,
                    s,
                    firing.now_ms,
                )
                .await;
                match made {
                    Ok(true) => offered += 1,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(
                            cause = e.cause(),
                            "a shortcut offer failed; the next run tries again"
                        );
                    }
                }
            }
            match &s.chain {
                Some(chain) => {
                    chains += 1;
                    tracing::info!(from = %s.proto.from_executor, uses = s.proto.uses, chain = ?chain.executors, "synt_suggest: a chain of existing executors does a recurring wish (`metnos mnestome list` names it)");
                }
                None => {
                    tracing::info!(from = %s.proto.from_executor, uses = s.proto.uses, "synt_suggest: no chain for a recurring wish (`metnos mnestome list` names it)");
                }
            }
        }
        Ok(format!(
            "{} recurring wish(es), {chains} with a chain of existing executors, {offered} offered as a shortcut",
            found.len()
        )
        .into())
    }
}
