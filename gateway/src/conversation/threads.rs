//! The person's conversation with Metnos as threads (issue 40), as the chat sees it:
//! `/new` starts a new thread with their next message, a reply to an older answer of
//! Metnos's continues that answer's thread, anything else continues their current one;
//! `/forget` erases them all once the person confirms with its button.
//! The planner keeps the threads; this side remembers only which thread each answer
//! message belongs to, that a `/new` waits for their next message and which `/forget`
//! question is open (in its store, so a restart in between keeps them).

use std::sync::Arc;

use metnos_core::language::Language;
use metnos_kit::time::now_ms;
use metnos_proto::approval::v1 as approval;
use metnos_proto::planner::v1 as pb;

use super::decide::{person, planner_name, store_name};
use super::{Click, Conversation, Forgetting, Reply};
use crate::store::Store;
use crate::text::{self, ForgetSays, Says};

/// How long a `/forget` question can be answered.
const FORGET_WITHIN_MS: i64 = 5 * 60_000;

/// A conversation command: the whole message, as Telegram clients send it (`/new`, or
/// `/new@TheBot` from a command menu).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    New,
    Forget,
}

/// The command `text` is, if it is one.
pub fn command_of(text: &str) -> Option<Command> {
    let word = text.trim();
    let name = word.split_once('@').map_or(word, |(name, _bot)| name);
    match name {
        _ if word.contains(char::is_whitespace) => None,
        "/new" => Some(Command::New),
        "/forget" => Some(Command::Forget),
        _ => None,
    }
}

/// The setting that says `sender`'s next message starts a new thread.
fn new_key(sender: &str) -> String {
    format!("thread.new.{sender}")
}

/// `/new` from `sender`: their next message starts a new thread.
pub async fn start_new(store: &Store, sender: &str) -> Result<(), sqlx::Error> {
    store.set_setting(&new_key(sender), "1").await
}

/// Which thread `sender`'s message in `chat` goes to: a new one after `/new`, the thread of
/// the answer it replies to, else their current one. A store that cannot be read leaves
/// the current thread (said in the log): the message is still answered.
pub async fn thread_of(
    store: &Store,
    chat: i64,
    sender: &str,
    reply_to: Option<i32>,
) -> (pb::Thread, String) {
    match store.take_setting(&new_key(sender)).await {
        Ok(true) => return (pb::Thread::New, String::new()),
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(error = %e, "cannot read whether a /new waits; the conversation goes on")
        }
    }
    let Some(replied) = reply_to else {
        return (pb::Thread::Continue, String::new());
    };
    match store
        .answer_thread(&chat.to_string(), replied, sender)
        .await
    {
        Ok(thread) => (pb::Thread::Continue, thread.unwrap_or_default()),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read which thread a replied message belongs to");
            (pb::Thread::Continue, String::new())
        }
    }
}

/// Remembers that the answer sent as `message_ids` to `sender` in `chat` belongs to
/// `thread` (nothing for a one-shot turn's).
pub async fn note_answer(
    store: &Store,
    chat: i64,
    message_ids: &[i32],
    sender: &str,
    thread: &str,
) {
    if thread.is_empty() || message_ids.is_empty() {
        return;
    }
    let noted = store
        .note_answer(&chat.to_string(), message_ids, sender, thread, now_ms())
        .await;
    if let Err(e) = noted {
        tracing::warn!(error = %e, "cannot remember which thread an answer belongs to; a reply to it continues the current one");
    }
}

/// The setting that holds `sender`'s open `/forget` question: its id and until when.
fn forget_key(sender: &str) -> String {
    format!("forget.{sender}")
}

/// Whether `sender`'s open `/forget` question is `id`, still in time; it is closed either
/// way (a button works once).
async fn forget_confirmed(
    store: &Store,
    sender: &str,
    id: &str,
    now: i64,
) -> Result<bool, sqlx::Error> {
    let Some(open) = store.setting(&forget_key(sender)).await? else {
        return Ok(false);
    };
    if !store.take_setting(&forget_key(sender)).await? {
        // Another click took it meanwhile.
        return Ok(false);
    }
    let Some((open_id, until)) = open.split_once(':') else {
        return Ok(false);
    };
    Ok(open_id == id && until.parse::<i64>().is_ok_and(|until| now <= until))
}

/// `/forget`'s two buttons, for the question `id`.
fn forget_buttons(lang: Language, id: &str) -> Vec<approval::ButtonRow> {
    let button = |says, kind| approval::Button {
        text: text::say(lang, says),
        data: format!("{kind}:{id}"),
    };
    vec![
        approval::ButtonRow {
            buttons: vec![
                button(Says::Forget(ForgetSays::ConversationsButton), text::FORGET),
                button(Says::Forget(ForgetSays::EverythingButton), text::FORGET_ALL),
            ],
        },
        approval::ButtonRow {
            buttons: vec![button(Says::Forget(ForgetSays::KeepButton), text::KEEP)],
        },
    ]
}

