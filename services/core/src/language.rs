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

/// Words that give a text away as the other language's: a text meant for `language` that
/// holds one of these (as a whole word, any case) speaks the other language, at least in
/// part. The tests that walk every message kind in both languages look for them
/// (issue 41: "Mi sono fermato (cancelled)"). Short, common, unambiguous words only.
pub fn words_of_the_other(text: &str, language: Language) -> Vec<String> {
    const ENGLISH: &[&str] = &[
        "the",
        "you",
        "your",
        "is",
        "are",
        "and",
        "not",
        "with",
        "was",
        "this",
        "that",
        "every",
        "next",
        "cancelled",
        "stopped",
        "approved",
        "rejected",
        "expired",
        "request",
        "please",
        "only",
        "if",
        "changes",
        "day",
        "hours",
        "minutes",
        "what",
        "nothing",
        "here",
        "again",
    ];
    const ITALIAN: &[&str] = &[
        "il",
        "gli",
        "non",
        "che",
        "sono",
        "è",
        "questa",
        "questo",
        "ogni",
        "giorno",
        "prossime",
        "alle",
        "della",
        "annullato",
        "annullata",
        "scaduto",
        "approvato",
        "rifiutato",
        "richiesta",
        "solo",
        "se",
        "cambia",
        "ore",
        "minuti",
        "niente",
        "qui",
        "di",
        "un",
        "una",
    ];
    let other = match language {
        Language::Italian => ENGLISH,
        Language::English => ITALIAN,
    };
    text.split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|word| other.contains(&word.as_str()))
        .collect()
}

#[cfg(test)]
mod telltale_tests {
    use super::*;

    #[test]
    fn a_half_english_italian_sentence_is_caught_and_a_whole_one_is_not() {
        assert_eq!(
            words_of_the_other("Mi sono fermato (cancelled). cancelled", Language::Italian),
            ["cancelled", "cancelled"]
        );
        assert!(words_of_the_other("Mi sono fermato.", Language::Italian).is_empty());
        assert_eq!(
            words_of_the_other(
                "every day at 08:00; prossime: Sat 28 Nov",
                Language::Italian
            ),
            ["every", "day"]
        );
        assert_eq!(
            words_of_the_other("next: sab 28 nov; solo se cambia", Language::English),
            ["solo", "se", "cambia"]
        );
    }
}
