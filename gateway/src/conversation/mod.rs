//! The conversation with the people who write to the bot: strangers get a pairing code,
//! paired people start turns whose events (typing, cards, the answer) are followed here,
//! the stop clause stops a running turn (asking first when the phrase is ambiguous), and a
//! click on a card resolves the approval and, when no turn here follows it, resumes the
//! turn.
//!
//! A handler decides and returns a [`Reply`]; [`Conversation::speak`] carries it out, the
//! one place a click is answered. The folder:
//! - [`incoming`]: what the transport hands over (a message, a click);
//! - [`state`]: what is remembered between updates, and the stop clause (pure);
//! - [`decide`]: buttons, turn events, closing lines, refusals (pure);
//! - [`reply`]: what a handler decided;
//! - [`services`]: the planner, approval and the vaglio as a conversation reaches them;
//! - this file: [`Conversation`], which asks the services and speaks.

use metnos_core::names::{proposals, tools};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use metnos_core::language::Language;
use metnos_core::principal::Principal;
use metnos_core::resolve::ResolveRefusal;
use metnos_kit::client::TracedChannel;
use metnos_kit::time::now_ms;
use metnos_proto::approval::v1 as approval;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
use metnos_proto::vaglio::v1 as vaglio_pb;

use crate::outbox::Outbox;
use crate::service::CHANNEL;
use crate::store::{CodeRequest, Pairing, SentCard, Store, Stranger};
use crate::text::{self, Says};

mod decide;
mod incoming;
mod reply;
mod services;
mod state;
mod stopping;
mod threads;

pub use decide::{ClickAction, Forgetting, Step, action_of, closing_line, proposal_of, step_of};
use decide::{
    always_confirmation, click_refusal, confirm_refusal, feedback_kind, language_of, person,
    planner_name, store_name,
};
pub use incoming::{Click, GroupMessage, Incoming, MessageIn};
pub use reply::{Answer, Close, Reply, ShowCard, Then};
pub use services::{Clients, StopDetector, TurnMessage};
pub use state::{Conversations, Edits, Next, next};

/// Carries out the conversation's decisions: the planner, approval and the outbox.
pub struct Conversation {
    store: Store,
    planner: PlannerServiceClient<TracedChannel>,
    approval: ApprovalServiceClient<TracedChannel>,
    stops: StopDetector,
    outbox: Arc<Outbox>,
    state: Mutex<Conversations>,
}

/// How long a decided turn held by another planner replica is waited for (a dead
/// replica's lease, `turns.lease_seconds`, is 15 s by default).
const RESUME_PATIENCE: Duration = Duration::from_secs(60);

/// Never prints the state: it holds live approval tokens and who is talking.
impl std::fmt::Debug for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversation").finish_non_exhaustive()
    }
}

impl Conversation {
    pub fn new(
        store: Store,
        planner: PlannerServiceClient<TracedChannel>,
        approval: ApprovalServiceClient<TracedChannel>,
        stops: StopDetector,
        outbox: Arc<Outbox>,
    ) -> Conversation {
        Conversation {
            store,
            planner,
            approval,
            stops,
            outbox,
            state: Mutex::new(Conversations::default()),
        }
    }

    /// The state, for one synchronous step (never held across an `.await`).
    fn state(&self) -> MutexGuard<'_, Conversations> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One message or click: decided, then said, in the span of [`Conversation::span_of`].
    pub async fn handle(self: &Arc<Self>, incoming: Incoming) {
        use tracing::Instrument;
        let span = self.span_of(&incoming).await;
        async {
            let reply = match incoming {
                Incoming::Click(click) => self.on_click(click).await,
                Incoming::Message(message) => self.on_message(message).await,
                Incoming::Group(group) => self.on_group(group),
            };
            self.speak(reply).await;
        }
        .instrument(span)
        .await;
    }

