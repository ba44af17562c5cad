//! The gateway with the whole stack, a fake Telegram Bot API server and the fake LLM:
//! pairing, the seed's callback cases, approval end to end with the card edited, the stop
//! clause, long answers, polling through errors, a restart in the middle, and the token
//! kept out of every log line. One binary, one file per scenario; the stack and the
//! helpers they share are here.
//!
//! - [`standing`]: standing orders set up, fired to Telegram, paused and resumed.
//! - [`offers`]: grants offered after approvals, accepted, narrowed, revoked, from the digest.
//! - [`pairing`]: strangers, groups, forwarded messages, revoked pairings, lowered levels.
//! - [`cards`]: approval cards answered, rejected, granted, expired and cancelled.
//! - [`delivery`]: stop and long answers, polling and the webhook, lost answers, restarts
//!   and outages.
//! - [`threads`]: a follow-up carries the conversation; two people keep theirs apart.

#[path = "../common/mod.rs"]
mod common;

mod cards;
mod delivery;
mod offers;
mod pairing;
mod standing;
mod threads;

use std::num::NonZero;

use common::telegram::{FakeTelegram, TOKEN, user};
use common::{Sandbox, Up};
use metnos_llm::fake::{FakeLlm, Reply};
use serde_json::{Value, json};

const ADA: i64 = 4242;
const BOB: i64 = 5151;
const MALLORY: i64 = 6666;

struct Stack {
    sandbox: Sandbox,
    up: Up,
    llm: FakeLlm,
    tg: FakeTelegram,
}

async fn stack() -> Stack {
    stack_with(&[]).await
}

/// The stack with more settings (`METNOS_…` variables).
async fn stack_with(settings: &[(&str, &str)]) -> Stack {
    let llm = FakeLlm::start().await;
    llm.keep_requests(true);
    let tg = FakeTelegram::start();
    let mut sandbox = Sandbox::new();
    sandbox
        .with_fake_llm(llm.url())
        .with_builtins()
        .set("METNOS_TELEGRAM_TOKEN", TOKEN)
        .set("METNOS_TELEGRAM__API_URL", &tg.url())
        .set("METNOS_TELEGRAM__POLL_TIMEOUT_SECONDS", "1")
        .set("METNOS_TELEGRAM__PER_CHAT_PER_SECOND", "50")
        .set("METNOS_TELEGRAM__GLOBAL_PER_SECOND", "100")
        // The approval service's few INFO lines too: tests check what they name.
        .set("METNOS_TELEMETRY__LOG", "warn,metnos_approval=info");
    for (name, value) in settings {
        sandbox.set(name, value);
    }
    let up = sandbox.up().await;
    Stack {
        sandbox,
        up,
        llm,
        tg,
    }
}

impl Stack {
    /// Pairs `id` through the real flow: a message, the code, `metnos pair approve`.
    async fn pair(&self, id: i64, name: &str, level: &str) {
        self.tg.message(id, user(id, name, "en"), "hello");
        self.tg
            .until("a pairing code", |tg| {
                tg.texts_to(id)
                    .iter()
                    .any(|t| t.contains("metnos pair approve"))
            })
            .await;
        let text = self
            .tg
            .texts_to(id)
            .into_iter()
            .find(|t| t.contains("metnos pair approve"))
            .unwrap();
        let code = text
            .split("approve ")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned();
        let (status, stdout, stderr) = self
            .sandbox
            .run(&["pair", "approve", &code, "--level", level])
            .await;
        assert_eq!(status, 0, "{stderr}");
        let line: Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(line["sender_id"], id.to_string());
        self.tg
            .until("the welcome", |tg| {
                tg.texts_to(id).iter().any(|t| t.starts_with("Paired"))
            })
            .await;
    }

