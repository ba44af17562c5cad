//! The planner store on SQLite and on a real PostgreSQL server: turns are claimed once,
//! found by token and by principal, cancelled by flag; the scratchpad keeps entries per
//! turn and prunes only those of finished turns.

use std::time::Duration;

use metnos_kit::testing::TestStore;
use metnos_planner::store::{Holder, MIGRATIONS, ScratchEntry, State, Store};

async fn open(store: &TestStore) -> Store {
    let db = metnos_kit::store::open(
        &store.spec(),
        "planner",
        &MIGRATIONS,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    Store::new(db)
}

/// Ten concurrent claims of the same turn.
async fn claim_concurrently(store: &Store, turn_id: &'static str) -> Vec<bool> {
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.claim_suspended(turn_id, 5).await.unwrap()
        }));
    }
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.unwrap());
    }
    out
}

async fn a_suspended_turn_is_claimed_exactly_once(test: TestStore) {
    let store = open(&test).await;
    store
        .insert_turn("t1", "cli", "alice", "{}", "{}", 1)
        .await
        .unwrap();
    store
        .save("t1", State::Suspended, Some("tok"), "{\"x\":1}", 2)
        .await
        .unwrap();
    assert_eq!(store.by_token("tok").await.unwrap().unwrap().turn_id, "t1");
    assert_eq!(
        store
            .current_of("cli", "alice")
            .await
            .unwrap()
            .unwrap()
            .state,
        State::Suspended
    );
    let claims = claim_concurrently(&store, "t1").await;
    assert_eq!(claims.iter().filter(|c| **c).count(), 1, "{claims:?}");
    let turn = store.get("t1").await.unwrap().unwrap();
    assert_eq!(turn.state, State::Resuming);
    assert_eq!(turn.checkpoint, "{\"x\":1}");
    store
        .finish("t1", "{\"final_kind\":\"answer\"}", 3)
        .await
        .unwrap();
    let turn = store.get("t1").await.unwrap().unwrap();
    assert_eq!(turn.state, State::Finished);
    assert_eq!(turn.record.as_deref(), Some("{\"final_kind\":\"answer\"}"));
    assert!(store.by_token("tok").await.unwrap().is_none());
    assert!(store.current_of("cli", "alice").await.unwrap().is_none());
    assert!(!store.claim_suspended("t1", 4).await.unwrap());
}

/// Eleventh review of issue 38: a resume that read the turn while it waited on one card
/// does not claim it once it waits on another (its checkpoint would be the old one).
async fn a_turn_is_claimed_only_while_it_waits_on_the_card_it_was_read_with(test: TestStore) {
    let store = open(&test).await;
    store
        .insert_turn("tc", "telegram", "42", "{}", "{}", 1)
        .await
        .unwrap();
    store
        .save("tc", State::Suspended, Some("second"), "{\"x\":2}", 2)
        .await
        .unwrap();
    assert!(
        !store
            .claim_suspended_at("tc", Some("first"), 3)
            .await
            .unwrap()
    );
    assert_eq!(
        store.get("tc").await.unwrap().unwrap().state,
        State::Suspended
    );
    assert!(
        store
            .claim_suspended_at("tc", Some("second"), 3)
            .await
            .unwrap()
    );
}

async fn cancel_is_a_flag_any_replica_sees(test: TestStore) {
    let store = open(&test).await;
    store
        .insert_turn("t2", "telegram", "42", "{}", "{}", 1)
        .await
        .unwrap();
    assert!(!store.cancel_requested("t2").await.unwrap());
    store.request_cancel("t2").await.unwrap();
    assert!(store.cancel_requested("t2").await.unwrap());
    assert!(!store.cancel_requested("nope").await.unwrap());
}

async fn the_scratchpad_is_per_turn_and_pruned_after_its_turn_ends(test: TestStore) {
    let store = open(&test).await;
    store
        .insert_turn("live", "cli", "a", "{}", "{}", 1)
        .await
        .unwrap();
    store
        .insert_turn("done", "cli", "a", "{}", "{}", 1)
        .await
        .unwrap();
    for (id, turn) in [("s1", "live"), ("s2", "done")] {
        let entry = ScratchEntry {
            id: id.into(),
            turn_id: turn.into(),
            step: 1,
            kind: "text".into(),
            content: "x".repeat(5000),
            observation: "{}".into(),
            size_bytes: 5000,
        };
        store.put_scratch(&entry, 10).await.unwrap();
    }
    assert!(store.get_scratch("live", "s1").await.unwrap().is_some());
    // Another turn's entry is not this turn's.
    assert!(store.get_scratch("live", "s2").await.unwrap().is_none());
    store.finish("done", "{}", 20).await.unwrap();
    assert_eq!(store.prune_scratch(100).await.unwrap(), 1);
    assert!(store.get_scratch("done", "s2").await.unwrap().is_none());
    assert_eq!(
        store
            .get_scratch("live", "s1")
            .await
            .unwrap()
            .unwrap()
            .content
            .len(),
        5000
    );
}

