//! The `main` of the built-in executor programs: read the context from the environment
//! and the args JSON on stdin, run one executor, write one observation on stdout.

use std::io::Read;
use std::process::ExitCode;

use serde_json::Value;

use crate::observation::{CONTEXT_VAR, ExecContext, Observation};

/// The most args JSON read from stdin.
const MAX_ARGS_BYTES: u64 = 16 * 1024 * 1024;

/// Set by the runner on a program it starts ahead of its call (`executors.prestart`): an
/// input that ends before its first byte is no call at all (the runner went away), and
/// the program exits without running anything.
pub const PRESTARTED_VAR: &str = "METNOS_EXECUTOR_PRESTARTED";

/// Why a program could not read its call: the observation's error says it.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{CONTEXT_VAR} is not valid: {0}")]
    Context(serde_json::Error),
    #[error("cannot read the arguments: {0}")]
    Read(std::io::Error),
    #[error("the arguments are not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the arguments must be a JSON object")]
    NotObject,
}

/// Runs the executor its first argument names with `run`, as a program's `main`.
pub fn main(run: fn(&str, &Value, &ExecContext) -> Observation) -> ExitCode {
    let name = std::env::args().nth(1).unwrap_or_default();
    let observation = match (read_context(), read_args()) {
        (_, Ok(None)) => return ExitCode::SUCCESS,
        (Ok(context), Ok(Some(args))) => run(&name, &args, &context),
        (Err(error), _) | (_, Err(error)) => Observation::failure(error.to_string()),
    };
    write(&observation)
}

/// The call's context, from the environment (the runner's `METNOS_EXECUTOR_CONTEXT`).
pub fn read_context() -> Result<ExecContext, CallError> {
    match std::env::var(CONTEXT_VAR) {
        Ok(text) => serde_json::from_str(&text).map_err(CallError::Context),
        Err(_) => Ok(ExecContext::default()),
    }
}

/// The call's arguments, a JSON object on stdin (blank: `{}`); `None` when a prestarted
/// program's input ended with nothing in it.
pub fn read_args() -> Result<Option<Value>, CallError> {
    let mut input = Vec::new();
    std::io::stdin()
        .take(MAX_ARGS_BYTES)
        .read_to_end(&mut input)
        .map_err(CallError::Read)?;
    if input.is_empty() && std::env::var_os(PRESTARTED_VAR).is_some() {
        return Ok(None);
    }
    let args: Value = if input.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Default::default())
    } else {
        serde_json::from_slice(&input).map_err(CallError::NotJson)?
    };
    if !args.is_object() {
        return Err(CallError::NotObject);
    }
    Ok(Some(args))
}

/// Writes `observation` as the one line of stdout.
pub fn write(observation: &Observation) -> ExitCode {
    let text = serde_json::to_string(observation).unwrap_or_else(|e| {
        format!(r#"{{"ok":false,"error":"cannot encode the observation: {e}"}}"#)
    });
    println!("{text}");
    ExitCode::SUCCESS
}
