//! The Telegram transport (teloxide): the bot, long polling with the offset persisted (so
//! after a restart no update is handled twice and none is lost), or a webhook whose POSTs
//! must carry the secret token; every update handled once, then handed to the
//! [`Conversation`]. The bot token never reaches a log line or an error.

use std::sync::Arc;
use std::time::Duration;

use metnos_core::language::Language;
use metnos_kit::client::TracedChannel;
use metnos_kit::time::now_ms;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
use teloxide::RequestError;
use teloxide::payloads::{GetUpdatesSetters, SetWebhookSetters};
use teloxide::prelude::Requester;
use teloxide::types::{AllowedUpdate, CallbackQuery, Message, Update, UpdateKind};

use crate::conversation::{Click, Conversation, GroupMessage, Incoming, MessageIn, StopDetector};
use crate::outbox::Outbox;
use crate::store::Store;
use crate::telegram::TelegramBot;

/// Why the channel could not be set up or its webhook registered.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("telegram.api_url is not a URL: {0}")]
    ApiUrl(url::ParseError),
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(reqwest::Error),
    #[error("telegram.webhook_url: {0}")]
    WebhookUrl(url::ParseError),
}

/// Settings of the channel.
#[derive(Debug, Clone)]
pub struct Settings {
    pub api_url: String,
    pub poll_timeout_seconds: u32,
    pub per_chat_per_second: u32,
    pub global_per_second: u32,
}

/// What a person did, read off an update: a text message with a sender, or a click;
/// anything else is not for the conversation.
pub fn incoming(update: Update) -> Option<Incoming> {
    match update.kind {
        UpdateKind::CallbackQuery(query) => Some(Incoming::Click(click(query))),
        UpdateKind::Message(message) => message_in(&message),
        _ => None,
    }
}

/// The language a Telegram client says it speaks (Italian when it says nothing).
fn client_language(code: Option<&str>) -> Language {
    Language::from_tag(code.unwrap_or("it"))
}

/// A text message a person sent the bot in their own private chat. The rule for the rest
/// (issue 41): a message in a group or a supergroup is never answered there — an answer, a
/// card, a later notice or a pairing code would be read by everyone in it — and nobody is
/// paired from one; the group is told to write privately ([`GroupMessage`]). Anything else
/// (a channel, another chat's id) is not for the conversation.
fn message_in(message: &Message) -> Option<Incoming> {
    let (Some(from), Some(text)) = (message.from.as_ref(), message.text()) else {
        return None;
    };
    if (message.chat.is_group() || message.chat.is_supergroup()) && !from.is_bot {
        return Some(Incoming::Group(GroupMessage {
            chat: message.chat.id.0,
            lang: client_language(from.language_code.as_deref()),
        }));
    }
    if !message.chat.is_private() || i64::try_from(from.id.0).ok() != Some(message.chat.id.0) {
        tracing::debug!("a message outside its sender's private chat is ignored");
        return None;
    }
    let name = match &from.username {
        Some(username) => format!("{} (@{username})", from.first_name),
        None => from.first_name.clone(),
    };
    Some(Incoming::Message(MessageIn {
        chat: message.chat.id.0,
        sender: from.id.0.to_string(),
        name,
        lang: client_language(from.language_code.as_deref()),
        text: text.to_owned(),
        forwarded: message.forward_origin().is_some(),
        reply_to: message.reply_to_message().map(|replied| replied.id.0),
    }))
}

fn click(query: CallbackQuery) -> Click {
    Click {
        clicker: query.from.id.0.to_string(),
        lang: client_language(query.from.language_code.as_deref()),
        data: query.data.unwrap_or_default(),
        chat: query.message.as_ref().map(|m| m.chat().id.0),
        message: query.message.as_ref().map(|m| m.id().0),
        id: query.id,
    }
}

/// Whether a webhook POST's secret-token header is the secret, compared in constant time.
fn secret_matches(given: &str, secret: &str) -> bool {
    given.len() == secret.len()
        && given
            .bytes()
            .zip(secret.bytes())
            .fold(true, |ok, (a, b)| ok & (a == b))
}

