//! Proposals the planner makes on its own (issue 22). Each is an `ActionProposal` for the
//! vaglio's telos engine, never a message sent directly: the engine decides by code and
//! budget whether it is published now (a card), kept for the evening digest, or dropped.
//!
//! Approval fatigue: the same person approved the same capability on targets under one
//! folder or host N times in D days (`[scheduler] fatigue_approvals`, `fatigue_days`) →
//! "You approved writes in ~/Documents/invoices-2026/* 3 times in 7 days. Allow them from
//! now on?" The card is an approval request of the approval service (executor
//! `grant_offer`), so Accept is its territory flow (approve for good: the grant recorded in
//! policy), Reject a rejection, and Never again puts the kind on the telos engine's
//! never-list; the gateway reports the answer to the engine as feedback.
//!
//! Unused grants: a person's grants not used for `[scheduler] stale_grant_days` (90) →
//! "Revoke these 3 grants you no longer use?" (the `stale_grants` task, daily). Its card is
//! an approval request too (executor `grant_revoke`, naming the grants by id): the approval
//! service writes the card from policy's own records, checks they are the person's active
//! grants, and on Accept revokes them.
//!
//! Upkeep (`proposal_upkeep`): a card left unanswered for 48 h is the telos engine's
//! silence; an accepted shortcut offer is kept ([`crate::proactive::shortcuts`]); what the
//! fatigue source noted and old proposals are pruned.

use std::collections::BTreeMap;
use std::sync::Arc;

use metnos_core::capability::Capability;
use metnos_core::level::AutonomyLevel;
use metnos_core::principal::Principal;
use metnos_kit::on_db;
use metnos_kit::store::Db;
use metnos_proto::approval::v1 as approval;
use metnos_proto::vaglio::v1 as vaglio;
use serde_json::json;
use sqlx::Row;

use crate::filters::Filters;
use crate::proactive::scheduler::{Builtin, Done, Firing, Job, JobError};

const DAY_MS: i64 = 86_400_000;

/// The kind of an approval-fatigue proposal, and its executor on the card.
pub const GRANT_OFFER: &str = metnos_core::names::proposals::GRANT_OFFER;

/// How long a proposal's card waits for an answer (then it is silence).
pub const CARD_TTL_SECONDS: u32 = 48 * 3600;

/// What the fatigue source needs of one approved call.
#[derive(Debug, Clone)]
pub struct Approved {
    pub person: Principal,
    pub level: AutonomyLevel,
    pub capability: Capability,
    /// The pattern approving for good would grant (the approval service's proposal).
    pub pattern: String,
    pub target: String,
    pub language: i32,
}

pub use crate::proactive::scheduler::Fatigue;