    /// The span a message or a click is handled in (issue 41, one message, one trace): a
    /// message starts its turn's trace; a click on a card joins the trace of the call that
    /// sent the card, so the decision and what follows are in the turn's trace. Names
    /// only: no words, no ids.
    async fn span_of(&self, incoming: &Incoming) -> tracing::Span {
        let click = match incoming {
            Incoming::Message(_) | Incoming::Group(_) => {
                return tracing::info_span!("telegram.message", otel.kind = "internal");
            }
            Incoming::Click(click) => click,
        };
        let span = tracing::info_span!("telegram.click", otel.kind = "internal");
        let action = action_of(&click.data).ok();
        if let Some(token) = action.as_ref().and_then(ClickAction::token)
            && let Ok(Some(card)) = self.store.card(token).await
        {
            metnos_kit::propagation::continue_trace(&span, &card.traceparent);
        }
        span
    }

    /// A message written in a group: nothing reaches the planner and nobody is paired; the
    /// group is told, in the writer's language, to write privately (once an hour at most).
    fn on_group(&self, group: GroupMessage) -> Reply {
        tracing::info!("a message in a group: told to write privately, nothing done");
        if self.state().tell_group(group.chat, Instant::now()) {
            Reply::say(group.chat, text::say(group.lang, Says::WritePrivately))
        } else {
            Reply::default()
        }
    }

    /// Carries out a reply, in its order: the card shown again, the click's answer, the
    /// messages, the card closed, what follows.
    pub async fn speak(self: &Arc<Self>, reply: Reply) {
        let Reply {
            show,
            answer,
            messages,
            close,
            then,
        } = reply;
        if let Some(show) = show
            && let Err(e) = self
                .outbox
                .show_card(&show.card, show.extra.as_deref(), show.buttons.as_deref())
                .await
        {
            tracing::warn!(error = %e, "{}", show.failed);
        }
        if let Some(answer) = answer {
            self.outbox
                .answer_callback(&answer.id, answer.text.as_deref())
                .await;
        }
        for (chat, text) in messages {
            self.outbox.send_text(chat, &text).await;
        }
        if let Some(close) = close {
            self.close_card_as(&close.token, &close.pending, close.lang)
                .await;
        }
        match then {
            Some(Then::Feedback {
                proposal_id,
                kind,
                who,
            }) => self.stops.feedback(&proposal_id, kind, &who).await,
            // Looked at now, the card closed: a stream that dropped meanwhile is not waited for.
            Some(Then::Resume {
                token,
                sender,
                lang,
            }) if !self.state().is_followed(&token) => self.resume(token, sender, lang).await,
            Some(Then::Resume { .. }) => {}
            Some(Then::Sweep(chat)) => self.sweep_cards(0, Some(&chat.to_string())).await,
            None => {}
        }
    }

    async fn on_message(self: &Arc<Self>, message: MessageIn) -> Reply {
        let chat = message.chat;
        let pairing = match self.store.pairing(CHANNEL, &message.sender).await {
            Ok(pairing) => pairing,
            Err(e) => {
                tracing::error!(error = %e, "pairing store unavailable");
                let sorry = text::say(message.lang, Says::Unavailable(store_name(message.lang)));
                return Reply::say(chat, sorry);
            }
        };
        let Some(pairing) = pairing else {
            return self.greet_stranger(&message).await;
        };
        let lang = pairing.language;
        let Some(who) = person(&message.sender) else {
            tracing::warn!("a paired sender's id is not a principal; the message is not taken");
            return Reply::default();
        };
        if let Some(command) = threads::command_of(&message.text) {
            return self.on_command(chat, &message.sender, command, lang).await;
        }
        // After a grant offer's Edit, their next message is the pattern, not a turn.
        let editing = self
            .state()
            .take_edit(&message.sender, chat, &message.text, Instant::now());
        if let Some((token, edits)) = editing {
            return self
                .accept_edited(chat, &who, token, &message.text, edits, lang)
                .await;
        }
        self.stop_or_turn(chat, who, &pairing, message).await
    }

