//! How pressing and how sure a proposal the planner makes is (seed telos.md ch. 3:
//! `urgency ∈ [0.5, 2]`, `confidence ∈ [0, 1]`), set by code from what the proposal rests
//! on — never guessed by a model.
//!
//! - Confidence grows with the evidence an offer rests on and never reaches certainty:
//!   3 observations → 0.6, 6 → 0.8, 10 or more → 0.95, linear between (and from 0 at none).
//!   Three is where the fatigue source starts offering: a pattern seen three times is more
//!   likely than not, but a person may approve three times for three different reasons;
//!   each further one adds less; a pattern can still be wrong, so 0.95 is the top. A grant
//!   offer counts its approvals, a shortcut offer its uses, a revocation offer its unused
//!   time: every `stale_grant_days` unused counts as three observations (90 days → 0.6,
//!   180 → 0.8, 300 or more → 0.95), its least-unused grant deciding.
//! - A standing order's result is urgent (2) when its request names a deadline within the
//!   next 24 hours: a date (`2026-12-01`, `30/11/2026`, `1 December`, `December 1st`,
//!   `1 dicembre 2026`), optionally with a time (`2026-12-01 17:00`, `2026-12-01T17:00Z`,
//!   `… at 17:00`, `… alle 17.00`); a date alone is due at the end of that day, in the
//!   person's time zone (an ISO time with `Z` or an offset, at that instant). A date written
//!   `D/M/YYYY` that also reads as `M/D/YYYY` (`1/12/2026`) is not taken: no guess; nor is
//!   the word "may" in lower case after a number ("if 2 may be late"). Without
//!   a deadline, an order that fires at least once a day is chronic upkeep (0.5: the next
//!   firing is never more than a day away, so one result waiting costs little); a rarer
//!   one has no time pressure (1).

use std::sync::LazyLock;

use jiff::Zoned;
use jiff::civil::{Date, Time};
use jiff::tz::TimeZone;
use regex::Regex;

const DAY_MS: i64 = 86_400_000;

/// The confidence of an offer resting on `n` observations (fractions allowed).
pub fn from_evidence(n: f64) -> f64 {
    const POINTS: [(f64, f64); 4] = [(0.0, 0.0), (3.0, 0.6), (6.0, 0.8), (10.0, 0.95)];
    if !n.is_finite() || n <= 0.0 {
        return 0.0;
    }
    for pair in POINTS.windows(2) {
        let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
        if n <= x1 {
            return y0 + (y1 - y0) * (n - x0) / (x1 - x0);
        }
    }
    0.95
}

/// The confidence of a revocation offer whose least-unused grant was last used
/// `unused_days` ago, offered after `threshold_days` unused.
pub fn from_unused(unused_days: f64, threshold_days: f64) -> f64 {
    if threshold_days <= 0.0 {
        return from_evidence(10.0);
    }
    from_evidence(3.0 * unused_days / threshold_days)
}

/// Urgency of a deadline within a day.
pub const URGENT: f64 = 2.0;
/// Urgency of chronic upkeep.
pub const CHRONIC: f64 = 0.5;
/// No time pressure.
pub const NORMAL: f64 = 1.0;

/// The urgency of a standing order's result at `now_ms`: `request` its words, `min_gap_ms`
/// the least time between two of its firings (`None`: unknown).
pub fn of_standing_order(
    request: &str,
    min_gap_ms: Option<i64>,
    zone: &TimeZone,
    now_ms: i64,
) -> f64 {
    if deadline_within(request, zone, now_ms, DAY_MS).is_some() {
        URGENT
    } else if min_gap_ms.is_some_and(|gap| gap <= DAY_MS) {
        CHRONIC
    } else {
        NORMAL
    }
}

