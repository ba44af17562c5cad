//! The policy service's core: checks, grants and their bookkeeping, over the store.
//! gRPC types stay in `grpc.rs`; this module speaks domain types.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use metnos_kit::store::Db;
use metnos_kit::time::now_ms;

use crate::grant::{Grant, GrantError, NewGrant, Principal, PrincipalError};
use crate::outcome::{Decision, Scope, decide, needs_grants};
use crate::registry::{Capability, TargetKind, UnknownCapability};
use crate::store::{GrantStore, ListFilter};
use crate::table::Level;
use crate::target::{Matcher, Target, TargetError};

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// What can go wrong in the policy service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    UnknownCapability(#[from] UnknownCapability),
    #[error("autonomy level is unspecified; give ReadOnly, Supervised or Full")]
    UnspecifiedLevel,
    #[error("target: {0}")]
    Target(#[from] TargetError),
    #[error(transparent)]
    Principal(#[from] PrincipalError),
    #[error(transparent)]
    Grant(#[from] GrantError),
    #[error("grant id must be positive, got {0}")]
    InvalidGrantId(i64),
    #[error("unused_days must be at least 1")]
    InvalidUnusedDays,
    #[error("expires_at is not a valid time")]
    InvalidExpiry,
    #[error("grant store: {0}")]
    Store(#[from] sqlx::Error),
}

/// The policy service's state.
#[derive(Debug)]
pub struct Policy {
    store: GrantStore,
    matcher: Matcher,
    /// The user's home: what `~` means in targets.
    home: PathBuf,
    /// Grant id → last use (ms), not yet written: a check must not wait for a write.
    pending_uses: Mutex<HashMap<i64, i64>>,
}

impl Policy {
    pub fn new(db: Db, home: PathBuf) -> Policy {
        Policy {
            store: GrantStore::new(db),
            matcher: Matcher::default(),
            home,
            pending_uses: Mutex::new(HashMap::new()),
        }
    }

    pub fn db(&self) -> &Db {
        self.store.db()
    }

    /// The effective outcome of `capability` at `level` for `principal` on `target`.
    /// Without a principal or a target only the table decides; a given target is
    /// validated whatever the table says.
    pub async fn check(
        &self,
        level: Level,
        capability: &str,
        principal: Option<Principal>,
        target: &str,
    ) -> Result<Decision, Error> {
        let capability = Capability::parse(capability)?;
        let kind = capability.spec().target_kind;
        let parsed = match (target.is_empty(), kind) {
            (true, _) | (false, TargetKind::None) => None,
            (false, kind) => Some(Target::parse(kind, target, &self.home)?),
        };
        let scope = match (&principal, &parsed) {
            (Some(principal), Some(parsed)) => Some(Scope {
                principal,
                target: parsed,
                raw_target: target,
            }),
            _ => None,
        };
        let now = now_ms();
        let candidates = match &scope {
            Some(scope) if needs_grants(level, capability, Some(scope)) => {
                self.store
                    .candidates(
                        scope.principal,
                        capability.name(),
                        &scope.target.candidate_keys(),
                        now,
                    )
                    .await?
            }
            _ => Vec::new(),
        };
        let decision = decide(
            level,
            capability,
            scope.as_ref(),
            &candidates,
            now,
            &self.matcher,
        );
        if let Some(id) = decision.grant_id {
            self.note_use(id, now);
        }
        Ok(decision)
    }

    /// Records a grant.
    pub async fn record(
        &self,
        principal: Principal,
        capability: &str,
        target: &str,
        expires_at: Option<i64>,
        granted_by: &str,
    ) -> Result<Grant, Error> {
        let capability = Capability::parse(capability)?;
        let now = now_ms();
        let new = NewGrant::new(
            principal, capability, target, expires_at, granted_by, &self.home, now,
        )?;
        let grant = self.store.record(&new, now).await?;
        tracing::info!(grant = grant.id, capability = %capability, "grant recorded");
        Ok(grant)
    }

    /// Lists grants, newest first (uses noted so far are written first).
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<Grant>, Error> {
        self.flush_uses().await?;
        Ok(self.store.list(filter, now_ms()).await?)
    }

    /// Revokes a grant; false if it was already revoked or never existed.
    pub async fn revoke(&self, id: i64) -> Result<bool, Error> {
        if id <= 0 {
            return Err(Error::InvalidGrantId(id));
        }
        let revoked = self.store.revoke(id, now_ms()).await?;
        if revoked {
            tracing::info!(grant = id, "grant revoked");
        }
        Ok(revoked)
    }

    /// Revokes the active grants not used for `unused_days` days; returns them.
    pub async fn prune(&self, unused_days: u32) -> Result<Vec<Grant>, Error> {
        if unused_days == 0 {
            return Err(Error::InvalidUnusedDays);
        }
        self.flush_uses().await?;
        let now = now_ms();
        let cutoff = now - i64::from(unused_days) * DAY_MS;
        let revoked = self.store.prune(cutoff, now).await?;
        tracing::info!(count = revoked.len(), unused_days, "grants pruned");
        Ok(revoked)
    }

    fn note_use(&self, id: i64, at: i64) {
        let mut pending = self.pending_uses.lock().unwrap_or_else(|e| e.into_inner());
        let entry = pending.entry(id).or_insert(at);
        *entry = (*entry).max(at);
    }

    /// Writes the uses noted since the last flush. On failure they are kept for the next.
    pub async fn flush_uses(&self) -> Result<(), Error> {
        let uses: Vec<(i64, i64)> = {
            let mut pending = self.pending_uses.lock().unwrap_or_else(|e| e.into_inner());
            pending.drain().collect()
        };
        if let Err(e) = self.store.touch(&uses).await {
            for (id, at) in uses {
                self.note_use(id, at);
            }
            return Err(e.into());
        }
        Ok(())
    }
}
