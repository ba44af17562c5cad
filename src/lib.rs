//! The `metnos` command's library: what the CLI does, usable from tests.
//!
//! - [`up`]: the whole stack in one process, each service on its own runtime and port.
//! - [`status`]: every service's health as a table or JSON lines.
//! - [`policy_cli`]: `metnos policy …` and `metnos grants …`; [`replay_cli`]: `metnos policy replay`.
//! - [`approvals_cli`]: `metnos approvals …`.
//! - [`audit_cli`]: `metnos audit verify`.
//! - [`web_cli`]: `metnos web login`.
//! - [`vaglio_cli`]: `metnos vaglio …`.
//! - [`telos_cli`]: `metnos telos …`.
//! - [`executors_cli`]: `metnos executors …`.
//! - [`ask_cli`]: `metnos ask …` and `metnos turns …`.
//! - [`pair_cli`]: `metnos pair …`.
//! - [`chat_cli`]: `metnos chat`; [`session_cli`]: the proposals a chat session opens with.
//! - [`doctor`]: `metnos doctor`; [`prompt_size`]: its word on the planner's prompt.
//! - [`eval`]: `metnos eval`, how well Metnos works with a model.
//! - [`admin`]: what the admin commands share.
//! - [`runfile`]: how every command finds the running stack.
//! - [`setup`]: what the first `metnos up` sets up by itself.
//!
//! Admin commands (`policy`, `approvals`, `grants`, `pair`, …) arrive with their services'
//! issues; they all find the running services the same way.

pub mod admin;
pub mod approvals_cli;
pub mod ask_cli;
pub mod audit_cli;
pub mod chat_cli;
pub mod conversations_cli;
pub mod doctor;
pub mod eval;
pub mod executors_cli;
pub mod mcp_cli;
pub mod memory_cli;
pub mod mnestome_cli;
pub mod pair_cli;
pub mod pki_cli;
pub mod policy_cli;
pub mod prompt_size;
pub mod replay_cli;
pub mod runfile;
pub mod schedules_cli;
pub mod session_cli;
pub mod setup;
pub mod status;
pub mod telos_cli;
pub mod up;
pub mod vaglio_cli;
pub mod web_cli;
