//! A calendar's events in a range: iCalendar parsed by `icalendar`, each event's
//! recurrence (RRULE, RDATE, EXDATE) expanded by `rrule` in the event's own time zone, so
//! a weekly 09:00 in Europe/Rome stays 09:00 across a daylight-saving change; an instance
//! moved on its own (RECURRENCE-ID) replaces the one it moves.

use std::collections::HashSet;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};

use super::super::BuiltinError;

/// The longest range listed at once.
const MAX_RANGE_DAYS: i64 = 400;
/// The most instances listed (all events together).
const MAX_INSTANCES: usize = 5000;
/// The most instances of one recurring event expanded.
const MAX_PER_EVENT: u16 = 2000;
/// The most characters of a description shown.
const MAX_DESCRIPTION_CHARS: usize = 1000;
/// The most characters of a title, a place or an id shown.
const MAX_TEXT_CHARS: usize = 500;
/// The most steps one event's recurrence may take before the range ends (a rule that
/// starts in 2000 and repeats every second never reaches today within it).
const MAX_STEPS_PER_EVENT: usize = 100_000;
/// The deepest nesting of components read (a calendar is 2 deep, an alarm 3).
const MAX_DEPTH: usize = 8;

/// The range `from`..`to` a listing asks for: days or times, local unless they say their
/// offset; today and a week after `from` when not given.
pub fn range(
    from: Option<&str>,
    to: Option<&str>,
) -> Result<(jiff::Timestamp, jiff::Timestamp), BuiltinError> {
    let zone = super::super::zone::system();
    let from = match from.filter(|t| !t.trim().is_empty()) {
        Some(text) => moment(text, "from")?,
        None => jiff::Timestamp::now()
            .to_zoned(zone.clone())
            .start_of_day()
            .map_err(|e| format!("today: {e}"))?
            .timestamp(),
    };
    let to = match to.filter(|t| !t.trim().is_empty()) {
        Some(text) => moment(text, "to")?,
        None => from
            .to_zoned(zone)
            .checked_add(jiff::Span::new().days(7))
            .map_err(|e| format!("a week after `from`: {e}"))?
            .timestamp(),
    };
    if to <= from {
        return Err("`to` must be after `from`".into());
    }
    if to.duration_since(from).as_secs() > MAX_RANGE_DAYS * 86_400 {
        return Err(format!("the range is longer than {MAX_RANGE_DAYS} days: ask for less").into());
    }
    Ok((from, to))
}

/// A day (its local midnight), a local time, or a time with its offset.
pub fn moment(text: &str, key: &str) -> Result<jiff::Timestamp, BuiltinError> {
    let text = text.trim();
    if let Ok(t) = text.parse::<jiff::Timestamp>() {
        return Ok(t);
    }
    let zone = super::super::zone::system();
    let civil = text
        .parse::<jiff::civil::DateTime>()
        .or_else(|_| {
            text.parse::<jiff::civil::Date>()
                .map(|d| d.to_datetime(jiff::civil::Time::midnight()))
        })
        .map_err(|_| {
            let shown: String = text.chars().take(40).collect();
            format!("`{key}` must be YYYY-MM-DD or YYYY-MM-DDTHH:MM, not `{shown}`")
        })?;
    Ok(civil
        .to_zoned(zone)
        .map_err(|e| format!("`{key}`: {e}"))?
        .timestamp())
}

/// The events of `texts` (iCalendar documents) overlapping `from`..`to`.
pub struct Listed {
    pub events: Vec<Value>,
    /// More instances than could be listed.
    pub limited: bool,
    /// Events that could not be read (a time zone unknown, a rule malformed).
    pub skipped: usize,
}

/// One VEVENT's properties that matter here.
struct Event<'a> {
    component: &'a icalendar::parser::Component<'a>,
}

