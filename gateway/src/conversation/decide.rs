//! The conversation's pure decisions: what a button asks for, what a turn's event asks of
//! the chat, the lines that close a card or answer a click, in the person's language.

use metnos_core::language::Language;
use metnos_core::principal::Principal;
use metnos_core::resolve::ResolveRefusal;
use metnos_proto::approval::v1 as approval;
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::turn_event::Event;
use metnos_proto::vaglio::v1 as vaglio_pb;

use crate::outbox;
use crate::service::CHANNEL;
use crate::text::{self, Says};

/// What a click on a card asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClickAction {
    /// Decide: approve (just this call, or with a territory) or reject.
    Resolve {
        token: String,
        decision: approval::Decision,
        territory: approval::TerritoryConcession,
    },
    /// Show "always for <pattern>" in full, to confirm.
    ConfirmAlways(String),
    /// The confirmation declined: show the card as it was.
    Back(String),
    /// A proposal's "never again": rejected, and the vaglio told never to propose its kind.
    Never(String),
    /// A grant offer's Edit: ask for the pattern; the next message is it.
    Edit(String),
    /// `/forget`'s answer, for the confirmation with this id.
    Forget { id: String, what: Forgetting },
}

impl ClickAction {
    /// The card's token the click is about (`/forget`'s answer is about none).
    pub fn token(&self) -> Option<&str> {
        match self {
            ClickAction::Resolve { token, .. }
            | ClickAction::ConfirmAlways(token)
            | ClickAction::Back(token)
            | ClickAction::Never(token)
            | ClickAction::Edit(token) => Some(token),
            ClickAction::Forget { .. } => None,
        }
    }
}

/// What `/forget`'s answer erases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forgetting {
    /// "Keep".
    Nothing,
    /// The person's threads.
    Conversations,
    /// Their threads and their long-term memory.
    Everything,
}

/// The proposal a card asks about (a planner's grant offer, whose request carries its
/// proposal id), or `None` for an approval of a call.
pub fn proposal_of(pending: &approval::PendingApproval) -> Option<String> {
    let request = pending.request.as_ref()?;
    let extra: serde_json::Value = serde_json::from_str(&request.extra_json).ok()?;
    let id = extra.get("proposal_id")?.as_str()?;
    (!id.is_empty() && id.len() <= 128).then(|| id.to_owned())
}

/// A card's button, understood, or what is wrong.
pub fn action_of(data: &str) -> Result<ClickAction, &'static str> {
    use approval::{Decision, TerritoryConcession as T};
    use text::CallbackData as D;
    let resolve = |token, decision, territory| ClickAction::Resolve {
        token,
        decision,
        territory,
    };
    Ok(match text::parse_callback(data)? {
        D::Approve(token) => resolve(token, Decision::Approve, T::None),
        D::Reject(token) => resolve(token, Decision::Reject, T::None),
        D::Session(token) => resolve(token, Decision::Approve, T::Session),
        D::AlwaysConfirmed(token) => resolve(token, Decision::Approve, T::Permanent),
        D::Always(token) => ClickAction::ConfirmAlways(token),
        D::Back(token) => ClickAction::Back(token),
        D::Never(token) => ClickAction::Never(token),
        D::Edit(token) => ClickAction::Edit(token),
        D::Forget(id) => ClickAction::Forget {
            id,
            what: Forgetting::Conversations,
        },
        D::ForgetAll(id) => ClickAction::Forget {
            id,
            what: Forgetting::Everything,
        },
        D::Keep(id) => ClickAction::Forget {
            id,
            what: Forgetting::Nothing,
        },
    })
}