/// Why a proposal was not made, weighed or followed up (the next run tries again, unless
/// it says otherwise).
#[derive(Debug, thiserror::Error)]
pub enum ProposalError {
    #[error(transparent)]
    Store(#[from] sqlx::Error),
    /// A service answered with this code.
    #[error("{0}: {1:?}")]
    Service(&'static str, tonic::Code),
    #[error("the telos engine: {0}")]
    Telos(String),
    #[error("approval: no card")]
    NoCard,
    /// The vaglio would answer a silence the same way again: the claim stays.
    #[error("vaglio: {0:?} (not asked again)")]
    NotAskedAgain(tonic::Code),
}

impl ProposalError {
    /// What failed, in a word (services' and the store's messages stay out of the log).
    pub(crate) fn cause(&self) -> &'static str {
        match self {
            ProposalError::Store(_) => "the store",
            ProposalError::Service(who, _) => who,
            ProposalError::Telos(_) => "the telos engine",
            ProposalError::NoCard => "approval",
            ProposalError::NotAskedAgain(_) => "vaglio",
        }
    }
}

/// Notes an approved call and, at the N-th under one pattern within D days, offers the
/// grant (once per pattern per D days). Failures are logged: a proposal is never worth a
/// turn's error.
pub async fn after_approval(
    db: Db,
    filters: Arc<dyn Filters>,
    fatigue: Fatigue,
    seen: Approved,
    now_ms: i64,
) {
    if let Err(e) = offer_if_tired(&db, filters.as_ref(), fatigue, &seen, now_ms).await {
        // What failed, in a word: the services' and the store's messages stay out.
        tracing::warn!(cause = e.cause(), "the approval-fatigue source failed");
    }
}

async fn offer_if_tired(
    db: &Db,
    filters: &dyn Filters,
    fatigue: Fatigue,
    seen: &Approved,
    now_ms: i64,
) -> Result<(), ProposalError> {
    if seen.pattern.is_empty() || seen.pattern.len() > MAX_PATTERN {
        // Nothing grantable.
        return Ok(());
    }
    let person = seen.person.to_string();
    let since = now_ms - i64::from(fatigue.days) * 86_400_000;
    let subject = format!("{}|{}", seen.capability, seen.pattern);
    // One id per person, pattern and window-sized bucket: two replicas offering at once
    // write the same row, and the primary key keeps one (PostgreSQL's NOT EXISTS alone would
    // let both through).
    let bucket = now_ms.div_euclid(i64::from(fatigue.days) * 86_400_000);
    let id = {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(format!("{person}\n{subject}\n{bucket}").as_bytes());
        format!("go-{}", &hex::encode(digest)[..16])
    };
    // In the person's language: the telos engine's journal and the digest line show it.
    let description = if seen.language == metnos_core::language::Language::Italian.to_wire() {
        format!(
            "Hai approvato {} in {} {{count}} volte in {} giorni. Le permetto d'ora in poi?",
            seen.capability, seen.pattern, fatigue.days
        )
    } else {
        format!(
            "You approved {} in {} {{count}} times in {} days. Allow them from now on?",
            seen.capability, seen.pattern, fatigue.days
        )
    };
    let count = on_db!(db, pool => {
        let mut tx = pool.begin().await?;
        sqlx::query("INSERT INTO approvals_seen (person, capability, pattern, target, at) VALUES ($1, $2, $3, $4, $5)")
            .bind(&person).bind(seen.capability.name()).bind(&seen.pattern).bind(&seen.target).bind(now_ms)
            .execute(&mut *tx).await?;
        let count: i64 = sqlx::query("SELECT COUNT(*) FROM approvals_seen WHERE person = $1 AND capability = $2 AND pattern = $3 AND at >= $4")
            .bind(&person).bind(seen.capability.name()).bind(&seen.pattern).bind(since)
            .fetch_one(&mut *tx).await?
            .try_get(0)?;
        if count < i64::from(fatigue.approvals) {
            tx.commit().await?;
            return Ok(());
        }
        // Once per pattern per window: the row is the claim (two replicas, two approvals
        // at once: one offer).
        let offered = sqlx::query(
            "INSERT INTO proposals (id, channel, sender_id, kind, subject, description, payload, decision, reason, created_at) \
             SELECT $1, $2, $3, $4, $5, $6, $7, 'pending', '', $8 \
             WHERE NOT EXISTS (SELECT 1 FROM proposals WHERE channel = $2 AND sender_id = $3 AND kind = $4 AND subject = $5 AND created_at >= $9) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&id).bind(seen.person.channel()).bind(seen.person.sender_id()).bind(GRANT_OFFER)
        .bind(&subject).bind(description.replace("{count}", &count.to_string()))
        .bind(json!({"capability": seen.capability, "pattern": seen.pattern, "target": seen.target, "count": count, "days": fatigue.days}).to_string())
        .bind(now_ms).bind(since)
        .execute(&mut *tx).await?;
        tx.commit().await?;
        if offered.rows_affected() != 1 {
            return Ok(());
        }
        count
    });
    let description = description.replace("{count}", &count.to_string());
    let request = Offer {
        person: &seen.person,
        id: &id,
        capability: seen.capability,
        pattern: &seen.pattern,
        target: &seen.target,
        count: u64::try_from(count).unwrap_or_default(),
        days: u64::from(fatigue.days),
        language: seen.language,
    }
    .request();
    let weighed = Weighed {
        person: &seen.person,
        level: Some(seen.level),
        id: &id,
        kind: GRANT_OFFER,
        effect_class: offer_class(seen.capability.name()),
        description,
        confidence: confidence_of(GRANT_OFFER, &json!({ "count": count }).to_string()),
    };
    weighed.settle(db, filters, request, now_ms).await
}

/// The telos engine's effect class of a grant offer of `capability`.
fn offer_class(capability: &str) -> String {
    format!("{GRANT_OFFER}:{}", capability.to_ascii_lowercase())
}

/// How sure a stored proposal of `kind` with `payload` is, from what it rests on
/// ([`crate::proactive::urgency`]): a grant offer's approvals, a shortcut offer's uses, a
/// revocation offer's unused time; 1 for anything else.
pub fn confidence_of(kind: &str, payload: &str) -> f64 {
    use crate::proactive::urgency::{from_evidence, from_unused};
    let payload: serde_json::Value = serde_json::from_str(payload).unwrap_or_default();
    let number = |k: &str| payload.get(k).and_then(serde_json::Value::as_f64);
    match kind {
        GRANT_OFFER => from_evidence(number("count").unwrap_or_default()),
        crate::proactive::shortcuts::SHORTCUT_OFFER => {
            from_evidence(number("uses").unwrap_or_default())
        }
        GRANT_REVOKE => match (number("unused_days"), number("threshold_days")) {
            (Some(unused), Some(threshold)) => from_unused(unused, threshold),
            // An offer stored before these were kept: its threshold, no more.
            _ => from_unused(1.0, 1.0),
        },
        _ => 1.0,
    }
}

/// A stored proposal as the telos engine weighs it: its effect class and confidence from
/// its kind and payload, asked for `person` at `level` (0: none) in the CLI's `session`
/// (empty elsewhere).
pub(crate) struct Queued<'a> {
    pub(crate) person: &'a Principal,
    pub(crate) id: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) description: &'a str,
    pub(crate) payload: &'a str,
    pub(crate) level: i32,
    pub(crate) session: &'a str,
}

