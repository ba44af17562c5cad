//! What the gateway writes: escaped, split at Telegram's limit on line boundaries, in the
//! person's language; and what it reads: stop phrases, approval callback data.

/// Telegram's limit on one message's text.
pub const TELEGRAM_LIMIT: usize = 4096;

/// Escapes text for Telegram's HTML parse mode (the approval cards' own escaping).
pub use metnos_core::html::escape_html;
use metnos_core::language::Language;

/// `text` escaped and split into messages of at most `limit` characters (UTF-16 units
/// are what Telegram counts; characters are never more), on line boundaries when a line
/// fits, else inside the line on a character boundary. Never an empty message.
pub fn split_escaped(text: &str, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut current_len = 0usize;
    let units = |s: &str| s.encode_utf16().count();
    for line in text.split_inclusive('\n') {
        let escaped = escape_html(line);
        let len = units(&escaped);
        if current_len + len <= limit {
            current.push_str(&escaped);
            current_len += len;
            continue;
        }
        if !current.trim().is_empty() {
            out.push(
                std::mem::take(&mut current)
                    .trim_end_matches('\n')
                    .to_owned(),
            );
        }
        current.clear();
        if len <= limit {
            current.push_str(&escaped);
            current_len = len;
            continue;
        }
        // A line longer than a message: cut it at its last space that fits (else between
        // characters), never inside an entity like &amp;, and never into a blank message.
        let mut piece = String::new();
        let mut piece_len = 0;
        let mut after_cut = false;
        let cut = |piece: &str, out: &mut Vec<String>| {
            if !piece.trim().is_empty() {
                out.push(piece.trim_end().to_owned());
            }
        };
        for c in line.chars() {
            let escaped = escape_html(c.encode_utf8(&mut [0u8; 4]));
            let n = units(&escaped);
            if c.is_whitespace() {
                if piece_len + n > limit {
                    // The space that does not fit is where this message ends.
                    cut(&piece, &mut out);
                    piece.clear();
                    piece_len = 0;
                    after_cut = true;
                    continue;
                }
                if after_cut && piece.is_empty() {
                    // No message starts with the spaces left over from a cut.
                    continue;
                }
            }
            while piece_len + n > limit && !piece.is_empty() {
                let (head, tail) = match piece.rfind(char::is_whitespace) {
                    Some(i) if i > 0 => {
                        let space = piece[i..].chars().next().map_or(1, char::len_utf8);
                        (
                            piece[..i].to_owned(),
                            piece[i + space..].trim_start().to_owned(),
                        )
                    }
                    _ => (std::mem::take(&mut piece), String::new()),
                };
                cut(&head, &mut out);
                piece = tail;
                piece_len = units(&piece);
                after_cut = true;
            }
            piece.push_str(&escaped);
            piece_len += n;
        }
        current = piece;
        current_len = piece_len;
    }
    if !current.trim().is_empty() {
        out.push(current.trim_end_matches('\n').to_owned());
    }
    if out.is_empty() {
        out.push(String::from("…"));
    }
    out
}

pub use metnos_core::stop::{Stop, normalized, stop_of};

/// Whether a reply confirms a question (sì/yes).
pub fn is_yes(text: &str) -> bool {
    matches!(
        normalized(text).as_str(),
        "si" | "sì" | "s" | "yes" | "y" | "ok" | "certo" | "sure" | "va bene"
    )
}

/// An approval button's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallbackData {
    /// Just this call.
    Approve(String),
    Reject(String),
    /// This call, and its pattern for the rest of the session.
    Session(String),
    /// "Always for …": first shown in full, to confirm.
    Always(String),
    /// The confirmation of "always": this call, and its pattern until revoked.
    AlwaysConfirmed(String),
    /// The confirmation declined: the card as it was.
    Back(String),
    /// A proposal's "never again": rejected, and its kind never proposed again.
    Never(String),
    /// A grant offer's "edit": the person's next message is the pattern to allow instead.
    Edit(String),
    /// `/forget` confirmed: the person's conversations are erased (the confirmation's id).
    Forget(String),
    /// `/forget` confirmed: their conversations and what Metnos remembers for them.
    ForgetAll(String),
    /// `/forget` declined: nothing is erased.
    Keep(String),
}

