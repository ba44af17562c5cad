//! The autonomy x capability table (seed policy.md ch. 3), generated from the registry by
//! three rules, one per level, never written by hand. The policy service decides with it;
//! the planner reads it to leave the vaglio out of a call the table already denies.

use std::fmt;

use crate::capability::{Capability, DefaultApproval};
use crate::level::AutonomyLevel;

/// The three outcomes of the legality filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Allowed,
    ApprovalRequired,
    Denied,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::ApprovalRequired => "approval_required",
            Outcome::Denied => "denied",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The table cell for `level` x `capability`, by the seed's three rules:
/// - ReadOnly: zero-cost capabilities (default approval `none`) are allowed; read-only
///   per-target capabilities stay approval_required; everything else is denied.
/// - Supervised: what ReadOnly allows, and every other capability needs approval.
/// - Full: everything allowed except the `always` capabilities, which need approval.
pub fn table_outcome(level: AutonomyLevel, capability: Capability) -> Outcome {
    let spec = capability.spec();
    match (level, spec.default_approval) {
        (_, DefaultApproval::None) => Outcome::Allowed,
        (AutonomyLevel::ReadOnly, DefaultApproval::PerTarget) if spec.reads_only => {
            Outcome::ApprovalRequired
        }
        (AutonomyLevel::ReadOnly, _) => Outcome::Denied,
        (AutonomyLevel::Supervised, _) => Outcome::ApprovalRequired,
        (AutonomyLevel::Full, DefaultApproval::Always) => Outcome::ApprovalRequired,
        (AutonomyLevel::Full, DefaultApproval::PerTarget) => Outcome::Allowed,
    }
}