/// Two replicas on one store: A (lease 10 s) and B, and A's next process A2.
async fn replicas(test: &TestStore) -> (Store, Store, Store) {
    let a = open(test).await;
    let holder = |replica: &str| Holder::new(replica, 10_000);
    let b = Store::with_holder(a.db().clone(), holder("b"));
    let a1 = Store::with_holder(a.db().clone(), holder("a"));
    let a2 = Store::with_holder(a.db().clone(), holder("a"));
    (a1, b, a2)
}

async fn a_turn_is_taken_over_only_once_its_holders_lease_expired(test: TestStore) {
    let (a, b, _) = replicas(&test).await;
    // A runs "r" and resumes "w" (both held until 11 000).
    a.insert_turn("r", "cli", "x", "{}", "{}", 1_000)
        .await
        .unwrap();
    a.insert_turn("w", "cli", "x", "{}", "{}", 1_000)
        .await
        .unwrap();
    assert!(
        a.save("w", State::Suspended, Some("tok"), "{\"w\":1}", 1_000)
            .await
            .unwrap()
    );
    assert!(a.claim_suspended("w", 1_000).await.unwrap());
    assert!(
        !b.claim_suspended("w", 5_000).await.unwrap(),
        "a live lease is not taken over"
    );
    assert!(b.expired(5_000, 10).await.unwrap().is_empty());
    let mut expired: Vec<String> = b
        .expired(12_000, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.turn_id)
        .collect();
    expired.sort();
    assert_eq!(expired, ["r", "w"]);
    // A renews "w" while it waits: still A's at 12 000.
    assert!(a.renew("w", 9_000).await.unwrap());
    assert!(!b.claim_suspended("w", 12_000).await.unwrap());
    assert!(a.standing("w").await.unwrap().held);
    assert!(!b.standing("w").await.unwrap().held);

    // "r" was not renewed: B ends it, and A can then write nothing more of it.
    assert!(
        b.close_expired(
            "r",
            "{\"final_kind\":\"error\"}",
            Some("I was restarted"),
            12_000
        )
        .await
        .unwrap()
    );
    assert!(
        !b.close_expired("r", "{}", Some("twice"), 12_001)
            .await
            .unwrap(),
        "ended once"
    );
    // Its notice goes out once: one replica claims it, the other sees it taken; a failed
    // delivery puts it off until its retry time, a delivered one is gone.
    let notices = a.notices(12_001, 10).await.unwrap();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].text, "I was restarted");
    assert_eq!(notices[0].turn_id, "r");
    assert!(a.claim_notice("r", 12_001, 20_000).await.unwrap());
    assert!(!b.claim_notice("r", 12_002, 20_001).await.unwrap());
    assert!(b.notices(12_002, 10).await.unwrap().is_empty());
    a.release_notice("r", 20_000, 30_000).await.unwrap();
    assert!(
        b.notices(29_999, 10).await.unwrap().is_empty(),
        "not before its retry time"
    );
    assert!(!b.claim_notice("r", 29_999, 40_000).await.unwrap());
    // A claims again; it hangs past its claim and B takes over: A's late release or drop
    // touches nothing of B's.
    assert!(a.claim_notice("r", 30_001, 40_000).await.unwrap());
    assert!(b.claim_notice("r", 40_001, 50_000).await.unwrap());
    a.release_notice("r", 40_000, 0).await.unwrap();
    a.drop_notice("r", 40_000).await.unwrap();
    assert!(
        !a.claim_notice("r", 40_002, 50_002).await.unwrap(),
        "still B's"
    );
    // Still there: B gives it back and it is listed again.
    b.release_notice("r", 50_000, 0).await.unwrap();
    assert_eq!(
        a.notices(50_001, 10).await.unwrap().len(),
        1,
        "A's drop touched nothing"
    );
    assert!(b.claim_notice("r", 50_001, 50_002).await.unwrap());
    b.drop_notice("r", 50_002).await.unwrap();
    assert!(a.notices(99_999_999, 10).await.unwrap().is_empty());
    assert!(!a.claim_notice("r", 99_999_999, 99_999_999).await.unwrap());
    // A notice a driver's late answer made moot is dropped, unless it is being sent.
    a.set_notice("r", "late").await.unwrap();
    a.answered("r", 60_000).await.unwrap();
    assert!(a.notices(99_999_999, 10).await.unwrap().is_empty());
    a.set_notice("r", "again").await.unwrap();
    assert!(b.claim_notice("r", 60_000, 70_000).await.unwrap());
    a.answered("r", 60_001).await.unwrap();
    b.release_notice("r", 70_000, 0).await.unwrap();
    assert_eq!(a.notices(60_002, 10).await.unwrap().len(), 1);
    assert!(!a.finish("r", "{}", 12_002).await.unwrap());
    assert!(
        !a.save("r", State::Suspended, Some("t2"), "{}", 12_002)
            .await
            .unwrap()
    );
    assert_eq!(a.get("r").await.unwrap().unwrap().state, State::Finished);
    assert!(!a.standing("r").await.unwrap().held);

    // A's lease on "w" ends at 19 000: B takes it over from its checkpoint, and only B
    // may commit to running its call.
    assert!(b.claim_suspended("w", 20_000).await.unwrap());
    let w = b.get("w").await.unwrap().unwrap();
    assert_eq!(
        (w.state, w.checkpoint.as_str(), w.owner.as_str()),
        (State::Resuming, "{\"w\":1}", "b")
    );
    assert!(!a.commit_to_run("w", "{}", 20_001).await.unwrap());
    assert!(b.commit_to_run("w", "{\"ran\":1}", 20_001).await.unwrap());
    assert!(
        !b.commit_to_run("w", "{}", 20_002).await.unwrap(),
        "committed once"
    );
    let w = b.get("w").await.unwrap().unwrap();
    assert_eq!((w.state, w.approval_token), (State::Running, None));
}

