//! What a person's message says about stopping (the telos stop clause), and what follows:
//! their turn cancelled, a non-retreat attempt's stop recorded (issue 46), a question when
//! it is not clear, else the message is a request.

use std::sync::Arc;
use std::time::Instant;

use metnos_core::language::Language;
use metnos_core::principal::Principal;
use metnos_proto::planner::v1 as pb;

use super::Conversation;
use super::decide::after_cancel;
use super::incoming::MessageIn;
use super::reply::{Reply, Then};
use super::state::Next;
use crate::store::Pairing;
use crate::text::{self, Says};

impl Conversation {
    /// `message` from `who` (paired as `pairing`) in `chat`: a stop, an answer to a stop's
    /// question, or a request that runs a turn.
    pub(super) async fn stop_or_turn(
        self: &Arc<Self>,
        chat: i64,
        who: Principal,
        pairing: &Pairing,
        message: MessageIn,
    ) -> Reply {
        let lang = pairing.language;
        // During a non-retreat attempt (a turn of it running, or the question its answer
        // asked), a stop is the attempt's.
        let attempt = self.state().attempt_of(&message.sender, Instant::now());
        let (stop, question) = self
            .stops
            .detect(&who, &message.text, attempt.as_ref())
            .await;
        let next = self
            .state()
            .next_for(&message.sender, &message.text, stop, attempt.is_some());
        match (next, attempt) {
            (Next::Stop, Some(attempt)) => self.stop_attempt(chat, &who, lang, stop, attempt).await,
            (Next::Stop, None) => self.stop(chat, &who, lang).await,
            (Next::CarryOn, _) => Reply::say(chat, text::say(lang, Says::GoingOn)),
            (Next::AskWhetherToStop, Some(_)) if question.is_some() => {
                Reply::say(chat, question.unwrap_or_default())
            }
            (Next::AskWhetherToStop, _) => Reply::say(chat, text::say(lang, Says::ConfirmStop)),
            (Next::RunTurn, attempt) => {
                // Another request: a stop of the turn it starts is that turn's, not the
                // attempt's (the turn opens its own when it needs one).
                if attempt.is_some() {
                    self.state().close_attempt(who.sender_id());
                }
                self.run_turn(chat, who, pairing, message).await
            }
        }
    }

    /// A stop of a non-retreat attempt: recorded as one (a clear stop phrase was, by the
    /// vaglio's `DetectStop`; a "yes" to its question is here), the attempt closed, and
    /// their turn cancelled if one runs — else they are told what is given up.
    async fn stop_attempt(
        &self,
        chat: i64,
        who: &Principal,
        lang: Language,
        stop: text::Stop,
        attempt: pb::Attempt,
    ) -> Reply {
        if stop != text::Stop::Clear {
            self.stops.attempt_stopped(who, &attempt).await;
        }
        self.state().close_attempt(who.sender_id());
        if self.state().has_turn(who.sender_id()) {
            return self.stop(chat, who, lang).await;
        }
        Reply::say(chat, text::say(lang, Says::AttemptStopped(&attempt.wanted)))
    }

    /// Cancels their turn; says whether anything stopped; the cancelled turn's card says
    /// so now, not at the next sweep.
    async fn stop(&self, chat: i64, who: &Principal, lang: Language) -> Reply {
        let request = pb::CancelTurnRequest {
            target: Some(pb::cancel_turn_request::Target::Principal(who.to_proto())),
            reason: "stop from Telegram".to_owned(),
            ..Default::default()
        };
        // Noted before asking: the turn's end may come back before the planner's answer.
        self.state().stopping(who.sender_id(), Instant::now());
        let result = self.planner.clone().cancel_turn(request).await;
        let cancelled = result
            .as_ref()
            .ok()
            .filter(|r| r.get_ref().cancelled)
            .map(|r| r.get_ref().turn_id.clone());
        self.state().stopped(who.sender_id(), cancelled.as_deref());
        let said = after_cancel(
            result
                .map(|r| r.get_ref().cancelled)
                .map_err(|status| status.code()),
            lang,
        );
        Reply::say(chat, text::say(lang, said)).then(Then::Sweep(chat))
    }
}
