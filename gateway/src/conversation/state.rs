//! What the gateway remembers between updates, and the stop clause's decision: pure,
//! synchronous, held under one lock by the conversation.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::text::{self, Stop};

/// What to do with a paired person's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Cancel their running turn.
    Stop,
    /// They were asked whether to stop and did not say yes: say so and go on.
    CarryOn,
    /// An ambiguous phrase while a turn runs: ask whether to stop.
    AskWhetherToStop,
    /// Anything else starts a turn.
    RunTurn,
}

/// The stop clause: what `text` means (`stop`, as the vaglio recognised it), given whether
/// they were just asked whether to stop and whether a turn of theirs runs here.
pub fn next(text: &str, stop: Stop, asked_to_stop: bool, has_turn: bool) -> Next {
    if asked_to_stop {
        return if text::is_yes(text) {
            Next::Stop
        } else {
            Next::CarryOn
        };
    }
    match stop {
        Stop::Clear => Next::Stop,
        Stop::Ambiguous if has_turn => Next::AskWhetherToStop,
        Stop::Ambiguous | Stop::No => Next::RunTurn,
    }
}

/// What the gateway remembers between updates. Held under one lock, never across an
/// `.await`.
#[derive(Debug, Default)]
pub struct Conversations {
    /// Approval tokens whose turn stream is being followed here.
    live: HashSet<String>,
    /// People asked whether to stop.
    asked_to_stop: HashSet<String>,
    /// Turns followed here, per sender.
    busy: HashMap<String, usize>,
    /// Cards being or already edited to their outcome (the click and the turn's event
    /// both report it; Telegram is asked once).
    closed: HashSet<String>,
    /// People who pressed Edit on a grant offer or a standing order's card: its token, the
    /// chat they were asked in, until when their next message there (if it is a path, or a
    /// schedule) is the edit, and which of the two it edits.
    editing: HashMap<String, (String, i64, Instant, Edits)>,
    /// People who asked to stop, since when, and the turn the stop cancelled once the
    /// planner says: that turn's cancelled end says nothing more ("I stop" was said).
    stopping: HashMap<String, (Instant, Option<String>)>,
    /// Groups told to write privately, and when: once per [`GROUP_NOTICE_EVERY`] each, so a
    /// busy group is not answered message for message.
    groups_told: HashMap<i64, Instant>,
    /// People in a non-retreat attempt (issue 46), and until when a stop is its.
    attempts: HashMap<String, (metnos_proto::planner::v1::Attempt, Instant)>,
}

/// How long after its turn's answer asked a non-retreat attempt's question a stop is still
/// the attempt's.
pub const ATTEMPT_OPEN: std::time::Duration = std::time::Duration::from_secs(600);

/// How long after a person's stop the turn's cancelled end is taken as said by it.
const STOP_SAID_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// How often a group is told, at most, that Metnos answers only in private chats.
pub const GROUP_NOTICE_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Groups remembered at most (past it, until notices age out, no new group is told).
const GROUPS_KEPT: usize = 1024;

/// What an Edit button changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edits {
    /// A grant offer's pattern (a path).
    Pattern,
    /// A standing order's schedule.
    Schedule,
}

impl Conversations {
    /// `sender` asks to stop (before the planner is asked: its answer may come after the
    /// turn's end does).
    pub fn stopping(&mut self, sender: &str, now: Instant) {
        self.stopping
            .retain(|_, (since, _)| now.duration_since(*since) < STOP_SAID_FOR);
        self.stopping.insert(sender.to_owned(), (now, None));
    }

    /// What the stop did: `turn` cancelled ("I stop" said), or nothing (`None`: forgotten).
    pub fn stopped(&mut self, sender: &str, turn: Option<&str>) {
        match turn {
            Some(turn) => {
                if let Some((_, cancelled)) = self.stopping.get_mut(sender) {
                    *cancelled = Some(turn.to_owned());
                }
            }
            None => {
                self.stopping.remove(sender);
            }
        }
    }