    /// An unpaired sender: a pairing code, unless one is already out for them.
    async fn greet_stranger(&self, message: &MessageIn) -> Reply {
        let code = crate::pairing::new_code();
        let chat_id = message.chat.to_string();
        let stranger = Stranger {
            channel: CHANNEL,
            sender_id: &message.sender,
            chat_id: &chat_id,
            display_name: &message.name,
            language: message.lang,
        };
        match self.store.request_code(&stranger, &code, now_ms()).await {
            Ok(CodeRequest::New(code)) => {
                tracing::info!(sender = %message.sender, "pairing code issued to an unpaired sender");
                let said = text::say(message.lang, Says::PairingCode(&code));
                return Reply::say(message.chat, said);
            }
            Ok(CodeRequest::AlreadyIssued) => {}
            Err(e) => tracing::error!(error = %e, "cannot issue a pairing code"),
        }
        Reply::default()
    }

    async fn run_turn(
        self: &Arc<Self>,
        chat: i64,
        who: Principal,
        pairing: &Pairing,
        message: MessageIn,
    ) -> Reply {
        let lang = pairing.language;
        let (thread, thread_id) =
            threads::thread_of(&self.store, chat, &message.sender, message.reply_to).await;
        let request = pb::RunTurnRequest {
            principal: Some(who.to_proto()),
            level: pairing.level.to_wire(),
            query: message.text,
            language: lang.to_wire(),
            mode: pb::Mode::Unspecified as i32,
            forwarded: message.forwarded,
            thread: thread as i32,
            thread_id,
        };
        match self.planner.clone().run_turn(request).await {
            Ok(stream) => {
                let this = Arc::clone(self);
                // In the message's span: the turn's cards and answers are in its trace.
                let follow =
                    this.follow(stream.into_inner(), chat, who.sender_id().to_owned(), lang);
                tokio::spawn(tracing::Instrument::in_current_span(follow));
                Reply::default()
            }
            Err(status) => {
                tracing::warn!(code = ?status.code(), message = %status.message(), "planner unavailable");
                Reply::say(chat, text::say(lang, Says::Unavailable(planner_name(lang))))
            }
        }
    }