impl Queued<'_> {
    pub(crate) fn evaluation(&self, dry_run: bool) -> vaglio::EvaluateProposalRequest {
        vaglio::EvaluateProposalRequest {
            proposal: Some(vaglio::ActionProposal {
                proposal_id: self.id.to_owned(),
                kind: self.kind.to_owned(),
                effect_class: effect_class_of(self.kind, self.payload),
                description: self.description.to_owned(),
                channel: self.person.channel().to_owned(),
                origin: vaglio::ProposalOrigin::Spontaneous as i32,
                schedule_id: String::new(),
                principal: Some(self.person.to_proto()),
                session_id: self.session.to_owned(),
                level: self.level,
            }),
            confidence: Some(confidence_of(self.kind, self.payload)),
            dry_run,
            ..Default::default()
        }
    }
}

/// The effect class of a stored proposal of `kind` with `payload`.
pub fn effect_class_of(kind: &str, payload: &str) -> String {
    match kind {
        GRANT_OFFER => {
            let payload: serde_json::Value = serde_json::from_str(payload).unwrap_or_default();
            offer_class(
                payload
                    .get("capability")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default(),
            )
        }
        GRANT_REVOKE => format!("{GRANT_REVOKE}:unused"),
        crate::proactive::shortcuts::SHORTCUT_OFFER => {
            let payload: serde_json::Value = serde_json::from_str(payload).unwrap_or_default();
            let wanted = payload.get("wanted").and_then(serde_json::Value::as_str);
            crate::proactive::shortcuts::effect_class(wanted.unwrap_or_default())
        }
        other => other.to_owned(),
    }
}

/// A proposal the planner stored (its `proposals` row is the claim), to weigh and settle.
pub(crate) struct Weighed<'a> {
    pub(crate) person: &'a Principal,
    /// Their level (a terminal's is its session's: none here).
    pub(crate) level: Option<AutonomyLevel>,
    pub(crate) id: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) effect_class: String,
    pub(crate) description: String,
    /// How sure the offer is, from what it rests on ([`confidence_of`]).
    pub(crate) confidence: f64,
}

