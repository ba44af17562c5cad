//! Threads on SQLite and on a real PostgreSQL server (issue 40): one person's conversation
//! on one channel, never another's; silence or `/new` starts a new one; a turn's exchange is
//! written once however often its end is recorded, also by two replicas at once; forgetting
//! and the retention leave nothing of what they remove.

use std::time::Duration;

use metnos_core::Principal;
use metnos_kit::testing::TestStore;
use metnos_planner::store::MIGRATIONS;
use metnos_planner::store::threads::{
    MAX_TEXT, NewExchange, StepLine, Thread, ThreadError, ThreadStore,
};

const HOUR: i64 = 3_600_000;
const IDLE: i64 = 4 * HOUR;

async fn open(store: &TestStore) -> ThreadStore {
    ThreadStore::new(threads_db(store).await)
}

/// A second replica's store: its own pool on PostgreSQL; on SQLite (one process owns the
/// file) the same one.
async fn open_again(test: &TestStore, first: &ThreadStore) -> ThreadStore {
    match test {
        TestStore::Sqlite(_) => first.clone(),
        TestStore::Postgres { .. } => open(test).await,
    }
}

fn ada() -> Principal {
    Principal::new("telegram", "4242").unwrap()
}

fn bob() -> Principal {
    Principal::new("telegram", "4343").unwrap()
}

fn said(turn: &str, message: &str, answer: &str) -> NewExchange {
    NewExchange {
        turn_id: turn.to_owned(),
        message: message.to_owned(),
        answer: answer.to_owned(),
        labels: vec!["file:~/notes/today.md".to_owned()],
        steps: vec![StepLine {
            executor: "fs_read".to_owned(),
            ok: true,
            labels: vec!["file:~/notes/today.md".to_owned()],
            scratchpad_id: None,
        }],
        forwarded: false,
    }
}

/// A save by turn `id`, begun at `begun_ms`.
fn by(id: &str, begun_ms: i64) -> metnos_planner::store::memories::ByTurn<'_> {
    metnos_planner::store::memories::ByTurn { id, begun_ms }
}

fn messages(exchanges: &[metnos_planner::store::threads::Exchange]) -> Vec<&str> {
    exchanges.iter().map(|e| e.message.as_str()).collect()
}

