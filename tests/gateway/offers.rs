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
    telos_stack_with(settings, ADA_TELOS).await
}

/// [`telos_stack`] with Ada's (the owner's) TELOS.md `telos`.
async fn telos_stack_with(settings: &[(&str, &str)], telos: &str) -> Stack {
    let owner = format!("[\"telegram:{ADA}\"]");
    let mut all = vec![
        ("METNOS_TELOS__OWNER_PRINCIPALS", owner.as_str()),
        ("METNOS_TELOS__PROTECTED_WINDOWS", "[]"),
    ];
    all.extend_from_slice(settings);
    let s = stack_with(&all).await;
    s.sandbox.sign_telos(telos).await;
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

/// The names of the tools the model was offered in the last turn request it received (a
/// request asking for telos fits is not one).
fn last_offered(s: &Stack) -> Vec<String> {
    let received = s.llm.received();
    let turn = received
        .iter()
        .rev()
        .find(|r| r.body.get("format").is_none_or(|f| f.is_null()))
        .expect("a turn's request");
    turn.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// When the builtin task `id`'s last finished run started, and its output, as `metnos
/// schedules list --json` says them (no time while a run is under way).
async fn last_run(s: &Stack, id: &str) -> (Value, Value) {
    let (_, out, _) = s.sandbox.run(&["schedules", "list", "--json"]).await;
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|o| o["id"] == id)
        .map(|o| {
            // A run under way says so, its output is the one before.
            let done = o["last_status"] != "running";
            let at = if done {
                o["last_run_at"].clone()
            } else {
                Value::Null
            };
            (at, o["last_output"].clone())
        })
        .unwrap_or((Value::Null, Value::Null))
}

/// Runs the builtin task `id` now (it is in the store from the scheduler's first tick) and
/// waits for that run to end; its output.
async fn run_builtin(s: &Stack, id: &str) -> String {
    let before = last_run(s, id).await.0;
    let mut ran = (1, String::new());
    for _ in 0..50 {
        let (code, _, stderr) = s.sandbox.run(&["schedules", "run", id]).await;
        ran = (code, stderr);
        if code == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(ran.0, 0, "{id}: {}", ran.1);
    for _ in 0..100 {
        let (at, output) = last_run(s, id).await;
        if !at.is_null() && at != before {
            return output.as_str().unwrap_or_default().to_owned();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{id} did not run");
}

/// Issue 46, item 3: the model asked three times for `table_extract`, a tool that does not
/// exist, with what `web_fetch` read; earlier turns piped web_fetch's content into
/// parse_local, whose words answer the wish. `synt_suggest` offers the owner (Ada, the
/// first of `owner_principals`) to keep web_fetch → parse_local as a shortcut — weighed by
/// the telos engine, a card with Accept / Reject / Never again whose words the approval
/// service writes from its arguments. Bob cannot accept it; Ada's Accept, once the
/// proposals' upkeep has run, keeps the shortcut (`metnos mnestome list` shows it), and a
/// request that names it is offered web_fetch, which it was not before.
#[tokio::test]
async fn a_chain_for_a_recurring_wish_is_offered_as_a_shortcut_and_accept_keeps_it() {
    let s = telos_stack(&[("METNOS_SCHEDULER__TICK_SECONDS", "1")]).await;
    s.pair(ADA, "Ada", "supervised").await;
    s.pair(BOB, "Bob", "full").await;
    let request = "table_extract on the prices, please";
    s.tg.message(ADA, user(ADA, "Ada", "en"), request);
    s.tg.until("the first answer", |tg| {
        tg.texts_to(ADA).iter().any(|t| t == "Written.")
    })
    .await;
    let before = last_offered(&s);
    assert!(before.iter().any(|t| t == "parse_local"), "{before:?}");
    assert!(!before.iter().any(|t| t == "web_fetch"), "{before:?}");
    // What earlier turns taught (learning itself is the planner's tests').
    let db = s.sandbox.data_dir().join("planner.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let now = now_ms();
    sqlx::query("INSERT INTO passages (from_executor, from_field, to_executor, to_arg, weight, uses, successes, last_used) VALUES ('web_fetch', 'content', 'parse_local', 'text', 0.59, 4, 4, ?)")
        .bind(now).execute(&pool).await.unwrap();
    sqlx::query("INSERT INTO protos (from_executor, wanted, arg_names, weight, uses, first_seen, last_used) VALUES ('web_fetch', 'table_extract', 'page', 0.49, 3, ?, ?)")
        .bind(now).bind(now).execute(&pool).await.unwrap();
    let said = run_builtin(&s, "builtin:synt_suggest").await;
    assert!(
        said.contains("1 recurring wish(es), 1 with a chain of existing executors, 1 offered"),
        "{said}"
    );
    let (_, buttons) = s.nth_card(1).await;
    let card = s.cards()[0].clone();
    assert_eq!(card.body["chat_id"], json!(ADA), "the owner is asked");
    let text = card.body["text"].as_str().unwrap_or_default().to_owned();
    assert!(
        text.contains("keep a shortcut for `table_extract`"),
        "{text}"
    );
    assert!(
        text.contains("table_extract was asked for 3 times; web_fetch → parse_local does it"),
        "{text}"
    );
    let labels: Vec<&str> = buttons[0].iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(labels, ["Accept", "Reject", "Never again"]);
    // A second run offers nothing new: the offer's row is its claim.
    let said = run_builtin(&s, "builtin:synt_suggest").await;
    assert!(said.contains("0 offered"), "{said}");
    // Bob cannot accept it for her.
    s.tg.click(BOB, 2, user(BOB, "Bob", "en"), &buttons[0][0].1);
    s.tg.until("Bob told", |tg| {
        tg.texts_to(BOB)
            .iter()
            .any(|t| t == "Approval cannot be resolved: decider not authorised")
    })
    .await;
    let said = run_builtin(&s, "builtin:proposal_upkeep").await;
    assert!(said.contains("0 shortcut(s) kept"), "{said}");
    let shortcuts = || async {
        let (code, out, stderr) = s.sandbox.run(&["mnestome", "list"]).await;
        assert_eq!(code, 0, "{stderr}");
        out
    };
    assert!(
        !shortcuts().await.contains("shortcuts kept"),
        "not before Accept"
    );
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
    let said = run_builtin(&s, "builtin:proposal_upkeep").await;
    assert!(said.contains("1 shortcut(s) kept"), "{said}");
    let listed = shortcuts().await;
    assert!(
        listed.contains("shortcuts kept:")
            && listed.contains("table_extract: web_fetch → parse_local"),
        "{listed}"
    );
    assert_eq!(s.cards().len(), 1, "one offer, once");
    // A request naming the shortcut is offered its first executor too.
    s.tg.message(ADA, user(ADA, "Ada", "en"), request);
    s.tg.until("the second answer", |tg| {
        tg.texts_to(ADA).iter().filter(|t| *t == "Written.").count() >= 2
    })
    .await;
    let after = last_offered(&s);
    assert!(
        after.iter().any(|t| t == "web_fetch") && after.iter().any(|t| t == "parse_local"),
        "{after:?}"
    );
    // Forgetting the executor forgets the shortcut.
    let (code, out, stderr) = s.sandbox.run(&["mnestome", "forget", "parse_local"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        out.contains("forgot 2 passage(s), wish(es) and shortcut(s)"),
        "{out}"
    );
    assert!(!shortcuts().await.contains("shortcuts kept"));
}

/// Ada's TELOS.md with the seed's non-retreat end.
const ADA_TELOS_NON_RETREAT: &str = "---
telos_version: 1.1
written_at: 2026-11-01T12:00:00+01:00
written_by: ada
previous_hash: genesis
---
## t.tempo — Free my time from repetitive chores
weight: 0.5
activation_threshold: 0.3
## t.ordine — Keep the order of my digital data
weight: 0.2
activation_threshold: 0.4
## t.coltivazione_strumenti — Try before saying I cannot
weight: 0.3
activation_threshold: 0.3
";

/// The non-retreat telos's effective weight for Ada, as `metnos telos show` says it.
async fn non_retreat_weight(s: &Stack) -> f64 {
    let who = format!("telegram:{ADA}");
    let (code, out, stderr) = s.sandbox.run(&["telos", "show", "--person", &who]).await;
    assert_eq!(code, 0, "{stderr}");
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|t| t["non_retreat"] == true)
        .and_then(|t| t["weight_effective"].as_f64())
        .unwrap_or_else(|| panic!("no non-retreat telos: {out}"))
}

/// Ada asks for what needs a tool that does not exist; waits for the `n`-th answer that
/// says so.
async fn attempt(s: &Stack, n: usize) {
    s.llm
        .push(tool_calls("table_extract", json!({"page": "prices"})));
    s.llm.push(Reply::Text("I cannot extract tables.".into()));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "extract the table of prices");
    s.tg.until("the attempt's question", |tg| {
        tg.texts_to(ADA)
            .iter()
            .filter(|t| t.contains("There is no tool for `table_extract`"))
            .count()
            >= n
    })
    .await;
}

/// Issue 46, item 5: non-retreat from real traffic. The model asks for `table_extract`, a
/// tool that does not exist, then gives up: the answer does not end in a bare "I cannot" —
/// it says there is no tool for it and what would let Metnos do it. That is a non-retreat
/// attempt: Ada's "maybe later" is asked about in its words ("stop trying to find a way to
/// …?"), her "yes" records a stop of it — the non-retreat telos lowered, shortcut offers
/// blocked for a day (one found then is rejected by the telos engine, no card). A second
/// attempt's plain "stop" is recorded by the vaglio's own recogniser and lowers it again;
/// a "stop" when no attempt is open records nothing.
#[tokio::test]
async fn a_stop_during_a_non_retreat_attempt_lowers_the_telos_and_blocks_offers_a_day() {
    let s = telos_stack_with(
        &[("METNOS_SCHEDULER__TICK_SECONDS", "1")],
        ADA_TELOS_NON_RETREAT,
    )
    .await;
    s.pair(ADA, "Ada", "supervised").await;
    let start = non_retreat_weight(&s).await;
    attempt(&s, 1).await;
    let answer = s.tg.texts_to(ADA).last().cloned().unwrap_or_default();
    assert!(answer.starts_with("I cannot extract tables."), "{answer}");
    assert!(
        answer.contains("say stop and I will not try again today"),
        "{answer}"
    );
    let said = |text: &str| {
        s.tg.message(ADA, user(ADA, "Ada", "en"), text);
        std::future::ready(())
    };
    let before = s.tg.texts_to(ADA).len();
    said("maybe later").await;
    s.tg.until("the question", |tg| tg.texts_to(ADA).len() > before)
        .await;
    assert_eq!(
        s.tg.texts_to(ADA).last().unwrap(),
        // As sent in Telegram's HTML: the person reads the quotes.
        "Do you want me to stop trying to find a way to &quot;table_extract&quot;?"
    );
    let before = s.tg.texts_to(ADA).len();
    said("yes").await;
    s.tg.until("the stop", |tg| tg.texts_to(ADA).len() > before)
        .await;
    assert_eq!(
        s.tg.texts_to(ADA).last().unwrap(),
        "All right: I will not look for a way to `table_extract` again today."
    );
    let after_one = non_retreat_weight(&s).await;
    assert!(after_one < start - 0.01, "{start} -> {after_one}");

    // For a day, a shortcut for it is not offered: the telos engine rejects it, no card.
    let db = s.sandbox.data_dir().join("planner.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let now = now_ms();
    sqlx::query("INSERT INTO passages (from_executor, from_field, to_executor, to_arg, weight, uses, successes, last_used) VALUES ('web_fetch', 'content', 'parse_local', 'text', 0.59, 4, 4, ?)")
        .bind(now).execute(&pool).await.unwrap();
    sqlx::query("INSERT INTO protos (from_executor, wanted, arg_names, weight, uses, first_seen, last_used) VALUES ('web_fetch', 'table_extract', 'page', 0.49, 3, ?, ?)")
        .bind(now).bind(now).execute(&pool).await.unwrap();
    let said_by_job = run_builtin(&s, "builtin:synt_suggest").await;
    assert!(said_by_job.contains("1 offered"), "{said_by_job}");
    let (decision, reason): (String, String) =
        sqlx::query_as("SELECT decision, reason FROM proposals WHERE kind = 'shortcut_offer'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (decision.as_str(), reason.as_str()),
        ("reject", "stopped_by_person")
    );
    assert!(s.cards().is_empty(), "no card");

    // Another attempt, stopped with a plain "stop": the vaglio records it.
    attempt(&s, 2).await;
    let before = s.tg.texts_to(ADA).len();
    said("stop").await;
    s.tg.until("the second stop", |tg| tg.texts_to(ADA).len() > before)
        .await;
    assert_eq!(
        s.tg.texts_to(ADA).last().unwrap(),
        "All right: I will not look for a way to `table_extract` again today."
    );
    let after_two = non_retreat_weight(&s).await;
    assert!(after_two < after_one - 0.01, "{after_one} -> {after_two}");
    // No attempt open now: a stop is an ordinary one, and lowers nothing.
    let before = s.tg.texts_to(ADA).len();
    said("stop").await;
    s.tg.until("nothing to stop", |tg| tg.texts_to(ADA).len() > before)
        .await;
    assert_eq!(
        s.tg.texts_to(ADA).last().unwrap(),
        "I am not doing anything right now."
    );
    assert!((non_retreat_weight(&s).await - after_two).abs() < 1e-9);
}

/// Issue 47, item 3: the question that never arrived. Bob has no TELOS.md (Ada, the owner,
/// has hers); his third approved write in one folder makes an offer the telos engine holds
/// back for it, and Bob is asked on Telegram, once, to have his written — naming the
/// command that writes his (`--person`), not the owner's. A second offer held back later
/// asks nothing again.
#[tokio::test]
async fn a_person_without_a_telos_is_asked_once_on_telegram_to_have_one_written() {
    let s = telos_stack(&[]).await;
    s.pair(BOB, "Bob", "supervised").await;
    let command = format!("`metnos telos edit --person telegram:{BOB}`");
    let asked = |tg: &FakeTelegram| {
        tg.texts_to(BOB)
            .iter()
            .filter(|t| t.contains(&command))
            .count()
    };
    s.approves_writes(BOB, "Bob", "bob", 1..=3).await;
    s.tg.until("Bob asked", |tg| asked(tg) >= 1).await;
    let question =
        s.tg.texts_to(BOB)
            .into_iter()
            .find(|t| t.contains(&command))
            .unwrap();
    assert!(
        question.contains("TELOS.md") && question.contains("Ask whoever runs your Metnos"),
        "{question}"
    );
    // A second offer, held back the same way: journaled, and no second question.
    s.approves_writes(BOB, "Bob", "bob2", 4..=6).await;
    let person = format!("telegram:{BOB}");
    let mut rejected = 0;
    for _ in 0..100 {
        let (_, out, _) = s
            .sandbox
            .run(&["telos", "rejected", "--person", &person])
            .await;
        rejected = out.matches("no_telos_declared").count();
        if rejected >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        rejected, 2,
        "both offers held back for the missing TELOS.md"
    );
    assert_eq!(asked(&s.tg), 1, "asked once");
    // Ada, who has hers, was never asked.
    assert!(!s.tg.texts_to(ADA).iter().any(|t| t.contains("TELOS.md")));
}
