//! The seed's examples, fetching and piping, the scratchpad, the caps and the budget.

use super::*;

#[tokio::test]
async fn the_seeds_diary_example_reads_the_tail_and_answers() {
    let s = stack().await;
    std::fs::create_dir_all(s.home().join("notes")).unwrap();
    std::fs::write(
        s.home().join("notes/diary.md"),
        "monday: rain\ntuesday: sun\nwednesday: wind\n",
    )
    .unwrap();
    s.fake.push(tool_calls(&[(
        "fs_read",
        json!({"path": "~/notes/diary.md", "tail_bytes": 200}),
    )]));
    s.fake.push(Reply::Text(
        "monday: rain\ntuesday: sun\nwednesday: wind".into(),
    ));
    let events = s
        .run(
            "read the file ~/notes/diary.md and tell me the last three lines",
            Full,
        )
        .await;

    assert!(
        matches!(&events[0], Event::Started(st) if st.tier == "fast" && st.model == "qwen-test")
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::StepProposed(p) if p.executor == "fs_read"))
    );
    assert!(events.iter().any(
        |e| matches!(e, Event::PolicyOutcome(p) if p.outcome == policy::Outcome::Allowed as i32)
    ));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Verdict(v) if v.verdict.as_ref().unwrap().approved))
    );
    assert!(observations(&events)[0].ok);
    assert_eq!(kind(&events), pb::FinalKind::Answer);
    assert_eq!(
        finished(&events).text,
        "monday: rain\ntuesday: sun\nwednesday: wind"
    );
    // The pre-filter offered fs_read; the LLM saw the file's lines as the observation.
    assert!(tool_names(&s.llm_request(0)).contains(&"fs_read".to_owned()));
    let results = tool_messages(&s.llm_request(1));
    assert!(
        results[0].contains("wednesday: wind") && results[0].contains("\"step\":1"),
        "{results:?}"
    );

    // The turn log keeps keys and decisions, not values.
    let turn_id = finished(&events).turn_id.clone();
    let (code, stdout, stderr) = s.sandbox.run(&["turns", "show", &turn_id]).await;
    assert_eq!(code, 0, "{stderr}");
    let record: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(record["final_kind"], "answer");
    assert_eq!(record["steps"][0]["executor"], "fs_read");
    assert_eq!(
        record["steps"][0]["arg_keys"],
        json!(["path", "tail_bytes"])
    );
    assert_eq!(record["steps"][0]["policy"], "allowed");
    // Policy's reason, as labels: the level, the capability, the outcome.
    let why = record["steps"][0]["policy_reason"].as_str().unwrap();
    assert!(why.ends_with(" x fs:read = allowed"), "{why}");
    // Where the observation came from, as a label; never what it said.
    assert_eq!(
        record["steps"][0]["labels"],
        json!(["file:~/notes/diary.md"])
    );
    assert!(!stdout.contains("wednesday"), "{stdout}");
    // The LLM saw the file inside the turn's fence, labelled.
    assert!(
        results[0].starts_with("<<untrusted-data ")
            && results[0].contains("sources=[\"file:~/notes/diary.md\"]>>"),
        "{results:?}"
    );
    // One day's file (beside the chain's HEAD and lock).
    let days = metnos_kit::chain::files(&s.sandbox.data_dir().join("turns")).unwrap();
    assert_eq!(days.len(), 1, "{days:?}");
}

async fn page(_: Request<hyper::body::Incoming>) -> Result<Response<FullBody<Bytes>>, Infallible> {
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(FullBody::new(Bytes::from_static(
            b"{\"uuid\": \"7c089d54-1234\"}",
        )))
        .unwrap())
}

fn http_server() -> SocketAddr {
    common::serve_http(page)
}

#[tokio::test]
async fn a_fetch_that_failed_once_is_tried_again_and_its_page_read() {
    let s = stack_with(
        &[("METNOS_EXECUTORS__LOCAL_HOSTS", "[\"127.0.0.1\"]")],
        true,
    )
    .await;
    // A real server that is overloaded once: 503, then the page.
    let served = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = std::sync::Arc::clone(&served);
    let addr = common::serve_http(move |_request| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            let response = if n == 0 {
                Response::builder()
                    .status(503)
                    .body(FullBody::new(Bytes::from_static(b"busy")))
            } else {
                Response::builder()
                    .header("content-type", "text/plain")
                    .body(FullBody::new(Bytes::from_static(b"the forecast: sun")))
            };
            Ok::<_, Infallible>(response.unwrap())
        }
    });
    let url = format!("http://{addr}/forecast");
    for _ in 0..2 {
        s.fake
            .push(tool_calls(&[("web_fetch", json!({"url": url}))]));
    }
    s.fake.push(Reply::Text("sun".into()));
    let events = s.run("fetch the forecast", Full).await;
    let obs = observations(&events);
    assert_eq!(obs.len(), 2, "{obs:?}");
    assert!(!obs[0].ok && obs[0].summary.contains("503"), "{obs:?}");
    assert!(
        obs[1].ok && obs[1].summary.contains("the forecast: sun"),
        "the retry after a failed fetch runs: {obs:?}"
    );
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(kind(&events), pb::FinalKind::Answer);
}

