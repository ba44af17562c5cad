//! The Telegram channel: long polling (offset persisted, so after a restart no update is
//! handled twice and none is lost), callbacks dispatched before the pairing check (seed
//! approval_ux.md §7.3), pairing codes for strangers, turns for paired people with their
//! cards and answers, the stop clause, outgoing rate limits, and backoff that honours
//! Telegram's retry_after. The bot token never reaches a log line or an error.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metnos_kit::client::TracedChannel;
use metnos_kit::time::now_ms;
use metnos_proto::approval::v1 as approval;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::common::v1 as common;
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
use metnos_proto::planner::v1::turn_event::Event;
use teloxide::payloads::{
    AnswerCallbackQuerySetters, EditMessageTextSetters, GetUpdatesSetters, SendMessageSetters,
    SetWebhookSetters,
};
use teloxide::prelude::Requester;
use teloxide::types::{
    AllowedUpdate, ChatAction, ChatId, InlineKeyboardButton, InlineKeyboardMarkup, MessageId,
    ParseMode, Update, UpdateKind,
};
use teloxide::{ApiError, Bot, RequestError};

use crate::store::{CodeRequest, SentCard, Store};
use crate::text::{self, Says, Stop};
use metnos_core::language::Language;

pub const CHANNEL: &str = "telegram";

/// Replaces every occurrence of the token in `text`.
pub fn redact(text: &str, token: &str) -> String {
    if token.is_empty() {
        text.to_owned()
    } else {
        text.replace(token, "***")
    }
}

/// Outgoing rate limits: per chat and overall (on tokio's clock).
#[derive(Debug)]
struct Limiter {
    per_chat: Duration,
    global: Duration,
    state: tokio::sync::Mutex<(
        HashMap<i64, tokio::time::Instant>,
        Option<tokio::time::Instant>,
    )>,
}

impl Limiter {
    fn new(per_chat_per_second: u32, global_per_second: u32) -> Limiter {
        Limiter {
            per_chat: Duration::from_secs(1) / per_chat_per_second.max(1),
            global: Duration::from_secs(1) / global_per_second.max(1),
            state: tokio::sync::Mutex::new((HashMap::new(), None)),
        }
    }

    /// Waits until a message to `chat` may go.
    async fn wait(&self, chat: i64) {
        let mut state = self.state.lock().await;
        let now = tokio::time::Instant::now();
        let chat_ready = state.0.get(&chat).map_or(now, |last| *last + self.per_chat);
        let global_ready = state.1.map_or(now, |last| last + self.global);
        let at = chat_ready.max(global_ready).max(now);
        state.0.insert(chat, at);
        state.1 = Some(at);
        drop(state);
        tokio::time::sleep_until(at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn messages_to_one_chat_are_spaced_and_others_only_by_the_global_limit() {
        let limiter = Limiter::new(1, 10);
        let start = tokio::time::Instant::now();
        for _ in 0..3 {
            limiter.wait(1).await;
        }
        // Three to one chat at one per second: the third goes two seconds after the first.
        assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(2));
        let start = tokio::time::Instant::now();
        for chat in 10..15 {
            limiter.wait(chat).await;
        }
        // Five different chats: only the global 10/s spacing.
        assert_eq!(
            tokio::time::Instant::now() - start,
            Duration::from_millis(500)
        );
    }

    #[test]
    fn the_token_is_redacted_wherever_it_appears() {
        assert_eq!(
            redact("GET /bot1:abc/getMe failed for 1:abc", "1:abc"),
            "GET /bot***/getMe failed for ***"
        );
        assert_eq!(redact("nothing here", ""), "nothing here");
    }
}

/// The channel.
pub struct Telegram {
    bot: Bot,
    token: String,
    store: Store,
    planner: PlannerServiceClient<TracedChannel>,
    approval: ApprovalServiceClient<TracedChannel>,
    /// Approval tokens whose turn stream is being followed here.
    live: Mutex<HashSet<String>>,
    /// People asked whether to stop.
    asked_to_stop: Mutex<HashSet<String>>,
    /// Turns followed here, per sender.
    busy: Mutex<HashMap<String, usize>>,
    /// Cards already edited to their outcome (the click and the turn's event both report
    /// it; Telegram is asked once).
    closed: Mutex<HashSet<String>>,
    limiter: Limiter,
    poll_timeout: u32,
}

impl std::fmt::Debug for Telegram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telegram")
            .field("token", &"***")
            .finish_non_exhaustive()
    }
}