/// The earliest deadline `text` names that falls from `now_ms` to `now_ms + within_ms`.
pub fn deadline_within(text: &str, zone: &TimeZone, now_ms: i64, within_ms: i64) -> Option<i64> {
    let now = jiff::Timestamp::from_millisecond(now_ms)
        .ok()?
        .to_zoned(zone.clone());
    deadlines(text, &now)
        .into_iter()
        .filter(|at| (now_ms..=now_ms + within_ms).contains(at))
        .min()
}

static ISO: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\b(\d{4})-(\d{2})-(\d{2})(?:([T ])(\d{1,2}):(\d{2})(?::\d{2})?(Z|[+-]\d{2}:\d{2})?)?\b",
    )
    .expect("a regex")
});
static NUMERIC: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(\d{1,2})[/.](\d{1,2})[/.](\d{4})\b").expect("a regex"));
static DAY_MONTH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?i)\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({MONTHS})\b(?:\s+(\d{{4}}))?"
    ))
    .expect("a regex")
});
static MONTH_DAY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?i)\b({MONTHS})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}}))?"
    ))
    .expect("a regex")
});
/// A time right after a date: `at 17:00`, `alle 17.00`, `h 17:00`, `17:00` (a dot only
/// after a word that says it is a time: `10.50 EUR` is not one).
static TIME_AFTER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^\s*,?\s*(?:(?:at|by|alle|entro le|ore|h)\s*(\d{1,2})[:.](\d{2})|(\d{1,2}):(\d{2}))\b",
    )
    .expect("a regex")
});

const MONTHS: &str = "january|february|march|april|may|june|july|august|september|october|\
november|december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec|gennaio|febbraio|marzo|\
aprile|maggio|giugno|luglio|agosto|settembre|ottobre|novembre|dicembre";

fn month_number(name: &str) -> Option<i8> {
    let name = name.to_lowercase();
    let months = [
        ["january", "jan", "gennaio"],
        ["february", "feb", "febbraio"],
        ["march", "mar", "marzo"],
        ["april", "apr", "aprile"],
        ["may", "may", "maggio"],
        ["june", "jun", "giugno"],
        ["july", "jul", "luglio"],
        ["august", "aug", "agosto"],
        ["september", "sep", "settembre"],
        ["october", "oct", "ottobre"],
        ["november", "nov", "novembre"],
        ["december", "dec", "dicembre"],
    ];
    if name == "sept" {
        return Some(9);
    }
    months
        .iter()
        .position(|names| names.contains(&name.as_str()))
        .and_then(|i| i8::try_from(i + 1).ok())
}

