//! Each built-in executor through the real runner and the signed catalog: normal use and
//! its bad inputs, one file per scenario; the helpers they share are here.
//!
//! - [`everyday`]: `fs_read`, `fs_write`, `fs_list`, `time_now`, `parse_local`.
//! - [`shell`]: `shell_exec`'s ordinary use and refusals.
//! - [`own_data`]: Metnos's own data directory, out of every executor's reach.
//! - [`forbidden`]: the forbidden core at the point of use.
//! - [`shell_box`]: what a command in `shell_exec`'s box can no longer do.
//! - [`races`]: links and races.
//! - [`web_fetch`]: `web_fetch` against a loopback server.

#[path = "../common/mod.rs"]
mod common;

mod everyday;
mod forbidden;
mod own_data;
mod races;
mod shell;
mod shell_box;
mod web_fetch;

use common::*;
use metnos_executors::Catalog;
use serde_json::json;

fn setup() -> (Fixture, Catalog) {
    let f = Fixture::with_builtins();
    let catalog = f.load();
    assert_eq!(catalog.refused(), &[]);
    (f, catalog)
}

/// The shell's sandbox on this host, or `None` (said on stderr) where it cannot be built:
/// every command is then refused, which
/// `without_landlock_or_namespaces_the_shell_refuses_unless_told_to_run_unsandboxed` checks.
async fn sandbox(f: &Fixture, catalog: &Catalog) -> Option<serde_json::Value> {
    let o = f.runner().check_shell_sandbox(catalog).await;
    if meta(&o, "available") == &json!(true) {
        return Some(meta(&o, "sandbox").clone());
    }
    // The README's test command asks for the real thing: there a missing sandbox is a
    // failure, not a skipped attack.
    assert!(
        std::env::var_os("METNOS_TEST_REQUIRE_SANDBOX").is_none(),
        "the shell's sandbox cannot be built on this host: {o:?}"
    );
    eprintln!("the shell's sandbox cannot be built on this host: {o:?}");
    None
}

/// `runner` with `folders` added to what the shell may read (executors.shell_readable).
fn with_readable(
    runner: &metnos_executors::Runner,
    folders: &[std::path::PathBuf],
) -> metnos_executors::Runner {
    metnos_executors::Runner {
        shell: metnos_executors::ShellSettings {
            readable: folders.to_vec(),
            ..runner.shell.clone()
        },
        ..runner.clone()
    }
}

async fn shell_with(
    runner: &metnos_executors::Runner,
    catalog: &Catalog,
    command: &str,
) -> metnos_executors::Observation {
    runner
        .check_and_run(catalog, "shell_exec", &json!({ "command": command }))
        .await
}

/// The layout a default installation has: the data directory in the home, the
/// certificates and the signing key in it, the shell's workspace in it too, and the runner's
/// forbidden folders as the planner lists them (`runner_from_config`: data_dir, tls.dir).
fn production_layout(f: &Fixture) -> (metnos_executors::Runner, std::path::PathBuf) {
    let data = f.home().join(".local/share/metnos");
    for dir in ["pki", "keys", "workspace", "turns"] {
        std::fs::create_dir_all(data.join(dir)).unwrap();
    }
    for (file, text) in [
        ("pki/owner.key", "-----BEGIN PRIVATE KEY----- the owner's"),
        ("keys/owner.key", "-----BEGIN PRIVATE KEY----- the signer's"),
        ("planner.db", "SQLite format 3 the conversations"),
        ("turns/2026-11-24.jsonl", "{\"query\": \"the diary\"}"),
        ("workspace/scratch.txt", "the shell's own"),
    ] {
        std::fs::write(data.join(file), text).unwrap();
    }
    let base = f.runner();
    let runner = metnos_executors::Runner {
        forbidden: vec![data.clone(), data.join("pki")],
        shell: metnos_executors::ShellSettings {
            workspace: data.join("workspace"),
            ..base.shell.clone()
        },
        ..base
    };
    (runner, data)
}

/// A runner whose shell allows `allow` (tests only: shells and launchers are refused by
/// the config, but here they stand for code that got past the argument rules).
fn shell_runner(f: &Fixture, allow: &[&str]) -> metnos_executors::Runner {
    let base = f.runner();
    metnos_executors::Runner {
        shell: metnos_executors::ShellSettings {
            allow: allow.iter().map(|p| (*p).to_owned()).collect(),
            ..base.shell.clone()
        },
        ..base
    }
}

async fn shell(
    runner: &metnos_executors::Runner,
    catalog: &Catalog,
    command: &str,
) -> metnos_executors::Observation {
    runner
        .check_and_run(catalog, "shell_exec", &json!({ "command": command }))
        .await
}
