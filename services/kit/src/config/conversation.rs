//! `[conversation]`: each person's thread on a channel (issue 40) — how much of it a turn
//! sees, and when silence starts a new one.

use std::num::NonZero;

use serde::{Deserialize, Serialize};

/// The conversation a turn sees.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ConversationConfig {
    /// How many tokens of earlier exchanges (messages and answers, newest kept) a turn's
    /// request carries before the new message.
    pub history_tokens: NonZero<u32>,
    /// Silence longer than this, in minutes, starts a new thread.
    pub idle_minutes: NonZero<u32>,
}

impl Default for ConversationConfig {
    fn default() -> Self {
        ConversationConfig {
            history_tokens: const { NonZero::new(6_000).unwrap() },
            idle_minutes: const { NonZero::new(240).unwrap() },
        }
    }
}

impl ConversationConfig {
    /// The idle time in milliseconds.
    pub fn idle_ms(&self) -> i64 {
        i64::from(self.idle_minutes.get()) * 60_000
    }
}
