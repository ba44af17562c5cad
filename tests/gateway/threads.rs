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

/// Issue 40 on Telegram: `/new` starts over with the next message (said so, nothing sent to
/// the model for it), and a reply to an older answer continues that answer's thread, which
/// becomes the current one; a reply to a message that is not one of Metnos's answers goes
/// on with the current thread.
#[tokio::test]
async fn new_starts_over_and_a_reply_takes_an_older_thread_up_again() {
    let s = stack().await;
    s.pair(ADA, "Ada", "supervised").await;
    let ada = || user(ADA, "Ada", "en");
    let ask = async |text: &str, answer: &str| {
        s.llm.push(Reply::Text(answer.into()));
        s.tg.message(ADA, ada(), text);
        s.tg.until(answer, |tg| tg.texts_to(ADA).iter().any(|t| t == answer))
            .await;
    };
    ask("what time is it?", "It is noon in Milan.").await;
    let asked = s.llm.received().len();
    s.tg.message(ADA, ada(), "/new");
    s.tg.until("the new conversation said", |tg| {
        tg.texts_to(ADA)
            .iter()
            .any(|t| t.starts_with("🆕 New conversation"))
    })
    .await;
    assert_eq!(s.llm.received().len(), asked, "/new is not a turn");
    ask("how tall is the Mole?", "167 metres.").await;
    assert_eq!(
        request_ending_with(&s, "how tall is the Mole?"),
        [("user".to_owned(), "how tall is the Mole?".to_owned())],
        "after /new the earlier exchange is not sent"
    );
    // A reply to the answer of the first thread takes it up again.
    let noon =
        s.tg.sent_id(ADA, "It is noon in Milan.")
            .expect("the first answer's id");
    s.llm.push(Reply::Text("Rome too.".into()));
    s.tg.reply(ADA, ada(), noon, "and in Rome?");
    s.tg.until("the reply's answer", |tg| {
        tg.texts_to(ADA).iter().any(|t| t == "Rome too.")
    })
    .await;
    let replied = request_ending_with(&s, "and in Rome?");
    assert_eq!(replied.len(), 3, "{replied:#?}");
    assert_eq!(replied[0].1, "what time is it?");
    assert!(
        replied[1].1.contains("It is noon in Milan."),
        "{replied:#?}"
    );
    assert!(!format!("{replied:?}").contains("Mole"), "{replied:#?}");
    // That thread is the current one now; a reply to a message that is not one of the
    // answers (Ada's own, say) changes nothing.
    ask("and in Paris?", "Paris too.").await;
    let next = request_ending_with(&s, "and in Paris?");
    assert_eq!(next.len(), 5, "{next:#?}");
    assert_eq!(next[2].1, "and in Rome?");
    s.llm.push(Reply::Text("Still noon.".into()));
    s.tg.reply(ADA, ada(), 999_999, "again?");
    s.tg.until("the answer", |tg| {
        tg.texts_to(ADA).iter().any(|t| t == "Still noon.")
    })
    .await;
    assert_eq!(request_ending_with(&s, "again?").len(), 7);
}

/// Issue 40: a reply to an answer Metnos sent someone else does not reach their thread
/// (the chat's messages are per person; a forged `reply_to_message` names a message of
/// another chat).
#[tokio::test]
async fn a_reply_to_another_person_s_answer_reaches_nothing_of_theirs() {
    let s = stack().await;
    s.pair(ADA, "Ada", "supervised").await;
    s.pair(BOB, "Bob", "supervised").await;
    s.llm.push(Reply::Text("Your code is 4417.".into()));
    s.tg.message(ADA, user(ADA, "Ada", "en"), "remind me my locker code");
    s.tg.until("Ada's answer", |tg| {
        tg.texts_to(ADA).iter().any(|t| t == "Your code is 4417.")
    })
    .await;
    let adas = s.tg.sent_id(ADA, "Your code is 4417.").unwrap();
    s.llm.push(Reply::Text("I do not know.".into()));
    s.tg.reply(BOB, user(BOB, "Bob", "en"), adas, "what was the code?");
    s.tg.until("Bob's answer", |tg| {
        tg.texts_to(BOB).iter().any(|t| t == "I do not know.")
    })
    .await;
    let bobs = request_ending_with(&s, "what was the code?");
    assert_eq!(bobs.len(), 1, "{bobs:#?}");
    assert!(!format!("{bobs:?}").contains("4417"), "{bobs:#?}");
}

/// The `n`-th `/forget` question sent to `chat`: its message id and its buttons' data
/// (the conversations, everything, keep).
async fn forget_question(s: &Stack, chat: i64, n: usize) -> (i64, [String; 3]) {
    let questions = |tg: &common::telegram::FakeTelegram| {
        tg.calls("sendMessage")
            .into_iter()
            .filter(|c| c.body["chat_id"] == json!(chat))
            .filter(|c| {
                c.body["text"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("Erase all our")
            })
            .collect::<Vec<_>>()
    };
    s.tg.until("the /forget question", |tg| questions(tg).len() >= n)
        .await;
    let call = questions(&s.tg)[n - 1].clone();
    let buttons = rows(&call.body["reply_markup"]);
    let texts: Vec<&str> = buttons.iter().flatten().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        texts,
        ["🗑 The conversations", "🗑 And what you remember", "Keep"]
    );
    let id = s.tg.message_id_of(&call).unwrap();
    let data = |row: usize, i: usize| buttons[row][i].1.clone();
    (id, [data(0, 0), data(0, 1), data(1, 0)])
}

