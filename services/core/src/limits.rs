//! Limits on what a caller may send, shared by every service's edge (issue 18, F5): a
//! field over its limit is refused with INVALID_ARGUMENT naming the field and the limit,
//! never echoing the value; where an error must quote a caller's value, at most
//! [`SHOWN`] characters of it. The proto comments state the same numbers.

/// Most characters of a caller's value an error message quotes.
pub const SHOWN: usize = 64;

/// A capability name (`fs:write`).
pub const CAPABILITY: usize = 64;
/// A call's target or a grant's pattern (a path is at most PATH_MAX).
pub const TARGET: usize = 4096;
/// An executor's name.
pub const EXECUTOR: usize = 64;
/// A call's arguments, JSON.
pub const ARGS_JSON: usize = 64 * 1024;
/// An approval token or a turn id (both 32 hex characters today).
pub const TOKEN: usize = 64;
/// What a person asked (a Telegram message is at most 4096 characters).
pub const QUERY: usize = 32 * 1024;
/// The intent the vaglio judges a call against.
pub const INTENT: usize = 64 * 1024;
/// A reason, a `granted_by`, a card's line.
pub const REASON: usize = 1024;
/// A grant's idempotency key.
pub const IDEMPOTENCY_KEY: usize = 128;
/// A card's extra JSON.
pub const EXTRA_JSON: usize = 16 * 1024;
/// A message a channel sends (Telegram's limit is 4096 characters).
pub const MESSAGE: usize = 16 * 1024;
/// Most records one list call returns.
pub const LIST: u32 = 1000;
/// The longest an approval may wait for a person.
pub const TTL_SECONDS: u32 = 7 * 24 * 3600;

/// A field over its limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TooBig {
    #[error("{field} is {len} bytes; the limit is {max} bytes")]
    Bytes {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{field} is {value}; the limit is {max}")]
    Number {
        field: &'static str,
        value: u64,
        max: u64,
    },
    #[error("{field} has {count} entries; the limit is {max}")]
    Entries {
        field: &'static str,
        count: usize,
        max: usize,
    },
}

/// `value` is at most `max` bytes.
pub fn bytes(field: &'static str, value: &str, max: usize) -> Result<(), TooBig> {
    if value.len() > max {
        return Err(TooBig::Bytes {
            field,
            len: value.len(),
            max,
        });
    }
    Ok(())
}

/// Every `(field, value, max)` is within its limit; the first that is not.
pub fn all(fields: &[(&'static str, &str, usize)]) -> Result<(), TooBig> {
    fields
        .iter()
        .try_for_each(|(field, value, max)| bytes(field, value, *max))
}

/// `value` is at most `max`.
pub fn number(field: &'static str, value: u64, max: u64) -> Result<(), TooBig> {
    if value > max {
        return Err(TooBig::Number { field, value, max });
    }
    Ok(())
}

/// A list has at most `max` entries.
pub fn entries(field: &'static str, count: usize, max: usize) -> Result<(), TooBig> {
    if count > max {
        return Err(TooBig::Entries { field, count, max });
    }
    Ok(())
}

/// A caller's value as an error may quote it: at most [`SHOWN`] characters, control
/// characters replaced, `…` when cut.
pub fn shown(value: &str) -> String {
    let mut out: String = value
        .chars()
        .take(SHOWN)
        .map(|c| if c.is_control() { '�' } else { c })
        .collect();
    if value.chars().nth(SHOWN).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_over_its_limit_is_named_with_its_limit_and_never_echoed() {
        let big = "x".repeat(16 * 1024);
        let e = bytes("capability", &big, CAPABILITY).unwrap_err();
        assert_eq!(
            e.to_string(),
            "capability is 16384 bytes; the limit is 64 bytes"
        );
        assert!(bytes("capability", "fs:write", CAPABILITY).is_ok());
        assert_eq!(
            all(&[("a", "ok", 2), ("b", "long", 3)])
                .unwrap_err()
                .to_string(),
            "b is 4 bytes; the limit is 3 bytes"
        );
        assert_eq!(
            number("ttl_seconds", u64::from(u32::MAX), u64::from(TTL_SECONDS))
                .unwrap_err()
                .to_string(),
            "ttl_seconds is 4294967295; the limit is 604800"
        );
        assert!(entries("lines", 3, 2).is_err());
    }

    #[test]
    fn a_quoted_value_is_cut_to_64_characters() {
        assert_eq!(shown("fs:wrote"), "fs:wrote");
        let quoted = shown(&"é".repeat(10_000));
        assert_eq!(quoted.chars().count(), SHOWN + 1);
        assert!(quoted.ends_with('…'));
        assert_eq!(shown("a\nb"), "a�b");
    }
}
