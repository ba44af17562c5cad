//! A schedule's three forms (seed agent_runtime.md ch. 11.2) and when each fires:
//!
//! - `daily@HH:MM`: every day at that local time, in the person's time zone;
//! - `every N minutes` / `every N hours`: N apart, counted from when the schedule was made
//!   (elapsed time: a daylight-saving change does not move it);
//! - a five-field cron expression (`30 8 * * MON-FRI`), local time, through croner.
//!
//! Local times follow the time zone's rules: a time a spring-forward skips fires at the
//! first minute after the gap, a time a fall-back repeats fires once (the earlier).
//! Pure: the planner's scheduler stores the text and asks [`Schedule::next_after`]; an
//! approval card says it in words with its next firings.

use std::str::FromStr;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;

/// The most text a schedule may be.
pub const MAX_LEN: usize = 128;

/// The longest interval of the `every` form: a year.
const MAX_EVERY_MINUTES: u64 = 366 * 24 * 60;

/// A parsed schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    form: Form,
    text: String,
}

#[derive(Debug, Clone)]
enum Form {
    /// `daily@HH:MM`, as the cron expression `M H * * *`.
    Daily {
        minute: u16,
        cron: Box<Cron>,
    },
    /// Every this many milliseconds from the anchor.
    Every {
        ms: i64,
    },
    Cron(Box<Cron>),
}

