//! The closed capability registry (seed policy.md ch. 2): the dictionary of actions
//! Metnos recognises, each with its target kind. Adding a capability is a code change with
//! tests, never runtime registration: the action vocabulary is a security asset.

use std::fmt;

/// When an action of a capability needs the person's confirmation by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DefaultApproval {
    /// Never asks (zero cost, no side effects on the world).
    None,
    /// Asks once per target; a grant remembers the answer.
    PerTarget,
    /// Asks every time, at every level; never granted.
    Always,
}

impl DefaultApproval {
    pub fn as_str(self) -> &'static str {
        match self {
            DefaultApproval::None => "none",
            DefaultApproval::PerTarget => "per_target",
            DefaultApproval::Always => "always",
        }
    }
}

/// How a capability's target is written in grants and matched against a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetKind {
    /// A filesystem path; grants hold globs (`~/Documents/invoices-2026/*`).
    PathGlob,
    /// A URL or host; grants hold a host or a `*.example.com` wildcard.
    Host,
    /// Compared for equality.
    Exact,
    /// No target.
    None,
}

impl TargetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::PathGlob => "path_glob",
            TargetKind::Host => "host",
            TargetKind::Exact => "exact",
            TargetKind::None => "none",
        }
    }
}

/// One of the fourteen capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    FsRead,
    FsWrite,
    CodeExec,
    NetworkHttp,
    LlmLocal,
    LlmOnline,
    MailRead,
    MailSend,
    ChannelIn,
    ChannelOut,
    TimeRead,
    ParseLocal,
    CalendarRead,
    CalendarWrite,
}

/// A registry entry: the seed's four attributes plus `reads_only`, which the ReadOnly
/// rule needs (seed ch. 3.1: "read capabilities … stay approval_required").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapabilitySpec {
    pub capability: Capability,
    pub name: &'static str,
    /// Changes the world irreversibly.
    pub critical: bool,
    pub default_approval: DefaultApproval,
    pub target_kind: TargetKind,
    /// Only reads: no effect visible outside Metnos, no cost.
    pub reads_only: bool,
    pub description: &'static str,
}

impl CapabilitySpec {
    /// Whether a grant for this capability could ever be consulted: only per-target
    /// capabilities with a target ("always" ones are asked every time).
    pub fn grantable(&self) -> bool {
        self.default_approval == DefaultApproval::PerTarget && self.target_kind != TargetKind::None
    }
}

const fn spec(
    capability: Capability,
    name: &'static str,
    critical: bool,
    default_approval: DefaultApproval,
    target_kind: TargetKind,
    reads_only: bool,
    description: &'static str,
) -> CapabilitySpec {
    CapabilitySpec {
        capability,
        name,
        critical,
        default_approval,
        target_kind,
        reads_only,
        description,
    }
}

use DefaultApproval as A;
use TargetKind as K;

/// The registry, in the seed's order.
/// `calendar:write` (issue 44) comes last, after the seed's thirteen: adding an event to
/// one of the person's calendars changes nothing irreversibly (the event can be deleted),
/// so it is not critical; it is per target (the calendar) and writes, so the three rules
/// put it beside `network:http`: denied at ReadOnly, asked at Supervised, allowed at Full.
pub const REGISTRY: [CapabilitySpec; 14] = [
    spec(
        Capability::FsRead,
        "fs:read",
        false,
        A::PerTarget,
        K::PathGlob,
        true,
        "read files from the local filesystem within declared path_globs",
    ),
    spec(
        Capability::FsWrite,
        "fs:write",
        true,
        A::PerTarget,
        K::PathGlob,
        false,
        "write/modify files within path_globs (critical)",
    ),
    spec(
        Capability::CodeExec,
        "code:exec",
        true,
        A::Always,
        K::Exact,
        false,
        "execute a shell command from a whitelist (e.g. package manager)",
    ),
    spec(
        Capability::NetworkHttp,
        "network:http",
        false,
        A::PerTarget,
        K::Host,
        false,
        "HTTP/HTTPS GET/POST to authorised hosts",
    ),
    spec(
        Capability::LlmLocal,
        "llm:local",
        false,
        A::None,
        K::None,
        true,
        "local LLM call (Ollama, llama.cpp), zero cost",
    ),
    spec(
        Capability::LlmOnline,
        "llm:online",
        false,
        A::PerTarget,
        // The provider's host (issue 17: policy is asked with it, so a grant can name
        // one provider; the seed had no target).
        K::Host,
        false,
        "online LLM call (Anthropic, OpenAI, ...), cost > 0",
    ),
    spec(
        Capability::MailRead,
        "mail:read",
        false,
        A::PerTarget,
        K::Exact,
        true,
        "read IMAP messages from an authorised mailbox",
    ),
    spec(
        Capability::MailSend,
        "mail:send",
        true,
        A::Always,
        K::Exact,
        false,
        "SMTP send to recipients (irreversible, high stakes)",
    ),
    spec(
        Capability::ChannelIn,
        "channel:in",
        false,
        A::None,
        K::Exact,
        true,
        "receive messages from a channel (Telegram, CLI, voice)",
    ),
    spec(
        Capability::ChannelOut,
        "channel:out",
        false,
        A::PerTarget,
        K::Exact,
        false,
        "send messages to a specific channel",
    ),
    spec(
        Capability::TimeRead,
        "time:read",
        false,
        A::None,
        K::None,
        true,
        "read current time and timezones",
    ),
    spec(
        Capability::ParseLocal,
        "parse:local",
        false,
        A::None,
        K::None,
        true,
        "local parsing of known formats (PDF, HTML, JSON, CSV)",
    ),
    spec(
        Capability::CalendarRead,
        "calendar:read",
        false,
        A::PerTarget,
        K::Exact,
        true,
        "read events from an authorised calendar",
    ),
    spec(
        Capability::CalendarWrite,
        "calendar:write",
        false,
        A::PerTarget,
        K::Exact,
        false,
        "add events to an authorised calendar",
    ),
];

