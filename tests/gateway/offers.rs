//! Grants offered after approvals, accepted (also narrower or from the digest), and
//! offered for revocation when unused.

use super::*;

const ADA_TELOS: &str = "---
telos_version: 1.1
written_at: 2026-11-01T12:00:00+01:00
written_by: ada
previous_hash: genesis
---
## t.tempo — Free my time from repetitive chores
weight: 0.6
activation_threshold: 0.3
## t.ordine — Keep the order of my digital data
weight: 0.4
activation_threshold: 0.4
";

async fn telos_stack(settings: &[(&str, &str)]) -> Stack {
    let owner = format!("[\"telegram:{ADA}\"]");
    let mut all = vec![
        ("METNOS_TELOS__OWNER_PRINCIPALS", owner.as_str()),
        ("METNOS_TELOS__PROTECTED_WINDOWS", "[]"),
    ];
    all.extend_from_slice(settings);
    let s = stack_with(&all).await;
    s.sandbox.sign_telos(ADA_TELOS).await;
    s.llm.always(Reply::from_request(|body| {
        if body.get("format").is_some_and(|f| !f.is_null()) {
            Reply::Json(json!({"fits": [
                {"telos_id": "t.tempo", "fit": 0.9, "why": "fewer cards and permissions to watch"},
                {"telos_id": "t.ordine", "fit": 0.6, "why": "things in their place"},
            ]}))
        } else {
            Reply::Text("Written.".into())
        }
    }));
    s
}

/// Issue 22: approval fatigue. Ada approves three writes under one folder; the planner's
/// proposal source offers to allow them from now on — weighed by the telos engine (her
/// TELOS.md, the model's fits), published as a card with Accept / Reject / Never again.
/// Accept records the grant through the approval service's territory flow: the fourth
/// write in that folder needs no card.
#[tokio::test]
async fn three_approved_writes_in_a_folder_bring_an_offer_and_accept_records_the_grant() {
    let s = telos_stack(&[]).await;
    s.pair(ADA, "Ada", "supervised").await;
    let written = |tg: &FakeTelegram, n: usize| {
        tg.texts_to(ADA).iter().filter(|t| *t == "Written.").count() >= n
    };
    s.ada_approves_writes(1..=3).await;
    // The offer: its own card, its own buttons — after the model was asked for its fits.
    let (_, buttons) = s.nth_card(4).await;
    let fit_asks = s
        .llm
        .received()
        .iter()
        .filter(|r| r.body.get("format").is_some_and(|f| !f.is_null()))
        .count();
    assert_eq!(fit_asks, 1, "one offer, weighed once");
    let offer = s.cards()[3].body["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        offer.contains("allow them from now on without asking"),
        "{offer}"
    );
    assert!(
        offer.contains("writes in ~/inv/") && offer.contains("you approved 3 of them in 7 days"),
        "{offer}"
    );
    let labels: Vec<&str> = buttons[0].iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(labels, ["Accept", "Reject", "Never again"]);
    assert!(buttons[0][2].1.starts_with("never:"));
    // Bob cannot answer it for her.
    s.pair(BOB, "Bob", "full").await;
    s.tg.click(BOB, 2, user(BOB, "Bob", "en"), &buttons[0][0].1);
    s.tg.until("Bob told", |tg| {
        tg.texts_to(BOB)
            .iter()
            .any(|t| t == "Approval cannot be resolved: decider not authorised")
    })
    .await;
    let (_, listed, _) = s.sandbox.run(&["grants", "list"]).await;
    assert!(!listed.contains("~/inv/*"), "{listed}");
    // Ada accepts: the grant is recorded; the next write there asks nothing.
    s.tg.click(ADA, 2, user(ADA, "Ada", "en"), &buttons[0][0].1);
    s.tg.until("the offer closed", |tg| {
        tg.calls("editMessageText").iter().any(|c| {
            c.body["text"]
                .as_str()
                .unwrap_or_default()
                .contains("always for ~/inv/* [territory: permanent]")
        })
    })
    .await;
    let (status, listed, stderr) = s.sandbox.run(&["grants", "list"]).await;
    assert_eq!(status, 0, "{stderr}");
    assert!(
        listed.contains("~/inv/*") && listed.contains(&ADA.to_string()),
        "{listed}"
    );
    s.llm.push(tool_calls(
        "fs_write",
        json!({"path": "~/inv/4.txt", "content": "an invoice"}),
    ));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "file this invoice");
    s.tg.until("the fourth write", |tg| written(tg, 4)).await;
    assert_eq!(s.cards().len(), 4, "no card for a write the grant covers");
    assert!(s.home().join("inv/4.txt").exists());
}

