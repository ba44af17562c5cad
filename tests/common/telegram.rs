//! A fake Telegram Bot API server on loopback: real HTTP and the real JSON shapes of
//! getUpdates, sendMessage, answerCallbackQuery, editMessageText, sendChatAction (method
//! names matched case-insensitively, as teloxide calls them in PascalCase). Tests queue
//! updates and read back what the bot sent.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use serde_json::{Value, json};

pub const TOKEN: &str = "123456:TEST-token-never-logged";

/// One call the bot made.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub body: Value,
    /// The id of the message a sendMessage created.
    pub message_id: Option<i64>,
}

#[derive(Debug, Default)]
struct State {
    updates: VecDeque<Value>,
    next_update: u64,
    next_message: i64,
    calls: Vec<Call>,
    /// Answers to give to the next getUpdates calls instead of updates: (status, body).
    faults: VecDeque<(u16, Value)>,
    /// Each message's text as Telegram shows it (by message id).
    texts: std::collections::HashMap<i64, String>,
    /// After the next batch of updates is delivered, the server is down this long.
    outage_after_updates: Option<Duration>,
    /// The next editMessageText calls are made, but answered by a proxy's 502 page.
    lost_edit_answers: u32,
    /// The same for the next sendMessage calls: the message shows, its answer is lost.
    lost_send_answers: u32,
}

#[derive(Debug, Clone)]
pub struct FakeTelegram {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

/// Whether the server is down (refusing connections).
type Down = Arc<tokio::sync::watch::Sender<bool>>;

pub fn user(id: i64, name: &str, language: &str) -> Value {
    json!({"id": id, "is_bot": false, "first_name": name, "language_code": language})
}

fn message_json(id: i64, chat: i64, from: Value, text: &str) -> Value {
    json!({
        "message_id": id,
        "date": 1_795_000_000,
        "chat": {"id": chat, "type": "private", "first_name": "Chat"},
        "from": from,
        "text": text,
    })
}

impl FakeTelegram {
    pub fn start() -> FakeTelegram {
        let state = Arc::new(Mutex::new(State {
            next_update: 1000,
            next_message: 1,
            ..State::default()
        }));
        let shared = Arc::clone(&state);
        let (down, gate) = tokio::sync::watch::channel(false);
        let down: Down = Arc::new(down);
        let addr = super::serve_http_gated(
            move |request| handle(Arc::clone(&shared), Arc::clone(&down), request),
            gate,
        );
        FakeTelegram { addr, state }
    }

    /// Right after the next updates are delivered, the server goes down for `outage`:
    /// connections are refused, open ones closed.
    pub fn outage_after_next_updates(&self, outage: Duration) {
        self.state.lock().unwrap().outage_after_updates = Some(outage);
    }

    /// The next `n` edits are made, but their answers lost: a proxy answers 502 with an
    /// HTML page.
    pub fn lose_edit_answers(&self, n: u32) {
        self.state.lock().unwrap().lost_edit_answers = n;
    }

    /// The next `n` messages are sent, but their answers lost (a proxy's 502 page).
    pub fn lose_send_answers(&self, n: u32) {
        self.state.lock().unwrap().lost_send_answers = n;
    }

