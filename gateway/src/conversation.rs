//! The conversation with the people who write to the bot: strangers get a pairing code,
//! paired people start turns whose events (typing, cards, the answer) are followed here,
//! the stop clause stops a running turn (asking first when the phrase is ambiguous), and a
//! click on a card resolves the approval and, when no turn here follows it, resumes the
//! turn. The decisions are pure functions and [`Conversations`] methods, unit-tested at the
//! bottom; [`Conversation`] carries them out.

use std::collections::{HashMap, HashSet};
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
use metnos_proto::planner::v1::turn_event::Event;
use metnos_proto::vaglio::v1 as vaglio_pb;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;
use teloxide::types::CallbackQueryId;

use crate::CHANNEL;
use crate::outbox::{self, Outbox};
use crate::store::{CodeRequest, Pairing, Store, Stranger};
use crate::text::{self, Says, Stop};

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
}

/// What the conversation is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    Message(MessageIn),
    Click(Click),
}

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
}

/// What an Edit button changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edits {
    /// A grant offer's pattern (a path).
    Pattern,
    /// A standing order's schedule.
    Schedule,
}

impl Conversations {
    /// What to do with `sender`'s message (see [`next`]); a question asked is remembered
    /// until their next message, which answers it.
    pub fn next_for(&mut self, sender: &str, text: &str, stop: Stop) -> Next {
        let asked = self.asked_to_stop.remove(sender);
        let next = next(text, stop, asked, self.has_turn(sender));
        if next == Next::AskWhetherToStop {
            self.asked_to_stop.insert(sender.to_owned());
        }
        next
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
    /// The turn ended: say this, and stop following.
    Finished(String),
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
        Event::Finished(finished) => Step::Finished(final_text(finished.kind, finished.text, lang)),
        _ => Step::Nothing,
    }
}

/// A turn's last message: the answer as it is, any other end said as such.
fn final_text(kind: i32, text: String, lang: Language) -> String {
    let kind = pb::FinalKind::try_from(kind).unwrap_or(pb::FinalKind::Error);
    if kind == pb::FinalKind::Answer {
        return text;
    }
    let name = kind
        .as_str_name()
        .trim_start_matches("FINAL_KIND_")
        .to_lowercase();
    format!("{} {text}", text::say(lang, Says::TurnEnded(&name)))
}

/// What to say after asking the planner to cancel: whether it cancelled, or its error.
fn after_cancel(result: Result<bool, tonic::Code>, lang: Language) -> Says<'static> {
    match result {
        Ok(true) => Says::Stopped,
        Ok(false) | Err(tonic::Code::NotFound) => Says::NothingToStop,
        Err(_) => Says::Unavailable(planner_name(lang)),
    }
}

fn store_name(lang: Language) -> &'static str {
    match lang {
        Language::Italian => "il mio archivio",
        Language::English => "my store",
    }
}

fn planner_name(lang: Language) -> &'static str {
    match lang {
        Language::Italian => "il pianificatore",
        Language::English => "the planner",
    }
}

fn approval_name(lang: Language) -> &'static str {
    match lang {
        Language::Italian => "il servizio delle approvazioni",
        Language::English => "the approval service",
    }
}

/// What a clicker is told when the approval service did not decide: its refusal in their
/// language, or that it cannot be reached, or (another failure) that it did not answer.
fn click_refusal(refusal: Option<ResolveRefusal>, code: tonic::Code, lang: Language) -> String {
    let said = match (refusal, code) {
        (Some(refusal), _) => Says::ResolveRefused(refusal),
        // (Not a deadline: the decision may have been taken.)
        (None, tonic::Code::Unavailable) => Says::Unavailable(approval_name(lang)),
        (None, _) => Says::CannotResolve,
    };
    text::say(lang, said)
}

fn person(sender_id: &str) -> Principal {
    Principal {
        channel: CHANNEL.to_owned(),
        sender_id: sender_id.to_owned(),
    }
}

