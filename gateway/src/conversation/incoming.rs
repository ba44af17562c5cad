//! What the transport hands the conversation: a person's text message, a click, or a
//! message written in a group.

use metnos_core::language::Language;
use teloxide::types::CallbackQueryId;

/// A text message written in a group or a supergroup: never answered there (everyone in it
/// would read the answer, a card, a code); the group is told, in the writer's language, to
/// write privately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupMessage {
    pub chat: i64,
    pub lang: Language,
}

/// A text message from a person, as the transport read it off an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageIn {
    pub chat: i64,
    pub sender: String,
    /// First name, and `(@username)` when they have one.
    pub name: String,
    /// From their Telegram client (the pairing's language wins once paired).
    pub lang: Language,
    pub text: String,
    /// Forwarded from someone else: the words are not the person's own.
    pub forwarded: bool,
    /// The message of this chat it replies to, if it is a reply.
    pub reply_to: Option<i32>,
}

/// A click on a card's button.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Click {
    pub id: CallbackQueryId,
    pub clicker: String,
    pub lang: Language,
    /// The button's callback data (empty when it had none).
    pub data: String,
    /// The chat of the card clicked, when Telegram says.
    pub chat: Option<i64>,
    /// The message clicked, when Telegram says.
    pub message: Option<i32>,
}

/// What the conversation is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    Message(MessageIn),
    Click(Click),
    Group(GroupMessage),
}
