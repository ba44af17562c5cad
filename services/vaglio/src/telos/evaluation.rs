//! What the telos engine weighs and what it answers: a proposal in, an evaluation out
//! with its decision, its reason and every term that led to it, and the engine's errors.

use metnos_core::Principal;
use serde::{Deserialize, Serialize};

use super::engine::Source;
use super::store::Recorded;

/// What the engine decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Publish,
    Reject,
    DeferToDigest,
    DeferToSlot,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Publish => "publish",
            Decision::Reject => "reject",
            Decision::DeferToDigest => "defer_to_digest",
            Decision::DeferToSlot => "defer_to_slot",
        }
    }
}

/// Why the engine decided as it did: the code the wire, the store and the logs carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The person asked: an explicit request is never judged.
    ExplicitRequest,
    /// No TELOS.md, or a consented firing's telos missing where a fit is needed.
    NoTelosDeclared,
    /// A TELOS.md that does not parse or cannot be read.
    TelosFileMalformed,
    /// A TELOS.md unsigned, signed for someone else, or older than the version in force.
    TelosSignatureInvalid,
    /// The effect class is on the person's never-list.
    NeverList,
    /// The person stopped this intent (for a day).
    StoppedByPerson,
    /// Inside a protected window: decided by code, before any model.
    ProtectedWindow,
    /// Within `[telos] window_lead_minutes` before a protected window, an ad hoc proposal
    /// that would have been published: the digest instead (judged, it takes one of its ten
    /// places).
    NearWindow,
    /// The fits could not be estimated (an error or a timeout).
    FitEstimationFailed,
    /// The alignment before bother does not reach θ.
    BelowThreshold,
    /// A hard quota is reached.
    Quota,
    /// The alignment after the bother kernel does not reach θ.
    Bother,
    /// The digest has no place left.
    DigestFull,
    /// Published: aligned enough, under every quota.
    Aligned,
}

impl Reason {
    /// The code as the wire, the store and the logs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ExplicitRequest => "explicit_request",
            Reason::NoTelosDeclared => "no_telos_declared",
            Reason::TelosFileMalformed => "telos_file_malformed",
            Reason::TelosSignatureInvalid => "telos_signature_invalid",
            Reason::NeverList => "never_list",
            Reason::StoppedByPerson => "stopped_by_person",
            Reason::ProtectedWindow => "protected_window",
            Reason::NearWindow => "near_window",
            Reason::FitEstimationFailed => "fit_estimation_failed",
            Reason::BelowThreshold => "below_threshold",
            Reason::Quota => "quota",
            Reason::Bother => "bother",
            Reason::DigestFull => "digest_full",
            Reason::Aligned => "aligned",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Reason {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Where a proposal comes from, explicit requests included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    Adhoc,
    SchedulerInCadence,
    SchedulerOffCadence,
    ExplicitRequest,
}

impl Origin {
    pub(super) fn source(self) -> Option<Source> {
        match self {
            Origin::Adhoc => Some(Source::Adhoc),
            Origin::SchedulerInCadence => Some(Source::SchedulerInCadence),
            Origin::SchedulerOffCadence => Some(Source::SchedulerOffCadence),
            Origin::ExplicitRequest => None,
        }
    }
}

/// A proposal to weigh.
#[derive(Debug, Clone)]
pub struct ProposalIn {
    pub proposal_id: String,
    pub kind: String,
    pub effect_class: String,
    pub description: String,
    pub channel: String,
    pub origin: Origin,
    pub schedule_id: String,
    pub person: Principal,
    pub session_id: String,
    pub level: Option<metnos_core::AutonomyLevel>,
    /// In [0.5, 2].
    pub urgency: f64,
    /// In [0, 1].
    pub confidence: f64,
}

/// One telos's part in a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitTerm {
    pub telos_id: String,
    pub fit: f64,
    pub why: String,
    pub activation_threshold: f64,
    pub weight_effective: f64,
    pub contribution: f64,
}

/// A decision with every term that led to it (seed ch. 10's `AlignmentResult`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub proposal_id: String,
    pub person: String,
    pub channel: String,
    pub effect_class: String,
    pub kind: String,
    pub description: String,
    pub origin: Origin,
    pub urgency: f64,
    pub confidence: f64,
    pub per_telos: Vec<FitTerm>,
    pub alignment_before_bother: f64,
    pub bother_sum: f64,
    pub bother_cost: f64,
    pub expected_alignment: f64,
    pub decision: Decision,
    pub reason: Reason,
    pub threshold_used: f64,
    pub at_ms: i64,
    pub not_before_ms: Option<i64>,
    pub telos_version: String,
    /// Set once per person without a TELOS.md, when a proposal was held back for it: the
    /// command that writes theirs, which the planner asks them for in their language.
    #[serde(default)]
    pub ask_person: Option<String>,
}

impl Evaluation {
    /// The store's row of this evaluation.
    pub(super) fn record(&self) -> Recorded {
        Recorded {
            proposal_id: self.proposal_id.clone(),
            person: self.person.clone(),
            channel: self.channel.clone(),
            effect_class: self.effect_class.clone(),
            decision: self.decision.as_str().to_owned(),
            reason: self.reason.as_str().to_owned(),
            expected_alignment: self.expected_alignment,
            before_bother: self.alignment_before_bother,
            threshold: self.threshold_used,
            contributors: self
                .per_telos
                .iter()
                .filter(|t| t.contribution > 0.0)
                .map(|t| t.telos_id.clone())
                .collect(),
            result_json: serde_json::to_string(self).unwrap_or_default(),
            at_ms: self.at_ms,
            answer: None,
            viewed: false,
        }
    }
}

/// The engine's errors, as the edge maps them.
#[derive(Debug, thiserror::Error)]
pub enum TelosError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Denied(String),
    #[error("{0}")]
    Precondition(String),
    #[error("{0}")]
    Conflict(String),
    #[error("the telos store failed: {0}")]
    Store(#[from] sqlx::Error),
}

/// The kind of a standing order's firing (the planner's): the only in-cadence proposal
/// taken as consented.
pub const STANDING_ORDER: &str = metnos_core::names::proposals::STANDING_ORDER;

/// The command that writes the owner's TELOS.md (the once-only question names it, with
/// `--person` for anyone else).
pub const ASK_OWNER: &str = metnos_core::names::TELOS_EDIT;
