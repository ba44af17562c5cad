//! `[telos]`: how the vaglio's telos engine (seed telos.md) weighs a proactive proposal —
//! the threshold θ, the bother kernel, the hard quotas per channel, and each person's time
//! zone and protected windows.

use std::collections::BTreeMap;
use std::num::NonZero;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The telos engine's settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelosConfig {
    /// Below this expected alignment a proposal is not published (θ, seed ch. 4).
    pub theta: f64,
    /// The bother kernel's time constant τ: a publication `Δt` ago weighs `exp(−Δt/τ)`.
    pub bother_tau_minutes: f64,
    /// `bother_cost = β·(e^{γ·S} − 1)`.
    pub bother_beta: f64,
    pub bother_gamma: f64,
    /// How long the fit estimate (the `middle` tier) may take; past it the proposal is
    /// rejected (`fit_estimation_failed`), never published.
    pub fit_timeout_seconds: NonZero<u64>,
    /// The time zone of people without their own (IANA name); empty: this machine's.
    pub time_zone: String,
    /// When nobody is interrupted, local time, `HH:MM-HH:MM` (overnight allowed, e.g.
    /// `22:30-07:30`), for people without their own list. By default sleep and the two
    /// meals most people keep: 23:00-07:00, 12:30-13:30, 19:30-20:30.
    pub protected_windows: Vec<String>,
    /// An ad hoc proposal this many minutes (or fewer) before a protected window goes to
    /// the digest, not to the person (seed: "close to a protected window"). 0 to 240.
    pub window_lead_minutes: u32,
    /// The evening digest, local time `HH:MM`.
    pub digest_at: String,
    /// People, besides every `cli` sender, whose telos is the owner's
    /// (`~/.config/metnos/TELOS.md`) when they have no file of their own, e.g.
    /// `"telegram:42"`.
    pub owner_principals: Vec<String>,
    pub quotas: TelosQuotas,
    /// Per person (`"<channel>:<sender>"`): their own time zone and protected windows.
    pub people: BTreeMap<String, TelosPerson>,
}

/// Hard limits on top of the bother kernel (seed ch. 6).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelosQuotas {
    /// Ad-hoc proposals published on a chat channel (Telegram, …) per hour and per day.
    pub adhoc_per_hour: u32,
    pub adhoc_per_day: u32,
    /// Ad-hoc proposals per CLI session.
    pub cli_adhoc_per_session: u32,
    /// Scheduler firings per day per channel.
    pub scheduler_per_day: u32,
    /// Items in one evening digest.
    pub digest_items: u32,
}

impl Default for TelosQuotas {
    fn default() -> Self {
        TelosQuotas {
            adhoc_per_hour: 1,
            adhoc_per_day: 3,
            cli_adhoc_per_session: 2,
            scheduler_per_day: 2,
            digest_items: 10,
        }
    }
}

/// One person's own settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TelosPerson {
    pub time_zone: Option<String>,
    pub protected_windows: Option<Vec<String>>,
    /// Their evening digest, local time `HH:MM`.
    pub digest_at: Option<String>,
    /// Their own lead before a protected window.
    pub window_lead_minutes: Option<u32>,
}

/// The protected windows of people without their own: sleep, lunch and dinner as most
/// people keep them (the evening digest, at 20:30, comes right after dinner).
pub const DEFAULT_WINDOWS: [&str; 3] = ["23:00-07:00", "12:30-13:30", "19:30-20:30"];

/// The longest lead before a protected window (four hours).
pub const MAX_WINDOW_LEAD_MINUTES: u32 = 240;

impl Default for TelosConfig {
    fn default() -> Self {
        TelosConfig {
            theta: 0.15,
            bother_tau_minutes: 120.0,
            bother_beta: 0.02,
            bother_gamma: 2.75,
            fit_timeout_seconds: const { NonZero::new(20).unwrap() },
            time_zone: String::new(),
            protected_windows: DEFAULT_WINDOWS.iter().map(|w| (*w).to_owned()).collect(),
            window_lead_minutes: 30,
            digest_at: "20:30".to_owned(),
            owner_principals: Vec::new(),
            quotas: TelosQuotas::default(),
            people: BTreeMap::new(),
        }
    }
}