fn principal(sender_id: &str) -> common::Principal {
    common::Principal {
        channel: CHANNEL.to_owned(),
        sender_id: sender_id.to_owned(),
    }
}

/// Settings of the channel.
#[derive(Debug, Clone)]
pub struct Settings {
    pub api_url: String,
    pub poll_timeout_seconds: u32,
    pub per_chat_per_second: u32,
    pub global_per_second: u32,
}

impl Telegram {
    pub fn new(
        token: String,
        settings: &Settings,
        store: Store,
        planner: PlannerServiceClient<TracedChannel>,
        approval: ApprovalServiceClient<TracedChannel>,
    ) -> Result<Telegram, String> {
        let api = reqwest::Url::parse(&settings.api_url)
            .map_err(|e| format!("telegram.api_url is not a URL: {e}"))?;
        // Long polls outlast teloxide's default 17 s client timeout.
        let client = teloxide::net::default_reqwest_settings()
            .timeout(Duration::from_secs(
                u64::from(settings.poll_timeout_seconds) + 15,
            ))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        let bot = Bot::with_client(token.clone(), client).set_api_url(api);
        Ok(Telegram {
            bot,
            token,
            store,
            planner,
            approval,
            live: Mutex::new(HashSet::new()),
            asked_to_stop: Mutex::new(HashSet::new()),
            busy: Mutex::new(HashMap::new()),
            closed: Mutex::new(HashSet::new()),
            limiter: Limiter::new(settings.per_chat_per_second, settings.global_per_second),
            poll_timeout: settings.poll_timeout_seconds,
        })
    }

    fn redacted(&self, error: &impl std::fmt::Display) -> String {
        redact(&error.to_string(), &self.token)
    }

