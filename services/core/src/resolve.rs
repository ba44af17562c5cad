//! Why an approval could not be resolved, as the approval service tells its callers (in the
//! status's `metnos-resolve-refusal` metadata) and as a channel tells the person, in their
//! language with the seed's words (approval_ux ch. 6.4): the reason travels as a closed
//! set, never as the service's English error text.

use crate::language::Language;

/// The status metadata key that carries a [`ResolveRefusal`].
pub const METADATA_KEY: &str = "metnos-resolve-refusal";

/// The seed's four checks of a resolve, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolveRefusal {
    /// No request has this token.
    UnknownToken,
    /// The request was already approved, rejected, expired or cancelled.
    AlreadyResolved,
    /// The request expired before the decision.
    Expired,
    /// Someone other than the person asked tried to decide.
    NotRequester,
}

impl ResolveRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            ResolveRefusal::UnknownToken => "unknown_token",
            ResolveRefusal::AlreadyResolved => "already_resolved",
            ResolveRefusal::Expired => "expired",
            ResolveRefusal::NotRequester => "not_requester",
        }
    }

    pub fn parse(text: &str) -> Option<ResolveRefusal> {
        [
            ResolveRefusal::UnknownToken,
            ResolveRefusal::AlreadyResolved,
            ResolveRefusal::Expired,
            ResolveRefusal::NotRequester,
        ]
        .into_iter()
        .find(|r| r.as_str() == text)
    }

    /// The sentence a person reads: the seed's words in Italian.
    pub fn say(self, language: Language) -> &'static str {
        match (language, self) {
            (Language::Italian, ResolveRefusal::UnknownToken) => {
                "Approvazione non risolvibile: token sconosciuto"
            }
            (Language::Italian, ResolveRefusal::AlreadyResolved) => {
                "Approvazione non risolvibile: token già risolto"
            }
            (Language::Italian, ResolveRefusal::Expired) => {
                "Approvazione non risolvibile: la richiesta è scaduta"
            }
            (Language::Italian, ResolveRefusal::NotRequester) => {
                "Approvazione non risolvibile: decisore non autorizzato"
            }
            (Language::English, ResolveRefusal::UnknownToken) => {
                "Approval cannot be resolved: unknown token"
            }
            (Language::English, ResolveRefusal::AlreadyResolved) => {
                "Approval cannot be resolved: token already resolved"
            }
            (Language::English, ResolveRefusal::Expired) => {
                "Approval cannot be resolved: the request expired"
            }
            (Language::English, ResolveRefusal::NotRequester) => {
                "Approval cannot be resolved: decider not authorised"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_travels_and_speaks_both_languages() {
        for refusal in [
            ResolveRefusal::UnknownToken,
            ResolveRefusal::AlreadyResolved,
            ResolveRefusal::Expired,
            ResolveRefusal::NotRequester,
        ] {
            assert_eq!(ResolveRefusal::parse(refusal.as_str()), Some(refusal));
            assert!(
                refusal
                    .say(Language::Italian)
                    .starts_with("Approvazione non risolvibile: ")
            );
            assert!(
                refusal
                    .say(Language::English)
                    .starts_with("Approval cannot be resolved: ")
            );
        }
        assert_eq!(ResolveRefusal::parse("nope"), None);
        assert!(
            ResolveRefusal::UnknownToken
                .say(Language::Italian)
                .ends_with("token sconosciuto")
        );
        assert!(
            ResolveRefusal::AlreadyResolved
                .say(Language::Italian)
                .ends_with("token già risolto")
        );
        assert!(
            ResolveRefusal::NotRequester
                .say(Language::Italian)
                .ends_with("decisore non autorizzato")
        );
    }
}

/// The status metadata key that carries an [`EditRefusal`].
pub const EDIT_METADATA_KEY: &str = "metnos-edit-refusal";

/// Why an edit sent with an approval (a narrower pattern, another schedule) was not taken,
/// as the approval service tells its callers (issue 41): a closed set a channel says in the
/// person's language, never the service's English error text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditRefusal {
    /// The request offers nothing to edit.
    NotOffered,
    /// The pattern sent is not within the one offered.
    NotWithin,
    /// The schedule sent cannot be read or used.
    BadSchedule,
}

impl EditRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            EditRefusal::NotOffered => "not_offered",
            EditRefusal::NotWithin => "not_within",
            EditRefusal::BadSchedule => "bad_schedule",
        }
    }

    pub fn parse(text: &str) -> Option<EditRefusal> {
        [
            EditRefusal::NotOffered,
            EditRefusal::NotWithin,
            EditRefusal::BadSchedule,
        ]
        .into_iter()
        .find(|r| r.as_str() == text)
    }

    /// Why, in `language`: what a person reads after "Not accepted:".
    pub fn say(self, language: Language) -> &'static str {
        match (language, self) {
            (Language::Italian, EditRefusal::NotOffered) => {
                "questa richiesta non si può modificare"
            }
            (Language::English, EditRefusal::NotOffered) => "this request cannot be edited",
            (Language::Italian, EditRefusal::NotWithin) => {
                "quello che hai scritto non sta dentro quanto offerto: puoi indicare solo dei file o una cartella al suo interno (niente ** e niente nomi nascosti)"
            }
            (Language::English, EditRefusal::NotWithin) => {
                "what you sent is not within what was offered: only files or a folder under it (no ** and no hidden names)"
            }
            (Language::Italian, EditRefusal::BadSchedule) => {
                "l'orario non si può usare: scrivi daily@HH:MM, ogni N minuti|ore, oppure un'espressione cron di cinque campi"
            }
            (Language::English, EditRefusal::BadSchedule) => {
                "the schedule cannot be used: send daily@HH:MM, every N minutes|hours, or a five-field cron expression"
            }
        }
    }
}

#[cfg(test)]
mod edit_tests {
    use super::*;

    #[test]
    fn an_edit_refusal_travels_by_name_and_is_said_in_one_language() {
        for refusal in [
            EditRefusal::NotOffered,
            EditRefusal::NotWithin,
            EditRefusal::BadSchedule,
        ] {
            assert_eq!(EditRefusal::parse(refusal.as_str()), Some(refusal));
            for language in [Language::Italian, Language::English] {
                let text = refusal.say(language);
                let foreign = crate::language::words_of_the_other(text, language);
                assert!(foreign.is_empty(), "{language:?} {refusal:?}: {foreign:?}");
            }
        }
        assert_eq!(EditRefusal::parse("the unit is minutes"), None);
    }
}