    /// Whether the cancelled end of `sender`'s `turn` was already said by "I stop" (and
    /// forgets the stop): a stop of theirs in the last minute that cancelled this turn, or
    /// whose answer is not in yet.
    pub fn take_stopped(&mut self, sender: &str, turn: &str, now: Instant) -> bool {
        let said = self.stopping.get(sender).is_some_and(|(since, cancelled)| {
            now.duration_since(*since) < STOP_SAID_FOR
                && cancelled.as_deref().is_none_or(|t| t == turn)
        });
        if said {
            self.stopping.remove(sender);
        }
        said
    }

    /// Whether group `chat` is to be told now (not told within [`GROUP_NOTICE_EVERY`]);
    /// notes it when it is.
    pub fn tell_group(&mut self, chat: i64, now: Instant) -> bool {
        if self
            .groups_told
            .get(&chat)
            .is_some_and(|told| now.duration_since(*told) < GROUP_NOTICE_EVERY)
        {
            return false;
        }
        if self.groups_told.len() >= GROUPS_KEPT {
            self.groups_told
                .retain(|_, told| now.duration_since(*told) < GROUP_NOTICE_EVERY);
        }
        // Still full: a flood of groups is told nothing more (forgetting one would tell it
        // again at once).
        if self.groups_told.len() >= GROUPS_KEPT {
            return false;
        }
        self.groups_told.insert(chat, now);
        true
    }

    /// What to do with `sender`'s message (see [`next`]); a question asked is remembered
    /// until their next message, which answers it.
    pub fn next_for(&mut self, sender: &str, text: &str, stop: Stop, attempt: bool) -> Next {
        let asked = self.asked_to_stop.remove(sender);
        let next = next(text, stop, asked, self.has_turn(sender) || attempt);
        if next == Next::AskWhetherToStop {
            self.asked_to_stop.insert(sender.to_owned());
        }
        next
    }

    /// `sender` is in a non-retreat attempt, from `now` for [`ATTEMPT_OPEN`].
    pub fn open_attempt(
        &mut self,
        sender: &str,
        attempt: metnos_proto::planner::v1::Attempt,
        now: Instant,
    ) {
        self.attempts
            .insert(sender.to_owned(), (attempt, now + ATTEMPT_OPEN));
    }

    /// `sender`'s attempt is over.
    pub fn close_attempt(&mut self, sender: &str) {
        self.attempts.remove(sender);
    }

    /// `sender`'s non-retreat attempt, if one is open at `now`.
    pub fn attempt_of(
        &mut self,
        sender: &str,
        now: Instant,
    ) -> Option<metnos_proto::planner::v1::Attempt> {
        match self.attempts.get(sender) {
            Some((attempt, until)) if now < *until => Some(attempt.clone()),
            Some(_) => {
                self.attempts.remove(sender);
                None
            }
            None => None,
        }
    }

    /// Whether a turn of `sender`'s is followed here.
    pub fn has_turn(&self, sender: &str) -> bool {
        self.busy.get(sender).is_some_and(|n| *n > 0)
    }

    /// A turn of `sender`'s is followed from now on.
    pub fn turn_started(&mut self, sender: &str) {
        *self.busy.entry(sender.to_owned()).or_insert(0) += 1;
    }