fn allowed_updates() -> Vec<AllowedUpdate> {
    vec![AllowedUpdate::Message, AllowedUpdate::CallbackQuery]
}

type Answer = hyper::Response<http_body_util::Full<bytes::Bytes>>;

fn reply(code: u16) -> Answer {
    hyper::Response::builder()
        .status(code)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap_or_default()
}

/// The channel.
#[derive(Debug)]
pub struct Telegram {
    bot: TelegramBot,
    store: Store,
    outbox: Arc<Outbox>,
    conversation: Arc<Conversation>,
    poll_timeout: u32,
}

impl Telegram {
    pub fn new(
        token: String,
        settings: &Settings,
        store: Store,
        planner: PlannerServiceClient<TracedChannel>,
        approval: ApprovalServiceClient<TracedChannel>,
        stops: StopDetector,
    ) -> Result<Telegram, SetupError> {
        let api = reqwest::Url::parse(&settings.api_url).map_err(SetupError::ApiUrl)?;
        // Long polls outlast teloxide's default 17 s client timeout.
        let client = teloxide::net::default_reqwest_settings()
            .timeout(Duration::from_secs(
                u64::from(settings.poll_timeout_seconds) + 15,
            ))
            .build()
            .map_err(SetupError::HttpClient)?;
        let bot = TelegramBot::new(token, client, api);
        let outbox = Arc::new(Outbox::new(
            bot.clone(),
            store.clone(),
            settings.per_chat_per_second,
            settings.global_per_second,
        ));
        let conversation = Arc::new(Conversation::new(
            store.clone(),
            planner,
            approval,
            stops,
            Arc::clone(&outbox),
        ));
        Ok(Telegram {
            bot,
            store,
            outbox,
            conversation,
            poll_timeout: settings.poll_timeout_seconds,
        })
    }

    /// The outbox, to keep beyond a borrow of the channel.
    pub fn outbox_handle(&self) -> Arc<Outbox> {
        Arc::clone(&self.outbox)
    }

    /// The conversations this channel carries.
    pub fn conversation(&self) -> &Conversation {
        &self.conversation
    }

    /// The conversation, shared (for the card sweep).
    pub fn conversation_handle(&self) -> Arc<Conversation> {
        Arc::clone(&self.conversation)
    }

    /// Where messages and cards go out.
    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// Long-polls until `shutdown`.
    pub async fn poll(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut offset = self.stored_offset().await;
        // getUpdates is refused while a webhook is set (e.g. by an earlier webhook run).
        if let Err(e) = self.bot.delete_webhook().await {
            tracing::warn!(error = %self.bot.redact(&e), "deleteWebhook failed");
        }
        let mut backoff = Duration::from_secs(1);
        loop {
            let request = self
                .bot
                .get_updates()
                .offset(offset)
                .timeout(self.poll_timeout)
                .allowed_updates(allowed_updates());
            let updates = tokio::select! {
                () = &mut shutdown => return,
                result = request => result,
            };
            let wait = match updates {
                Ok(updates) => {
                    backoff = Duration::from_secs(1);
                    for update in updates {
                        let id = i64::from(update.id.0);
                        offset = offset.max(i32::try_from(id + 1).unwrap_or(i32::MAX));
                        self.handle_once(update).await;
                    }
                    continue;
                }
                Err(RequestError::RetryAfter(seconds)) => {
                    let wait = seconds.duration();
                    tracing::warn!(seconds = wait.as_secs(), "Telegram asks to slow down");
                    wait
                }
                Err(e) => {
                    let wait = backoff;
                    tracing::warn!(error = %self.bot.redact(&e), retry_in_s = wait.as_secs(), "Telegram polling failed");
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    wait
                }
            };
            tokio::select! { () = &mut shutdown => return, () = tokio::time::sleep(wait) => {} }
        }
    }

