//! A terminal session's proposals (issue 22). The terminal has no push channel and no
//! evening digest, so what the planner proposes to a `cli` person waits (decision
//! `session`) until they open `metnos chat`: then each, oldest first, is weighed by the
//! vaglio's telos engine under the session's quota (two per session); a published one
//! becomes an approval request whose card the terminal shows; once the quota is spent the
//! rest wait for a later session (the engine keeps nothing of that deferral). Cards a
//! person left for later come back at their next session while they are still pending.

use metnos_core::language::Language;
use metnos_core::principal::Principal;
use metnos_kit::on_db;
use metnos_kit::store::Db;
use metnos_proto::approval::v1 as approval;
use metnos_proto::planner::v1 as pb;
use metnos_proto::vaglio::v1 as vaglio;
use sqlx::Row;

use crate::proactive::proposals::queued_request;

/// What a terminal session's proposals need of the planner.
#[derive(Debug, Clone)]
pub struct Sessions {
    pub db: metnos_kit::store::Db,
    pub filters: std::sync::Arc<dyn crate::filters::Filters>,
    /// The terminal's level: what its cards are asked at.
    pub cli_level: metnos_core::level::AutonomyLevel,
}

/// The most waiting proposals one session weighs (the engine publishes two of them).
const MAX_WEIGHED: i64 = 10;

/// The most cards left for later that one session shows again.
const MAX_AGAIN: usize = 4;

/// A proposal waits this long for a session; older, it is dropped (what it said may no
/// longer hold).
const WAIT_DAYS: i64 = 30;

const DAY_MS: i64 = 86_400_000;

