//! Issue 40 on Telegram: a follow-up message carries the person's conversation so far to
//! the model, and two people talking at once never see each other's.

use super::*;

/// The messages of the LLM request whose last message is `text`.
fn request_ending_with(s: &Stack, text: &str) -> Vec<(String, String)> {
    s.llm
        .received()
        .iter()
        .map(|r| common::roles_and_texts(&r.body))
        .find(|m| m.last().is_some_and(|(_, t)| t == text))
        .unwrap_or_else(|| panic!("no request ends with {text:?}"))
}

#[tokio::test]
async fn a_follow_up_on_telegram_carries_the_thread_and_two_people_keep_theirs_apart() {
    let s = stack().await;
    s.pair(ADA, "Ada", "supervised").await;
    s.pair(BOB, "Bob", "supervised").await;
    s.llm.push(Reply::Text("It is noon in Milan.".into()));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "what time is it?");
    s.tg.until("Ada's answer", |tg| {
        tg.texts_to(ADA).iter().any(|t| t.contains("noon in Milan"))
    })
    .await;
    s.llm.push(Reply::Text("Hi Bob.".into()));
    s.tg.message(BOB, user(BOB, "Bob", "en"), "hello, what did Ada ask?");
    s.tg.until("Bob's answer", |tg| {
        tg.texts_to(BOB).iter().any(|t| t == "Hi Bob.")
    })
    .await;
    s.llm.push(Reply::Text("Rome too.".into()));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "and in Rome?");
    s.tg.until("Ada's second answer", |tg| {
        tg.texts_to(ADA).iter().any(|t| t == "Rome too.")
    })
    .await;
    let adas = request_ending_with(&s, "and in Rome?");
    assert_eq!(adas.len(), 3, "{adas:#?}");
    assert_eq!(adas[0], ("user".to_owned(), "what time is it?".to_owned()));
    assert_eq!(adas[1].0, "assistant");
    assert!(
        adas[1].1.starts_with("<<untrusted-data ") && adas[1].1.contains("It is noon in Milan."),
        "{}",
        adas[1].1
    );
    assert!(!format!("{adas:?}").contains("Bob"), "{adas:#?}");
    // Bob's turn saw only his own message.
    assert_eq!(
        request_ending_with(&s, "hello, what did Ada ask?"),
        [("user".to_owned(), "hello, what did Ada ask?".to_owned())]
    );
}