/// The data of the confirmation's buttons.
pub const CONFIRM_ALWAYS: &str = "confirm-always";
pub const BACK: &str = "back";
/// The data of `/forget`'s buttons.
pub const FORGET: &str = "forget";
pub const FORGET_ALL: &str = "forget-all";
pub const KEEP: &str = "keep";

/// Parses `<kind>:<token>` (approve, reject, session, always, confirm-always, back);
/// `Err` names what is wrong.
pub fn parse_callback(data: &str) -> Result<CallbackData, &'static str> {
    let data = data.trim();
    let (kind, token) = data.split_once(':').ok_or("unknown callback")?;
    if token.is_empty() {
        return Err("callback without a token");
    }
    let token = token.to_owned();
    match kind {
        "approve" => Ok(CallbackData::Approve(token)),
        "reject" => Ok(CallbackData::Reject(token)),
        "session" => Ok(CallbackData::Session(token)),
        "always" => Ok(CallbackData::Always(token)),
        CONFIRM_ALWAYS => Ok(CallbackData::AlwaysConfirmed(token)),
        BACK => Ok(CallbackData::Back(token)),
        "never" => Ok(CallbackData::Never(token)),
        "edit" => Ok(CallbackData::Edit(token)),
        FORGET => Ok(CallbackData::Forget(token)),
        FORGET_ALL => Ok(CallbackData::ForgetAll(token)),
        KEEP => Ok(CallbackData::Keep(token)),
        _ => Err("unknown callback"),
    }
}

/// Why an edit was not taken, when it is not the pattern's fault.
pub fn edit_not_taken(lang: Language) -> &'static str {
    match lang {
        Language::Italian => "la richiesta non è più in attesa, o non è tua da decidere",
        Language::English => "the request is no longer waiting, or not yours to decide",
    }
}

/// An edit over 1024 bytes.
pub fn edit_too_long(lang: Language) -> &'static str {
    match lang {
        Language::Italian => "è più lungo di 1024 byte",
        Language::English => "it is longer than 1024 bytes",
    }
}