/// A thread is written with its first exchange: asking for the current one writes nothing.
async fn a_thread_goes_on_until_silence_or_new_and_is_its_person_s_alone(test: TestStore) {
    let threads = open(&test).await;
    let first = threads.current(&ada(), 1_000, IDLE).await.unwrap();
    assert_eq!(first.person, ada());
    assert!(first.opening.is_some(), "not written yet");
    let written = threads
        .append(&first, &said("t1", "what time is it?", "10:00"), 2_000)
        .await
        .unwrap();
    assert_eq!(written.as_deref(), Some(first.id.as_str()));
    // Within the idle time: the same thread, counted from its last exchange.
    let again = threads.current(&ada(), 2_000 + IDLE, IDLE).await.unwrap();
    assert_eq!(
        (again.id.as_str(), again.last_at),
        (first.id.as_str(), 2_000)
    );
    assert_eq!(again.opening, None);
    // Going on with it moves its last exchange (the idle time counts from there).
    threads
        .append(&again, &said("t1b", "and in Rome?", "10:00 too"), 2_500)
        .await
        .unwrap();
    let still = threads.current(&ada(), 2_500 + IDLE, IDLE).await.unwrap();
    assert_eq!(
        (still.id.as_str(), still.last_at),
        (first.id.as_str(), 2_500)
    );
    // Another person, another channel: their own threads.
    let bobs = threads.current(&bob(), 3_000, IDLE).await.unwrap();
    assert_ne!(bobs.id, first.id);
    let on_cli = Principal::new("cli", "4242").unwrap();
    assert_ne!(
        threads.current(&on_cli, 3_000, IDLE).await.unwrap().id,
        first.id
    );
    // Bob cannot write into Ada's thread, as it is or by "opening" it as his.
    for opening in [None, bobs.opening] {
        let sly = Thread {
            person: bob(),
            opening,
            ..again.clone()
        };
        assert!(matches!(
            threads
                .append(&sly, &said("t2", "send me her notes", "no"), 3_000)
                .await,
            Err(ThreadError::NoSuchThread)
        ));
    }
    assert!(
        threads
            .recent(&bob(), &first.id, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        messages(&threads.recent(&ada(), &first.id, 10).await.unwrap()),
        ["what time is it?", "and in Rome?"]
    );
    // Silence longer than the idle time: a new thread.
    let later = threads
        .current(&ada(), 2_500 + IDLE + 1, IDLE)
        .await
        .unwrap();
    assert_ne!(later.id, first.id);
    assert!(later.opening.is_some());
    // `/new`: a new thread, and once its first exchange is written the ones before are
    // never current again, however recent.
    let fresh = threads.start_new(&ada(), 3_000);
    assert_ne!(fresh.id, first.id);
    threads
        .append(&fresh, &said("t3", "start over", "ok"), 3_001)
        .await
        .unwrap();
    assert_eq!(
        threads.current(&ada(), 3_002, IDLE).await.unwrap().id,
        fresh.id
    );
    assert_eq!(
        messages(&threads.recent(&ada(), &fresh.id, 10).await.unwrap()),
        ["start over"]
    );
}

async fn a_turn_s_exchange_is_written_once_in_order_and_read_back_whole(test: TestStore) {
    let threads = open(&test).await;
    let thread = threads.current(&ada(), 1_000, IDLE).await.unwrap();
    for (i, turn) in ["t1", "t2", "t3"].iter().enumerate() {
        let at = 2_000 + i as i64;
        let exchange = said(turn, &format!("message {turn}"), &format!("answer {turn}"));
        assert_eq!(
            threads.append(&thread, &exchange, at).await.unwrap(),
            Some(thread.id.clone())
        );
        // The same turn's end recorded again (a replica took it over): nothing more.
        assert_eq!(
            threads.append(&thread, &exchange, at + 10).await.unwrap(),
            None
        );
    }
    let all = threads.recent(&ada(), &thread.id, 10).await.unwrap();
    assert_eq!(messages(&all), ["message t1", "message t2", "message t3"]);
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(all[2].answer, "answer t3");
    assert_eq!(all[2].labels, ["file:~/notes/today.md"]);
    assert_eq!(all[2].steps, said("x", "", "").steps);
    // The newest ones, oldest first.
    assert_eq!(
        messages(&threads.recent(&ada(), &thread.id, 2).await.unwrap()),
        ["message t2", "message t3"]
    );
    // What a turn sees: the newest within its budget (each exchange here costs 22 tokens).
    let seen = threads.history(&ada(), &thread.id, 50).await.unwrap();
    assert_eq!(messages(&seen.exchanges), ["message t2", "message t3"]);
    assert!(seen.older_left_out);
    let seen = threads.history(&ada(), &thread.id, 6_000).await.unwrap();
    assert_eq!(seen.exchanges.len(), 3);
    assert!(!seen.older_left_out);
    assert!(
        threads
            .history(&bob(), &thread.id, 6_000)
            .await
            .unwrap()
            .exchanges
            .is_empty()
    );
    // A message too long to keep is refused whole, naming it; nothing is written.
    let huge = said("t4", &"x".repeat(MAX_TEXT + 1), "ok");
    let refused = threads
        .append(&thread, &huge, 3_000)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.starts_with("the message is"), "{refused}");
    assert_eq!(
        threads.recent(&ada(), &thread.id, 10).await.unwrap().len(),
        3
    );
}

async fn two_replicas_ending_turns_at_once_write_every_exchange_once(test: TestStore) {
    let a = open(&test).await;
    let b = open_again(&test, &a).await;
    let thread = a.current(&ada(), 1_000, IDLE).await.unwrap();
    let mut writes = Vec::new();
    for i in 0..20 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let thread = thread.clone();
        writes.push(tokio::spawn(async move {
            // Each turn's end recorded by both replicas, the first opening the thread.
            let exchange = said(&format!("t{}", i / 2), &format!("m{}", i / 2), "a");
            store.append(&thread, &exchange, 2_000 + i).await.unwrap()
        }));
    }
    let mut written = 0;
    for write in writes {
        let to = write.await.unwrap();
        assert!(to.as_ref().is_none_or(|id| *id == thread.id), "{to:?}");
        written += usize::from(to.is_some());
    }
    assert_eq!(written, 10);
    let all = a.recent(&ada(), &thread.id, 100).await.unwrap();
    assert_eq!(all.len(), 10);
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<i64>>()
    );
    // Two turns of Bob's that began at once after silence, each with its own new thread,
    // land in one conversation, whichever replica ends them.
    let bob = bob();
    let (one, two) = tokio::join!(a.current(&bob, 5_000, IDLE), b.current(&bob, 5_000, IDLE));
    let (one, two) = (one.unwrap(), two.unwrap());
    assert_ne!(one.id, two.id, "neither is written yet");
    let (hello, and_you) = (said("b1", "hello", "hi"), said("b2", "and you?", "fine"));
    let (x, y) = tokio::join!(
        a.append(&one, &hello, 5_100),
        b.append(&two, &and_you, 5_100)
    );
    let (x, y) = (x.unwrap().unwrap(), y.unwrap().unwrap());
    assert_eq!(x, y);
    assert_eq!(a.recent(&bob, &x, 10).await.unwrap().len(), 2);
}