async fn a_cancel_wins_over_a_later_commit_to_run(test: TestStore) {
    let (a, b, _) = replicas(&test).await;
    a.insert_turn("c", "cli", "x", "{}", "{}", 1_000)
        .await
        .unwrap();
    assert!(
        a.save("c", State::Suspended, Some("tok"), "{}", 1_000)
            .await
            .unwrap()
    );
    assert!(a.claim_suspended("c", 1_000).await.unwrap());
    b.request_cancel("c").await.unwrap();
    assert!(!a.commit_to_run("c", "{}", 2_000).await.unwrap());
    let standing = a.standing("c").await.unwrap();
    assert!(standing.cancel_requested && standing.held);
}

async fn a_dead_resumers_turn_waits_again_and_a_restarted_replica_frees_its_own_at_once(
    test: TestStore,
) {
    let (a, b, a2) = replicas(&test).await;
    a.insert_turn("x", "cli", "x", "{}", "{}", 1_000)
        .await
        .unwrap();
    assert!(
        a.save("x", State::Suspended, Some("tok"), "{}", 1_000)
            .await
            .unwrap()
    );
    assert!(a.claim_suspended("x", 1_000).await.unwrap());
    assert!(!b.release_expired("x", 5_000).await.unwrap());
    assert!(b.release_expired("x", 20_000).await.unwrap());
    let x = b.get("x").await.unwrap().unwrap();
    assert_eq!(
        (x.state, x.approval_token.as_deref()),
        (State::Suspended, Some("tok"))
    );
    assert_eq!(b.released_before(30_000, 10).await.unwrap().len(), 1);
    assert!(b.released_before(5_000, 10).await.unwrap().is_empty());

    // A's process dies holding "y" and "z"; A's next process frees them without waiting,
    // and leaves B's turns alone.
    let now = metnos_kit::time::now_ms();
    a.insert_turn("y", "cli", "x", "{}", "{}", now)
        .await
        .unwrap();
    a.insert_turn("z", "cli", "x", "{}", "{}", now)
        .await
        .unwrap();
    assert!(
        a.save("z", State::Suspended, Some("tz"), "{}", now)
            .await
            .unwrap()
    );
    assert!(a.claim_suspended("z", now).await.unwrap());
    b.insert_turn("theirs", "cli", "x", "{}", "{}", now)
        .await
        .unwrap();
    assert!(a2.expired(now, 10).await.unwrap().is_empty());
    assert_eq!(a2.expire_previous_runs().await.unwrap(), 2);
    let mut freed: Vec<String> = a2
        .expired(now, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.turn_id)
        .collect();
    freed.sort();
    assert_eq!(freed, ["y", "z"]);
    assert!(a2.claim_suspended("z", now).await.unwrap());
    assert_eq!(
        a2.expire_previous_runs().await.unwrap(),
        0,
        "y is free already, z is the new process's"
    );
}

