//! One message, one trace (issue 41): a message that asks for approval, and the person's
//! answer, are one trace in Jaeger on every channel. Before, the terminal's GetPending and
//! Resolve, and a Telegram click, each began a trace of their own (the decision's span was
//! only linked to the turn's). Each service's spans carry its own name.

mod common;

use std::collections::BTreeSet;

use common::otlp::{Received, start_collector};
use common::telegram::{FakeTelegram, TOKEN, user};
use metnos_llm::fake::{FakeLlm, Reply};
use serde_json::json;

const ADA: i64 = 4242;

fn trace_of(r: &Received) -> String {
    hex(&r.span.trace_id)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The spans named `name` emitted by `service`.
fn named<'a>(spans: &'a [Received], service: &str, name: &str) -> Vec<&'a Received> {
    spans
        .iter()
        .filter(|r| r.service == service && r.span.name == name)
        .collect()
}

/// The one turn's trace: that of the planner's RunTurn server span (there is one turn).
fn the_turn(spans: &[Received]) -> String {
    let turns = named(
        spans,
        "metnos-planner",
        "metnos.planner.v1.PlannerService/RunTurn",
    );
    let traces: BTreeSet<String> = turns.iter().map(|r| trace_of(r)).collect();
    assert_eq!(traces.len(), 1, "one turn, one trace: {turns:?}");
    traces.into_iter().next().unwrap()
}

/// Every span of `service` named `name` is in `trace`, and there is at least one.
fn all_in(spans: &[Received], service: &str, name: &str, trace: &str) {
    let found = named(spans, service, name);
    assert!(!found.is_empty(), "no {name} span of {service}");
    for span in found {
        assert_eq!(
            trace_of(span),
            trace,
            "{service} {name} in a trace of its own"
        );
    }
}

fn write_call() -> Reply {
    Reply::ToolCalls(vec![(
        "fs_write".to_owned(),
        json!({"path": "~/traced.txt", "content": "one trace"}),
    )])
}

#[tokio::test]
async fn the_terminal_s_answer_to_a_card_is_in_the_turn_s_trace() {
    let (collector, url, server) = start_collector().await;
    let llm = FakeLlm::start().await;
    let mut sandbox = common::Sandbox::new();
    sandbox
        .with_fake_llm(llm.url())
        .with_builtins()
        .set("OTEL_EXPORTER_OTLP_ENDPOINT", &url);
    let up = sandbox.up().await;
    llm.push(write_call());
    llm.push(Reply::Text("Written.".into()));
    let asked = [
        "ask",
        "--language",
        "en",
        "write 'one trace' to ~/traced.txt",
    ];
    let output = sandbox.run_with_input(&asked, b"y\n").await;
    let stdout = String::from_utf8_lossy(&output.stdout);

    assert!(stdout.contains("Written."), "{stdout}");
    assert!(sandbox.dir.path().join("traced.txt").exists());
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    let spans = collector.spans.lock().unwrap().clone();
    let turn = the_turn(&spans);
    // The terminal's questions about the card and its answer, the decision, and the
    // planner's own calls: one trace, each under its own service.
    for name in [
        "metnos.approval.v1.ApprovalService/GetPending",
        "metnos.approval.v1.ApprovalService/Resolve",
        "metnos.approval.v1.ApprovalService/CreatePending",
        "approval.decision",
    ] {
        all_in(&spans, "metnos-approval", name, &turn);
    }
    all_in(
        &spans,
        "metnos-vaglio",
        "metnos.vaglio.v1.VaglioService/Judge",
        &turn,
    );
    server.abort();
}

#[tokio::test]
async fn a_telegram_click_on_a_card_is_in_the_turn_s_trace() {
    let (collector, url, server) = start_collector().await;
    let llm = FakeLlm::start().await;
    let tg = FakeTelegram::start();
    let mut sandbox = common::Sandbox::new();
    sandbox
        .with_fake_llm(llm.url())
        .with_builtins()
        .set("OTEL_EXPORTER_OTLP_ENDPOINT", &url)
        .set("METNOS_TELEGRAM_TOKEN", TOKEN)
        .set("METNOS_TELEGRAM__API_URL", &tg.url())
        .set("METNOS_TELEGRAM__POLL_TIMEOUT_SECONDS", "1");
    let up = sandbox.up().await;
    common::telegram::pair(&sandbox, &tg, ADA, "supervised").await;
    llm.push(write_call());
    llm.push(Reply::Text("Written.".into()));
    tg.message(
        ADA,
        user(ADA, "Ada", "en"),
        "write 'one trace' to ~/traced.txt",
    );
    let is_card = |c: &common::telegram::Call| !c.body["reply_markup"].is_null();
    tg.until("a card", |tg| tg.calls("sendMessage").iter().any(is_card))
        .await;
    let card = tg.calls("sendMessage").into_iter().find(is_card).unwrap();
    let approve = card.body["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        .as_str()
        .unwrap()
        .to_owned();
    let message = tg.message_id_of(&card).unwrap();
    tg.click(ADA, message, user(ADA, "Ada", "en"), &approve);
    tg.until("the answer", |tg| {
        tg.texts_to(ADA).iter().any(|t| t == "Written.")
    })
    .await;
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    let spans = collector.spans.lock().unwrap().clone();
    let turn = the_turn(&spans);
    // The message and the click are the gateway's spans of the turn's trace; the click's
    // Resolve reaches the approval service in it, and the decision with it.
    all_in(&spans, "metnos-gateway", "telegram.click", &turn);
    let messages: Vec<String> = named(&spans, "metnos-gateway", "telegram.message")
        .iter()
        .map(|r| trace_of(r))
        .collect();
    assert!(
        messages.contains(&turn),
        "the message's span starts the turn's trace"
    );
    for name in [
        "metnos.approval.v1.ApprovalService/Resolve",
        "metnos.approval.v1.ApprovalService/CreatePending",
        "approval.decision",
    ] {
        all_in(&spans, "metnos-approval", name, &turn);
    }
    // The gateway's own calls for the click too: the decision sent (only a click resolves),
    // and the card looked up (the card sweep, on its own timer, looks cards up in traces of
    // its own).
    all_in(
        &spans,
        "metnos-gateway",
        "metnos.approval.v1.ApprovalService/Resolve",
        &turn,
    );
    let looked_up = named(
        &spans,
        "metnos-gateway",
        "metnos.approval.v1.ApprovalService/GetPending",
    );
    assert!(
        looked_up.iter().any(|r| trace_of(r) == turn),
        "the click's GetPending in a trace of its own: {looked_up:?}"
    );
    server.abort();
}