impl Event<'_> {
    fn prop(&self, name: &str) -> Option<&icalendar::parser::Property<'_>> {
        self.component.find_prop(name)
    }

    fn text(&self, name: &str) -> String {
        self.prop(name)
            .map(|p| {
                p.val
                    .clone()
                    .unescape_text()
                    .as_str()
                    .chars()
                    .take(MAX_TEXT_CHARS)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A date-time property as rrule reads it: its TZID and VALUE kept, nothing else.
    fn line(prop: &icalendar::parser::Property<'_>, as_name: &str) -> String {
        let mut line = as_name.to_owned();
        for p in &prop.params {
            let key = p.key.as_str().to_ascii_uppercase();
            if let (true, Some(value)) = (key == "TZID" || key == "VALUE", &p.val) {
                line.push_str(&format!(";{key}={}", value.as_str().trim_matches('"')));
            }
        }
        line.push(':');
        line.push_str(prop.val.as_str());
        line
    }

    fn all_day(&self) -> bool {
        self.prop("DTSTART").is_some_and(|p| {
            p.params.iter().any(|q| {
                q.key.as_str().eq_ignore_ascii_case("VALUE")
                    && q.val
                        .as_ref()
                        .is_some_and(|v| v.as_str().eq_ignore_ascii_case("DATE"))
            }) || !p.val.as_str().contains('T')
        })
    }

    /// The instant a date-time property names, in its own zone.
    fn instant(prop: &icalendar::parser::Property<'_>) -> Option<DateTime<rrule::Tz>> {
        let text = format!("{}\nRRULE:FREQ=DAILY;COUNT=1", Self::line(prop, "DTSTART"));
        text.parse::<rrule::RRuleSet>()
            .ok()
            .map(|set| *set.get_dt_start())
    }

    /// How long each instance lasts.
    fn duration(&self, start: &DateTime<rrule::Tz>) -> chrono::Duration {
        if let Some(end) = self.prop("DTEND").and_then(Self::instant) {
            return end
                .signed_duration_since(*start)
                .max(chrono::Duration::zero());
        }
        if let Some(span) = self
            .prop("DURATION")
            .and_then(|p| p.val.as_str().parse::<jiff::Span>().ok())
            .and_then(|s| {
                s.to_duration(jiff::SpanRelativeTo::days_are_24_hours())
                    .ok()
            })
        {
            return chrono::Duration::seconds(span.as_secs().max(0));
        }
        if self.all_day() {
            chrono::Duration::days(1)
        } else {
            chrono::Duration::zero()
        }
    }

    /// The rule set: DTSTART with its RRULE, RDATEs and EXDATEs (a single event: once).
    fn rules(&self) -> Option<rrule::RRuleSet> {
        let start = self.prop("DTSTART")?;
        let mut text = Self::line(start, "DTSTART");
        let mut recurs = false;
        for p in &self.component.properties {
            match p.name.as_str() {
                "RRULE" => {
                    text.push_str(&format!("\nRRULE:{}", p.val.as_str()));
                    recurs = true;
                }
                "RDATE" => {
                    text.push('\n');
                    text.push_str(&Self::line(p, "RDATE"));
                    recurs = true;
                }
                "EXDATE" => {
                    text.push('\n');
                    text.push_str(&Self::line(p, "EXDATE"));
                }
                _ => {}
            }
        }
        if !recurs {
            text.push_str("\nRRULE:FREQ=DAILY;COUNT=1");
        }
        text.parse().ok()
    }
}

fn to_rrule(t: &jiff::Timestamp) -> DateTime<rrule::Tz> {
    let utc = Utc
        .timestamp_opt(t.as_second(), 0)
        .single()
        .unwrap_or_default();
    utc.with_timezone(&rrule::Tz::UTC)
}

/// Every event of `texts` overlapping `from`..`to`, sorted by start.
pub fn expand(
    texts: &[String],
    from: &jiff::Timestamp,
    to: &jiff::Timestamp,
) -> Result<Listed, BuiltinError> {
    let (from, to) = (to_rrule(from), to_rrule(to));
    let mut unfolded = Vec::new();
    for text in texts {
        check_depth(text)?;
        unfolded.push(icalendar::parser::unfold(text));
    }
    let mut calendars = Vec::new();
    for text in &unfolded {
        let calendar = icalendar::parser::read_calendar(text).map_err(|e| {
            format!(
                "the calendar is not iCalendar: {}",
                e.lines().next().unwrap_or_default()
            )
        })?;
        calendars.push(calendar);
    }
    let vevents: Vec<Event<'_>> = calendars
        .iter()
        .flat_map(|c| c.components.iter())
        .filter(|c| c.name.as_str().eq_ignore_ascii_case("VEVENT"))
        .map(|component| Event { component })
        .collect();
    // Instances moved or changed on their own: the series leaves them out.
    let moved: HashSet<(String, i64)> = vevents
        .iter()
        .filter_map(|e| {
            let at = Event::instant(e.prop("RECURRENCE-ID")?)?;
            Some((e.text("UID"), at.timestamp()))
        })
        .collect();
    let mut listed = Listed {
        events: Vec::new(),
        limited: false,
        skipped: 0,
    };
    let mut found: Vec<(i64, Value)> = Vec::new();
    for event in &vevents {
        if event.text("STATUS").eq_ignore_ascii_case("CANCELLED") {
            continue;
        }
        let Some(rules) = event.rules() else {
            listed.skipped += 1;
            continue;
        };
        let duration = event.duration(rules.get_dt_start());
        let own = event.prop("RECURRENCE-ID").is_some();
        let uid = event.text("UID");
        let room = MAX_INSTANCES
            .saturating_sub(found.len())
            .min(usize::from(MAX_PER_EVENT));
        let (starts, complete) = starts_in(&rules, from - duration, to, room);
        listed.limited |= !complete;
        for start in starts {
            let end = start + duration;
            let overlaps = start < to && (end > from || (duration.is_zero() && start >= from));
            if !overlaps || (!own && moved.contains(&(uid.clone(), start.timestamp()))) {
                continue;
            }
            found.push((start.timestamp(), instance(event, &start, &end)));
        }
    }
    found.sort_by_key(|(at, _)| *at);
    listed.events = found.into_iter().map(|(_, v)| v).collect();
    Ok(listed)
}

impl Listed {
    /// Keeps the first events whose JSON fits in `bytes` (the rest are said to be left out).
    pub fn within(mut self, bytes: u64) -> Listed {
        let mut used = 0u64;
        let keep = self
            .events
            .iter()
            .take_while(|e| {
                used += e.to_string().len() as u64 + 1;
                used <= bytes
            })
            .count();
        if keep < self.events.len() {
            self.events.truncate(keep);
            self.limited = true;
        }
        self
    }
}

/// The starts of `rules` from `after` (excluded) to `before` (excluded), at most `room`
/// of them, walking at most [`MAX_STEPS_PER_EVENT`] steps from the first; whether the walk
/// reached the end of the range.
fn starts_in(
    rules: &rrule::RRuleSet,
    after: DateTime<rrule::Tz>,
    before: DateTime<rrule::Tz>,
    room: usize,
) -> (Vec<DateTime<rrule::Tz>>, bool) {
    let mut starts = Vec::new();
    for (step, start) in rules.into_iter().enumerate() {
        if start >= before {
            return (starts, true);
        }
        if step >= MAX_STEPS_PER_EVENT || starts.len() >= room {
            return (starts, false);
        }
        if start > after {
            starts.push(start);
        }
    }
    (starts, true)
}

/// Refuses a calendar whose components nest deeper than [`MAX_DEPTH`] (the parser would
/// recurse as deep).
fn check_depth(text: &str) -> Result<(), BuiltinError> {
    let mut depth = 0usize;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.len() >= 6 && line[..6].eq_ignore_ascii_case("BEGIN:") {
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(format!(
                    "the calendar nests components deeper than {MAX_DEPTH}: not read"
                )
                .into());
            }
        } else if line.len() >= 4 && line[..4].eq_ignore_ascii_case("END:") {
            depth = depth.saturating_sub(1);
        }
    }
    Ok(())
}