/// Issue 22's unused grants: Ada's grants not used for 90 days are offered for revocation
/// on a card the approval service writes from policy's records (her recent grant and Bob's
/// old one are not on it); Bob cannot accept it; her Accept revokes exactly those two, and
/// a write where one of them allowed it asks again.
#[tokio::test]
async fn grants_unused_for_ninety_days_are_offered_for_revocation_and_accept_revokes_them() {
    let s = telos_stack(&[("METNOS_SCHEDULER__TICK_SECONDS", "1")]).await;
    s.pair(ADA, "Ada", "supervised").await;
    s.pair(BOB, "Bob", "full").await;
    let ada = ADA.to_string();
    let bob = BOB.to_string();
    for (who, capability, target) in [
        (&ada, "fs:write", "~/old/*"),
        (&ada, "network:http", "example.org"),
        (&ada, "fs:write", "~/recent/*"),
        (&bob, "fs:write", "~/bobs/*"),
    ] {
        let (code, _, stderr) = s
            .sandbox
            .run(&[
                "grants",
                "add",
                "--channel",
                "telegram",
                "--sender",
                who,
                capability,
                target,
            ])
            .await;
        assert_eq!(code, 0, "{stderr}");
    }
    // Three of them last used (or granted) 100 days ago, in policy's own store.
    let policy_db = s.sandbox.data_dir().join("policy.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", policy_db.display()))
        .await
        .unwrap();
    let long_ago = now_ms() - 100 * 86_400_000;
    sqlx::query("UPDATE grants SET granted_at = ? WHERE target NOT LIKE '%recent%'")
        .bind(long_ago)
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    // The builtin task, run now (it is in the store from the scheduler's first tick).
    let mut ran = (1, String::new());
    for _ in 0..50 {
        let (code, _, stderr) = s
            .sandbox
            .run(&["schedules", "run", "builtin:stale_grants"])
            .await;
        ran = (code, stderr);
        if code == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(ran.0, 0, "{}", ran.1);
    let (_, buttons) = s.nth_card(1).await;
    let card = s.cards()[0].clone();
    assert_eq!(card.body["chat_id"], json!(ADA), "the offer goes to Ada");
    let text = card.body["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.contains("revoke 2 grants you no longer use"), "{text}");
    assert!(
        text.contains("fs:write ~/old/* (never used, 100 days)")
            && text.contains("network:http example.org (never used, 100 days)"),
        "{text}"
    );
    assert!(!text.contains("recent") && !text.contains("bobs"), "{text}");
    let labels: Vec<&str> = buttons[0].iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(labels, ["Accept", "Reject", "Never again"]);
    assert!(buttons[0][0].1.starts_with("approve:"), "{buttons:?}");
    // Bob cannot accept it for her; his own grant stays his.
    s.tg.click(BOB, 2, user(BOB, "Bob", "en"), &buttons[0][0].1);
    s.tg.until("Bob told", |tg| {
        tg.texts_to(BOB)
            .iter()
            .any(|t| t == "Approval cannot be resolved: decider not authorised")
    })
    .await;
    let (_, listed, _) = s.sandbox.run(&["grants", "list"]).await;
    assert!(listed.contains("example.org"), "{listed}");
    s.tg.click(ADA, 2, user(ADA, "Ada", "en"), &buttons[0][0].1);
    s.tg.until("the offer closed", |tg| {
        tg.calls("editMessageText").iter().any(|c| {
            c.body["text"]
                .as_str()
                .unwrap_or_default()
                .contains("approved")
        })
    })
    .await;
    let mut listed = String::new();
    for _ in 0..50 {
        listed = s.sandbox.run(&["grants", "list"]).await.1;
        if !listed.contains("example.org") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        !listed.contains("example.org") && !listed.contains("/old/"),
        "her two unused grants are revoked: {listed}"
    );
    assert!(
        listed.contains("/recent/") && listed.contains("/bobs/"),
        "the others stay: {listed}"
    );
    // A write where the revoked grant allowed it asks again.
    s.llm.push(tool_calls(
        "fs_write",
        json!({"path": "~/old/a.txt", "content": "x"}),
    ));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "write it");
    s.nth_card(2).await;
    assert!(!s.home().join("old/a.txt").exists());
}

