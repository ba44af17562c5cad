//! Executors, the only parts of Metnos that touch the world (DESIGN §6): signed TOML
//! manifests, the catalog that refuses anything tampered with, the runner that spawns
//! them under a timeout and an output cap, and the built-in executor programs.

pub mod builtin;
pub mod catalog;
pub mod digest;
pub mod install;
pub mod later;
pub mod manifest;
pub mod mcp;
pub mod netguard;
pub mod observation;
pub mod open;
pub mod program;
pub mod runner;
pub mod scope;
pub mod secret;
pub mod signing;
pub mod started;

pub use catalog::{CallError, Catalog, Executor, Refusal};
pub use manifest::Manifest;
pub use observation::{ExecContext, Observation, ShellSettings};
pub use runner::Runner;
pub use signing::Trust;

/// The program that holds the built-in executors.
pub const BUILTIN_PROGRAM: &str = "metnos-exec";