    /// The first update id not yet confirmed, as last recorded.
    async fn stored_offset(&self) -> i32 {
        match self.store.setting("telegram.offset").await {
            Ok(value) => value.and_then(|v| v.parse().ok()).unwrap_or(0),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the Telegram offset; starting from the oldest kept update");
                0
            }
        }
    }

    /// Handles an update unless it was handled already, then records it.
    async fn handle_once(&self, update: Update) {
        let id = i64::from(update.id.0);
        if self.store.handled(id).await.unwrap_or(false) {
            return;
        }
        if let Some(incoming) = incoming(update) {
            self.conversation.handle(incoming).await;
        }
        if let Err(e) = self.store.mark_handled(id, now_ms()).await {
            tracing::error!(error = %e, update_id = id, "cannot record a handled update");
        }
    }

    /// Webhook mode: registers `url` with a fresh secret, then serves Telegram's POSTs on
    /// `listener` until `shutdown`; a POST without the secret-token header is refused.
    pub async fn webhook(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        url: String,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), SetupError> {
        let url = reqwest::Url::parse(&url).map_err(SetupError::WebhookUrl)?;
        let secret: Arc<str> = crate::pairing::new_secret().into();
        tokio::pin!(shutdown);
        // A shutdown while Telegram is unreachable ends the retries.
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            () = self.register_webhook(url, &secret) => {}
        }
        tracing::info!(addr = ?listener.local_addr().ok(), "Telegram webhook registered");
        loop {
            let (stream, _) = tokio::select! {
                () = &mut shutdown => return Ok(()),
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "webhook accept failed");
                        continue;
                    }
                },
            };
            let this = Arc::clone(&self);
            let secret = Arc::clone(&secret);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let this = Arc::clone(&this);
                    let secret = Arc::clone(&secret);
                    async move {
                        Ok::<_, std::convert::Infallible>(this.on_post(request, &secret).await)
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    }

    /// setWebhook, retried with backoff until Telegram takes it.
    async fn register_webhook(&self, url: reqwest::Url, secret: &str) {
        let mut backoff = Duration::from_secs(1);
        loop {
            let registered = self
                .bot
                .set_webhook(url.clone())
                .secret_token(secret.to_owned())
                .allowed_updates(allowed_updates())
                .await;
            let Err(e) = registered else {
                return;
            };
            tracing::warn!(error = %self.bot.redact(&e), retry_in_s = backoff.as_secs(), "setWebhook failed");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }

    async fn on_post(
        self: Arc<Self>,
        request: hyper::Request<hyper::body::Incoming>,
        secret: &str,
    ) -> Answer {
        use http_body_util::BodyExt;
        if request.method() != hyper::Method::POST {
            return reply(405);
        }
        let given = request
            .headers()
            .get("x-telegram-bot-api-secret-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !secret_matches(given, secret) {
            tracing::warn!("webhook POST without the right secret token refused");
            return reply(401);
        }
        let body = match http_body_util::Limited::new(request.into_body(), 4 * 1024 * 1024)
            .collect()
            .await
        {
            Ok(body) => body.to_bytes(),
            Err(_) => return reply(413),
        };
        match serde_json::from_slice::<Update>(&body) {
            Ok(update) => {
                // Answer Telegram at once; the update is handled (once) in the background.
                tokio::spawn(async move { self.handle_once(update).await });
                reply(200)
            }
            Err(e) => {
                tracing::warn!(error = %e, "webhook body is not an update");
                reply(400)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_secret_opens_the_webhook() {
        assert!(secret_matches("s3cret", "s3cret"));
        assert!(!secret_matches("s3creT", "s3cret"));
        assert!(!secret_matches("s3cre", "s3cret"));
        assert!(!secret_matches("", "s3cret"));
    }

    /// An update as the webhook reads it (from bytes: teloxide's flattened and untagged
    /// types do not all read from a `Value`).
    fn update(json: serde_json::Value) -> Update {
        let update: Update = serde_json::from_slice(json.to_string().as_bytes()).unwrap();
        assert!(
            !matches!(update.kind, UpdateKind::Error(_)),
            "not understood: {json}"
        );
        update
    }

    #[test]
    fn a_text_message_names_its_sender_and_their_client_s_language() {
        let from = serde_json::json!({"id": 42, "is_bot": false, "first_name": "Ada",
            "username": "ada", "language_code": "en-GB"});
        let message = |from: serde_json::Value, text: Option<&str>| {
            let mut message = serde_json::json!({"message_id": 1, "date": 1_795_000_000,
                "chat": {"id": 42, "type": "private", "first_name": "Ada"}, "from": from});
            if let Some(text) = text {
                message["text"] = text.into();
            }
            update(serde_json::json!({"update_id": 1, "message": message}))
        };
        assert_eq!(
            incoming(message(from.clone(), Some("hello"))),
            Some(Incoming::Message(MessageIn {
                chat: 42,
                sender: "42".to_owned(),
                name: "Ada (@ada)".to_owned(),
                lang: Language::English,
                text: "hello".to_owned(),
                forwarded: false,
                reply_to: None,
            }))
        );
        // A forwarded message is someone else's words.
        let forwarded = update(serde_json::json!({"update_id": 2, "message": {
            "message_id": 2, "date": 1_795_000_000, "from": from.clone(),
            "chat": {"id": 42, "type": "private", "first_name": "Ada"},
            "text": "set a pager in ~/.gitconfig",
            "forward_origin": {"type": "hidden_user", "sender_user_name": "M",
                "date": 1_794_999_000},
            "forward_date": 1_794_999_000}}));
        let Some(Incoming::Message(said)) = incoming(forwarded) else {
            panic!("a forwarded text message");
        };
        assert!(said.forwarded, "{said:?}");
        // A reply says which message of the chat it answers.
        let reply = update(serde_json::json!({"update_id": 3, "message": {
            "message_id": 3, "date": 1_795_000_000, "from": from.clone(),
            "chat": {"id": 42, "type": "private", "first_name": "Ada"},
            "text": "and in Rome?",
            "reply_to_message": {"message_id": 77, "date": 1_794_999_000,
                "chat": {"id": 42, "type": "private", "first_name": "Ada"},
                "from": {"id": 9, "is_bot": true, "first_name": "Metnos"},
                "text": "It is 10:00 in Milan."}}}));
        let Some(Incoming::Message(said)) = incoming(reply) else {
            panic!("a reply");
        };
        assert_eq!(said.reply_to, Some(77), "{said:?}");
        let plain = serde_json::json!({"id": 42, "is_bot": false, "first_name": "Ada"});
        let Some(Incoming::Message(said)) = incoming(message(plain, Some("ciao"))) else {
            panic!("a text message");
        };
        assert_eq!((said.name.as_str(), said.lang), ("Ada", Language::Italian));
        assert_eq!(
            incoming(message(from.clone(), None)),
            None,
            "no text, nothing to do"
        );
        // Outside the sender's own private chat: a group or a supergroup is told to write
        // privately (never a conversation); another chat's id is nothing.
        let in_chat = |chat: &serde_json::Value| {
            let mut update = message(from.clone(), Some("hello"));
            if let UpdateKind::Message(m) = &mut update.kind {
                m.chat = serde_json::from_value(chat.clone()).unwrap();
            }
            incoming(update)
        };
        for (id, kind) in [(-100_777, "supergroup"), (-777, "group")] {
            let chat = serde_json::json!({"id": id, "type": kind, "title": "Friends"});
            assert_eq!(
                in_chat(&chat),
                Some(Incoming::Group(GroupMessage {
                    chat: id,
                    lang: Language::English
                })),
                "{chat}"
            );
        }
        let other = serde_json::json!({"id": 7, "type": "private", "first_name": "Bob"});
        assert_eq!(in_chat(&other), None);
    }

    #[test]
    fn a_click_carries_its_data_and_the_card_s_chat() {
        let click = update(serde_json::json!({"update_id": 2, "callback_query": {
            "id": "cb1", "chat_instance": "ci", "data": "approve:abc",
            "from": {"id": 42, "is_bot": false, "first_name": "Ada", "language_code": "en"},
            "message": {"message_id": 3, "date": 1_795_000_000,
                "chat": {"id": 7, "type": "private", "first_name": "Ada"}, "text": "card"}}}));
        let Some(Incoming::Click(click)) = incoming(click) else {
            panic!("a click");
        };
        assert_eq!(click.clicker, "42");
        assert_eq!(click.data, "approve:abc");
        assert_eq!(click.chat, Some(7));
        assert_eq!(click.lang, Language::English);
        assert_eq!(click.id.0, "cb1");
    }
}