#[tokio::test]
async fn fetch_and_save_pipes_step_one_into_step_two() {
    // The fake page is on loopback: the operator names it among the local hosts.
    let s = stack_with(
        &[("METNOS_EXECUTORS__LOCAL_HOSTS", "[\"127.0.0.1\"]")],
        true,
    )
    .await;
    let addr = http_server();
    s.fake.push(tool_calls(&[(
        "web_fetch",
        json!({"url": format!("http://localhost:{}/uuid", addr.port())}),
    )]));
    s.fake
        .push(Reply::Text("that page is not reachable".into()));
    let events = s.run("fetch the uuid page from localhost", Full).await;
    let obs = observations(&events);
    assert!(
        !obs[0].ok && obs[0].summary.contains("refused: `localhost` is "),
        "only the named host is reachable: {obs:?}"
    );
    s.fake.push(tool_calls(&[(
        "web_fetch",
        json!({"url": format!("http://{addr}/uuid")}),
    )]));
    s.fake.push(tool_calls(&[(
        "fs_write",
        json!({"path": "~/out/uuid.json", "content": "{{step1.content}}"}),
    )]));
    s.fake.push(Reply::Text("I wrote 25 bytes".into()));
    let events = s
        .run("fetch the uuid page and save it in ~/out/uuid.json", Full)
        .await;
    assert_eq!(kind(&events), pb::FinalKind::Answer, "{events:#?}");
    assert_eq!(
        std::fs::read_to_string(s.home().join("out/uuid.json")).unwrap(),
        "{\"uuid\": \"7c089d54-1234\"}"
    );
    // A reference to a step that does not exist is told to the LLM, not run.
    s.fake.push(tool_calls(&[(
        "fs_write",
        json!({"path": "~/out/x.txt", "content": "{{step7.content}}"}),
    )]));
    s.fake.push(Reply::Text("sorry".into()));
    let events = s.run("save step 7 in ~/out/x.txt", Full).await;
    let obs = observations(&events);
    assert!(
        !obs[0].ok && obs[0].summary.contains("there is no step 7"),
        "{obs:?}"
    );
    assert!(!s.home().join("out/x.txt").exists());
}

#[tokio::test]
async fn a_large_observation_goes_to_the_scratchpad_and_is_read_back() {
    let s = stack().await;
    let mut log = String::from("hello this is a test note\n");
    while log.len() < 14_000 {
        log.push_str("INFO 2026-04-26 12:00:00 all quiet on the server\n");
    }
    log.push_str("INFO 2026-04-26 23:59:59 LAST_CRITICAL_EVENT\n");
    std::fs::write(s.home().join("big.log"), &log).unwrap();
    s.fake
        .push(tool_calls(&[("fs_read", json!({"path": "~/big.log"}))]));
    s.fake.push(Reply::from_request(|request| {
        // Read the id the synthetic observation gave, as a model would.
        let content = tool_messages(request)[0].clone();
        let synthetic = observed(&content);
        let id = synthetic["scratchpad_id"].as_str().unwrap().to_owned();
        Reply::ToolCalls(vec![(
            "scratchpad_read".into(),
            json!({"id": id, "search": "CRITICAL"}),
        )])
    }));
    s.fake
        .push(Reply::Text("the last event is LAST_CRITICAL_EVENT".into()));
    let events = s
        .run("read ~/big.log and tell me the last critical event", Full)
        .await;
    assert_eq!(kind(&events), pb::FinalKind::Answer, "{events:#?}");
    let obs = observations(&events);
    assert!(!obs[0].scratchpad_id.is_empty());
    let second = s.llm_request(1);
    assert!(tool_names(&second).contains(&"scratchpad_read".to_owned()));
    assert!(!tool_names(&s.llm_request(0)).contains(&"scratchpad_read".to_owned()));
    let synthetic = observed(&tool_messages(&second)[0]);
    assert!(
        synthetic["summary"]
            .as_str()
            .unwrap()
            .contains("characters omitted")
    );
    assert!(synthetic["size_bytes"].as_u64().unwrap() > 14_000);
    assert!(tool_messages(&second)[0].len() < 3000);
    let third = s.llm_request(2);
    assert!(
        tool_messages(&third)[1].contains("LAST_CRITICAL_EVENT"),
        "{third}"
    );
    // A page read back from the scratchpad keeps its origin's label.
    let record = s.record(&finished(&events).turn_id).await;
    assert_eq!(
        record["steps"][1]["labels"],
        json!([
            format!("scratchpad:{}", obs[0].scratchpad_id),
            "file:~/big.log"
        ])
    );
}

