//! The built-in executors: `metnos-exec <name>` reads the args JSON on stdin and writes
//! one observation on stdout (its context comes in METNOS_EXECUTOR_CONTEXT).
//! `metnos-exec shell_exec_box` is the init of `shell_exec`'s sandbox, which `shell_exec`
//! starts itself.

use std::io::Read;
use std::process::ExitCode;

use metnos_executors::builtin::shell_exec;
use metnos_executors::observation::{CONTEXT_VAR, ExecContext, Observation};
use serde_json::Value;

/// The most args JSON read from stdin.
const MAX_ARGS_BYTES: u64 = 16 * 1024 * 1024;

fn main() -> ExitCode {
    let name = std::env::args().nth(1).unwrap_or_default();
    if name == shell_exec::BOX_ARG {
        return shell_exec::init_main();
    }
    let observation = match read_input() {
        Ok((args, context)) => metnos_executors::builtin::run(&name, &args, &context),
        Err(error) => Observation::failure(error),
    };
    let text = serde_json::to_string(&observation).unwrap_or_else(|e| {
        format!(r#"{{"ok":false,"error":"cannot encode the observation: {e}"}}"#)
    });
    println!("{text}");
    ExitCode::SUCCESS
}

fn read_input() -> Result<(Value, ExecContext), String> {
    let mut input = Vec::new();
    std::io::stdin()
        .take(MAX_ARGS_BYTES)
        .read_to_end(&mut input)
        .map_err(|e| format!("cannot read the arguments: {e}"))?;
    let args: Value = if input.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Default::default())
    } else {
        serde_json::from_slice(&input).map_err(|e| format!("the arguments are not JSON: {e}"))?
    };
    if !args.is_object() {
        return Err("the arguments must be a JSON object".into());
    }
    let context = match std::env::var(CONTEXT_VAR) {
        Ok(text) => {
            serde_json::from_str(&text).map_err(|e| format!("{CONTEXT_VAR} is not valid: {e}"))?
        }
        Err(_) => ExecContext::default(),
    };
    Ok((args, context))
}