/// RunTurn and ResumeTurn responses alike.
pub trait TurnMessage: Send + 'static {
    fn event(self) -> Option<Event>;
}

impl TurnMessage for pb::RunTurnResponse {
    fn event(self) -> Option<Event> {
        self.event.and_then(|e| e.event)
    }
}

impl TurnMessage for pb::ResumeTurnResponse {
    fn event(self) -> Option<Event> {
        self.event.and_then(|e| e.event)
    }
}

/// The planner and approval, as the gateway reaches them.
#[derive(Debug, Clone)]
pub struct Clients {
    pub planner: PlannerServiceClient<TracedChannel>,
    pub approval: ApprovalServiceClient<TracedChannel>,
}

impl Clients {
    /// Stops everything `who` has under way, at once: their pending approvals are
    /// withdrawn and every unfinished turn of theirs cancelled. The withdrawn tokens are
    /// returned, so their cards can say so.
    pub async fn withdraw(
        &self,
        who: &Principal,
        reason: &str,
    ) -> Result<Vec<String>, tonic::Status> {
        let listed = approval::ListPendingRequest {
            include_resolved: false,
            limit: 1000,
            requester: Some(who.to_proto()),
        };
        let pending = self
            .approval
            .clone()
            .list_pending(listed)
            .await?
            .into_inner()
            .approvals;
        let cancel = pb::CancelTurnRequest {
            target: Some(pb::cancel_turn_request::Target::Principal(who.to_proto())),
            reason: reason.to_owned(),
            all: true,
            ..Default::default()
        };
        match self.planner.clone().cancel_turn(cancel).await {
            Ok(_) => {}
            Err(status) if status.code() == tonic::Code::NotFound => {}
            Err(status) => return Err(status),
        }
        let mut tokens = Vec::new();
        for request in pending {
            let cancel = approval::CancelRequest {
                token: request.token.clone(),
                reason: reason.to_owned(),
            };
            match self.approval.clone().cancel(cancel).await {
                // Already cancelled with its turn: the same outcome.
                Ok(_) => {}
                Err(status) if status.code() == tonic::Code::FailedPrecondition => {}
                Err(status) => return Err(status),
            }
            tokens.push(request.token);
        }
        Ok(tokens)
    }
}

/// The stop clause's one recogniser is the vaglio's (`DetectStop`); when it cannot be
/// asked within [`StopDetector::PATIENCE`], the same recogniser linked here answers, so a
/// stop is never lost.
#[derive(Debug, Clone)]
pub struct StopDetector {
    vaglio: Option<VaglioServiceClient<TracedChannel>>,
}

impl StopDetector {
    pub const PATIENCE: Duration = Duration::from_secs(2);

    /// Tells the vaglio's telos engine how `who` answered proposal `proposal_id`. A
    /// failure is logged: the answer itself (a grant recorded, a rejection) stands.
    pub async fn feedback(
        &self,
        proposal_id: &str,
        kind: vaglio_pb::FeedbackKind,
        who: &Principal,
    ) {
        let Some(vaglio) = &self.vaglio else {
            return;
        };
        let request = vaglio_pb::RecordFeedbackRequest {
            proposal_id: proposal_id.to_owned(),
            kind: kind as i32,
            principal: Some(who.to_proto()),
        };
        match vaglio.clone().record_feedback(request).await {
            Ok(answer) => {
                if answer.into_inner().never_listed {
                    tracing::info!("a kind of proposal is never proposed again to this person");
                }
            }
            Err(status) => {
                tracing::warn!(code = ?status.code(), reason = %status.message(), "the answer to a proposal did not reach the telos engine");
            }
        }
    }

    pub fn new(vaglio: Option<VaglioServiceClient<TracedChannel>>) -> StopDetector {
        StopDetector { vaglio }
    }