    /// Looks at the cards still open (only `chat`'s when given): a card whose request ended
    /// elsewhere (expired, cancelled, decided) is closed to its outcome, without buttons;
    /// a turn whose request expired while nobody here followed it is resumed, so it ends
    /// with a final message; a pending card gets its one reminder once it expires within
    /// `remind_before_ms` (0: none).
    pub async fn sweep_cards(self: &Arc<Self>, remind_before_ms: i64, only_chat: Option<&str>) {
        let cards = match self.store.open_cards(500).await {
            Ok(cards) => cards,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the open cards");
                return;
            }
        };
        for card in cards {
            if only_chat.is_some_and(|chat| chat != card.chat_id) {
                continue;
            }
            let request = approval::GetPendingRequest {
                token: card.token.clone(),
            };
            let pending = match self.approval.clone().get_pending(request).await {
                Ok(response) => response.into_inner().approval.unwrap_or_default(),
                Err(status) if status.code() == tonic::Code::NotFound => {
                    let _ = self.store.mark_closed(&card.token, now_ms()).await;
                    continue;
                }
                Err(status) => {
                    tracing::debug!(code = ?status.code(), "a card's request cannot be read now");
                    continue;
                }
            };
            self.sweep_card(&card, pending, remind_before_ms).await;
        }
    }

    /// One open card of the sweep, with its request as approval has it now.
    async fn sweep_card(
        self: &Arc<Self>,
        card: &SentCard,
        pending: approval::PendingApproval,
        remind_before_ms: i64,
    ) {
        let lang = language_of(&pending, Language::Italian);
        let status = approval::ApprovalStatus::try_from(pending.status)
            .unwrap_or(approval::ApprovalStatus::Unspecified);
        match status {
            approval::ApprovalStatus::Pending => {
                self.remind(card, &pending, remind_before_ms, lang).await;
            }
            approval::ApprovalStatus::Unspecified => {}
            _ => {
                self.close_card_as(&card.token, &pending, lang).await;
                let sender = pending.requester.map(|p| p.sender_id).unwrap_or_default();
                if status == approval::ApprovalStatus::Expired
                    && !sender.is_empty()
                    && !self.state().is_followed(&card.token)
                {
                    // Nobody here waits for it: the turn goes on without the call and
                    // ends with a final message (the planner lets one resumer in).
                    self.resume(card.token.clone(), sender, lang).await;
                }
            }
        }
    }

    /// The card's one reminder, when its request expires within `before_ms`.
    async fn remind(
        &self,
        card: &SentCard,
        pending: &approval::PendingApproval,
        before_ms: i64,
        lang: Language,
    ) {
        let Some(expires_at) = pending.expires_at.as_ref() else {
            return;
        };
        let left = expires_at.seconds * 1000 + i64::from(expires_at.nanos / 1_000_000) - now_ms();
        if before_ms <= 0 || left <= 0 || left > before_ms {
            return;
        }
        let Ok(chat) = card.chat_id.parse::<i64>() else {
            return;
        };
        match self.store.claim_reminder(&card.token, now_ms()).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot note a reminder; none is sent");
                return;
            }
        }
        let minutes = u64::try_from((left + 59_999) / 60_000).unwrap_or(1);
        let question = card.lines.lines().next().unwrap_or_default();
        let said = text::say(lang, Says::Reminder { minutes, question });
        self.outbox.send_text(chat, &said).await;
    }

    /// Closes the cards of withdrawn requests: "withdrawn", no buttons.
    pub async fn close_withdrawn(&self, tokens: &[String], lang: Language) {
        let outcome = format!("— {}", text::say(lang, Says::Withdrawn));
        for token in tokens {
            let Ok(Some(card)) = self.store.card(token).await else {
                continue;
            };
            // Said even over a "cancelled" its turn's end may have written first: why it
            // ended is the more useful line.
            self.state().claim_close(token);
            if !self.outbox.close_card(&card, &outcome).await {
                self.state().release_close(token);
            }
        }
    }

    /// A click: only a paired person decides (after `pair revoke`, nothing they send, a
    /// click included, reaches Metnos), in the pairing's language; then what the button
    /// asks for.
    async fn on_click(self: &Arc<Self>, mut click: Click) -> Reply {
        // Cards are sent only to a person's private chat: a click in a group (Telegram's
        // group and supergroup ids are negative, a person's are not) is answered to the
        // clicker alone, and nothing is said where others read.
        if click.chat.is_some_and(|chat| chat < 0) {
            tracing::info!("a click outside the clicker's private chat: nothing done");
            return Reply::answer(&click.id, Some(text::say(click.lang, Says::WritePrivately)));
        }
        match self.store.pairing(CHANNEL, &click.clicker).await {
            // Their cards are in the pairing's language: so is what a click is told.
            Ok(Some(pairing)) => click.lang = pairing.language,
            Ok(None) => {
                tracing::info!(clicker = %click.clicker, "a click from someone not paired refused");
                let said = text::say(click.lang, Says::NotPaired);
                return Reply::refuse(&click.id, click.chat, said);
            }
            Err(e) => {
                tracing::error!(error = %e, "pairing store unavailable");
                let said = text::say(click.lang, Says::Unavailable(store_name(click.lang)));
                return Reply::answer(&click.id, Some(said));
            }
        }
        let action = match action_of(&click.data) {
            Ok(understood) => understood,
            Err(why) => {
                tracing::warn!(data = %click.data.chars().take(80).collect::<String>(), why, "callback not understood");
                return unknown_button(&click);
            }
        };
        match action {
            ClickAction::Resolve {
                token,
                decision,
                territory,
            } => self.decide(click, token, decision, territory).await,
            ClickAction::ConfirmAlways(token) => self.confirm_always(click, token).await,
            ClickAction::Never(token) => self.never(click, token).await,
            ClickAction::Edit(token) => self.ask_edit(click, token).await,
            ClickAction::Back(token) => self.back(click, token).await,
            ClickAction::Forget { id, what } => self.answer_forget(click, id, what).await,
        }
    }

    /// A proposal's "never again": rejected, and never proposed again. Only on a
    /// proposal's card: an approval of a call has no "never".
    async fn never(self: &Arc<Self>, click: Click, token: String) -> Reply {
        let is_proposal = self
            .pending_of(&token)
            .await
            .is_some_and(|p| proposal_of(&p).is_some());
        if !is_proposal {
            return unknown_button(&click);
        }
        self.decide(
            click,
            token,
            approval::Decision::Reject,
            approval::TerritoryConcession::None,
        )
        .await
    }

    /// Edit: the person's next message in their private chat (its id is theirs) is the
    /// pattern or the schedule. Only the requester's grant offer or standing order still
    /// waiting can be edited.
    async fn ask_edit(&self, click: Click, token: String) -> Reply {
        let offer = self.pending_of(&token).await.filter(|p| {
            [proposals::GRANT_OFFER, tools::SCHEDULE_CREATE].contains(&p.executor.as_str())
                && p.status == approval::ApprovalStatus::Pending as i32
                && person(&click.clicker)
                    .is_some_and(|who| p.requester.as_ref() == Some(&who.to_proto()))
        });
        let (Some(offer), Ok(chat)) = (offer, click.clicker.parse::<i64>()) else {
            return unknown_button(&click);
        };
        let (edits, prompt) = if offer.executor == tools::SCHEDULE_CREATE {
            // The card's target is the schedule it shows.
            let current = metnos_core::html::one_visible_line(&offer.target, 200);
            (
                Edits::Schedule,
                text::say(click.lang, Says::EditSchedulePrompt(&current)),
            )
        } else {
            (
                Edits::Pattern,
                text::say(click.lang, Says::EditPrompt(&offer.territory_pattern)),
            )
        };
        self.state()
            .await_edit(&click.clicker, &token, chat, Instant::now(), edits);
        Reply::answer(&click.id, None).and_say(chat, prompt)
    }

    /// The confirmation declined: a card still waiting gets its buttons back.
    async fn back(&self, click: Click, token: String) -> Reply {
        let pending = self
            .pending_of(&token)
            .await
            .is_some_and(|p| p.status == approval::ApprovalStatus::Pending as i32);
        let show = match self.store.card(&token).await {
            Ok(Some(card)) if pending => Some(ShowCard {
                card,
                extra: None,
                buttons: None,
                failed: "cannot show the card again",
            }),
            _ => {
                tracing::info!("a back click for a card not waiting here");
                None
            }
        };
        Reply {
            show,
            ..Reply::answer(&click.id, None)
        }
    }

    /// Tells the clicker a refusal the approval service classed, in their language (its
    /// English error text stays in this log).
    fn refused(click: &Click, status: &tonic::Status) -> Reply {
        let refusal = status
            .metadata()
            .get(metnos_core::resolve::METADATA_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(ResolveRefusal::parse);
        tracing::info!(clicker = %click.clicker, reason = %status.message(), "approval not resolved");
        let said = click_refusal(refusal, status.code(), click.lang);
        Reply::refuse(&click.id, click.chat, said)
    }

    /// "Always for …": the card shows the whole pattern and asks to confirm; nothing is
    /// granted until the confirmation.
    async fn confirm_always(&self, click: Click, token: String) -> Reply {
        let request = approval::GetPendingRequest {
            token: token.clone(),
        };
        let pending = match self.approval.clone().get_pending(request).await {
            Ok(response) => response.into_inner().approval.unwrap_or_default(),
            Err(status) => return Self::refused(&click, &status),
        };
        if let Some(refusal) = confirm_refusal(&pending, &click.clicker) {
            let said = text::say(click.lang, Says::ResolveRefused(refusal));
            return Reply::answer(&click.id, Some(said));
        }
        let (Ok(Some(card)), false) = (
            self.store.card(&token).await,
            pending.territory_pattern.is_empty(),
        ) else {
            return unknown_button(&click);
        };
        let lang = language_of(&pending, click.lang);
        let (extra, rows) = always_confirmation(&pending, &token, lang);
        Reply {
            show: Some(ShowCard {
                card,
                extra: Some(extra),
                buttons: Some(rows),
                failed: "cannot show the confirmation",
            }),
            ..Reply::answer(&click.id, None)
        }
    }

    /// Resolves the request as the clicker decided; closes the card; resumes the turn when
    /// nobody here follows it, or tells the telos engine how a proposal was answered.
    async fn decide(
        &self,
        click: Click,
        token: String,
        decision: approval::Decision,
        territory: approval::TerritoryConcession,
    ) -> Reply {
        let request = approval::ResolveRequest {
            token: token.clone(),
            decision: decision as i32,
            decider: person(&click.clicker).map(|p| p.to_proto()),
            territory: territory as i32,
            edited_pattern: String::new(),
            edited_schedule: String::new(),
        };
        let lang = click.lang;
        let pending = match self.approval.clone().resolve(request).await {
            Ok(response) => response.into_inner().approval.unwrap_or_default(),
            Err(status) => return Self::refused(&click, &status),
        };
        // A request without a card of its own (an item of an evening digest): the outcome
        // is said where the person clicked, the digest's other rows stay.
        let own_card = matches!(self.store.card(&token).await, Ok(Some(_)));
        let said = (!own_card).then(|| closing_line(&pending, lang)).flatten();
        let then = if let Some(proposal_id) = proposal_of(&pending) {
            // A proposal's answer is the telos engine's feedback; no turn waits. A never:
            // button is understood as such, however its data was spaced.
            let never = matches!(action_of(&click.data), Ok(ClickAction::Never(_)));
            // A revocation offer and a shortcut offer are accepted by approving once.
            let revocation = [proposals::GRANT_REVOKE, proposals::SHORTCUT_OFFER]
                .contains(&pending.executor.as_str());
            feedback_kind(decision, territory, never, revocation)
                .zip(person(&click.clicker))
                .map(|(kind, who)| Then::Feedback {
                    proposal_id,
                    kind,
                    who,
                })
        } else {
            // A turn's stream not followed here (a restart, another replica) is continued.
            Some(Then::Resume {
                token: token.clone(),
                sender: click.clicker.clone(),
                lang,
            })
        };
        Reply {
            close: Some(Close {
                token,
                pending,
                lang,
            }),
            then,
            ..Reply::answer(&click.id, said)
        }
    }

    /// The approval request `token`, as the approval service has it now (`None` when it
    /// cannot say).
    async fn pending_of(&self, token: &str) -> Option<approval::PendingApproval> {
        let request = approval::GetPendingRequest {
            token: token.to_owned(),
        };
        self.approval
            .clone()
            .get_pending(request)
            .await
            .ok()
            .and_then(|r| r.into_inner().approval)
    }

    /// Accept with edit: approves the offer `token` for good with the pattern the person
    /// sent (the approval service checks it lies within the offer), or a standing order's
    /// card with the schedule they sent (checked to read as one; the planner sets the order
    /// up on it).
    async fn accept_edited(
        &self,
        chat: i64,
        who: &Principal,
        token: String,
        edited: &str,
        edits: Edits,
        lang: Language,
    ) -> Reply {
        let edited = edited.trim();
        if edited.len() > 1024 {
            let said = text::say(lang, Says::EditRefused(text::edit_too_long(lang)));
            return Reply::say(chat, said);
        }
        let (territory, edited_pattern, edited_schedule) = match edits {
            Edits::Pattern => (
                approval::TerritoryConcession::Permanent,
                edited.to_owned(),
                String::new(),
            ),
            Edits::Schedule => (
                approval::TerritoryConcession::None,
                String::new(),
                edited.to_owned(),
            ),
        };
        let request = approval::ResolveRequest {
            token: token.clone(),
            decision: approval::Decision::Approve as i32,
            decider: Some(who.to_proto()),
            territory: territory as i32,
            edited_pattern,
            edited_schedule,
        };
        let pending = match self.approval.clone().resolve(request).await {
            Ok(response) => response.into_inner().approval.unwrap_or_default(),
            Err(status) => {
                // What was wrong with the edit, as the approval service's closed set says
                // it, in the person's language (never its English words); otherwise what
                // became of the card.
                let refusal = status
                    .metadata()
                    .get(metnos_core::resolve::EDIT_METADATA_KEY)
                    .and_then(|v| v.to_str().ok())
                    .and_then(metnos_core::resolve::EditRefusal::parse);
                let why = match (status.code(), refusal) {
                    (tonic::Code::InvalidArgument, Some(refusal)) => refusal.say(lang).to_owned(),
                    _ => text::edit_not_taken(lang).to_owned(),
                };
                return Reply::say(chat, text::say(lang, Says::EditRefused(&why)));
            }
        };
        let then = match edits {
            // A turn waits for this card: went on here, or resumed by the person.
            Edits::Schedule => Some(Then::Resume {
                token: token.clone(),
                sender: who.sender_id().to_owned(),
                lang,
            }),
            Edits::Pattern => proposal_of(&pending).map(|proposal_id| Then::Feedback {
                proposal_id,
                kind: vaglio_pb::FeedbackKind::AcceptWithEdit,
                who: who.clone(),
            }),
        };
        Reply {
            close: Some(Close {
                token,
                pending,
                lang,
            }),
            then,
            ..Reply::default()
        }
    }

    async fn resume(self: &Arc<Self>, token: String, sender: String, lang: Language) {
        let Ok(Some(card)) = self.store.card(&token).await else {
            return;
        };
        let Ok(chat) = card.chat_id.parse::<i64>() else {
            return;
        };
        // The one who clicked resumes their own turn (the planner checks it is theirs).
        let request = pb::ResumeTurnRequest {
            target: Some(pb::resume_turn_request::Target::ApprovalToken(token)),
            principal: person(&sender).map(|p| p.to_proto()),
        };
        let this = Arc::clone(self);
        let resumed = async move {
            // ABORTED: another planner replica holds the turn. It applies the decision
            // itself if it lives; if it died, its lease expires and the turn is ours to
            // continue — so the person still gets its answer.
            let deadline = Instant::now() + RESUME_PATIENCE;
            loop {
                match this.planner.clone().resume_turn(request.clone()).await {
                    Ok(stream) => {
                        return this.follow(stream.into_inner(), chat, sender, lang).await;
                    }
                    Err(status)
                        if status.code() == tonic::Code::Aborted && Instant::now() < deadline =>
                    {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    // Someone else continues it (or it already ended): nothing to do here.
                    Err(status) if status.code() == tonic::Code::FailedPrecondition => return,
                    Err(status) => {
                        tracing::warn!(code = ?status.code(), message = %status.message(), "cannot resume the turn");
                        return;
                    }
                }
            }
        };
        // In the click's span: what the resumed turn does is in the turn's trace.
        tokio::spawn(tracing::Instrument::in_current_span(resumed));
    }

    /// Edits the card of `token` to its final state, once: a click and the turn's event
    /// both report the outcome. An approval is looked up, to say what it conceded.
    async fn close_card(&self, token: &str, status: i32, lang: Language) {
        let mut pending = approval::PendingApproval {
            status,
            ..Default::default()
        };
        if status == approval::ApprovalStatus::Approved as i32
            && let Ok(response) = self
                .approval
                .clone()
                .get_pending(approval::GetPendingRequest {
                    token: token.to_owned(),
                })
                .await
            && let Some(found) = response.into_inner().approval
        {
            pending = found;
        }
        self.close_card_as(token, &pending, lang).await;
    }

    /// Edits the card of `token` to the outcome of `pending`, once.
    async fn close_card_as(
        &self,
        token: &str,
        pending: &approval::PendingApproval,
        lang: Language,
    ) {
        let Ok(Some(card)) = self.store.card(token).await else {
            return;
        };
        let Some(outcome) = closing_line(pending, lang) else {
            return;
        };
        // Claimed before the edit, so a click and the turn's event cannot both edit. A
        // decided card's Edit wait ends too: the next message is a message again.
        let claimed = {
            let mut state = self.state();
            state.forget_edit(token);
            state.claim_close(token)
        };
        if !claimed {
            return;
        }
        if !self.outbox.close_card(&card, &outcome).await {
            self.state().release_close(token);
        }
    }

    /// Follows a turn's events: typing, cards, the answer.
    async fn follow<T>(
        self: Arc<Self>,
        mut stream: tonic::Streaming<T>,
        chat: i64,
        sender: String,
        lang: Language,
    ) where
        T: TurnMessage,
    {
        self.state().turn_started(&sender);
        let mut last_typing: Option<Instant> = None;
        let mut tokens = Vec::new();
        loop {
            let message = match stream.message().await {
                Ok(Some(message)) => message,
                Ok(None) => break,
                Err(status) => {
                    tracing::warn!(code = ?status.code(), message = %status.message(), "turn stream broke");
                    let sorry = text::say(lang, Says::Unavailable(planner_name(lang)));
                    self.outbox.send_text(chat, &sorry).await;
                    break;
                }
            };
            let Some(event) = message.event() else {
                continue;
            };
            match step_of(event, lang) {
                Step::Typing => {
                    if last_typing.is_none_or(|at| at.elapsed() > Duration::from_secs(4)) {
                        last_typing = Some(Instant::now());
                        self.outbox.typing(chat).await;
                    }
                }
                Step::Card { token, card } => {
                    self.state().awaiting(&token);
                    if let Some(card) = card {
                        self.outbox.send_card(chat, &token, &card).await;
                    }
                    tokens.push(token);
                }
                Step::Decided { token, status } => self.close_card(&token, status, lang).await,
                Step::Attempt(attempt) => {
                    self.state().open_attempt(&sender, attempt, Instant::now());
                }
                Step::Finished {
                    text,
                    thread,
                    cancelled,
                    turn,
                    attempt,
                } => {
                    // An attempt the answer left open stays the person's to stop; any other
                    // end closes it.
                    match attempt {
                        Some(attempt) => {
                            self.state().open_attempt(&sender, attempt, Instant::now())
                        }
                        None => self.state().close_attempt(&sender),
                    }
                    // After the person's own stop, "I stop" was the last word: one message.
                    let told =
                        cancelled && self.state().take_stopped(&sender, &turn, Instant::now());
                    if !told {
                        let sent = self.outbox.send_text(chat, &text).await;
                        threads::note_answer(&self.store, chat, &sent, &sender, &thread).await;
                    }
                    break;
                }
                Step::Nothing => {}
            }
        }
        self.state().turn_ended(&sender, &tokens);
    }
}

/// A button this card does not have, or that cannot be pressed now.
fn unknown_button(click: &Click) -> Reply {
    Reply::answer(&click.id, Some(text::say(click.lang, Says::UnknownButton)))
}
