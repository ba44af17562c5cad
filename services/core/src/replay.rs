//! What-if (issue 23): the policy questions of past turns, as the turn log keeps them
//! (each step's level, capability and outcome, and the grant that allowed it — labels,
//! never targets), asked again at another level against the grants active now.
//!
//! A step allowed by a grant that is no longer active would have needed approval (at a
//! level whose table asks); a grant recorded since cannot be matched (the log keeps no
//! target), so a step that needed approval is not assumed to be covered by it. Used by
//! `metnos policy replay` and the spectator's what-if page.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Value, json};

use crate::capability::Capability;
use crate::level::AutonomyLevel;
use crate::table::{Outcome, table_outcome};

/// One policy question of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    pub capability: String,
    pub outcome: Outcome,
    /// The grant that allowed it, if one did.
    pub grant: Option<i64>,
}

/// Reads a step's `policy_reason` (`Supervised x fs:write = allowed by a grant`) and
/// `grant_id`; `None` for a step policy was not asked about.
pub fn question(step: &Value) -> Option<Question> {
    let reason = step.get("policy_reason")?.as_str()?;
    let (_, rest) = reason.split_once(" x ")?;
    let (capability, outcome) = rest.split_once(" = ")?;
    let (outcome, by_grant) = match outcome.strip_suffix(" by a grant") {
        Some(outcome) => (outcome, true),
        None => (outcome, false),
    };
    let outcome = match outcome {
        "allowed" => Outcome::Allowed,
        "approval_required" => Outcome::ApprovalRequired,
        "denied" => Outcome::Denied,
        _ => return None,
    };
    let grant = step.get("grant_id").and_then(Value::as_i64);
    Some(Question {
        capability: capability.to_owned(),
        outcome,
        grant: if by_grant { grant } else { None },
    })
}

/// What `q` would get at `level` with the grants `active` now.
pub fn replayed(q: &Question, level: AutonomyLevel, active: &HashSet<i64>) -> Option<Outcome> {
    let capability = Capability::parse(&q.capability).ok()?;
    Some(match table_outcome(level, capability) {
        Outcome::ApprovalRequired if q.grant.is_some_and(|g| active.contains(&g)) => {
            Outcome::Allowed
        }
        other => other,
    })
}

/// An outcome's name in the log (`approval_required`).
pub fn name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allowed => "allowed",
        Outcome::ApprovalRequired => "approval_required",
        Outcome::Denied => "denied",
    }
}

/// One kind of change: from, to, how many, and how many of each capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub from: Outcome,
    pub to: Outcome,
    pub count: u64,
    pub capabilities: BTreeMap<String, u64>,
}

/// The replay of many turns at one level.
#[derive(Debug, Clone)]
pub struct Tally {
    level: AutonomyLevel,
    active: HashSet<i64>,
    pub turns: u64,
    pub questions: u64,
    pub unchanged: u64,
    changes: BTreeMap<(&'static str, &'static str), Change>,
}

impl Tally {
    /// Replays at `level` against the grants `active` now.
    pub fn new(level: AutonomyLevel, active: HashSet<i64>) -> Tally {
        Tally {
            level,
            active,
            turns: 0,
            questions: 0,
            unchanged: 0,
            changes: BTreeMap::new(),
        }
    }

    /// Asks a turn log record's questions again.
    pub fn add(&mut self, record: &Value) {
        self.turns += 1;
        let steps = record.get("steps").and_then(Value::as_array);
        for q in steps.into_iter().flatten().filter_map(question) {
            let Some(now) = replayed(&q, self.level, &self.active) else {
                continue;
            };
            self.questions += 1;
            if now == q.outcome {
                self.unchanged += 1;
                continue;
            }
            let change = self
                .changes
                .entry((name(q.outcome), name(now)))
                .or_insert_with(|| Change {
                    from: q.outcome,
                    to: now,
                    count: 0,
                    capabilities: BTreeMap::new(),
                });
            change.count += 1;
            *change.capabilities.entry(q.capability.clone()).or_default() += 1;
        }
    }

    /// What would have changed, by kind.
    pub fn changes(&self) -> impl Iterator<Item = &Change> {
        self.changes.values()
    }

    /// The tally as `metnos policy replay --json` prints it.
    pub fn to_json(&self, since: &str) -> Value {
        json!({
            "level": self.level.as_str(),
            "since": since,
            "turns": self.turns,
            "questions": self.questions,
            "unchanged": self.unchanged,
            "changes": self.changes().map(|c| json!({
                "from": name(c.from),
                "to": name(c.to),
                "count": c.count,
                "capabilities": c.capabilities,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_question_is_read_from_its_labels_and_asked_again() {
        let step =
            json!({"policy_reason": "Supervised x fs:write = allowed by a grant", "grant_id": 7});
        let q = question(&step).unwrap();
        assert_eq!(q.capability, "fs:write");
        assert_eq!((q.outcome, q.grant), (Outcome::Allowed, Some(7)));
        let active: HashSet<i64> = [7].into();
        let none = HashSet::new();
        use AutonomyLevel::{Full, ReadOnly, Supervised};
        assert_eq!(replayed(&q, Supervised, &active), Some(Outcome::Allowed));
        assert_eq!(
            replayed(&q, Supervised, &none),
            Some(Outcome::ApprovalRequired),
            "its grant revoked since"
        );
        assert_eq!(
            replayed(&q, ReadOnly, &active),
            Some(Outcome::Denied),
            "a grant never lifts denied"
        );
        assert_eq!(replayed(&q, Full, &none), Some(Outcome::Allowed));
        let asked =
            question(&json!({"policy_reason": "Supervised x fs:write = approval_required"}))
                .unwrap();
        assert_eq!(asked.grant, None);
        assert_eq!(
            question(&json!({"executor": "fs_read"})),
            None,
            "policy not asked"
        );
        assert_eq!(question(&json!({"policy_reason": "garbage"})), None);
    }

    #[test]
    fn a_tally_counts_turns_questions_and_each_kind_of_change() {
        let mut tally = Tally::new(AutonomyLevel::Full, HashSet::new());
        tally.add(&json!({"steps": [
            {"policy_reason": "Supervised x fs:write = approval_required"},
            {"policy_reason": "Supervised x fs:write = approval_required"},
            {"policy_reason": "Supervised x time:read = allowed"},
            {"executor": "no policy"},
        ]}));
        tally.add(&json!({"steps": []}));
        assert_eq!((tally.turns, tally.questions, tally.unchanged), (2, 3, 1));
        let changes: Vec<_> = tally.changes().collect();
        assert_eq!(changes.len(), 1);
        assert_eq!(
            (changes[0].from, changes[0].to, changes[0].count),
            (Outcome::ApprovalRequired, Outcome::Allowed, 2)
        );
        assert_eq!(
            tally.to_json("2026-11-01")["changes"][0]["capabilities"]["fs:write"],
            2
        );
    }
}
