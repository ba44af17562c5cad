//! `metnos schedules` with the whole stack (`metnos up`) and the fake LLM: the owner's
//! standing order is added with its schedule in words and its next firings, refused with a
//! clear reason when it cannot be read or fires too often, fired on demand as a real turn
//! (its tool calls through the filters), its result kept by the telos engine's consent
//! rules, paused, resumed and deleted; the builtin maintenance tasks are listed beside it.

mod common;

use std::time::Duration;

use common::Sandbox;
use metnos_llm::fake::{FakeLlm, Reply};
use serde_json::{Value, json};

/// A bound on waiting for the firing: a hang guard, not a performance assertion.
const LIMIT: Duration = Duration::from_secs(60);

async fn list(sandbox: &Sandbox) -> Vec<Value> {
    let (code, out, err) = sandbox.run(&["schedules", "list", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn find<'a>(all: &'a [Value], id: &str) -> &'a Value {
    all.iter().find(|s| s["id"] == id).unwrap()
}

#[tokio::test]
async fn the_owners_standing_order_is_added_fired_paused_and_deleted() {
    let fake = FakeLlm::start().await;
    fake.keep_requests(true);
    let mut sandbox = Sandbox::new();
    sandbox
        .with_fake_llm(fake.url())
        .with_builtins()
        .set("METNOS_SCHEDULER__TICK_SECONDS", "1")
        .set("METNOS_TELOS__TIME_ZONE", "Europe/Rome")
        .set("METNOS_TELOS__PROTECTED_WINDOWS", "[]");
    let _up = sandbox.up().await;

    // Unreadable, and too often: refused with what is wrong, nothing stored.
    let (code, _, err) = sandbox
        .run(&["schedules", "add", "tomorrow morning", "what time is it?"])
        .await;
    assert_eq!(code, 1);
    assert!(err.contains("daily@HH:MM") && err.contains("cron"), "{err}");
    let (code, _, err) = sandbox
        .run(&["schedules", "add", "*/5 * * * *", "what time is it?"])
        .await;
    assert_eq!(code, 1);
    assert!(err.contains("at most every 15 minutes"), "{err}");

    let (code, out, err) = sandbox
        .run(&[
            "schedules",
            "add",
            "daily@08:00",
            "what time is it?",
            "--name",
            "morning clock",
        ])
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("every day at 08:00 (Europe/Rome)"), "{out}");
    assert!(out.contains("next: ") && out.contains("08:00, "), "{out}");
    let id = out.split_whitespace().next().unwrap().to_owned();
    assert!(id.starts_with("so-"), "{out}");

    let all = list(&sandbox).await;
    let order = find(&all, &id);
    assert_eq!(order["state"], "active");
    assert_eq!(order["name"], "morning clock");
    assert_eq!(order["next"].as_array().unwrap().len(), 3);
    for builtin in [
        "builtin:turn_log_retention.",
        "builtin:scratchpad_prune",
        "builtin:thread_retention",
        "builtin:apply_ager",
        "builtin:synt_suggest",
    ] {
        assert!(
            all.iter()
                .any(|s| s["id"].as_str().unwrap().starts_with(builtin)
                    && s["kind"] == "maintenance"),
            "{builtin}: {all:?}"
        );
    }

    // Fired now: a real turn, its call filtered, its answer kept (the terminal has no
    // channel to push to; the telos engine let the consented firing through).
    fake.push(Reply::ToolCalls(vec![(
        "time_now".into(),
        json!({"timezone": "UTC"}),
    )]));
    fake.push(Reply::Text("It is eight o'clock".into()));
    let (code, _, err) = sandbox.run(&["schedules", "run", &id]).await;
    assert_eq!(code, 0, "{err}");
    let deadline = tokio::time::Instant::now() + LIMIT;
    let order = loop {
        let all = list(&sandbox).await;
        let order = find(&all, &id).clone();
        if order["last_status"] == "ok" || order["last_status"] == "error" {
            break order;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never fired: {order}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(order["last_status"], "ok", "{order}");
    let output = order["last_output"].as_str().unwrap();
    assert!(output.contains("It is eight o'clock"), "{output}");
    assert!(output.contains("kept for `metnos schedules`"), "{output}");
    // The turn asked the model twice (the call, the answer); the telos engine never did.
    let chats = fake
        .received()
        .iter()
        .filter(|r| r.path.ends_with("/chat"))
        .count();
    assert_eq!(chats, 2);
    // Its cadence goes on: the next firing is still a morning.
    assert!(
        order["next"][0].as_str().unwrap().contains("T07:00:00")
            || order["next"][0].as_str().unwrap().contains("T06:00:00"),
        "{order}"
    );

    // Paused: no next firing; resumed: firing again; deleted: gone, builtins stay.
    let (code, out, _) = sandbox.run(&["schedules", "pause", &id]).await;
    assert_eq!(code, 0);
    assert!(out.contains("[paused]"), "{out}");
    assert!(
        find(&list(&sandbox).await, &id)["next"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let (code, out, _) = sandbox.run(&["schedules", "resume", &id]).await;
    assert_eq!(code, 0);
    assert!(out.contains("[active]") && out.contains("next: "), "{out}");
    let (code, _, err) = sandbox
        .run(&["schedules", "delete", "builtin:scratchpad_prune"])
        .await;
    assert_eq!(code, 1);
    assert!(err.contains("maintenance task"), "{err}");
    let (code, _, _) = sandbox.run(&["schedules", "delete", &id]).await;
    assert_eq!(code, 0);
    let all = list(&sandbox).await;
    assert!(all.iter().all(|s| s["id"] != id.as_str()));
    let (code, _, err) = sandbox.run(&["schedules", "run", &id]).await;
    assert_eq!(code, 1);
    assert!(err.contains("no schedule"), "{err}");
}
