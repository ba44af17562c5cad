//! Territory concessions (approval_ux ch. 5) as every channel says them: the seed's
//! markers, and the words a closed card, the terminal and the turn log use for what the
//! person conceded beyond the one call.

use crate::language::Language;

/// What approving concedes beyond the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Concession {
    /// This class for the rest of the session (`approval.session_seconds`).
    Session,
    /// This class from now on, until revoked.
    Permanent,
}

impl Concession {
    /// The seed's marker, with its leading space: ` [territorio: sessione]`.
    pub fn marker(self, language: Language) -> &'static str {
        match (language, self) {
            (Language::Italian, Concession::Session) => " [territorio: sessione]",
            (Language::Italian, Concession::Permanent) => " [territorio: permanente]",
            (Language::English, Concession::Session) => " [territory: session]",
            (Language::English, Concession::Permanent) => " [territory: permanent]",
        }
    }

    /// What the person conceded, over `pattern`, with the marker: "for this session:
    /// ~/x/* [territory: session]", "sempre per ~/x/* [territorio: permanente]".
    pub fn said(self, language: Language, pattern: &str) -> String {
        let said = match (language, self) {
            (Language::Italian, Concession::Session) => format!("per questa sessione: {pattern}"),
            (Language::Italian, Concession::Permanent) => format!("sempre per {pattern}"),
            (Language::English, Concession::Session) => format!("for this session: {pattern}"),
            (Language::English, Concession::Permanent) => format!("always for {pattern}"),
        };
        format!("{said}{}", self.marker(language))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_markers_end_what_was_conceded() {
        assert_eq!(
            Concession::Session.said(Language::Italian, "~/x/*"),
            "per questa sessione: ~/x/* [territorio: sessione]"
        );
        assert_eq!(
            Concession::Permanent.said(Language::Italian, "~/x/*"),
            "sempre per ~/x/* [territorio: permanente]"
        );
        assert_eq!(
            Concession::Permanent.said(Language::English, "example.org"),
            "always for example.org [territory: permanent]"
        );
        assert_eq!(
            Concession::Session.marker(Language::English),
            " [territory: session]"
        );
    }
}
