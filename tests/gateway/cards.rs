//! Approval cards: approved, rejected, granted for the session or always, expired and
//! cancelled.

use super::*;

#[tokio::test]
async fn a_write_is_approved_by_button_and_the_card_is_closed() {
    let s = stack().await;
    s.pair(ADA, "Ada", "supervised").await;
    s.llm.push(tool_calls(
        "fs_write",
        json!({"path": "~/tg.txt", "content": "from telegram"}),
    ));
    s.llm.push(Reply::Text("Written.".into()));
    s.tg.message(
        ADA,
        user(ADA, "Ada", "en"),
        "write 'from telegram' to ~/tg.txt",
    );
    let (card_call, approve, reject) = s.card().await;
    assert_eq!(card_call.body["parse_mode"], "HTML");
    // What the call does, read from the call, and why Ada is asked.
    let text = card_call.body["text"].as_str().unwrap_or_default();
    assert!(text.contains("May I create a file?"), "{text}");
    assert!(
        text.contains("~/tg.txt — new file, 13 B: «from telegram»"),
        "{text}"
    );
    assert!(
        text.contains("<i>Why: at Supervised, writing files asks first</i>"),
        "{text}"
    );
    assert!(approve.starts_with("approve:"));
    assert!(reject.starts_with("reject:"));
    assert!(!s.home().join("tg.txt").exists());

    // Bob, paired too, cannot approve Ada's card.
    s.pair(BOB, "Bob", "full").await;
    s.tg.click(BOB, 2, user(BOB, "Bob", "en"), &approve);
    s.tg.until("Bob told", |tg| {
        tg.texts_to(BOB)
            .iter()
            .any(|t| t == "Approval cannot be resolved: decider not authorised")
    })
    .await;
    assert!(!s.home().join("tg.txt").exists());
    assert_eq!(
        s.tg.calls("answerCallbackQuery").len(),
        1,
        "every click is answered"
    );

    // Ada can.
    s.tg.click(ADA, 2, user(ADA, "Ada", "en"), &approve);
    s.tg.until("the answer", |tg| {
        tg.texts_to(ADA).iter().any(|t| t == "Written.")
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(s.home().join("tg.txt")).unwrap(),
        "from telegram"
    );
    assert_eq!(s.tg.calls("answerCallbackQuery").len(), 2);
    let edits = s.tg.calls("editMessageText");
    // The click and the turn's ApprovalDecided both report the outcome: one edit.
    assert_eq!(edits.len(), 1, "{edits:?}");
    let edit = &edits[0].body;
    assert!(
        edit["text"].as_str().unwrap().contains("approved"),
        "{edit}"
    );
    assert!(
        edit["reply_markup"].is_null(),
        "the buttons must go: {edit}"
    );
    assert!(
        !s.tg.calls("sendChatAction").is_empty(),
        "typing is shown while the turn runs"
    );
    // The services' logs name executors and capabilities, never the call's values.
    let Stack { up, sandbox, .. } = s;
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    let logged = sandbox.logged();
    assert!(logged.contains("approval requested"), "{logged}");
    for text in [&logged, &stderr] {
        assert!(
            !text.contains("tg.txt") && !text.contains("from telegram"),
            "a value reached the log: {text}"
        );
    }
}

#[tokio::test]
async fn a_rejected_card_writes_nothing_and_malformed_or_stale_clicks_are_answered() {
    let s = stack().await;
    s.pair(ADA, "Ada", "supervised").await;
    s.llm.push(tool_calls(
        "fs_write",
        json!({"path": "~/no.txt", "content": "x"}),
    ));
    s.llm
        .push(Reply::Text("Not written, as you wished.".into()));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "write x to ~/no.txt");
    let (_, _, reject) = s.card().await;
    s.tg.click(ADA, 2, user(ADA, "Ada", "en"), &reject);
    s.tg.until("the answer", |tg| {
        tg.texts_to(ADA)
            .iter()
            .any(|t| t == "Not written, as you wished.")
    })
    .await;
    assert!(!s.home().join("no.txt").exists());
    assert!(
        s.tg.calls("editMessageText")[0].body["text"]
            .as_str()
            .unwrap()
            .contains("rejected")
    );

    // The same card again: already resolved, the sender is told.
    s.tg.click(ADA, 2, user(ADA, "Ada", "en"), &reject);
    s.tg.until("told", |tg| {
        tg.texts_to(ADA)
            .iter()
            .any(|t| t == "Approval cannot be resolved: token already resolved")
    })
    .await;
    // Garbage data: answered, logged, nothing crashes.
    s.tg.click(ADA, 2, user(ADA, "Ada", "en"), "launch:missiles");
    s.tg.until("answered", |tg| tg.calls("answerCallbackQuery").len() == 3)
        .await;
    assert_eq!(
        s.tg.calls("answerCallbackQuery")[2].body["text"],
        "I do not recognise this button: nothing was done."
    );
    // A stranger's click is refused before anything is resolved (only paired people
    // decide), and no pairing code is sent in its place.
    s.tg.click(MALLORY, 2, user(MALLORY, "Mallory", "en"), &reject);
    s.tg.until("answered", |tg| tg.calls("answerCallbackQuery").len() == 4)
        .await;
    s.tg.until("told", |tg| {
        tg.texts_to(MALLORY)
            .iter()
            .any(|t| t.contains("You are not paired"))
    })
    .await;
    // A token nobody issued, clicked from a client set to Italian: the seed's words, in the
    // language of Ada's cards (her pairing's, English), not her client's.
    let told = s.tg.texts_to(ADA).len();
    s.tg.click(
        ADA,
        2,
        user(ADA, "Ada", "it"),
        "approve:0123456789abcdef0123456789abcdef",
    );
    s.tg.until("told in the cards' language", |tg| {
        tg.texts_to(ADA)
            .iter()
            .skip(told)
            .any(|t| t == "Approval cannot be resolved: unknown token")
    })
    .await;
    assert!(
        !s.tg
            .texts_to(ADA)
            .iter()
            .any(|t| t.starts_with("Approvazione")),
        "{:?}",
        s.tg.texts_to(ADA)
    );
    assert!(
        !s.tg
            .texts_to(MALLORY)
            .iter()
            .any(|t| t.contains("metnos pair approve"))
    );
    // Still polling.
    s.llm.push(Reply::Text("still here".into()));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "are you there");
    s.tg.until("the answer", |tg| {
        tg.texts_to(ADA).iter().any(|t| t == "still here")
    })
    .await;
}

