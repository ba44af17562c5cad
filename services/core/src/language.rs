//! The language Metnos speaks to a person in (cards, confirmations, answers).

use metnos_proto::common::v1 as pb;

/// Italian (the seeds' language and the default) or English.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Language {
    #[default]
    Italian,
    English,
}

impl Language {
    /// The ISO 639-1 code stores use: `it`, `en`.
    pub fn code(self) -> &'static str {
        match self {
            Language::Italian => "it",
            Language::English => "en",
        }
    }

    /// Exactly `it` or `en`.
    pub fn from_code(code: &str) -> Option<Language> {
        match code {
            "it" => Some(Language::Italian),
            "en" => Some(Language::English),
            _ => None,
        }
    }

    /// A client's language tag (`en`, `en-GB`, `it`, …): English when it says so,
    /// Italian otherwise.
    pub fn from_tag(tag: &str) -> Language {
        if tag.to_ascii_lowercase().starts_with("en") {
            Language::English
        } else {
            Language::Italian
        }
    }

    /// The contract's field value (`as i32`).
    pub fn to_wire(self) -> i32 {
        match self {
            Language::Italian => pb::Language::Italian as i32,
            Language::English => pb::Language::English as i32,
        }
    }

    /// A contract's field value; `None` when unspecified or unknown.
    pub fn from_wire(value: i32) -> Option<Language> {
        match pb::Language::try_from(value) {
            Ok(pb::Language::Italian) => Some(Language::Italian),
            Ok(pb::Language::English) => Some(Language::English),
            Ok(pb::Language::Unspecified) | Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_tags_and_wire_values_agree() {
        for language in [Language::Italian, Language::English] {
            assert_eq!(Language::from_code(language.code()), Some(language));
            assert_eq!(Language::from_wire(language.to_wire()), Some(language));
        }
        assert_eq!(Language::from_code("EN"), None);
        assert_eq!(Language::from_tag("en-GB"), Language::English);
        assert_eq!(Language::from_tag("EN"), Language::English);
        assert_eq!(Language::from_tag("de"), Language::Italian);
        assert_eq!(Language::from_wire(0), None);
    }
}