/// What the gateway says, by language.
pub fn say(lang: Language, what: Says<'_>) -> String {
    match (lang, what) {
        (Language::Italian, Says::PairingCode(code)) => format!(
            "Ciao! Non ci conosciamo ancora. Chiedi a chi gestisce Metnos di eseguire: metnos pair approve {code}  (il codice vale 10 minuti)"
        ),
        (Language::English, Says::PairingCode(code)) => format!(
            "Hello! We have not met yet. Ask whoever runs Metnos to run: metnos pair approve {code}  (the code works for 10 minutes)"
        ),
        (Language::Italian, Says::Unavailable(what)) => {
            format!("Non riesco a raggiungere {what} in questo momento: riprova tra poco.")
        }
        (Language::English, Says::Unavailable(what)) => {
            format!("I cannot reach {what} right now: please try again shortly.")
        }
        (Language::Italian, Says::Stopped) => "Va bene, mi fermo.".to_owned(),
        (Language::English, Says::Stopped) => "All right, I stop.".to_owned(),
        (Language::Italian, Says::NothingToStop) => {
            "Non sto facendo niente in questo momento.".to_owned()
        }
        (Language::English, Says::NothingToStop) => "I am not doing anything right now.".to_owned(),
        (Language::Italian, Says::ConfirmStop) => "Vuoi che mi fermi? (sì/no)".to_owned(),
        (Language::English, Says::ConfirmStop) => "Do you want me to stop? (yes/no)".to_owned(),
        (lang, Says::AttemptStopped(wanted)) => attempt_stopped(lang, wanted),
        (Language::Italian, Says::GoingOn) => "Ok, continuo.".to_owned(),
        (Language::English, Says::GoingOn) => "OK, I carry on.".to_owned(),
        (lang, Says::NewThread) => new_thread(lang),
        (lang, Says::Forget(said)) => forget_says(lang, said),
        (Language::Italian, Says::Approved) => "approvato".to_owned(),
        (Language::English, Says::Approved) => "approved".to_owned(),
        (Language::Italian, Says::Rejected) => "rifiutato".to_owned(),
        (Language::English, Says::Rejected) => "rejected".to_owned(),
        (Language::Italian, Says::Expired) => "scaduto".to_owned(),
        (Language::English, Says::Expired) => "expired".to_owned(),
        (Language::Italian, Says::Cancelled) => "annullato".to_owned(),
        (Language::English, Says::Cancelled) => "cancelled".to_owned(),
        (language, Says::ResolveRefused(refusal)) => refusal.say(language).to_owned(),
        (Language::Italian, Says::CannotResolve) => {
            "Approvazione non risolvibile: il servizio non risponde, riprova tra poco".to_owned()
        }
        (Language::English, Says::CannotResolve) => {
            "Approval cannot be resolved: the service does not answer, try again shortly".to_owned()
        }
        (Language::Italian, Says::TurnEndedSilently) => {
            "Ho smesso di lavorare a questa richiesta.".to_owned()
        }
        (Language::English, Says::TurnEndedSilently) => {
            "I stopped working on this request.".to_owned()
        }
        (Language::Italian, Says::Paired(level)) => {
            format!("Fatto: ora puoi parlarmi (livello {level}).")
        }
        (Language::English, Says::Paired(level)) => {
            format!("Paired: you can talk to me now (level {level}).")
        }
        (Language::Italian, Says::Withdrawn) => "ritirata: accesso revocato o ridotto".to_owned(),
        (Language::English, Says::Withdrawn) => "withdrawn: access revoked or lowered".to_owned(),
        (
            Language::Italian,
            Says::ConfirmAlways {
                pattern,
                capability,
            },
        ) => format!(
            "Sempre per {pattern}? D'ora in poi Metnos potrà farlo ({capability}) senza chiedere, finché non revochi (metnos grants revoke)."
        ),
        (
            Language::English,
            Says::ConfirmAlways {
                pattern,
                capability,
            },
        ) => format!(
            "Always for {pattern}? From now on Metnos may do this ({capability}) without asking, until you revoke it (metnos grants revoke)."
        ),
        (Language::Italian, Says::ConfirmButton) => "Conferma: sempre".to_owned(),
        (Language::English, Says::ConfirmButton) => "Confirm: always".to_owned(),
        (Language::Italian, Says::BackButton) => "Indietro".to_owned(),
        (Language::English, Says::BackButton) => "Back".to_owned(),
        (Language::Italian, Says::Reminder { minutes, question }) => format!(
            "⏳ Tra {minutes} min scade la richiesta «{question}»: se non rispondi, non lo faccio."
        ),
        (Language::English, Says::Reminder { minutes, question }) => format!(
            "⏳ The request «{question}» expires in {minutes} min: if you do not answer, I will not do it."
        ),
        (Language::Italian, Says::EditPrompt(offered)) => format!(
            "Scrivimi cosa permettere al posto di {offered}: dei file o una cartella al suo interno, per esempio una sottocartella con /* alla fine. (Vale il tuo prossimo messaggio qui, se è un percorso, entro 10 minuti.)"
        ),
        (Language::English, Says::EditPrompt(offered)) => format!(
            "Send me what to allow instead of {offered}: files or a folder within it, e.g. a subfolder with /* at the end. (Your next message here, if it is a path, within 10 minutes.)"
        ),
        (Language::Italian, Says::EditSchedulePrompt(current)) => format!(
            "Scrivimi quando invece di {current}: daily@HH:MM, ogni N minuti|ore, oppure un'espressione cron di cinque campi (ora locale). (Vale il tuo prossimo messaggio qui, se è un orario, entro 10 minuti.)"
        ),
        (Language::English, Says::EditSchedulePrompt(current)) => format!(
            "Send me when instead of {current}: daily@HH:MM, every N minutes|hours, or a five-field cron expression (local time). (Your next message here, if it is a schedule, within 10 minutes.)"
        ),
        (Language::Italian, Says::EditRefused(why)) => {
            format!("Non l'ho accettato: {why}. Puoi premere di nuovo Modifica.")
        }
        (Language::English, Says::EditRefused(why)) => {
            format!("Not accepted: {why}. You can press Edit again.")
        }
        (Language::Italian, Says::UnknownButton) => {
            "Questo pulsante non lo riconosco: non ho fatto niente.".to_owned()
        }
        (Language::English, Says::UnknownButton) => {
            "I do not recognise this button: nothing was done.".to_owned()
        }
        (Language::Italian, Says::NotPaired) => {
            "Non sei (più) abbinato: questa richiesta non è tua da decidere.".to_owned()
        }
        (Language::English, Says::NotPaired) => {
            "You are not paired (any more): this request is not yours to decide.".to_owned()
        }
        (lang, Says::WritePrivately) => write_privately(lang),
    }
}

