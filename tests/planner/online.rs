//! Where an online LLM may be called after a private read, and the judge's order.

use super::*;

/// A turn in online mode (the wise tier plans) at `level`.
async fn run_online(s: &Stack, query: &str, level: common_pb::AutonomyLevel) -> Vec<Event> {
    let request = pb::RunTurnRequest {
        principal: Some(principal()),
        level: level as i32,
        query: query.into(),
        language: common_pb::Language::English as i32,
        mode: pb::Mode::Online as i32,
        forwarded: false,
        thread: pb::Thread::Unspecified as i32,
        thread_id: String::new(),
    };
    let mut stream = s
        .planner()
        .await
        .run_turn(request)
        .await
        .unwrap()
        .into_inner();
    until_end(&mut stream).await
}

fn paths(s: &Stack) -> Vec<String> {
    s.fake.received().into_iter().map(|r| r.path).collect()
}

#[tokio::test]
async fn an_online_llm_is_called_only_where_policy_allows_it_else_a_local_tier_answers() {
    // fast: a local Ollama; wise: Anthropic (online, an outgoing cost), both the fake.
    let s = stack_with(
        &[
            ("METNOS_RUNTIME__LLM__WISE__PROVIDER", "anthropic"),
            ("METNOS_RUNTIME__LLM__WISE__MODEL", "claude-test"),
            ("METNOS_RUNTIME__LLM__WISE__BASE_URL", "{llm}"),
            ("METNOS_RUNTIME__LLM__WISE__API_KEY_ENV", "HOME"),
        ],
        true,
    )
    .await;
    // ReadOnly never calls it (the seed: "never online LLM"); Supervised only with a grant.
    for level in [ReadOnly, Supervised] {
        let before = s.fake.received().len();
        s.fake.push(Reply::Text("from the local model".into()));
        let events = run_online(&s, "hello", level).await;
        assert_eq!(
            finished(&events).text,
            "from the local model",
            "{events:#?}"
        );
        assert_eq!(paths(&s)[before..], ["/api/chat"], "{level:?}");
    }
    // Full allows it.
    s.fake.push(Reply::Text("from the online model".into()));
    let events = run_online(&s, "hello", Full).await;
    assert_eq!(finished(&events).text, "from the online model");
    assert_eq!(paths(&s).last().unwrap(), "/v1/messages");
    // At Supervised, a grant on the provider's host is the person's standing yes.
    let (status, _, stderr) = s
        .sandbox
        .run(&[
            "grants",
            "add",
            "--channel",
            "cli",
            "--sender",
            "alice",
            "llm:online",
            "127.0.0.1",
        ])
        .await;
    assert_eq!(status, 0, "{stderr}");
    s.fake.push(Reply::Text("granted online".into()));
    let events = run_online(&s, "hello", Supervised).await;
    assert_eq!(finished(&events).text, "granted online");
    assert_eq!(paths(&s).last().unwrap(), "/v1/messages");
}

#[tokio::test]
async fn a_hybrid_turn_that_read_a_file_does_not_escalate_to_an_online_model() {
    // fast: a local Ollama; wise: Anthropic (online), which Full allows; one failure escalates.
    let s = stack_with(
        &[
            ("METNOS_RUNTIME__MODE", "hybrid"),
            ("METNOS_RUNTIME__LLM__WISE__PROVIDER", "anthropic"),
            ("METNOS_RUNTIME__LLM__WISE__MODEL", "claude-test"),
            ("METNOS_RUNTIME__LLM__WISE__BASE_URL", "{llm}"),
            ("METNOS_RUNTIME__LLM__WISE__API_KEY_ENV", "HOME"),
            ("METNOS_TURNS__HYBRID_ESCALATE_AFTER_FAILURES", "1"),
        ],
        true,
    )
    .await;
    std::fs::write(s.home().join("salary.txt"), "net 4,210 EUR").unwrap();
    // Without a private read, the failure escalates online (the control). (A failed read
    // of a local file counts as a read: its error tells something of the file.)
    s.fake.push(tool_calls(&[(
        "time_now",
        json!({"timezone": "Mars/Olympus_Mons"}),
    )]));
    s.fake.push(Reply::Text("no such zone".into()));
    let events = s.run("what time is it on Mars", Full).await;
    assert_eq!(finished(&events).text, "no such zone", "{events:#?}");
    assert_eq!(paths(&s), ["/api/chat", "/v1/messages"]);
    // After reading a file, the same failure keeps the turn (and the file) local.
    let before = paths(&s).len();
    s.fake
        .push(tool_calls(&[("fs_read", json!({"path": "~/salary.txt"}))]));
    s.fake
        .push(tool_calls(&[("fs_read", json!({"path": "~/missing.txt"}))]));
    s.fake
        .push(Reply::Text("your salary is in the file".into()));
    let events = s.run("read ~/salary.txt and ~/missing.txt", Full).await;
    assert_eq!(
        finished(&events).text,
        "your salary is in the file",
        "{events:#?}"
    );
    assert_eq!(paths(&s)[before..], ["/api/chat", "/api/chat", "/api/chat"]);
    let online: Vec<String> = s
        .fake
        .received()
        .into_iter()
        .filter(|r| r.path == "/v1/messages")
        .map(|r| r.body.to_string())
        .collect();
    assert!(
        online.iter().all(|body| !body.contains("4,210")),
        "{online:?}"
    );
}

