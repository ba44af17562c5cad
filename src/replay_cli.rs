//! `metnos policy replay --level L [--since 7d|DATE] [--json]` (issue 23, what-if): the
//! policy questions of past turns, as the turn log keeps them (each step's level,
//! capability and outcome, and the grant that allowed it — labels, never targets), asked
//! again at another level against the grants active now, and what would have changed.
//!
//! A step allowed by a grant that is no longer active would have needed approval (at a
//! level whose table asks); a grant recorded since cannot be matched (the log keeps no
//! target), so a step that needed approval is not assumed to be covered by it.

use std::collections::HashSet;
use std::process::ExitCode;

use metnos_core::level::AutonomyLevel;
use metnos_core::replay::Tally;
use metnos_core::table::Outcome;
use metnos_kit::Config;
use serde_json::Value;

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

/// Why `--since` names no day.
#[derive(Debug, thiserror::Error)]
pub enum SinceError {
    /// `N` days back from today is not a date.
    #[error(transparent)]
    Span(#[from] jiff::Error),
    /// What was given: its first 32 characters.
    #[error("--since `{0}` is neither N days (`7d`) nor a date (YYYY-MM-DD)")]
    Neither(String),
}

/// The first day replayed: `Nd` days back from `today`, or a `YYYY-MM-DD`.
pub fn since_day(since: &str, today: jiff::civil::Date) -> Result<String, SinceError> {
    if let Some(days) = since.strip_suffix('d')
        && let Ok(days) = days.parse::<i64>()
        && (0..=3650).contains(&days)
    {
        let day = today.checked_sub(jiff::Span::new().days(days))?;
        return Ok(day.to_string());
    }
    match since.parse::<jiff::civil::Date>() {
        Ok(day) if since.len() == 10 => Ok(day.to_string()),
        _ => Err(SinceError::Neither(since.chars().take(32).collect())),
    }
}

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
    let mut tally = Tally::new(level, active.clone());
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
            if let Ok(record) = serde_json::from_str::<Value>(line) {
                tally.add(&record);
            }
        }
    }
    if as_json {
        crate::admin::print_line(&tally.to_json(since));
        return ExitCode::SUCCESS;
    }
    let (questions, turns) = (tally.questions, tally.turns);
    crate::admin::say(&format!(
        "{questions} policy question(s) of {turns} turn(s) since {since}, asked again at {} with the grants active now:",
        level.as_str()
    ));
    for change in tally.changes() {
        let caps: Vec<String> = change
            .capabilities
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        crate::admin::say(&format!(
            "  {} call(s) {} would have {} ({})",
            change.count,
            was(change.from),
            would(change.to),
            caps.join(", ")
        ));
    }
    crate::admin::say(&format!("  {} unchanged", tally.unchanged));
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_is_days_back_or_a_date() {
        let today: jiff::civil::Date = "2026-11-26".parse().unwrap();
        assert_eq!(since_day("7d", today).unwrap(), "2026-11-19");
        assert_eq!(since_day("2026-11-01", today).unwrap(), "2026-11-01");
        assert!(
            since_day("a week", today)
                .unwrap_err()
                .to_string()
                .contains("--since")
        );
        assert!(since_day("99999d", today).is_err());
    }
}
