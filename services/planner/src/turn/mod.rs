//! The turn loop (seed agent_runtime.md ch. 2), from pure to IO:
//! - [`state`] (re-exported here): a turn's typed state — mode, tier, level, each step's
//!   log — as checkpoints and the turn log store it;
//! - [`rules`]: caps, the duplicate-read guard, the strictest policy answer, modes and
//!   hybrid escalation (pure);
//! - [`prefilter`]: which executors a query is offered (inverted index, adaptive K);
//! - [`piping`]: `{{stepN.field}}` references;
//! - [`taint`]: provenance labels, the fence around the world's data, arguments made of it
//!   and the sinks it may not reach unasked;
//! - [`cards`]: what an approval card says about a call;
//! - [`scratch`]: large observations and `scratchpad_read`;
//! - [`engine`]: the [`Planner`] and its loop — the only writer of a step's log and events;
//! - the loop's stages, each holding only what it uses: [`vetting`] (the filter pipeline
//!   of one call, `Result<Cleared, Refusal>`), [`suspension`] (waiting for a person's
//!   approval and going on after it), [`execution`] (running, observing, the scratchpad);
//! - [`recover`]: turns whose replica died, and notices kept for their person.

pub mod asking;
pub mod attempt;
pub mod cards;
pub mod conversation;
pub mod endings;
pub mod engine;
pub mod execution;
pub(crate) mod flow;
pub mod history;
pub(crate) mod passages;
pub(crate) mod paths;
pub mod piping;
pub mod prefilter;
pub mod record;
pub mod recover;
pub mod remember;
pub mod repair;
pub mod rules;
pub(crate) mod running;
pub mod scratch;
#[cfg(test)]
mod stage_tests;
pub mod state;
pub mod summary;
pub mod suspension;
pub mod synt;
pub mod taint;
pub mod vetting;

pub use state::*;