#[tokio::test]
async fn a_one_megabyte_file_is_read_to_its_last_line_page_by_page_through_the_scratchpad() {
    // Before: each page (4000 characters, over 4096 bytes as JSON) went back into the
    // scratchpad, so the model saw a new summary under a new id until the step cap.
    let s = stack_with(&[("METNOS_TURNS__CAP_STEPS", "400")], true).await;
    let mut text = String::new();
    let mut line = 0;
    while text.len() < 1_000_000 {
        line += 1;
        text.push_str(&format!("line {line:06} of the big file, all quiet\n"));
    }
    text.push_str("THE LAST LINE\n");
    std::fs::write(s.home().join("big.txt"), &text).unwrap();
    s.fake.push(tool_calls(&[(
        "fs_read",
        json!({"path": "~/big.txt", "max_bytes": 1_048_576}),
    )]));
    // Then, as a model would: the next page from the last answer's next_offset, until
    // there is none.
    for _ in 0..300 {
        s.fake.push(Reply::from_request(|request| {
            let messages = tool_messages(request);
            let last = observed(messages.last().unwrap());
            if let Some(id) = last["scratchpad_id"].as_str() {
                return Reply::ToolCalls(vec![(
                    "scratchpad_read".into(),
                    json!({"id": id, "offset": 0}),
                )]);
            }
            match last["metadata"]["next_offset"].as_u64() {
                Some(next) => Reply::ToolCalls(vec![(
                    "scratchpad_read".into(),
                    json!({"id": last["metadata"]["id"], "offset": next}),
                )]),
                None => Reply::Text("read to the end".into()),
            }
        }));
    }
    let mut stream = s.start("read ~/big.txt to its end", Full).await;
    let mut events = Vec::new();
    while let Some(event) = stream.next_event().await {
        let done = matches!(event, Event::Finished(_));
        events.push(event);
        if done {
            break;
        }
    }
    assert_eq!(kind(&events), pb::FinalKind::Answer, "{:#?}", events.last());
    let pages = observations(&events).len() - 1;
    assert!(pages >= 250, "{pages} pages of 4000 characters");
    // No page went back into the scratchpad, and the last one holds the last line.
    assert!(
        observations(&events)[1..]
            .iter()
            .all(|o| o.scratchpad_id.is_empty())
    );
    let requests = s.fake.received();
    let last_request = &requests.last().unwrap().body;
    let last_page = tool_messages(last_request).last().unwrap().clone();
    assert!(last_page.contains("THE LAST LINE"), "{last_page}");
}

#[tokio::test]
async fn the_caps_and_the_duplicate_read_guard_end_loops() {
    let s = stack().await;
    std::fs::write(s.home().join("n.txt"), "note").unwrap();
    // The same file twice: the second read is intercepted with the seed's message.
    s.fake
        .push(tool_calls(&[("fs_read", json!({"path": "~/n.txt"}))]));
    s.fake
        .push(tool_calls(&[("fs_read", json!({"path": "~/n.txt"}))]));
    s.fake.push(Reply::Text("note".into()));
    let events = s.run("read ~/n.txt", Full).await;
    let obs = observations(&events);
    assert_eq!(
        obs[1].summary,
        "you already have this data at step 1: formulate the final_answer"
    );
    assert_eq!(kind(&events), pb::FinalKind::Answer);

    // A model that keeps asking the clock: the third same call is answered with a note
    // (issue 42), once; asked again, cap_same_executor (2) ends the turn.
    s.fake
        .always(tool_calls(&[("time_now", json!({"timezone": "UTC"}))]));
    let events = s.run("what time is it", Full).await;
    assert_eq!(kind(&events), pb::FinalKind::CapSameExecutor, "{events:#?}");
    let obs = observations(&events);
    assert_eq!(obs.len(), 3);
    assert!(obs[0].ok && obs[1].ok && !obs[2].ok, "{obs:?}");
    assert!(
        obs[2].summary.contains("three times in this turn"),
        "{obs:?}"
    );
}

#[tokio::test]
async fn cap_steps_ends_a_turn_that_never_answers() {
    let s = stack_with(&[("METNOS_TURNS__CAP_SAME_EXECUTOR", "50")], true).await;
    s.fake
        .always(tool_calls(&[("time_now", json!({"timezone": "UTC"}))]));
    let events = s.run("what time is it", Full).await;
    assert_eq!(kind(&events), pb::FinalKind::CapSteps, "{events:#?}");
    assert_eq!(observations(&events).len(), 5);
}

#[tokio::test]
async fn a_turn_never_outlives_its_budget() {
    let s = stack_with(&[("METNOS_TURNS__BUDGET_SECONDS", "1")], true).await;
    s.fake.push(Reply::Delayed(
        Duration::from_secs(20),
        Box::new(Reply::Text("late".into())),
    ));
    let events = s.run("think for a long time", Full).await;
    assert_eq!(kind(&events), pb::FinalKind::Timeout, "{events:#?}");
    assert!(
        finished(&events)
            .text
            .contains("the 1 seconds this request may take ran out"),
        "{}",
        finished(&events).text
    );
}