    /// The text Telegram shows for message `id`.
    pub fn text_of(&self, id: i64) -> Option<String> {
        self.state.lock().unwrap().texts.get(&id).cloned()
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn push(&self, kind: &str, payload: Value) -> u64 {
        let mut s = self.state.lock().unwrap();
        s.next_update += 1;
        let id = s.next_update;
        s.updates.push_back(json!({"update_id": id, kind: payload}));
        id
    }

    /// A text message from `from` in the private chat `chat`.
    pub fn message(&self, chat: i64, from: Value, text: &str) -> u64 {
        let id = {
            let mut s = self.state.lock().unwrap();
            s.next_message += 1;
            s.next_message
        };
        self.push("message", message_json(id, chat, from, text))
    }

    /// A text message from `from` in the private chat `chat` that replies to the message
    /// `replied` there (one the bot sent: `reply_to_message` holds it as Telegram does).
    pub fn reply(&self, chat: i64, from: Value, replied: i64, text: &str) -> u64 {
        let (id, replied_text) = {
            let mut s = self.state.lock().unwrap();
            s.next_message += 1;
            (
                s.next_message,
                s.texts.get(&replied).cloned().unwrap_or_default(),
            )
        };
        let mut message = message_json(id, chat, from, text);
        let bot = json!({"id": 777, "is_bot": true, "first_name": "Metnos"});
        message["reply_to_message"] = message_json(replied, chat, bot, &replied_text);
        self.push("message", message)
    }

    /// The id of the message the bot sent to `chat` whose text is `text`.
    pub fn sent_id(&self, chat: i64, text: &str) -> Option<i64> {
        self.calls("sendMessage")
            .into_iter()
            .find(|c| c.body["chat_id"] == json!(chat) && c.body["text"] == json!(text))
            .and_then(|c| c.message_id)
    }

    /// A text message `from` forwarded into the private chat `chat`, first sent by
    /// `origin` (Bot API 7's `forward_origin`).
    pub fn forwarded_message(&self, chat: i64, from: Value, origin: Value, text: &str) -> u64 {
        let id = {
            let mut s = self.state.lock().unwrap();
            s.next_message += 1;
            s.next_message
        };
        let mut message = message_json(id, chat, from, text);
        message["forward_origin"] =
            json!({"type": "user", "sender_user": origin, "date": 1_794_999_000});
        message["forward_date"] = json!(1_794_999_000);
        self.push("message", message)
    }

    /// A text message from `from` in the group `chat` (a supergroup: its id is negative).
    pub fn group_message(&self, chat: i64, from: Value, text: &str) -> u64 {
        self.message_in(chat, "supergroup", from, text)
    }

    /// A text message from `from` in `chat` of Telegram's `kind` (`group`, `supergroup`).
    pub fn message_in(&self, chat: i64, kind: &str, from: Value, text: &str) -> u64 {
        let id = {
            let mut s = self.state.lock().unwrap();
            s.next_message += 1;
            s.next_message
        };
        let mut message = message_json(id, chat, from, text);
        message["chat"] = json!({"id": chat, "type": kind, "title": "Friends"});
        self.push("message", message)
    }

    /// A click on a button of the message `message_id` in `chat`, with `data`.
    pub fn click(&self, chat: i64, message_id: i64, from: Value, data: &str) -> u64 {
        let n = self.state.lock().unwrap().next_update;
        self.push(
            "callback_query",
            json!({
                "id": format!("cb{n}"),
                "from": from,
                "chat_instance": "ci",
                "data": data,
                "message": message_json(message_id, chat, json!({"id": 777, "is_bot": true, "first_name": "Metnos"}), "card"),
            }),
        )
    }

    /// The next getUpdates calls answer these instead.
    pub fn fail_next(&self, status: u16, body: Value) {
        self.state.lock().unwrap().faults.push_back((status, body));
    }

    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.state
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|c| c.method.eq_ignore_ascii_case(method))
            .cloned()
            .collect()
    }

