//! Why a turn ended without an answer, in the person's language: the one table of the
//! planner's endings (issue 41, every word right). A turn's language is the person's
//! (Italian or English); a turn that does not know it speaks English.

use metnos_core::Language;

use super::state::{FinalKind, Finish, finish};

/// What the planner's store could not keep, and so what was not done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreDown {
    /// The suspended turn: its approval was withdrawn.
    Withdrawn,
    /// The turn before the approved call: the call did not run.
    NotRun,
    /// The turn's progress: it stopped after the step.
    StoppedAfterStep,
    /// The new turn: nothing was done.
    NothingDone,
}

/// A turn's end other than an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending<'a> {
    /// Stopped on request (the person's stop, a revocation, the owner).
    Cancelled,
    /// Its time budget, in seconds, spent (`waiting_llm`: while the LLM was answering).
    OutOfTime {
        seconds: u64,
        waiting_llm: bool,
    },
    /// `cap_steps` steps without an answer.
    CapSteps {
        cap: u32,
    },
    /// One executor called `cap` times without an answer.
    CapSameExecutor {
        executor: &'a str,
        cap: u32,
    },
    /// No language model is set up (the configuration's words are in the planner's log).
    NoModel,
    /// No executor to call.
    EmptyCatalog,
    /// The model answered nothing, twice (issue 42).
    NoAnswer,
    /// An online plan's answer asked for more tools.
    OnlinePlanAskedMore,
    StoreDown(StoreDown),
    /// A hybrid turn that read `read` and has no local tier to stay on.
    HybridWithoutLocal {
        read: &'a str,
    },
    /// The online model at `host` not asked (`why`) and no local tier: how to allow it.
    OnlineNotAsked {
        host: &'a str,
        why: &'a str,
        channel: &'a str,
        sender: &'a str,
    },
}