async fn forgetting_and_the_retention_remove_only_what_they_name(test: TestStore) {
    let threads = open(&test).await;
    let adas = threads.current(&ada(), 1_000, IDLE).await.unwrap();
    let bobs = threads.current(&bob(), 1_000, IDLE).await.unwrap();
    // Turns of Ada's that began before she forgot, in threads not written yet.
    let pending = threads.start_new(&ada(), 2_500);
    let pending_too = threads.current(&ada(), 2_550, 0).await.unwrap();
    assert!(pending_too.opening.is_some());
    threads
        .append(&adas, &said("a1", "my sister's birthday", "noted"), 2_000)
        .await
        .unwrap();
    threads
        .append(&bobs, &said("b1", "hello", "hi"), 50 * HOUR)
        .await
        .unwrap();
    let forgotten = threads.forget(&ada(), 2_600, false).await.unwrap();
    assert_eq!((forgotten.exchanges, forgotten.memories), (1, 0));
    // Its end writes nothing back: no thread of hers opens after she forgot.
    assert!(matches!(
        threads
            .append(
                &pending,
                &said("a2", "what was her birthday?", "3 May"),
                2_700
            )
            .await,
        Err(ThreadError::NoSuchThread)
    ));
    assert!(
        threads
            .recent(&ada(), &pending.id, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        threads
            .recent(&ada(), &adas.id, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(threads.recent(&bob(), &bobs.id, 10).await.unwrap().len(), 1);
    // A new thread after forgetting starts empty, and is written.
    let after = threads.current(&ada(), 3_000, IDLE).await.unwrap();
    assert_ne!(after.id, adas.id);
    assert!(
        threads
            .append(&after, &said("a3", "hello again", "hi"), 50 * HOUR)
            .await
            .unwrap()
            .is_some()
    );
    // Nor does the other one's end join the conversation she began after forgetting.
    assert!(matches!(
        threads
            .append(
                &pending_too,
                &said("a4", "my locker?", "4417"),
                50 * HOUR + 1
            )
            .await,
        Err(ThreadError::NoSuchThread)
    ));
    assert_eq!(
        messages(&threads.recent(&ada(), &after.id, 10).await.unwrap()),
        ["hello again"]
    );
    // The retention: threads silent since before the cut go, newer ones stay.
    assert_eq!(threads.prune(10 * HOUR).await.unwrap(), 0);
    assert_eq!(threads.recent(&bob(), &bobs.id, 10).await.unwrap().len(), 1);
    assert_eq!(threads.prune(51 * HOUR).await.unwrap(), 2);
    assert!(
        threads
            .recent(&bob(), &bobs.id, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_ne!(
        threads.current(&bob(), 51 * HOUR, IDLE).await.unwrap().id,
        bobs.id
    );
}

/// A thread longer than a page: what a turn sees is still its newest, in order, however
/// many pages the budget spans.
async fn a_long_thread_is_read_newest_first_across_pages(test: TestStore) {
    let threads = open(&test).await;
    let thread = threads.current(&ada(), 1_000, IDLE).await.unwrap();
    for i in 1..=70 {
        let exchange = said(&format!("t{i}"), &format!("m{i:02}"), "ok");
        threads.append(&thread, &exchange, 1_000 + i).await.unwrap();
    }
    let all = threads
        .history(&ada(), &thread.id, usize::MAX)
        .await
        .unwrap();
    assert_eq!(all.exchanges.len(), 70);
    assert!(!all.older_left_out);
    assert_eq!(all.exchanges[0].message, "m01");
    assert_eq!(all.exchanges[69].message, "m70");
    // Each costs 1 + 1 + 16 tokens: 40 of them fit in 720.
    let some = threads.history(&ada(), &thread.id, 720).await.unwrap();
    assert_eq!(some.exchanges.len(), 40);
    assert!(some.older_left_out);
    assert_eq!(some.exchanges[0].message, "m31");
    assert_eq!(some.exchanges[39].message, "m70");
}

/// A reply to an older answer: its thread of the person's becomes the current one again,
/// after `/new` or silence; another person's thread, or one forgotten, is no such thread.
async fn a_thread_replied_to_is_taken_up_again_by_its_person_only(test: TestStore) {
    let threads = open(&test).await;
    let first = threads.current(&ada(), 1_000, IDLE).await.unwrap();
    let exchange = said("t1", "what time is it?", "10:00");
    threads.append(&first, &exchange, 2_000).await.unwrap();
    let fresh = threads.start_new(&ada(), 3_000);
    threads
        .append(&fresh, &said("t2", "start over", "ok"), 3_000)
        .await
        .unwrap();
    let later = 3_000 + 2 * IDLE;
    let again = threads.reopen(&ada(), &first.id, later).await.unwrap();
    assert_eq!(
        (again.id.as_str(), again.last_at),
        (first.id.as_str(), later)
    );
    let current = threads.current(&ada(), later + 1, IDLE).await.unwrap();
    assert_eq!(
        current.id, first.id,
        "the thread replied to is the current one"
    );
    assert_ne!(current.id, fresh.id);
    assert!(matches!(
        threads.reopen(&bob(), &first.id, later).await,
        Err(ThreadError::NoSuchThread)
    ));
    assert_ne!(
        threads.current(&bob(), later, IDLE).await.unwrap().id,
        first.id
    );
    threads.forget(&ada(), later, false).await.unwrap();
    assert!(matches!(
        threads.reopen(&ada(), &first.id, later).await,
        Err(ThreadError::NoSuchThread)
    ));
}

/// A thread's summary: its person's alone; a fold covering less than the one kept is not
/// kept (two replicas folding at once); forgetting and the retention take it with the
/// thread.
async fn a_summary_is_its_thread_s_and_only_grows(test: TestStore) {
    use metnos_planner::store::summaries::{MAX_SUMMARY, Summary};
    let threads = open(&test).await;
    let thread = threads.current(&ada(), 1_000, IDLE).await.unwrap();
    for i in 1..=6 {
        let exchange = said(&format!("t{i}"), &format!("m{i}"), "ok");
        threads.append(&thread, &exchange, 1_000 + i).await.unwrap();
    }
    let between = threads.between(&ada(), &thread.id, 1, 5, 10).await.unwrap();
    assert_eq!(messages(&between), ["m2", "m3", "m4"]);
    assert_eq!(
        threads
            .between(&ada(), &thread.id, 0, 9, 2)
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(
        threads
            .between(&bob(), &thread.id, 0, 9, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let summary = |upto: i64, text: &str| Summary {
        upto_seq: upto,
        made_at_seq: 6,
        text: text.to_owned(),
        labels: vec!["web:example.com".to_owned()],
        made_at: 2_000,
    };
    assert_eq!(threads.summary(&ada(), &thread.id).await.unwrap(), None);
    assert!(
        threads
            .put_summary(&ada(), &thread.id, &summary(3, "one to three"))
            .await
            .unwrap()
    );
    assert!(
        !threads
            .put_summary(&ada(), &thread.id, &summary(2, "one to two"))
            .await
            .unwrap()
    );
    assert_eq!(
        threads.summary(&ada(), &thread.id).await.unwrap(),
        Some(summary(3, "one to three"))
    );
    assert!(
        threads
            .put_summary(&ada(), &thread.id, &summary(4, "one to four"))
            .await
            .unwrap()
    );
    assert_eq!(threads.summary(&bob(), &thread.id).await.unwrap(), None);
    assert!(matches!(
        threads
            .put_summary(&bob(), &thread.id, &summary(5, "mine now"))
            .await,
        Err(ThreadError::NoSuchThread)
    ));
    let long = summary(5, &"x".repeat(MAX_SUMMARY + 1));
    assert!(matches!(
        threads.put_summary(&ada(), &thread.id, &long).await,
        Err(ThreadError::TooLong {
            field: "summary",
            ..
        })
    ));
    // The retention takes it with its thread; so does forgetting.
    threads.prune(1_000 + 7).await.unwrap();
    assert_eq!(threads.summary(&ada(), &thread.id).await.unwrap(), None);
    let again = threads.current(&ada(), 5_000, IDLE).await.unwrap();
    threads
        .append(&again, &said("t9", "m9", "ok"), 5_001)
        .await
        .unwrap();
    threads
        .put_summary(&ada(), &again.id, &summary(1, "nine"))
        .await
        .unwrap();
    threads.forget(&ada(), 6_000, false).await.unwrap();
    assert_eq!(threads.summary(&ada(), &again.id).await.unwrap(), None);
}

/// Issue 40's long-term memory: found by full text, best first, in the same order on
/// both backends; a person's alone; at the cap the oldest unused go; forgetting leaves
/// nothing to find; a card's save applied twice keeps one entry.
async fn memories_are_ranked_alike_kept_apart_capped_and_forgotten(test: TestStore) {
    use metnos_planner::store::memories::{MemoryError, MemoryStore};
    let db = threads_db(&test).await;
    let memories = MemoryStore::new(db.clone(), 4);
    let web = vec!["web:example.com".to_owned()];
    let save = async |who: &Principal, text: &str, sources: &[String], at: i64| {
        memories
            .save(who, text, sources, by("t1", at), None, at)
            .await
            .unwrap()
    };
    save(&ada(), "My sister's birthday is on 3 May", &[], 1_000).await;
    save(
        &ada(),
        "The office birthday party is on Friday",
        &web,
        2_000,
    )
    .await;
    save(&ada(), "Buy milk", &[], 3_000).await;
    save(&bob(), "My sister Anna's birthday is in June", &[], 4_000).await;
    let texts = |found: &[metnos_planner::store::memories::Memory]| {
        found.iter().map(|m| m.text.clone()).collect::<Vec<_>>()
    };
    let found = memories
        .search(&ada(), "sister birthday", 10, 5_000)
        .await
        .unwrap();
    assert_eq!(
        texts(&found),
        [
            "My sister's birthday is on 3 May",
            "The office birthday party is on Friday"
        ],
        "both words first, one word next, none never; Bob's never"
    );
    assert_eq!(found[0].labels, Vec::<String>::new());
    assert_eq!(found[1].labels, web);
    assert_eq!(found[0].used_at, 5_000);
    assert_eq!(
        texts(
            &memories
                .search(&bob(), "birthday", 10, 5_000)
                .await
                .unwrap()
        ),
        ["My sister Anna's birthday is in June"]
    );
    // An accent typed composed or as a combining mark is the same word, both ways.
    save(&bob(), "Caffe\u{300} with Anna on Sunday", &[], 4_100).await;
    let found = memories
        .search(&bob(), "caff\u{E8}", 10, 4_200)
        .await
        .unwrap();
    assert_eq!(texts(&found), ["Caff\u{E8} with Anna on Sunday"]);
    let found = memories
        .search(&bob(), "caffe\u{300}", 10, 4_200)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    memories.forget(&bob(), &found[0].id).await.unwrap();
    // Query syntax of either backend is only ever words (Bob's: Ada's stay unused).
    for sly in [
        r#"sister" OR "milk"#,
        "milk) | (birthday",
        "NEAR(milk birthday)",
        "'; DROP TABLE memories; --",
    ] {
        assert!(
            memories.search(&bob(), sly, 10, 5_000).await.is_ok(),
            "{sly}"
        );
    }
    assert!(matches!(
        memories.search(&ada(), "*", 10, 5_000).await,
        Err(MemoryError::NoWords)
    ));
    assert_eq!(memories.count(&ada()).await.unwrap(), (3, 1));
    // The cap (4): a fifth entry drops the oldest unused one (the milk, never searched).
    save(&ada(), "Pin of the gym locker: 4417", &[], 6_000).await;
    let saved = save(&ada(), "Car service on 12 June", &[], 7_000).await;
    assert_eq!(saved.dropped, 1);
    let all = memories.list(&ada(), 50).await.unwrap();
    assert_eq!(all.len(), 4);
    assert!(!texts(&all).contains(&"Buy milk".to_owned()), "{all:?}");
    // Bob cannot forget Ada's entries; Ada forgets one, then all.
    let gym = all
        .iter()
        .find(|m| m.text.contains("4417"))
        .unwrap()
        .id
        .clone();
    assert!(matches!(
        memories.forget(&bob(), &gym).await,
        Err(MemoryError::NotFound(_))
    ));
    memories.forget(&ada(), &gym).await.unwrap();
    assert!(
        memories
            .search(&ada(), "locker 4417", 10, 8_000)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(memories.forget_all(&ada(), 8_000).await.unwrap(), 3);
    assert!(
        memories
            .search(&ada(), "sister birthday", 10, 8_000)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(memories.count(&bob()).await.unwrap(), (1, 0));
    // A card's save applied twice keeps one entry.
    for _ in 0..2 {
        memories
            .save(
                &ada(),
                "Dentist on 2 July",
                &web,
                by("t9", 9_000),
                Some("m-card"),
                9_000,
            )
            .await
            .unwrap();
    }
    assert_eq!(memories.count(&ada()).await.unwrap(), (1, 1));
    // An entry written without the search index (by an older planner, or by hand) is
    // found once the planner indexes what it lacks (as it does when it starts); the
    // index of one deleted goes with it.
    db.execute(
        metnos_kit::store::sql::Statement::new(
            "INSERT INTO memories (id, channel, sender_id, text, labels, turn_id, saved_at, used_at) \
             VALUES ('m-old', 'telegram', '4343', 'Passport renewal due in August', '[]', 't0', 1, 1)",
        ),
    )
    .await
    .unwrap();
    let missing = memories.index_missing().await.unwrap();
    assert_eq!(missing, u64::from(matches!(test, TestStore::Sqlite(_))));
    assert_eq!(memories.index_missing().await.unwrap(), 0, "once");
    let found = memories
        .search(&bob(), "passport", 10, 9_500)
        .await
        .unwrap();
    assert_eq!(texts(&found), ["Passport renewal due in August"]);
    assert!(
        memories
            .search(&ada(), "passport", 10, 9_500)
            .await
            .unwrap()
            .is_empty()
    );
    memories.forget(&bob(), "m-old").await.unwrap();
    assert!(
        memories
            .search(&bob(), "passport", 10, 9_500)
            .await
            .unwrap()
            .is_empty()
    );
    // Forgetting her conversations with her memory takes both at once; Bob's stay.
    let forgotten = ThreadStore::new(db)
        .forget(&ada(), 10_000, true)
        .await
        .unwrap();
    assert_eq!(forgotten.memories, 1);
    assert_eq!(memories.count(&ada()).await.unwrap(), (0, 0));
    assert_eq!(memories.count(&bob()).await.unwrap(), (1, 0));
}

/// Review of issue 40: a turn begun before its person forgot their memory saves nothing
/// after the forget (a one-shot turn, or a card approved later): what it would add to was
/// forgotten. Forgetting only the conversations leaves saves alone; another person's too.
async fn a_save_by_a_turn_begun_before_a_memory_forget_is_refused(test: TestStore) {
    use metnos_planner::store::memories::{MemoryError, MemoryStore};
    let db = threads_db(&test).await;
    let threads = ThreadStore::new(db.clone());
    let memories = MemoryStore::new(db, 100);
    let save = async |who: &Principal, text: &str, begun: i64, id: Option<&str>| {
        memories
            .save(who, text, &[], by("t", begun), id, begun + 500)
            .await
    };
    save(&ada(), "My locker is 4417", 500, None).await.unwrap();
    threads.forget(&ada(), 2_000, false).await.unwrap();
    save(&ada(), "My bike is blue", 1_500, None).await.unwrap();
    assert_eq!(memories.count(&ada()).await.unwrap().0, 2);
    // Her memory forgotten at 3 000: a turn begun then or before saves nothing.
    let forgotten = threads.forget(&ada(), 3_000, true).await.unwrap();
    assert_eq!(forgotten.memories, 2);
    for (begun, id) in [(2_500, None), (3_000, None), (2_900, Some("m-card"))] {
        assert!(
            matches!(
                save(&ada(), "My car is red", begun, id).await,
                Err(MemoryError::Forgotten)
            ),
            "begun at {begun}"
        );
    }
    assert_eq!(memories.count(&ada()).await.unwrap().0, 0);
    save(&bob(), "My car is green", 2_500, None).await.unwrap();
    save(&ada(), "My car is red", 3_001, None).await.unwrap();
    // Forgetting the memory alone moves the same mark (never back).
    assert_eq!(memories.forget_all(&ada(), 5_000).await.unwrap(), 1);
    assert!(matches!(
        save(&ada(), "My hat is grey", 4_000, None).await,
        Err(MemoryError::Forgotten)
    ));
    memories.forget_all(&ada(), 4_500).await.unwrap();
    assert!(matches!(
        save(&ada(), "My hat is grey", 4_800, None).await,
        Err(MemoryError::Forgotten)
    ));
    save(&ada(), "My hat is grey", 5_001, None).await.unwrap();
    assert_eq!(memories.count(&bob()).await.unwrap().0, 1);
}

/// Review of issue 40: a word SQLite's index would have split where the planner does not
/// (at a letter-like symbol: "ⓐ") let one person index tokens under another's tag, and
/// fill the few best places a search ranks before it reads rows: the other's own entry
/// was never found. Each indexed token is now one of the planner's words.
async fn another_person_s_entries_never_crowd_a_search(test: TestStore) {
    use metnos_planner::store::memories::{MAX_FOUND, MemoryStore};
    use sha2::{Digest, Sha256};
    const BOBS: &str =
        "Notes of the alpha meeting: the budget, the plans and the dates for next year";
    let memories = MemoryStore::new(threads_db(&test).await, 100);
    memories
        .save(&bob(), BOBS, &[], by("t0", 1_000), None, 1_000)
        .await
        .unwrap();
    let bobs_tag = format!(
        "p{}",
        &hex::encode(Sha256::digest(bob().to_string().as_bytes()))[..16]
    );
    for n in 0..MAX_FOUND {
        let at = 2_000 + i64::from(n);
        // One word to the planner; three tokens to a tokenizer that splits at "ⓐ".
        let text = format!("ⓐ{bobs_tag}alphaⓐ{bobs_tag}notes");
        memories
            .save(&ada(), &text, &[], by("t1", at), None, at)
            .await
            .unwrap();
    }
    let found = memories
        .search(&bob(), "alpha notes", MAX_FOUND, 3_000)
        .await
        .unwrap();
    let texts: Vec<&str> = found.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, [BOBS]);
    assert!(
        memories
            .search(&ada(), "alpha", MAX_FOUND, 3_000)
            .await
            .unwrap()
            .is_empty(),
        "Ada's words are hers as she wrote them"
    );
}

/// Review of issue 40: a turn's end and its exchange are one write. Where the exchange
/// cannot be kept (the person forgot their conversations since the turn began), the end
/// is still written, and no empty thread is left; an end recorded twice keeps one
/// exchange; a turn another replica holds is not ended by this one, its exchange kept.
async fn a_turn_s_end_and_its_exchange_are_written_together(test: TestStore) {
    use metnos_planner::store::threads::{Ending, Kept};
    use metnos_planner::store::{Holder, State, Store};
    let db = threads_db(&test).await;
    let threads = ThreadStore::new(db.clone());
    let holder = Holder::new("a", 10_000);
    let store = Store::with_holder(db, holder.clone());
    let ending = Ending {
        record: "{\"final_kind\":\"answer\"}",
        run: &holder.run,
    };
    for turn in ["t1", "t2", "t3"] {
        store
            .insert_turn(turn, "telegram", "4242", "{}", "{}", 1_000)
            .await
            .unwrap();
    }
    let thread = threads.current(&ada(), 1_000, IDLE).await.unwrap();
    let written = threads
        .append_ending(&thread, &said("t1", "hi", "hello"), 2_000, Some(&ending))
        .await
        .unwrap();
    assert_eq!(written, (true, Kept::In(thread.id.clone())));
    let turn = store.get("t1").await.unwrap().unwrap();
    assert_eq!(turn.state, State::Finished);
    assert_eq!(turn.record.as_deref(), Some(ending.record));
    // Recorded twice: one exchange, and the end was written already.
    let again = threads
        .append_ending(&thread, &said("t1", "hi", "hello"), 2_100, Some(&ending))
        .await
        .unwrap();
    assert_eq!(again, (false, Kept::Already));
    assert_eq!(
        messages(&threads.recent(&ada(), &thread.id, 10).await.unwrap()),
        ["hi"]
    );
    // Recorded again by a replica that had chosen a new thread for it: none is opened.
    let other = threads.start_new(&ada(), 2_050);
    let elsewhere = threads
        .append_ending(&other, &said("t1", "hi", "hello"), 2_150, Some(&ending))
        .await
        .unwrap();
    assert_eq!(elsewhere, (false, Kept::Already));
    assert_eq!(
        threads.current(&ada(), 2_160, IDLE).await.unwrap().id,
        thread.id
    );
    // Text no store keeps is refused whole, saying which.
    let nul = said("t9", "a\0b", "ok");
    assert!(matches!(
        threads.append(&thread, &nul, 2_170).await,
        Err(ThreadError::Nul("message"))
    ));
    // Held by another replica's run: not ended here, the exchange kept all the same.
    let theirs = Ending {
        run: "another run",
        ..ending
    };
    let current = threads.current(&ada(), 2_200, IDLE).await.unwrap();
    let kept = threads
        .append_ending(&current, &said("t2", "and?", "so"), 2_300, Some(&theirs))
        .await
        .unwrap();
    assert_eq!(kept, (false, Kept::In(thread.id.clone())));
    assert_eq!(
        store.get("t2").await.unwrap().unwrap().state,
        State::Running
    );
    // Forgotten since the turn began: ended, nothing of the thread kept.
    let fresh = threads.start_new(&ada(), 3_000);
    threads.forget(&ada(), 3_500, false).await.unwrap();
    let lost = threads
        .append_ending(&fresh, &said("t3", "secret", "noted"), 4_000, Some(&ending))
        .await
        .unwrap();
    assert_eq!(lost, (true, Kept::Nowhere));
    assert_eq!(
        store.get("t3").await.unwrap().unwrap().state,
        State::Finished
    );
    let rows = store
        .db()
        .fetch_optional(metnos_kit::store::sql::Statement::new(
            "SELECT COUNT(*) FROM threads WHERE sender_id = '4242'",
        ))
        .await
        .unwrap()
        .unwrap()
        .get::<i64, _>(0)
        .unwrap();
    assert_eq!(rows, 0, "no empty thread is kept");
    // Without an end, the same write is refused whole.
    assert!(matches!(
        threads
            .append(&fresh, &said("t4", "secret", "noted"), 4_100)
            .await,
        Err(ThreadError::NoSuchThread)
    ));
}

/// Review of issue 40: a forget's mark moves to when it was committed (a turn that began
/// while it ran counts as begun before it), never back, for conversations and memory
/// alike, and erases nothing by itself.
async fn a_forget_s_mark_moves_to_its_commit_and_never_back(test: TestStore) {
    use metnos_planner::store::memories::{MemoryError, MemoryStore};
    let db = threads_db(&test).await;
    let threads = ThreadStore::new(db.clone());
    let memories = MemoryStore::new(db, 100);
    let thread = threads.current(&ada(), 1_000, IDLE).await.unwrap();
    threads
        .append(&thread, &said("t1", "my locker is 4417", "noted"), 1_100)
        .await
        .unwrap();
    threads.forget(&bob(), 2_000, true).await.unwrap();
    threads.mark_forgotten(&bob(), 2_500, true).await.unwrap();
    assert!(threads.forgotten_since(&bob(), 2_400).await.unwrap());
    assert!(!threads.forgotten_since(&bob(), 2_501).await.unwrap());
    assert!(matches!(
        memories
            .save(&bob(), "my bike is blue", &[], by("t2", 2_400), None, 3_000)
            .await,
        Err(MemoryError::Forgotten)
    ));
    threads.mark_forgotten(&bob(), 1_500, true).await.unwrap();
    assert!(
        threads.forgotten_since(&bob(), 2_400).await.unwrap(),
        "never back"
    );
    // Conversations only: Bob's memory mark stays where it was.
    threads.mark_forgotten(&bob(), 4_000, false).await.unwrap();
    assert!(threads.forgotten_since(&bob(), 3_500).await.unwrap());
    memories
        .save(&bob(), "my bike is blue", &[], by("t3", 3_500), None, 4_100)
        .await
        .unwrap();
    // Nobody else's mark moved, and Ada's thread is still there.
    assert!(!threads.forgotten_since(&ada(), 0).await.unwrap());
    assert_eq!(
        messages(&threads.recent(&ada(), &thread.id, 10).await.unwrap()),
        ["my locker is 4417"]
    );
}

/// The database of a test store (the planner's migrations run).
async fn threads_db(test: &TestStore) -> metnos_kit::store::Db {
    metnos_kit::store::open(
        &test.spec(),
        "planner",
        &MIGRATIONS,
        Duration::from_secs(10),
    )
    .await
    .unwrap()
}

metnos_kit::store_suite!(
    a_forget_s_mark_moves_to_its_commit_and_never_back,
    a_save_by_a_turn_begun_before_a_memory_forget_is_refused,
    another_person_s_entries_never_crowd_a_search,
    a_turn_s_end_and_its_exchange_are_written_together,
    memories_are_ranked_alike_kept_apart_capped_and_forgotten,
    a_summary_is_its_thread_s_and_only_grows,
    a_thread_replied_to_is_taken_up_again_by_its_person_only,
    a_thread_goes_on_until_silence_or_new_and_is_its_person_s_alone,
    a_turn_s_exchange_is_written_once_in_order_and_read_back_whole,
    two_replicas_ending_turns_at_once_write_every_exchange_once,
    forgetting_and_the_retention_remove_only_what_they_name,
    a_long_thread_is_read_newest_first_across_pages,
);
