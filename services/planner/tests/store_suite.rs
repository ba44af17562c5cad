//! The planner store on SQLite and on a real PostgreSQL server: turns are claimed once,
//! found by token and by principal, cancelled by flag; the scratchpad keeps entries per
//! turn and prunes only those of finished turns.

use std::time::Duration;

use metnos_kit::testing::TestStore;
use metnos_planner::store::{MIGRATIONS, ScratchEntry, State, Store};

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
        .insert_turn("t1", "cli", "alice", "{}", 1)
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

async fn cancel_is_a_flag_any_replica_sees(test: TestStore) {
    let store = open(&test).await;
    store
        .insert_turn("t2", "telegram", "42", "{}", 1)
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
        .insert_turn("live", "cli", "a", "{}", 1)
        .await
        .unwrap();
    store
        .insert_turn("done", "cli", "a", "{}", 1)
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

async fn turns_left_running_by_a_stopped_planner_are_closed_not_replayed(test: TestStore) {
    let store = open(&test).await;
    store
        .insert_turn("old", "cli", "a", "{}", 1_000)
        .await
        .unwrap();
    store
        .insert_turn("fresh", "cli", "a", "{}", 9_000)
        .await
        .unwrap();
    store
        .insert_turn("waiting", "cli", "a", "{}", 1_000)
        .await
        .unwrap();
    store
        .save("waiting", State::Suspended, Some("t"), "{}", 1_000)
        .await
        .unwrap();
    assert_eq!(store.close_orphans(5_000, 10_000).await.unwrap(), 1);
    let old = store.get("old").await.unwrap().unwrap();
    assert_eq!(old.state, State::Finished);
    assert!(old.record.unwrap().contains("orphaned"));
    assert_eq!(
        store.get("fresh").await.unwrap().unwrap().state,
        State::Running
    );
    // A turn waiting for a person is not an orphan: any replica may resume it.
    assert_eq!(
        store.get("waiting").await.unwrap().unwrap().state,
        State::Suspended
    );
}

/// `scratchpad_read` by byte range, by line range and by substring, within the turn.
async fn scratchpad_read_reads_bytes_lines_and_matches(test: TestStore) {
    use metnos_executors::Observation;
    use metnos_planner::scratch;
    use serde_json::json;
    let store = open(&test).await;
    store.insert_turn("t", "cli", "a", "{}", 1).await.unwrap();
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

metnos_kit::store_suite!(
    scratchpad_read_reads_bytes_lines_and_matches,
    turns_left_running_by_a_stopped_planner_are_closed_not_replayed,
    a_suspended_turn_is_claimed_exactly_once,
    cancel_is_a_flag_any_replica_sees,
    the_scratchpad_is_per_turn_and_pruned_after_its_turn_ends,
);