/// The line that closes a card: the outcome, and for an approval with a territory what
/// was conceded ("✅ approved · always for ~/x/* [territory: permanent]").
pub fn closing_line(pending: &approval::PendingApproval, lang: Language) -> Option<String> {
    let outcome = outbox::outcome(pending.status, lang)?;
    let concession = match pending
        .request
        .as_ref()
        .map(|r| approval::TerritoryConcession::try_from(r.territory_concession))
    {
        Some(Ok(approval::TerritoryConcession::Session)) => {
            Some(metnos_core::territory::Concession::Session)
        }
        Some(Ok(approval::TerritoryConcession::Permanent)) => {
            Some(metnos_core::territory::Concession::Permanent)
        }
        _ => None,
    };
    let approved = pending.status == approval::ApprovalStatus::Approved as i32;
    Some(match concession {
        Some(c) if approved => {
            format!("{outcome} · {}", c.said(lang, &pending.territory_pattern))
        }
        // A standing order approved with another schedule: the card shows the one it
        // offered, the closing line the one it was set up on.
        _ if approved && !pending.edited_schedule.is_empty() => {
            let edited = metnos_core::html::one_visible_line(&pending.edited_schedule, 200);
            match lang {
                Language::Italian => format!("{outcome} · con l'orario {edited}"),
                Language::English => format!("{outcome} · on the schedule {edited}"),
            }
        }
        _ => outcome,
    })
}

/// What a turn's event asks of the chat.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The turn is working: show typing (at most every few seconds).
    Typing,
    /// The turn waits for an approval: follow it, and send its card if there is one.
    Card {
        token: String,
        card: Option<approval::Card>,
    },
    /// An approval was decided: close its card.
    Decided { token: String, status: i32 },
    /// The turn ended: say `text`, and stop following; the answer belongs to `thread` (empty
    /// for a one-shot turn). `cancelled`: it was stopped (after the person's own stop, the
    /// gateway already said so: nothing more is said).
    Finished {
        text: String,
        thread: String,
        cancelled: bool,
        turn: String,
        /// A non-retreat attempt the answer left open (it asks the person).
        attempt: Option<pb::Attempt>,
    },
    /// The turn began a non-retreat attempt: a stop now is the attempt's.
    Attempt(pb::Attempt),
    /// Nothing to show.
    Nothing,
}

/// What `event` asks of the chat, in `lang`.
pub fn step_of(event: Event, lang: Language) -> Step {
    match event {
        Event::Started(_) | Event::StepProposed(_) => Step::Typing,
        Event::AwaitingApproval(waiting) => Step::Card {
            token: waiting.token,
            card: waiting.card,
        },
        Event::ApprovalDecided(decided) => Step::Decided {
            token: decided.token,
            status: decided.status,
        },
        Event::Attempt(attempt) => Step::Attempt(attempt),
        Event::Finished(finished) => Step::Finished {
            attempt: finished.attempt,
            turn: finished.turn_id,
            thread: finished.thread_id,
            cancelled: finished.kind == pb::FinalKind::Cancelled as i32,
            text: final_text(finished.text, lang),
        },
        _ => Step::Nothing,
    }
}

/// A turn's last message: the answer, or why it ended, as the planner said it in the
/// person's language (issue 41: the planner's endings are one table in both languages; the
/// kind is never shown untranslated). An empty one says the turn ended.
pub(super) fn final_text(text: String, lang: Language) -> String {
    if text.trim().is_empty() {
        return text::say(lang, Says::TurnEndedSilently);
    }
    text
}

/// What to say after asking the planner to cancel: whether it cancelled, or its error.
pub(super) fn after_cancel(result: Result<bool, tonic::Code>, lang: Language) -> Says<'static> {
    match result {
        Ok(true) => Says::Stopped,
        Ok(false) | Err(tonic::Code::NotFound) => Says::NothingToStop,
        Err(_) => Says::Unavailable(planner_name(lang)),
    }
}

pub(super) fn store_name(lang: Language) -> &'static str {
    match lang {
        Language::Italian => "il mio archivio",
        Language::English => "my store",
    }
}

pub(super) fn planner_name(lang: Language) -> &'static str {
    match lang {
        Language::Italian => "il pianificatore",
        Language::English => "the planner",
    }
}

pub(super) fn approval_name(lang: Language) -> &'static str {
    match lang {
        Language::Italian => "il servizio delle approvazioni",
        Language::English => "the approval service",
    }
}

/// What a clicker is told when the approval service did not decide: its refusal in their
/// language, or that it cannot be reached, or (another failure) that it did not answer.
pub(super) fn click_refusal(
    refusal: Option<ResolveRefusal>,
    code: tonic::Code,
    lang: Language,
) -> String {
    let said = match (refusal, code) {
        (Some(refusal), _) => Says::ResolveRefused(refusal),
        // (Not a deadline: the decision may have been taken.)
        (None, tonic::Code::Unavailable) => Says::Unavailable(approval_name(lang)),
        (None, _) => Says::CannotResolve,
    };
    text::say(lang, said)
}