/// A capability name that is not in the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown capability `{name}`; the registry has: {valid}", valid = valid_names())]
pub struct UnknownCapability {
    pub name: String,
}

fn valid_names() -> String {
    REGISTRY
        .iter()
        .map(|s| s.name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Capability {
    /// Looks a capability up by its canonical name (`fs:write`).
    pub fn parse(name: &str) -> Result<Capability, UnknownCapability> {
        REGISTRY
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.capability)
            .ok_or_else(|| UnknownCapability {
                name: crate::limits::shown(name),
            })
    }

    pub fn spec(self) -> &'static CapabilitySpec {
        // REGISTRY is in declaration order: the discriminant is the index.
        &REGISTRY[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// A wire or stored field that may name no capability: empty is none, anything else
    /// must be a canonical name.
    pub fn parse_optional(name: &str) -> Result<Option<Capability>, UnknownCapability> {
        if name.is_empty() {
            return Ok(None);
        }
        Capability::parse(name).map(Some)
    }

    /// The name of an optional capability, empty when none (its wire spelling).
    pub fn name_of(capability: Option<Capability>) -> &'static str {
        capability.map_or("", Capability::name)
    }

    /// Every capability, in registry order.
    pub fn all() -> impl Iterator<Item = Capability> {
        REGISTRY.iter().map(|s| s.capability)
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Capability {
    type Err = UnknownCapability;

    fn from_str(name: &str) -> Result<Capability, UnknownCapability> {
        Capability::parse(name)
    }
}

/// Written by its canonical name (`"fs:write"`), as configuration and JSON spell it.
impl serde::Serialize for Capability {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// Read from its canonical name; any other word is an error naming the known ones.
impl<'de> serde::Deserialize<'de> for Capability {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Capability, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Capability::parse(&name).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed case 1: registry_contiene_13_capability_canoniche, and issue 44's fourteenth.
    #[test]
    fn the_registry_has_the_fourteen_canonical_capabilities_with_their_attributes() {
        let rows: Vec<(&str, bool, &str, &str)> = REGISTRY
            .iter()
            .map(|s| {
                (
                    s.name,
                    s.critical,
                    s.default_approval.as_str(),
                    s.target_kind.as_str(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("fs:read", false, "per_target", "path_glob"),
                ("fs:write", true, "per_target", "path_glob"),
                ("code:exec", true, "always", "exact"),
                ("network:http", false, "per_target", "host"),
                ("llm:local", false, "none", "none"),
                ("llm:online", false, "per_target", "host"),
                ("mail:read", false, "per_target", "exact"),
                ("mail:send", true, "always", "exact"),
                ("channel:in", false, "none", "exact"),
                ("channel:out", false, "per_target", "exact"),
                ("time:read", false, "none", "none"),
                ("parse:local", false, "none", "none"),
                ("calendar:read", false, "per_target", "exact"),
                ("calendar:write", false, "per_target", "exact"),
            ]
        );
        assert!(REGISTRY.iter().all(|s| !s.description.is_empty()));
    }

    #[test]
    fn spec_lookup_agrees_with_the_registry_order() {
        for (i, spec) in REGISTRY.iter().enumerate() {
            assert_eq!(spec.capability as usize, i);
            assert_eq!(Capability::parse(spec.name).unwrap(), spec.capability);
            assert_eq!(spec.capability.spec(), spec);
        }
    }

    #[test]
    fn an_unknown_capability_is_named_and_the_valid_ones_listed() {
        let err = Capability::parse("fs:delete").unwrap_err().to_string();
        assert!(err.starts_with("unknown capability `fs:delete`"), "{err}");
        assert!(err.contains("fs:read, fs:write, code:exec"), "{err}");
        assert!(err.ends_with("calendar:read, calendar:write"), "{err}");
        assert!(Capability::parse("FS:READ").is_err(), "names are exact");
    }

    #[test]
    fn a_capability_is_written_and_read_by_its_canonical_name() {
        assert_eq!(
            serde_json::to_string(&Capability::NetworkHttp).unwrap(),
            "\"network:http\""
        );
        let read: Vec<Capability> = serde_json::from_str(r#"["fs:write","mail:send"]"#).unwrap();
        assert_eq!(read, vec![Capability::FsWrite, Capability::MailSend]);
        let err = serde_json::from_str::<Capability>("\"fs:delete\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("fs:delete"), "{err}");
        assert!(
            err.contains("fs:write"),
            "the known names are listed: {err}"
        );
        assert_eq!(
            "code:exec".parse::<Capability>().unwrap(),
            Capability::CodeExec
        );
        assert_eq!(Capability::parse_optional(""), Ok(None));
        assert_eq!(
            Capability::parse_optional("mail:read"),
            Ok(Some(Capability::MailRead))
        );
        assert!(
            Capability::parse_optional(" ").is_err(),
            "only empty is none"
        );
        assert_eq!(Capability::name_of(None), "");
        assert_eq!(Capability::name_of(Some(Capability::TimeRead)), "time:read");
    }

    #[test]
    fn only_per_target_capabilities_with_a_target_are_grantable() {
        let grantable: Vec<&str> = REGISTRY
            .iter()
            .filter(|s| s.grantable())
            .map(|s| s.name)
            .collect();
        assert_eq!(
            grantable,
            [
                "fs:read",
                "fs:write",
                "network:http",
                "llm:online",
                "mail:read",
                "channel:out",
                "calendar:read",
                "calendar:write"
            ]
        );
    }
}
