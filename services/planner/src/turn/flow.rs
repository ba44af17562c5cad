//! What the loop and its stages pass each other: where events go, what handling a call led
//! to, and a refusal as the LLM sees it.

use metnos_executors::Observation;
use metnos_proto::planner::v1 as pb;
use tokio::sync::mpsc;

use crate::turn::Finish;

/// What handling one call led to.
pub(crate) enum StepOutcome {
    Continue,
    Suspended,
    Finished(Finish),
    /// This process no longer holds the turn (its lease expired and another replica took
    /// it over or closed it): it stops here, writing nothing more.
    Lost,
}

/// Where events go: the RunTurn/ResumeTurn stream (a closed stream is a client gone).
pub type Sink = mpsc::Sender<pb::TurnEvent>;

/// Sends `e` to the stream; a client gone is no error (the turn goes on, stored).
pub(crate) async fn emit(sink: &Sink, e: pb::turn_event::Event) {
    let _ = sink.send(pb::TurnEvent { event: Some(e) }).await;
}

/// A call refused before it ran, as the LLM sees it.
pub(crate) fn refusal(error: impl Into<String>) -> Observation {
    Observation::failure(error)
}
