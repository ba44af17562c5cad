//! The box around a long-lived server (an MCP server over stdio, issue 43): the same box as
//! a `shell_exec` command's — namespaces, limits, no capabilities, no-new-privileges,
//! seccomp, Landlock — but the command starts at once and keeps the standard input and
//! output it was given, which carry the server's protocol.
//!
//! `metnos-shell mcp_box` is the outer: it reads the [`Plan`] (with its `serve` command)
//! from its environment, enters the namespaces, starts the init with its own standard input
//! and output, and reads the init's first report from the init's standard error. Ready, it
//! writes one line `metnos box: ready {protections}` on its own standard error, then passes
//! on whatever the server writes there and exits with it. Refused (no box on this host and
//! running without one is not allowed) or failed, it writes `metnos box: refused: …` and
//! exits 1 before anything of the server ran.

use std::io::Write;
use std::process::{Command, ExitCode, Stdio};

use super::{
    BOX_ARG, PLAN_VAR, Plan, READY_WITHIN, Report, Run, enter_namespaces, keep_private,
    own_program, read_line, refusal,
};

/// The first argument that makes `metnos-shell` the outer of a server's box.
pub const SERVE_ARG: &str = "mcp_box";
/// The environment variable carrying the [`Plan`] to the outer.
pub const SERVE_VAR: &str = "METNOS_MCP_BOX";
/// What the outer's first line of standard error starts with once the box holds.
pub const READY_PREFIX: &str = "metnos box: ready ";
/// What it starts with when nothing runs.
pub const REFUSED_PREFIX: &str = "metnos box: refused: ";

fn refuse(why: impl std::fmt::Display) -> ExitCode {
    eprintln!("{REFUSED_PREFIX}{why}");
    ExitCode::FAILURE
}

/// The outer's `main`.
pub fn serve_main() -> ExitCode {
    // Dead with whoever started it (the planner), even when that one is killed outright.
    #[cfg(target_os = "linux")]
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let plan: Result<Plan, String> = std::env::var(SERVE_VAR)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()));
    let mut plan = match plan {
        Ok(plan) if plan.serve.is_some() => plan,
        Ok(_) => return refuse("the plan names no server to run"),
        Err(e) => return refuse(format!("the box's plan: {e}")),
    };
    match enter_namespaces() {
        Ok(()) => plan.namespaces = true,
        Err(why) if !plan.allow_unsandboxed => {
            return refuse(refusal(&format!(
                "user, PID, network, IPC and mount namespaces cannot be created ({why})"
            )));
        }
        Err(_) => {}
    }
    keep_private();
    let plan_text = match serde_json::to_string(&plan) {
        Ok(text) => text,
        Err(e) => return refuse(format!("the box's plan: {e}")),
    };
    let spawned = Command::new(own_program())
        .arg(BOX_ARG)
        .env_clear()
        .env(PLAN_VAR, plan_text)
        .current_dir("/")
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .spawn();
    let mut init = match spawned {
        Ok(child) => child,
        Err(e) => return refuse(format!("the sandbox could not start: {e}")),
    };
    let Some(mut errors) = init.stderr.take() else {
        return refuse("the sandbox's standard error is missing");
    };
    let first = read_line(&mut errors, READY_WITHIN);
    let why = match first.as_deref().map(serde_json::from_slice::<Report>) {
        Some(Ok(Report::Ready(protections))) => {
            let text = serde_json::to_string(&protections).unwrap_or_default();
            eprintln!("{READY_PREFIX}{text}");
            None
        }
        Some(Ok(Report::Refused(protections))) => {
            Some(refusal(&protections.missing().unwrap_or_default()))
        }
        Some(Ok(Report::Failed(why))) => Some(why),
        Some(Ok(Report::Exited { .. })) | Some(Err(_)) => {
            Some("the sandbox sent a report out of turn".to_owned())
        }
        None => Some(format!(
            "the sandbox did not report within {} s",
            READY_WITHIN.as_secs()
        )),
    };
    if let Some(why) = why {
        let _ = init.kill();
        let _ = init.wait();
        return refuse(why);
    }
    // The server's own messages, passed on until it ends.
    let _ = std::io::copy(&mut errors, &mut std::io::stderr().lock());
    let _ = std::io::stderr().flush();
    match init.wait() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

/// The init's part: runs the server with the init's standard input, output and error,
/// and ends with it.
pub(super) fn run_server(plan: &Plan, run: &Run) -> ExitCode {
    let child = Command::new(&run.program)
        .args(&run.args)
        .current_dir(&run.cwd)
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            let name = run
                .program
                .file_name()
                .unwrap_or_default()
                .to_string_lossy();
            eprintln!("metnos box: `{name}` could not start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match child.wait() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("metnos box: the server ended: {status}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("metnos box: waiting for the server failed: {e}");
            ExitCode::FAILURE
        }
    }
}
