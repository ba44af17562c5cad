//! Online and hybrid planning, and escalation to the wise tier.

use super::*;

fn steps_proposed(events: &[Event]) -> Vec<&pb::StepProposed> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::StepProposed(p) => Some(p),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn online_mode_plans_in_one_call_and_filters_each_parallel_call() {
    let s = stack().await;
    s.fake.push(tool_calls(&[
        ("time_now", json!({"timezone": "UTC"})),
        ("time_now", json!({"timezone": "Europe/Rome"})),
    ]));
    s.fake.push(Reply::Text("12:00 UTC, 13:00 in Rome".into()));
    let request = pb::RunTurnRequest {
        principal: Some(principal()),
        level: Full as i32,
        query: "what time is it in UTC and in Rome".into(),
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
    let events = until_end(&mut stream).await;
    // No wise tier is configured: online mode says which tier really answers.
    assert!(
        matches!(&events[0], Event::Started(st) if st.mode == pb::Mode::Online as i32
            && st.tier == "fast" && st.model == "qwen-test"),
        "{events:#?}"
    );
    assert!(steps_proposed(&events).iter().all(|p| p.tier == "fast"));
    assert_eq!(kind(&events), pb::FinalKind::Answer);
    let steps = steps_proposed(&events);
    assert_eq!(steps.len(), 2);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::Verdict(_)))
            .count(),
        2,
        "each call is judged"
    );
    // One call for the plan, one for the answer, which offers no tools.
    assert_eq!(s.fake.received().len(), 2);
    assert!(tool_names(&s.llm_request(1)).is_empty());
    assert_eq!(tool_messages(&s.llm_request(1)).len(), 2);
}

#[tokio::test]
async fn hybrid_mode_escalates_to_the_wise_tier_after_failures() {
    let s = hybrid_stack(("METNOS_TURNS__HYBRID_ESCALATE_AFTER_FAILURES", "1")).await;

    s.fake
        .push(tool_calls(&[("fs_read", json!({"path": "~/missing.txt"}))]));
    s.fake
        .push(tool_calls(&[("time_now", json!({"timezone": "UTC"}))]));
    s.fake.push(Reply::Text("no file, but it is noon".into()));
    let events = s.run("read ~/missing.txt", Full).await;
    assert_eq!(kind(&events), pb::FinalKind::Answer, "{events:#?}");
    let steps = steps_proposed(&events);
    assert_eq!(steps[0].tier, "fast");
    assert_eq!(steps[1].tier, "wise");
    assert_eq!(s.llm_request(0)["model"], "qwen-test");
    assert_eq!(s.llm_request(1)["model"], "big-test");
    let record: Value = serde_json::from_str(
        s.sandbox
            .run(&["turns", "show", &finished(&events).turn_id])
            .await
            .1
            .trim(),
    )
    .unwrap();
    assert_eq!(record["tiers"], json!(["fast", "wise"]));
    assert_eq!(record["models"], json!(["big-test", "qwen-test"]));
    assert_eq!(record["steps"][0]["validation"], "ok");
    assert_eq!(record["steps"][0]["scope"], "ok");
}

#[tokio::test]
async fn hybrid_mode_starts_wise_when_a_candidate_needs_a_listed_capability() {
    let s = hybrid_stack(("METNOS_TURNS__HYBRID_WISE_CAPABILITIES", "[\"code:exec\"]")).await;
    s.fake.push(Reply::Text("fine".into()));
    let events = s.run("run the command ls in the terminal", Full).await;
    assert!(
        matches!(&events[0], Event::Started(st) if st.tier == "wise" && st.model == "big-test"),
        "{events:#?}"
    );
    assert_eq!(s.llm_request(0)["model"], "big-test");
    s.fake.push(Reply::Text("it is noon".into()));
    let events = s.run("what time is it", Full).await;
    assert!(
        matches!(&events[0], Event::Started(st) if st.tier == "fast"),
        "{events:#?}"
    );
}