/// What Telegram shows for message `id` once it says `what`.
async fn shows(s: &Stack, id: i64, what: &str) {
    s.tg.until(what, |tg| tg.text_of(id).is_some_and(|t| t.contains(what)))
        .await;
}

/// Issue 40: `/forget` erases a person's conversations (and, with its second button, what
/// Metnos remembers for them) only once they confirm with the question's own button,
/// pressed by them, in time, once; "Keep" erases nothing. The turn log records the counts,
/// never the words; afterwards nothing of it reaches the model, not even through a reply
/// to an old answer, and a memory search finds nothing.
#[tokio::test]
async fn forget_asks_first_and_then_erases_everything_of_theirs_only() {
    let s = stack().await;
    s.pair(ADA, "Ada", "supervised").await;
    s.pair(BOB, "Bob", "supervised").await;
    let ada = || user(ADA, "Ada", "en");
    s.llm
        .push(tool_calls("memory_save", json!({"text": "Locker 4417"})));
    for (text, answer) in [
        ("my locker is 4417", "Noted."),
        ("and the gym?", "Open at 7."),
    ] {
        s.llm.push(Reply::Text(answer.into()));
        s.tg.message(ADA, ada(), text);
        s.answered(answer).await;
    }
    s.llm.push(Reply::Text("Hi Bob.".into()));
    s.tg.message(BOB, user(BOB, "Bob", "en"), "hello");
    s.tg.until("Bob's answer", |tg| {
        tg.texts_to(BOB).iter().any(|t| t == "Hi Bob.")
    })
    .await;
    // Asked, then kept: nothing goes.
    s.tg.message(ADA, ada(), "/forget");
    let (question, [erase, _, keep]) = forget_question(&s, ADA, 1).await;
    assert!(
        erase.starts_with("forget:") && keep.starts_with("keep:"),
        "{erase} {keep}"
    );
    s.tg.click(ADA, question, ada(), &keep);
    shows(&s, question, "nothing was erased").await;
    // The old question's erase button works no more, and Bob's click on Ada's never did.
    s.tg.click(ADA, question, ada(), &erase);
    s.tg.message(ADA, ada(), "/forget");
    let (second, [_, everything, _]) = forget_question(&s, ADA, 2).await;
    assert!(everything.starts_with("forget-all:"), "{everything}");
    s.tg.click(ADA, second, user(BOB, "Bob", "en"), &everything);
    let answers = |tg: &common::telegram::FakeTelegram| {
        tg.calls("answerCallbackQuery")
            .iter()
            .map(|c| c.body["text"].as_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    s.tg.until("the two refusals", |tg| {
        answers(tg)
            .iter()
            .filter(|t| t.contains("no longer valid"))
            .count()
            == 2
    })
    .await;
    s.llm.push(Reply::Text("Still 4417.".into()));
    s.tg.message(ADA, ada(), "what is my locker?");
    s.answered("Still 4417.").await;
    assert_eq!(
        request_ending_with(&s, "what is my locker?").len(),
        5,
        "nothing erased yet"
    );
    // Ada confirms (her second question is still open: Bob's click did not take it).
    s.tg.click(ADA, second, ada(), &everything);
    shows(
        &s,
        second,
        "I erased 3 exchange(s) of our conversations and 1 thing(s) I remembered",
    )
    .await;
    let (_, turns, _) = s.sandbox.run(&["turns", "list"]).await;
    let forgotten: Vec<Value> = turns
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["final_kind"] == "conversations_forgotten")
        .collect();
    assert_eq!(forgotten.len(), 1, "{turns}");
    assert_eq!(forgotten[0]["forgotten"]["exchanges"], 3, "{turns}");
    assert_eq!(forgotten[0]["forgotten"]["memories"], 1, "{turns}");
    assert_eq!(forgotten[0]["principal"]["sender_id"], ADA.to_string());
    assert!(
        !turns.contains("4417"),
        "the log keeps counts, never the words"
    );
    // Nothing of it reaches the model again, not through a reply to an old answer either.
    let noted = s.tg.sent_id(ADA, "Noted.").unwrap();
    s.llm.push(Reply::Text("I do not know.".into()));
    s.tg.reply(ADA, ada(), noted, "so, the locker?");
    s.answered("I do not know.").await;
    assert_eq!(
        request_ending_with(&s, "so, the locker?"),
        [("user".to_owned(), "so, the locker?".to_owned())]
    );
    let (_, out, _) = s
        .sandbox
        .run(&["memory", "list", "--person", &format!("telegram:{ADA}")])
        .await;
    assert!(out.starts_with("0 entries"), "{out}");
    // Bob's conversation is untouched.
    s.llm.push(Reply::Text("Yes.".into()));
    s.tg.message(BOB, user(BOB, "Bob", "en"), "still there?");
    s.tg.until("Bob's answer", |tg| {
        tg.texts_to(BOB).iter().any(|t| t == "Yes.")
    })
    .await;
    assert_eq!(request_ending_with(&s, "still there?").len(), 3);
}