/// Said in a group (issue 41): Metnos answers only in a private chat.
fn write_privately(lang: Language) -> String {
    match lang {
        Language::Italian => {
            "Nei gruppi non rispondo: quello che scrivo lo leggerebbero tutti. Scrivimi in privato."
        }
        Language::English => {
            "I do not answer in groups: everyone here would read what I write. Write to me privately."
        }
    }
    .to_owned()
}

/// What the gateway says about `/forget`.
#[derive(Debug, Clone, Copy)]
pub enum ForgetSays {
    /// The question, above its buttons.
    Question,
    ConversationsButton,
    EverythingButton,
    KeepButton,
    /// Confirmed: how many exchanges were erased, and how many remembered entries (when
    /// they were asked to go too).
    Forgotten {
        exchanges: u64,
        memories: Option<u64>,
    },
    /// Declined.
    Kept,
    /// A button pressed after its time, or twice.
    Expired,
}

fn forget_says(lang: Language, said: ForgetSays) -> String {
    let it = lang == Language::Italian;
    match said {
        ForgetSays::Question => confirm_forget(lang),
        ForgetSays::ConversationsButton if it => "🗑 Le conversazioni".to_owned(),
        ForgetSays::ConversationsButton => "🗑 The conversations".to_owned(),
        ForgetSays::EverythingButton if it => "🗑 Anche ciò che ricordi".to_owned(),
        ForgetSays::EverythingButton => "🗑 And what you remember".to_owned(),
        ForgetSays::KeepButton if it => "Tieni".to_owned(),
        ForgetSays::KeepButton => "Keep".to_owned(),
        ForgetSays::Forgotten {
            exchanges,
            memories,
        } => forgotten(lang, exchanges, memories),
        ForgetSays::Kept if it => "Va bene: non ho cancellato niente.".to_owned(),
        ForgetSays::Kept => "All right: nothing was erased.".to_owned(),
        ForgetSays::Expired => forget_expired(lang),
    }
}

/// `/forget`'s question, above its buttons.
fn confirm_forget(lang: Language) -> String {
    match lang {
        Language::Italian => "Cancello tutte le nostre conversazioni? Quello che ci siamo detti qui sparisce per sempre: non potrò più rileggerlo, né tu riprenderlo rispondendo a un mio messaggio. Con il secondo pulsante dimentico anche ciò che mi hai chiesto di ricordare.",
        Language::English => "Erase all our conversations? What we said here goes for good: I can no longer read it back, nor can you take it up again by replying to a message of mine. With the second button I also forget what you asked me to remember.",
    }
    .to_owned()
}