/// Every deadline `text` names, as instants in `now`'s zone.
fn deadlines(text: &str, now: &Zoned) -> Vec<i64> {
    let mut out = Vec::new();
    let number = |m: Option<regex::Match<'_>>| m.and_then(|m| m.as_str().parse::<i16>().ok());
    for c in ISO.captures_iter(text) {
        let date = Date::new(
            number(c.get(1)).unwrap_or(0),
            number(c.get(2)).unwrap_or(0) as i8,
            number(c.get(3)).unwrap_or(0) as i8,
        );
        let time = match (number(c.get(5)), number(c.get(6))) {
            (Some(h), Some(m)) => Time::new(h as i8, m as i8, 0, 0).ok(),
            _ => None,
        };
        let date = date.ok();
        // An offset only after `T` (`2026-12-01T09:00-05:00`): `2026-12-01 09:00-10:00` is a
        // range, read from its start in the person's zone.
        let offset = c
            .get(7)
            .filter(|_| c.get(4).is_some_and(|t| t.as_str() == "T"));
        if let (Some(date), Some(time), Some(offset)) = (date, time, offset) {
            // An instant: `Z` or its offset, not the person's zone.
            let zone = if offset.as_str() == "Z" {
                Some(TimeZone::UTC)
            } else {
                offset_of(offset.as_str()).map(TimeZone::fixed)
            };
            if let Some(at) = zone.and_then(|z| date.to_datetime(time).to_zoned(z).ok()) {
                out.push(at.timestamp().as_millisecond());
            }
            continue;
        }
        let end = c.get(0).map_or(0, |m| m.end());
        push(&mut out, date, time.or(time_after(&text[end..])), now);
    }
    for c in NUMERIC.captures_iter(text) {
        let (a, b, year) = (number(c.get(1)), number(c.get(2)), number(c.get(3)));
        let (Some(a), Some(b), Some(year)) = (a, b, year) else {
            continue;
        };
        // Day first (the European way); a date that reads both ways differently is not taken.
        let day_first = Date::new(year, b as i8, a as i8).ok();
        let month_first = Date::new(year, a as i8, b as i8).ok();
        if month_first.is_some() && day_first.is_some() && a != b {
            continue;
        }
        let end = c.get(0).map_or(0, |m| m.end());
        push(&mut out, day_first, time_after(&text[end..]), now);
    }
    for (re, day_at, month_at) in [(&*DAY_MONTH, 1, 2), (&*MONTH_DAY, 2, 1)] {
        for c in re.captures_iter(text) {
            let Some(written) = c.get(month_at) else {
                continue;
            };
            // "2 may be late": the modal, not the month (the month after a number is
            // written "May").
            if day_at == 1 && written.as_str() == "may" {
                continue;
            }
            let Some(month) = month_number(written.as_str()) else {
                continue;
            };
            let Some(day) = number(c.get(day_at)) else {
                continue;
            };
            let end = c.get(0).map_or(0, |m| m.end());
            let time = time_after(&text[end..]);
            let date = match number(c.get(3)) {
                Some(year) => Date::new(year, month, day as i8).ok(),
                // No year: its next occurrence, this year or the next.
                None => [now.year(), now.year() + 1]
                    .into_iter()
                    .filter_map(|y| Date::new(y, month, day as i8).ok())
                    .find(|d| *d >= now.date()),
            };
            push(&mut out, date, time, now);
        }
    }
    out
}

fn time_after(rest: &str) -> Option<Time> {
    let c = TIME_AFTER.captures(rest)?;
    let (h, m) = (c.get(1).or(c.get(3))?, c.get(2).or(c.get(4))?);
    Time::new(h.as_str().parse().ok()?, m.as_str().parse().ok()?, 0, 0).ok()
}

/// `+HH:MM` / `-HH:MM` as an offset.
fn offset_of(text: &str) -> Option<jiff::tz::Offset> {
    let sign: i32 = if text.starts_with('-') { -1 } else { 1 };
    let (h, m) = text.get(1..)?.split_once(':')?;
    let seconds = sign * (h.parse::<i32>().ok()? * 3600 + m.parse::<i32>().ok()? * 60);
    jiff::tz::Offset::from_seconds(seconds).ok()
}

