//! What goes out to Telegram: text escaped and split at the limit, approval cards with
//! their buttons (remembered, so a click or a restart can find them again), cards edited
//! to their final state, typing and callback answers; all behind per-chat and global rate
//! limits, with Telegram's retry_after honoured. Errors carry no bot token.
//!
//! A request that fails on the way is tried again with backoff, never so that a message
//! could show twice: a send only when it cannot have reached Telegram (the connection was
//! refused or could not be made), an edit whenever Telegram gave no answer of its own (an
//! edit made twice shows once, and "message is not modified" means it was made).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use metnos_core::language::Language;
use metnos_kit::time::now_ms;
use metnos_proto::approval::v1 as approval;
use teloxide::payloads::{AnswerCallbackQuerySetters, EditMessageTextSetters, SendMessageSetters};
use teloxide::prelude::Requester;
use teloxide::types::{
    CallbackQueryId, ChatAction, ChatId, InlineKeyboardButton, InlineKeyboardMarkup,
    LinkPreviewOptions, MessageId, ParseMode,
};
use teloxide::{ApiError, RequestError};

use crate::error::Error;
use crate::service::CHANNEL;
use crate::store::{SentCard, Store};
use crate::telegram::TelegramBot;
use crate::text::{self, Says};

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

/// How long a message is tried again for after network failures, and the first pause
/// (doubled each time). Telegram's own "retry after" is waited out besides, up to
/// [`RETRY_AFTER_TIMES`] times of at most [`RETRY_AFTER_LONGEST`] each.
/// No message shows a link preview: Telegram's servers would fetch the first link in it
/// (a model's answer, a card's URL with its query) before the person read a word, carrying
/// whatever the link holds to its host with no card.
const NO_PREVIEW: LinkPreviewOptions = LinkPreviewOptions {
    is_disabled: true,
    url: None,
    prefer_small_media: false,
    prefer_large_media: false,
    show_above_text: false,
};

const RETRY_FOR: Duration = Duration::from_secs(15);
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const RETRY_AFTER_TIMES: u32 = 3;
const RETRY_AFTER_LONGEST: Duration = Duration::from_secs(60);

/// What became of a text sent to Telegram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Every piece went: their message ids.
    Sent(Vec<i32>),
    /// Nothing reached Telegram: it may be sent again.
    NotSent,
    /// Some pieces went (their ids), or the last may have: sending again could show it
    /// twice.
    MaybeSent(Vec<i32>),
}

/// Whether a failed request cannot have reached Telegram (so sending again is safe):
/// Telegram answered it (a refusal, a "retry after") or no connection was made.
fn cannot_have_reached(error: &RequestError) -> bool {
    match error {
        RequestError::Network(e) => e.is_connect(),
        RequestError::Api(_) | RequestError::RetryAfter(_) | RequestError::MigrateToChatId(_) => {
            true
        }
        RequestError::InvalidJson { .. } | RequestError::Io(_) => false,
    }
}

/// Which failures a request may be tried again after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Again {
    /// A send: only when it cannot have reached Telegram.
    IfNotSent,
    /// An edit (idempotent): whenever Telegram itself did not answer.
    IfNoAnswer,
}

/// How long to pause before trying `error`'s request again, if it may be.
fn pause_after(error: &RequestError, again: Again, backoff: Duration) -> Option<Duration> {
    match error {
        RequestError::RetryAfter(seconds) => {
            Some(seconds.duration()).filter(|pause| *pause <= RETRY_AFTER_LONGEST)
        }
        RequestError::Network(e) if e.is_connect() => Some(backoff),
        RequestError::Network(_) | RequestError::InvalidJson { .. } | RequestError::Io(_)
            if again == Again::IfNoAnswer =>
        {
            Some(backoff)
        }
        _ => None,
    }
}

/// Inline buttons from a card's rows.
pub fn keyboard(rows: &[approval::ButtonRow]) -> InlineKeyboardMarkup {
    InlineKeyboardMarkup::new(rows.iter().map(|row| {
        row.buttons
            .iter()
            .map(|b| InlineKeyboardButton::callback(b.text.clone(), b.data.clone()))
            .collect::<Vec<_>>()
    }))
}

