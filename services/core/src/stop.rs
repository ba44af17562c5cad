//! The telos stop clause (seed telos.md ch. 5.4, 8.1): the one recogniser of "stop" in a
//! person's words, in Italian and English. The vaglio's `DetectStop` answers with it; a
//! gateway that cannot reach the vaglio falls back to it, so a stop is never lost.

/// What a message says about stopping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Stop now.
    Clear,
    /// Perhaps: ask first.
    Ambiguous,
    No,
}

/// The words of a message as compared: trimmed, closing punctuation dropped, lower case,
/// single spaces.
pub fn normalized(text: &str) -> String {
    text.trim()
        .trim_end_matches(['.', '!', '?', '…'])
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

const AMBIGUOUS_IT: &[&str] = &[
    "mah",
    "vediamo dopo",
    "vediamo",
    "forse dopo",
    "ci penso",
    "magari dopo",
    "non ora",
    "hmm vediamo",
    "hmm, vediamo dopo",
    "hmm vediamo dopo",
];
const AMBIGUOUS_EN: &[&str] = &[
    "hmm",
    "let's see later",
    "lets see later",
    "maybe later",
    "hmm let's see",
    "we'll see",
    "not now",
];

/// The question that confirms an ambiguous stop, in the language of the words that raised
/// it (Italian when they are Italian, else English), about `intent` (what is being worked
/// on; may be empty).
pub fn confirmation_question(text: &str, intent: &str) -> String {
    let words = normalized(text);
    let italian = AMBIGUOUS_IT.iter().any(|p| words == *p)
        || ["vediamo", "dopo", "mah", "ci penso", "magari", "non ora"]
            .iter()
            .any(|w| words.contains(w));
    let intent: String = intent
        .chars()
        .filter(|c| !c.is_control())
        .take(120)
        .collect();
    match (italian, intent.trim().is_empty()) {
        (true, true) => "Vuoi che mi fermi?".to_owned(),
        (true, false) => format!("Vuoi che mi fermi su «{}»?", intent.trim()),
        (false, true) => "Do you want me to stop?".to_owned(),
        (false, false) => format!("Do you want me to stop on \"{}\"?", intent.trim()),
    }
}

/// The question an ambiguous stop gets during a non-retreat attempt (issue 46): it names
/// what is being tried — "stop trying to find a way to `table_extract`?" — in the words'
/// language.
pub fn attempt_question(text: &str, attempt: &str) -> String {
    let words = normalized(text);
    let italian = AMBIGUOUS_IT.iter().any(|p| words == *p)
        || ["vediamo", "dopo", "mah", "ci penso", "magari", "non ora"]
            .iter()
            .any(|w| words.contains(w));
    let attempt: String = attempt
        .chars()
        .filter(|c| !c.is_control())
        .take(120)
        .collect();
    if italian {
        format!(
            "Vuoi che smetta di cercare un modo per «{}»?",
            attempt.trim()
        )
    } else {
        format!(
            "Do you want me to stop trying to find a way to \"{}\"?",
            attempt.trim()
        )
    }
}

/// The telos stop clause: `/stop` and the phrases that mean it, in Italian and English.
pub fn stop_of(text: &str) -> Stop {
    const CLEAR: &[&str] = &[
        "/stop",
        "stop",
        "basta",
        "lascia stare",
        "lascia perdere",
        "lascia",
        "fermati",
        "ferma",
        "annulla",
        "smettila",
        "non importa",
        "stop it",
        "never mind",
        "nevermind",
        "forget it",
        "cancel",
        "leave it",
        "drop it",
        "abort",
    ];
    let text = normalized(text);
    let text = text.trim_start_matches("ok ").trim_start_matches("ok, ");
    if CLEAR.contains(&text) {
        Stop::Clear
    } else if AMBIGUOUS_IT.contains(&text)
        || AMBIGUOUS_EN.contains(&text)
        || text.starts_with("hmm")
    {
        Stop::Ambiguous
    } else {
        Stop::No
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_phrases_in_both_languages_and_ambiguity() {
        for clear in [
            "/stop",
            "Basta!",
            "lascia stare",
            "never mind",
            "Stop.",
            "ok basta",
        ] {
            assert_eq!(stop_of(clear), Stop::Clear, "{clear}");
        }
        for maybe in ["hmm, let's see later", "vediamo dopo", "Maybe later", "hmm"] {
            assert_eq!(stop_of(maybe), Stop::Ambiguous, "{maybe}");
        }
        for no in [
            "stop the music in the kitchen at 8",
            "basta con il sale nella ricetta?",
            "read my notes",
        ] {
            assert_eq!(stop_of(no), Stop::No, "{no}");
        }
    }

    #[test]
    fn an_ambiguous_stop_is_confirmed_in_its_own_language() {
        assert_eq!(
            confirmation_question("hmm, vediamo dopo", "riordinare i download"),
            "Vuoi che mi fermi su «riordinare i download»?"
        );
        assert_eq!(
            confirmation_question("maybe later", "tidy downloads"),
            "Do you want me to stop on \"tidy downloads\"?"
        );
        assert_eq!(confirmation_question("hmm", ""), "Do you want me to stop?");
    }
}