/// `/forget` done: how many exchanges went, and how many remembered entries (when asked).
fn forgotten(lang: Language, exchanges: u64, memories: Option<u64>) -> String {
    match (lang, memories) {
        (Language::Italian, None) => {
            format!("🗑 Fatto: ho cancellato {exchanges} scambi delle nostre conversazioni.")
        }
        (Language::Italian, Some(m)) => format!(
            "🗑 Fatto: ho cancellato {exchanges} scambi delle nostre conversazioni e {m} cose che ricordavo."
        ),
        (Language::English, None) => {
            format!("🗑 Done: I erased {exchanges} exchange(s) of our conversations.")
        }
        (Language::English, Some(m)) => format!(
            "🗑 Done: I erased {exchanges} exchange(s) of our conversations and {m} thing(s) I remembered."
        ),
    }
}

/// A `/forget` button pressed after its time, or twice.
fn forget_expired(lang: Language) -> String {
    match lang {
        Language::Italian => {
            "Questa conferma non vale più: niente è stato cancellato. Scrivi di nuovo /forget."
        }
        Language::English => {
            "This confirmation is no longer valid: nothing was erased. Send /forget again."
        }
    }
    .to_owned()
}

/// After `/new`.
fn new_thread(lang: Language) -> String {
    match lang {
        Language::Italian => "🆕 Nuova conversazione: da qui non guardo più quello che ci siamo detti prima (rispondi a un mio messaggio vecchio per riprenderla).",
        Language::English => "🆕 New conversation: from here I no longer look at what we said before (reply to an older message of mine to take it up again).",
    }
    .to_owned()
}

/// A non-retreat attempt given up for the day (issue 46).
fn attempt_stopped(lang: Language, wanted: &str) -> String {
    match lang {
        Language::Italian => format!("D'accordo: per oggi non cerco più un modo per «{wanted}»."),
        Language::English => {
            format!("All right: I will not look for a way to `{wanted}` again today.")
        }
    }
}