/// A card's buttons as the store keeps them: JSON rows of `[text, data]`.
pub fn buttons_json(rows: &[approval::ButtonRow]) -> String {
    let rows: Vec<Vec<(&str, &str)>> = rows
        .iter()
        .map(|row| {
            row.buttons
                .iter()
                .map(|b| (b.text.as_str(), b.data.as_str()))
                .collect()
        })
        .collect();
    serde_json::to_string(&rows).unwrap_or_default()
}

/// The rows [`buttons_json`] kept (none when unreadable).
pub fn buttons_from_json(json: &str) -> Vec<approval::ButtonRow> {
    serde_json::from_str::<Vec<Vec<(String, String)>>>(json)
        .unwrap_or_default()
        .into_iter()
        .map(|row| approval::ButtonRow {
            buttons: row
                .into_iter()
                .map(|(text, data)| approval::Button { text, data })
                .collect(),
        })
        .collect()
}

/// The line that closes a card, for an approval's final status; `None` while it is
/// still pending (or the status is unknown).
pub fn outcome(status: i32, lang: Language) -> Option<String> {
    let status =
        approval::ApprovalStatus::try_from(status).unwrap_or(approval::ApprovalStatus::Unspecified);
    let (mark, said) = match status {
        approval::ApprovalStatus::Approved => ("✅", Says::Approved),
        approval::ApprovalStatus::Rejected => ("❌", Says::Rejected),
        approval::ApprovalStatus::Expired => ("⌛", Says::Expired),
        approval::ApprovalStatus::Cancelled => ("—", Says::Cancelled),
        approval::ApprovalStatus::Unspecified | approval::ApprovalStatus::Pending => return None,
    };
    Some(format!("{mark} {}", text::say(lang, said)))
}

/// A card's final text (HTML): its lines, then the outcome and when, in bold.
fn closed_card(lines: &str, outcome: &str, when: &str) -> String {
    format!(
        "{}\n\n<b>{}</b> · {when}",
        text::escape_html(lines),
        text::escape_html(outcome)
    )
}

/// Telegram's error for an edit, as the gateway reports it: NOT_FOUND when Telegram says
/// the chat or message is not found, else unavailable (either way in Telegram's words).
fn edit_error(redacted: String) -> Error {
    if redacted.contains("not found") {
        Error::TelegramNotFound(redacted)
    } else {
        Error::Telegram(redacted)
    }
}

/// Sends to Telegram, within the rate limits.
#[derive(Debug)]
pub struct Outbox {
    bot: TelegramBot,
    store: Store,
    limiter: Limiter,
}

impl Outbox {
    pub fn new(
        bot: TelegramBot,
        store: Store,
        per_chat_per_second: u32,
        global_per_second: u32,
    ) -> Outbox {
        Outbox {
            bot,
            store,
            limiter: Limiter::new(per_chat_per_second, global_per_second),
        }
    }

    /// Makes `request` within the rate limits, again (with backoff, for at most
    /// [`RETRY_FOR`]) after the failures `again` allows.
    async fn attempt<T, F, Fut>(
        &self,
        chat: i64,
        again: Again,
        request: F,
    ) -> Result<T, RequestError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, RequestError>>,
    {
        let mut until = tokio::time::Instant::now() + RETRY_FOR;
        let mut backoff = FIRST_PAUSE;
        let mut waited_out = 0;
        loop {
            self.limiter.wait(chat).await;
            let error = match request().await {
                Ok(answer) => return Ok(answer),
                Err(error) => error,
            };
            let Some(pause) = pause_after(&error, again, backoff) else {
                return Err(error);
            };
            if matches!(error, RequestError::RetryAfter(_)) {
                // Telegram's own pause: waited out (a few times), not counted against the
                // window for network failures.
                waited_out += 1;
                if waited_out > RETRY_AFTER_TIMES {
                    return Err(error);
                }
                until += pause;
            } else if tokio::time::Instant::now() + pause > until {
                return Err(error);
            } else {
                backoff = (backoff * 2).min(Duration::from_secs(8));
            }
            tracing::info!(error = %self.bot.redact(&error), retry_in_ms = pause.as_millis() as u64, "Telegram request tried again");
            tokio::time::sleep(pause).await;
        }
    }

