//! `[turns]`: the planner's caps, budget, pre-filter, scratchpad and hybrid escalation.

use std::num::NonZero;

use metnos_core::capability::Capability;
use metnos_core::level::AutonomyLevel;
use serde::{Deserialize, Serialize};

/// The planner's turns: caps, budget, pre-filter, scratchpad, hybrid escalation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TurnsConfig {
    /// Most tool calls in one turn.
    pub cap_steps: NonZero<u32>,
    /// Most calls of one executor in one turn.
    pub cap_same_executor: NonZero<u32>,
    /// Wall-clock budget of a turn's own work (LLM calls and executors; time spent waiting
    /// for a person's approval does not count).
    pub budget_seconds: NonZero<u64>,
    /// Most executors the pre-filter offers the LLM.
    pub prefilter_max: NonZero<u32>,
    /// Observations larger than this (bytes of JSON) go to the scratchpad.
    pub scratchpad_threshold_bytes: NonZero<u64>,
    /// How long scratchpad entries and finished turns' checkpoints are kept.
    pub retention_hours: NonZero<u64>,
    /// Hybrid mode: escalate to the wise tier after this many failed steps (0: never).
    pub hybrid_escalate_after_failures: u32,
    /// Hybrid mode: escalate to the wise tier when a candidate executor needs one of these
    /// capabilities.
    pub hybrid_wise_capabilities: Vec<Capability>,
    /// The autonomy level of the local user in `metnos ask` / `metnos chat`.
    pub cli_level: AutonomyLevel,
    /// How long a replica holds a turn it runs or resumes without renewing its lease
    /// (renewed every third of it): after a replica's death, another takes its turns over
    /// once this has passed.
    pub lease_seconds: NonZero<u64>,
}

impl Default for TurnsConfig {
    fn default() -> Self {
        TurnsConfig {
            cap_steps: const { NonZero::new(5).unwrap() },
            cap_same_executor: const { NonZero::new(2).unwrap() },
            budget_seconds: const { NonZero::new(300).unwrap() },
            prefilter_max: const { NonZero::new(30).unwrap() },
            scratchpad_threshold_bytes: const { NonZero::new(4096).unwrap() },
            retention_hours: const { NonZero::new(24).unwrap() },
            hybrid_escalate_after_failures: 2,
            hybrid_wise_capabilities: Vec::new(),
            cli_level: AutonomyLevel::Supervised,
            lease_seconds: const { NonZero::new(15).unwrap() },
        }
    }
}