impl Weighed<'_> {
    /// Asks the telos engine; publishes the card (`request`) when it says so, else keeps
    /// the proposal for the digest or drops it; records the outcome on the row.
    pub(crate) async fn settle(
        self,
        db: &Db,
        filters: &dyn Filters,
        request: approval::CreatePendingRequest,
        now_ms: i64,
    ) -> Result<(), ProposalError> {
        let id = self.id.to_owned();
        if self.person.is_terminal() {
            // The terminal has no push channel and no digest: the proposal waits for the
            // person's next session, which weighs it under that session's quota.
            on_db!(db, pool => {
                sqlx::query("UPDATE proposals SET decision = 'session', reason = 'waiting for a terminal session' WHERE id = $1")
                    .bind(&id).execute(pool).await?;
            });
            tracing::info!(proposal = %id, kind = self.kind, "a proposal waits for the person's next terminal session");
            return Ok(());
        }
        let proposal = vaglio::ActionProposal {
            proposal_id: id.clone(),
            kind: self.kind.to_owned(),
            effect_class: self.effect_class,
            description: self.description,
            channel: self.person.channel().to_owned(),
            origin: vaglio::ProposalOrigin::Spontaneous as i32,
            schedule_id: String::new(),
            principal: Some(self.person.to_proto()),
            session_id: String::new(),
            level: self.level.map_or(0, |l| l.to_proto() as i32),
        };
        let result = filters
            .evaluate_proposal(vaglio::EvaluateProposalRequest {
                proposal: Some(proposal),
                confidence: Some(self.confidence),
                ..Default::default()
            })
            .await
            .map_err(|s| ProposalError::Telos(s.message().to_owned()))?;
        if !result.ask_person.is_empty() {
            crate::proactive::ask::deliver(db, filters, self.person, &result.ask_person, now_ms)
                .await;
        }
        let decision = match vaglio::AlignmentDecision::try_from(result.decision) {
            Ok(vaglio::AlignmentDecision::Publish) => "publish",
            Ok(
                vaglio::AlignmentDecision::DeferToDigest | vaglio::AlignmentDecision::DeferToSlot,
            ) => "digest",
            _ => "reject",
        };
        tracing::info!(proposal = %id, kind = self.kind, decision, reason = %result.reason, "a proposal was weighed");
        let mut token = None;
        let mut decision = decision;
        if decision == "publish" {
            match publish(filters, self.person, request).await {
                Ok(sent) => token = Some(sent),
                Err(e) => {
                    // Not lost: the evening digest offers it.
                    tracing::warn!(proposal = %id, cause = e.cause(), "a proposal's card was not shown; it waits for the digest");
                    decision = "digest";
                }
            }
        }
        on_db!(db, pool => {
            sqlx::query("UPDATE proposals SET decision = $2, reason = $3, token = $4, sent_at = $5 WHERE id = $1")
                .bind(&id).bind(decision).bind(&result.reason).bind(&token)
                .bind(token.as_ref().map(|_| now_ms))
                .execute(pool).await?;
        });
        Ok(())
    }
}

/// The most bytes of a pattern offered (a card line shows it whole).
const MAX_PATTERN: usize = 200;

/// A grant offer as an approval request: `capability` on `pattern` (the pattern the approval
/// service computes for `target`, which it checks), for `person`, naming proposal `id`.
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    pub person: &'a Principal,
    pub id: &'a str,
    pub capability: Capability,
    pub pattern: &'a str,
    pub target: &'a str,
    pub count: u64,
    pub days: u64,
    pub language: i32,
}

impl Offer<'_> {
    pub fn request(&self) -> approval::CreatePendingRequest {
        let args = json!({
            "capability": self.capability,
            "pattern": self.pattern,
            "count": self.count,
            "days": self.days,
        });
        approval::CreatePendingRequest {
            requester: Some(self.person.to_proto()),
            request: Some(approval::ApprovalRequest {
                // Required; the approval service says it from the arguments.
                action_verb: GRANT_OFFER.to_owned(),
                target_summary: self.pattern.to_owned(),
                capability_class: format!("{}:{}", self.capability, self.pattern),
                reversibility: approval::Reversibility::Reversible as i32,
                territory_concession: approval::TerritoryConcession::None as i32,
                extra_json: json!({"proposal_id": self.id}).to_string(),
                language: self.language,
                ..Default::default()
            }),
            capability: self.capability.name().to_owned(),
            target: self.target.to_owned(),
            executor: GRANT_OFFER.to_owned(),
            args_json: args.to_string(),
            ttl_seconds: CARD_TTL_SECONDS,
            territory_target: String::new(),
            level: 0,
        }
    }
}

