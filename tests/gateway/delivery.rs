//! Delivery: stop and long answers, polling and the webhook, answers Telegram lost,
//! restarts and outages.

use super::*;

#[tokio::test]
async fn stop_cancels_the_running_turn_and_long_answers_are_split() {
    let s = stack().await;
    s.pair(ADA, "Ada", "full").await;
    s.llm.push(Reply::Delayed(
        std::time::Duration::from_secs(30),
        Box::new(Reply::Text("late".into())),
    ));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "think about everything");
    s.tg.until("the LLM asked", |_| !s.llm.received().is_empty())
        .await;
    s.tg.message(ADA, user(ADA, "Ada", "en"), "never mind");
    s.tg.until("stopped", |tg| {
        tg.texts_to(ADA).iter().any(|t| t == "All right, I stop.")
    })
    .await;

    // An ambiguous phrase asks first; "yes" stops.
    s.llm.push(Reply::Delayed(
        std::time::Duration::from_secs(30),
        Box::new(Reply::Text("late".into())),
    ));
    let asked = s.llm.received().len();
    s.tg.message(ADA, user(ADA, "Ada", "en"), "think again");
    s.tg.until("the LLM asked", |_| s.llm.received().len() > asked)
        .await;
    s.tg.message(ADA, user(ADA, "Ada", "en"), "hmm, let's see later");
    s.tg.until("the question", |tg| {
        tg.texts_to(ADA)
            .iter()
            .any(|t| t == "Do you want me to stop? (yes/no)")
    })
    .await;
    s.tg.message(ADA, user(ADA, "Ada", "en"), "yes");
    s.tg.until("stopped again", |tg| {
        tg.texts_to(ADA)
            .iter()
            .filter(|t| *t == "All right, I stop.")
            .count()
            == 2
    })
    .await;

    let long: String = (0..300)
        .map(|i| format!("line {i:03} {}\n", "é<&>".repeat(8)))
        .collect();
    s.llm.push(Reply::Text(long.clone()));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "tell me a long story");
    s.tg.until("the story", |tg| {
        tg.texts_to(ADA).iter().any(|t| t.starts_with("line 000"))
    })
    .await;
    s.tg.until("all of it", |tg| {
        tg.texts_to(ADA).iter().any(|t| t.contains("line 299"))
    })
    .await;
    let parts: Vec<String> =
        s.tg.texts_to(ADA)
            .into_iter()
            .filter(|t| t.starts_with("line "))
            .collect();
    assert!(parts.len() >= 3, "{}", parts.len());
    assert!(parts.iter().all(|p| p.encode_utf16().count() <= 4096));
    assert!(
        parts
            .iter()
            .all(|p| p.lines().all(|l| l.starts_with("line "))),
        "split inside a line"
    );
    let joined = parts
        .join("\n")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    assert_eq!(joined, long.trim_end());
    // Issue 41: a stop is answered once. The two stopped turns ended long ago, and their
    // end was not said a second time ("I stopped (cancelled). cancelled", half English in
    // Italian).
    let said = s.tg.texts_to(ADA);
    assert!(
        !said
            .iter()
            .any(|t| t.contains("cancel") || t.starts_with("I stopped")),
        "{said:?}"
    );
}

#[tokio::test]
async fn polling_rides_out_errors_and_rate_limits_and_never_logs_the_token() {
    let s = stack().await;
    s.pair(ADA, "Ada", "full").await;
    s.tg.fail_next(
        502,
        json!({"ok": false, "error_code": 502, "description": "Bad Gateway"}),
    );
    s.tg.fail_next(429, json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": {"retry_after": 1}}));
    s.llm.push(Reply::Text("through the storm".into()));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "hello after errors");
    s.tg.until("the answer", |tg| {
        tg.texts_to(ADA).iter().any(|t| t == "through the storm")
    })
    .await;
    let Stack { up, .. } = s;
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0);
    assert!(
        !stderr.contains(TOKEN) && !stderr.contains("TEST-token"),
        "the token leaked: {stderr}"
    );
}