/// Seventeenth review of issue 38: a hybrid turn with no local tier sent the file it read
/// to the online model its fast tier is.
#[tokio::test]
async fn a_hybrid_turn_with_no_local_tier_ends_after_a_private_read() {
    let s = stack_with(
        &[
            ("METNOS_RUNTIME__MODE", "hybrid"),
            ("METNOS_RUNTIME__LLM__FAST__PROVIDER", "anthropic"),
            ("METNOS_RUNTIME__LLM__FAST__API_KEY_ENV", "HOME"),
        ],
        true,
    )
    .await;
    std::fs::write(s.home().join("salary.txt"), "net 4,210 EUR").unwrap();
    s.fake
        .push(tool_calls(&[("fs_read", json!({"path": "~/salary.txt"}))]));
    s.fake.push(Reply::Text("your salary is 4,210".into()));
    let events = s.run("read ~/salary.txt", Full).await;
    assert_eq!(kind(&events), pb::FinalKind::Error, "{events:#?}");
    let text = &finished(&events).text;
    assert!(
        text.contains("in hybrid mode what I read goes to no online model")
            && text.contains("no local model is set up"),
        "{text}"
    );
    let sent: Vec<String> = s
        .fake
        .received()
        .into_iter()
        .map(|r| r.body.to_string())
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent.iter().all(|body| !body.contains("4,210")), "{sent:?}");
}

#[tokio::test]
async fn with_only_an_online_llm_a_read_only_turn_ends_saying_why_and_calls_nothing() {
    let s = stack_with(
        &[
            ("METNOS_RUNTIME__LLM__FAST__PROVIDER", "anthropic"),
            ("METNOS_RUNTIME__LLM__FAST__API_KEY_ENV", "HOME"),
        ],
        true,
    )
    .await;
    let events = s.run("hello", ReadOnly).await;
    assert_eq!(kind(&events), pb::FinalKind::Error);
    let text = &finished(&events).text;
    assert!(
        text.contains(
            "I did not ask the online model at 127.0.0.1 (policy: llm:online is denied at ReadOnly)"
        ) && text.contains("no local model is set up")
            && text.contains("metnos grants add --channel cli --sender alice llm:online 127.0.0.1"),
        "{text}"
    );
    assert!(s.fake.received().is_empty(), "nothing was sent online");
}

/// Third review of issue 38: a local turn that read a file kept its planner local, but the
/// guard's online judge was sent the next call's arguments (which may hold the file).
#[tokio::test]
async fn after_a_private_read_a_local_turns_judge_is_not_an_online_llm() {
    let s = stack_with(
        &[
            ("METNOS_VAGLIO__JUDGE__KIND", "llm-v1"),
            ("METNOS_RUNTIME__LLM__MIDDLE__PROVIDER", "anthropic"),
            ("METNOS_RUNTIME__LLM__MIDDLE__MODEL", "judge-test"),
            ("METNOS_RUNTIME__LLM__MIDDLE__BASE_URL", "{llm}"),
            ("METNOS_RUNTIME__LLM__MIDDLE__API_KEY_ENV", "HOME"),
        ],
        true,
    )
    .await;
    std::fs::write(s.home().join("salary.txt"), "net 4,210 EUR").unwrap();
    s.fake
        .push(tool_calls(&[("fs_read", json!({"path": "~/salary.txt"}))]));
    s.fake.push(Reply::Json(
        json!({"score": 0.9, "rationale": "asked to read it"}),
    ));
    s.fake
        .push(tool_calls(&[("time_now", json!({"timezone": "UTC"}))]));
    s.fake.push(Reply::Text("read; it is noon".into()));
    let events = s.run("read ~/salary.txt and tell me the time", Full).await;
    assert_eq!(finished(&events).text, "read; it is noon", "{events:#?}");
    let verdicts: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Verdict(v) => v.verdict.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(verdicts.len(), 2, "{verdicts:#?}");
    assert_eq!(verdicts[0].judge_kind, "llm-v1");
    assert_eq!(verdicts[1].judge_kind, "llm-v1-fallback-rule");
    assert!(
        verdicts[1]
            .reason
            .contains("online judge at 127.0.0.1 not called: this local turn read private data"),
        "{}",
        verdicts[1].reason
    );
    let online = paths(&s).iter().filter(|p| *p == "/v1/messages").count();
    assert_eq!(online, 1, "{:?}", paths(&s));
}