    /// The first approval card sent, once it is: (the sendMessage call, approve data,
    /// reject data).
    async fn card(&self) -> (common::telegram::Call, String, String) {
        let is_card = |c: &common::telegram::Call| !c.body["reply_markup"].is_null();
        self.tg
            .until("a card", |tg| tg.calls("sendMessage").iter().any(is_card))
            .await;
        let call = self
            .tg
            .calls("sendMessage")
            .into_iter()
            .find(is_card)
            .unwrap();
        let data = |i: usize| {
            call.body["reply_markup"]["inline_keyboard"][0][i]["callback_data"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let (approve, reject) = (data(0), data(1));
        (call, approve, reject)
    }

    fn home(&self) -> std::path::PathBuf {
        self.sandbox.dir.path().to_owned()
    }

    /// The cards sent so far (sendMessage calls with buttons).
    fn cards(&self) -> Vec<common::telegram::Call> {
        self.tg
            .calls("sendMessage")
            .into_iter()
            .filter(|c| !c.body["reply_markup"].is_null())
            .collect()
    }

    /// Ada asks, one turn each, to write `~/inv/<i>.txt` and approves its card (the `i`-th);
    /// each turn ends "Written.".
    async fn ada_approves_writes(&self, writes: std::ops::RangeInclusive<usize>) {
        self.approves_writes(ADA, "Ada", "inv", writes).await;
    }

    /// `id` (`name`) asks, one turn each, to write `~/<folder>/<i>.txt` and approves its
    /// card (the `i`-th of the stack); each turn ends "Written.".
    async fn approves_writes(
        &self,
        id: i64,
        name: &str,
        folder: &str,
        writes: std::ops::RangeInclusive<usize>,
    ) {
        for i in writes {
            self.llm.push(tool_calls(
                "fs_write",
                json!({"path": format!("~/{folder}/{i}.txt"), "content": "an invoice"}),
            ));
            self.tg
                .message(id, user(id, name, "en"), "file this invoice");
            let (_, buttons) = self.nth_card(i).await;
            self.tg.click(id, 2, user(id, name, "en"), &buttons[0][0].1);
            self.tg
                .until("the write", |tg| {
                    tg.texts_to(id).iter().filter(|t| *t == "Written.").count() >= i
                })
                .await;
        }
    }

    /// Waits for the `n`-th card (1-based); its message id and its buttons as
    /// (text, data) rows.
    async fn nth_card(&self, n: usize) -> (i64, Vec<Vec<(String, String)>>) {
        self.tg
            .until("a card", |tg| {
                tg.calls("sendMessage")
                    .iter()
                    .filter(|c| !c.body["reply_markup"].is_null())
                    .count()
                    >= n
            })
            .await;
        let card = self.cards()[n - 1].clone();
        let id = self.tg.message_id_of(&card).expect("the card's message id");
        (id, rows(&card.body["reply_markup"]))
    }

    /// One turn of Ada's writing `content` to `path`, the LLM then saying `answer`.
    fn ask_write(&self, path: &str, content: &str, answer: &str) {
        self.llm.push(tool_calls(
            "fs_write",
            json!({"path": path, "content": content}),
        ));
        self.llm.push(Reply::Text(answer.into()));
        self.tg.message(
            ADA,
            user(ADA, "Ada", "en"),
            &format!("write {content} to {path}"),
        );
    }

    async fn answered(&self, answer: &str) {
        self.tg
            .until(answer, |tg| tg.texts_to(ADA).iter().any(|t| t == answer))
            .await;
    }
}

/// A reply_markup's buttons as (text, data) rows.
fn rows(markup: &Value) -> Vec<Vec<(String, String)>> {
    markup["inline_keyboard"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|row| {
                    row.as_array()
                        .unwrap()
                        .iter()
                        .map(|b| {
                            (
                                b["text"].as_str().unwrap_or_default().to_owned(),
                                b["callback_data"].as_str().unwrap_or_default().to_owned(),
                            )
                        })
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default()
}

fn tool_calls(name: &str, args: Value) -> Reply {
    Reply::ToolCalls(vec![(name.to_owned(), args)])
}