    /// Sends text (escaped, split at the limit), honouring rate limits and retry_after;
    /// the ids of the messages that went.
    pub async fn send_text(&self, chat: i64, text: &str) -> Vec<i32> {
        match self.deliver(chat, text).await {
            Delivery::Sent(ids) | Delivery::MaybeSent(ids) => ids,
            Delivery::NotSent => Vec::new(),
        }
    }

    /// Sends text as [`Outbox::send_text`] does, saying whether what did not go may be
    /// sent again; stops at the first piece that fails.
    pub async fn deliver(&self, chat: i64, text: &str) -> Delivery {
        let mut sent = Vec::new();
        for piece in text::split_escaped(text, text::TELEGRAM_LIMIT) {
            match self.send_piece(chat, piece).await {
                Ok(id) => sent.push(id),
                Err(certainly_not) if certainly_not && sent.is_empty() => return Delivery::NotSent,
                Err(_) => return Delivery::MaybeSent(sent),
            }
        }
        Delivery::Sent(sent)
    }

    /// One message (see [`Outbox::attempt`]); on failure, whether it certainly did not
    /// reach Telegram.
    async fn send_piece(&self, chat: i64, piece: String) -> Result<i32, bool> {
        let sent = self
            .attempt(chat, Again::IfNotSent, || {
                self.bot
                    .send_message(ChatId(chat), piece.clone())
                    .parse_mode(ParseMode::Html)
                    .link_preview_options(NO_PREVIEW)
                    .into_future()
            })
            .await;
        match sent {
            Ok(message) => Ok(message.id.0),
            Err(e) => {
                tracing::warn!(error = %self.bot.redact(&e), "sendMessage failed");
                Err(cannot_have_reached(&e))
            }
        }
    }

    /// Sends `text` with inline `buttons`: a question of the conversation's own (`/forget`),
    /// not a card. The message's id, if it went.
    pub async fn send_buttons(
        &self,
        chat: i64,
        text: &str,
        buttons: &[approval::ButtonRow],
    ) -> Option<i32> {
        let sent = self
            .send_with_buttons(chat, text::escape_html(text), keyboard(buttons))
            .await;
        match sent {
            Ok(message) => Some(message.id.0),
            Err(e) => {
                tracing::warn!(error = %self.bot.redact(&e), "cannot send a question with buttons");
                None
            }
        }
    }

    /// Sends `html` with inline `buttons`, tried again only when it cannot have gone.
    async fn send_with_buttons(
        &self,
        chat: i64,
        html: String,
        buttons: InlineKeyboardMarkup,
    ) -> Result<teloxide::types::Message, RequestError> {
        self.attempt(chat, Again::IfNotSent, || {
            self.bot
                .send_message(ChatId(chat), html.clone())
                .parse_mode(ParseMode::Html)
                .link_preview_options(NO_PREVIEW)
                .reply_markup(buttons.clone())
                .into_future()
        })
        .await
    }

    /// Sends an approval card with its buttons and remembers where it went.
    pub async fn send_card(&self, chat: i64, token: &str, card: &approval::Card) -> Option<i32> {
        let html = if card.telegram_html.is_empty() {
            text::escape_html(&card.lines.join("\n"))
        } else {
            card.telegram_html.clone()
        };
        let sent = self
            .send_with_buttons(chat, html.clone(), keyboard(&card.buttons))
            .await;
        let message = match sent {
            Ok(message) => message,
            Err(e) => {
                tracing::warn!(error = %self.bot.redact(&e), "cannot send the approval card");
                return None;
            }
        };
        let sent = SentCard {
            token: token.to_owned(),
            channel: CHANNEL.to_owned(),
            chat_id: chat.to_string(),
            message_id: message.id.0.to_string(),
            lines: card.lines.join("\n"),
            html,
            buttons: buttons_json(&card.buttons),
            // The turn's trace, which the click answering the card joins.
            traceparent: metnos_kit::propagation::current_traceparent(),
        };
        if let Err(e) = self.store.put_card(&sent, now_ms()).await {
            tracing::error!(error = %e, "cannot remember a sent card");
        }
        Some(message.id.0)
    }

