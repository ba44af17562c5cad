//! What Metnos does on its own (DESIGN §Proactivity): it starts turns through the
//! [`scheduler::TurnStarter`] port and never reaches into the turn loop otherwise.
//! - [`scheduler`]: the builtin scheduler — tasks and runs in the store, the tick, once
//!   per slot across replicas;
//! - [`jobs`]: its builtin tasks; [`standing`]: a person's standing order fired as a turn,
//!   its result offered to the telos engine;
//! - [`proposals`]: what the planner proposes on its own; [`digest`]: the evening digest;
//!   [`session`]: a terminal session's proposals;
//! - [`shortcuts`]: a chain of existing executors offered to the owner as a shortcut;
//! - [`tools`]: the standing-order tools the model may call in a turn;
//! - [`urgency`]: how pressing and how sure a proposal is, from what it rests on;
//!   [`ask`]: the telos engine's once-only question delivered to the person.

pub mod ask;
pub mod digest;
pub mod jobs;
pub mod proposals;
pub mod scheduler;
pub mod session;
pub mod shortcuts;
pub mod standing;
pub mod tools;
pub mod urgency;

use crate::turn::TurnRequest;
use crate::turn::flow::Sink;

/// The turn loop as proactivity sees it.
pub trait TurnStarter: Send + Sync + std::fmt::Debug {
    /// Starts a scheduled turn (a standing order's firing) for `request`, its events sent
    /// to `sink`; returns the turn's id.
    fn start_scheduled(&self, request: &TurnRequest, sink: Sink) -> String;
}