/// Shows a published proposal's card (`request`, an approval request); returns its token.
async fn publish(
    filters: &dyn Filters,
    person: &Principal,
    request: approval::CreatePendingRequest,
) -> Result<String, ProposalError> {
    let created = filters
        .create_pending(request)
        .await
        .map_err(|s| ProposalError::Service("approval", s.code()))?;
    let pending = created.approval.unwrap_or_default();
    let Some(card) = created.card else {
        return Err(ProposalError::NoCard);
    };
    if let Err(status) = filters.show_card(person, &pending.token, card).await {
        let _ = filters
            .cancel(&pending.token, "the offer's card could not be shown")
            .await;
        return Err(ProposalError::Service("gateway", status.code()));
    }
    Ok(pending.token)
}

/// The kind of an unused-grants proposal, and its executor on the card.
pub const GRANT_REVOKE: &str = metnos_core::names::proposals::GRANT_REVOKE;

/// The most grants one revocation offer names (the approval service's limit too: four fit
/// its card whole).
pub const MAX_REVOKED: usize = 4;

/// A person who answered (or ignored) a revocation offer is not asked again for this long.
const REASK_DAYS: i64 = 30;

/// Proposals older than this are forgotten (the telos engine's journal keeps its own).
const KEEP_PROPOSALS_DAYS: i64 = 90;

/// A revocation offer as an approval request: revoke `grants` (ids) of `person`'s. The
/// approval service writes the card from policy's records and checks they are theirs.
#[derive(Debug, Clone, Copy)]
pub struct Revoke<'a> {
    pub person: &'a Principal,
    pub id: &'a str,
    pub grants: &'a [i64],
    pub language: i32,
}

impl Revoke<'_> {
    pub fn request(&self) -> approval::CreatePendingRequest {
        let summary = format!("{} grant(s)", self.grants.len());
        let args = json!({"grants": self.grants});
        plain_request(
            self.person,
            self.id,
            GRANT_REVOKE,
            &summary,
            &args,
            self.language,
        )
    }
}

/// A proposal's approval request that names no capability and no target (a revocation
/// offer, a shortcut offer): `kind` is its executor, `args` what Accept binds; the card's
/// words are the approval service's, from the arguments (`summary` is only required).
pub(crate) fn plain_request(
    person: &Principal,
    id: &str,
    kind: &str,
    summary: &str,
    args: &serde_json::Value,
    language: i32,
) -> approval::CreatePendingRequest {
    approval::CreatePendingRequest {
        requester: Some(person.to_proto()),
        request: Some(approval::ApprovalRequest {
            action_verb: kind.to_owned(),
            target_summary: summary.to_owned(),
            capability_class: kind.to_owned(),
            reversibility: approval::Reversibility::Reversible as i32,
            territory_concession: approval::TerritoryConcession::None as i32,
            extra_json: json!({"proposal_id": id}).to_string(),
            language,
            ..Default::default()
        }),
        capability: String::new(),
        target: String::new(),
        executor: kind.to_owned(),
        args_json: args.to_string(),
        ttl_seconds: CARD_TTL_SECONDS,
        territory_target: String::new(),
        level: 0,
    }
}

/// A queued proposal's card (from its stored kind and payload) and the callback its
/// Accept button sends; `None` for a kind without a card.
pub fn queued_request(
    person: &Principal,
    id: &str,
    kind: &str,
    payload: &str,
    language: metnos_core::language::Language,
) -> Option<(approval::CreatePendingRequest, &'static str)> {
    let language = language.to_wire();
    let payload: serde_json::Value = serde_json::from_str(payload).ok()?;
    let text = |k: &str| {
        payload
            .get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
    };
    match kind {
        GRANT_OFFER => {
            let request = Offer {
                person,
                id,
                capability: text("capability").parse().ok()?,
                pattern: text("pattern"),
                target: text("target"),
                count: payload
                    .get("count")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or_default(),
                days: payload
                    .get("days")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(7),
                language,
            }
            .request();
            Some((request, "confirm-always"))
        }
        GRANT_REVOKE => {
            let grants: Vec<i64> = payload
                .get("grants")?
                .as_array()?
                .iter()
                .filter_map(serde_json::Value::as_i64)
                .collect();
            let request = Revoke {
                person,
                id,
                grants: &grants,
                language,
            }
            .request();
            Some((request, "approve"))
        }
        crate::proactive::shortcuts::SHORTCUT_OFFER => {
            let request =
                crate::proactive::shortcuts::ShortcutOffer::queued(person, id, &payload, language)?;
            Some((request, "approve"))
        }
        _ => None,
    }
}