/// A protected window: minutes after local midnight, `start` included, `end` excluded;
/// `end < start` crosses midnight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: u16,
    pub end: u16,
}

impl Window {
    /// Parses `HH:MM-HH:MM`.
    pub fn parse(text: &str) -> Result<Window, WindowError> {
        let (start, end) = text
            .split_once('-')
            .ok_or_else(|| WindowError::NotAWindow(text.to_owned()))?;
        let at = |part: &str| {
            minutes_of(part.trim()).map_err(|error| WindowError::Time {
                window: text.to_owned(),
                error,
            })
        };
        let (start, end) = (at(start)?, at(end)?);
        if start == end {
            return Err(WindowError::Empty(text.to_owned()));
        }
        Ok(Window { start, end })
    }

    /// Whether minute-of-day `minute` is inside.
    pub fn contains(&self, minute: u16) -> bool {
        if self.start < self.end {
            (self.start..self.end).contains(&minute)
        } else {
            minute >= self.start || minute < self.end
        }
    }
}

/// A time of day that is not `HH:MM`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeOfDayError {
    #[error("`{0}` is not HH:MM")]
    NotHhMm(String),
    #[error("`{0}`: the hour is not 00-23")]
    Hour(String),
    #[error("`{0}`: the minutes are not 00-59")]
    Minutes(String),
}

/// A protected window that is not `HH:MM-HH:MM`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("`{0}` is not HH:MM-HH:MM")]
    NotAWindow(String),
    #[error("`{window}`: {error}")]
    Time {
        window: String,
        error: TimeOfDayError,
    },
    #[error("`{0}` is empty (it starts where it ends)")]
    Empty(String),
}

/// `HH:MM` (or `H:MM`) as minutes after midnight.
pub fn minutes_of(text: &str) -> Result<u16, TimeOfDayError> {
    let digits = |part: &str, widths: std::ops::RangeInclusive<usize>| {
        (widths.contains(&part.len()) && part.bytes().all(|b| b.is_ascii_digit()))
            .then(|| part.parse::<u16>().ok())
            .flatten()
    };
    let (h, m) = text
        .split_once(':')
        .ok_or_else(|| TimeOfDayError::NotHhMm(text.to_owned()))?;
    let h = digits(h, 1..=2)
        .filter(|h| *h < 24)
        .ok_or_else(|| TimeOfDayError::Hour(text.to_owned()))?;
    let m = digits(m, 2..=2)
        .filter(|m| *m < 60)
        .ok_or_else(|| TimeOfDayError::Minutes(text.to_owned()))?;
    Ok(h * 60 + m)
}

/// A person's local calendar, for windows, days and the digest (the vaglio's telos engine
/// and the planner's scheduler read the same one).
#[derive(Debug, Clone)]
pub struct Local {
    pub zone: jiff::tz::TimeZone,
    pub windows: Vec<Window>,
    /// Minutes before a window that count as close to it (for ad hoc proposals).
    pub lead_minutes: u32,
}

impl Local {
    pub fn minute_of(&self, ms: i64) -> Option<u16> {
        let zoned = jiff::Timestamp::from_millisecond(ms)
            .ok()?
            .to_zoned(self.zone.clone());
        Some(u16::from(zoned.hour() as u8) * 60 + u16::from(zoned.minute() as u8))
    }

    pub fn protected(&self, ms: i64) -> bool {
        self.minute_of(ms)
            .is_some_and(|m| self.windows.iter().any(|w| w.contains(m)))
    }