/// Whether `id` is a session id the telos engine takes: 8 to 128 ASCII letters, digits or
/// `_ . : -`.
pub fn valid_session_id(id: &str) -> bool {
    (8..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// Why a session's proposals could not be weighed; [`SessionError::cause`] names it in a
/// word, without the services' or the store's messages.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("the store: {0}")]
    Store(#[from] sqlx::Error),
    #[error("policy: {0:?}")]
    Policy(tonic::Code),
    #[error("the telos engine: {0:?}")]
    Telos(tonic::Code),
}

impl SessionError {
    /// What failed, in a word or two.
    pub fn cause(&self) -> &'static str {
        match self {
            SessionError::Store(_) => "the store",
            SessionError::Policy(_) => "policy",
            SessionError::Telos(_) => "the telos engine",
        }
    }
}

/// A proposal waiting for a session, as stored.
struct Waiting {
    id: String,
    kind: String,
    description: String,
    payload: String,
    created_at: i64,
}

/// What became of one waiting proposal.
enum Weighed {
    Shown(Box<pb::SessionProposal>),
    /// Settled (dropped, rejected, shown elsewhere): the next one.
    Next,
    /// Not now (the session's quota, the engine out of reach): the rest wait.
    Stop,
}

/// What `person`'s new session `session` shows: the notes (the once-only question asking
/// for a TELOS.md), then the proposals — cards left for later first, then those the telos
/// engine publishes now.
pub async fn open(
    sessions: &Sessions,
    person: &Principal,
    session: &str,
    language: Language,
) -> Result<(Vec<String>, Vec<pb::SessionProposal>), SessionError> {
    let now = metnos_kit::time::now_ms();
    let mut shown = again(sessions, person, now).await?;
    // Policy's grants, once, for revocation offers: one that names a grant used (or gone)
    // since it was made no longer holds.
    let mut grants: Option<Vec<metnos_proto::policy::v1::Grant>> = None;
    for waiting in waiting(&sessions.db, person, now).await? {
        if waiting.kind == crate::proactive::proposals::GRANT_REVOKE {
            if grants.is_none() {
                let listed = sessions.filters.list_grants().await;
                grants = Some(listed.map_err(|s| SessionError::Policy(s.code()))?);
            }
            let grants = grants.as_deref().unwrap_or_default();
            if !still_unused(grants, &waiting.payload, waiting.created_at) {
                let why = "a grant was used or revoked since";
                settle(sessions, &waiting.id, "dropped", why, None).await?;
                continue;
            }
        }
        match weigh(sessions, person, session, language, waiting).await? {
            Weighed::Shown(proposal) => shown.push(*proposal),
            Weighed::Next => {}
            Weighed::Stop => break,
        }
    }
    let notes = crate::proactive::ask::waiting_notes(&sessions.db, person, language).await?;
    Ok((notes, shown))
}

/// The proposals waiting for `person`'s session, oldest first; those that waited too long
/// are dropped.
async fn waiting(db: &Db, person: &Principal, now: i64) -> Result<Vec<Waiting>, sqlx::Error> {
    on_db!(db, pool => {
        sqlx::query(
            "UPDATE proposals SET decision = 'dropped', reason = 'waited too long for a session' \
             WHERE channel = $1 AND sender_id = $2 AND decision = 'session' AND created_at < $3 AND kind <> $4",
        )
        .bind(person.channel()).bind(person.sender_id()).bind(now - WAIT_DAYS * DAY_MS)
        // The once-only question waits as long as it takes: it is asked once.
        .bind(crate::proactive::ask::KIND)
        .execute(pool).await?;
        let rows = sqlx::query(
            "SELECT id, kind, description, payload, created_at FROM proposals WHERE channel = $1 AND sender_id = $2 \
             AND decision = 'session' AND kind <> $4 ORDER BY created_at, id LIMIT $3",
        )
        .bind(person.channel()).bind(person.sender_id()).bind(MAX_WEIGHED).bind(crate::proactive::ask::KIND)
        .fetch_all(pool).await?;
        rows.iter()
            .map(|r| Ok(Waiting {
                id: r.try_get(0)?,
                kind: r.try_get(1)?,
                description: r.try_get(2)?,
                payload: r.try_get(3)?,
                created_at: r.try_get(4)?,
            }))
            .collect::<Result<Vec<_>, sqlx::Error>>()
    })
}

/// One waiting proposal through the telos engine and, published, onto a card.
async fn weigh(
    sessions: &Sessions,
    person: &Principal,
    session: &str,
    language: Language,
    waiting: Waiting,
) -> Result<Weighed, SessionError> {
    let Waiting {
        id,
        kind,
        description,
        payload,
        ..
    } = waiting;
    let Some((request, accept)) = queued_request(person, &id, &kind, &payload, language) else {
        settle(sessions, &id, "dropped", "no card for this kind", None).await?;
        return Ok(Weighed::Next);
    };
    let asked = crate::proactive::proposals::Queued {
        person,
        id: &id,
        kind: &kind,
        description: &description,
        payload: &payload,
        level: sessions.cli_level.to_proto() as i32,
        session,
    }
    .evaluation(false);
    let result = match sessions.filters.evaluate_proposal(asked).await {
        Ok(result) => result,
        Err(status)
            if matches!(
                status.code(),
                tonic::Code::InvalidArgument
                    | tonic::Code::AlreadyExists
                    | tonic::Code::FailedPrecondition
            ) =>
        {
            // The engine will never take this one: it must not hold the others back.
            tracing::warn!(proposal = %id, code = ?status.code(), "the telos engine refuses a waiting proposal; dropped");
            settle(
                sessions,
                &id,
                "dropped",
                "refused by the telos engine",
                None,
            )
            .await?;
            return Ok(Weighed::Next);
        }
        Err(status) => return Err(SessionError::Telos(status.code())),
    };
    if !result.ask_person.is_empty() {
        let (db, filters) = (&sessions.db, sessions.filters.as_ref());
        let now = metnos_kit::time::now_ms();
        crate::proactive::ask::deliver(db, filters, person, &result.ask_person, now).await;
    }
    match vaglio::AlignmentDecision::try_from(result.decision) {
        Ok(vaglio::AlignmentDecision::Publish) => {}
        // The session's quota is spent (or the moment is wrong): a later session.
        Ok(vaglio::AlignmentDecision::DeferToSlot | vaglio::AlignmentDecision::DeferToDigest) => {
            return Ok(Weighed::Stop);
        }
        _ => {
            settle(sessions, &id, "reject", &result.reason, None).await?;
            return Ok(Weighed::Next);
        }
    }
    match sessions.filters.create_pending(request).await {
        Ok(created) => {
            let pending = created.approval.unwrap_or_default();
            let token = Some(pending.token.as_str());
            if !settle(sessions, &id, "publish", &result.reason, token).await? {
                // Another terminal of theirs opened at the same moment and showed it.
                let _ = sessions
                    .filters
                    .cancel(&pending.token, "shown in another session")
                    .await;
                return Ok(Weighed::Next);
            }
            Ok(Weighed::Shown(Box::new(pb::SessionProposal {
                proposal_id: id,
                approval: Some(pending),
                card: created.card,
                accept_for_good: accept == "confirm-always",
            })))
        }
        Err(status)
            if matches!(
                status.code(),
                tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
            ) =>
        {
            // It no longer holds (a grant revoked since it was made).
            tracing::info!(proposal = %id, code = ?status.code(), "a waiting proposal no longer holds; dropped");
            settle(sessions, &id, "dropped", "no longer holds", None).await?;
            Ok(Weighed::Next)
        }
        Err(status) => {
            // The engine answers this id the same next time (published, no second place
            // taken): the next session tries again.
            tracing::warn!(proposal = %id, code = ?status.code(), "a session's proposal could not be made a card");
            Ok(Weighed::Stop)
        }
    }
}

/// Whether every grant a revocation offer (`payload`, made at `made_at`) names is still
/// active in `grants` and unused since.
fn still_unused(grants: &[metnos_proto::policy::v1::Grant], payload: &str, made_at: i64) -> bool {
    let payload: serde_json::Value = serde_json::from_str(payload).unwrap_or_default();
    let Some(ids) = payload.get("grants").and_then(serde_json::Value::as_array) else {
        return false;
    };
    ids.iter().all(|id| {
        grants.iter().any(|g| {
            Some(g.id) == id.as_i64()
                && g.revoked_at.is_none()
                && g.last_used_at
                    .as_ref()
                    .and_then(metnos_kit::time::from_timestamp)
                    .is_none_or(|used| used < made_at)
        })
    })
}

/// Cards published to `person` in an earlier session, still pending and not expired.
async fn again(
    sessions: &Sessions,
    person: &Principal,
    now: i64,
) -> Result<Vec<pb::SessionProposal>, sqlx::Error> {
    let db = &sessions.db;
    // Those sent within a card's life (older ones have expired); answered ones are left out
    // below, so the query reads past them.
    let since = now - i64::from(crate::proactive::proposals::CARD_TTL_SECONDS) * 1000;
    let published: Vec<(String, String, String, String)> = on_db!(db, pool => {
        let rows = sqlx::query(
            "SELECT id, kind, description, token FROM proposals WHERE channel = $1 AND sender_id = $2 \
             AND decision = 'publish' AND token IS NOT NULL AND followed_up_at IS NULL AND sent_at > $3 \
             ORDER BY sent_at, id LIMIT 50",
        )
        .bind(person.channel()).bind(person.sender_id()).bind(since)
        .fetch_all(pool).await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
            .collect::<Result<_, sqlx::Error>>()?
    });
    let mut shown = Vec::new();
    for (id, kind, description, token) in published {
        if shown.len() >= MAX_AGAIN {
            break;
        }
        let Ok(pending) = sessions.filters.get_pending(&token).await else {
            continue;
        };
        let expired = pending
            .expires_at
            .as_ref()
            .and_then(metnos_kit::time::from_timestamp)
            .is_some_and(|at| at <= now);
        let requester = pending
            .requester
            .as_ref()
            .and_then(|p| Principal::try_from(p).ok());
        if expired
            || pending.status != approval::ApprovalStatus::Pending as i32
            || requester.as_ref() != Some(person)
        {
            continue;
        }
        // The approval service's card is made once; the description the planner wrote for
        // it stands in (the same words the digest shows).
        let card = approval::Card {
            lines: vec![metnos_core::html::one_visible_line(&description, 300)],
            ..Default::default()
        };
        shown.push(pb::SessionProposal {
            proposal_id: id,
            approval: Some(pending),
            card: Some(card),
            accept_for_good: kind == crate::proactive::proposals::GRANT_OFFER,
        });
    }
    Ok(shown)
}

/// Records what became of waiting proposal `id`; `false` when it was not waiting any more
/// (another session of theirs settled it).
async fn settle(
    sessions: &Sessions,
    id: &str,
    decision: &str,
    reason: &str,
    token: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let now = metnos_kit::time::now_ms();
    let updated = on_db!(&sessions.db, pool => {
        sqlx::query("UPDATE proposals SET decision = $2, reason = $3, token = $4, sent_at = $5 WHERE id = $1 AND decision = 'session'")
            .bind(id).bind(decision).bind(reason).bind(token).bind(token.map(|_| now))
            .execute(pool).await?
            .rows_affected()
    });
    Ok(updated == 1)
}

#[cfg(test)]
mod tests {
    use super::{still_unused, valid_session_id};
    use metnos_proto::policy::v1::Grant;

    #[test]
    fn a_revocation_offer_holds_while_its_grants_are_active_and_unused_since() {
        let at = |ms: i64| Some(metnos_kit::time::to_timestamp(ms));
        let grants = [
            Grant {
                id: 1,
                last_used_at: at(1_000),
                ..Default::default()
            },
            Grant {
                id: 2,
                ..Default::default()
            },
            Grant {
                id: 3,
                last_used_at: at(9_000),
                ..Default::default()
            },
            Grant {
                id: 4,
                revoked_at: at(2_000),
                ..Default::default()
            },
        ];
        let offer = |ids: &str| format!("{{\"grants\":{ids}}}");
        assert!(still_unused(&grants, &offer("[1,2]"), 5_000));
        assert!(
            !still_unused(&grants, &offer("[1,3]"), 5_000),
            "3 was used since"
        );
        assert!(
            !still_unused(&grants, &offer("[4]"), 5_000),
            "4 was revoked"
        );
        assert!(!still_unused(&grants, &offer("[7]"), 5_000), "7 is gone");
        assert!(!still_unused(&grants, "not json", 5_000));
    }

    #[test]
    fn a_session_id_is_eight_to_128_plain_ascii_characters() {
        assert!(valid_session_id("0123456789abcdef"));
        assert!(valid_session_id("cli-2026.11.26:a_b"));
        assert!(!valid_session_id("short"));
        assert!(!valid_session_id(&"a".repeat(129)));
        assert!(!valid_session_id("spaces are not ok"));
        assert!(!valid_session_id("sessione-è-lunga"));
    }
}