#[tokio::test]
async fn a_restart_in_the_middle_keeps_the_offset_and_the_suspended_turn() {
    let s = stack().await;
    s.pair(ADA, "Ada", "supervised").await;
    s.llm.push(tool_calls(
        "fs_write",
        json!({"path": "~/later.txt", "content": "after restart"}),
    ));
    s.tg.message(
        ADA,
        user(ADA, "Ada", "en"),
        "write after restart to ~/later.txt",
    );
    let (_, approve, _) = s.card().await;
    s.tg.until("confirmed", FakeTelegram::all_confirmed).await;
    let llm_calls = s.llm.received().len();
    let Stack {
        sandbox,
        up,
        llm,
        tg,
    } = s;
    let (code, _) = up.interrupt().await;
    assert_eq!(code, 0);

    let up = sandbox.up().await;
    let s = Stack {
        sandbox,
        up,
        llm,
        tg,
    };
    s.llm.push(Reply::Text("Written after the restart.".into()));
    s.tg.click(ADA, 2, user(ADA, "Ada", "en"), &approve);
    s.tg.until("the answer", |tg| {
        tg.texts_to(ADA)
            .iter()
            .any(|t| t == "Written after the restart.")
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(s.home().join("later.txt")).unwrap(),
        "after restart"
    );
    // The first message was not handled again: one more LLM call (the answer), no new turn.
    assert_eq!(s.llm.received().len(), llm_calls + 1);
}

#[tokio::test]
async fn a_reply_telegram_refused_connections_for_is_sent_once_it_is_back() {
    let s = stack().await;
    s.pair(ADA, "Ada", "supervised").await;
    s.llm.push(Reply::Text("Here you are.".into()));
    // Telegram is unreachable (connections refused) from the moment the message is
    // delivered, for longer than the turn takes.
    s.tg.outage_after_next_updates(std::time::Duration::from_secs(2));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "say something");
    s.answered("Here you are.").await;
    // Some retries later: the answer is there once.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let texts = s.tg.texts_to(ADA);
    assert_eq!(
        texts.iter().filter(|t| *t == "Here you are.").count(),
        1,
        "{texts:?}"
    );
    let Stack { up, .. } = s;
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !stderr.contains("sendMessage failed"),
        "the answer was given up: {stderr}"
    );
    assert!(!stderr.contains(TOKEN), "the token reached the log");
}

#[tokio::test]
async fn a_card_edit_whose_answer_was_lost_is_made_again_and_the_card_closes_once() {
    let s = stack().await;
    s.pair(ADA, "Ada", "supervised").await;
    s.ask_write("~/lost.txt", "edit", "Written.");
    let (card, approve, _) = s.card().await;
    let card_id = s.tg.message_id_of(&card).unwrap();
    // The edit that closes the card is made, but its answer is a proxy's 502 page.
    s.tg.lose_edit_answers(1);
    s.tg.click(ADA, card_id, user(ADA, "Ada", "en"), &approve);
    s.answered("Written.").await;
    s.tg.until("the edit made again", |tg| {
        tg.calls("editMessageText").len() >= 2
    })
    .await;
    // Telegram's "not modified" on the second edit means it was made: the card is closed,
    // once, and the sweep does not come back to it.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let edits = s.tg.calls("editMessageText");
    assert_eq!(edits.len(), 2, "{edits:?}");
    assert_eq!(edits[0].body, edits[1].body, "the same edit, made again");
    let shown = s.tg.text_of(card_id).unwrap();
    assert!(shown.contains("approved"), "{shown}");
    let Stack { up, .. } = s;
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("cannot edit the card"), "{stderr}");
}