impl Conversation {
    /// A conversation command of a paired person.
    pub(super) async fn on_command(
        &self,
        chat: i64,
        sender: &str,
        command: Command,
        lang: Language,
    ) -> Reply {
        let unavailable = |e: sqlx::Error| {
            tracing::error!(error = %e, "the gateway store cannot take a conversation command");
            Reply::say(chat, text::say(lang, Says::Unavailable(store_name(lang))))
        };
        match command {
            Command::New => match start_new(&self.store, sender).await {
                Ok(()) => Reply::say(chat, text::say(lang, Says::NewThread)),
                Err(e) => unavailable(e),
            },
            Command::Forget => {
                let id = metnos_kit::random::hex(8);
                let open = format!("{id}:{}", now_ms() + FORGET_WITHIN_MS);
                if let Err(e) = self.store.set_setting(&forget_key(sender), &open).await {
                    return unavailable(e);
                }
                let question = text::say(lang, Says::Forget(ForgetSays::Question));
                let buttons = forget_buttons(lang, &id);
                self.outbox.send_buttons(chat, &question, &buttons).await;
                Reply::default()
            }
        }
    }

    /// A click on `/forget`'s question: erase the clicker's conversations (and their
    /// memory), or keep them. The question loses its buttons and says what came of it.
    pub(super) async fn answer_forget(
        self: &Arc<Self>,
        click: Click,
        id: String,
        what: Forgetting,
    ) -> Reply {
        let lang = click.lang;
        let said = match forget_confirmed(&self.store, &click.clicker, &id, now_ms()).await {
            Err(e) => {
                tracing::error!(error = %e, "cannot read the /forget question");
                text::say(lang, Says::Unavailable(store_name(lang)))
            }
            Ok(false) => text::say(lang, Says::Forget(ForgetSays::Expired)),
            Ok(true) if what == Forgetting::Nothing => {
                text::say(lang, Says::Forget(ForgetSays::Kept))
            }
            Ok(true) => {
                let memory = what == Forgetting::Everything;
                match self.forget_all(&click.clicker, memory).await {
                    Some((exchanges, memories)) => {
                        let memories = memory.then_some(memories);
                        text::say(
                            lang,
                            Says::Forget(ForgetSays::Forgotten {
                                exchanges,
                                memories,
                            }),
                        )
                    }
                    None => text::say(lang, Says::Unavailable(planner_name(lang))),
                }
            }
        };
        if let (Some(chat), Some(message)) = (click.chat, click.message) {
            // Without buttons: the question cannot be answered twice.
            let html = text::escape_html(&said);
            if let Err(e) = self.outbox.edit(chat, message, html, None).await {
                tracing::warn!(error = %e, "cannot close the /forget question");
            }
        }
        Reply::answer(&click.id, Some(said))
    }

    /// Erases `sender`'s conversations (and with `memory` their long-term memory): the
    /// planner's threads, then which thread each answer here belonged to. How many
    /// exchanges and entries went; `None` when the planner could not.
    async fn forget_all(&self, sender: &str, memory: bool) -> Option<(u64, u64)> {
        let who = person(sender)?;
        let request = pb::ForgetConversationsRequest {
            principal: Some(who.to_proto()),
            memory,
        };
        let erased = match self.planner.clone().forget_conversations(request).await {
            Ok(answer) => answer.into_inner(),
            Err(status) => {
                tracing::warn!(code = ?status.code(), message = %status.message(), "the planner did not erase the conversations");
                return None;
            }
        };
        if let Err(e) = self.store.forget_answers(sender).await {
            tracing::warn!(error = %e, "cannot forget which thread the answers belonged to");
        }
        let _ = self.store.take_setting(&new_key(sender)).await;
        Some((erased.exchanges, erased.memories))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_is_a_command_only_as_the_whole_message() {
        assert_eq!(command_of("/new"), Some(Command::New));
        assert_eq!(command_of("  /new \n"), Some(Command::New));
        assert_eq!(command_of("/new@MetnosBot"), Some(Command::New));
        assert_eq!(command_of("/new please"), None);
        assert_eq!(command_of("/news"), None);
        assert_eq!(command_of("new"), None);
        assert_eq!(command_of("/newt@x"), None);
        assert_eq!(command_of("/forget"), Some(Command::Forget));
        assert_eq!(command_of("/forget@MetnosBot"), Some(Command::Forget));
        assert_eq!(command_of("/forget everything"), None);
    }
}