    /// Whether a protected window starts within the lead after `ms` (outside one now), on
    /// the person's wall clock: a window at 12:30 with a 30-minute lead is near from 12:00.
    pub fn near_window(&self, ms: i64) -> bool {
        if self.windows.is_empty() || self.lead_minutes == 0 {
            return false;
        }
        let Some(minute) = self.minute_of(ms) else {
            return false;
        };
        let lead = self.lead_minutes.min(MAX_WINDOW_LEAD_MINUTES) as u16;
        !self.windows.iter().any(|w| w.contains(minute))
            && self.windows.iter().any(|w| {
                let until = (w.start + 24 * 60 - minute) % (24 * 60);
                (1..=lead).contains(&until)
            })
    }

    /// The first minute at or after `ms` outside every window (at most two days on).
    pub fn next_open(&self, ms: i64) -> i64 {
        let start = ms - ms.rem_euclid(60_000);
        (0..=2 * 24 * 60)
            .map(|i| start + i * 60_000)
            .find(|t| *t >= ms && !self.protected(*t))
            .unwrap_or(ms + 2 * 24 * 3_600_000)
    }

    pub fn day_start(&self, ms: i64) -> i64 {
        jiff::Timestamp::from_millisecond(ms)
            .ok()
            .map(|t| t.to_zoned(self.zone.clone()))
            .and_then(|z| z.start_of_day().ok())
            .map_or(ms - 24 * 3_600_000, |z| z.timestamp().as_millisecond())
    }

    /// The last digest at `digest_minute` local time at or before `ms`.
    pub fn last_digest(&self, ms: i64, digest_minute: u16) -> i64 {
        let at = |date: jiff::civil::Date| {
            date.at((digest_minute / 60) as i8, (digest_minute % 60) as i8, 0, 0)
                .to_zoned(self.zone.clone())
                .ok()
                .map(|z| z.timestamp().as_millisecond())
        };
        let Ok(now) = jiff::Timestamp::from_millisecond(ms) else {
            return ms - 24 * 3_600_000;
        };
        let today = now.to_zoned(self.zone.clone()).date();
        match at(today) {
            Some(t) if t <= ms => t,
            _ => today
                .yesterday()
                .ok()
                .and_then(at)
                .unwrap_or(ms - 24 * 3_600_000),
        }
    }
}

impl TelosConfig {
    /// `person`'s (`"<channel>:<sender>"`) calendar: their time zone (this machine's when
    /// none is set; UTC for a name the tz database does not know, which config refuses)
    /// and protected windows.
    pub fn local_for(&self, person: &str) -> Local {
        let name = self.time_zone_for(person);
        let zone = if name.is_empty() {
            jiff::tz::TimeZone::system()
        } else {
            jiff::tz::TimeZone::get(name).unwrap_or(jiff::tz::TimeZone::UTC)
        };
        Local {
            zone,
            windows: self.windows_for(person),
            lead_minutes: self.lead_for(person),
        }
    }

    pub fn fit_timeout(&self) -> Duration {
        Duration::from_secs(self.fit_timeout_seconds.get())
    }

    /// The time zone name for `person` (`"<channel>:<sender>"`); empty means this machine's.
    pub fn time_zone_for(&self, person: &str) -> &str {
        self.people
            .get(person)
            .and_then(|p| p.time_zone.as_deref())
            .unwrap_or(&self.time_zone)
    }

    /// `person`'s evening digest, minutes after local midnight (20:30 if unreadable, which
    /// config refuses).
    pub fn digest_minute_for(&self, person: &str) -> u16 {
        let at = self
            .people
            .get(person)
            .and_then(|p| p.digest_at.as_deref())
            .unwrap_or(&self.digest_at);
        minutes_of(at).unwrap_or(20 * 60 + 30)
    }

    /// `person`'s lead before a protected window, in minutes.
    pub fn lead_for(&self, person: &str) -> u32 {
        self.people
            .get(person)
            .and_then(|p| p.window_lead_minutes)
            .unwrap_or(self.window_lead_minutes)
            .min(MAX_WINDOW_LEAD_MINUTES)
    }

    /// `person`'s protected windows (already validated).
    pub fn windows_for(&self, person: &str) -> Vec<Window> {
        self.people
            .get(person)
            .and_then(|p| p.protected_windows.as_ref())
            .unwrap_or(&self.protected_windows)
            .iter()
            .filter_map(|w| Window::parse(w).ok())
            .collect()
    }

