//! `metnos policy replay --level L [--since 7d|DATE] [--json]` (issue 23, what-if): the
//! policy questions of past turns, as the turn log keeps them (each step's level,
//! capability and outcome, and the grant that allowed it — labels, never targets), asked
//! again at another level against the grants active now, and what would have changed.
//!
//! A step allowed by a grant that is no longer active would have needed approval (at a
//! level whose table asks); a grant recorded since cannot be matched (the log keeps no
//! target), so a step that needed approval is not assumed to be covered by it.

use std::collections::{BTreeMap, HashSet};
use std::process::ExitCode;

use metnos_core::capability::Capability;
use metnos_core::level::AutonomyLevel;
use metnos_core::table::{Outcome, table_outcome};
use metnos_kit::Config;
use serde_json::{Value, json};

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

fn name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allowed => "allowed",
        Outcome::ApprovalRequired => "approval_required",
        Outcome::Denied => "denied",
    }
}

fn was(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allowed => "that were allowed",
        Outcome::ApprovalRequired => "that needed approval",
        Outcome::Denied => "that were denied",
    }
}

fn would(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allowed => "been allowed",
        Outcome::ApprovalRequired => "needed approval",
        Outcome::Denied => "been denied",
    }
}

/// The first day replayed: `Nd` days back from `today`, or a `YYYY-MM-DD`.
pub fn since_day(since: &str, today: jiff::civil::Date) -> Result<String, String> {
    if let Some(days) = since.strip_suffix('d')
        && let Ok(days) = days.parse::<i64>()
        && (0..=3650).contains(&days)
    {
        let day = today
            .checked_sub(jiff::Span::new().days(days))
            .map_err(|e| e.to_string())?;
        return Ok(day.to_string());
    }
    match since.parse::<jiff::civil::Date>() {
        Ok(day) if since.len() == 10 => Ok(day.to_string()),
        _ => Err(format!(
            "--since `{}` is neither N days (`7d`) nor a date (YYYY-MM-DD)",
            since.chars().take(32).collect::<String>()
        )),
    }
}

/// One kind of change: from, to, how many, and how many of each capability.
type Change = (Outcome, Outcome, u64, BTreeMap<String, u64>);

/// Replays the turn log's days from `since` at `level` against the grants `active`.
pub fn replay(
    config: &Config,
    level: AutonomyLevel,
    since: &str,
    active: &HashSet<i64>,
    as_json: bool,
) -> ExitCode {
    let dir = config.data_dir.join(metnos_kit::datadir::TURNS_DIR);
    let files = match metnos_kit::chain::files(&dir) {
        Ok(files) => files,
        Err(e) => {
            eprintln!(
                "metnos: the turn log cannot be read ({}): {e}",
                dir.display()
            );
            return ExitCode::FAILURE;
        }
    };
    let (mut turns, mut questions, mut unchanged) = (0u64, 0u64, 0u64);
    let mut changes: BTreeMap<(&str, &str), Change> = BTreeMap::new();
    for file in files
        .iter()
        .filter(|f| f.trim_end_matches(".jsonl") >= since)
    {
        let text = match std::fs::read_to_string(dir.join(file)) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("metnos: {file} cannot be read: {e}");
                return ExitCode::FAILURE;
            }
        };
        for line in text.lines() {
            let Ok(record) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            turns += 1;
            let steps = record.get("steps").and_then(Value::as_array);
            for q in steps.into_iter().flatten().filter_map(question) {
                let Some(now) = replayed(&q, level, active) else {
                    continue;
                };
                questions += 1;
                if now == q.outcome {
                    unchanged += 1;
                    continue;
                }
                let entry = changes
                    .entry((name(q.outcome), name(now)))
                    .or_insert_with(|| (q.outcome, now, 0, BTreeMap::new()));
                entry.2 += 1;
                *entry.3.entry(q.capability.clone()).or_default() += 1;
            }
        }
    }
    if as_json {
        crate::admin::print_line(&json!({
            "level": level.as_str(),
            "since": since,
            "turns": turns,
            "questions": questions,
            "unchanged": unchanged,
            "changes": changes.values().map(|(from, to, count, caps)| json!({
                "from": name(*from),
                "to": name(*to),
                "count": count,
                "capabilities": caps,
            })).collect::<Vec<_>>(),
        }));
        return ExitCode::SUCCESS;
    }
    crate::admin::say(&format!(
        "{questions} policy question(s) of {turns} turn(s) since {since}, asked again at {} with the grants active now:",
        level.as_str()
    ));
    for (from, to, count, caps) in changes.values() {
        let caps: Vec<String> = caps.iter().map(|(c, n)| format!("{c} {n}")).collect();
        crate::admin::say(&format!(
            "  {count} call(s) {} would have {} ({})",
            was(*from),
            would(*to),
            caps.join(", ")
        ));
    }
    crate::admin::say(&format!("  {unchanged} unchanged"));
    ExitCode::SUCCESS
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
    fn since_is_days_back_or_a_date() {
        let today: jiff::civil::Date = "2026-11-26".parse().unwrap();
        assert_eq!(since_day("7d", today).unwrap(), "2026-11-19");
        assert_eq!(since_day("2026-11-01", today).unwrap(), "2026-11-01");
        assert!(since_day("a week", today).unwrap_err().contains("--since"));
        assert!(since_day("99999d", today).is_err());
    }
}