    /// Long-polls until `shutdown`.
    pub async fn poll(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut offset: i32 = match self.store.setting("telegram.offset").await {
            Ok(value) => value.and_then(|v| v.parse().ok()).unwrap_or(0),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the Telegram offset; starting from the oldest kept update");
                0
            }
        };
        // getUpdates is refused while a webhook is set (e.g. by an earlier webhook run).
        if let Err(e) = self.bot.delete_webhook().await {
            tracing::warn!(error = %self.redacted(&e), "deleteWebhook failed");
        }
        let mut backoff = Duration::from_secs(1);
        loop {
            let request = self
                .bot
                .get_updates()
                .offset(offset)
                .timeout(self.poll_timeout)
                .allowed_updates(vec![AllowedUpdate::Message, AllowedUpdate::CallbackQuery]);
            let updates = tokio::select! {
                () = &mut shutdown => return,
                result = request => result,
            };
            match updates {
                Ok(updates) => {
                    backoff = Duration::from_secs(1);
                    for update in updates {
                        let id = i64::from(update.id.0);
                        offset = offset.max(i32::try_from(id + 1).unwrap_or(i32::MAX));
                        self.handle_once(update).await;
                    }
                }
                Err(RequestError::RetryAfter(seconds)) => {
                    let wait = seconds.duration();
                    tracing::warn!(seconds = wait.as_secs(), "Telegram asks to slow down");
                    tokio::select! { () = &mut shutdown => return, () = tokio::time::sleep(wait) => {} }
                }
                Err(e) => {
                    tracing::warn!(error = %self.redacted(&e), retry_in_s = backoff.as_secs(), "Telegram polling failed");
                    tokio::select! { () = &mut shutdown => return, () = tokio::time::sleep(backoff) => {} }
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    /// Handles an update unless it was handled already, then records it.
    async fn handle_once(self: &Arc<Self>, update: Update) {
        let id = i64::from(update.id.0);
        if self.store.handled(id).await.unwrap_or(false) {
            return;
        }
        Arc::clone(self).handle(update).await;
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
    ) -> Result<(), String> {
        let url = reqwest::Url::parse(&url).map_err(|e| format!("telegram.webhook_url: {e}"))?;
        let secret = crate::pairing::new_secret();
        let mut backoff = Duration::from_secs(1);
        loop {
            match self
                .bot
                .set_webhook(url.clone())
                .secret_token(secret.clone())
                .allowed_updates(vec![AllowedUpdate::Message, AllowedUpdate::CallbackQuery])
                .await
            {
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %self.redacted(&e), retry_in_s = backoff.as_secs(), "setWebhook failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
        tracing::info!(addr = ?listener.local_addr().ok(), "Telegram webhook registered");
        tokio::pin!(shutdown);
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
            let secret = secret.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let this = Arc::clone(&this);
                    let secret = secret.clone();
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

    async fn on_post(
        self: Arc<Self>,
        request: hyper::Request<hyper::body::Incoming>,
        secret: &str,
    ) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
        use http_body_util::BodyExt;
        let status = |code: u16| {
            hyper::Response::builder()
                .status(code)
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap_or_default()
        };
        if request.method() != hyper::Method::POST {
            return status(405);
        }
        let given = request
            .headers()
            .get("x-telegram-bot-api-secret-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if given.len() != secret.len()
            || !given
                .bytes()
                .zip(secret.bytes())
                .fold(true, |ok, (a, b)| ok & (a == b))
        {
            tracing::warn!("webhook POST without the right secret token refused");
            return status(401);
        }
        let body = match http_body_util::Limited::new(request.into_body(), 4 * 1024 * 1024)
            .collect()
            .await
        {
            Ok(body) => body.to_bytes(),
            Err(_) => return status(413),
        };
        match serde_json::from_slice::<Update>(&body) {
            Ok(update) => {
                // Answer Telegram at once; the update is handled (once) in the background.
                tokio::spawn(async move { self.handle_once(update).await });
                status(200)
            }
            Err(e) => {
                tracing::warn!(error = %e, "webhook body is not an update");
                status(400)
            }
        }
    }

    /// One update.
    pub async fn handle(self: Arc<Self>, update: Update) {
        match update.kind {
            // Callbacks first: resolving an approval checks the clicker's identity more
            // strictly than pairing would.
            UpdateKind::CallbackQuery(query) => self.on_callback(query).await,
            UpdateKind::Message(message) => {
                let (Some(from), Some(text)) = (message.from.as_ref(), message.text()) else {
                    return;
                };
                let sender = from.id.0.to_string();
                let lang = Language::from_tag(from.language_code.as_deref().unwrap_or("it"));
                let name = match &from.username {
                    Some(username) => format!("{} (@{username})", from.first_name),
                    None => from.first_name.clone(),
                };
                self.on_message(message.chat.id.0, &sender, &name, lang, text)
                    .await;
            }
            _ => {}
        }
    }

    async fn on_message(
        self: Arc<Self>,
        chat: i64,
        sender: &str,
        name: &str,
        lang: Language,
        text: &str,
    ) {
        let pairing = match self.store.pairing(CHANNEL, sender).await {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "pairing store unavailable");
                self.send_text(chat, &text::say(lang, Says::Unavailable("il mio archivio")))
                    .await;
                return;
            }
        };
        let Some(pairing) = pairing else {
            let code = crate::pairing::new_code();
            let chat_id = chat.to_string();
            let stranger = crate::store::Stranger {
                channel: CHANNEL,
                sender_id: sender,
                chat_id: &chat_id,
                display_name: name,
                language: lang.code(),
            };
            match self.store.request_code(&stranger, &code, now_ms()).await {
                Ok(CodeRequest::New(code)) => {
                    tracing::info!(sender, "pairing code issued to an unpaired sender");
                    self.send_text(chat, &text::say(lang, Says::PairingCode(&code)))
                        .await;
                }
                Ok(CodeRequest::AlreadyIssued) => {}
                Err(e) => tracing::error!(error = %e, "cannot issue a pairing code"),
            }
            return;
        };
        let lang = pairing.language();
        let who = principal(sender);
        let asked = self
            .asked_to_stop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(sender);
        if asked {
            if text::is_yes(text) {
                self.stop(chat, &who, lang).await;
            } else {
                self.send_text(chat, &text::say(lang, Says::GoingOn)).await;
            }
            return;
        }
        match text::stop_of(text) {
            Stop::Clear => {
                self.stop(chat, &who, lang).await;
                return;
            }
            Stop::Ambiguous if self.has_turn(&who).await => {
                self.asked_to_stop
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(sender.to_owned());
                self.send_text(chat, &text::say(lang, Says::ConfirmStop))
                    .await;
                return;
            }
            _ => {}
        }
        let request = pb::RunTurnRequest {
            principal: Some(who),
            level: pairing.autonomy().to_wire(),
            query: text.to_owned(),
            language: lang.to_wire(),
            mode: pb::Mode::Unspecified as i32,
        };
        match self.planner.clone().run_turn(request).await {
            Ok(stream) => {
                let this = Arc::clone(&self);
                let sender = sender.to_owned();
                tokio::spawn(
                    async move { this.follow(stream.into_inner(), chat, &sender, lang).await },
                );
            }
            Err(status) => {
                tracing::warn!(code = ?status.code(), message = %status.message(), "planner unavailable");
                self.send_text(
                    chat,
                    &text::say(lang, Says::Unavailable(planner_name(lang))),
                )
                .await;
            }
        }
    }

    async fn has_turn(&self, who: &common::Principal) -> bool {
        self.busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&who.sender_id)
            .is_some_and(|n| *n > 0)
    }

    async fn stop(&self, chat: i64, who: &common::Principal, lang: Language) {
        let request = pb::CancelTurnRequest {
            target: Some(pb::cancel_turn_request::Target::Principal(who.clone())),
            reason: "stop from Telegram".to_owned(),
        };
        let said = match self.planner.clone().cancel_turn(request).await {
            Ok(r) if r.get_ref().cancelled => Says::Stopped,
            Ok(_) => Says::NothingToStop,
            Err(status) if status.code() == tonic::Code::NotFound => Says::NothingToStop,
            Err(_) => Says::Unavailable(planner_name(lang)),
        };
        self.send_text(chat, &text::say(lang, said)).await;
    }

    async fn on_callback(self: Arc<Self>, query: teloxide::types::CallbackQuery) {
        let clicker = query.from.id.0.to_string();
        let lang = Language::from_tag(query.from.language_code.as_deref().unwrap_or("it"));
        let data = query.data.clone().unwrap_or_default();
        let parsed = text::parse_callback(&data);
        let (token, decision) = match parsed {
            Ok(text::CallbackData::Approve(t)) => (t, approval::Decision::Approve),
            Ok(text::CallbackData::Reject(t)) => (t, approval::Decision::Reject),
            Err(why) => {
                tracing::warn!(data = %data.chars().take(80).collect::<String>(), why, "callback not understood");
                self.answer_callback(&query.id, Some(why)).await;
                return;
            }
        };
        let request = approval::ResolveRequest {
            token: token.clone(),
            decision: decision as i32,
            decider: Some(principal(&clicker)),
        };
        match self.approval.clone().resolve(request).await {
            Ok(response) => {
                self.answer_callback(&query.id, None).await;
                let status = response.into_inner().approval.map_or(0, |a| a.status);
                self.finish_card(&token, status, lang).await;
                let live = self
                    .live
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&token);
                if !live {
                    // The turn's stream is not followed here (a restart, another replica):
                    // continue it.
                    self.resume(token, clicker, lang).await;
                }
            }
            Err(status) => {
                let why = status.message().to_owned();
                tracing::info!(clicker, reason = %why, "approval not resolved");
                self.answer_callback(&query.id, Some(&text::say(lang, Says::CannotResolve(&why))))
                    .await;
                if let Some(message) = &query.message {
                    self.send_text(
                        message.chat().id.0,
                        &text::say(lang, Says::CannotResolve(&why)),
                    )
                    .await;
                }
            }
        }
    }

    async fn resume(self: &Arc<Self>, token: String, sender: String, lang: Language) {
        let Ok(Some(card)) = self.store.card(&token).await else {
            return;
        };
        let Ok(chat) = card.chat_id.parse::<i64>() else {
            return;
        };
        let request = pb::ResumeTurnRequest {
            target: Some(pb::resume_turn_request::Target::ApprovalToken(token)),
        };
        match self.planner.clone().resume_turn(request).await {
            Ok(stream) => {
                let this = Arc::clone(self);
                tokio::spawn(
                    async move { this.follow(stream.into_inner(), chat, &sender, lang).await },
                );
            }
            // Someone else continues it (or it already ended): nothing to do here.
            Err(status) if status.code() == tonic::Code::FailedPrecondition => {}
            Err(status) => {
                tracing::warn!(code = ?status.code(), message = %status.message(), "cannot resume the turn")
            }
        }
    }

    async fn answer_callback(&self, id: &teloxide::types::CallbackQueryId, text: Option<&str>) {
        let mut request = self.bot.answer_callback_query(id.clone());
        if let Some(text) = text {
            request = request.text(text.chars().take(190).collect::<String>());
        }
        if let Err(e) = request.await {
            tracing::warn!(error = %self.redacted(&e), "answerCallbackQuery failed");
        }
    }

    /// Edits a card to its final state: its lines, the outcome and when, no buttons.
    async fn finish_card(&self, token: &str, status: i32, lang: Language) {
        let Ok(Some(card)) = self.store.card(token).await else {
            return;
        };
        let outcome = match approval::ApprovalStatus::try_from(status)
            .unwrap_or(approval::ApprovalStatus::Unspecified)
        {
            approval::ApprovalStatus::Approved => format!("✅ {}", text::say(lang, Says::Approved)),
            approval::ApprovalStatus::Rejected => format!("❌ {}", text::say(lang, Says::Rejected)),
            approval::ApprovalStatus::Expired => format!("⌛ {}", text::say(lang, Says::Expired)),
            approval::ApprovalStatus::Cancelled => {
                format!("— {}", text::say(lang, Says::Cancelled))
            }
            _ => return,
        };
        // Claimed before the edit, so a click and the turn's event cannot both edit.
        if !self
            .closed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token.to_owned())
        {
            return;
        }
        let when = jiff::Timestamp::now()
            .strftime("%Y-%m-%d %H:%M UTC")
            .to_string();
        let body = format!(
            "{}\n\n<b>{}</b> · {when}",
            text::escape_html(&card.lines),
            text::escape_html(&outcome)
        );
        let (Ok(chat), Ok(message)) = (card.chat_id.parse::<i64>(), card.message_id.parse::<i32>())
        else {
            return;
        };
        self.limiter.wait(chat).await;
        // Without reply_markup the buttons go: an old card cannot be clicked again.
        match self
            .bot
            .edit_message_text(ChatId(chat), MessageId(message), body)
            .parse_mode(ParseMode::Html)
            .await
        {
            Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => {}
            Err(e) => {
                tracing::warn!(error = %self.redacted(&e), "cannot edit the card");
                self.closed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(token);
            }
        }
    }

    /// Follows a turn's events: typing, cards, the answer.
    async fn follow<T>(
        self: Arc<Self>,
        mut stream: tonic::Streaming<T>,
        chat: i64,
        sender: &str,
        lang: Language,
    ) where
        T: TurnMessage,
    {
        *self
            .busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(sender.to_owned())
            .or_insert(0) += 1;
        let mut last_typing = Instant::now() - Duration::from_secs(10);
        let mut tokens = Vec::new();
        loop {
            let message = match stream.message().await {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(status) => {
                    tracing::warn!(code = ?status.code(), message = %status.message(), "turn stream broke");
                    self.send_text(
                        chat,
                        &text::say(lang, Says::Unavailable(planner_name(lang))),
                    )
                    .await;
                    break;
                }
            };
            let Some(event) = message.event() else {
                continue;
            };
            match event {
                Event::Started(_) | Event::StepProposed(_)
                    if last_typing.elapsed() > Duration::from_secs(4) =>
                {
                    last_typing = Instant::now();
                    let _ = self
                        .bot
                        .send_chat_action(ChatId(chat), ChatAction::Typing)
                        .await;
                }
                Event::AwaitingApproval(waiting) => {
                    self.live
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(waiting.token.clone());
                    tokens.push(waiting.token.clone());
                    if let Some(card) = waiting.card {
                        self.send_card(chat, &waiting.token, &card).await;
                    }
                }
                Event::ApprovalDecided(decided) => {
                    self.finish_card(&decided.token, decided.status, lang).await;
                }
                Event::Finished(finished) => {
                    let kind =
                        pb::FinalKind::try_from(finished.kind).unwrap_or(pb::FinalKind::Error);
                    let text = if kind == pb::FinalKind::Answer {
                        finished.text
                    } else {
                        let name = kind
                            .as_str_name()
                            .trim_start_matches("FINAL_KIND_")
                            .to_lowercase();
                        format!(
                            "{} {}",
                            text::say(lang, Says::TurnEnded(&name)),
                            finished.text
                        )
                    };
                    self.send_text(chat, &text).await;
                    break;
                }
                _ => {}
            }
        }
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        for token in tokens {
            live.remove(&token);
        }
        drop(live);
        if let Some(n) = self
            .busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(sender)
        {
            *n = n.saturating_sub(1);
        }
    }

    /// Sends text (escaped, split at the limit), honouring rate limits and retry_after.
    pub async fn send_text(&self, chat: i64, text: &str) -> Vec<i32> {
        let mut sent = Vec::new();
        for piece in text::split_escaped(text, text::TELEGRAM_LIMIT) {
            for attempt in 0..3 {
                self.limiter.wait(chat).await;
                match self
                    .bot
                    .send_message(ChatId(chat), piece.clone())
                    .parse_mode(ParseMode::Html)
                    .await
                {
                    Ok(message) => {
                        sent.push(message.id.0);
                        break;
                    }
                    Err(RequestError::RetryAfter(seconds)) if attempt < 2 => {
                        tokio::time::sleep(seconds.duration()).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %self.redacted(&e), "sendMessage failed");
                        break;
                    }
                }
            }
        }
        sent
    }

