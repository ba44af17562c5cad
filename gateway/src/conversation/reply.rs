//! What a handler decided: the [`Reply`] the conversation then carries out, once, in a
//! fixed order (the card shown again, the click's answer, the messages, the card closed,
//! what follows).

use metnos_core::language::Language;
use metnos_core::principal::Principal;
use metnos_proto::approval::v1 as approval;
use metnos_proto::vaglio::v1 as vaglio_pb;
use teloxide::types::CallbackQueryId;

use crate::store::SentCard;

/// What to say and do after a message or a click.
#[derive(Debug, Default)]
pub struct Reply {
    /// A card shown again, before the click is answered.
    pub show: Option<ShowCard>,
    /// The click's answer (Telegram shows its text briefly).
    pub answer: Option<Answer>,
    /// Messages, in order: the chat and the text.
    pub messages: Vec<(i64, String)>,
    /// A card closed to its outcome, once.
    pub close: Option<Close>,
    /// What follows the words.
    pub then: Option<Then>,
}

/// A click's answer.
#[derive(Debug)]
pub struct Answer {
    pub id: CallbackQueryId,
    pub text: Option<String>,
}

/// A card shown again: `extra` (HTML) below its lines, `buttons` instead of its own.
#[derive(Debug)]
pub struct ShowCard {
    pub card: SentCard,
    pub extra: Option<String>,
    pub buttons: Option<Vec<approval::ButtonRow>>,
    /// What the log says when Telegram does not take it.
    pub failed: &'static str,
}

/// The card of `token`, closed to what became of `pending`.
#[derive(Debug)]
pub struct Close {
    pub token: String,
    pub pending: approval::PendingApproval,
    pub lang: Language,
}

/// What follows a reply.
#[derive(Debug)]
pub enum Then {
    /// The telos engine hears how a proposal was answered.
    Feedback {
        proposal_id: String,
        kind: vaglio_pb::FeedbackKind,
        who: Principal,
    },
    /// The turn waiting for `token` is continued here, unless its stream is followed here:
    /// looked at once the reply was sent and the card closed, so a stream that dropped
    /// meanwhile is not waited for.
    Resume {
        token: String,
        sender: String,
        lang: Language,
    },
    /// The chat's open cards are looked at now (a stopped turn's say so at once).
    Sweep(i64),
}

impl Reply {
    /// One message.
    pub fn say(chat: i64, text: String) -> Reply {
        Reply {
            messages: vec![(chat, text)],
            ..Reply::default()
        }
    }

    /// A click answered with `text` (or nothing shown).
    pub fn answer(id: &CallbackQueryId, text: Option<String>) -> Reply {
        Reply {
            answer: Some(Answer {
                id: id.clone(),
                text,
            }),
            ..Reply::default()
        }
    }

    /// A click refused: the answer says why, and so does a message in its chat.
    pub fn refuse(id: &CallbackQueryId, chat: Option<i64>, said: String) -> Reply {
        let messages = chat.map(|chat| (chat, said.clone())).into_iter().collect();
        Reply {
            messages,
            ..Reply::answer(id, Some(said))
        }
    }

    /// This reply, then a message.
    pub fn and_say(mut self, chat: i64, text: String) -> Reply {
        self.messages.push((chat, text));
        self
    }

    /// This reply, then `then`.
    pub fn then(mut self, then: Then) -> Reply {
        self.then = Some(then);
        self
    }
}