    /// What `text` from `who` says about stopping.
    pub async fn detect(&self, who: &Principal, text: &str) -> Stop {
        let Some(vaglio) = &self.vaglio else {
            return text::stop_of(text);
        };
        let request = vaglio_pb::DetectStopRequest {
            // The recogniser reads whole short phrases; a long message is never a stop.
            text: text.chars().take(1000).collect(),
            current_intent: String::new(),
            principal: Some(who.to_proto()),
            non_retreat: false,
        };
        let asked = tokio::time::timeout(Self::PATIENCE, vaglio.clone().detect_stop(request)).await;
        match asked {
            Ok(Ok(answer)) => match vaglio_pb::StopKind::try_from(answer.into_inner().kind) {
                Ok(vaglio_pb::StopKind::Stop) => Stop::Clear,
                Ok(vaglio_pb::StopKind::Ambiguous) => Stop::Ambiguous,
                _ => Stop::No,
            },
            Ok(Err(status)) => {
                tracing::warn!(code = ?status.code(), "the vaglio's stop recogniser failed; the local one answers");
                text::stop_of(text)
            }
            Err(_) => {
                tracing::warn!(
                    "the vaglio's stop recogniser did not answer in time; the local one answers"
                );
                text::stop_of(text)
            }
        }
    }
}

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

    /// One message or click.
    pub async fn handle(self: &Arc<Self>, incoming: Incoming) {
        match incoming {
            Incoming::Click(click) => self.on_click(click).await,
            Incoming::Message(message) => self.on_message(message).await,
        }
    }

    async fn on_message(self: &Arc<Self>, message: MessageIn) {
        let chat = message.chat;
        let pairing = match self.store.pairing(CHANNEL, &message.sender).await {
            Ok(pairing) => pairing,
            Err(e) => {
                tracing::error!(error = %e, "pairing store unavailable");
                let sorry = text::say(message.lang, Says::Unavailable(store_name(message.lang)));
                self.outbox.send_text(chat, &sorry).await;
                return;
            }
        };
        let Some(pairing) = pairing else {
            self.greet_stranger(&message).await;
            return;
        };
        let lang = pairing.language();
        let who = person(&message.sender);
        // After a grant offer's Edit, their next message is the pattern, not a turn.
        let editing = self
            .state()
            .take_edit(&message.sender, chat, &message.text, Instant::now());
        if let Some((token, edits)) = editing {
            self.accept_edited(chat, &who, token, &message.text, edits, lang)
                .await;
            return;
        }
        let stop = self.stops.detect(&who, &message.text).await;
        let next = self.state().next_for(&message.sender, &message.text, stop);
        match next {
            Next::Stop => self.stop(chat, &who, lang).await,
            Next::CarryOn => {
                self.outbox
                    .send_text(chat, &text::say(lang, Says::GoingOn))
                    .await;
            }
            Next::AskWhetherToStop => {
                self.outbox
                    .send_text(chat, &text::say(lang, Says::ConfirmStop))
                    .await;
            }
            Next::RunTurn => {
                self.run_turn(chat, who, &pairing, message.text, message.forwarded)
                    .await;
            }
        }
    }

    /// An unpaired sender: a pairing code, unless one is already out for them.
    async fn greet_stranger(&self, message: &MessageIn) {
        let code = crate::pairing::new_code();
        let chat_id = message.chat.to_string();
        let stranger = Stranger {
            channel: CHANNEL,
            sender_id: &message.sender,
            chat_id: &chat_id,
            display_name: &message.name,
            language: message.lang.code(),
        };
        match self.store.request_code(&stranger, &code, now_ms()).await {
            Ok(CodeRequest::New(code)) => {
                tracing::info!(sender = %message.sender, "pairing code issued to an unpaired sender");
                let said = text::say(message.lang, Says::PairingCode(&code));
                self.outbox.send_text(message.chat, &said).await;
            }
            Ok(CodeRequest::AlreadyIssued) => {}
            Err(e) => tracing::error!(error = %e, "cannot issue a pairing code"),
        }
    }

    async fn run_turn(
        self: &Arc<Self>,
        chat: i64,
        who: Principal,
        pairing: &Pairing,
        text: String,
        forwarded: bool,
    ) {
        let lang = pairing.language();
        let request = pb::RunTurnRequest {
            principal: Some(who.to_proto()),
            level: pairing.autonomy().to_wire(),
            query: text,
            language: lang.to_wire(),
            mode: pb::Mode::Unspecified as i32,
            forwarded,
        };
        match self.planner.clone().run_turn(request).await {
            Ok(stream) => {
                let this = Arc::clone(self);
                tokio::spawn(this.follow(stream.into_inner(), chat, who.sender_id, lang));
            }
            Err(status) => {
                tracing::warn!(code = ?status.code(), message = %status.message(), "planner unavailable");
                let sorry = text::say(lang, Says::Unavailable(planner_name(lang)));
                self.outbox.send_text(chat, &sorry).await;
            }
        }
    }

    async fn stop(self: &Arc<Self>, chat: i64, who: &Principal, lang: Language) {
        let request = pb::CancelTurnRequest {
            target: Some(pb::cancel_turn_request::Target::Principal(who.to_proto())),
            reason: "stop from Telegram".to_owned(),
            ..Default::default()
        };
        let result = self.planner.clone().cancel_turn(request).await;
        let said = after_cancel(
            result
                .map(|r| r.get_ref().cancelled)
                .map_err(|status| status.code()),
            lang,
        );
        self.outbox.send_text(chat, &text::say(lang, said)).await;
        // The cancelled turn's card says so now, not at the next sweep.
        self.sweep_cards(0, Some(&chat.to_string())).await;
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
            let lang = pending
                .request
                .as_ref()
                .and_then(|r| Language::from_wire(r.language))
                .unwrap_or(Language::Italian);
            let status = approval::ApprovalStatus::try_from(pending.status)
                .unwrap_or(approval::ApprovalStatus::Unspecified);
            match status {
                approval::ApprovalStatus::Pending => {
                    self.remind(&card, &pending, remind_before_ms, lang).await;
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
    }

    /// The card's one reminder, when its request expires within `before_ms`.
    async fn remind(
        &self,
        card: &crate::store::SentCard,
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

    async fn on_click(self: &Arc<Self>, mut click: Click) {
        // Only a paired person decides: after `pair revoke`, nothing they send (a click
        // included) reaches Metnos.
        match self.store.pairing(CHANNEL, &click.clicker).await {
            // Their cards are in the pairing's language: so is what a click is told.
            Ok(Some(pairing)) => click.lang = pairing.language(),
            Ok(None) => {
                tracing::info!(clicker = %click.clicker, "a click from someone not paired refused");
                let said = text::say(click.lang, Says::NotPaired);
                self.outbox.answer_callback(&click.id, Some(&said)).await;
                if let Some(chat) = click.chat {
                    self.outbox.send_text(chat, &said).await;
                }
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "pairing store unavailable");
                let said = text::say(click.lang, Says::Unavailable(store_name(click.lang)));
                self.outbox.answer_callback(&click.id, Some(&said)).await;
                return;
            }
        }
        let action = match action_of(&click.data) {
            Ok(understood) => understood,
            Err(why) => {
                tracing::warn!(data = %click.data.chars().take(80).collect::<String>(), why, "callback not understood");
                let said = text::say(click.lang, Says::UnknownButton);
                self.outbox.answer_callback(&click.id, Some(&said)).await;
                return;
            }
        };
        match action {
            ClickAction::Resolve {
                token,
                decision,
                territory,
            } => self.decide(click, token, decision, territory).await,
            ClickAction::ConfirmAlways(token) => self.confirm_always(click, token).await,
            ClickAction::Never(token) => {
                // Only on a proposal's card: an approval of a call has no "never".
                let is_proposal = self
                    .pending_of(&token)
                    .await
                    .is_some_and(|p| proposal_of(&p).is_some());
                if !is_proposal {
                    let said = text::say(click.lang, Says::UnknownButton);
                    self.outbox.answer_callback(&click.id, Some(&said)).await;
                    return;
                }
                self.decide(
                    click,
                    token,
                    approval::Decision::Reject,
                    approval::TerritoryConcession::None,
                )
                .await;
            }
            ClickAction::Edit(token) => {
                // Only the requester's grant offer or standing order still waiting can be
                // edited.
                let offer = self.pending_of(&token).await.filter(|p| {
                    matches!(p.executor.as_str(), "grant_offer" | "schedule_create")
                        && p.status == approval::ApprovalStatus::Pending as i32
                        && p.requester.as_ref() == Some(&person(&click.clicker).to_proto())
                });
                let Some(offer) = offer else {
                    let said = text::say(click.lang, Says::UnknownButton);
                    self.outbox.answer_callback(&click.id, Some(&said)).await;
                    return;
                };
                let (edits, prompt) = if offer.executor == "schedule_create" {
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
                // Asked, and answered, in the person's private chat (its id is theirs).
                match click.clicker.parse::<i64>() {
                    Ok(chat) => {
                        self.state().await_edit(
                            &click.clicker,
                            &token,
                            chat,
                            Instant::now(),
                            edits,
                        );
                        self.outbox.answer_callback(&click.id, None).await;
                        self.outbox.send_text(chat, &prompt).await;
                    }
                    Err(_) => {
                        let said = text::say(click.lang, Says::UnknownButton);
                        self.outbox.answer_callback(&click.id, Some(&said)).await;
                    }
                }
            }
            ClickAction::Back(token) => {
                // Only a card still waiting gets its buttons back.
                let pending = self
                    .approval
                    .clone()
                    .get_pending(approval::GetPendingRequest {
                        token: token.clone(),
                    })
                    .await
                    .ok()
                    .and_then(|r| r.into_inner().approval)
                    .is_some_and(|p| p.status == approval::ApprovalStatus::Pending as i32);
                match self.store.card(&token).await {
                    Ok(Some(card)) if pending => {
                        if let Err(e) = self.outbox.show_card(&card, None, None).await {
                            tracing::warn!(error = %e, "cannot show the card again");
                        }
                    }
                    _ => tracing::info!("a back click for a card not waiting here"),
                }
                self.outbox.answer_callback(&click.id, None).await;
            }
        }
    }

    /// Tells the clicker a refusal the approval service classed, in their language (its
    /// English error text stays in this log).
    async fn refused(&self, click: &Click, status: &tonic::Status) {
        let refusal = status
            .metadata()
            .get(metnos_core::resolve::METADATA_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(ResolveRefusal::parse);
        tracing::info!(clicker = %click.clicker, reason = %status.message(), "approval not resolved");
        let said = click_refusal(refusal, status.code(), click.lang);
        self.outbox.answer_callback(&click.id, Some(&said)).await;
        if let Some(chat) = click.chat {
            self.outbox.send_text(chat, &said).await;
        }
    }

    /// "Always for …": the card shows the whole pattern and asks to confirm; nothing is
    /// granted until the confirmation.
    async fn confirm_always(&self, click: Click, token: String) {
        let request = approval::GetPendingRequest {
            token: token.clone(),
        };
        let pending = match self.approval.clone().get_pending(request).await {
            Ok(response) => response.into_inner().approval.unwrap_or_default(),
            Err(status) => return self.refused(&click, &status).await,
        };
        let refusal = if pending.requester.as_ref().map(|p| p.sender_id.as_str())
            != Some(click.clicker.as_str())
        {
            Some(ResolveRefusal::NotRequester)
        } else if pending.status == approval::ApprovalStatus::Expired as i32 {
            Some(ResolveRefusal::Expired)
        } else if pending.status != approval::ApprovalStatus::Pending as i32 {
            Some(ResolveRefusal::AlreadyResolved)
        } else {
            None
        };
        if let Some(refusal) = refusal {
            let said = text::say(click.lang, Says::ResolveRefused(refusal));
            self.outbox.answer_callback(&click.id, Some(&said)).await;
            return;
        }
        let (Ok(Some(card)), false) = (
            self.store.card(&token).await,
            pending.territory_pattern.is_empty(),
        ) else {
            let said = text::say(click.lang, Says::UnknownButton);
            self.outbox.answer_callback(&click.id, Some(&said)).await;
            return;
        };
        let lang = pending
            .request
            .as_ref()
            .and_then(|r| Language::from_wire(r.language))
            .unwrap_or(click.lang);
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
        let rows = [
            approval::ButtonRow {
                buttons: vec![button(Says::ConfirmButton, text::CONFIRM_ALWAYS)],
            },
            approval::ButtonRow {
                buttons: vec![button(Says::BackButton, text::BACK)],
            },
        ];
        let extra = format!("<b>{}</b>", text::escape_html(&question));
        if let Err(e) = self
            .outbox
            .show_card(&card, Some(&extra), Some(&rows))
            .await
        {
            tracing::warn!(error = %e, "cannot show the confirmation");
        }
        self.outbox.answer_callback(&click.id, None).await;
    }

    /// Resolves the request as the clicker decided; closes the card; resumes the turn when
    /// nobody here follows it.
    async fn decide(
        self: &Arc<Self>,
        click: Click,
        token: String,
        decision: approval::Decision,
        territory: approval::TerritoryConcession,
    ) {
        let request = approval::ResolveRequest {
            token: token.clone(),
            decision: decision as i32,
            decider: Some(person(&click.clicker).to_proto()),
            territory: territory as i32,
            edited_pattern: String::new(),
            edited_schedule: String::new(),
        };
        let lang = click.lang;
        match self.approval.clone().resolve(request).await {
            Ok(response) => {
                let pending = response.into_inner().approval.unwrap_or_default();
                // A request without a card of its own (an item of an evening digest): the
                // outcome is said where the person clicked, the digest's other rows stay.
                let own_card = matches!(self.store.card(&token).await, Ok(Some(_)));
                let said = if own_card {
                    None
                } else {
                    closing_line(&pending, lang)
                };
                self.outbox
                    .answer_callback(&click.id, said.as_deref())
                    .await;
                self.close_card_as(&token, &pending, lang).await;
                if let Some(proposal_id) = proposal_of(&pending) {
                    // A proposal's answer is the telos engine's feedback; no turn waits.
                    // Accept is what recorded the grant (a grant offer approved for good) or
                    // revoked the grants (a revocation offer approved); a never: button is
                    // understood as such, however its data was spaced.
                    let never = matches!(action_of(&click.data), Ok(ClickAction::Never(_)));
                    let revocation = pending.executor == "grant_revoke";
                    let kind = match (decision, territory, never) {
                        (_, _, true) => Some(vaglio_pb::FeedbackKind::RejectNeverAgain),
                        (
                            approval::Decision::Approve,
                            approval::TerritoryConcession::Permanent,
                            _,
                        ) if !revocation => Some(vaglio_pb::FeedbackKind::Accept),
                        (approval::Decision::Approve, approval::TerritoryConcession::None, _)
                            if revocation =>
                        {
                            Some(vaglio_pb::FeedbackKind::Accept)
                        }
                        (approval::Decision::Reject, _, _) => Some(vaglio_pb::FeedbackKind::Reject),
                        // Approved otherwise (a button the card never had): nothing to learn.
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        self.stops
                            .feedback(&proposal_id, kind, &person(&click.clicker))
                            .await;
                    }
                    return;
                }
                let followed = self.state().is_followed(&token);
                if !followed {
                    // The turn's stream is not followed here (a restart, another replica):
                    // continue it.
                    self.resume(token, click.clicker, lang).await;
                }
            }
            Err(status) => self.refused(&click, &status).await,
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
        self: &Arc<Self>,
        chat: i64,
        who: &Principal,
        token: String,
        edited: &str,
        edits: Edits,
        lang: Language,
    ) {
        let edited = edited.trim();
        if edited.len() > 1024 {
            let said = text::say(lang, Says::EditRefused(text::edit_too_long(lang)));
            self.outbox.send_text(chat, &said).await;
            return;
        }
        let request = match edits {
            Edits::Pattern => approval::ResolveRequest {
                token: token.clone(),
                decision: approval::Decision::Approve as i32,
                decider: Some(who.to_proto()),
                territory: approval::TerritoryConcession::Permanent as i32,
                edited_pattern: edited.to_owned(),
                edited_schedule: String::new(),
            },
            Edits::Schedule => approval::ResolveRequest {
                token: token.clone(),
                decision: approval::Decision::Approve as i32,
                decider: Some(who.to_proto()),
                territory: approval::TerritoryConcession::None as i32,
                edited_pattern: String::new(),
                edited_schedule: edited.to_owned(),
            },
        };
        match self.approval.clone().resolve(request).await {
            Ok(response) => {
                let pending = response.into_inner().approval.unwrap_or_default();
                self.close_card_as(&token, &pending, lang).await;
                if edits == Edits::Schedule {
                    // A turn waits for this card: went on here, or resumed by the person.
                    if !self.state().is_followed(&token) {
                        self.resume(token, who.sender_id.clone(), lang).await;
                    }
                    return;
                }
                if let Some(proposal_id) = proposal_of(&pending) {
                    self.stops
                        .feedback(&proposal_id, vaglio_pb::FeedbackKind::AcceptWithEdit, who)
                        .await;
                }
            }
            Err(status) => {
                // The approval service's own words only for what was wrong with the edit
                // (it names the offer, which is theirs); otherwise what became of the card.
                let why = match status.code() {
                    tonic::Code::InvalidArgument => {
                        metnos_core::html::one_visible_line(status.message(), 300)
                    }
                    _ => text::edit_not_taken(lang).to_owned(),
                };
                let said = text::say(lang, Says::EditRefused(&why));
                self.outbox.send_text(chat, &said).await;
            }
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
            principal: Some(person(&sender).to_proto()),
        };
        let this = Arc::clone(self);
        tokio::spawn(async move {
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
        });
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
                Step::Finished(text) => {
                    self.outbox.send_text(chat, &text).await;
                    break;
                }
                Step::Nothing => {}
            }
        }
        self.state().turn_ended(&sender, &tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            state.next_for("ada", "hmm", text::stop_of("hmm")),
            Next::RunTurn,
            "no turn runs"
        );
        state.turn_started("ada");
        assert_eq!(
            state.next_for("ada", "hmm", text::stop_of("hmm")),
            Next::AskWhetherToStop
        );
        // Another person's question is theirs.
        assert_eq!(
            state.next_for("bob", "yes", text::stop_of("yes")),
            Next::RunTurn
        );
        assert_eq!(
            state.next_for("ada", "no", text::stop_of("no")),
            Next::CarryOn
        );
        assert_eq!(
            state.next_for("ada", "yes", text::stop_of("yes")),
            Next::RunTurn,
            "asked once"
        );
        assert_eq!(
            state.next_for("ada", "hmm", text::stop_of("hmm")),
            Next::AskWhetherToStop
        );
        assert_eq!(
            state.next_for("ada", "yes", text::stop_of("yes")),
            Next::Stop
        );
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
                    ..Default::default()
                }),
                Language::English,
            )
        };
        assert_eq!(
            finished(pb::FinalKind::Answer, "hello Ada"),
            Step::Finished("hello Ada".to_owned())
        );
        assert_eq!(
            finished(pb::FinalKind::Cancelled, "stopped by Ada"),
            Step::Finished("I stopped (cancelled). stopped by Ada".to_owned())
        );
        assert_eq!(
            final_text(99, "?".to_owned(), Language::Italian),
            "Mi sono fermato (error). ?"
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
