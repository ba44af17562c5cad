//! The gateway store on SQLite and on a real PostgreSQL server: pairing codes work once
//! and only for ten minutes, one code per stranger at a time, levels change, revocation is
//! idempotent, and the Telegram offset moves with the handled updates.

mod common;

use metnos_core::language::Language;
use metnos_core::level::AutonomyLevel;
use metnos_gateway::store::{CODE_TTL_MS, CodeRequest, Store, Stranger};
use metnos_kit::testing::TestStore;

async fn open(store: &TestStore) -> Store {
    Store::new(common::open_db(store).await)
}

fn ada() -> Stranger<'static> {
    Stranger {
        channel: "telegram",
        sender_id: "4242",
        chat_id: "4242",
        display_name: "Ada",
        language: Language::English,
    }
}

async fn a_code_pairs_once_and_only_in_time(test: TestStore) {
    let store = open(&test).await;
    assert_eq!(
        store.request_code(&ada(), "AAAA2222", 1_000).await.unwrap(),
        CodeRequest::New("AAAA2222".into())
    );
    // One code at a time: asking again says nothing new.
    assert_eq!(
        store.request_code(&ada(), "BBBB3333", 2_000).await.unwrap(),
        CodeRequest::AlreadyIssued
    );
    assert!(store.pairing("telegram", "4242").await.unwrap().is_none());
    let paired = store
        .approve_code("AAAA2222", AutonomyLevel::Supervised, 3_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(paired.display_name, "Ada");
    assert_eq!(paired.level, AutonomyLevel::Supervised);
    assert_eq!(paired.language, Language::English);
    assert!(
        store
            .approve_code("AAAA2222", AutonomyLevel::Full, 4_000)
            .await
            .unwrap()
            .is_none(),
        "used twice"
    );
    assert_eq!(
        store
            .pairing("telegram", "4242")
            .await
            .unwrap()
            .unwrap()
            .level,
        AutonomyLevel::Supervised
    );

    // Expiry: a code older than ten minutes pairs nobody, and a new one can be issued.
    let bob = Stranger {
        sender_id: "5151",
        chat_id: "5151",
        display_name: "Bob",
        ..ada()
    };
    assert!(matches!(
        store.request_code(&bob, "CCCC4444", 10_000).await.unwrap(),
        CodeRequest::New(_)
    ));
    assert!(
        store
            .approve_code("CCCC4444", AutonomyLevel::Full, 10_000 + CODE_TTL_MS + 1)
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        store
            .request_code(&bob, "DDDD5555", 10_000 + CODE_TTL_MS + 1)
            .await
            .unwrap(),
        CodeRequest::New(_)
    ));
    assert!(
        store
            .approve_code("NOSUCH00", AutonomyLevel::Full, 5_000)
            .await
            .unwrap()
            .is_none()
    );
}

async fn levels_change_and_revocation_is_idempotent(test: TestStore) {
    let store = open(&test).await;
    store.request_code(&ada(), "EEEE6666", 1).await.unwrap();
    store
        .approve_code("EEEE6666", AutonomyLevel::ReadOnly, 2)
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .set_level("telegram", "4242", AutonomyLevel::Full)
            .await
            .unwrap()
    );
    assert_eq!(
        store.pairings().await.unwrap()[0].level,
        AutonomyLevel::Full
    );
    assert!(
        !store
            .set_level("telegram", "nobody", AutonomyLevel::Full)
            .await
            .unwrap()
    );
    assert!(store.revoke("telegram", "4242").await.unwrap());
    assert!(!store.revoke("telegram", "4242").await.unwrap());
    assert!(store.pairings().await.unwrap().is_empty());
}

/// A pairing whose level or language this version does not know is left out of the list
/// (the others still show) and that person's own lookup is an error naming the column,
/// never a pairing at some other level.
async fn a_pairing_this_version_cannot_read_is_refused_not_guessed(test: TestStore) {
    let db = common::open_db(&test).await;
    let store = Store::new(db.clone());
    let bob = Stranger {
        sender_id: "4343",
        chat_id: "4343",
        display_name: "Bob",
        ..ada()
    };
    let cy = Stranger {
        sender_id: "4444",
        chat_id: "4444",
        display_name: "Cy",
        ..ada()
    };
    for (who, code) in [(ada(), "AAAA7777"), (bob, "BBBB7777"), (cy, "CCCC7777")] {
        store.request_code(&who, code, 1).await.unwrap();
        store
            .approve_code(code, AutonomyLevel::ReadOnly, 2)
            .await
            .unwrap()
            .unwrap();
    }
    metnos_kit::on_db!(&db, pool => {
        sqlx::query("UPDATE pairings SET level = 'godlike' WHERE sender_id = '4242'")
            .execute(pool)
            .await
            .unwrap();
        sqlx::query("UPDATE pairings SET language = 'klingon' WHERE sender_id = '4444'")
            .execute(pool)
            .await
            .unwrap();
    });
    let listed: Vec<String> = store
        .pairings()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.sender_id)
        .collect();
    assert_eq!(listed, ["4343"]);
    for (sender, column) in [("4242", "level"), ("4444", "language")] {
        let error = store
            .pairing("telegram", sender)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains(column), "{sender}: {error}");
    }
    assert_eq!(
        store
            .pairing("telegram", "4343")
            .await
            .unwrap()
            .unwrap()
            .level,
        AutonomyLevel::ReadOnly
    );
}