impl Ending<'_> {
    /// The end's kind, as the turn's record and its last event say it.
    pub fn kind(&self) -> FinalKind {
        match self {
            Ending::Cancelled => FinalKind::Cancelled,
            Ending::OutOfTime { .. } => FinalKind::Timeout,
            Ending::CapSteps { .. } => FinalKind::CapSteps,
            Ending::CapSameExecutor { .. } => FinalKind::CapSameExecutor,
            _ => FinalKind::Error,
        }
    }

    /// The turn's end, said in `language`.
    pub fn finish(&self, language: Option<Language>) -> Finish {
        finish(self.kind(), self.say(language.unwrap_or(Language::English)))
    }

    /// The words, in `language`.
    pub fn say(&self, language: Language) -> String {
        match language {
            Language::Italian => self.italian(),
            Language::English => self.english(),
        }
    }

    fn italian(&self) -> String {
        match *self {
            Ending::Cancelled => "Mi sono fermato: la richiesta è stata annullata.".to_owned(),
            Ending::OutOfTime {
                seconds,
                waiting_llm: false,
            } => format!("Mi sono fermato: ho finito i {seconds} secondi a disposizione."),
            Ending::OutOfTime {
                seconds,
                waiting_llm: true,
            } => format!(
                "Mi sono fermato: ho finito i {seconds} secondi a disposizione aspettando il modello linguistico."
            ),
            Ending::CapSteps { cap } => {
                format!("Mi sono fermato dopo {cap} passi senza trovare una risposta.")
            }
            Ending::CapSameExecutor { executor, cap } => format!(
                "Mi sono fermato: ho usato {executor} {cap} volte senza trovare una risposta."
            ),
            Ending::NoModel => "Non posso rispondere: nessun modello linguistico è configurato (chi gestisce Metnos trova il motivo nel log del pianificatore).".to_owned(),
            Ending::NoAnswer => "Il modello linguistico non ha dato nessuna risposta, nemmeno alla seconda domanda: riprova, magari con parole diverse.".to_owned(),
            Ending::EmptyCatalog => {
                "Non ho strumenti a disposizione: il catalogo degli esecutori è vuoto.".to_owned()
            }
            Ending::OnlinePlanAskedMore => {
                "Il piano del modello online chiedeva altri strumenti dopo il suo unico piano: mi sono fermato.".to_owned()
            }
            Ending::StoreDown(StoreDown::Withdrawn) => "L'archivio del pianificatore non risponde: ho ritirato la richiesta di approvazione e non ho fatto niente.".to_owned(),
            Ending::StoreDown(StoreDown::NotRun) => "L'archivio del pianificatore non risponde: l'azione approvata non è stata eseguita.".to_owned(),
            Ending::StoreDown(StoreDown::StoppedAfterStep) => "L'archivio del pianificatore non risponde: mi sono fermato dopo questo passo.".to_owned(),
            Ending::StoreDown(StoreDown::NothingDone) => "L'archivio del pianificatore non risponde: non ho fatto niente.".to_owned(),
            Ending::HybridWithoutLocal { read } => format!(
                "Questa richiesta ha letto {read}; in modalità ibrida quello che leggo non va a nessun modello online, e non c'è un modello locale: aggiungi un livello Ollama, oppure imposta runtime.mode a online."
            ),
            Ending::OnlineNotAsked { host, why, channel, sender } => format!(
                "Non ho chiesto al modello online su {host} ({why}) e non c'è un modello locale: aggiungi un livello Ollama, oppure permettilo: al livello Supervised `metnos grants add --channel {channel} --sender {sender} llm:online {host}`, oppure il livello Full."
            ),
        }
    }

    fn english(&self) -> String {
        match *self {
            Ending::Cancelled => "I stopped: the request was cancelled.".to_owned(),
            Ending::OutOfTime {
                seconds,
                waiting_llm: false,
            } => format!("I stopped: the {seconds} seconds this request may take ran out."),
            Ending::OutOfTime {
                seconds,
                waiting_llm: true,
            } => format!(
                "I stopped: the {seconds} seconds this request may take ran out waiting for the language model."
            ),
            Ending::CapSteps { cap } => {
                format!("I stopped after {cap} steps without finding an answer.")
            }
            Ending::CapSameExecutor { executor, cap } => {
                format!("I stopped: I used {executor} {cap} times without finding an answer.")
            }
            Ending::NoModel => "I cannot answer: no language model is set up (whoever runs Metnos finds why in the planner's log).".to_owned(),
            Ending::NoAnswer => "The language model gave no answer, not even when asked again: please try again, perhaps in other words.".to_owned(),
            Ending::EmptyCatalog => {
                "I have no tools to use: the executor catalog is empty.".to_owned()
            }
            Ending::OnlinePlanAskedMore => {
                "The online model's plan asked for more tools after its single plan: I stopped.".to_owned()
            }
            Ending::StoreDown(StoreDown::Withdrawn) => "The planner's store does not answer: I withdrew the approval request and did nothing.".to_owned(),
            Ending::StoreDown(StoreDown::NotRun) => "The planner's store does not answer: the approved action was not run.".to_owned(),
            Ending::StoreDown(StoreDown::StoppedAfterStep) => "The planner's store does not answer: I stopped after this step.".to_owned(),
            Ending::StoreDown(StoreDown::NothingDone) => "The planner's store does not answer: I did nothing.".to_owned(),
            Ending::HybridWithoutLocal { read } => format!(
                "This request read {read}; in hybrid mode what I read goes to no online model, and no local model is set up: add an Ollama tier, or set runtime.mode to online."
            ),
            Ending::OnlineNotAsked { host, why, channel, sender } => format!(
                "I did not ask the online model at {host} ({why}), and no local model is set up: add an Ollama tier, or allow it: at Supervised `metnos grants add --channel {channel} --sender {sender} llm:online {host}`, or the Full level."
            ),
        }
    }

    /// One of each ending, for the tests that read every word.
    #[cfg(test)]
    pub fn every() -> Vec<Ending<'static>> {
        vec![
            Ending::Cancelled,
            Ending::OutOfTime {
                seconds: 120,
                waiting_llm: false,
            },
            Ending::OutOfTime {
                seconds: 120,
                waiting_llm: true,
            },
            Ending::CapSteps { cap: 8 },
            Ending::CapSameExecutor {
                executor: "fs_read",
                cap: 3,
            },
            Ending::NoModel,
            Ending::EmptyCatalog,
            Ending::NoAnswer,
            Ending::OnlinePlanAskedMore,
            Ending::StoreDown(StoreDown::Withdrawn),
            Ending::StoreDown(StoreDown::NotRun),
            Ending::StoreDown(StoreDown::StoppedAfterStep),
            Ending::StoreDown(StoreDown::NothingDone),
            Ending::HybridWithoutLocal {
                read: "file:~/notes.md",
            },
            Ending::OnlineNotAsked {
                host: "api.example.com",
                why: "denied",
                channel: "telegram",
                sender: "42",
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 41: every way a turn ends without an answer is said in both languages, each
    /// without a word of the other; a turn that does not know its language speaks English.
    #[test]
    fn every_ending_speaks_one_language_only() {
        for ending in Ending::every() {
            for language in [Language::Italian, Language::English] {
                let text = ending.say(language);
                let foreign = metnos_core::language::words_of_the_other(&text, language);
                assert!(
                    foreign.is_empty(),
                    "{language:?} {ending:?}: {text:?} has {foreign:?}"
                );
            }
            assert_eq!(ending.finish(None).text, ending.say(Language::English));
        }
        assert_eq!(Ending::Cancelled.kind(), FinalKind::Cancelled);
        assert_eq!(
            Ending::StoreDown(StoreDown::NotRun)
                .finish(Some(Language::Italian))
                .kind,
            FinalKind::Error
        );
    }

    /// The planner's other words a person reads: the notice of a forget that came first,
    /// an LLM that failed, a service that cannot be reached.
    #[test]
    fn the_planner_s_other_notices_speak_one_language_only() {
        use crate::turn::vetting::{Dependency, unreachable};
        for language in [Language::Italian, Language::English] {
            let forgotten = crate::turn::conversation::forgotten_meanwhile_text(Some(language));
            let mut texts = vec![forgotten.to_owned()];
            for who in [Dependency::Policy, Dependency::Vaglio, Dependency::Approval] {
                texts.push(unreachable(Some(language), who));
            }
            for text in texts {
                let foreign = metnos_core::language::words_of_the_other(&text, language);
                assert!(foreign.is_empty(), "{language:?}: {text:?} has {foreign:?}");
            }
        }
    }
}