/// Accept with edit: Ada presses Edit on the grant offer, and her next message is the
/// pattern to allow instead — taken only within the offer (a folder beside it is refused,
/// the card waits), never as a turn; Bob's Edit is not a button of his. The grant is the
/// narrower pattern: a write there asks nothing, one elsewhere in the folder still asks.
#[tokio::test]
async fn an_offer_is_accepted_with_a_narrower_pattern_the_person_sends() {
    let s = telos_stack(&[]).await;
    s.pair(ADA, "Ada", "supervised").await;
    s.pair(BOB, "Bob", "full").await;
    let written = |tg: &FakeTelegram, n: usize| {
        tg.texts_to(ADA).iter().filter(|t| *t == "Written.").count() >= n
    };
    s.ada_approves_writes(1..=3).await;
    let (_, buttons) = s.nth_card(4).await;
    assert_eq!(buttons[1][0].0, "Edit");
    let edit = buttons[1][0].1.clone();
    assert!(edit.starts_with("edit:"), "{edit}");
    s.tg.click(BOB, 2, user(BOB, "Bob", "en"), &edit);
    s.tg.until("Bob's click answered", |tg| {
        tg.calls("answerCallbackQuery").iter().any(|c| {
            c.body["text"]
                .as_str()
                .is_some_and(|t| t.contains("do not recognise this button"))
        })
    })
    .await;
    let asked_before = s.llm.received().len();
    let prompted = |tg: &FakeTelegram, n: usize| {
        tg.texts_to(ADA)
            .iter()
            .filter(|t| t.starts_with("Send me what to allow instead of ~/inv/*"))
            .count()
            >= n
    };
    s.tg.click(ADA, 2, user(ADA, "Ada", "en"), &edit);
    s.tg.until("the prompt", |tg| prompted(tg, 1)).await;
    s.tg.message(ADA, user(ADA, "Ada", "en"), "~/other/*");
    s.tg.until("refused", |tg| {
        tg.texts_to(ADA)
            .iter()
            .any(|t| t.starts_with("Not accepted: what you sent is not within what was offered"))
    })
    .await;
    s.tg.click(ADA, 2, user(ADA, "Ada", "en"), &edit);
    s.tg.until("the prompt again", |tg| prompted(tg, 2)).await;
    s.tg.message(ADA, user(ADA, "Ada", "en"), "~/inv/2026/*");
    s.tg.until("the offer closed", |tg| {
        tg.calls("editMessageText").iter().any(|c| {
            c.body["text"]
                .as_str()
                .unwrap_or_default()
                .contains("always for ~/inv/2026/* [territory: permanent]")
        })
    })
    .await;
    assert_eq!(
        s.llm.received().len(),
        asked_before,
        "the edits were never turns"
    );
    let (_, listed, _) = s.sandbox.run(&["grants", "list"]).await;
    assert!(listed.contains("~/inv/2026/*"), "{listed}");
    assert!(!listed.contains("~/inv/* "), "{listed}");
    s.llm.push(tool_calls(
        "fs_write",
        json!({"path": "~/inv/2026/q1.txt", "content": "an invoice"}),
    ));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "file this invoice");
    s.tg.until("the covered write", |tg| written(tg, 4)).await;
    assert_eq!(s.cards().len(), 4, "no card under the edited grant");
    s.llm.push(tool_calls(
        "fs_write",
        json!({"path": "~/inv/5.txt", "content": "an invoice"}),
    ));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "file this invoice");
    s.nth_card(5).await;
}