    /// Checks the numbers, windows and time zones; `Err((key, message))`.
    pub(super) fn check(&self) -> Result<(), (String, String)> {
        let number = |key: &str, value: f64, ok: bool, range: &str| {
            if value.is_finite() && ok {
                Ok(())
            } else {
                Err((
                    format!("telos.{key}"),
                    format!("must be {range}, got {value}"),
                ))
            }
        };
        // Above 0: with θ = 0 a proposal that fits nothing would be published.
        number(
            "theta",
            self.theta,
            self.theta > 0.0 && self.theta <= 3.0,
            "above 0 and at most 3",
        )?;
        number(
            "bother_tau_minutes",
            self.bother_tau_minutes,
            self.bother_tau_minutes > 0.0,
            "above 0",
        )?;
        number(
            "bother_beta",
            self.bother_beta,
            self.bother_beta >= 0.0,
            "0 or more",
        )?;
        number(
            "bother_gamma",
            self.bother_gamma,
            (0.0..=50.0).contains(&self.bother_gamma),
            "from 0 to 50",
        )?;
        check_zone("telos.time_zone", &self.time_zone)?;
        check_windows("telos.protected_windows", &self.protected_windows)?;
        check_lead("telos.window_lead_minutes", self.window_lead_minutes)?;
        minutes_of(&self.digest_at).map_err(|e| ("telos.digest_at".to_owned(), e.to_string()))?;
        for person in &self.owner_principals {
            check_person("telos.owner_principals", person)?;
        }
        for (person, settings) in &self.people {
            let key = format!("telos.people.\"{person}\"");
            check_person(&key, person)?;
            if let Some(zone) = &settings.time_zone {
                check_zone(&format!("{key}.time_zone"), zone)?;
            }
            if let Some(windows) = &settings.protected_windows {
                check_windows(&format!("{key}.protected_windows"), windows)?;
            }
            if let Some(lead) = settings.window_lead_minutes {
                check_lead(&format!("{key}.window_lead_minutes"), lead)?;
            }
            if let Some(at) = &settings.digest_at {
                minutes_of(at).map_err(|e| (format!("{key}.digest_at"), e.to_string()))?;
            }
        }
        Ok(())
    }
}

fn check_zone(key: &str, zone: &str) -> Result<(), (String, String)> {
    if zone.is_empty() || jiff::tz::TimeZone::get(zone).is_ok() {
        Ok(())
    } else {
        Err((
            key.to_owned(),
            format!("`{zone}` is not a known time zone (an IANA name such as Europe/Rome)"),
        ))
    }
}

fn check_windows(key: &str, windows: &[String]) -> Result<(), (String, String)> {
    for window in windows {
        Window::parse(window).map_err(|e| (key.to_owned(), e.to_string()))?;
    }
    Ok(())
}

fn check_lead(key: &str, lead: u32) -> Result<(), (String, String)> {
    if lead <= MAX_WINDOW_LEAD_MINUTES {
        Ok(())
    } else {
        Err((
            key.to_owned(),
            format!("must be from 0 to {MAX_WINDOW_LEAD_MINUTES} minutes, got {lead}"),
        ))
    }
}

