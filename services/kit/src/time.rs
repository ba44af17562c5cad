//! Time as the stores keep it (milliseconds since the Unix epoch, UTC) and as the
//! contracts carry it (`google.protobuf.Timestamp`).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Milliseconds to a protobuf timestamp.
pub fn to_timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// A protobuf timestamp to milliseconds; `None` when it is out of range.
pub fn from_timestamp(ts: &prost_types::Timestamp) -> Option<i64> {
    if !(0..1_000_000_000).contains(&ts.nanos) {
        return None;
    }
    ts.seconds
        .checked_mul(1000)?
        .checked_add(i64::from(ts.nanos / 1_000_000))
}

/// RFC 3339 in UTC with milliseconds, e.g. `2026-11-22T00:57:54.123Z`.
pub fn rfc3339(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(ts) => format!("{ts:.3}"),
        Err(_) => format!("{ms}ms"),
    }
}

/// A text that is not an RFC 3339 time, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not an RFC 3339 time: {reason}")]
pub struct NotRfc3339 {
    pub text: String,
    pub reason: String,
}

/// Parses RFC 3339 (`2026-12-31T23:00:00Z`, with an offset or `Z`) into milliseconds.
pub fn parse_rfc3339(text: &str) -> Result<i64, NotRfc3339> {
    text.parse::<jiff::Timestamp>()
        .map(|ts| ts.as_millisecond())
        .map_err(|e| NotRfc3339 {
            text: text.to_owned(),
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_including_before_the_epoch() {
        for ms in [0, 1, 999, 1_700_000_000_123, -1, -1001] {
            assert_eq!(from_timestamp(&to_timestamp(ms)), Some(ms), "{ms}");
        }
        assert_eq!(
            from_timestamp(&prost_types::Timestamp {
                seconds: 1,
                nanos: -5
            }),
            None
        );
    }

    #[test]
    fn rfc3339_prints_and_parses_utc() {
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13:20.123Z"),
            Ok(1_700_000_000_123)
        );
        assert_eq!(
            parse_rfc3339("2023-11-14T23:13:20.123+01:00"),
            Ok(1_700_000_000_123)
        );
        assert!(
            parse_rfc3339("next tuesday")
                .unwrap_err()
                .to_string()
                .contains("next tuesday")
        );
    }
}