/// The sentences.
#[derive(Debug, Clone, Copy)]
pub enum Says<'a> {
    PairingCode(&'a str),
    Unavailable(&'a str),
    Stopped,
    NothingToStop,
    ConfirmStop,
    /// A stop of a non-retreat attempt that no turn was running for: what is given up.
    AttemptStopped(&'a str),
    GoingOn,
    /// `/new`: the next message starts a new thread.
    NewThread,
    /// About `/forget`.
    Forget(ForgetSays),
    Approved,
    Rejected,
    Expired,
    Cancelled,
    /// A click the approval service refused, with the seed's reason.
    ResolveRefused(metnos_core::resolve::ResolveRefusal),
    /// A click that reached no decision for another reason (the service unavailable).
    CannotResolve,
    /// A turn that ended without a word.
    TurnEndedSilently,
    /// Welcome, at the level (its store name).
    Paired(&'a str),
    /// A card whose person's pairing was revoked or whose level was lowered.
    Withdrawn,
    /// A click from someone who is not (or no longer) paired.
    NotPaired,
    /// Said in a group: Metnos answers only in a private chat.
    WritePrivately,
    /// "Always for …" shown in full before it is granted.
    ConfirmAlways {
        pattern: &'a str,
        capability: &'a str,
    },
    ConfirmButton,
    BackButton,
    /// A button whose data is not one of a card's.
    UnknownButton,
    /// After a grant offer's Edit: what to send.
    EditPrompt(&'a str),
    /// After a standing order's Edit: what to send (the card's schedule).
    EditSchedulePrompt(&'a str),
    /// The edit was not taken: why (the approval service's words).
    EditRefused(&'a str),
    /// A pending card's one reminder before it expires.
    Reminder {
        minutes: u64,
        question: &'a str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of each thing the gateway says. A new kind fails to compile in `kind_of` until
    /// it is listed there, and is to be added here too.
    fn every_saying() -> Vec<Says<'static>> {
        use metnos_core::resolve::ResolveRefusal as R;
        let mut all = vec![
            Says::PairingCode("K7Q2MX"),
            Says::Unavailable("X"),
            Says::Stopped,
            Says::NothingToStop,
            Says::ConfirmStop,
            Says::AttemptStopped("table_extract"),
            Says::GoingOn,
            Says::NewThread,
            Says::Approved,
            Says::Rejected,
            Says::Expired,
            Says::Cancelled,
            Says::CannotResolve,
            Says::TurnEndedSilently,
            Says::Paired("supervised"),
            Says::Withdrawn,
            Says::NotPaired,
            Says::WritePrivately,
            Says::ConfirmAlways {
                pattern: "~/x/*",
                capability: "fs:write",
            },
            Says::ConfirmButton,
            Says::BackButton,
            Says::UnknownButton,
            Says::EditPrompt("~/x/*"),
            Says::EditSchedulePrompt("daily@08:00"),
            Says::EditRefused("X"),
            Says::Reminder {
                minutes: 5,
                question: "X",
            },
        ];
        for refusal in [
            R::UnknownToken,
            R::AlreadyResolved,
            R::Expired,
            R::NotRequester,
        ] {
            all.push(Says::ResolveRefused(refusal));
        }
        for forget in [
            ForgetSays::Question,
            ForgetSays::ConversationsButton,
            ForgetSays::EverythingButton,
            ForgetSays::KeepButton,
            ForgetSays::Forgotten {
                exchanges: 3,
                memories: Some(2),
            },
            ForgetSays::Forgotten {
                exchanges: 3,
                memories: None,
            },
            ForgetSays::Kept,
            ForgetSays::Expired,
        ] {
            all.push(Says::Forget(forget));
        }
        for saying in &all {
            kind_of(saying);
        }
        all
    }

    /// Every kind of saying, by name: no wildcard, so a new one must be listed.
    fn kind_of(saying: &Says<'_>) -> &'static str {
        match saying {
            Says::PairingCode(_) => "pairing code",
            Says::Unavailable(_) => "unavailable",
            Says::Stopped => "stopped",
            Says::NothingToStop => "nothing to stop",
            Says::ConfirmStop => "confirm stop",
            Says::AttemptStopped(_) => "attempt stopped",
            Says::GoingOn => "going on",
            Says::NewThread => "new thread",
            Says::Forget(_) => "forget",
            Says::Approved => "approved",
            Says::Rejected => "rejected",
            Says::Expired => "expired",
            Says::Cancelled => "cancelled",
            Says::ResolveRefused(_) => "resolve refused",
            Says::CannotResolve => "cannot resolve",
            Says::TurnEndedSilently => "turn ended",
            Says::Paired(_) => "paired",
            Says::Withdrawn => "withdrawn",
            Says::NotPaired => "not paired",
            Says::WritePrivately => "write privately",
            Says::ConfirmAlways { .. } => "confirm always",
            Says::ConfirmButton => "confirm button",
            Says::BackButton => "back button",
            Says::UnknownButton => "unknown button",
            Says::EditPrompt(_) => "edit prompt",
            Says::EditSchedulePrompt(_) => "edit schedule prompt",
            Says::EditRefused(_) => "edit refused",
            Says::Reminder { .. } => "reminder",
        }
    }

    /// Issue 41: every text a person can receive from the gateway, in both languages,
    /// holds no word of the other.
    #[test]
    fn every_saying_speaks_one_language_only() {
        for lang in [Language::Italian, Language::English] {
            let mut texts: Vec<(String, String)> = every_saying()
                .into_iter()
                .map(|saying| (kind_of(&saying).to_owned(), say(lang, saying)))
                .collect();
            texts.push(("edit not taken".into(), edit_not_taken(lang).to_owned()));
            for refusal in [
                metnos_core::resolve::EditRefusal::NotOffered,
                metnos_core::resolve::EditRefusal::NotWithin,
                metnos_core::resolve::EditRefusal::BadSchedule,
            ] {
                let why = refusal.say(lang);
                texts.push(("edit refused".into(), say(lang, Says::EditRefused(why))));
            }
            texts.push(("edit too long".into(), edit_too_long(lang).to_owned()));
            for (kind, text) in texts {
                let foreign = metnos_core::language::words_of_the_other(&text, lang);
                assert!(
                    foreign.is_empty(),
                    "{lang:?} {kind}: {text:?} has {foreign:?}"
                );
            }
        }
    }

    #[test]
    fn long_answers_are_split_on_lines_and_escaped() {
        let line = "x".repeat(100);
        let text = vec![line.as_str(); 100].join("\n");
        let parts = split_escaped(&text, TELEGRAM_LIMIT);
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| p.chars().count() <= TELEGRAM_LIMIT));
        assert!(parts.iter().all(|p| p.split('\n').all(|l| l.len() == 100)));
        assert_eq!(parts.join("\n"), text);
        assert_eq!(split_escaped("a < b & c", 4096), ["a &lt; b &amp; c"]);
        // One enormous line of entities is cut between entities, not inside one.
        let parts = split_escaped(&"<".repeat(5000), TELEGRAM_LIMIT);
        assert!(
            parts
                .iter()
                .all(|p| p.len() <= TELEGRAM_LIMIT && p.ends_with(';'))
        );
        assert_eq!(parts.concat(), "&lt;".repeat(5000));
        // A long line of words is cut between words; a run of spaces is never a message.
        assert_eq!(split_escaped("aaa bbb ccc", 7), ["aaa bbb", "ccc"]);
        assert_eq!(split_escaped("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(split_escaped("ab          cd", 4), ["ab", "cd"]);
    }

    fn unescape(text: &str) -> String {
        text.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
    }

    proptest::proptest! {
        /// Whatever the answer, every message fits, none is blank (Telegram refuses those),
        /// no entity is cut, and no visible character is lost or added.
        #[test]
        fn any_text_splits_into_sendable_messages_without_losing_a_character(
            text in "[a-z <>&\"\n\t\u{e9}\u{1F600}]{0,300}",
            limit in 6usize..40,
        ) {
            let parts = split_escaped(&text, limit);
            proptest::prop_assert!(!parts.is_empty());
            for part in &parts {
                proptest::prop_assert!(part.encode_utf16().count() <= limit, "{part:?} over {limit}");
                proptest::prop_assert!(!part.trim().is_empty(), "blank message in {parts:?}");
                let rest = part
                    .replace("&amp;", "")
                    .replace("&lt;", "")
                    .replace("&gt;", "")
                    .replace("&quot;", "");
                proptest::prop_assert!(!rest.contains('&'), "a cut entity in {part:?}");
            }
            let visible = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            let shown = if visible(&text).is_empty() { "…".to_owned() } else { visible(&text) };
            proptest::prop_assert_eq!(visible(&unescape(&parts.concat())), shown);
        }
    }

    #[test]
    fn callback_data_is_parsed_or_refused_by_name() {
        assert_eq!(
            parse_callback("approve:abc"),
            Ok(CallbackData::Approve("abc".into()))
        );
        assert_eq!(
            parse_callback("reject:abc"),
            Ok(CallbackData::Reject("abc".into()))
        );
        assert_eq!(
            parse_callback("session:abc"),
            Ok(CallbackData::Session("abc".into()))
        );
        assert_eq!(
            parse_callback("always:abc"),
            Ok(CallbackData::Always("abc".into()))
        );
        assert_eq!(
            parse_callback("confirm-always:abc"),
            Ok(CallbackData::AlwaysConfirmed("abc".into()))
        );
        assert_eq!(
            parse_callback("back:abc"),
            Ok(CallbackData::Back("abc".into()))
        );
        assert_eq!(parse_callback("approve:"), Err("callback without a token"));
        assert_eq!(parse_callback("launch:abc"), Err("unknown callback"));
        assert_eq!(parse_callback("garbage"), Err("unknown callback"));
    }
}
