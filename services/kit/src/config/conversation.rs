//! `[conversation]`: each person's thread on a channel (issue 40) — how much of it a turn
//! sees, when silence starts a new one, and how long threads are kept; `[memory]`: each
//! person's long-term memory.

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
    /// Older exchanges that no longer fit are folded into one summary by the fast tier (a
    /// local one): at most one summary call per this many turns of a thread.
    pub summary_every: NonZero<u32>,
    /// Threads silent for longer than this many days are removed (a builtin task), with
    /// which thread each sent answer belonged to.
    pub retention_days: NonZero<u32>,
}

impl Default for ConversationConfig {
    fn default() -> Self {
        ConversationConfig {
            history_tokens: const { NonZero::new(6_000).unwrap() },
            idle_minutes: const { NonZero::new(240).unwrap() },
            summary_every: const { NonZero::new(10).unwrap() },
            retention_days: const { NonZero::new(30).unwrap() },
        }
    }
}

impl ConversationConfig {
    /// The idle time in milliseconds.
    pub fn idle_ms(&self) -> i64 {
        i64::from(self.idle_minutes.get()) * 60_000
    }

    /// The retention in milliseconds.
    pub fn retention_ms(&self) -> i64 {
        i64::from(self.retention_days.get()) * 86_400_000
    }
}

/// Each person's long-term memory (`memory_save`, `memory_search`, `memory_forget`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    /// Most entries a person keeps; a save beyond drops their oldest unused ones.
    pub max_entries: NonZero<u32>,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            max_entries: const { NonZero::new(5_000).unwrap() },
        }
    }
}