#[tokio::test]
async fn the_online_llm_judge_asks_policy_first_and_the_vaglio_is_not_asked_about_a_denied_call() {
    let s = stack_with(
        &[
            ("METNOS_VAGLIO__JUDGE__KIND", "llm-v1"),
            ("METNOS_RUNTIME__LLM__MIDDLE__PROVIDER", "anthropic"),
            ("METNOS_RUNTIME__LLM__MIDDLE__MODEL", "judge-test"),
            ("METNOS_RUNTIME__LLM__MIDDLE__BASE_URL", "{llm}"),
            ("METNOS_RUNTIME__LLM__MIDDLE__API_KEY_ENV", "HOME"),
        ],
        true,
    )
    .await;
    // ReadOnly: the judge's provider is online, policy says no: the rules judge.
    s.fake
        .push(tool_calls(&[("time_now", json!({"timezone": "UTC"}))]));
    s.fake.push(Reply::Text("noon".into()));
    let events = s.run("what time is it", ReadOnly).await;
    let verdict = events
        .iter()
        .find_map(|e| match e {
            Event::Verdict(v) => v.verdict.clone(),
            _ => None,
        })
        .expect("a verdict");
    assert_eq!(verdict.judge_kind, "llm-v1-fallback-rule");
    assert!(
        verdict.reason.contains(
            "online judge at 127.0.0.1 not called: policy: llm:online is denied at ReadOnly"
        ),
        "{}",
        verdict.reason
    );
    assert!(
        !paths(&s).iter().any(|p| p == "/v1/messages"),
        "{:?}",
        paths(&s)
    );
    // Full: the judge is asked.
    s.fake
        .push(tool_calls(&[("time_now", json!({"timezone": "UTC"}))]));
    s.fake.push(Reply::Json(
        json!({"score": 0.9, "rationale": "asked for the time"}),
    ));
    s.fake.push(Reply::Text("noon".into()));
    let events = s.run("what time is it", Full).await;
    assert_eq!(kind(&events), pb::FinalKind::Answer, "{events:#?}");
    assert!(paths(&s).iter().any(|p| p == "/v1/messages"));

    // A call the table denies (ReadOnly x fs:write) is not judged at all: no verdict, and
    // no line in the vaglio's log (a later judged call's line comes right after the two
    // above, so the log is not just slow).
    async fn log_lines(s: &Stack) -> usize {
        let (_, out, _) = s.sandbox.run(&["vaglio", "log"]).await;
        out.lines().filter(|l| !l.trim().is_empty()).count()
    }
    let deadline = std::time::Instant::now() + EVENT_LIMIT;
    while log_lines(&s).await < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the two verdicts were never logged"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.fake.push(tool_calls(&[(
        "fs_write",
        json!({"path": "~/denied.txt", "content": "x"}),
    )]));
    s.fake.push(Reply::Text("could not".into()));
    let events = s.run("write x to ~/denied.txt", ReadOnly).await;
    assert!(
        !events.iter().any(|e| matches!(e, Event::Verdict(_))),
        "{events:#?}"
    );
    assert!(events.iter().any(|e| matches!(e, Event::PolicyOutcome(p)
        if p.outcome == policy::Outcome::Denied as i32)));
    assert!(!s.home().join("denied.txt").exists());
    s.fake
        .push(tool_calls(&[("time_now", json!({"timezone": "UTC"}))]));
    s.fake.push(Reply::Text("noon".into()));
    s.run("what time is it", ReadOnly).await;
    while log_lines(&s).await < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the third verdict was never logged"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(log_lines(&s).await, 3, "the denied call was not judged");
}