/// The person a Telegram user id names (none for an id no principal could hold; Telegram's
/// are numbers).
pub(super) fn person(sender_id: &str) -> Option<Principal> {
    Principal::new(CHANNEL, sender_id).ok()
}

/// What a proposal's answer teaches the telos engine: accept is what recorded the grant (a
/// grant offer approved for good), revoked the grants or kept the shortcut (a revocation
/// or shortcut offer approved once: `revocation`); a
/// `never:` button is a never; another approval (a button the card never had) teaches
/// nothing.
pub(super) fn feedback_kind(
    decision: approval::Decision,
    territory: approval::TerritoryConcession,
    never: bool,
    revocation: bool,
) -> Option<vaglio_pb::FeedbackKind> {
    use approval::{Decision, TerritoryConcession as T};
    match (decision, territory, never) {
        (_, _, true) => Some(vaglio_pb::FeedbackKind::RejectNeverAgain),
        (Decision::Approve, T::Permanent, _) if !revocation => {
            Some(vaglio_pb::FeedbackKind::Accept)
        }
        (Decision::Approve, T::None, _) if revocation => Some(vaglio_pb::FeedbackKind::Accept),
        (Decision::Reject, _, _) => Some(vaglio_pb::FeedbackKind::Reject),
        _ => None,
    }
}

/// Why `clicker` may not confirm "always" on `pending`, if they may not: not theirs,
/// expired, or decided already.
pub(super) fn confirm_refusal(
    pending: &approval::PendingApproval,
    clicker: &str,
) -> Option<ResolveRefusal> {
    if pending.requester.as_ref().map(|p| p.sender_id.as_str()) != Some(clicker) {
        Some(ResolveRefusal::NotRequester)
    } else if pending.status == approval::ApprovalStatus::Expired as i32 {
        Some(ResolveRefusal::Expired)
    } else if pending.status != approval::ApprovalStatus::Pending as i32 {
        Some(ResolveRefusal::AlreadyResolved)
    } else {
        None
    }
}

/// The language a request was asked in (`fallback` when it does not say).
pub(super) fn language_of(pending: &approval::PendingApproval, fallback: Language) -> Language {
    pending
        .request
        .as_ref()
        .and_then(|r| Language::from_wire(r.language))
        .unwrap_or(fallback)
}

