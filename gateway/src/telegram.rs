//! The bot: teloxide's `Bot` with its token kept out of every log line, trace and error.
//! The outbox speaks through it and the transport reads updates with it; it knows
//! neither.

use std::sync::Arc;

use teloxide::Bot;

/// Replaces every occurrence of the token in `text`.
pub fn redact(text: &str, token: &str) -> String {
    if token.is_empty() {
        text.to_owned()
    } else {
        text.replace(token, "***")
    }
}

/// The teloxide bot (`Deref`s to it), printed as `***`: teloxide's own `Debug` would show
/// the token. [`TelegramBot::redact`] cuts the token out of an error's text.
#[derive(Clone)]
pub struct TelegramBot {
    bot: Bot,
    token: Arc<str>,
}

impl std::fmt::Debug for TelegramBot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TelegramBot(***)")
    }
}

impl std::ops::Deref for TelegramBot {
    type Target = Bot;

    fn deref(&self) -> &Bot {
        &self.bot
    }
}

impl TelegramBot {
    /// The bot for `token`, reaching Telegram through `client` at `api`.
    pub fn new(token: String, client: reqwest::Client, api: reqwest::Url) -> TelegramBot {
        TelegramBot {
            bot: Bot::with_client(token.clone(), client).set_api_url(api),
            token: token.into(),
        }
    }

    /// `error`'s text without the token.
    pub fn redact(&self, error: &impl std::fmt::Display) -> String {
        redact(&error.to_string(), &self.token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_redacted_wherever_it_appears() {
        assert_eq!(
            redact("GET /bot1:abc/getMe failed for 1:abc", "1:abc"),
            "GET /bot***/getMe failed for ***"
        );
        assert_eq!(redact("nothing here", ""), "nothing here");
        let bot = TelegramBot {
            bot: Bot::new("1:abc"),
            token: "1:abc".into(),
        };
        assert!(!format!("{bot:?}").contains("1:abc"));
        assert_eq!(bot.redact(&"bad 1:abc"), "bad ***");
    }
}
