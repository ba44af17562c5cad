//! The runner: the subprocess protocol and everything that can go wrong in it.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

#[tokio::test]
async fn args_go_in_on_stdin_and_one_observation_comes_out() {
    let f = Fixture::new();
    f.script_executor(
        "echo_args",
        r#"args=$(cat); printf '{"ok":true,"content":%s,"metadata":{"n":1}}' "$args""#,
        "",
    );
    f.sign();
    let catalog = f.load();
    let o = f
        .run(
            &catalog,
            "echo_args",
            json!({"a": [1, "two"], "b": {"c": null}}),
        )
        .await;
    assert!(o.ok, "{o:?}");
    assert_eq!(o.content, Some(json!({"a": [1, "two"], "b": {"c": null}})));
    assert_eq!(meta(&o, "n"), &json!(1));
}

#[tokio::test]
async fn a_crash_is_reported_with_its_status_and_stderr_tail() {
    let f = Fixture::new();
    f.script_executor("crash", "echo 'Traceback: boom' >&2; exit 3", "");
    f.sign();
    let o = f.run(&f.load(), "crash", json!({})).await;
    let e = error(&o);
    assert!(e.starts_with("crash crashed (exit status: 3)"), "{e}");
    assert!(e.ends_with("stderr: Traceback: boom"), "{e}");
}

#[tokio::test]
async fn non_json_output_is_named_as_such() {
    let f = Fixture::new();
    f.script_executor("chatty", "echo 'Sure! Here is your file'", "");
    f.script_executor("two", r#"echo '{"ok":true}'; echo '{"ok":false}'"#, "");
    f.script_executor("not_obs", r#"echo '{"result": 1}'"#, "");
    f.sign();
    let catalog = f.load();
    let o = f.run(&catalog, "chatty", json!({})).await;
    assert_eq!(
        error(&o),
        "chatty: non-JSON output: `Sure! Here is your file`"
    );
    let o = f.run(&catalog, "two", json!({})).await;
    assert!(error(&o).contains("more than one JSON value"), "{o:?}");
    let o = f.run(&catalog, "not_obs", json!({})).await;
    assert!(error(&o).contains("no boolean `ok`"), "{o:?}");
}

#[tokio::test]
async fn output_over_the_cap_is_dropped_and_said() {
    let f = Fixture::new();
    f.script_executor(
        "flood",
        "i=0; while [ $i -lt 2000 ]; do printf 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'; i=$((i+1)); done",
        "max_output_bytes = 1000",
    );
    f.sign();
    let o = f.run(&f.load(), "flood", json!({})).await;
    assert!(
        error(&o).starts_with("flood wrote more than its output cap of 1000 bytes"),
        "{o:?}"
    );
}

fn alive(pid: u32) -> bool {
    // A zombie waiting for a parent that does not reap is as dead as it gets.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn a_timeout_kills_the_child_and_its_grandchildren() {
    let f = Fixture::new();
    f.script_executor(
        "hang",
        "sleep 300 & echo $! > \"$HOME/grandchild.pid\"; echo $$ > \"$HOME/child.pid\"; wait",
        "timeout_seconds = 1",
    );
    f.sign();
    let started = Instant::now();
    let o = f.run(&f.load(), "hang", json!({})).await;
    assert!(
        error(&o).contains("timed out after 1 s and was killed with its process group"),
        "{o:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    for file in ["child.pid", "grandchild.pid"] {
        let pid: u32 = std::fs::read_to_string(f.home().join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(pid) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive(pid), "{file} ({pid}) survived the timeout");
    }
}

#[tokio::test]
async fn the_child_sees_a_scrubbed_environment_in_its_own_process_group() {
    let f = Fixture::new();
    f.script_executor(
        "env_dump",
        r#"read -r stat < /proc/$$/stat; set -- ${stat##*) }; pgid=$3
printf '{"ok":true,"content":{"pgid":%s,"pid":%s,"env":"' "$pgid" "$$"
env | cut -d= -f1 | tr '\n' ' '
printf '"}}'"#,
        "",
    );
    f.sign();
    // The test process has plenty the child must not see (cargo's and the runner's own).
    let parent: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
    assert!(
        parent
            .iter()
            .any(|k| !["PATH", "HOME", "LANG", "PWD"].contains(&k.as_str()))
    );
    let o = f.run(&f.load(), "env_dump", json!({})).await;
    assert!(o.ok, "{o:?}");
    let content = o.content.unwrap();
    let seen: Vec<&str> = content["env"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .collect();
    for name in &seen {
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "METNOS_EXECUTOR_CONTEXT",
                "PWD",
                "SHLVL",
                "_",
                "OLDPWD"
            ]
            .contains(name),
            "the child saw {name}: {seen:?}"
        );
    }
    assert!(seen.contains(&"METNOS_EXECUTOR_CONTEXT"));
    assert_eq!(
        content["pgid"], content["pid"],
        "not in its own process group"
    );
    assert_ne!(content["pgid"], json!(std::process::id()));
}

#[tokio::test]
async fn ok_true_with_a_failing_status_is_not_believed() {
    let f = Fixture::new();
    f.script_executor("liar", r#"printf '{"ok":true}'; exit 1"#, "");
    f.script_executor(
        "honest",
        r#"printf '{"ok":false,"error":"no such thing"}'; exit 2"#,
        "",
    );
    f.sign();
    let catalog = f.load();
    let o = f.run(&catalog, "liar", json!({})).await;
    assert!(
        error(&o).starts_with("liar reported ok but exit status: 1"),
        "{o:?}"
    );
    let o = f.run(&catalog, "honest", json!({})).await;
    assert_eq!(error(&o), "no such thing");
}