impl Schedule {
    /// Parses one of the three forms; the error names what is wrong.
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("the schedule is empty".to_owned());
        }
        if text.len() > MAX_LEN || text.chars().any(char::is_control) {
            return Err(format!(
                "a schedule is at most {MAX_LEN} printable characters"
            ));
        }
        let lower = text.to_ascii_lowercase();
        let form = if let Some(at) = lower.strip_prefix("daily@") {
            let minute =
                crate::config::minutes_of(at.trim()).map_err(|e| format!("daily@HH:MM: {e}"))?;
            Form::Daily {
                minute,
                cron: Box::new(cron(&format!("{} {} * * *", minute % 60, minute / 60))?),
            }
        } else if let Some(rest) = lower
            .strip_prefix("every ")
            .or_else(|| lower.strip_prefix("ogni "))
        {
            let mut words = rest.split_whitespace();
            let (n, unit) = match (words.next(), words.next(), words.next()) {
                (Some(n), Some(unit), None) => (n, unit),
                (Some(unit), None, None) => ("1", unit),
                _ => {
                    return Err(format!(
                        "`{text}` is not `every N minutes` or `every N hours`"
                    ));
                }
            };
            let n: u64 = n
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("`{text}`: N must be a whole number above 0"))?;
            let minutes = match unit {
                // Italian too: `ogni 2 ore`, as an Italian card says it.
                "minute" | "minutes" | "min" | "mins" | "minuto" | "minuti" => n,
                "hour" | "hours" | "h" | "ora" | "ore" => n.saturating_mul(60),
                _ => {
                    return Err(format!(
                        "`{text}`: the unit is minutes or hours, not `{unit}`"
                    ));
                }
            };
            if minutes > MAX_EVERY_MINUTES {
                return Err(format!("`{text}`: at most once a year"));
            }
            Form::Every {
                ms: (minutes * 60_000) as i64,
            }
        } else {
            Form::Cron(Box::new(cron(text)?))
        };
        Ok(Schedule {
            form,
            text: text.to_owned(),
        })
    }

    /// The text it was parsed from.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The first firing strictly after `after_ms`, in `zone`; `anchor_ms` is when the
    /// schedule was made (the `every` form counts from it). `None` when it never fires
    /// again (a cron date that does not exist, e.g. `0 0 30 2 *`).
    pub fn next_after(&self, after_ms: i64, anchor_ms: i64, zone: &TimeZone) -> Option<i64> {
        match &self.form {
            Form::Every { ms } => {
                let since = after_ms.checked_sub(anchor_ms)?;
                let k = if since < 0 { 0 } else { since / ms + 1 };
                anchor_ms.checked_add(k.checked_mul(*ms)?)
            }
            Form::Daily { cron, .. } | Form::Cron(cron) => {
                let start = jiff::Timestamp::from_millisecond(after_ms)
                    .ok()?
                    .to_zoned(zone.clone());
                let next = cron.find_next_occurrence(&start, false).ok()?;
                Some(next.timestamp().as_millisecond())
            }
        }
    }

    /// The next `n` firings after `after_ms`.
    pub fn upcoming(&self, after_ms: i64, anchor_ms: i64, zone: &TimeZone, n: usize) -> Vec<i64> {
        let mut out = Vec::with_capacity(n);
        let mut at = after_ms;
        while out.len() < n {
            match self.next_after(at, anchor_ms, zone) {
                Some(next) if next > at => {
                    out.push(next);
                    at = next;
                }
                _ => break,
            }
        }
        out
    }

    /// The least time between two of its next `n` firings (and from `after_ms` to the
    /// first is not counted), in milliseconds; `None` with fewer than two firings.
    pub fn min_gap_ms(
        &self,
        after_ms: i64,
        anchor_ms: i64,
        zone: &TimeZone,
        n: usize,
    ) -> Option<i64> {
        self.upcoming(after_ms, anchor_ms, zone, n)
            .windows(2)
            .map(|w| w[1] - w[0])
            .min()
    }

    /// The schedule in words, e.g. "every day at 08:00".
    pub fn describe(&self) -> String {
        self.describe_in(metnos_core::Language::English)
    }

    /// The schedule in words in `language` ("ogni giorno alle 08:00"). A cron expression
    /// is said in Italian as the expression itself, named as one.
    pub fn describe_in(&self, language: metnos_core::Language) -> String {
        if language == metnos_core::Language::Italian {
            return self.italian();
        }
        match &self.form {
            Form::Daily { minute, .. } => {
                format!("every day at {:02}:{:02}", minute / 60, minute % 60)
            }
            Form::Every { ms } => {
                let minutes = ms / 60_000;
                match (minutes % 60, minutes / 60) {
                    (0, 1) => "every hour".to_owned(),
                    (0, h) => format!("every {h} hours"),
                    (_, _) if minutes == 1 => "every minute".to_owned(),
                    (_, _) => format!("every {minutes} minutes"),
                }
            }
            Form::Cron(cron) => cron.describe(),
        }
    }

    fn italian(&self) -> String {
        match &self.form {
            Form::Daily { minute, .. } => {
                format!("ogni giorno alle {:02}:{:02}", minute / 60, minute % 60)
            }
            Form::Every { ms } => {
                let minutes = ms / 60_000;
                match (minutes % 60, minutes / 60) {
                    (0, 1) => "ogni ora".to_owned(),
                    (0, h) => format!("ogni {h} ore"),
                    (_, _) if minutes == 1 => "ogni minuto".to_owned(),
                    (_, _) => format!("ogni {minutes} minuti"),
                }
            }
            Form::Cron(_) => format!("secondo la regola cron «{}»", self.text),
        }
    }
}

/// A firing's time in `language`, in its zone: `sab 28 nov 08:00`, `Sat 28 Nov 08:00`.
pub fn when_in(at: &jiff::Zoned, language: metnos_core::Language) -> String {
    if language == metnos_core::Language::English {
        return at.strftime("%a %d %b %H:%M").to_string();
    }
    const DAYS: [&str; 7] = ["lun", "mar", "mer", "gio", "ven", "sab", "dom"];
    const MONTHS: [&str; 12] = [
        "gen", "feb", "mar", "apr", "mag", "giu", "lug", "ago", "set", "ott", "nov", "dic",
    ];
    let day = DAYS[usize::from(at.weekday().to_monday_zero_offset().unsigned_abs())];
    let month = MONTHS[usize::from(at.month().unsigned_abs()).saturating_sub(1) % 12];
    format!(
        "{day} {:02} {month} {:02}:{:02}",
        at.day(),
        at.hour(),
        at.minute()
    )
}

