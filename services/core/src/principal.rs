//! A person as one channel sees them: the identity grants, approvals and pairings key on.

use std::fmt;

use metnos_proto::common::v1 as pb;

/// The terminal's channel (`metnos ask`, `metnos chat`): its person is the owner at the
/// terminal, who follows a turn's stream, has no push channel and no digest.
pub const TERMINAL: &str = "cli";

/// Longest channel or sender id accepted, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// A person as seen by one channel. Its parts are private: every principal went through
/// [`Principal::new`]'s checks (JSON too: `{"channel", "sender_id"}`, read through them).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "Unchecked")]
pub struct Principal {
    channel: String,
    sender_id: String,
}

/// A principal as written, before its checks.
#[derive(serde::Deserialize)]
struct Unchecked {
    channel: String,
    sender_id: String,
}

impl TryFrom<Unchecked> for Principal {
    type Error = PrincipalError;

    fn try_from(written: Unchecked) -> Result<Principal, PrincipalError> {
        Principal::new(&written.channel, &written.sender_id)
    }
}

/// Why a principal cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalError {
    #[error("principal has an empty {0}")]
    Empty(&'static str),
    #[error("principal {0} is longer than its limit of {MAX_ID_LEN} bytes")]
    TooLong(&'static str),
    #[error("principal {0} contains a control character")]
    ControlCharacter(&'static str),
}

/// A request's principal that does not hold, naming the field that carried it: what every
/// edge answers INVALID_ARGUMENT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadPrincipal {
    Missing(&'static str),
    Invalid {
        field: &'static str,
        error: PrincipalError,
    },
}

impl std::error::Error for BadPrincipal {}

impl fmt::Display for BadPrincipal {
    /// The field's path and what is wrong (`context.principal.sender_id is longer than its
    /// limit of 256 bytes`), never the value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadPrincipal::Missing(field) => {
                write!(f, "{field} is missing (channel and sender_id are required)")
            }
            BadPrincipal::Invalid { field, error } => match error {
                PrincipalError::Empty(part) => write!(f, "{field}.{part} is empty"),
                PrincipalError::TooLong(part) => write!(
                    f,
                    "{field}.{part} is longer than its limit of {MAX_ID_LEN} bytes"
                ),
                PrincipalError::ControlCharacter(part) => {
                    write!(f, "{field}.{part} contains a control character")
                }
            },
        }
    }
}

impl Principal {
    /// The principal a request carries in `field`, which must be there: the one conversion
    /// at every edge, with the same limits everywhere.
    pub fn required(
        field: &'static str,
        message: Option<&pb::Principal>,
    ) -> Result<Principal, BadPrincipal> {
        Principal::optional(field, message)?.ok_or(BadPrincipal::Missing(field))
    }

    /// The principal a request may carry in `field`: none when absent, refused when given
    /// and not valid (never quietly dropped).
    pub fn optional(
        field: &'static str,
        message: Option<&pb::Principal>,
    ) -> Result<Option<Principal>, BadPrincipal> {
        message
            .map(|p| {
                Principal::new(&p.channel, &p.sender_id)
                    .map_err(|error| BadPrincipal::Invalid { field, error })
            })
            .transpose()
    }

    /// A checked principal: both parts non-empty, short, without control characters.
    pub fn new(channel: &str, sender_id: &str) -> Result<Principal, PrincipalError> {
        for (field, value) in [("channel", channel), ("sender_id", sender_id)] {
            if value.is_empty() {
                return Err(PrincipalError::Empty(field));
            }
            if value.len() > MAX_ID_LEN {
                return Err(PrincipalError::TooLong(field));
            }
            if value.chars().any(char::is_control) {
                return Err(PrincipalError::ControlCharacter(field));
            }
        }
        Ok(Principal {
            channel: channel.to_owned(),
            sender_id: sender_id.to_owned(),
        })
    }

    /// The channel that sees this person (`telegram`, [`TERMINAL`]).
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Who the person is on that channel (a Telegram user id, the terminal's user).
    pub fn sender_id(&self) -> &str {
        &self.sender_id
    }

    /// Whether this is the person at the terminal ([`TERMINAL`]).
    pub fn is_terminal(&self) -> bool {
        self.channel == TERMINAL
    }

    /// The contract's message.
    pub fn to_proto(&self) -> pb::Principal {
        pb::Principal {
            channel: self.channel.clone(),
            sender_id: self.sender_id.clone(),
        }
    }
}

impl TryFrom<&pb::Principal> for Principal {
    type Error = PrincipalError;

    fn try_from(message: &pb::Principal) -> Result<Principal, PrincipalError> {
        Principal::new(&message.channel, &message.sender_id)
    }
}

impl From<&Principal> for pb::Principal {
    fn from(principal: &Principal) -> pb::Principal {
        principal.to_proto()
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.channel, self.sender_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_needs_both_parts_short_and_printable() {
        assert!(Principal::new("telegram", "42").is_ok());
        assert_eq!(
            Principal::new("", "42"),
            Err(PrincipalError::Empty("channel"))
        );
        assert_eq!(
            Principal::new("telegram", ""),
            Err(PrincipalError::Empty("sender_id"))
        );
        assert_eq!(
            Principal::new("telegram", &"9".repeat(MAX_ID_LEN + 1)),
            Err(PrincipalError::TooLong("sender_id"))
        );
        assert_eq!(
            Principal::new("tele\ngram", "42"),
            Err(PrincipalError::ControlCharacter("channel"))
        );
        // At an edge, the field is named; absent and present-but-invalid are told apart.
        let long = pb::Principal {
            channel: "telegram".into(),
            sender_id: "7".repeat(100 * 1024),
        };
        let error = Principal::optional("context.principal", Some(&long)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "context.principal.sender_id is longer than its limit of 256 bytes"
        );
        assert_eq!(Principal::optional("principal", None), Ok(None));
        assert_eq!(
            Principal::required("principal", None)
                .unwrap_err()
                .to_string(),
            "principal is missing (channel and sender_id are required)"
        );
        let message = pb::Principal {
            channel: "cli".into(),
            sender_id: "roberto".into(),
        };
        let principal = Principal::try_from(&message).unwrap();
        assert_eq!(principal.to_proto(), message);
        assert_eq!(principal.to_string(), "cli:roberto");
        assert!(principal.is_terminal());
        assert_eq!(
            (principal.channel(), principal.sender_id()),
            ("cli", "roberto")
        );
    }

    #[test]
    fn a_principal_read_from_json_goes_through_the_same_checks() {
        let anna = Principal::new("telegram", "42").unwrap();
        let written = serde_json::to_string(&anna).unwrap();
        assert_eq!(written, r#"{"channel":"telegram","sender_id":"42"}"#);
        assert_eq!(serde_json::from_str::<Principal>(&written).unwrap(), anna);
        for bad in [
            r#"{"channel":"","sender_id":"42"}"#,
            r#"{"channel":"telegram","sender_id":"4\n2"}"#,
        ] {
            let err = serde_json::from_str::<Principal>(bad).unwrap_err();
            assert!(err.to_string().contains("principal"), "{bad}: {err}");
        }
    }
}
