//! The policy service's core: checks, grants and their bookkeeping, over the store.
//! gRPC types stay in `grpc.rs`; this module speaks domain types.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metnos_kit::store::Db;
use metnos_kit::time::now_ms;

use crate::grant::{Candidate, Grant, GrantError, NewGrant};
use crate::matcher::Matcher;
use crate::outcome::{Decision, Scope, decide, needs_grants};
use crate::store::{GrantStore, ListFilter, Recorded};
use metnos_core::capability::{Capability, TargetKind, UnknownCapability};
use metnos_core::level::AutonomyLevel;
use metnos_core::principal::{Principal, PrincipalError};
use metnos_core::target::{Target, TargetError};

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
    BadPrincipal(#[from] metnos_core::principal::BadPrincipal),
    #[error(transparent)]
    Grant(#[from] GrantError),
    #[error("grant id must be positive, got {0}")]
    InvalidGrantId(i64),
    #[error("unused_days must be at least 1")]
    InvalidUnusedDays,
    #[error("expires_at is not a valid time")]
    InvalidExpiry,
    #[error("idempotency_key was already used for another grant")]
    KeyReused,
    #[error(transparent)]
    TooBig(#[from] metnos_core::limits::TooBig),
    #[error("grant store: {0}")]
    Store(#[from] sqlx::Error),
}

/// A person's grants for one capability, by lookup key, as cached.
#[derive(Debug)]
enum Cached {
    Grants {
        by_key: HashMap<String, Vec<Candidate>>,
        weight: u64,
    },
    /// More than [`CACHE_MAX_PER_ENTRY`]: asked of the store at every check.
    TooMany,
}

/// A person with more grants than this for one capability is not cached.
const CACHE_MAX_PER_ENTRY: i64 = 10_000;

#[derive(Debug, Clone, Copy)]
struct CachedWeight;

impl quick_cache::Weighter<CacheKey, Arc<Cached>> for CachedWeight {
    fn weight(&self, _key: &CacheKey, value: &Arc<Cached>) -> u64 {
        match value.as_ref() {
            Cached::Grants { weight, .. } => *weight,
            Cached::TooMany => 1,
        }
    }
}

type CacheKey = (String, String, Capability);

/// Active grants per (person, capability), kept only when this process is the store's
/// single writer (a locked SQLite file): then every change goes through here and
/// invalidates what it touches, so a revocation takes effect at once. A load that raced
/// with a change is not kept (the generation moved). With PostgreSQL, where replicas
/// share the store, every check asks the store.
#[derive(Debug)]
struct GrantCache {
    entries: quick_cache::sync::Cache<CacheKey, Arc<Cached>, CachedWeight>,
    generation: AtomicU64,
}

impl GrantCache {
    fn new() -> GrantCache {
        GrantCache {
            // About a million grants' worth of entries.
            entries: quick_cache::sync::Cache::with_weighter(10_000, 1_000_000, CachedWeight),
            generation: AtomicU64::new(0),
        }
    }

    fn invalidate(&self, principal: &Principal, capability: Capability) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.entries.remove(&(
            principal.channel().to_owned(),
            principal.sender_id().to_owned(),
            capability,
        ));
    }

    fn clear(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.entries.clear();
    }
}

/// The policy service's state.
#[derive(Debug)]
pub struct Policy {
    store: GrantStore,
    matcher: Matcher,
    cache: Option<GrantCache>,
    /// The user's home: what `~` means in targets.
    home: PathBuf,
    /// Grant id → last use (ms), not yet written: a check must not wait for a write.
    pending_uses: Mutex<HashMap<i64, i64>>,
}

impl Policy {
    /// The policy service over `db`, with `~` meaning `home`. Grants are cached when the
    /// store is single-writer (SQLite).
    pub fn new(db: Db, home: PathBuf) -> Policy {
        Policy::with_cache(db, home, true)
    }

    /// As [`Policy::new`]; `cache: false` asks the store at every check (what replicas
    /// sharing PostgreSQL always do), e.g. to measure the store path.
    pub fn with_cache(db: Db, home: PathBuf, cache: bool) -> Policy {
        Policy {
            cache: (cache && db.single_writer()).then(GrantCache::new),
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
        level: AutonomyLevel,
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
                self.candidates(scope, capability, now).await?
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

    /// The grants that could match the scope's target: from the cache when there is one.
    async fn candidates(
        &self,
        scope: &Scope<'_>,
        capability: Capability,
        now: i64,
    ) -> Result<Vec<Candidate>, Error> {
        let keys = scope.target.candidate_keys();
        let Some(cache) = &self.cache else {
            return Ok(self
                .store
                .candidates(scope.principal, capability, &keys, now)
                .await?);
        };
        let cache_key = (
            scope.principal.channel().to_owned(),
            scope.principal.sender_id().to_owned(),
            capability,
        );
        let cached = match cache.entries.get(&cache_key) {
            Some(cached) => cached,
            None => {
                let generation = cache.generation.load(Ordering::SeqCst);
                let rows = self
                    .store
                    .load_active(scope.principal, capability, now, CACHE_MAX_PER_ENTRY + 1)
                    .await?;
                let cached = Arc::new(if rows.len() as i64 > CACHE_MAX_PER_ENTRY {
                    Cached::TooMany
                } else {
                    let weight = rows.len() as u64 + 1;
                    let mut by_key: HashMap<String, Vec<Candidate>> = HashMap::new();
                    for (key, candidate) in rows {
                        by_key.entry(key).or_default().push(candidate);
                    }
                    Cached::Grants { by_key, weight }
                });
                if cache.generation.load(Ordering::SeqCst) == generation {
                    cache.entries.insert(cache_key.clone(), Arc::clone(&cached));
                    // A change that landed while inserting: its own removal may have run
                    // before this insert, so drop what may be stale.
                    if cache.generation.load(Ordering::SeqCst) != generation {
                        cache.entries.remove(&cache_key);
                    }
                }
                cached
            }
        };
        match cached.as_ref() {
            Cached::Grants { by_key, .. } => {
                let mut found: Vec<Candidate> = keys
                    .iter()
                    .filter_map(|key| by_key.get(key))
                    .flatten()
                    .cloned()
                    .collect();
                found.sort_by_key(|c| c.id);
                Ok(found)
            }
            Cached::TooMany => Ok(self
                .store
                .candidates(scope.principal, capability, &keys, now)
                .await?),
        }
    }

    /// Records a grant — once per `idempotency_key` (empty: no key): a retry with the same
    /// key returns the grant the first call recorded, and a key reused for another grant
    /// is refused.
    pub async fn record(
        &self,
        principal: Principal,
        capability: &str,
        target: &str,
        expires_at: Option<i64>,
        granted_by: &str,
        idempotency_key: &str,
    ) -> Result<Grant, Error> {
        let capability = Capability::parse(capability)?;
        let now = now_ms();
        let new = NewGrant::new(
            principal, capability, target, expires_at, granted_by, &self.home, now,
        )?
        .keyed(idempotency_key)?;
        match self.store.record(&new, now).await? {
            Recorded::New(grant) => {
                if let Some(cache) = &self.cache {
                    cache.invalidate(&new.principal, capability);
                }
                tracing::info!(grant = grant.id, capability = %capability, "grant recorded");
                Ok(grant)
            }
            Recorded::Existing(grant) => {
                if grant.principal != new.principal
                    || grant.capability != capability.name()
                    || grant.target != new.target
                {
                    return Err(Error::KeyReused);
                }
                tracing::info!(grant = grant.id, "grant already recorded under this key");
                Ok(grant)
            }
        }
    }

    /// Lists grants, newest first (uses noted so far are written first).
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<Grant>, Error> {
        self.flush_uses().await?;
        Ok(self.store.list(filter, now_ms()).await?)
    }

    /// Revokes a grant; false if it was already revoked or never existed.
    pub async fn revoke(&self, id: i64, of: Option<&Principal>) -> Result<bool, Error> {
        if id <= 0 {
            return Err(Error::InvalidGrantId(id));
        }
        let Some((principal, capability)) = self.store.revoke(id, of, now_ms()).await? else {
            return Ok(false);
        };
        if let (Some(cache), Ok(capability)) = (&self.cache, Capability::parse(&capability)) {
            cache.invalidate(&principal, capability);
        }
        tracing::info!(grant = id, "grant revoked");
        Ok(true)
    }

    /// Walks the grant store's changes journal.
    pub async fn verify_changes(&self) -> Result<metnos_kit::chain::Report, Error> {
        Ok(self.store.verify_changes().await?)
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
        if let Some(cache) = &self.cache
            && !revoked.is_empty()
        {
            cache.clear();
        }
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