#[tokio::test]
async fn a_message_whose_answer_was_lost_is_not_sent_again_and_its_caller_is_told_so() {
    use metnos_proto::gateway::v1 as gateway;
    use metnos_proto::gateway::v1::gateway_service_client::GatewayServiceClient;
    let s = stack().await;
    s.pair(ADA, "Ada", "supervised").await;
    let mut client =
        GatewayServiceClient::new(s.up.channel_as("gateway", metnos_kit::tls::Identity::Planner));
    let send = |text: &str, key: &str| gateway::SendMessageRequest {
        principal: Some(metnos_proto::common::v1::Principal {
            channel: "telegram".into(),
            sender_id: ADA.to_string(),
        }),
        text: text.into(),
        reply_to: None,
        idempotency_key: key.into(),
    };
    let shown = |text: &str| s.tg.texts_to(ADA).iter().filter(|t| *t == text).count();
    // Telegram took it, but its answer was lost: not sent again (it would show twice), and
    // the caller hears ABORTED, so it does not send it again either.
    s.tg.lose_send_answers(1);
    let lost = client
        .send_message(send("once only", ""))
        .await
        .unwrap_err();
    assert_eq!(lost.code(), tonic::Code::Aborted, "{lost:?}");
    assert_eq!(shown("once only"), 1);
    // With a key, asking again is safe: the first outcome is the answer, nothing is sent.
    s.tg.lose_send_answers(1);
    let first = client
        .send_message(send("keyed, lost", "k1"))
        .await
        .unwrap_err();
    let again = client
        .send_message(send("keyed, lost", "k1"))
        .await
        .unwrap_err();
    assert_eq!(
        (first.code(), again.code()),
        (tonic::Code::Aborted, tonic::Code::Aborted)
    );
    assert_eq!(shown("keyed, lost"), 1);
    let sent = client
        .send_message(send("and this", "k2"))
        .await
        .unwrap()
        .into_inner()
        .sent;
    let again = client
        .send_message(send("and this", "k2"))
        .await
        .unwrap()
        .into_inner()
        .sent;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent, again, "the same message, not a second one");
    assert_eq!(shown("and this"), 1);
    let long_key = client
        .send_message(send("x", &"k".repeat(200)))
        .await
        .unwrap_err();
    assert_eq!(long_key.code(), tonic::Code::InvalidArgument);
    // A person whose id is no principal's (a line break, past 256 bytes) is refused by name,
    // never looked up as someone.
    for sender_id in [format!("{ADA}\n"), "9".repeat(300)] {
        let mut odd = send("x", "");
        odd.principal.as_mut().unwrap().sender_id = sender_id.clone();
        let refused = client.send_message(odd).await.unwrap_err();
        assert_eq!(
            refused.code(),
            tonic::Code::InvalidArgument,
            "{sender_id:?}"
        );
        assert!(
            refused.message().starts_with("principal.sender_id"),
            "{sender_id:?}: {}",
            refused.message()
        );
    }
    assert_eq!(shown("x"), 0, "nothing went");
    let Stack { up, .. } = s;
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
}

#[tokio::test]
async fn a_turn_a_kill_9_interrupted_is_told_to_its_person_once_after_the_restart() {
    let s = stack_with(&[("METNOS_TURNS__LEASE_SECONDS", "3")]).await;
    s.pair(ADA, "Ada", "supervised").await;
    // The LLM is slow: the turn is running when the stack is killed.
    s.llm.push(Reply::Delayed(
        std::time::Duration::from_secs(300),
        Box::new(Reply::Text("too late".into())),
    ));
    let asked = s.llm.received().len();
    s.tg.message(ADA, user(ADA, "Ada", "en"), "summarise   my week");
    let llm = &s.llm;
    s.tg.until("the LLM asked", |_| llm.received().len() > asked)
        .await;
    s.tg.until("confirmed", FakeTelegram::all_confirmed).await;
    let Stack {
        sandbox,
        mut up,
        llm,
        tg,
    } = s;
    // kill -9: no clean-up, the turn stays "running" in the store.
    up.child.start_kill().unwrap();
    up.child.wait().await.unwrap();

    let up = sandbox.up().await;
    let told = "I was restarted while working on «summarise my week»; I did not finish it, please ask again.";
    tg.until("the notice", |tg| {
        tg.texts_to(ADA).iter().any(|t| t == told)
    })
    .await;
    // Some sweeps later: told once, and nothing else came of the turn.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let texts = tg.texts_to(ADA);
    assert_eq!(texts.iter().filter(|t| *t == told).count(), 1, "{texts:?}");
    assert!(!texts.iter().any(|t| t.contains("too late")), "{texts:?}");
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    drop((sandbox, llm));
}