/// `date` at `time` (a date alone: the end of that day) in `now`'s zone.
fn push(out: &mut Vec<i64>, date: Option<Date>, time: Option<Time>, now: &Zoned) {
    let Some(date) = date else {
        return;
    };
    let time = time.unwrap_or(Time::constant(23, 59, 59, 0));
    if let Ok(at) = date.to_datetime(time).to_zoned(now.time_zone().clone()) {
        out.push(at.timestamp().as_millisecond());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Monday 2026-11-30 10:00 in Rome (09:00 UTC).
    const NOW: i64 = 1_796_029_200_000;

    fn rome() -> TimeZone {
        TimeZone::get("Europe/Rome").unwrap()
    }

    #[test]
    fn confidence_grows_with_the_evidence_and_never_reaches_certainty() {
        assert!((from_evidence(3.0) - 0.6).abs() < 1e-12);
        assert!((from_evidence(6.0) - 0.8).abs() < 1e-12);
        assert!((from_evidence(10.0) - 0.95).abs() < 1e-12);
        assert!((from_evidence(500.0) - 0.95).abs() < 1e-12);
        assert!((from_evidence(4.5) - 0.7).abs() < 1e-12);
        assert_eq!(from_evidence(0.0), 0.0);
        assert_eq!(from_evidence(f64::NAN), 0.0);
        assert!((from_evidence(1.0) - 0.2).abs() < 1e-12);
        // Unused time: each threshold counts as three observations.
        assert!((from_unused(90.0, 90.0) - 0.6).abs() < 1e-12);
        assert!((from_unused(180.0, 90.0) - 0.8).abs() < 1e-12);
        assert!((from_unused(400.0, 90.0) - 0.95).abs() < 1e-12);
    }

    #[test]
    fn a_deadline_within_a_day_is_urgent_in_every_spelling() {
        let zone = rome();
        let urgent = [
            "send the invoice by 2026-11-30",
            "remind me of the tax payment due 2026-12-01 09:30",
            "deadline 2026-12-01 at 09:00",
            "pay the rent before 30/11/2026 alle 18:00",
            "the report for 30 November",
            "the report for November 30th",
            "consegna entro il 30 novembre 2026",
            "meeting on December 1 at 9:15",
            "the call at 2026-12-01T08:00Z",
            // A range, not an offset: from 09:00 in Rome, 23 hours away.
            "the workshop on 2026-12-01 09:00-10:00",
        ];
        for text in urgent {
            assert_eq!(
                of_standing_order(text, Some(7 * DAY_MS), &zone, NOW),
                URGENT,
                "{text}"
            );
        }
        let not_urgent = [
            // A day and a half away (the end of 1 December), a week, a date gone by.
            "send the invoice by 2026-12-01",
            "the report for 7 December",
            "what happened on 2026-11-29",
            // Reads as 3 December or 12 March: not guessed.
            "pay before 3/12/2026",
            // Not a date.
            "summarise my notes from 2026 and the 12 best",
            "may I have the summary",
            "tell me if 30 may be too many",
            // 09:30 in New York is 15:30 in Rome on 1 December: 29 and a half hours.
            "the call at 2026-12-01T09:30-05:00",
        ];
        for text in not_urgent {
            assert_eq!(
                of_standing_order(text, Some(7 * DAY_MS), &zone, NOW),
                NORMAL,
                "{text}"
            );
        }
        // "May" after a number is the month; "may" is the modal.
        let year = 400 * DAY_MS;
        assert!(deadline_within("invoice due 2 May", &zone, NOW, year).is_some());
        assert!(deadline_within("if 2 may be late", &zone, NOW, year).is_none());
        // A dot makes a time only after a word that says so.
        let at = |text: &str| deadline_within(text, &TimeZone::UTC, NOW, year).unwrap();
        assert_eq!(
            at("2026-12-01 alle 10.50") - at("2026-12-01 10.50 EUR"),
            10 * 3_600_000 + 50 * 60_000 - (DAY_MS - 1000),
            "10:50 against the end of the day"
        );
        // The same words, read in the person's zone: 23 and a half hours away in Rome,
        // 24 and a half in UTC.
        assert!(deadline_within("due 2026-12-01 09:30", &zone, NOW, DAY_MS).is_some());
        assert!(deadline_within("due 2026-12-01 09:30", &TimeZone::UTC, NOW, DAY_MS).is_none());
    }

    #[test]
    fn an_order_that_fires_daily_without_a_deadline_is_chronic_upkeep() {
        let zone = rome();
        assert_eq!(
            of_standing_order("tidy my downloads", Some(DAY_MS), &zone, NOW),
            CHRONIC
        );
        assert_eq!(
            of_standing_order("tidy my downloads", Some(3_600_000), &zone, NOW),
            CHRONIC
        );
        assert_eq!(
            of_standing_order("weekly review", Some(7 * DAY_MS), &zone, NOW),
            NORMAL
        );
        assert_eq!(of_standing_order("weekly review", None, &zone, NOW), NORMAL);
    }
}