/// The confirmation of "always": the card's question and its two buttons.
pub(super) fn always_confirmation(
    pending: &approval::PendingApproval,
    token: &str,
    lang: Language,
) -> (String, Vec<approval::ButtonRow>) {
    let question = text::say(
        lang,
        Says::ConfirmAlways {
            pattern: &pending.territory_pattern,
            capability: &pending.capability,
        },
    );
    let button = |said, kind: &str| approval::Button {
        text: text::say(lang, said),
        data: format!("{kind}:{token}"),
    };
    let rows = vec![
        approval::ButtonRow {
            buttons: vec![button(Says::ConfirmButton, text::CONFIRM_ALWAYS)],
        },
        approval::ButtonRow {
            buttons: vec![button(Says::BackButton, text::BACK)],
        },
    ];
    (format!("<b>{}</b>", text::escape_html(&question)), rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buttons_decide_once_for_a_session_or_always_after_a_confirmation() {
        use approval::{Decision, TerritoryConcession as T};
        let resolve = |decision, territory| {
            Ok(ClickAction::Resolve {
                token: "abc".to_owned(),
                decision,
                territory,
            })
        };
        assert_eq!(
            action_of("approve:abc"),
            resolve(Decision::Approve, T::None)
        );
        assert_eq!(action_of("reject:abc"), resolve(Decision::Reject, T::None));
        assert_eq!(
            action_of("session:abc"),
            resolve(Decision::Approve, T::Session)
        );
        // "Always" grants nothing by itself: it asks to confirm.
        assert_eq!(
            action_of("always:abc"),
            Ok(ClickAction::ConfirmAlways("abc".to_owned()))
        );
        assert_eq!(
            action_of("confirm-always:abc"),
            resolve(Decision::Approve, T::Permanent)
        );
        assert_eq!(
            action_of("back:abc"),
            Ok(ClickAction::Back("abc".to_owned()))
        );
        assert_eq!(action_of("launch:missiles"), Err("unknown callback"));
        assert_eq!(action_of(""), Err("unknown callback"));
    }

    #[test]
    fn a_closed_card_says_the_outcome_and_what_was_conceded() {
        let pending = |status: approval::ApprovalStatus,
                       territory: approval::TerritoryConcession| {
            approval::PendingApproval {
                status: status as i32,
                territory_pattern: "~/Documents/invoices-2026/*".to_owned(),
                request: Some(approval::ApprovalRequest {
                    territory_concession: territory as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }
        };
        use approval::{ApprovalStatus as S, TerritoryConcession as T};
        assert_eq!(
            closing_line(&pending(S::Approved, T::Permanent), Language::Italian).unwrap(),
            "✅ approvato · sempre per ~/Documents/invoices-2026/* [territorio: permanente]"
        );
        assert_eq!(
            closing_line(&pending(S::Approved, T::Session), Language::English).unwrap(),
            "✅ approved · for this session: ~/Documents/invoices-2026/* [territory: session]"
        );
        assert_eq!(
            closing_line(&pending(S::Approved, T::None), Language::English).unwrap(),
            "✅ approved"
        );
        assert_eq!(
            closing_line(&pending(S::Expired, T::None), Language::English).unwrap(),
            "⌛ expired"
        );
        assert_eq!(
            closing_line(&pending(S::Pending, T::None), Language::English),
            None
        );
    }

    #[test]
    fn a_turn_s_end_is_the_answer_or_says_why_it_stopped() {
        let finished = |kind: pb::FinalKind, text: &str| {
            step_of(
                Event::Finished(pb::TurnFinished {
                    kind: kind as i32,
                    text: text.to_owned(),
                    thread_id: "t1".to_owned(),
                    ..Default::default()
                }),
                Language::English,
            )
        };
        let step = |text: &str, cancelled| Step::Finished {
            text: text.to_owned(),
            thread: "t1".to_owned(),
            cancelled,
            turn: String::new(),
            attempt: None,
        };
        assert_eq!(
            finished(pb::FinalKind::Answer, "hello Ada"),
            step("hello Ada", false)
        );
        // The planner's words, in the person's language, as they are: no English kind.
        assert_eq!(
            finished(pb::FinalKind::Cancelled, "Mi sono fermato."),
            step("Mi sono fermato.", true)
        );
        assert_eq!(
            final_text(String::new(), Language::Italian),
            "Ho smesso di lavorare a questa richiesta."
        );
    }

    #[test]
    fn a_click_the_approval_service_could_not_take_is_told_in_one_sentence() {
        assert_eq!(
            click_refusal(None, tonic::Code::Unavailable, Language::English),
            "I cannot reach the approval service right now: please try again shortly."
        );
        assert_eq!(
            click_refusal(None, tonic::Code::Unavailable, Language::Italian),
            "Non riesco a raggiungere il servizio delle approvazioni in questo momento: riprova tra poco."
        );
        assert_eq!(
            click_refusal(None, tonic::Code::DeadlineExceeded, Language::English),
            "Approval cannot be resolved: the service does not answer, try again shortly"
        );
        assert_eq!(
            click_refusal(None, tonic::Code::Internal, Language::English),
            "Approval cannot be resolved: the service does not answer, try again shortly"
        );
    }

    #[test]
    fn a_stop_says_whether_anything_was_stopped_or_the_planner_is_away() {
        let said = |r| text::say(Language::English, after_cancel(r, Language::English));
        assert_eq!(said(Ok(true)), "All right, I stop.");
        assert_eq!(said(Ok(false)), "I am not doing anything right now.");
        assert_eq!(
            said(Err(tonic::Code::NotFound)),
            "I am not doing anything right now."
        );
        assert_eq!(
            said(Err(tonic::Code::Unavailable)),
            "I cannot reach the planner right now: please try again shortly."
        );
    }
}
