//! The proposals a `metnos chat` session opens with (issue 22): what Metnos proposed to the
//! local user on its own waits for their next terminal session (the terminal has no push
//! channel); the planner has the telos engine weigh it under the session's quota (two per
//! session) and hands over the published cards, after the cards left for later. Offered on
//! a terminal, or to piped input only with `--proposals` (a script's lines are requests).
//! The end of input answers nothing. Each is answered here — yes, no, never
//! again, or Enter for later (the engine's "viewed, undecided"; the card comes back at the
//! next session while it is pending) — on the approval service, and the answer goes to the
//! telos engine as feedback.

use metnos_core::Language;
use metnos_gateway::conversation::StopDetector;
use metnos_proto::approval::v1 as approval;
use metnos_proto::planner::v1 as pb;
use metnos_proto::vaglio::v1 as vaglio;

use crate::ask_cli::Session;

/// An answer to a proposal's card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Yes,
    No,
    Never,
    Later,
}

impl Answer {
    fn parse(text: &str) -> Option<Answer> {
        match text.trim().to_lowercase().as_str() {
            "" => Some(Answer::Later),
            "y" | "yes" | "si" | "sì" => Some(Answer::Yes),
            "n" | "no" => Some(Answer::No),
            "never" | "mai" => Some(Answer::Never),
            _ => None,
        }
    }
}

fn prompt(language: Language) -> &'static str {
    match language {
        Language::Italian => "[y] sì · [n] no · [mai] mai più · [Invio] più tardi: ",
        Language::English => "[y] yes · [n] no · [never] never again · [Enter] later: ",
    }
}

fn said(language: Language, answer: Answer) -> &'static str {
    match (language, answer) {
        (Language::Italian, Answer::Yes) => "Fatto.",
        (Language::English, Answer::Yes) => "Done.",
        (Language::Italian, Answer::No) => "Rifiutata.",
        (Language::English, Answer::No) => "Rejected.",
        (Language::Italian, Answer::Never) => "Rifiutata: non te ne proporrò più di questo tipo.",
        (Language::English, Answer::Never) => "Rejected: I will not propose this kind again.",
        (Language::Italian, Answer::Later) => {
            "Più tardi: te la ripropongo alla prossima sessione, finché non scade."
        }
        (Language::English, Answer::Later) => {
            "Later: it comes back at your next session until it expires."
        }
    }
}

/// A new session id: what the telos engine counts the session's quota by.
fn new_session_id() -> String {
    format!("cli-{}", metnos_kit::random::hex(12))
}

impl Session {
    /// Opens the session on the planner and asks about each proposal it hands over. A
    /// planner that cannot weigh them now is said in one line; the chat goes on.
    pub async fn offer_proposals(&mut self, language: Language, stops: &StopDetector) {
        let request = pb::OpenSessionRequest {
            principal: Some(self.principal.clone()),
            session_id: new_session_id(),
            language: language.to_wire(),
        };
        let (notes, proposals) = match self.planner.open_session(request).await {
            Ok(r) => {
                let r = r.into_inner();
                (r.notes, r.proposals)
            }
            Err(status) => {
                eprintln!(
                    "metnos: {} ({})",
                    match language {
                        Language::Italian => "le proposte in attesa non sono disponibili ora",
                        Language::English => "waiting proposals are not available now",
                    },
                    crate::admin::terminal(status.message())
                );
                return;
            }
        };
        for note in notes {
            eprintln!();
            eprintln!("{}", crate::admin::terminal(&note));
        }
        let me = metnos_core::Principal::try_from(&self.principal).ok();
        for proposal in proposals {
            let Some(pending) = proposal.approval else {
                continue;
            };
            eprintln!();
            eprintln!(
                "{}",
                match language {
                    Language::Italian => "Metnos ti propone:",
                    Language::English => "Metnos proposes:",
                }
            );
            for line in proposal.card.map(|c| c.lines).unwrap_or_default() {
                eprintln!("  {}", crate::admin::terminal(&line));
            }
            let Some(answer) = ask(language).await else {
                // The end of input: nobody answered, nor saw the rest (they come back).
                return;
            };
            // A grant offer's Accept approves for good (the grant recorded); a revocation
            // offer's approves once (the grants revoked).
            let for_good = pending.executor == metnos_core::names::proposals::GRANT_OFFER;
            let (decision, territory) = match answer {
                Answer::Yes if for_good => (
                    approval::Decision::Approve,
                    approval::TerritoryConcession::Permanent,
                ),
                Answer::Yes => (
                    approval::Decision::Approve,
                    approval::TerritoryConcession::None,
                ),
                Answer::No | Answer::Never => (
                    approval::Decision::Reject,
                    approval::TerritoryConcession::None,
                ),
                Answer::Later => {
                    if let Some(me) = &me {
                        stops
                            .feedback(
                                &proposal.proposal_id,
                                vaglio::FeedbackKind::ViewedUndecided,
                                me,
                            )
                            .await;
                    }
                    eprintln!("{}", said(language, answer));
                    continue;
                }
            };
            let resolve = approval::ResolveRequest {
                token: pending.token.clone(),
                decision: decision as i32,
                decider: Some(self.principal.clone()),
                territory: territory as i32,
                edited_pattern: String::new(),
                edited_schedule: String::new(),
            };
            if let Err(status) = self.approvals.resolve(resolve).await {
                eprintln!("metnos: {}", crate::admin::terminal(status.message()));
                continue;
            }
            let kind = match answer {
                Answer::Yes => vaglio::FeedbackKind::Accept,
                Answer::Never => vaglio::FeedbackKind::RejectNeverAgain,
                _ => vaglio::FeedbackKind::Reject,
            };
            if let Some(me) = &me {
                stops.feedback(&proposal.proposal_id, kind, me).await;
            }
            eprintln!("{}", said(language, answer));
        }
    }
}

/// Asks until an answer; `None` at the end of input.
async fn ask(language: Language) -> Option<Answer> {
    tokio::task::spawn_blocking(move || {
        loop {
            eprint!("{}", prompt(language));
            let Some(line) = crate::ask_cli::read_line(None) else {
                eprintln!();
                return None;
            };
            match Answer::parse(&line) {
                Some(answer) => return Some(answer),
                None => eprintln!(
                    "{}",
                    match language {
                        Language::Italian => "Rispondi y, n, mai, oppure Invio.",
                        Language::English => "Please answer y, n, never, or Enter.",
                    }
                ),
            }
        }
    })
    .await
    .unwrap_or(None)
}

#[cfg(test)]
mod tests {
    use super::{Answer, new_session_id};

    #[test]
    fn answers_are_read_in_both_languages_and_enter_is_later() {
        assert_eq!(Answer::parse(""), Some(Answer::Later));
        assert_eq!(Answer::parse(" Sì "), Some(Answer::Yes));
        assert_eq!(Answer::parse("no"), Some(Answer::No));
        assert_eq!(Answer::parse("MAI"), Some(Answer::Never));
        assert_eq!(Answer::parse("never"), Some(Answer::Never));
        assert_eq!(Answer::parse("maybe"), None);
    }

    #[test]
    fn each_session_has_a_new_id_the_planner_takes() {
        let (a, b) = (new_session_id(), new_session_id());
        assert_ne!(a, b);
        assert!(
            metnos_planner::proactive::session::valid_session_id(&a),
            "{a}"
        );
    }
}
