//! The turn's record: its checkpoint saved, its live view for the spectator, its end
//! written once to the store and the turn log.

use metnos_kit::time::now_ms;
use metnos_proto::planner::v1 as pb;
use serde_json::{Value, json};

use crate::store::threads::{Ending, Kept, Thread, ThreadStore};
use crate::store::{Held, State, Store};
use crate::turn::flow::{Sink, emit};
use crate::turn::{Checkpoint, FinalKind, Finish, attempt};
use crate::turnlog::TurnLog;

/// Why a checkpoint was not saved.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SaveError {
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
    #[error("the turn is no longer held by this planner")]
    NotHeld,
    #[error(transparent)]
    Store(sqlx::Error),
}

/// Where a turn is recorded: the store and the turn log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Records<'a> {
    store: &'a Store,
    log: &'a TurnLog,
}

impl<'a> Records<'a> {
    pub(crate) fn new(store: &'a Store, log: &'a TurnLog) -> Records<'a> {
        Records { store, log }
    }

    /// Claims a suspended turn (or one whose resumer's lease expired) for this process,
    /// while it still waits on the card `token` its checkpoint was read with.
    pub(crate) async fn claim(&self, turn_id: &str, token: &str) -> bool {
        self.store
            .claim_suspended_at(turn_id, Some(token), now_ms())
            .await
            .unwrap_or(false)
    }

    /// The turn was taken from this process (its lease expired): the stream says so and
    /// ends; the replica that holds it now writes its end.
    pub(crate) async fn lost(&self, cp: &Checkpoint, sink: &Sink) {
        tracing::warn!(turn_id = %cp.turn_id, "this planner no longer holds the turn; it stops here");
        let finished = pb::TurnFinished {
            turn_id: cp.turn_id.clone(),
            kind: pb::FinalKind::Error as i32,
            text: "this planner lost the turn to another replica (its store was out of reach for longer than the lease), so it stopped here".to_owned(),
            ..Default::default()
        };
        emit(sink, pb::turn_event::Event::Finished(finished)).await;
    }

    /// Stores the checkpoint as `state` (with the token it waits on, if any).
    pub(crate) async fn save(
        &self,
        cp: &Checkpoint,
        state: State,
        token: Option<&str>,
    ) -> Result<(), SaveError> {
        let checkpoint = serde_json::to_string(cp)?;
        let status = match state {
            State::Suspended => "awaiting_approval",
            _ => "running",
        };
        self.show(cp, status).await;
        match self
            .store
            .save(&cp.turn_id, state, token, &checkpoint, now_ms())
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(SaveError::NotHeld),
            Err(e) => Err(SaveError::Store(e)),
        }
    }

    /// Shows the turn as it is now to the spectator (its record so far, `status` for its
    /// end: `running`, `awaiting_approval`); a failure costs the view, never the turn.
    pub(crate) async fn show(&self, cp: &Checkpoint, status: &str) {
        let live = self.record_as(cp, status, None).to_string();
        if let Err(e) = self.store.set_live(&cp.turn_id, &live, now_ms()).await {
            tracing::debug!(error = %e, "the turn's live record was not written");
        }
    }

    /// The turn's record, as the turn log and the store keep it (no values, no text).
    pub(crate) fn record(&self, cp: &Checkpoint, kind: FinalKind, reason: Option<&str>) -> Value {
        self.record_as(cp, kind.as_str(), reason)
    }

    pub(crate) fn record_as(&self, cp: &Checkpoint, kind: &str, reason: Option<&str>) -> Value {
        let latency_ms = u64::try_from(now_ms() - cp.started_ms).unwrap_or(0);
        let mut record = json!({
            "turn_id": cp.turn_id,
            "principal": cp.person,
            "level": cp.level.to_proto().as_str_name(),
            "mode": cp.mode,
            "tiers": cp.tiers_used,
            "models": cp.models,
            "steps": cp.steps,
            "final_kind": kind,
            "latency_ms": latency_ms,
            "active_ms": cp.active_ms,
            "llm_ms": cp.llm_ms,
            "usage": {"prompt_tokens": cp.prompt_tokens, "completion_tokens": cp.completion_tokens},
            "started_at": metnos_kit::time::rfc3339(cp.started_ms),
            "ended_at": metnos_kit::time::rfc3339(now_ms()),
        });
        if !cp.repairs.is_empty() {
            record["repairs"] = json!(cp.repairs);
        }
        if let Some(attempt) = attempt::record(cp, kind) {
            record["attempt"] = attempt;
        }
        if let Some(reason) = reason {
            record["reason"] = json!(reason);
        }
        record
    }

    /// Writes the turn's end, and its exchange in its person's thread if it has one (in
    /// the same transaction: once, whichever replica ends it; the person's answer is what
    /// they got, however the turn ended). The thread the exchange went to is the turn's
    /// from then on (another turn of the person's may have opened their conversation
    /// first). `false`: the end was not this holder's to write.
    async fn end(&self, cp: &mut Checkpoint, record: &str, answer: &str) -> Result<Held, String> {
        let Some(thread_id) = cp.thread_id.clone() else {
            let finished = self.store.finish(&cp.turn_id, record, now_ms()).await;
            return finished.map_err(|e| e.to_string());
        };
        let exchange = crate::turn::conversation::exchange_of(cp, answer);
        if let Err(e) = exchange.check() {
            tracing::warn!(turn_id = %cp.turn_id, error = %e, "the turn's exchange was not kept in its thread");
            let finished = self.store.finish(&cp.turn_id, record, now_ms()).await;
            return finished.map_err(|e| e.to_string());
        }
        let thread = Thread {
            id: thread_id,
            person: cp.person.clone(),
            started_at: cp.started_ms,
            last_at: cp.started_ms,
            opening: cp.thread_opening,
        };
        let ending = Ending {
            record,
            run: &self.store.holder().run,
        };
        let threads = ThreadStore::new(self.store.db().clone());
        let (held, kept) = match threads
            .append_ending(&thread, &exchange, now_ms(), Some(&ending))
            .await
        {
            Ok(written) => written,
            Err(e) => {
                // The end alone, so that an exchange that cannot be written never costs
                // the turn its end (a store failing for a moment fails this too, and the
                // caller asks again).
                tracing::warn!(turn_id = %cp.turn_id, error = %e, "the turn's exchange was not kept in its thread");
                let finished = self.store.finish(&cp.turn_id, record, now_ms()).await;
                return finished.map_err(|e| e.to_string());
            }
        };
        match kept {
            Kept::In(id) => {
                cp.thread_id = Some(id);
                cp.thread_opening = None;
            }
            Kept::Already => {}
            Kept::Nowhere => {
                tracing::info!(turn_id = %cp.turn_id, "the turn's thread was forgotten (or is not its person's); its exchange is not kept");
            }
        }
        Ok(held)
    }

    /// Ends the turn: the store, the log, the event. Written once: a turn this process no
    /// longer holds was ended (or taken over) elsewhere.
    pub(crate) async fn close(&self, cp: &mut Checkpoint, sink: &Sink, outcome: Finish) {
        let latency_ms = u64::try_from(now_ms() - cp.started_ms).unwrap_or(0);
        let kind_name = outcome.kind.as_str();
        // A non-retreat attempt left open: the answer asks what would let it.
        let open = attempt::unserved(cp, outcome.kind).cloned();
        let mut outcome = outcome;
        if let Some(open) = &open {
            let asked = attempt::question(open, cp.language);
            outcome.text = format!("{}\n\n{asked}", outcome.text.trim_end());
        }
        let record = self.record(cp, outcome.kind, None);
        let written = record.to_string();
        let mut finished = self.end(cp, &written, &outcome.text).await;
        // A store that failed for a moment is asked again while the lease holds: a turn
        // left to the sweep would be ended as interrupted after its person got the answer.
        for _ in 0..3 {
            if finished.is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            finished = self.end(cp, &written, &outcome.text).await;
        }
        match finished {
            Ok(true) => self.log.append(&record, now_ms()).await,
            Ok(false) => {
                tracing::warn!(
                    "the turn is no longer held by this planner; its end is not recorded here"
                );
                // Another replica ended it meanwhile, keeping a notice for its person; the
                // person gets this answer, not "I was restarted".
                let _ = self.store.answered(&cp.turn_id, now_ms()).await;
            }
            Err(e) => {
                // Its lease lapses: whichever replica sweeps it writes its one line.
                tracing::warn!(error = %e, "cannot record the finished turn in the store; the lease sweep will end it");
            }
        }
        tracing::info!(
            final_kind = kind_name,
            latency_ms,
            steps = cp.steps.len(),
            "turn finished"
        );
        let finished = pb::TurnFinished {
            turn_id: cp.turn_id.clone(),
            kind: outcome.kind.to_wire() as i32,
            text: outcome.text,
            latency_ms,
            usage: Some(pb::TokenUsage {
                prompt_tokens: cp.prompt_tokens,
                completion_tokens: cp.completion_tokens,
            }),
            thread_id: cp.thread_id.clone().unwrap_or_default(),
            attempt: open.as_ref().map(attempt::Attempt::to_proto),
        };
        emit(sink, pb::turn_event::Event::Finished(finished)).await;
    }
}