/// A five-field cron expression (no seconds, no year).
fn cron(text: &str) -> Result<Cron, String> {
    if text.split_whitespace().count() != 5 {
        return Err(format!(
            "`{text}` is not a schedule: use daily@HH:MM, `every N minutes|hours` or a cron \
             expression of five fields (minute hour day-of-month month day-of-week)"
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(text)
        .map_err(|e| format!("`{text}` is not a valid cron expression: {e}"))
}

impl FromStr for Schedule {
    type Err = String;

    fn from_str(s: &str) -> Result<Schedule, String> {
        Schedule::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rome() -> TimeZone {
        TimeZone::get("Europe/Rome").unwrap()
    }

    fn at(zone: &TimeZone, text: &str) -> i64 {
        text.parse::<jiff::civil::DateTime>()
            .unwrap()
            .to_zoned(zone.clone())
            .unwrap()
            .timestamp()
            .as_millisecond()
    }

    fn local(zone: &TimeZone, ms: i64) -> String {
        jiff::Timestamp::from_millisecond(ms)
            .unwrap()
            .to_zoned(zone.clone())
            .strftime("%Y-%m-%d %H:%M %Z")
            .to_string()
    }

    #[test]
    fn the_three_forms_parse_and_bad_ones_say_what_is_wrong() {
        for ok in [
            "daily@08:00",
            "DAILY@7:30",
            "every 15 minutes",
            "every 2 hours",
            "every hour",
            "30 8 * * MON-FRI",
            "0 9 * * 1",
        ] {
            assert!(Schedule::parse(ok).is_ok(), "{ok}");
        }
        for (bad, says) in [
            ("", "empty"),
            ("daily@25:00", "hour"),
            ("daily@8", "HH:MM"),
            ("every 0 minutes", "above 0"),
            ("every -3 minutes", "above 0"),
            ("every 5 fortnights", "fortnights"),
            ("every 1000 days", "minutes or hours"),
            ("every 999999 hours", "once a year"),
            ("0 0 8 * * *", "five fields"),
            ("61 * * * *", "cron"),
            ("tomorrow morning", "daily@HH:MM"),
            ("0 8 * * *\n0 9 * * *", "printable"),
        ] {
            let e = Schedule::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    /// Issue 41: a schedule is said in the person's language, and an Italian one typed as
    /// the Italian card says it is the same schedule.
    #[test]
    fn a_schedule_is_said_and_read_in_italian_too() {
        use metnos_core::Language::{English, Italian};
        for (typed, italian, english) in [
            (
                "daily@08:00",
                "ogni giorno alle 08:00",
                "every day at 08:00",
            ),
            ("every 2 hours", "ogni 2 ore", "every 2 hours"),
            ("ogni 2 ore", "ogni 2 ore", "every 2 hours"),
            ("ogni ora", "ogni ora", "every hour"),
            ("ogni 15 minuti", "ogni 15 minuti", "every 15 minutes"),
            ("every minute", "ogni minuto", "every minute"),
            (
                "30 8 * * MON-FRI",
                "secondo la regola cron «30 8 * * MON-FRI»",
                "At 08:30, on Monday, Tuesday",
            ),
        ] {
            let schedule = Schedule::parse(typed).unwrap();
            assert_eq!(schedule.describe_in(Italian), italian, "{typed}");
            assert!(
                schedule.describe_in(English).starts_with(english),
                "{typed}: {}",
                schedule.describe_in(English)
            );
            for (language, text) in [(Italian, italian), (English, english)] {
                let foreign = metnos_core::language::words_of_the_other(text, language);
                assert!(foreign.is_empty(), "{text}: {foreign:?}");
            }
        }
        let saturday = jiff::civil::datetime(2026, 11, 28, 8, 0, 0, 0)
            .to_zoned(rome())
            .unwrap();
        assert_eq!(when_in(&saturday, Italian), "sab 28 nov 08:00");
        assert_eq!(when_in(&saturday, English), "Sat 28 Nov 08:00");
    }

    #[test]
    fn daily_fires_once_a_day_across_both_daylight_saving_changes() {
        let zone = rome();
        let s = Schedule::parse("daily@02:30").unwrap();
        // 2026-03-29 02:00 → 03:00 in Rome: 02:30 does not exist that day.
        let from = at(&zone, "2026-03-27T12:00");
        let days: Vec<String> = s
            .upcoming(from, from, &zone, 4)
            .into_iter()
            .map(|t| local(&zone, t))
            .collect();
        assert_eq!(
            days,
            [
                "2026-03-28 02:30 CET",
                "2026-03-29 03:00 CEST",
                "2026-03-30 02:30 CEST",
                "2026-03-31 02:30 CEST"
            ]
        );
        // 2026-10-25 03:00 → 02:00: 02:30 happens twice and fires once.
        let from = at(&zone, "2026-10-24T12:00");
        let fired = s.upcoming(from, from, &zone, 3);
        assert_eq!(
            fired.iter().map(|t| local(&zone, *t)).collect::<Vec<_>>(),
            [
                "2026-10-25 02:30 CEST",
                "2026-10-26 02:30 CET",
                "2026-10-27 02:30 CET"
            ]
        );
        assert_eq!(fired[1] - fired[0], 25 * 3_600_000, "a 25-hour day");
    }

    #[test]
    fn every_counts_elapsed_time_from_its_anchor() {
        let zone = rome();
        let s = Schedule::parse("every 90 minutes").unwrap();
        let anchor = at(&zone, "2026-10-25T01:00");
        assert_eq!(
            s.next_after(anchor, anchor, &zone),
            Some(anchor + 90 * 60_000)
        );
        assert_eq!(s.next_after(anchor - 1, anchor, &zone), Some(anchor));
        // From anywhere in a period: the end of that period, never a missed one.
        assert_eq!(
            s.next_after(anchor + 10 * 90 * 60_000 + 5, anchor, &zone),
            Some(anchor + 11 * 90 * 60_000)
        );
        assert_eq!(s.describe(), "every 90 minutes");
        assert_eq!(
            Schedule::parse("every 3 hours").unwrap().describe(),
            "every 3 hours"
        );
        assert_eq!(
            Schedule::parse("every hour").unwrap().describe(),
            "every hour"
        );
    }

    #[test]
    fn cron_is_local_time_and_says_itself_in_words() {
        let zone = rome();
        let s = Schedule::parse("0 9 * * MON").unwrap();
        // Thursday 2026-11-26.
        let from = at(&zone, "2026-11-26T10:00");
        let next: Vec<String> = s
            .upcoming(from, from, &zone, 3)
            .into_iter()
            .map(|t| local(&zone, t))
            .collect();
        assert_eq!(
            next,
            [
                "2026-11-30 09:00 CET",
                "2026-12-07 09:00 CET",
                "2026-12-14 09:00 CET"
            ]
        );
        assert!(
            s.describe().contains("09:00") || s.describe().contains("9:00"),
            "{}",
            s.describe()
        );
        assert_eq!(
            Schedule::parse("daily@08:05").unwrap().describe(),
            "every day at 08:05"
        );
        // A date that never comes.
        let never = Schedule::parse("0 0 30 2 *").unwrap();
        assert_eq!(never.next_after(from, from, &zone), None);
    }

    #[test]
    fn the_least_gap_between_firings_is_measured() {
        let zone = rome();
        let from = at(&zone, "2026-11-26T10:00");
        let gap = |s: &str| {
            Schedule::parse(s)
                .unwrap()
                .min_gap_ms(from, from, &zone, 10)
        };
        assert_eq!(gap("*/5 * * * *"), Some(5 * 60_000));
        assert_eq!(gap("every 20 minutes"), Some(20 * 60_000));
        assert_eq!(gap("daily@08:00"), Some(24 * 3_600_000));
        assert_eq!(gap("0,1 8 * * *"), Some(60_000));
    }
}