fn instance(event: &Event<'_>, start: &DateTime<rrule::Tz>, end: &DateTime<rrule::Tz>) -> Value {
    let all_day = event.all_day();
    let shown = |t: &DateTime<rrule::Tz>| {
        if all_day {
            t.format("%Y-%m-%d").to_string()
        } else {
            t.to_rfc3339()
        }
    };
    let description: String = event
        .text("DESCRIPTION")
        .chars()
        .take(MAX_DESCRIPTION_CHARS)
        .collect();
    json!({
        "title": event.text("SUMMARY"),
        "start": shown(start),
        "end": shown(end),
        "all_day": all_day,
        "time_zone": start.timezone().name(),
        "location": event.text("LOCATION"),
        "description": description,
        "uid": event.text("UID"),
        "recurring": event.prop("RRULE").is_some() || event.prop("RDATE").is_some(),
    })
}

/// A new event's UID and iCalendar text, its times in UTC; line breaks in what it is
/// given become spaces (a title cannot add a property of its own).
pub fn new_event(
    title: &str,
    location: &str,
    start: jiff::Timestamp,
    end: jiff::Timestamp,
) -> Result<(String, String), BuiltinError> {
    use icalendar::{Component, EventLike};
    let flat = |text: &str| -> String {
        text.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(1000)
            .collect()
    };
    let title = flat(title);
    if title.trim().is_empty() {
        return Err("`title` is empty".into());
    }
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| format!("no randomness for the event's id: {e}"))?;
    let uid = format!("{}@metnos", hex::encode(random));
    let utc = |t: jiff::Timestamp| {
        Utc.timestamp_opt(t.as_second(), 0)
            .single()
            .unwrap_or_default()
    };
    let mut event = icalendar::Event::new();
    event
        .uid(&uid)
        .summary(&title)
        .starts(utc(start))
        .ends(utc(end));
    let location = flat(location);
    if !location.trim().is_empty() {
        event.location(&location);
    }
    let mut calendar = icalendar::Calendar::new();
    calendar.push(event.done());
    Ok((uid, calendar.done().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> jiff::Timestamp {
        text.parse().unwrap()
    }

    const WEEKLY: &str = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\n\
BEGIN:VEVENT\r\nUID:w1\r\nDTSTAMP:20260101T000000Z\r\n\
DTSTART;TZID=Europe/Rome:20260316T090000\r\nDTEND;TZID=Europe/Rome:20260316T100000\r\n\
RRULE:FREQ=WEEKLY;COUNT=4\r\nEXDATE;TZID=Europe/Rome:20260330T090000\r\nSUMMARY:Stand-up\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:w1\r\nDTSTAMP:20260101T000000Z\r\nRECURRENCE-ID;TZID=Europe/Rome:20260323T090000\r\n\
DTSTART;TZID=Europe/Rome:20260323T110000\r\nDTEND;TZID=Europe/Rome:20260323T120000\r\nSUMMARY:Stand-up (moved)\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:d1\r\nDTSTAMP:20260101T000000Z\r\nDTSTART;VALUE=DATE:20260320\r\nSUMMARY:Holiday\r\nEND:VEVENT\r\n\
END:VCALENDAR\r\n";

    #[test]
    fn a_weekly_event_keeps_its_local_hour_across_daylight_saving_and_honours_exceptions() {
        let listed = expand(
            &[WEEKLY.to_owned()],
            &ts("2026-03-01T00:00:00Z"),
            &ts("2026-05-01T00:00:00Z"),
        )
        .unwrap();
        let rows: Vec<(String, String)> = listed
            .events
            .iter()
            .map(|e| {
                (
                    e["title"].as_str().unwrap().to_owned(),
                    e["start"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (
                    "Stand-up".to_owned(),
                    "2026-03-16T09:00:00+01:00".to_owned()
                ),
                ("Holiday".to_owned(), "2026-03-20".to_owned()),
                (
                    "Stand-up (moved)".to_owned(),
                    "2026-03-23T11:00:00+01:00".to_owned()
                ),
                // 29 March: Europe/Rome moves to summer time; still 09:00 local.
                (
                    "Stand-up".to_owned(),
                    "2026-04-06T09:00:00+02:00".to_owned()
                ),
            ]
        );
        assert_eq!(listed.events[0]["end"], "2026-03-16T10:00:00+01:00");
        assert_eq!(listed.events[1]["all_day"], true);
    }

    #[test]
    fn only_events_overlapping_the_range_are_listed() {
        let listed = expand(
            &[WEEKLY.to_owned()],
            &ts("2026-03-16T09:30:00Z"),
            &ts("2026-03-21T00:00:00Z"),
        )
        .unwrap();
        let titles: Vec<&str> = listed
            .events
            .iter()
            .map(|e| e["title"].as_str().unwrap())
            .collect();
        // 09:00-10:00 Rome is 08:00-09:00 UTC: over before the range starts.
        assert_eq!(titles, ["Holiday"]);
    }

    #[test]
    fn a_new_event_s_title_cannot_add_a_property() {
        let (uid, ics) = new_event(
            "Dentist\r\nATTENDEE:mailto:x@evil.example",
            "Via Roma 1",
            ts("2026-12-01T14:00:00Z"),
            ts("2026-12-01T15:00:00Z"),
        )
        .unwrap();
        assert!(ics.contains(&format!("UID:{uid}")), "{ics}");
        assert!(!ics.contains("\nATTENDEE"), "{ics}");
        assert!(ics.contains("DTSTART:20261201T140000Z"), "{ics}");
        let listed = expand(
            &[ics],
            &ts("2026-12-01T00:00:00Z"),
            &ts("2026-12-02T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(listed.events.len(), 1);
        assert!(
            listed.events[0]["title"]
                .as_str()
                .unwrap()
                .starts_with("Dentist  ATTENDEE")
        );
    }

    #[test]
    fn a_hostile_calendar_is_bounded_and_named() {
        let every_second = "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:s\r\nDTSTART:20000101T000000Z\r\nRRULE:FREQ=SECONDLY\r\nSUMMARY:tick\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:d\r\nDTSTART:20260301T000000Z\r\nRRULE:FREQ=HOURLY\r\nSUMMARY:hourly\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n";
        let listed = expand(
            &[every_second.to_owned()],
            &ts("2026-03-01T00:00:00Z"),
            &ts("2026-06-01T00:00:00Z"),
        )
        .unwrap();
        // The rule from 2000 never reaches the range within its steps: left out, and said.
        assert!(listed.limited);
        assert!(listed.events.iter().all(|e| e["title"] == "hourly"));
        assert_eq!(listed.events.len(), usize::from(MAX_PER_EVENT));
        let deep = format!(
            "{}{}",
            "BEGIN:X\r\n".repeat(50_000),
            "END:X\r\n".repeat(50_000)
        );
        let error = expand(
            &[deep],
            &ts("2026-03-01T00:00:00Z"),
            &ts("2026-03-02T00:00:00Z"),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(error.contains("nests components deeper"), "{error}");
        let long = format!(
            "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:l\r\nDTSTART:20260301T090000Z\r\nSUMMARY:{}\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
            "x".repeat(100_000)
        );
        let listed = expand(
            &[long],
            &ts("2026-03-01T00:00:00Z"),
            &ts("2026-03-02T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(
            listed.events[0]["title"].as_str().unwrap().len(),
            MAX_TEXT_CHARS
        );
    }

    #[test]
    fn bad_ranges_and_times_are_named() {
        assert!(
            range(Some("2026-12-02"), Some("2026-12-01"))
                .unwrap_err()
                .to_string()
                .contains("after")
        );
        assert!(
            range(Some("2026-01-01"), Some("2028-01-01"))
                .unwrap_err()
                .to_string()
                .contains("400 days")
        );
        assert!(
            moment("tomorrow", "from")
                .unwrap_err()
                .to_string()
                .contains("`from`")
        );
        assert_eq!(
            moment("2026-12-01T15:00:00Z", "x").unwrap(),
            ts("2026-12-01T15:00:00Z")
        );
        assert!(range(None, None).is_ok());
    }
}
