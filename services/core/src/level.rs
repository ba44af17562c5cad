//! The autonomy level: how much Metnos may do for a person without asking (seed policy.md
//! ch. 3). One type for every service, the config and the contracts.

use std::fmt;

use metnos_proto::common::v1 as pb;
use serde::{Deserialize, Serialize};

/// How much Metnos may do for a person without asking. Ordered from least to most.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub enum AutonomyLevel {
    /// Read-only capabilities; anything with side effects is denied.
    ReadOnly,
    /// Fully operational, but every action with effects on the world needs approval.
    #[default]
    Supervised,
    /// Everything allowed except the capabilities whose default approval is "always".
    Full,
}

/// A level name that is not one of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown autonomy level `{0}`; the levels are ReadOnly, Supervised and Full")]
pub struct UnknownLevel(pub String);

/// A contract's level that is unspecified or out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("level is unspecified")]
pub struct UnspecifiedLevel;

impl AutonomyLevel {
    pub const ALL: [AutonomyLevel; 3] = [
        AutonomyLevel::ReadOnly,
        AutonomyLevel::Supervised,
        AutonomyLevel::Full,
    ];

    /// The name stores, config and logs use: `ReadOnly`, `Supervised`, `Full`.
    pub fn as_str(self) -> &'static str {
        match self {
            AutonomyLevel::ReadOnly => "ReadOnly",
            AutonomyLevel::Supervised => "Supervised",
            AutonomyLevel::Full => "Full",
        }
    }

    /// Parses `ReadOnly`, `read-only`, `read_only`, `readonly`, `Supervised`, `full`, …
    pub fn parse(text: &str) -> Result<AutonomyLevel, UnknownLevel> {
        let folded: String = text
            .chars()
            .filter(|c| !matches!(c, '-' | '_' | ' '))
            .collect::<String>()
            .to_ascii_lowercase();
        match folded.as_str() {
            "readonly" => Ok(AutonomyLevel::ReadOnly),
            "supervised" => Ok(AutonomyLevel::Supervised),
            "full" => Ok(AutonomyLevel::Full),
            _ => Err(UnknownLevel(text.to_owned())),
        }
    }

    /// The contract's enum.
    pub fn to_proto(self) -> pb::AutonomyLevel {
        match self {
            AutonomyLevel::ReadOnly => pb::AutonomyLevel::ReadOnly,
            AutonomyLevel::Supervised => pb::AutonomyLevel::Supervised,
            AutonomyLevel::Full => pb::AutonomyLevel::Full,
        }
    }

    /// The contract's field value (`as i32`).
    pub fn to_wire(self) -> i32 {
        self.to_proto() as i32
    }

    /// A contract's field value; unspecified and unknown numbers are refused.
    pub fn from_wire(value: i32) -> Result<AutonomyLevel, UnspecifiedLevel> {
        match pb::AutonomyLevel::try_from(value) {
            Ok(level) => AutonomyLevel::try_from(level),
            Err(_) => Err(UnspecifiedLevel),
        }
    }
}

impl TryFrom<pb::AutonomyLevel> for AutonomyLevel {
    type Error = UnspecifiedLevel;

    fn try_from(level: pb::AutonomyLevel) -> Result<AutonomyLevel, UnspecifiedLevel> {
        match level {
            pb::AutonomyLevel::ReadOnly => Ok(AutonomyLevel::ReadOnly),
            pb::AutonomyLevel::Supervised => Ok(AutonomyLevel::Supervised),
            pb::AutonomyLevel::Full => Ok(AutonomyLevel::Full),
            pb::AutonomyLevel::Unspecified => Err(UnspecifiedLevel),
        }
    }
}

impl From<AutonomyLevel> for pb::AutonomyLevel {
    fn from(level: AutonomyLevel) -> pb::AutonomyLevel {
        level.to_proto()
    }
}

impl std::str::FromStr for AutonomyLevel {
    type Err = UnknownLevel;

    fn from_str(text: &str) -> Result<AutonomyLevel, UnknownLevel> {
        AutonomyLevel::parse(text)
    }
}

impl fmt::Display for AutonomyLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_goes_to_the_wire_and_back_and_unspecified_is_refused() {
        for level in AutonomyLevel::ALL {
            assert_eq!(AutonomyLevel::from_wire(level.to_wire()), Ok(level));
            assert_eq!(AutonomyLevel::parse(level.as_str()), Ok(level));
        }
        assert_eq!(AutonomyLevel::from_wire(0), Err(UnspecifiedLevel));
        assert_eq!(AutonomyLevel::from_wire(42), Err(UnspecifiedLevel));
    }

    #[test]
    fn names_parse_in_their_usual_spellings() {
        for text in [
            "ReadOnly",
            "read-only",
            "read_only",
            "readonly",
            "Read Only",
        ] {
            assert_eq!(AutonomyLevel::parse(text), Ok(AutonomyLevel::ReadOnly));
        }
        assert_eq!(AutonomyLevel::parse("FULL"), Ok(AutonomyLevel::Full));
        let error = AutonomyLevel::parse("root").unwrap_err().to_string();
        assert!(
            error.contains("`root`") && error.contains("Supervised"),
            "{error}"
        );
    }

    #[test]
    fn config_and_stores_write_the_names() {
        assert_eq!(
            serde_json::to_string(&AutonomyLevel::ReadOnly).unwrap(),
            "\"ReadOnly\""
        );
        let full: AutonomyLevel = serde_json::from_str("\"Full\"").unwrap();
        assert_eq!(full, AutonomyLevel::Full);
        assert!(AutonomyLevel::ReadOnly < AutonomyLevel::Full);
    }
}