    /// Edits a sent message's text and buttons (GatewayService.EditCard).
    pub async fn edit(
        &self,
        chat: i64,
        message: i32,
        html: String,
        buttons: Option<InlineKeyboardMarkup>,
    ) -> Result<(), Error> {
        self.edit_retrying(chat, message, html, buttons, Again::IfNoAnswer)
            .await
    }

    /// Edits a message, tried again after the failures `again` allows.
    async fn edit_retrying(
        &self,
        chat: i64,
        message: i32,
        html: String,
        buttons: Option<InlineKeyboardMarkup>,
        again: Again,
    ) -> Result<(), Error> {
        let edited = self
            .attempt(chat, again, || {
                let mut request = self
                    .bot
                    .edit_message_text(ChatId(chat), MessageId(message), html.clone())
                    .parse_mode(ParseMode::Html)
                    .link_preview_options(NO_PREVIEW);
                if let Some(buttons) = &buttons {
                    request = request.reply_markup(buttons.clone());
                }
                request.into_future()
            })
            .await;
        match edited {
            Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
            Err(e) => Err(edit_error(self.bot.redact(&e))),
        }
    }

    /// Edits a card to its final state: its lines, the `outcome` and when, no buttons.
    /// False when Telegram refused the edit (it may be tried again); a card whose ids
    /// are not numbers is left as it is.
    pub async fn close_card(&self, card: &SentCard, outcome: &str) -> bool {
        let when = jiff::Timestamp::now()
            .strftime("%Y-%m-%d %H:%M UTC")
            .to_string();
        let body = closed_card(&card.lines, outcome, &when);
        let (Ok(chat), Ok(message)) = (card.chat_id.parse::<i64>(), card.message_id.parse::<i32>())
        else {
            return true;
        };
        // Without reply_markup the buttons go: an old card cannot be clicked again.
        let edited = self
            .attempt(chat, Again::IfNoAnswer, || {
                self.bot
                    .edit_message_text(ChatId(chat), MessageId(message), body.clone())
                    .parse_mode(ParseMode::Html)
                    .link_preview_options(NO_PREVIEW)
                    .into_future()
            })
            .await;
        match edited {
            Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => {
                if let Err(e) = self.store.mark_closed(&card.token, now_ms()).await {
                    tracing::warn!(error = %e, "card closed but not noted; the sweep will look again");
                }
                true
            }
            // Telegram refused the edit for good (the message was deleted, the chat blocked
            // the bot): nothing is left to close, and the sweep must not come back for it.
            Err(e @ RequestError::Api(_)) => {
                tracing::warn!(error = %self.bot.redact(&e), "the card cannot be edited any more");
                if let Err(e) = self.store.mark_closed(&card.token, now_ms()).await {
                    tracing::warn!(error = %e, "cannot note the card as closed");
                }
                true
            }
            Err(e) => {
                tracing::warn!(error = %self.bot.redact(&e), "cannot edit the card");
                false
            }
        }
    }

    /// Shows a card again as it was sent, `extra` (HTML) below its lines and `buttons`
    /// instead of its own when given (the "always" confirmation), or exactly as sent.
    pub async fn show_card(
        &self,
        card: &SentCard,
        extra: Option<&str>,
        buttons: Option<&[approval::ButtonRow]>,
    ) -> Result<(), Error> {
        let (Ok(chat), Ok(message)) = (card.chat_id.parse::<i64>(), card.message_id.parse::<i32>())
        else {
            return Err(Error::TelegramNotFound("the card's message".to_owned()));
        };
        let html = if card.html.is_empty() {
            text::escape_html(&card.lines)
        } else {
            card.html.clone()
        };
        let html = match extra {
            Some(extra) => format!("{html}\n\n{extra}"),
            None => html,
        };
        let own = buttons_from_json(&card.buttons);
        let rows = buttons.unwrap_or(&own);
        // Tried again only when the edit cannot have been made: one made late could put the
        // buttons back on a card closed meanwhile.
        self.edit_retrying(chat, message, html, Some(keyboard(rows)), Again::IfNotSent)
            .await
    }

