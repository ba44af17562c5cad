//! What `metnos up` says: the five addresses, one line per LLM tier (checked at start,
//! never stopping the stack), one ready line; its logs in a file per day, stderr kept for
//! warnings unless `--verbose`; a provider setting that can never work stops it.

mod common;

use std::process::Stdio;

use common::{START_LIMIT, Sandbox, signal};
use metnos_llm::fake::FakeLlm;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

/// Runs `metnos up <args>` until its ready line, then Ctrl-C: (stdout lines, stderr, exit code).
async fn up_until_ready(sandbox: &Sandbox, args: &[&str]) -> (Vec<String>, String, i32) {
    let mut child = sandbox
        .metnos()
        .arg("up")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut out = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let ready = line.starts_with("ready:");
            out.push(line);
            if ready {
                break;
            }
        }
    };
    tokio::time::timeout(START_LIMIT, read)
        .await
        .expect("metnos up printed its ready line in time");
    signal(&child, "INT").await;
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    let code = child.wait().await.unwrap().code().unwrap_or(-1);
    (out, stderr, code)
}

#[tokio::test]
async fn up_says_where_each_service_is_how_each_tier_is_and_that_it_is_ready() {
    let fake = FakeLlm::start().await;
    let mut sandbox = Sandbox::new();
    sandbox.with_fake_llm(fake.url());
    // A second tier whose model is not there, a third whose key variable is not set.
    sandbox
        .set("METNOS_RUNTIME__LLM__MIDDLE__PROVIDER", "ollama")
        .set("METNOS_RUNTIME__LLM__MIDDLE__MODEL", "qwen3:32b")
        .set("METNOS_RUNTIME__LLM__MIDDLE__BASE_URL", fake.url())
        .set("METNOS_RUNTIME__LLM__WISE__PROVIDER", "anthropic")
        .set("METNOS_RUNTIME__LLM__WISE__MODEL", "claude-sonnet-4-5")
        .set(
            "METNOS_RUNTIME__LLM__WISE__API_KEY_ENV",
            "METNOS_TEST_NO_SUCH_KEY",
        )
        .set("METNOS_TELEMETRY__LOG", "info");
    let (out, stderr, code) = up_until_ready(&sandbox, &[]).await;
    assert_eq!(code, 0, "{stderr}");
    let names: Vec<&str> = out[..5]
        .iter()
        .map(|l| l.split_once(' ').unwrap().0)
        .collect();
    assert_eq!(
        names,
        ["policy", "vaglio", "approval", "planner", "gateway"]
    );
    assert_eq!(
        out[5],
        format!("fast tier: ready (qwen-test on ollama at {})", fake.url())
    );
    assert_eq!(
        out[6],
        format!(
            "middle tier: ollama at {} has no model qwen3:32b (it has qwen3:8b, qwen-test) — `ollama pull qwen3:32b`, or set [runtime.llm.middle] model to one it has",
            fake.url()
        )
    );
    assert!(
        out[7].starts_with("wise tier: METNOS_TEST_NO_SUCH_KEY is not set"),
        "{out:?}"
    );
    let logs = sandbox.data_dir().join("logs");
    assert_eq!(
        out[8],
        format!(
            "ready: Telegram off (no bot token); logs in {}; try: metnos ask \"what time is it\"",
            logs.display()
        )
    );
    assert_eq!(out.len(), 9, "nothing else: {out:?}");
    assert!(fake.received().is_empty(), "no chat call was made to check");

    // Quiet: the info lines went to the file, none to the terminal.
    assert!(!stderr.contains(" INFO "), "{stderr}");
    let files: Vec<_> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("metnos.") && name.ends_with(".log"),
        "{name}"
    );
    let log = std::fs::read_to_string(&files[0]).unwrap();
    assert!(
        log.contains(" INFO ") && log.contains("metnos is up"),
        "{log}"
    );
    assert!(!log.contains("\u{1b}["), "no colour codes in the file");

    // --verbose: the same lines on stderr too.
    let (_, stderr, code) = up_until_ready(&sandbox, &["--verbose"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(" INFO ") && stderr.contains("metnos is up"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_provider_setting_that_can_never_work_stops_up_like_any_bad_key() {
    let mut sandbox = Sandbox::new();
    sandbox
        .set("METNOS_RUNTIME__LLM__FAST__PROVIDER", "anthropic")
        .set("METNOS_RUNTIME__LLM__FAST__MODEL", "claude-sonnet-4-5");
    let (code, stdout, stderr) = sandbox.run(&["up"]).await;
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("config key `runtime.llm.fast.api_key_env`: anthropic needs a key"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "nothing started: {stdout}");
    assert!(!sandbox.data_dir().join("metnos-up.json").exists());
}

#[tokio::test]
async fn status_has_a_row_per_llm_tier_and_one_for_the_sandbox() {
    let fake = FakeLlm::start().await;
    fake.set_models(&["qwen-test"]);
    let mut sandbox = Sandbox::new();
    sandbox.with_fake_llm(fake.url());
    sandbox
        .set("METNOS_RUNTIME__LLM__WISE__PROVIDER", "openai")
        .set("METNOS_RUNTIME__LLM__WISE__MODEL", "gpt-oss-120b")
        .set("METNOS_RUNTIME__LLM__WISE__BASE_URL", fake.url());
    let up = sandbox.up().await;
    let (code, stdout, stderr) = sandbox.run(&["status"]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let row = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} row: {stdout}"))
            .to_owned()
    };
    let fast = row("llm:fast");
    assert!(
        fast.contains(fake.url()) && fast.trim_end().ends_with("READY"),
        "{fast}"
    );
    // Not listed by an OpenAI-compatible server: a warning, with what to do.
    let wise = row("llm:wise");
    assert!(
        wise.contains(" WARN (wise tier:") && wise.contains("has no model gpt-oss-120b"),
        "{wise}"
    );
    let boxed = row("sandbox");
    assert!(boxed.contains(&up.url("planner")), "{boxed}");
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
}