/// `stale_grants`: offers each person to revoke the grants they have not used for
/// `unused_days` (never-used ones count from when they were granted); at most one offer per
/// person in 30 days, never twice the same grants. Grants that expire on their own (a
/// session's) are left to expire.
#[derive(Debug)]
pub struct StaleGrants {
    pub db: Db,
    pub filters: Arc<dyn Filters>,
    pub unused_days: u32,
    /// `[scheduler] enabled`: off, no proposal is made.
    pub enabled: bool,
}

/// When it runs.
impl Builtin for StaleGrants {
    const NAME: &'static str = "stale_grants";
    const SCHEDULE: &'static str = "daily@11:00";
}

#[tonic::async_trait]
impl Job for StaleGrants {
    async fn run(&self, firing: &Firing) -> Result<Done, JobError> {
        if !self.enabled {
            return Ok("proposals are off ([scheduler] enabled = false)"
                .to_owned()
                .into());
        }
        let now = firing.now_ms;
        let cutoff = now - i64::from(self.unused_days) * DAY_MS;
        let grants = self
            .filters
            .list_grants()
            .await
            .map_err(|s| ProposalError::Service("policy", s.code()))?;
        let ms = |t: &Option<prost_types::Timestamp>| {
            t.as_ref().and_then(metnos_kit::time::from_timestamp)
        };
        let mut stale: BTreeMap<Principal, Vec<(i64, i64, String)>> = BTreeMap::new();
        for grant in grants {
            let Some(person) = grant
                .principal
                .as_ref()
                .and_then(|p| Principal::try_from(p).ok())
            else {
                continue;
            };
            if grant.revoked_at.is_some() || grant.expires_at.is_some() {
                continue;
            }
            let last = ms(&grant.last_used_at)
                .or(ms(&grant.granted_at))
                .unwrap_or(now);
            if last < cutoff {
                let shown = format!("{} {}", grant.capability, short(&grant.target, 60));
                stale
                    .entry(person)
                    .or_default()
                    .push((last, grant.id, shown));
            }
        }
        let mut offered = 0;
        for (person, mut grants) in stale {
            grants.sort();
            grants.truncate(MAX_REVOKED);
            match self.offer(&person, &grants, now).await {
                Ok(true) => offered += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(person = %person, cause = e.cause(), "an unused-grants offer failed");
                }
            }
        }
        Ok(format!("{offered} revocation offer(s) made").into())
    }
}