    /// Shows "typing…" in `chat`.
    pub async fn typing(&self, chat: i64) {
        let _ = self
            .bot
            .send_chat_action(ChatId(chat), ChatAction::Typing)
            .await;
    }

    /// Answers a click (Telegram shows the text briefly, cut to 190 characters).
    pub async fn answer_callback(&self, id: &CallbackQueryId, text: Option<&str>) {
        let mut request = self.bot.answer_callback_query(id.clone());
        if let Some(text) = text {
            request = request.text(text.chars().take(190).collect::<String>());
        }
        if let Err(e) = request.await {
            tracing::warn!(error = %self.bot.redact(&e), "answerCallbackQuery failed");
        }
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
    fn a_card_closes_only_on_a_final_status_in_the_person_s_language() {
        let status = |s: approval::ApprovalStatus| s as i32;
        assert_eq!(
            outcome(
                status(approval::ApprovalStatus::Approved),
                Language::English
            )
            .as_deref(),
            Some("✅ approved")
        );
        assert_eq!(
            outcome(
                status(approval::ApprovalStatus::Rejected),
                Language::Italian
            )
            .as_deref(),
            Some("❌ rifiutato")
        );
        assert_eq!(
            outcome(
                status(approval::ApprovalStatus::Cancelled),
                Language::English
            )
            .as_deref(),
            Some("— cancelled")
        );
        assert_eq!(
            outcome(status(approval::ApprovalStatus::Pending), Language::English),
            None
        );
        assert_eq!(outcome(99, Language::English), None);
    }

    #[test]
    fn a_closed_card_keeps_its_lines_escaped_and_says_the_outcome_in_bold() {
        assert_eq!(
            closed_card(
                "write <x>\nto ~/a & b",
                "✅ approved",
                "2030-01-02 03:04 UTC"
            ),
            "write &lt;x&gt;\nto ~/a &amp; b\n\n<b>✅ approved</b> · 2030-01-02 03:04 UTC"
        );
    }

    #[test]
    fn only_an_edit_is_tried_again_after_a_failure_telegram_may_have_acted_on() {
        let garbled = || RequestError::InvalidJson {
            source: std::sync::Arc::new(serde_json::from_str::<u8>("<html>").unwrap_err()),
            raw: "<html>502 Bad Gateway</html>".into(),
        };
        let backoff = Duration::from_millis(500);
        // No answer of Telegram's own (a proxy's error page): the send may have gone, the
        // edit can be made again.
        assert_eq!(pause_after(&garbled(), Again::IfNotSent, backoff), None);
        assert_eq!(
            pause_after(&garbled(), Again::IfNoAnswer, backoff),
            Some(backoff)
        );
        // Telegram asks to wait: either, after its pause.
        let wait = RequestError::RetryAfter(teloxide::types::Seconds::from_seconds(3));
        for again in [Again::IfNotSent, Again::IfNoAnswer] {
            assert_eq!(
                pause_after(&wait, again, backoff),
                Some(Duration::from_secs(3))
            );
        }
        // Telegram's own refusal is final.
        let refused = RequestError::Api(ApiError::MessageNotModified);
        assert_eq!(pause_after(&refused, Again::IfNoAnswer, backoff), None);
        // A pause longer than a minute is not waited out.
        let long = RequestError::RetryAfter(teloxide::types::Seconds::from_seconds(120));
        assert_eq!(pause_after(&long, Again::IfNotSent, backoff), None);
        // Sent again only when it cannot have gone.
        assert!(cannot_have_reached(&refused) && cannot_have_reached(&long));
        assert!(!cannot_have_reached(&garbled()));
    }

    #[test]
    fn an_edit_telegram_cannot_find_is_not_found_and_other_failures_are_not() {
        assert!(matches!(
            edit_error("A Telegram's error: Bad Request: message to edit not found".into()),
            Error::TelegramNotFound(_)
        ));
        assert!(matches!(
            edit_error("A network error: connection refused".into()),
            Error::Telegram(_)
        ));
    }
}
