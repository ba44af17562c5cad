//! Failures that end a turn cleanly, bad requests, and one turn as one trace.

use super::*;

#[tokio::test]
async fn failures_end_the_turn_cleanly_with_a_clear_message() {
    // The LLM cannot be reached.
    let s = stack_with(
        &[("METNOS_RUNTIME__LLM__FAST__BASE_URL", "http://127.0.0.1:9")],
        true,
    )
    .await;
    let events = s.run("what time is it", Full).await;
    assert_eq!(kind(&events), pb::FinalKind::Error);
    let text = &finished(&events).text;
    assert!(text.contains("the LLM (fast tier) failed"), "{events:#?}");
    // One sentence: no internal address, no OS error.
    assert!(
        !text.contains("127.0.0.1")
            && !text.contains(":9")
            && !text.to_lowercase().contains("refused"),
        "{text}"
    );

    // An empty catalog.
    let s = stack_with(&[], false).await;
    let events = s.run("what time is it", Full).await;
    assert_eq!(kind(&events), pb::FinalKind::Error);
    assert_eq!(
        finished(&events).text,
        "I have no tools to use: the executor catalog is empty."
    );

    // Policy, vaglio or approval unreachable: the step fails closed, nothing runs.
    let s = stack().await;
    for (dead, level) in [
        (metnos_kit::ServiceName::Policy, Full),
        (metnos_kit::ServiceName::Vaglio, Full),
        (metnos_kit::ServiceName::Approval, Supervised),
    ] {
        let (url, _planner) = lonely_planner(&s, dead);
        s.fake.push(tool_calls(&[(
            "fs_write",
            json!({"path": "~/d.txt", "content": "x"}),
        )]));
        let owner = common::tls_in(&s.up.pki, Identity::Owner);
        let channel = metnos_kit::client::channel(&owner, Identity::Planner, &url).unwrap();
        let mut planner = PlannerServiceClient::new(channel);
        let mut stream = planner
            .run_turn(pb::RunTurnRequest {
                principal: Some(principal()),
                level: level as i32,
                query: "write x to ~/d.txt".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let events = until_end(&mut stream).await;
        assert_eq!(kind(&events), pb::FinalKind::Error, "{dead}");
        // One sentence naming the service, never the transport's words or an address.
        let text = &finished(&events).text;
        let who = match dead {
            metnos_kit::ServiceName::Policy => "the policy service",
            metnos_kit::ServiceName::Vaglio => "the vaglio",
            _ => "the approval service",
        };
        assert_eq!(
            text,
            &format!("I cannot reach {who} right now, so I did nothing: please try again shortly."),
            "{dead}"
        );
        assert!(!s.home().join("d.txt").exists());
    }
}

/// A planner of its own, in this process, using the stack's services except `dead`,
/// whose address answers nothing.
fn lonely_planner(
    s: &Stack,
    dead: metnos_kit::ServiceName,
) -> (String, metnos_kit::runtime::ServiceThread) {
    let mut config =
        metnos_kit::testing::config(&s.sandbox.dir.path().join(format!("lonely-{dead}")));
    config.runtime.user_home = s.home();
    // The stack's installation: its CA and the planner's certificate.
    config.tls.dir = s.up.pki.clone();
    config.turns.cli_level = metnos_core::AutonomyLevel::Full;
    config.runtime.llm.insert(
        "fast".into(),
        metnos_kit::config::LlmTierConfig {
            provider: metnos_kit::config::LlmProvider::Ollama,
            model: "qwen-test".into(),
            base_url: s.fake.url().to_owned(),
            think: false,
            timeout_seconds: NonZero::new(30).unwrap(),
            api_key_env: String::new(),
            online: None,
        },
    );
    config.executors.catalog_dir = s.sandbox.data_dir().join("executors");
    config.executors.trusted_keys.insert(
        "owner".into(),
        s.sandbox.env["METNOS_EXECUTORS__TRUSTED_KEYS__OWNER"].clone(),
    );
    for service in [
        metnos_kit::ServiceName::Policy,
        metnos_kit::ServiceName::Vaglio,
        metnos_kit::ServiceName::Approval,
    ] {
        let url = if service == dead {
            "http://127.0.0.1:9".to_owned()
        } else {
            s.up.url(service.as_str())
        };
        config.set_service_url(service, url);
    }
    metnos_kit::runtime::spawn_on_loopback(
        metnos_kit::ServiceName::Planner,
        move |listener, shutdown| metnos_planner::serve(config, listener, shutdown),
    )
    .unwrap()
}

#[tokio::test]
async fn executors_that_crash_babble_or_were_changed_after_signing_are_observations() {
    let fake = FakeLlm::start().await;
    fake.keep_requests(true);
    let mut sandbox = Sandbox::new();
    sandbox
        .set("METNOS_TURNS__CLI_LEVEL", "Full")
        .set("METNOS_RUNTIME__LLM__FAST__PROVIDER", "ollama")
        .set("METNOS_RUNTIME__LLM__FAST__MODEL", "qwen-test")
        .set("METNOS_RUNTIME__LLM__FAST__BASE_URL", fake.url());
    let catalog = sandbox.data_dir().join("executors");
    for (name, body) in [
        ("crasher", "echo 'Traceback: boom' >&2; exit 1"),
        ("babbler", "echo 'Sure! here you go'"),
        ("changed", "printf '{\"ok\":true,\"content\":\"v1\"}'"),
    ] {
        let dir = catalog.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("run.sh"),
            format!("#!/bin/sh\ncat >/dev/null\n{body}\n"),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::write(
            dir.join("manifest.toml"),
            format!("name = \"{name}\"\ndescription = \"test {name}\"\ncapabilities = [\"time:read\"]\nprogram = \"run.sh\"\n[args]\ntype = \"object\"\n"),
        )
        .unwrap();
    }
    let key = metnos_executors::signing::generate().unwrap();
    metnos_executors::install::sign_dir(&catalog, &key, "owner", false).unwrap();
    sandbox.set(
        "METNOS_EXECUTORS__TRUSTED_KEYS__OWNER",
        &metnos_executors::signing::public_key_text(&key.verifying_key()),
    );
    let up = sandbox.up().await;
    let s = Stack { sandbox, up, fake };
    // Changed after the planner loaded (and so after signing).
    std::fs::write(
        catalog.join("changed/run.sh"),
        "#!/bin/sh\nprintf '{\"ok\":true,\"content\":\"evil\"}'\n",
    )
    .unwrap();

    s.fake.push(tool_calls(&[
        ("crasher", json!({})),
        ("babbler", json!({})),
        ("changed", json!({})),
    ]));
    s.fake.push(Reply::Text("all three failed".into()));
    let events = s.run("run the three", Full).await;
    assert_eq!(kind(&events), pb::FinalKind::Answer, "{events:#?}");
    let obs = observations(&events);
    assert!(obs.iter().all(|o| !o.ok));
    assert!(
        obs[0].summary.contains("crashed") && obs[0].summary.contains("Traceback: boom"),
        "{obs:?}"
    );
    assert!(obs[1].summary.contains("non-JSON output"), "{obs:?}");
    assert!(
        obs[2].summary.contains("does not match its signed digest"),
        "{obs:?}"
    );
    assert!(!obs.iter().any(|o| o.summary.contains("evil")));
}

#[tokio::test]
async fn bad_requests_are_refused_with_invalid_argument() {
    let s = stack().await;
    let mut planner = s.planner().await;
    let status = planner
        .run_turn(pb::RunTurnRequest {
            principal: Some(principal()),
            level: Full as i32,
            query: "  ".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(status.message(), "query is empty");
    let status = planner
        .run_turn(pb::RunTurnRequest {
            principal: Some(principal()),
            query: "hi".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.message(), "level is unspecified");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_turn_is_one_trace_across_planner_policy_vaglio_approval_and_the_executor() {
    let (collector, url, server) = common::otlp::start_collector().await;
    let s = stack_with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str())], true).await;
    s.fake.push(tool_calls(&[(
        "fs_write",
        json!({"path": "~/traced.txt", "content": "x"}),
    )]));
    s.fake.push(Reply::Text("done".into()));
    let mut stream = s.start("write x to ~/traced.txt", Supervised).await;
    let events = until_end(&mut stream).await;
    let Some(Event::AwaitingApproval(card)) = events.last() else {
        panic!("{events:#?}")
    };
    s.resolve(&card.token, approval::Decision::Approve).await;
    let rest = until_end(&mut stream).await;
    assert_eq!(kind(&rest), pb::FinalKind::Answer);
    drop(stream);
    // Stopping the stack flushes every service's spans.
    let (code, _) = s.up.interrupt().await;
    assert_eq!(code, 0);

    let spans = collector.spans.lock().unwrap().clone();
    let turn = spans
        .iter()
        .find(|r| r.span.name == "turn")
        .unwrap_or_else(|| {
            panic!(
                "no turn span among {:?}",
                spans.iter().map(|r| &r.span.name).collect::<Vec<_>>()
            )
        });
    let trace: Vec<&common::otlp::Received> = spans
        .iter()
        .filter(|r| r.span.trace_id == turn.span.trace_id)
        .collect();
    let services: std::collections::BTreeSet<&str> =
        trace.iter().map(|r| r.service.as_str()).collect();
    for service in [
        "metnos-planner",
        "metnos-policy",
        "metnos-vaglio",
        "metnos-approval",
    ] {
        assert!(
            services.contains(service),
            "{service} missing from the turn's trace: {services:?}"
        );
    }
    let executor = trace
        .iter()
        .find(|r| r.span.name == "executor")
        .expect("no executor span in the turn's trace");
    assert_eq!(executor.attr("executor").as_deref(), Some("fs_write"));
    // The person's decision, made by a call in a trace of its own, is a span of the turn's
    // trace too, linked to that call.
    let decision = trace
        .iter()
        .find(|r| r.span.name == "approval.decision")
        .expect("no decision span in the turn's trace");
    assert_eq!(decision.service, "metnos-approval");
    assert_eq!(decision.attr("decision").as_deref(), Some("approved"));
    assert_eq!(decision.attr("capability").as_deref(), Some("fs:write"));
    let resolve = spans
        .iter()
        .find(|r| {
            r.span.name.ends_with("ApprovalService/Resolve") && r.service == "metnos-approval"
        })
        .expect("no Resolve span");
    assert_ne!(
        resolve.span.trace_id, turn.span.trace_id,
        "the call came from outside the turn"
    );
    assert!(
        decision
            .span
            .links
            .iter()
            .any(|l| l.trace_id == resolve.span.trace_id && l.span_id == resolve.span.span_id),
        "the decision links the call that made it: {:?}",
        decision.span.links
    );
    // Names and codes only: no span of any service carries the call's values.
    for r in &spans {
        let shown = format!("{:?}", r.span);
        assert!(
            !shown.contains("traced.txt"),
            "{} span {} carries a value: {shown}",
            r.service,
            r.span.name
        );
    }
    server.abort();
}