    /// Sends an approval card with its buttons and remembers where it went.
    pub async fn send_card(&self, chat: i64, token: &str, card: &approval::Card) -> Option<i32> {
        let keyboard = InlineKeyboardMarkup::new(card.buttons.iter().map(|row| {
            row.buttons
                .iter()
                .map(|b| InlineKeyboardButton::callback(b.text.clone(), b.data.clone()))
                .collect::<Vec<_>>()
        }));
        let html = if card.telegram_html.is_empty() {
            text::escape_html(&card.lines.join("\n"))
        } else {
            card.telegram_html.clone()
        };
        self.limiter.wait(chat).await;
        match self
            .bot
            .send_message(ChatId(chat), html)
            .parse_mode(ParseMode::Html)
            .reply_markup(keyboard)
            .await
        {
            Ok(message) => {
                let sent = SentCard {
                    token: token.to_owned(),
                    channel: CHANNEL.to_owned(),
                    chat_id: chat.to_string(),
                    message_id: message.id.0.to_string(),
                    lines: card.lines.join("\n"),
                };
                if let Err(e) = self.store.put_card(&sent, now_ms()).await {
                    tracing::error!(error = %e, "cannot remember a sent card");
                }
                Some(message.id.0)
            }
            Err(e) => {
                tracing::warn!(error = %self.redacted(&e), "cannot send the approval card");
                None
            }
        }
    }

    /// Edits a sent message's text and buttons (GatewayService.EditCard).
    pub async fn edit(
        &self,
        chat: i64,
        message: i32,
        html: String,
        buttons: Option<InlineKeyboardMarkup>,
    ) -> Result<(), String> {
        self.limiter.wait(chat).await;
        let mut request = self
            .bot
            .edit_message_text(ChatId(chat), MessageId(message), html)
            .parse_mode(ParseMode::Html);
        if let Some(buttons) = buttons {
            request = request.reply_markup(buttons);
        }
        match request.await {
            Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
            Err(e) => Err(self.redacted(&e)),
        }
    }
}

fn planner_name(lang: Language) -> &'static str {
    match lang {
        Language::Italian => "il pianificatore",
        Language::English => "the planner",
    }
}

/// RunTurn and ResumeTurn responses alike.
pub trait TurnMessage: Send + 'static {
    fn event(self) -> Option<Event>;
}

impl TurnMessage for pb::RunTurnResponse {
    fn event(self) -> Option<Event> {
        self.event.and_then(|e| e.event)
    }
}

impl TurnMessage for pb::ResumeTurnResponse {
    fn event(self) -> Option<Event> {
        self.event.and_then(|e| e.event)
    }
}
