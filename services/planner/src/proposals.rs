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

use std::sync::Arc;

use metnos_core::level::AutonomyLevel;
use metnos_core::principal::Principal;
use metnos_kit::on_db;
use metnos_kit::store::Db;
use metnos_proto::approval::v1 as approval;
use metnos_proto::vaglio::v1 as vaglio;
use serde_json::json;
use sqlx::Row;

use crate::filters::Filters;

/// The kind of an approval-fatigue proposal, and its executor on the card.
pub const GRANT_OFFER: &str = "grant_offer";

/// How long a proposal's card waits for an answer (then it is silence).
pub const CARD_TTL_SECONDS: u32 = 48 * 3600;

/// What the fatigue source needs of one approved call.
#[derive(Debug, Clone)]
pub struct Approved {
    pub person: Principal,
    pub level: AutonomyLevel,
    pub capability: String,
    /// The pattern approving for good would grant (the approval service's proposal).
    pub pattern: String,
    pub target: String,
    pub language: i32,
}

/// The approval-fatigue settings: approvals, days.
#[derive(Debug, Clone, Copy)]
pub struct Fatigue {
    pub approvals: u32,
    pub days: u32,
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
        tracing::warn!(
            cause = e.split(':').next().unwrap_or_default(),
            "the approval-fatigue source failed"
        );
    }
}

async fn offer_if_tired(
    db: &Db,
    filters: &dyn Filters,
    fatigue: Fatigue,
    seen: &Approved,
    now_ms: i64,
) -> Result<(), String> {
    if seen.pattern.is_empty() || seen.pattern.len() > MAX_PATTERN || seen.person.channel == "cli" {
        // Nothing grantable; the terminal has no card to push (its proposals are issue 22's
        // follow-up).
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
    let description = format!(
        "You approved {} in {} {{count}} times in {} days. Allow them from now on?",
        seen.capability, seen.pattern, fatigue.days
    );
    let count = on_db!(db, pool => {
        let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
        sqlx::query("INSERT INTO approvals_seen (person, capability, pattern, target, at) VALUES ($1, $2, $3, $4, $5)")
            .bind(&person).bind(&seen.capability).bind(&seen.pattern).bind(&seen.target).bind(now_ms)
            .execute(&mut *tx).await.map_err(|e| e.to_string())?;
        let count: i64 = sqlx::query("SELECT COUNT(*) FROM approvals_seen WHERE person = $1 AND capability = $2 AND pattern = $3 AND at >= $4")
            .bind(&person).bind(&seen.capability).bind(&seen.pattern).bind(since)
            .fetch_one(&mut *tx).await.map_err(|e| e.to_string())?
            .try_get(0).map_err(|e| e.to_string())?;
        if count < i64::from(fatigue.approvals) {
            tx.commit().await.map_err(|e| e.to_string())?;
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
        .bind(&id).bind(&seen.person.channel).bind(&seen.person.sender_id).bind(GRANT_OFFER)
        .bind(&subject).bind(description.replace("{count}", &count.to_string()))
        .bind(json!({"capability": seen.capability, "pattern": seen.pattern, "target": seen.target, "count": count, "days": fatigue.days}).to_string())
        .bind(now_ms).bind(since)
        .execute(&mut *tx).await.map_err(|e| e.to_string())?;
        tx.commit().await.map_err(|e| e.to_string())?;
        if offered.rows_affected() != 1 {
            return Ok(());
        }
        count
    });
    let description = description.replace("{count}", &count.to_string());
    let proposal = vaglio::ActionProposal {
        proposal_id: id.clone(),
        kind: GRANT_OFFER.to_owned(),
        effect_class: format!("{GRANT_OFFER}:{}", seen.capability.to_ascii_lowercase()),
        description: description.clone(),
        channel: seen.person.channel.clone(),
        origin: vaglio::ProposalOrigin::Spontaneous as i32,
        schedule_id: String::new(),
        principal: Some(seen.person.to_proto()),
        session_id: String::new(),
        level: seen.level.to_proto() as i32,
    };
    let result = filters
        .evaluate_proposal(vaglio::EvaluateProposalRequest {
            proposal: Some(proposal),
            ..Default::default()
        })
        .await
        .map_err(|s| format!("the telos engine: {}", s.message()))?;
    let decision = match vaglio::AlignmentDecision::try_from(result.decision) {
        Ok(vaglio::AlignmentDecision::Publish) => "publish",
        Ok(vaglio::AlignmentDecision::DeferToDigest | vaglio::AlignmentDecision::DeferToSlot) => {
            "digest"
        }
        _ => "reject",
    };
    tracing::info!(proposal = %id, decision, reason = %result.reason, "a grant offer was weighed");
    let mut token = None;
    let mut decision = decision;
    if decision == "publish" {
        match publish(filters, seen, &id, count, fatigue).await {
            Ok(sent) => token = Some(sent),
            Err(e) => {
                // Not lost: the evening digest offers it.
                tracing::warn!(proposal = %id, cause = e.split(':').next().unwrap_or_default(), "a grant offer's card was not shown; it waits for the digest");
                decision = "digest";
            }
        }
    }
    on_db!(db, pool => {
        sqlx::query("UPDATE proposals SET decision = $2, reason = $3, token = $4, sent_at = $5 WHERE id = $1")
            .bind(&id).bind(decision).bind(&result.reason).bind(&token)
            .bind(token.as_ref().map(|_| now_ms))
            .execute(pool).await.map_err(|e| e.to_string())?;
    });
    Ok(())
}

/// The most bytes of a pattern offered (a card line shows it whole).
const MAX_PATTERN: usize = 200;

/// A grant offer as an approval request: `capability` on `pattern` (the pattern the approval
/// service computes for `target`, which it checks), for `person`, naming proposal `id`.
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    pub person: &'a Principal,
    pub id: &'a str,
    pub capability: &'a str,
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
            capability: self.capability.to_owned(),
            target: self.target.to_owned(),
            executor: GRANT_OFFER.to_owned(),
            args_json: args.to_string(),
            ttl_seconds: CARD_TTL_SECONDS,
            territory_target: String::new(),
            level: 0,
        }
    }
}

/// Shows a published grant offer's card; returns its approval token.
async fn publish(
    filters: &dyn Filters,
    seen: &Approved,
    id: &str,
    count: i64,
    fatigue: Fatigue,
) -> Result<String, String> {
    let request = Offer {
        person: &seen.person,
        id,
        capability: &seen.capability,
        pattern: &seen.pattern,
        target: &seen.target,
        count: u64::try_from(count).unwrap_or_default(),
        days: u64::from(fatigue.days),
        language: seen.language,
    }
    .request();
    let created = filters
        .create_pending(request)
        .await
        .map_err(|s| format!("approval: {:?}", s.code()))?;
    let pending = created.approval.unwrap_or_default();
    let Some(card) = created.card else {
        return Err("approval: no card".to_owned());
    };
    if let Err(status) = filters.show_card(&seen.person, &pending.token, card).await {
        let _ = filters
            .cancel(&pending.token, "the offer's card could not be shown")
            .await;
        return Err(format!("gateway: {:?}", status.code()));
    }
    Ok(pending.token)
}