async fn the_offset_moves_with_handled_updates(test: TestStore) {
    let store = open(&test).await;
    assert_eq!(store.setting("telegram.offset").await.unwrap(), None);
    assert!(!store.handled(1001).await.unwrap());
    store.mark_handled(1001, 10).await.unwrap();
    store.mark_handled(1001, 11).await.unwrap();
    assert!(store.handled(1001).await.unwrap());
    assert_eq!(
        store.setting("telegram.offset").await.unwrap().as_deref(),
        Some("1002")
    );
}

/// A sent card stays open (swept) until closed; it keeps what it showed; its reminder is
/// claimed once; sent again (a resumed turn shows it anew), it is open again.
async fn cards_stay_open_until_closed_and_are_reminded_once(test: TestStore) {
    use metnos_gateway::store::SentCard;
    let store = open(&test).await;
    let card = |token: &str, message: &str| SentCard {
        token: token.to_owned(),
        channel: "telegram".to_owned(),
        chat_id: "4242".to_owned(),
        message_id: message.to_owned(),
        lines: "May I create a file?\n~/a.txt".to_owned(),
        html: "<b>May I create a file?</b>\n~/a.txt".to_owned(),
        buttons: r#"[[["Approve once","approve:t1"]]]"#.to_owned(),
        traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
    };
    store.put_card(&card("t1", "10"), 1_000).await.unwrap();
    store.put_card(&card("t2", "11"), 2_000).await.unwrap();
    let open_tokens = |cards: Vec<SentCard>| cards.into_iter().map(|c| c.token).collect::<Vec<_>>();
    assert_eq!(
        open_tokens(store.open_cards(10).await.unwrap()),
        ["t1", "t2"]
    );
    assert_eq!(store.card("t1").await.unwrap().unwrap(), card("t1", "10"));
    assert!(store.claim_reminder("t1", 3_000).await.unwrap());
    assert!(
        !store.claim_reminder("t1", 4_000).await.unwrap(),
        "one reminder"
    );
    store.mark_closed("t1", 5_000).await.unwrap();
    assert_eq!(open_tokens(store.open_cards(10).await.unwrap()), ["t2"]);
    assert_eq!(
        open_tokens(store.open_cards(0).await.unwrap()),
        Vec::<String>::new()
    );
    store.put_card(&card("t1", "12"), 6_000).await.unwrap();
    assert_eq!(
        open_tokens(store.open_cards(10).await.unwrap()),
        ["t1", "t2"]
    );
    assert_eq!(store.card("t1").await.unwrap().unwrap().message_id, "12");
}

/// Issue 40: which thread an answer belongs to, per chat and person; a `/new` waits once;
/// `/forget` and the retention remove what they name.
async fn an_answer_s_thread_is_its_person_s_until_forgotten_or_pruned(test: TestStore) {
    let store = open(&test).await;
    store
        .note_answer("4242", &[7, 8], "4242", "thread-a", 1_000)
        .await
        .unwrap();
    store
        .note_answer("4343", &[9], "4343", "thread-b", 5_000)
        .await
        .unwrap();
    let thread = async |chat: &str, id: i32, sender: &str| {
        store.answer_thread(chat, id, sender).await.unwrap()
    };
    assert_eq!(thread("4242", 8, "4242").await.as_deref(), Some("thread-a"));
    assert_eq!(
        thread("4343", 8, "4343").await,
        None,
        "another chat's message"
    );
    assert_eq!(
        thread("4242", 8, "4343").await,
        None,
        "another person's answer"
    );
    assert_eq!(thread("4242", 10, "4242").await, None);
    assert!(!store.take_setting("thread.new.4242").await.unwrap());
    store.set_setting("thread.new.4242", "1").await.unwrap();
    assert!(store.take_setting("thread.new.4242").await.unwrap());
    assert!(
        !store.take_setting("thread.new.4242").await.unwrap(),
        "once"
    );
    assert_eq!(store.prune_answers(2_000).await.unwrap(), 2);
    assert_eq!(thread("4242", 7, "4242").await, None);
    assert_eq!(thread("4343", 9, "4343").await.as_deref(), Some("thread-b"));
    assert_eq!(store.forget_answers("4343").await.unwrap(), 1);
    assert_eq!(thread("4343", 9, "4343").await, None);
}

metnos_kit::store_suite!(
    an_answer_s_thread_is_its_person_s_until_forgotten_or_pruned,
    a_pairing_this_version_cannot_read_is_refused_not_guessed,
    cards_stay_open_until_closed_and_are_reminded_once,
    a_code_pairs_once_and_only_in_time,
    levels_change_and_revocation_is_idempotent,
    the_offset_moves_with_handled_updates,
);
