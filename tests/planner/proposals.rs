//! Proposals at the opening of a chat session.

use super::*;

/// The owner's TELOS.md for the terminal's proposals (every `cli` sender's file).
const OWNER_TELOS: &str = "---
telos_version: 1.1
written_at: 2026-11-01T12:00:00+01:00
written_by: owner
previous_hash: genesis
---
## t.tempo — Free my time from repetitive chores
weight: 0.6
activation_threshold: 0.3
## t.ordine — Keep the order of my digital data
weight: 0.4
activation_threshold: 0.4
";

/// Issue 22 on the terminal: what Metnos proposes to the local user on its own waits for
/// their next `metnos chat` (the terminal has no push channel and no digest), unweighed; a
/// session opens with two of them at most (the telos engine's quota per session), each
/// answered there — y records the grant, Enter leaves it for later ("viewed, undecided");
/// the next session shows the one left for later again and the third, which waited; a
/// third session has nothing left to show.
#[tokio::test]
async fn a_chat_session_opens_with_two_proposals_at_most_and_the_rest_wait_for_the_next() {
    let s = stack_with(
        &[
            ("METNOS_TURNS__CLI_LEVEL", "Supervised"),
            ("METNOS_TELOS__PROTECTED_WINDOWS", "[]"),
            // The session's quota alone decides (no bother between two cards).
            ("METNOS_TELOS__BOTHER_BETA", "0"),
            // One approval under a folder is enough for an offer.
            ("METNOS_SCHEDULER__FATIGUE_APPROVALS", "1"),
        ],
        true,
    )
    .await;
    s.sandbox.sign_telos(OWNER_TELOS).await;
    let is_fit_ask = |body: &Value| body.get("format").is_some_and(|f| !f.is_null());
    s.fake.always(Reply::from_request(move |body| {
        if body.get("format").is_some_and(|f| !f.is_null()) {
            Reply::Json(json!({"fits": [
                {"telos_id": "t.tempo", "fit": 0.9, "why": "fewer cards to answer"},
                {"telos_id": "t.ordine", "fit": 0.6, "why": "things in their place"},
            ]}))
        } else {
            Reply::Text("written".into())
        }
    }));
    for folder in ["a", "b", "c"] {
        std::fs::create_dir_all(s.home().join(folder)).unwrap();
        s.fake.push(tool_calls(&[(
            "fs_write",
            json!({"path": format!("~/{folder}/x.txt"), "content": "x"}),
        )]));
        let output = s
            .run_with_input(
                &[
                    "ask",
                    "--language",
                    "en",
                    &format!("write x to ~/{folder}/x.txt"),
                ],
                b"y\n",
            )
            .await;
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Three offers wait for a session, none weighed yet (no model asked for a fit).
    let db = s.sandbox.data_dir().join("planner.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let waiting = || async {
        let count: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM proposals WHERE decision = 'session'")
                .fetch_one(&pool)
                .await
                .unwrap();
        count
    };
    let deadline = std::time::Instant::now() + EVENT_LIMIT;
    while waiting().await < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "three offers never waited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let fit_asks = || {
        s.fake
            .received()
            .iter()
            .filter(|r| is_fit_ask(&r.body))
            .count()
    };
    assert_eq!(fit_asks(), 0, "nothing is weighed before a session opens");
    let proposes = |stderr: &str| stderr.matches("Metnos proposes:").count();
    let grants = || async {
        let (status, listed, stderr) = s.sandbox.run(&["grants", "list"]).await;
        assert_eq!(status, 0, "{stderr}");
        listed
    };

    // A script's input is requests, not answers to cards it never saw: piped without
    // --proposals, the chat offers none and its "y" line is a request like any other.
    s.fake.push(Reply::Text("a request".into()));
    let output = s
        .run_with_input(&["chat", "--language", "en"], b"y\n/quit\n")
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(proposes(&stderr), 0, "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "a request");
    assert_eq!(waiting().await, 3);
    assert_eq!(fit_asks(), 0);

    // The first session: two cards, the third waits. y to the first, Enter to the second.
    let output = s
        .run_with_input(
            &["chat", "--language", "en", "--proposals"],
            b"y\n\n/quit\n",
        )
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(proposes(&stderr), 2, "{stderr}");
    assert!(
        stderr.contains("writes in ~/a/") && stderr.contains("writes in ~/b/"),
        "{stderr}"
    );
    assert!(!stderr.contains("~/c/"), "{stderr}");
    assert!(
        stderr.contains("Done.") && stderr.contains("Later:"),
        "{stderr}"
    );
    let listed = grants().await;
    assert!(listed.contains("~/a/*"), "{listed}");
    assert!(
        !listed.contains("~/b/*") && !listed.contains("~/c/*"),
        "{listed}"
    );
    assert_eq!(waiting().await, 1, "the third waits for the next session");

    // A session whose input ends at once answers nothing: the card left for later and the
    // third (published now) come back next time.
    let output = s
        .run_with_input(&["chat", "--language", "en", "--proposals"], b"")
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        proposes(&stderr),
        1,
        "it stops at the first unanswered: {stderr}"
    );
    assert_eq!(
        waiting().await,
        0,
        "the third was published in that session"
    );

    // The second: the card left for later again (still pending), then the third. n, never.
    let output = s
        .run_with_input(
            &["chat", "--language", "en", "--proposals"],
            b"n\nnever\n/quit\n",
        )
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(proposes(&stderr), 2, "{stderr}");
    let (b, c) = (
        stderr.find("~/b/").expect("the card left for later"),
        stderr.find("~/c/").expect("the third offer"),
    );
    assert!(b < c, "{stderr}");
    assert!(stderr.contains("Rejected: I will not propose"), "{stderr}");
    let listed = grants().await;
    assert!(
        !listed.contains("~/b/*") && !listed.contains("~/c/*"),
        "{listed}"
    );
    assert_eq!(waiting().await, 0);
    // "never" reached the telos engine: the kind is on the never-list.
    let (status, never, stderr) = s.sandbox.run(&["telos", "never", "list"]).await;
    assert_eq!(status, 0, "{stderr}");
    assert!(never.contains("grant_offer:fs"), "{never}");
    // Each offer was weighed once, in the session that showed it: past the first session's
    // two, c was deferred by code (no model asked), b was not weighed again.
    assert_eq!(fit_asks(), 3);

    // The third session has nothing to show; the grant holds: a write in ~/a asks nothing.
    s.fake.push(tool_calls(&[(
        "fs_write",
        json!({"path": "~/a/y.txt", "content": "y"}),
    )]));
    let output = s
        .run_with_input(
            &["chat", "--language", "en", "--proposals"],
            b"write y to ~/a/y.txt\n/quit\n",
        )
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(proposes(&stderr), 0, "{stderr}");
    assert!(!stderr.contains("Approve?"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(s.home().join("a/y.txt")).unwrap(),
        "y"
    );

    // Who may open a session: the owner, for a `cli` person, with a proper session id.
    let open = |principal: common_pb::Principal, session: &str| pb::OpenSessionRequest {
        principal: Some(principal),
        session_id: session.into(),
        language: common_pb::Language::English as i32,
    };
    let mut as_gateway = PlannerServiceClient::new(s.up.channel_as("planner", Identity::Gateway));
    let refused = as_gateway
        .open_session(open(principal(), "session-0001"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    let telegram = common_pb::Principal {
        channel: "telegram".into(),
        sender_id: "42".into(),
    };
    let refused = s
        .planner()
        .await
        .open_session(open(telegram, "session-0001"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    for bad in ["short", "has spaces in it", &"x".repeat(129)] {
        let refused = s
            .planner()
            .await
            .open_session(open(principal(), bad))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{bad}");
        assert!(refused.message().contains("session_id"), "{refused:?}");
    }
}

/// Issue 47, item 3 on the terminal: without a TELOS.md the offer waiting for a session is
/// held back when the session opens, and that same session says, in its language, how to
/// write one — the owner's own command — once: the next session does not say it again.
#[tokio::test]
async fn a_chat_session_without_a_telos_asks_once_for_one() {
    let s = stack_with(
        &[
            ("METNOS_TURNS__CLI_LEVEL", "Supervised"),
            ("METNOS_TELOS__PROTECTED_WINDOWS", "[]"),
            ("METNOS_SCHEDULER__FATIGUE_APPROVALS", "1"),
        ],
        true,
    )
    .await;
    s.fake.always(Reply::Text("scritto".into()));
    std::fs::create_dir_all(s.home().join("a")).unwrap();
    s.fake.push(tool_calls(&[(
        "fs_write",
        json!({"path": "~/a/x.txt", "content": "x"}),
    )]));
    let output = s
        .run_with_input(&["ask", "--language", "en", "write x to ~/a/x.txt"], b"y\n")
        .await;
    assert!(output.status.success());
    let db = s.sandbox.data_dir().join("planner.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + EVENT_LIMIT;
    loop {
        let waiting: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM proposals WHERE decision = 'session'")
                .fetch_one(&pool)
                .await
                .unwrap();
        if waiting == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no offer waited");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let asks = |stderr: &str| stderr.matches("`metnos telos edit`").count();
    let output = s
        .run_with_input(&["chat", "--language", "it", "--proposals"], b"/quit\n")
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(asks(&stderr), 1, "{stderr}");
    assert!(stderr.contains("Scrivi il tuo"), "in Italian: {stderr}");
    assert!(
        !stderr.contains("Metnos ti propone:"),
        "held back: {stderr}"
    );
    let output = s
        .run_with_input(&["chat", "--language", "it", "--proposals"], b"/quit\n")
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(asks(&stderr), 0, "asked once: {stderr}");
}
