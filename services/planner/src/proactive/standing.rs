//! A standing order's firing (issue 22): a turn as its person at their level — every call
//! still through policy, the vaglio and, when asked for, the person's approval (its card
//! goes to them and the turn waits for their answer) — and then its result as a proposal
//! to the vaglio's telos engine, which decides whether it reaches the person now, at the
//! evening digest, or not at all. An `on_change` order whose result is the same as last time
//! tells nobody.

use std::sync::Arc;

use metnos_core::level::AutonomyLevel;
use metnos_core::principal::Principal;
use metnos_proto::planner::v1 as pb;
use metnos_proto::vaglio::v1 as vaglio;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::filters::Filters;
use crate::proactive::TurnStarter;
use crate::proactive::scheduler::{Done, Firing, Job, JobError, Notify};
use crate::turn::TurnRequest;

/// The `kind` of a standing order's result as a proposal.
pub const KIND: &str = metnos_core::names::proposals::STANDING_ORDER;

/// Why a standing order's firing ran nothing, or ended without a result.
#[derive(Debug, thiserror::Error)]
pub enum StandingError {
    #[error("the order's level cannot be read: it has none")]
    NoLevel,
    #[error("the person's level could not be read from the gateway ({0}); nothing was run")]
    Gateway(String),
    #[error("{0} is no longer paired: the order is paused, nothing was run")]
    Unpaired(Principal),
    #[error("turn {0} ended without an answer")]
    NoAnswer(String),
    #[error("turn {0}: {1}")]
    Ended(String, String),
    #[error("the order's person cannot be read: {0}")]
    Person(#[from] metnos_core::principal::PrincipalError),
}

/// Runs standing orders' firings.
#[derive(Debug)]
pub struct StandingOrders {
    /// The turn loop, through its port.
    pub turns: Arc<dyn TurnStarter>,
    pub filters: Arc<dyn Filters>,
    /// The planner's store, for results kept for the digest.
    pub db: metnos_kit::store::Db,
    /// The terminal's level (its orders never run above it).
    pub cli_level: AutonomyLevel,
    /// To pause the orders of someone no longer paired.
    pub tasks: crate::proactive::scheduler::TaskStore,
    /// People's time zones: a deadline in an order's request is read in its person's.
    pub telos: metnos_kit::config::TelosConfig,
}

/// The digest an `on_change` order compares: the answer, its lines' ends trimmed.
pub fn digest_of(text: &str) -> String {
    let canonical: Vec<&str> = text.lines().map(str::trim_end).collect();
    hex::encode(Sha256::digest(canonical.join("\n").as_bytes()))
}

#[tonic::async_trait]
impl Job for StandingOrders {
    async fn run(&self, firing: &Firing) -> Result<Done, JobError> {
        let task = &firing.task;
        let person = Principal::new(&task.channel, &task.sender_id)?;
        let stored = task.level.ok_or(StandingError::NoLevel)?;
        // Never above the person's level now: a level lowered since, or a pairing revoked,
        // holds for their orders too.
        let now_level = if person.is_terminal() {
            Some(self.cli_level)
        } else {
            match self.filters.pairing_level(&person).await {
                Ok(level) => level,
                Err(status) => {
                    let why = status.message().to_owned();
                    return Err(StandingError::Gateway(why).into());
                }
            }
        };
        let Some(now_level) = now_level else {
            let _ = self
                .tasks
                .set_active(
                    &task.id,
                    false,
                    task.next_run_at,
                    task.due_at,
                    firing.now_ms,
                )
                .await;
            tracing::warn!(task = %task.id, "a standing order of someone no longer paired was paused");
            return Err(StandingError::Unpaired(person).into());
        };
        let level = stored.min(now_level);
        let request = TurnRequest {
            principal: person.clone(),
            level,
            query: task.query.clone(),
            language: None,
            mode: None,
            // The order's request, as the person approved it on its card.
            forwarded: false,
            // A schedule's turn is never steered by chat: no thread, read or written.
            thread: crate::turn::conversation::Threading::None,
        };
        let (tx, mut rx) = mpsc::channel(64);
        let turn_id = self.turns.start_scheduled(&request, tx);
        let mut finished = None;
        while let Some(event) = rx.recv().await {
            match event.event {
                // The person decides; the turn waits for them (or for the request's expiry).
                Some(pb::turn_event::Event::AwaitingApproval(asked)) => {
                    if let Some(card) = asked.card
                        && let Err(status) =
                            self.filters.show_card(&person, &asked.token, card).await
                    {
                        tracing::warn!(task = %task.id, code = ?status.code(), "cannot show a standing order's card");
                    }
                }
                Some(pb::turn_event::Event::Finished(f)) => finished = Some(f),
                Some(pb::turn_event::Event::Suspended(_)) => {
                    return Ok(format!("turn {turn_id} waits for an approval").into());
                }
                _ => {}
            }
        }
        let Some(finished) = finished else {
            return Err(StandingError::NoAnswer(turn_id).into());
        };
        if finished.kind != pb::FinalKind::Answer as i32 {
            return Err(StandingError::Ended(turn_id, finished.text).into());
        }
        let text = finished.text;
        let digest = (task.notify == Notify::OnChange).then(|| digest_of(&text));
        if digest.is_some() && digest == task.last_digest {
            return Ok(Done {
                output: format!("unchanged since the last run; nobody told (turn {turn_id})"),
                digest,
            });
        }
        let told = publish(self, firing, &person, level, &text).await;
        Ok(Done {
            output: format!("{told} (turn {turn_id})\n{text}"),
            digest,
        })
    }
}

/// Offers the result to the telos engine and tells the person when it says so; returns
/// what became of it, in words.
async fn publish(
    orders: &StandingOrders,
    firing: &Firing,
    person: &Principal,
    level: AutonomyLevel,
    text: &str,
) -> String {
    let task = &firing.task;
    let origin = if firing.in_cadence {
        vaglio::ProposalOrigin::SchedulerInCadence
    } else {
        vaglio::ProposalOrigin::SchedulerOutOfCadence
    };
    let name: String = task
        .name
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    let proposal = vaglio::ActionProposal {
        proposal_id: format!("standing:{}:{}", task.id, firing.slot_at),
        kind: KIND.to_owned(),
        effect_class: format!("{KIND}:{}", task.id),
        description: format!("The result of the standing order \"{name}\" the person set up"),
        channel: person.channel().to_owned(),
        origin: origin as i32,
        schedule_id: task.id.clone(),
        principal: Some(person.to_proto()),
        session_id: if person.is_terminal() {
            format!("schedule:{}", task.id)
        } else {
            String::new()
        },
        level: level.to_proto() as i32,
    };
    let request = vaglio::EvaluateProposalRequest {
        proposal: Some(proposal),
        urgency_hint: urgency_of(&orders.telos, firing),
        ..Default::default()
    };
    let result = match orders.filters.evaluate_proposal(request).await {
        Ok(result) => result,
        Err(status) => {
            tracing::warn!(task = %task.id, code = ?status.code(), "the telos engine was not asked: the result is kept, nobody told");
            return format!("kept, nobody told (the telos engine: {})", status.message());
        }
    };
    if !result.ask_person.is_empty() {
        let (db, filters) = (&orders.db, orders.filters.as_ref());
        crate::proactive::ask::deliver(db, filters, person, &result.ask_person, firing.now_ms)
            .await;
    }
    match vaglio::AlignmentDecision::try_from(result.decision) {
        Ok(vaglio::AlignmentDecision::Publish) if !person.is_terminal() => {
            let message = format!("⏰ {name}\n{text}");
            let key = format!("standing:{}:{}", task.id, firing.slot_at);
            match orders.filters.tell(person, &message, &key).await {
                Ok(()) => "told".to_owned(),
                Err(status) => {
                    tracing::warn!(task = %task.id, code = ?status.code(), "a standing order's result did not reach its person; it waits for the digest");
                    let kept = for_the_digest(orders, firing, person, &name, text).await;
                    format!("not delivered ({}); {kept}", status.message())
                }
            }
        }
        Ok(vaglio::AlignmentDecision::Publish) => "kept for `metnos schedules`".to_owned(),
        Ok(vaglio::AlignmentDecision::DeferToDigest | vaglio::AlignmentDecision::DeferToSlot)
            if !person.is_terminal() =>
        {
            let kept = for_the_digest(orders, firing, person, &name, text).await;
            format!("{kept} ({})", result.reason)
        }
        Ok(vaglio::AlignmentDecision::DeferToDigest | vaglio::AlignmentDecision::DeferToSlot) => {
            format!("kept for `metnos schedules` ({})", result.reason)
        }
        // More results than one digest lists: kept all the same, the digest counts them.
        _ if result.reason == "digest_full" && !person.is_terminal() => {
            let kept = for_the_digest(orders, firing, person, &name, text).await;
            format!("{kept} (beyond what one digest lists: counted there)")
        }
        _ => format!("not told ({})", result.reason),
    }
}

/// How pressing a firing's result is ([`crate::proactive::urgency`]): a deadline its
/// request names within a day, chronic upkeep, or neither.
pub(crate) fn urgency_of(telos: &metnos_kit::config::TelosConfig, firing: &Firing) -> f64 {
    let task = &firing.task;
    let zone = telos.local_for(&task.person_key()).zone;
    let gap = metnos_kit::schedule::Schedule::parse(&task.schedule)
        .ok()
        .and_then(|s| s.min_gap_ms(firing.now_ms, task.anchor_at, &zone, 4));
    crate::proactive::urgency::of_standing_order(&task.query, gap, &zone, firing.now_ms)
}

/// The most characters of a result a digest line holds (the whole answer stays in the
/// run's output).
const DIGEST_RESULT_CHARS: usize = 280;

/// Queues a firing's result for `person`'s evening digest (one line, no buttons); says
/// what became of it.
async fn for_the_digest(
    orders: &StandingOrders,
    firing: &Firing,
    person: &Principal,
    name: &str,
    text: &str,
) -> String {
    let task = &firing.task;
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut shown: String = flat.chars().take(DIGEST_RESULT_CHARS).collect();
    if flat.chars().count() > DIGEST_RESULT_CHARS {
        shown.push('…');
    }
    let id = {
        let digest = Sha256::digest(format!("{}\n{}", task.id, firing.slot_at).as_bytes());
        format!("so-{}", &hex::encode(digest)[..16])
    };
    let queued = metnos_kit::on_db!(&orders.db, pool => {
        sqlx::query(
            "INSERT INTO proposals (id, channel, sender_id, kind, subject, description, payload, decision, reason, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, '{}', 'digest', 'deferred', $7) ON CONFLICT (id) DO NOTHING",
        )
        .bind(&id).bind(person.channel()).bind(person.sender_id()).bind(KIND)
        .bind(&task.id).bind(format!("⏰ {name}: {shown}")).bind(firing.now_ms)
        .execute(pool).await.map(|_| ())
    });
    match queued {
        Ok(_) => "kept for the evening digest".to_owned(),
        Err(e) => {
            tracing::warn!(task = %task.id, error = %e, "a standing order's result could not be queued for the digest");
            "kept in the run's output only (the digest queue failed)".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proactive::urgency::{CHRONIC, NORMAL, URGENT};
    use crate::store::tasks::{Kind, Task, TaskState};

    fn firing(query: &str, schedule: &str, now_ms: i64) -> Firing {
        Firing {
            task: Task {
                id: "so-1".into(),
                kind: Kind::Standing,
                name: "order".into(),
                channel: "telegram".into(),
                sender_id: "42".into(),
                schedule: schedule.into(),
                anchor_at: 0,
                query: query.into(),
                level: None,
                notify: Notify::Always,
                state: TaskState::Active,
                next_run_at: now_ms,
                due_at: now_ms,
                deferred: false,
                last_run_at: None,
                last_status: None,
                last_output: None,
                last_digest: None,
                created_at: 0,
                updated_at: 0,
            },
            slot_at: now_ms,
            now_ms,
            in_cadence: true,
            run_id: 1,
        }
    }

    /// A firing's urgency is read from its request, in its person's time zone, and from
    /// how often it fires.
    #[test]
    fn a_firing_s_urgency_comes_from_its_request_and_its_cadence() {
        let mut telos = metnos_kit::config::TelosConfig::default();
        telos.people.insert(
            "telegram:42".into(),
            metnos_kit::config::TelosPerson {
                time_zone: Some("Europe/Rome".into()),
                ..Default::default()
            },
        );
        // Monday 2026-11-30 08:00 in Rome.
        let now = 1_796_022_000_000;
        let cases = [
            ("pay the rent by 2026-12-01 07:00", "daily@08:00", URGENT),
            ("pay the rent by 2026-12-01 09:00", "daily@08:00", CHRONIC),
            ("tidy my downloads", "every 6 hours", CHRONIC),
            ("weekly review", "0 8 * * MON", NORMAL),
        ];
        for (query, schedule, want) in cases {
            assert_eq!(
                urgency_of(&telos, &firing(query, schedule, now)),
                want,
                "{query} / {schedule}"
            );
        }
    }
}