fn check_person(key: &str, person: &str) -> Result<(), (String, String)> {
    match person.split_once(':') {
        Some((channel, sender)) if !channel.is_empty() && !sender.is_empty() => Ok(()),
        _ => Err((
            key.to_owned(),
            format!("`{person}` is not <channel>:<sender>, e.g. telegram:42"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_and_overnight_ones_wrap_midnight() {
        let night = Window::parse("22:30-07:30").unwrap();
        assert!(night.contains(23 * 60));
        assert!(night.contains(0));
        assert!(night.contains(7 * 60 + 29));
        assert!(!night.contains(7 * 60 + 30));
        assert!(!night.contains(12 * 60));
        let lunch = Window::parse("12:00-13:00").unwrap();
        assert!(lunch.contains(12 * 60) && !lunch.contains(13 * 60));
        for bad in ["25:00-07:00", "7-8", "12:00-12:00", "12:60-13:00", "12:00"] {
            assert!(Window::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn near_a_window_is_the_lead_before_its_start_on_the_wall_clock() {
        let local = Local {
            zone: jiff::tz::TimeZone::get("Europe/Rome").unwrap(),
            windows: DEFAULT_WINDOWS
                .iter()
                .map(|w| Window::parse(w).unwrap())
                .collect(),
            lead_minutes: 30,
        };
        let rome = |hh_mm: &str| {
            format!("2026-11-30T{hh_mm}")
                .parse::<jiff::civil::DateTime>()
                .unwrap()
                .to_zoned(local.zone.clone())
                .unwrap()
                .timestamp()
                .as_millisecond()
        };
        for (at, near) in [
            ("11:59", false),
            ("12:00", true),
            ("12:29", true),
            ("12:30", false), // inside: protected, not near
            ("13:30", false),
            ("19:05", true),
            ("22:30", true),
            ("22:29", false),
        ] {
            assert_eq!(local.near_window(rome(at)), near, "{at}");
        }
        let none = Local {
            lead_minutes: 0,
            ..local.clone()
        };
        assert!(!none.near_window(rome("12:10")));
        // Overnight from midnight: 23:45 is inside, not near.
        assert!(local.protected(rome("23:45")) && !local.near_window(rome("23:45")));
    }

    #[test]
    fn a_bad_setting_names_its_key() {
        let mut config = TelosConfig {
            theta: -1.0,
            ..TelosConfig::default()
        };
        assert_eq!(config.check().unwrap_err().0, "telos.theta");
        // θ = 0 would publish a proposal that fits nothing.
        config.theta = 0.0;
        assert_eq!(config.check().unwrap_err().0, "telos.theta");
        config.theta = 0.15;
        config.time_zone = "Mars/Olympus".into();
        assert_eq!(config.check().unwrap_err().0, "telos.time_zone");
        config.time_zone = "Europe/Rome".into();
        config.people.insert(
            "telegram:42".into(),
            TelosPerson {
                time_zone: None,
                protected_windows: Some(vec!["8-9".into()]),
                ..TelosPerson::default()
            },
        );
        assert_eq!(
            config.check().unwrap_err().0,
            "telos.people.\"telegram:42\".protected_windows"
        );
        config.people.insert(
            "telegram:42".into(),
            TelosPerson {
                digest_at: Some("21:75".into()),
                ..TelosPerson::default()
            },
        );
        assert_eq!(
            config.check().unwrap_err().0,
            "telos.people.\"telegram:42\".digest_at"
        );
        config.people.insert(
            "telegram:42".into(),
            TelosPerson {
                digest_at: Some("21:15".into()),
                ..TelosPerson::default()
            },
        );
        assert_eq!(config.digest_minute_for("telegram:42"), 21 * 60 + 15);
        config.window_lead_minutes = 241;
        assert_eq!(config.check().unwrap_err().0, "telos.window_lead_minutes");
        config.window_lead_minutes = 30;
        config.people.insert(
            "telegram:42".into(),
            TelosPerson {
                window_lead_minutes: Some(500),
                ..TelosPerson::default()
            },
        );
        assert_eq!(
            config.check().unwrap_err().0,
            "telos.people.\"telegram:42\".window_lead_minutes"
        );
        config.people.insert(
            "telegram:42".into(),
            TelosPerson {
                window_lead_minutes: Some(10),
                ..TelosPerson::default()
            },
        );
        assert!(config.check().is_ok());
        assert_eq!(config.local_for("telegram:42").lead_minutes, 10);
        assert_eq!(config.local_for("telegram:7").lead_minutes, 30);
        assert_eq!(config.digest_minute_for("telegram:7"), 20 * 60 + 30);
        config.people.clear();
        assert!(config.check().is_ok());
    }
}