#[tokio::test]
async fn a_card_grants_once_for_the_session_or_always_as_the_person_chooses() {
    let s = stack().await;
    s.pair(ADA, "Ada", "supervised").await;
    for folder in ["inv", "docs"] {
        std::fs::create_dir_all(s.home().join(folder)).unwrap();
    }
    let click = |message: i64, data: &str| s.tg.click(ADA, message, user(ADA, "Ada", "en"), data);

    // Once: written; the next write in the folder asks again.
    s.ask_write("~/inv/a.txt", "one", "wrote a");
    let (card, buttons) = s.nth_card(1).await;
    let texts: Vec<Vec<&str>> = buttons
        .iter()
        .map(|row| row.iter().map(|(t, _)| t.as_str()).collect())
        .collect();
    assert_eq!(
        texts,
        [
            vec!["Approve once", "Reject"],
            vec!["For this session", "Always for ~/inv/*"],
        ]
    );
    let data = |kind: &str| {
        buttons
            .iter()
            .flatten()
            .find(|(_, d)| d.starts_with(&format!("{kind}:")))
            .unwrap()
            .1
            .clone()
    };
    click(card, &data("approve"));
    s.answered("wrote a").await;
    let closed = s.tg.calls("editMessageText");
    let said = closed.last().unwrap().body["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        said.contains("<b>✅ approved</b>") && !said.contains("territory"),
        "{said}"
    );

    // For this session: written, and the folder's next write runs without a card.
    s.ask_write("~/inv/b.txt", "two", "wrote b");
    let (card, buttons) = s.nth_card(2).await;
    let session = buttons[1][0].1.clone();
    assert!(session.starts_with("session:"), "{session}");
    click(card, &session);
    s.answered("wrote b").await;
    s.tg.until("the card closed for the session", |tg| {
        tg.calls("editMessageText").iter().any(|c| {
            c.body["text"]
                .as_str()
                .unwrap_or_default()
                .contains("approved · for this session: ~/inv/* [territory: session]")
                && c.body["reply_markup"].is_null()
        })
    })
    .await;
    s.ask_write("~/inv/c.txt", "three", "wrote c");
    s.answered("wrote c").await;
    assert_eq!(s.cards().len(), 2, "the session grant covers ~/inv/c.txt");
    assert_eq!(
        std::fs::read_to_string(s.home().join("inv/c.txt")).unwrap(),
        "three"
    );

    // Always: first shown whole, to confirm; Back shows the card as it was.
    s.ask_write("~/docs/d.txt", "four", "wrote d");
    let (card, buttons) = s.nth_card(3).await;
    let always = buttons[1][1].clone();
    assert_eq!(always.0, "Always for ~/docs/*");
    let edits_before = s.tg.calls("editMessageText").len();
    click(card, &always.1);
    s.tg.until("the confirmation", |tg| {
        tg.calls("editMessageText").len() > edits_before
    })
    .await;
    let confirm = s.tg.calls("editMessageText").last().unwrap().body.clone();
    let text = confirm["text"].as_str().unwrap();
    assert!(
        text.contains("May I create a file?")
            && text.contains("Always for ~/docs/*? From now on Metnos may do this (fs:write) without asking, until you revoke it"),
        "{text}"
    );
    let confirm_rows = rows(&confirm["reply_markup"]);
    assert_eq!(confirm_rows[0][0].0, "Confirm: always");
    assert!(
        !s.home().join("docs/d.txt").exists(),
        "nothing granted or run yet"
    );
    click(card, &confirm_rows[1][0].1);
    s.tg.until("the card again", |tg| {
        tg.calls("editMessageText").len() > edits_before + 1
    })
    .await;
    let again = s.tg.calls("editMessageText").last().unwrap().body.clone();
    assert_eq!(
        rows(&again["reply_markup"]),
        buttons,
        "Back shows the card's own buttons"
    );
    click(card, &always.1);
    s.tg.until("the confirmation again", |tg| {
        tg.calls("editMessageText").len() > edits_before + 2
    })
    .await;
    click(card, &confirm_rows[0][0].1);
    s.answered("wrote d").await;
    s.tg.until("the card closed for always", |tg| {
        tg.calls("editMessageText").iter().any(|c| {
            c.body["text"]
                .as_str()
                .unwrap_or_default()
                .contains("approved · always for ~/docs/* [territory: permanent]")
        })
    })
    .await;
    let (status, listed, stderr) = s.sandbox.run(&["grants", "list"]).await;
    assert_eq!(status, 0, "{stderr}");
    assert!(
        listed.contains("~/docs/*") && listed.contains("~/inv/*"),
        "{listed}"
    );
    s.ask_write("~/docs/e.txt", "five", "wrote e");
    s.answered("wrote e").await;
    assert_eq!(s.cards().len(), 3, "always covers ~/docs/e.txt");
    // A hidden file in the folder is not covered: `*` does not match a leading dot.
    s.ask_write("~/docs/.notes.txt", "six", "wrote f");
    s.nth_card(4).await;
}