/// An offer the telos engine keeps for later (the day's ad-hoc quota is spent) comes in the
/// evening digest: one message, a numbered line, a button row per item. Bob cannot accept
/// it; Ada's Accept there records the grant, and the outcome is said where she clicked.
#[tokio::test]
async fn an_offer_kept_for_the_digest_is_accepted_from_the_digest() {
    let digest_at = jiff::Zoned::now()
        .with_time_zone(jiff::tz::TimeZone::UTC)
        .checked_sub(jiff::Span::new().minutes(2))
        .unwrap()
        .strftime("%H:%M")
        .to_string();
    let s = telos_stack(&[
        ("METNOS_SCHEDULER__TICK_SECONDS", "1"),
        ("METNOS_TELOS__TIME_ZONE", "UTC"),
        ("METNOS_TELOS__DIGEST_AT", &digest_at),
        ("METNOS_TELOS__QUOTAS__ADHOC_PER_DAY", "0"),
    ])
    .await;
    s.pair(ADA, "Ada", "supervised").await;
    s.ada_approves_writes(1..=3).await;
    // The offer was weighed (one fit estimate) and kept: the digest brings it.
    let fit_asked = |s: &Stack| {
        s.llm
            .received()
            .iter()
            .any(|r| r.body.get("format").is_some_and(|f| !f.is_null()))
    };
    for _ in 0..100 {
        if fit_asked(&s) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(fit_asked(&s), "the offer was weighed");
    let (code, _, err) = s
        .sandbox
        .run(&["schedules", "run", "builtin:evening_digest"])
        .await;
    assert_eq!(code, 0, "{err}");
    let (_, buttons) = s.nth_card(4).await;
    let digest = s.cards()[3].body["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        digest.contains("Evening digest — 1 proposal(s):")
            && digest.contains("1. You approved fs:write in ~/inv/* 3 times in 7 days."),
        "{digest}"
    );
    let labels: Vec<&str> = buttons[0].iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(labels, ["1 · Accept", "1 · Reject", "1 · Never again"]);
    assert!(buttons[0][0].1.starts_with("confirm-always:"));
    s.pair(BOB, "Bob", "full").await;
    s.tg.click(BOB, 2, user(BOB, "Bob", "en"), &buttons[0][0].1);
    s.tg.until("Bob told", |tg| {
        tg.texts_to(BOB)
            .iter()
            .any(|t| t == "Approval cannot be resolved: decider not authorised")
    })
    .await;
    s.tg.click(ADA, 2, user(ADA, "Ada", "en"), &buttons[0][0].1);
    s.tg.until("the outcome said where she clicked", |tg| {
        tg.calls("answerCallbackQuery").iter().any(|c| {
            c.body["text"]
                .as_str()
                .unwrap_or_default()
                .contains("always for ~/inv/* [territory: permanent]")
        })
    })
    .await;
    let (_, listed, _) = s.sandbox.run(&["grants", "list"]).await;
    assert!(
        listed.contains("~/inv/*") && listed.contains(&ADA.to_string()),
        "{listed}"
    );
}

/// A turn the world steered (here it read a file first) is not the person's habit: its
/// approvals do not count toward a grant offer. Three such writes, then three plain ones:
/// the offer comes only after the third plain one, and says three.
#[tokio::test]
async fn approvals_in_turns_that_read_the_world_do_not_count_toward_an_offer() {
    let s = telos_stack(&[]).await;
    s.pair(ADA, "Ada", "supervised").await;
    // Her notes may be read without a card: only the writes ask.
    std::fs::write(s.home().join("notes.txt"), "file the invoices").unwrap();
    let ada = ADA.to_string();
    let (code, _, stderr) = s
        .sandbox
        .run(&[
            "grants",
            "add",
            "--channel",
            "telegram",
            "--sender",
            &ada,
            "fs:read",
            "~/notes.txt",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let written = |tg: &FakeTelegram, n: usize| {
        tg.texts_to(ADA).iter().filter(|t| *t == "Written.").count() >= n
    };
    for i in 1..=6 {
        if i <= 3 {
            s.llm
                .push(tool_calls("fs_read", json!({"path": "~/notes.txt"})));
        }
        s.llm.push(tool_calls(
            "fs_write",
            json!({"path": format!("~/inv/{i}.txt"), "content": "an invoice"}),
        ));
        s.tg.message(ADA, user(ADA, "Ada", "en"), "file this invoice");
        let (_, buttons) = s.nth_card(i).await;
        s.tg.click(ADA, 2, user(ADA, "Ada", "en"), &buttons[0][0].1);
        s.tg.until("the write", |tg| written(tg, i)).await;
        assert!(s.home().join(format!("inv/{i}.txt")).exists());
    }
    s.nth_card(7).await;
    let offer = s.cards()[6].body["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        offer.contains("writes in ~/inv/") && offer.contains("you approved 3 of them in 7 days"),
        "only the three plain approvals counted: {offer}"
    );
    let cards: Vec<String> = s.cards()[..6]
        .iter()
        .map(|c| c.body["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        cards.iter().all(|c| !c.contains("from now on")),
        "no offer before: {cards:?}"
    );
}

fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}