    /// Texts sent to `chat`, in order.
    pub fn texts_to(&self, chat: i64) -> Vec<String> {
        self.calls("sendMessage")
            .into_iter()
            .filter(|c| c.body["chat_id"] == json!(chat))
            .map(|c| c.body["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Waits until `f` holds (a hang guard of 30 s, not a timing assertion).
    pub async fn until(&self, what: &str, f: impl Fn(&FakeTelegram) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !f(self) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}: {:#?}",
                self.state.lock().unwrap().calls
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The id of the message a sendMessage call created.
    pub fn message_id_of(&self, call: &Call) -> Option<i64> {
        call.message_id
    }

    /// Whether every queued update has been confirmed (asked past by offset).
    pub fn all_confirmed(&self) -> bool {
        self.state.lock().unwrap().updates.is_empty()
    }
}

/// The text fields of a multipart/form-data body (what teloxide sends for some methods).
fn multipart_fields(body: &str, boundary: &str) -> Value {
    let mut fields = serde_json::Map::new();
    for part in body.split(&format!("--{boundary}")) {
        let Some((head, value)) = part.split_once("\r\n\r\n") else {
            continue;
        };
        let Some(name) = head
            .split("name=\"")
            .nth(1)
            .and_then(|n| n.split('"').next())
        else {
            continue;
        };
        let value = value.trim_end_matches("\r\n");
        let parsed =
            serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
        fields.insert(name.to_owned(), parsed);
    }
    Value::Object(fields)
}

/// A proxy's answer when Telegram's was lost.
fn bad_gateway() -> Response<Full<Bytes>> {
    Response::builder()
        .status(502)
        .header("content-type", "text/html")
        .body(Full::new(Bytes::from_static(
            b"<html><body><h1>502 Bad Gateway</h1></body></html>",
        )))
        .unwrap()
}

fn ok(result: Value) -> Response<Full<Bytes>> {
    reply(200, json!({"ok": true, "result": result}))
}

fn reply(status: u16, body: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

async fn handle(
    state: Arc<Mutex<State>>,
    down: Down,
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let content_type = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let bytes = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body: Value = match content_type.split_once("boundary=") {
        Some((_, boundary)) => {
            multipart_fields(&String::from_utf8_lossy(&bytes), boundary.trim_matches('"'))
        }
        None => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    let Some(rest) = path.strip_prefix(&format!("/bot{TOKEN}/")) else {
        return Ok(reply(
            401,
            json!({"ok": false, "error_code": 401, "description": "Unauthorized"}),
        ));
    };
    let method = rest.to_ascii_lowercase();
    // A sent message's id is given with its record, under one lock: a test that sees the
    // call sees its id (they were two steps, and a test could read the call in between).
    let mut sent_id = None;
    if method != "getupdates" {
        let mut s = state.lock().unwrap();
        if method == "sendmessage" {
            s.next_message += 1;
            sent_id = Some(s.next_message);
        }
        s.calls.push(Call {
            method: rest.to_owned(),
            body: body.clone(),
            message_id: sent_id,
        });
    }
    Ok(match method.as_str() {
        "getupdates" => {
            if let Some((status, body)) = state.lock().unwrap().faults.pop_front() {
                return Ok(reply(status, body));
            }
            let offset = body["offset"].as_i64().unwrap_or(0);
            // Long polling, shortened: up to a second for something to arrive.
            for _ in 0..50 {
                {
                    let mut s = state.lock().unwrap();
                    s.updates
                        .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
                    if !s.updates.is_empty() {
                        if let Some(outage) = s.outage_after_updates.take() {
                            let down = Arc::clone(&down);
                            tokio::spawn(async move {
                                down.send_replace(true);
                                tokio::time::sleep(outage).await;
                                down.send_replace(false);
                            });
                        }
                        return Ok(ok(Value::Array(s.updates.iter().cloned().collect())));
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            ok(json!([]))
        }
        "sendmessage" => {
            let mut s = state.lock().unwrap();
            let id = sent_id.unwrap_or_default();
            let chat = body["chat_id"].as_i64().unwrap_or(0);
            let text = body["text"].as_str().unwrap_or_default();
            s.texts.insert(id, text.to_owned());
            if s.lost_send_answers > 0 {
                s.lost_send_answers -= 1;
                return Ok(bad_gateway());
            }
            ok(message_json(
                id,
                chat,
                json!({"id": 777, "is_bot": true, "first_name": "Metnos"}),
                text,
            ))
        }
        "editmessagetext" => {
            let chat = body["chat_id"].as_i64().unwrap_or(0);
            let id = body["message_id"].as_i64().unwrap_or(0);
            let text = body["text"].as_str().unwrap_or_default();
            let mut s = state.lock().unwrap();
            // Telegram refuses an edit that changes nothing (buttons aside, in this fake).
            if s.texts.get(&id).map(String::as_str) == Some(text) && body["reply_markup"].is_null()
            {
                return Ok(reply(
                    400,
                    json!({"ok": false, "error_code": 400, "description": "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"}),
                ));
            }
            s.texts.insert(id, text.to_owned());
            if s.lost_edit_answers > 0 {
                s.lost_edit_answers -= 1;
                return Ok(bad_gateway());
            }
            drop(s);
            ok(message_json(
                id,
                chat,
                json!({"id": 777, "is_bot": true, "first_name": "Metnos"}),
                body["text"].as_str().unwrap_or_default(),
            ))
        }
        "answercallbackquery" | "sendchataction" | "deletewebhook" | "setwebhook" => {
            ok(json!(true))
        }
        "getme" => {
            ok(json!({"id": 777, "is_bot": true, "first_name": "Metnos", "username": "metnos_bot"}))
        }
        _ => reply(
            404,
            json!({"ok": false, "error_code": 404, "description": "Not Found: method not found"}),
        ),
    })
}

/// Pairs `id` through the real flow: a message, the code it is given, `metnos pair approve`
/// at `level`; returns once the welcome is sent.
pub async fn pair(sandbox: &super::Sandbox, tg: &FakeTelegram, id: i64, level: &str) {
    tg.message(id, user(id, "Ada", "en"), "hello");
    let has_code = |t: &String| t.contains("metnos pair approve");
    tg.until("a pairing code", |tg| tg.texts_to(id).iter().any(has_code))
        .await;
    let text = tg.texts_to(id).into_iter().find(has_code).unwrap();
    let code = text
        .split("approve ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_owned();
    let (status, _, stderr) = sandbox
        .run(&["pair", "approve", &code, "--level", level])
        .await;
    assert_eq!(status, 0, "{stderr}");
    tg.until("the welcome", |tg| {
        tg.texts_to(id).iter().any(|t| t.starts_with("Paired"))
    })
    .await;
}