#[tokio::test]
async fn an_expired_card_is_closed_and_its_turn_ends_with_one_final_message_even_after_a_restart() {
    let s = stack_with(&[
        ("METNOS_APPROVAL__TTL_SECONDS", "3"),
        ("METNOS_APPROVAL__SWEEP_INTERVAL_SECONDS", "1"),
        ("METNOS_APPROVAL__REMIND_BEFORE_SECONDS", "2"),
    ])
    .await;
    s.pair(ADA, "Ada", "supervised").await;

    // Followed here: nobody answers; one reminder, the card says expired (no buttons),
    // the turn goes on without the call and says so.
    s.ask_write("~/x.txt", "x", "I did not write it.");
    s.nth_card(1).await;
    s.answered("I did not write it.").await;
    s.tg.until("the card expired", |tg| {
        tg.calls("editMessageText").iter().any(|c| {
            c.body["text"]
                .as_str()
                .unwrap_or_default()
                .contains("⌛ expired")
                && c.body["reply_markup"].is_null()
        })
    })
    .await;
    let reminders = |tg: &FakeTelegram| {
        tg.texts_to(ADA)
            .iter()
            .filter(|t| t.starts_with("⏳ The request «May I create a file?» expires in 1 min"))
            .count()
    };
    assert_eq!(reminders(&s.tg), 1);
    assert!(!s.home().join("x.txt").exists());

    // Nobody follows it: the gateway restarts while the card waits; the expiry still
    // ends the turn with one final message.
    s.ask_write("~/y.txt", "y", "Not written: the request expired.");
    s.nth_card(2).await;
    s.tg.until("confirmed", FakeTelegram::all_confirmed).await;
    let Stack {
        sandbox,
        up,
        llm,
        tg,
    } = s;
    let (code, _) = up.interrupt().await;
    assert_eq!(code, 0);
    // Down past the expiry.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let up = sandbox.up().await;
    let s = Stack {
        sandbox,
        up,
        llm,
        tg,
    };
    s.answered("Not written: the request expired.").await;
    s.tg.until("the second card expired", |tg| {
        tg.calls("editMessageText")
            .iter()
            .filter(|c| {
                c.body["text"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("⌛ expired")
            })
            .count()
            == 2
    })
    .await;
    // A few sweeps later, still one final message and no second resume.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let finals =
        s.tg.texts_to(ADA)
            .iter()
            .filter(|t| *t == "Not written: the request expired.")
            .count();
    assert_eq!(finals, 1);
    assert!(!s.home().join("y.txt").exists());
    // A late click is told the seed's reason.
    let (card, buttons) = s.nth_card(2).await;
    s.tg.click(ADA, card, user(ADA, "Ada", "en"), &buttons[0][0].1);
    s.tg.until("told", |tg| {
        tg.texts_to(ADA)
            .iter()
            .any(|t| t == "Approval cannot be resolved: the request expired")
    })
    .await;
}

#[tokio::test]
async fn stopping_a_turn_closes_its_card_as_cancelled() {
    let s = stack().await;
    s.pair(ADA, "Ada", "supervised").await;
    s.ask_write("~/stop.txt", "x", "never said");
    let (card, buttons) = s.nth_card(1).await;
    s.tg.message(ADA, user(ADA, "Ada", "en"), "/stop");
    s.tg.until("the card cancelled", |tg| {
        tg.calls("editMessageText").iter().any(|c| {
            c.body["text"]
                .as_str()
                .unwrap_or_default()
                .contains("— cancelled")
                && c.body["reply_markup"].is_null()
        })
    })
    .await;
    // Its buttons are gone, and a click from an old client decides nothing.
    s.tg.click(ADA, card, user(ADA, "Ada", "en"), &buttons[0][0].1);
    s.tg.until("told", |tg| {
        tg.texts_to(ADA)
            .iter()
            .any(|t| t == "Approval cannot be resolved: token already resolved")
    })
    .await;
    assert!(!s.home().join("stop.txt").exists());
}