    /// A turn of `sender`'s ended; the approvals it waited for are followed no more.
    pub fn turn_ended(&mut self, sender: &str, tokens: &[String]) {
        for token in tokens {
            self.live.remove(token);
        }
        if let Some(n) = self.busy.get_mut(sender) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.busy.remove(sender);
            }
        }
    }

    /// A turn followed here waits for the approval `token`.
    pub fn awaiting(&mut self, token: &str) {
        self.live.insert(token.to_owned());
    }

    /// Whether the turn waiting for `token` is followed here (else a click resumes it).
    pub fn is_followed(&self, token: &str) -> bool {
        self.live.contains(token)
    }

    /// `sender`'s next message in `chat` is their edit of `token`'s card (for 10 minutes).
    pub fn await_edit(&mut self, sender: &str, token: &str, chat: i64, now: Instant, edits: Edits) {
        self.editing.insert(
            sender.to_owned(),
            (
                token.to_owned(),
                chat,
                now + std::time::Duration::from_secs(600),
                edits,
            ),
        );
    }

    /// The card `sender`'s message in `chat` edits: they pressed Edit lately, in that chat,
    /// and the message is what the card's edit takes — a path (`~/…` or `/…`, one word) for
    /// an offer, a schedule that reads as one for a standing order. Any next message ends
    /// the wait: anything else (a stop, a request) is handled as it would be.
    pub fn take_edit(
        &mut self,
        sender: &str,
        chat: i64,
        text: &str,
        now: Instant,
    ) -> Option<(String, Edits)> {
        let (token, asked_in, until, edits) = self.editing.remove(sender)?;
        let text = text.trim();
        let fits = match edits {
            Edits::Pattern => {
                (text.starts_with("~/") || text.starts_with('/'))
                    && !text.contains(char::is_whitespace)
            }
            Edits::Schedule => metnos_kit::schedule::Schedule::parse(text).is_ok(),
        };
        (now < until && asked_in == chat && fits).then_some((token, edits))
    }

    /// Ends any Edit wait for `token` (its card was decided).
    pub fn forget_edit(&mut self, token: &str) {
        self.editing.retain(|_, (waiting, ..)| waiting != token);
    }

    /// Claims the editing of `token`'s card to its outcome: true once.
    pub fn claim_close(&mut self, token: &str) -> bool {
        self.closed.insert(token.to_owned())
    }

    /// The edit failed: the next report of the outcome may try again.
    pub fn release_close(&mut self, token: &str) {
        self.closed.remove(token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Issue 41: after a person's stop, "I stop" is the cancelled turn's last word; the
    /// planner's answer may come before or after the turn's end. Only that turn's end, and
    /// only for a minute, is taken as said: another turn's, or a later one, is told.
    #[test]
    fn a_stop_swallows_only_the_end_of_the_turn_it_cancelled() {
        let now = Instant::now();
        let mut c = Conversations::default();
        // The end arrives before the planner's answer: taken as said.
        c.stopping("ada", now);
        assert!(c.take_stopped("ada", "t1", now));
        assert!(!c.take_stopped("ada", "t1", now), "once");
        // The answer first: only the cancelled turn's end.
        c.stopping("ada", now);
        c.stopped("ada", Some("t2"));
        assert!(
            !c.take_stopped("ada", "t9", now),
            "another turn's end is told"
        );
        assert!(c.take_stopped("ada", "t2", now));
        // A stop that cancelled nothing, or an old one, swallows nothing.
        c.stopping("ada", now);
        c.stopped("ada", None);
        assert!(!c.take_stopped("ada", "t3", now));
        c.stopping("bob", now);
        c.stopped("bob", Some("t4"));
        assert!(!c.take_stopped("bob", "t4", now + Duration::from_secs(61)));
        // A flood of groups is told at most once each, and past the limit no more.
        for chat in 0..GROUPS_KEPT as i64 {
            assert!(c.tell_group(-chat - 1, now));
        }
        assert!(!c.tell_group(-1, now), "once an hour");
        assert!(!c.tell_group(-999_999, now), "full: nobody new is told");
        assert!(
            c.tell_group(-999_999, now + GROUP_NOTICE_EVERY),
            "the old ones aged out"
        );
    }

    /// After Edit, only a path sent in the chat where it was asked, within 10 minutes, is
    /// the edit; anything else (a stop, a request, another chat) ends the wait and is
    /// handled as it would be.
    #[test]
    fn only_a_path_in_the_same_chat_soon_after_is_an_edit() {
        let now = Instant::now();
        let mut c = Conversations::default();
        c.await_edit("42", "tok", 42, now, Edits::Pattern);
        assert_eq!(
            c.take_edit("42", 42, " ~/inv/2026/* ", now),
            Some(("tok".into(), Edits::Pattern))
        );
        assert_eq!(
            c.take_edit("42", 42, "~/inv/2026/*", now),
            None,
            "taken once"
        );
        for (chat, text) in [(42, "stop"), (42, "~/inv and the rest"), (-100, "~/inv/*")] {
            c.await_edit("42", "tok", 42, now, Edits::Pattern);
            assert_eq!(c.take_edit("42", chat, text, now), None, "{chat} {text}");
            assert_eq!(
                c.take_edit("42", 42, "~/inv/*", now),
                None,
                "the wait ended"
            );
        }
        c.await_edit("42", "tok", 42, now, Edits::Pattern);
        let later = now + Duration::from_secs(601);
        assert_eq!(c.take_edit("42", 42, "~/inv/*", later), None, "too late");
    }

    /// After a standing order's Edit, only a message that reads as a schedule is the edit;
    /// a request or a stop is handled as it would be.
    #[test]
    fn only_a_schedule_is_a_standing_orders_edit() {
        let now = Instant::now();
        let mut c = Conversations::default();
        for text in ["daily@07:30", " every 2 hours ", "0 9 * * MON"] {
            c.await_edit("42", "tok", 42, now, Edits::Schedule);
            assert_eq!(
                c.take_edit("42", 42, text, now),
                Some(("tok".into(), Edits::Schedule)),
                "{text}"
            );
        }
        for text in ["stop", "what time is it?", "~/inv/*", "daily@25:00"] {
            c.await_edit("42", "tok", 42, now, Edits::Schedule);
            assert_eq!(c.take_edit("42", 42, text, now), None, "{text}");
            assert_eq!(
                c.take_edit("42", 42, "daily@07:30", now),
                None,
                "the wait ended with {text}"
            );
        }
        // In another chat, too late, or once its card was decided: not an edit.
        c.await_edit("42", "tok", 42, now, Edits::Schedule);
        assert_eq!(c.take_edit("42", -100, "daily@07:30", now), None);
        c.await_edit("42", "tok", 42, now, Edits::Schedule);
        let later = now + Duration::from_secs(601);
        assert_eq!(c.take_edit("42", 42, "daily@07:30", later), None);
        c.await_edit("42", "tok", 42, now, Edits::Schedule);
        c.await_edit("7", "other", 7, now, Edits::Schedule);
        c.forget_edit("tok");
        assert_eq!(c.take_edit("42", 42, "daily@07:30", now), None);
        assert_eq!(
            c.take_edit("7", 7, "daily@07:30", now),
            Some(("other".into(), Edits::Schedule)),
            "another card's wait stays"
        );
    }

    /// [`next`] with the recogniser the vaglio answers with.
    fn n(text: &str, asked_to_stop: bool, has_turn: bool) -> Next {
        next(text, text::stop_of(text), asked_to_stop, has_turn)
    }

    #[test]
    fn a_clear_stop_stops_and_an_ambiguous_one_asks_only_while_a_turn_runs() {
        assert_eq!(n("never mind", false, false), Next::Stop);
        assert_eq!(n("/stop", false, true), Next::Stop);
        assert_eq!(
            n("hmm, let's see later", false, true),
            Next::AskWhetherToStop
        );
        assert_eq!(n("hmm, let's see later", false, false), Next::RunTurn);
        assert_eq!(n("read my notes", false, true), Next::RunTurn);
    }

    #[test]
    fn the_answer_to_the_stop_question_is_yes_or_carry_on() {
        assert_eq!(n("yes", true, true), Next::Stop);
        assert_eq!(n("Sì!", true, false), Next::Stop);
        assert_eq!(n("no", true, true), Next::CarryOn);
        // Asked, any other message is an answer, not a new request (nor a new stop).
        assert_eq!(n("read my notes", true, true), Next::CarryOn);
        assert_eq!(n("stop", true, true), Next::CarryOn);
    }

    #[test]
    fn a_question_asked_is_answered_by_the_next_message_only() {
        let mut state = Conversations::default();
        assert_eq!(
            state.next_for("ada", "hmm", text::stop_of("hmm"), false),
            Next::RunTurn,
            "no turn runs"
        );
        state.turn_started("ada");
        assert_eq!(
            state.next_for("ada", "hmm", text::stop_of("hmm"), false),
            Next::AskWhetherToStop
        );
        // Another person's question is theirs.
        assert_eq!(
            state.next_for("bob", "yes", text::stop_of("yes"), false),
            Next::RunTurn
        );
        assert_eq!(
            state.next_for("ada", "no", text::stop_of("no"), false),
            Next::CarryOn
        );
        assert_eq!(
            state.next_for("ada", "yes", text::stop_of("yes"), false),
            Next::RunTurn,
            "asked once"
        );
        assert_eq!(
            state.next_for("ada", "hmm", text::stop_of("hmm"), false),
            Next::AskWhetherToStop
        );
        assert_eq!(
            state.next_for("ada", "yes", text::stop_of("yes"), false),
            Next::Stop
        );
    }

    /// Issue 46: while a non-retreat attempt is open (its turn's answer asked the person),
    /// an ambiguous stop is a question even with no turn running; the attempt closes after
    /// [`ATTEMPT_OPEN`], or when closed.
    #[test]
    fn an_open_attempt_makes_an_ambiguous_stop_a_question_for_ten_minutes() {
        let mut state = Conversations::default();
        let now = Instant::now();
        let attempt = metnos_proto::planner::v1::Attempt {
            attempt_id: "at-1".into(),
            wanted: "table_extract".into(),
        };
        state.open_attempt("ada", attempt.clone(), now);
        assert_eq!(state.attempt_of("ada", now), Some(attempt.clone()));
        assert_eq!(state.attempt_of("bob", now), None, "hers alone");
        let open = state.attempt_of("ada", now).is_some();
        assert_eq!(
            state.next_for("ada", "hmm", text::stop_of("hmm"), open),
            Next::AskWhetherToStop
        );
        assert_eq!(
            state.next_for("ada", "yes", text::stop_of("yes"), open),
            Next::Stop
        );
        assert_eq!(state.attempt_of("ada", now + ATTEMPT_OPEN), None, "expired");
        state.open_attempt("ada", attempt, now);
        state.close_attempt("ada");
        assert_eq!(state.attempt_of("ada", now), None);
    }

    #[test]
    fn turns_are_counted_per_sender_and_their_approvals_followed_while_they_run() {
        let mut state = Conversations::default();
        state.turn_started("ada");
        state.turn_started("ada");
        state.awaiting("t1");
        assert!(state.has_turn("ada") && !state.has_turn("bob"));
        assert!(state.is_followed("t1"));
        state.turn_ended("ada", &["t1".to_owned()]);
        assert!(state.has_turn("ada"), "one turn still runs");
        assert!(!state.is_followed("t1"));
        state.turn_ended("ada", &[]);
        assert!(!state.has_turn("ada"));
        // An end without a start (never expected) does not underflow.
        state.turn_ended("ada", &[]);
        assert!(!state.has_turn("ada"));
    }

    #[test]
    fn a_card_is_closed_once_unless_the_edit_failed() {
        let mut state = Conversations::default();
        assert!(state.claim_close("t1"));
        assert!(!state.claim_close("t1"), "the second report edits nothing");
        state.release_close("t1");
        assert!(state.claim_close("t1"), "a failed edit may be tried again");
    }
}