impl StaleGrants {
    /// Stores and weighs one person's offer; `false` when they were asked lately, asked
    /// about these grants already, or are not paired.
    async fn offer(
        &self,
        person: &Principal,
        grants: &[(i64, i64, String)],
        now: i64,
    ) -> Result<bool, ProposalError> {
        // A terminal's person has no pairing: their level is their session's.
        let level = if person.is_terminal() {
            None
        } else {
            match self
                .filters
                .pairing_level(person)
                .await
                .map_err(|s| ProposalError::Service("gateway", s.code()))?
            {
                Some(level) => Some(level),
                None => return Ok(false),
            }
        };
        let mut ids: Vec<i64> = grants.iter().map(|(_, id, _)| *id).collect();
        ids.sort_unstable();
        let subject = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        // Never the id of an earlier offer (the telos engine keeps its answer for good): the
        // same grants again only once their first offer was forgotten, 90 days on — in a
        // later 90-day bucket.
        let bucket = now.div_euclid(KEEP_PROPOSALS_DAYS * DAY_MS);
        let id = {
            use sha2::{Digest, Sha256};
            let digest = Sha256::digest(format!("{person}\n{subject}\n{bucket}").as_bytes());
            format!("sg-{}", &hex::encode(digest)[..16])
        };
        let listed: Vec<&str> = grants.iter().map(|(_, _, shown)| shown.as_str()).collect();
        let language = self.filters.pairing_language(person).await;
        let description = if language == metnos_core::language::Language::Italian {
            format!(
                "Revoco {} permessi che non usi da {} giorni? {}",
                ids.len(),
                self.unused_days,
                listed.join("; ")
            )
        } else {
            format!(
                "Revoke {} grant(s) you have not used for {} days? {}",
                ids.len(),
                self.unused_days,
                listed.join("; ")
            )
        };
        // Its least-unused grant decides how sure the offer is.
        let unused_ms = grants
            .iter()
            .map(|(last, _, _)| now - last)
            .min()
            .unwrap_or(0);
        let payload = json!({
            "grants": ids,
            "unused_days": unused_ms / DAY_MS,
            "threshold_days": self.unused_days,
        });
        let stored = on_db!(&self.db, pool => {
            sqlx::query(
                "INSERT INTO proposals (id, channel, sender_id, kind, subject, description, payload, decision, reason, created_at) \
                 SELECT $1, $2, $3, $4, $5, $6, $7, 'pending', '', $8 \
                 WHERE NOT EXISTS (SELECT 1 FROM proposals WHERE channel = $2 AND sender_id = $3 AND kind = $4 AND (created_at >= $9 OR subject = $5)) \
                 ON CONFLICT (id) DO NOTHING",
            )
            .bind(&id).bind(person.channel()).bind(person.sender_id()).bind(GRANT_REVOKE)
            .bind(&subject).bind(&description)
            .bind(payload.to_string())
            .bind(now).bind(now - REASK_DAYS * DAY_MS)
            .execute(pool).await?
            .rows_affected() == 1
        });
        if !stored {
            return Ok(false);
        }
        let request = Revoke {
            person,
            id: &id,
            grants: &ids,
            language: language.to_wire(),
        }
        .request();
        Weighed {
            person,
            level,
            id: &id,
            kind: GRANT_REVOKE,
            effect_class: effect_class_of(GRANT_REVOKE, ""),
            description,
            confidence: confidence_of(GRANT_REVOKE, &payload.to_string()),
        }
        .settle(&self.db, self.filters.as_ref(), request, now)
        .await?;
        Ok(true)
    }
}

/// `proposal_upkeep`: a proposal's card unanswered when it expired (48 h) is said to the
/// telos engine as silence, once; approvals the fatigue source no longer counts and
/// proposals older than 90 days are deleted (with the targets they held).
#[derive(Debug)]
pub struct ProposalUpkeep {
    pub db: Db,
    pub filters: Arc<dyn Filters>,
    pub fatigue_days: u32,
}

impl Builtin for ProposalUpkeep {
    const NAME: &'static str = "proposal_upkeep";
    const SCHEDULE: &'static str = "every 30 minutes";
}