/// `scratchpad_read` by byte range, by line range and by substring, within the turn.
async fn scratchpad_read_reads_bytes_lines_and_matches(test: TestStore) {
    use metnos_executors::Observation;
    use metnos_planner::turn::scratch;
    use serde_json::json;
    let store = open(&test).await;
    store
        .insert_turn("t", "cli", "a", "{}", "{}", 1)
        .await
        .unwrap();
    let text: String = (1..=1000)
        .map(|i| format!("line {i} {}\n", if i == 250 { "NEEDLE" } else { "hay" }))
        .collect();
    let observation = Observation::success(text.clone(), Default::default());
    let synthetic = scratch::store(&store, "t", 1, &observation, text.len() as u64)
        .await
        .unwrap();
    let id = synthetic["scratchpad_id"].as_str().unwrap().to_owned();
    assert!(
        synthetic["summary"]
            .as_str()
            .unwrap()
            .contains("characters omitted")
    );

    let bytes = scratch::read(&store, "t", &json!({"id": id, "offset": 7, "length": 5})).await;
    assert_eq!(bytes.content, Some(json!(text[7..12])));
    let lines = scratch::read(
        &store,
        "t",
        &json!({"id": id, "line_start": 2, "line_end": 3}),
    )
    .await;
    assert_eq!(lines.content, Some(json!("line 2 hay\nline 3 hay")));
    let found = scratch::read(&store, "t", &json!({"id": id, "search": "needle"})).await;
    assert_eq!(found.content, Some(json!("250: line 250 NEEDLE")));
    let whole = scratch::read(&store, "t", &json!({"id": id})).await;
    assert_eq!(
        whole.content.unwrap().as_str().unwrap().len(),
        scratch::MAX_READ
    );
    // Another turn cannot read it.
    let other = scratch::read(&store, "other", &json!({"id": id})).await;
    assert!(!other.ok && other.error.unwrap().contains("no scratchpad entry"));
}

/// The spectator sees every replica's turns change, in order, each once per change: a
/// start, a step, an end; a replica that lost a turn cannot show it.
async fn every_replicas_turn_changes_are_seen_in_order_and_the_end_shows_the_logs_record(
    test: TestStore,
) {
    let (a, b, _) = replicas(&test).await;
    a.insert_turn("ta", "cli", "x", "{}", r#"{"steps":[]}"#, 1_000)
        .await
        .unwrap();
    b.insert_turn("tb", "telegram", "42", "{}", r#"{"steps":[]}"#, 1_100)
        .await
        .unwrap();
    let seen = a.changes(0, 10).await.unwrap();
    let ids: Vec<_> = seen
        .iter()
        .map(|c| (c.turn_id.as_str(), c.changed_ms))
        .collect();
    assert_eq!(ids, [("ta", 1_000), ("tb", 1_100)]);
    assert_eq!(seen[0].state, "running");

    assert!(a.set_live("ta", r#"{"steps":[1]}"#, 1_200).await.unwrap());
    let under_way: Vec<_> = b
        .unfinished(10)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.turn_id)
        .collect();
    assert_eq!(under_way, ["ta", "tb"], "newest change first");
    // B does not hold A's turn: nothing is written in its name.
    assert!(
        !b.set_live("ta", r#"{"steps":["forged"]}"#, 1_300)
            .await
            .unwrap()
    );
    let since = b.changes(1_100, 10).await.unwrap();
    assert_eq!(since.len(), 1, "{since:?}");
    assert_eq!(since[0].record, r#"{"steps":[1]}"#);

    assert!(
        a.finish("ta", r#"{"final_kind":"answer"}"#, 1_400)
            .await
            .unwrap()
    );
    let end = b.changes(1_200, 10).await.unwrap();
    assert_eq!(end.len(), 1, "{end:?}");
    assert_eq!(
        (end[0].state.as_str(), end[0].record.as_str()),
        ("finished", r#"{"final_kind":"answer"}"#)
    );
    assert!(b.changes(1_400, 10).await.unwrap().is_empty());
    let under_way: Vec<_> = b
        .unfinished(10)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.turn_id)
        .collect();
    assert_eq!(under_way, ["tb"], "a finished turn is not under way");
    assert_eq!(b.changes(0, 1).await.unwrap().len(), 1, "the limit holds");
}

metnos_kit::store_suite!(
    every_replicas_turn_changes_are_seen_in_order_and_the_end_shows_the_logs_record,
    scratchpad_read_reads_bytes_lines_and_matches,
    a_turn_is_taken_over_only_once_its_holders_lease_expired,
    a_cancel_wins_over_a_later_commit_to_run,
    a_dead_resumers_turn_waits_again_and_a_restarted_replica_frees_its_own_at_once,
    a_suspended_turn_is_claimed_exactly_once,
    a_turn_is_claimed_only_while_it_waits_on_the_card_it_was_read_with,
    cancel_is_a_flag_any_replica_sees,
    the_scratchpad_is_per_turn_and_pruned_after_its_turn_ends,
);
