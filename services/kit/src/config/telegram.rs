//! `[telegram]`: the Telegram channel of the gateway.

use std::net::SocketAddr;
use std::num::NonZero;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The Telegram channel of the gateway. The bot token is never a config key: it comes
/// from the `METNOS_TELEGRAM_TOKEN` environment variable or from `token_file`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelegramConfig {
    /// A file holding the bot token (e.g. a Docker or Kubernetes secret). Empty: only
    /// the environment variable.
    pub token_file: PathBuf,
    /// The Bot API server.
    pub api_url: String,
    /// `polling` (long polling, the default) or `webhook`.
    pub mode: TelegramMode,
    /// Long-polling timeout.
    pub poll_timeout_seconds: NonZero<u32>,
    /// Webhook mode: where the gateway listens for Telegram's POSTs.
    pub webhook_listen: SocketAddr,
    /// Webhook mode: the public HTTPS URL Telegram posts to (registered at start).
    pub webhook_url: String,
    /// Messages per second sent to one chat, and to all chats (Telegram's limits are 1 and 30).
    pub per_chat_per_second: NonZero<u32>,
    pub global_per_second: NonZero<u32>,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        TelegramConfig {
            token_file: PathBuf::new(),
            api_url: "https://api.telegram.org".to_owned(),
            mode: TelegramMode::Polling,
            poll_timeout_seconds: const { NonZero::new(25).unwrap() },
            webhook_listen: SocketAddr::from(([127, 0, 0, 1], 8443)),
            webhook_url: String::new(),
            per_chat_per_second: const { NonZero::new(1).unwrap() },
            global_per_second: const { NonZero::new(30).unwrap() },
        }
    }
}

/// How updates arrive from Telegram.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum TelegramMode {
    #[default]
    Polling,
    Webhook,
}
