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
use metnos_proto::approval::v1 as approval;
use metnos_proto::planner::v1 as pb;
use metnos_proto::vaglio::v1 as vaglio;
use sqlx::Row;

use crate::engine::Planner;
use crate::proposals::{effect_class_of, queued_request};

/// The most waiting proposals one session weighs (the engine publishes two of them).
const MAX_WEIGHED: i64 = 10;

/// The most cards left for later that one session shows again.
const MAX_AGAIN: i64 = 4;

/// Whether `id` is a session id the telos engine takes: 8 to 128 ASCII letters, digits or
/// `_ . : -`.
pub fn valid_session_id(id: &str) -> bool {
    (8..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// The proposals `person`'s new session `session` shows: cards left for later first, then
/// those the telos engine publishes now. An error names what failed in a word or two.
pub async fn open(
    planner: &Planner,
    person: &Principal,
    session: &str,
    language: Language,
) -> Result<Vec<pb::SessionProposal>, String> {
    let mut shown = again(planner, person).await?;
    let db = planner.store.db();
    let waiting: Vec<(String, String, String, String)> = on_db!(db, pool => {
        let rows = sqlx::query(
            "SELECT id, kind, description, payload FROM proposals WHERE channel = $1 AND sender_id = $2 \
             AND decision = 'session' ORDER BY created_at, id LIMIT $3",
        )
        .bind(&person.channel).bind(&person.sender_id).bind(MAX_WEIGHED)
        .fetch_all(pool).await.map_err(|e| e.to_string())?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(|e| e.to_string())?
    });
    for (id, kind, description, payload) in waiting {
        let Some((request, accept)) = queued_request(person, &id, &kind, &payload, language) else {
            settle(planner, &id, "dropped", "no card for this kind", None).await?;
            continue;
        };
        let proposal = vaglio::ActionProposal {
            proposal_id: id.clone(),
            effect_class: effect_class_of(&kind, &payload),
            kind,
            description,
            channel: person.channel.clone(),
            origin: vaglio::ProposalOrigin::Spontaneous as i32,
            schedule_id: String::new(),
            principal: Some(person.to_proto()),
            session_id: session.to_owned(),
            level: planner.config.cli_level.to_proto() as i32,
        };
        let result = planner
            .filters
            .evaluate_proposal(vaglio::EvaluateProposalRequest {
                proposal: Some(proposal),
                ..Default::default()
            })
            .await
            .map_err(|s| format!("the telos engine: {:?}", s.code()))?;
        match vaglio::AlignmentDecision::try_from(result.decision) {
            Ok(vaglio::AlignmentDecision::Publish) => {}
            // The session's quota is spent (or the moment is wrong): a later session.
            Ok(
                vaglio::AlignmentDecision::DeferToSlot | vaglio::AlignmentDecision::DeferToDigest,
            ) => break,
            _ => {
                settle(planner, &id, "reject", &result.reason, None).await?;
                continue;
            }
        }
        match planner.filters.create_pending(request).await {
            Ok(created) => {
                let pending = created.approval.unwrap_or_default();
                if !settle(
                    planner,
                    &id,
                    "publish",
                    &result.reason,
                    Some(&pending.token),
                )
                .await?
                {
                    // Another terminal of theirs opened at the same moment and showed it.
                    let _ = planner
                        .filters
                        .cancel(&pending.token, "shown in another session")
                        .await;
                    continue;
                }
                shown.push(pb::SessionProposal {
                    proposal_id: id,
                    approval: Some(pending),
                    card: created.card,
                    accept_for_good: accept == "confirm-always",
                });
            }
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
                ) =>
            {
                // It no longer holds (a grant revoked since it was made).
                tracing::info!(proposal = %id, code = ?status.code(), "a waiting proposal no longer holds; dropped");
                settle(planner, &id, "dropped", "no longer holds", None).await?;
            }
            Err(status) => {
                // The engine answers this id the same next time (published, no second
                // place taken): the next session tries again.
                tracing::warn!(proposal = %id, code = ?status.code(), "a session's proposal could not be made a card");
                break;
            }
        }
    }
    Ok(shown)
}

/// Cards published to `person` in an earlier session and still pending.
async fn again(planner: &Planner, person: &Principal) -> Result<Vec<pb::SessionProposal>, String> {
    let db = planner.store.db();
    let published: Vec<(String, String, String, String)> = on_db!(db, pool => {
        let rows = sqlx::query(
            "SELECT id, kind, description, token FROM proposals WHERE channel = $1 AND sender_id = $2 \
             AND decision = 'publish' AND token IS NOT NULL AND followed_up_at IS NULL \
             ORDER BY sent_at, id LIMIT $3",
        )
        .bind(&person.channel).bind(&person.sender_id).bind(MAX_AGAIN)
        .fetch_all(pool).await.map_err(|e| e.to_string())?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(|e| e.to_string())?
    });
    let mut shown = Vec::new();
    for (id, kind, description, token) in published {
        let Ok(pending) = planner.filters.get_pending(&token).await else {
            continue;
        };
        let requester = pending
            .requester
            .as_ref()
            .and_then(|p| Principal::try_from(p).ok());
        if pending.status != approval::ApprovalStatus::Pending as i32
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
            accept_for_good: kind == crate::proposals::GRANT_OFFER,
        });
    }
    Ok(shown)
}

/// Records what became of waiting proposal `id`; `false` when it was not waiting any more
/// (another session of theirs settled it).
async fn settle(
    planner: &Planner,
    id: &str,
    decision: &str,
    reason: &str,
    token: Option<&str>,
) -> Result<bool, String> {
    let now = metnos_kit::time::now_ms();
    let updated = on_db!(planner.store.db(), pool => {
        sqlx::query("UPDATE proposals SET decision = $2, reason = $3, token = $4, sent_at = $5 WHERE id = $1 AND decision = 'session'")
            .bind(id).bind(decision).bind(reason).bind(token).bind(token.map(|_| now))
            .execute(pool).await.map_err(|e| e.to_string())?
            .rows_affected()
    });
    Ok(updated == 1)
}

#[cfg(test)]
mod tests {
    use super::valid_session_id;

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