#[tokio::test]
async fn webhook_mode_takes_only_posts_with_the_secret_token() {
    let llm = FakeLlm::start().await;
    let tg = FakeTelegram::start();
    let listen = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let mut sandbox = Sandbox::new();
    sandbox
        .with_fake_llm(llm.url())
        .with_builtins()
        .set("METNOS_TELEGRAM_TOKEN", TOKEN)
        .set("METNOS_TELEGRAM__API_URL", &tg.url())
        .set("METNOS_TELEGRAM__MODE", "webhook")
        .set("METNOS_TELEGRAM__WEBHOOK_LISTEN", &listen.to_string())
        .set(
            "METNOS_TELEGRAM__WEBHOOK_URL",
            "https://metnos.example/telegram",
        );
    let _up = sandbox.up().await;
    tg.until("setWebhook", |tg| !tg.calls("setWebhook").is_empty())
        .await;
    let registered = tg.calls("setWebhook")[0].body.clone();
    assert_eq!(registered["url"], "https://metnos.example/telegram");
    let secret = registered["secret_token"].as_str().unwrap().to_owned();
    assert!(secret.len() >= 32);

    let update = json!({"update_id": 1, "message": {
        "message_id": 1, "date": 1_795_000_000,
        "chat": {"id": ADA, "type": "private", "first_name": "Ada"},
        "from": user(ADA, "Ada", "en"), "text": "hello"}});
    let client = reqwest::Client::new();
    let url = format!("http://{listen}/telegram");
    let refused = client
        .post(&url)
        .header("X-Telegram-Bot-Api-Secret-Token", "guess")
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let refused = client.post(&url).json(&update).send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let taken = client
        .post(&url)
        .header("X-Telegram-Bot-Api-Secret-Token", &secret)
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(taken.status().as_u16(), 200);
    tg.until("a pairing code", |tg| {
        tg.texts_to(ADA)
            .iter()
            .any(|t| t.contains("metnos pair approve"))
    })
    .await;
    // Telegram retrying the same update does not handle it twice.
    let again = client
        .post(&url)
        .header("X-Telegram-Bot-Api-Secret-Token", &secret)
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 200);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(tg.texts_to(ADA).len(), 1);
    assert!(
        tg.calls("getUpdates").is_empty(),
        "webhook mode does not poll"
    );
}

#[tokio::test]
async fn a_planner_outage_is_told_in_one_sentence() {
    // A gateway of its own, in this process, whose planner address answers nothing; the
    // token comes from a file.
    let tg = FakeTelegram::start();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut config = metnos_kit::testing::config(dir.path());
    let owner = common::tls_in(&config.tls.dir, metnos_kit::tls::Identity::Owner);
    config.telegram.token_file = token_file;
    config.telegram.api_url = tg.url();
    config.telegram.poll_timeout_seconds = NonZero::new(1).unwrap();
    config.set_service_url(
        metnos_kit::ServiceName::Planner,
        "http://127.0.0.1:9".into(),
    );
    config.set_service_url(
        metnos_kit::ServiceName::Approval,
        "http://127.0.0.1:9".into(),
    );
    let (url, _gateway) = metnos_kit::runtime::spawn_on_loopback(
        metnos_kit::ServiceName::Gateway,
        move |listener, shutdown| metnos_gateway::serve(config, listener, shutdown),
    )
    .unwrap();
    tg.message(ADA, user(ADA, "Ada", "en"), "hello");
    tg.until("a code", |tg| !tg.texts_to(ADA).is_empty()).await;
    let code = tg.texts_to(ADA)[0]
        .split("approve ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let channel =
        metnos_kit::client::channel(&owner, metnos_kit::tls::Identity::Gateway, &url).unwrap();
    let mut gateway =
        metnos_proto::gateway::v1::gateway_service_client::GatewayServiceClient::new(channel);
    gateway
        .approve_pairing(metnos_proto::gateway::v1::ApprovePairingRequest {
            code,
            level: metnos_proto::common::v1::AutonomyLevel::Full as i32,
        })
        .await
        .unwrap();
    tg.message(ADA, user(ADA, "Ada", "en"), "what time is it");
    tg.until("the apology", |tg| {
        tg.texts_to(ADA)
            .iter()
            .any(|t| t == "I cannot reach the planner right now: please try again shortly.")
    })
    .await;
    // A button pressed while the approval service is down: one sentence, no transport
    // error, no address.
    tg.click(ADA, 7, user(ADA, "Ada", "en"), "approve:0123456789abcdef");
    tg.until("the approval apology", |tg| {
        tg.texts_to(ADA).iter().any(|t| {
            t == "I cannot reach the approval service right now: please try again shortly."
        })
    })
    .await;
    let texts = tg.texts_to(ADA);
    assert!(
        !texts
            .iter()
            .any(|t| t.contains("127.0.0.1") || t.contains("tcp") || t.contains("error")),
        "{texts:?}"
    );
}
