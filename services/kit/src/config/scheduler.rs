//! `[scheduler]`: the planner's builtin scheduler (seed agent_runtime.md ch. 11.2) — how
//! often it looks for due tasks and how long its maintenance tasks keep things.

use std::num::NonZero;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The scheduler's settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// Off: Metnos acts only when asked — standing orders wait and no proposal is made
    /// (maintenance tasks still run).
    pub enabled: bool,
    /// How often due tasks are looked for.
    pub tick_seconds: NonZero<u64>,
    /// Days of daily turn logs (`turns/YYYY-MM-DD.jsonl`) kept by the `turn_log_retention`
    /// task; older days are deleted.
    pub turn_log_days: NonZero<u32>,
    /// The least time between two firings of a person's standing order, in minutes (each
    /// firing is a turn with the LLM).
    pub min_interval_minutes: NonZero<u32>,
    /// Standing orders one person may have (active or paused).
    pub max_per_person: NonZero<u32>,
    /// Approval fatigue: this many approvals of one capability under one folder or host
    /// within `fatigue_days` make an offer to allow them from now on.
    pub fatigue_approvals: NonZero<u32>,
    pub fatigue_days: NonZero<u32>,
    /// Grants not used for this many days are offered for revocation (the `stale_grants`
    /// task; never-used ones count from when they were granted).
    pub stale_grant_days: NonZero<u32>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            enabled: true,
            tick_seconds: const { NonZero::new(60).unwrap() },
            turn_log_days: const { NonZero::new(90).unwrap() },
            min_interval_minutes: const { NonZero::new(15).unwrap() },
            max_per_person: const { NonZero::new(20).unwrap() },
            fatigue_approvals: const { NonZero::new(3).unwrap() },
            fatigue_days: const { NonZero::new(7).unwrap() },
            stale_grant_days: const { NonZero::new(90).unwrap() },
        }
    }
}

impl SchedulerConfig {
    pub fn tick(&self) -> Duration {
        Duration::from_secs(self.tick_seconds.get())
    }
}