#[tonic::async_trait]
impl Job for ProposalUpkeep {
    async fn run(&self, firing: &Firing) -> Result<Done, JobError> {
        let now = firing.now_ms;
        let due: Vec<(String, String, String, String)> = on_db!(&self.db, pool => {
            let rows = sqlx::query(
                "SELECT id, channel, sender_id, token FROM proposals WHERE token IS NOT NULL \
                 AND followed_up_at IS NULL AND sent_at <= $1 ORDER BY sent_at LIMIT 100",
            )
            .bind(now - i64::from(CARD_TTL_SECONDS) * 1000)
            .fetch_all(pool).await?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
                .collect::<Result<_, sqlx::Error>>()?
        });
        let mut silences = 0;
        for (id, channel, sender_id, token) in due {
            let Ok(person) = Principal::new(&channel, &sender_id) else {
                // Nobody to follow up with (a row edited by hand): marked, so it never
                // comes back ahead of the others.
                tracing::warn!(proposal = %id, "a proposal's person is not a principal; its silence is not followed up");
                on_db!(&self.db, pool => {
                    sqlx::query("UPDATE proposals SET followed_up_at = $2 WHERE id = $1 AND followed_up_at IS NULL")
                        .bind(&id).bind(now).execute(pool).await?;
                });
                continue;
            };
            match self.follow_up(&id, &person, &token, now).await {
                Ok(true) => silences += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(proposal = %id, cause = e.cause(), "a proposal's silence was not recorded; the next run tries again");
                }
            }
        }
        // Accepted shortcut offers are kept (a failure waits for the next run).
        let shortcuts =
            match crate::proactive::shortcuts::keep_accepted(&self.db, self.filters.as_ref(), now)
                .await
            {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(
                        cause = e.cause(),
                        "accepted shortcut offers were not looked at; the next run tries again"
                    );
                    0
                }
            };
        // Questions the gateway did not take yet (a failure waits for the next run).
        let retold = crate::proactive::ask::retell(&self.db, self.filters.as_ref(), now)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "the TELOS.md questions to tell again were not read");
                0
            });
        let seen_before = now - i64::from(self.fatigue_days) * DAY_MS;
        let proposals_before = now - KEEP_PROPOSALS_DAYS * DAY_MS;
        let (seen, proposals) = on_db!(&self.db, pool => {
            let seen = sqlx::query("DELETE FROM approvals_seen WHERE at < $1")
                .bind(seen_before).execute(pool).await?.rows_affected();
            // A once-only question waiting for a terminal session is kept: it is asked once
            // (one the gateway never took, e.g. for someone unpaired since, is not).
            let proposals = sqlx::query("DELETE FROM proposals WHERE created_at < $1 \
                 AND NOT (kind = $2 AND decision = 'session')")
                .bind(proposals_before).bind(crate::proactive::ask::KIND)
                .execute(pool).await?.rows_affected();
            sqlx::query("DELETE FROM digests WHERE slot_at < $1")
                .bind(proposals_before).execute(pool).await?;
            (seen, proposals)
        });
        Ok(format!(
            "{silences} silence(s) recorded; {shortcuts} shortcut(s) kept; {retold} TELOS.md question(s) told; {seen} approval note(s) and {proposals} proposal(s) pruned"
        )
        .into())
    }
}

impl ProposalUpkeep {
    /// Follows one sent card up: `true` when it went unanswered and the engine was told.
    async fn follow_up(
        &self,
        id: &str,
        person: &Principal,
        token: &str,
        now: i64,
    ) -> Result<bool, ProposalError> {
        let silent = match self.filters.get_pending(token).await {
            Ok(pending) => match approval::ApprovalStatus::try_from(pending.status) {
                // Expired by the approval service's own clock: nobody can answer it now.
                Ok(approval::ApprovalStatus::Expired) => true,
                // Still open (not swept yet, or a clock apart): the next run looks again.
                Ok(approval::ApprovalStatus::Pending) => return Ok(false),
                // Answered (the gateway told the engine) or withdrawn.
                _ => false,
            },
            Err(status) if status.code() == tonic::Code::NotFound => false,
            Err(status) => return Err(ProposalError::Service("approval", status.code())),
        };
        // The claim: one replica says it, once.
        let claimed = on_db!(&self.db, pool => {
            sqlx::query("UPDATE proposals SET followed_up_at = $2 WHERE id = $1 AND followed_up_at IS NULL")
                .bind(id).bind(now).execute(pool).await?
                .rows_affected() == 1
        });
        if !claimed || !silent {
            return Ok(false);
        }
        if let Err(status) = self.filters.record_silence(id, person).await {
            if matches!(
                status.code(),
                tonic::Code::FailedPrecondition
                    | tonic::Code::NotFound
                    | tonic::Code::PermissionDenied
                    | tonic::Code::InvalidArgument
            ) {
                // Answered already, unknown to the engine or refused: asking again would get
                // the same answer; the claim stays.
                return Err(ProposalError::NotAskedAgain(status.code()));
            }
            on_db!(&self.db, pool => {
                let _ = sqlx::query("UPDATE proposals SET followed_up_at = NULL WHERE id = $1")
                    .bind(id).execute(pool).await;
            });
            return Err(ProposalError::Service("vaglio", status.code()));
        }
        Ok(true)
    }
}

/// `text` shortened to `max` characters (an ellipsis in the middle).
fn short(text: &str, max: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= max {
        return text.to_owned();
    }
    let head: String = chars[..max / 2].iter().collect();
    let tail: String = chars[chars.len() - (max - max / 2 - 1)..].iter().collect();
    format!("{head}…{tail}")
}
