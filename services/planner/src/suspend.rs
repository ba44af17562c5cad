//! Suspending a turn for a person's approval and going on once they decided (seed
//! agent_runtime.md ch. 7; approval_ux.md): the request is registered, the checkpoint
//! stored, the card sent; the decision is awaited while the client listens, or applied by
//! whichever replica resumes the turn. Only the exact call the person approved runs: its
//! hash is checked against the one the approval recorded.

use std::time::{Duration, Instant};

use metnos_core::call::value_sha256;
use metnos_core::principal::Principal;
use metnos_kit::time::now_ms;
use metnos_proto::approval::v1 as approval;
use metnos_proto::planner::v1 as pb;
use tokio::sync::{mpsc, watch};

use crate::engine::{Planner, Sink, StepOutcome, refusal};
use crate::store::State;
use crate::turn::{
    ApprovalDecision, Call, Checkpoint, FinalKind, Finish, PendingCall, StepLog, finish,
};
use crate::vet::Cleared;

/// What a card asks about: the call's arguments as they will run, the approval request, and
/// the resolved path of a write that runs code later it names (the only such path the
/// approved call may write).
pub(crate) struct Asked {
    pub args: serde_json::Value,
    pub request: approval::CreatePendingRequest,
    pub named_write: Option<String>,
}

/// The record of a turn ended with an error when its checkpoint cannot be read: who, why,
/// when.
fn bare_record(turn: &crate::store::StoredTurn, reason: &str) -> serde_json::Value {
    serde_json::json!({
        "turn_id": turn.turn_id,
        "principal": {"channel": turn.channel, "sender_id": turn.sender_id},
        "final_kind": FinalKind::Error.as_str(),
        "reason": reason,
        "ended_at": metnos_kit::time::rfc3339(now_ms()),
    })
}

/// The terminal's channel: its person follows the turn's stream and sees it end.
const CLI: &str = "cli";

/// How long an undelivered notice is kept (days).
const NOTICE_DAYS: i64 = 1;

/// How long a replica holds a notice it delivers: longer than the gateway may take
/// ([`crate::filters::TELL_DEADLINE`]), so nobody else sends it meanwhile.
const NOTICE_CLAIM_MS: i64 = 180_000;

/// Clears the "delivering" mark when a delivery ends (even by a panic, or a task dropped
/// before it ran).
struct Delivering(std::sync::Arc<Planner>);

impl Drop for Delivering {
    fn drop(&mut self) {
        self.0
            .delivering
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

/// What the person of a turn a restart interrupted is told, in their language, naming
/// their request (its first 80 characters).
pub(crate) fn interrupted_notice(
    language: Option<metnos_core::Language>,
    query: Option<&str>,
) -> String {
    let asked = query.map(|q| {
        let q = q.split_whitespace().collect::<Vec<_>>().join(" ");
        if q.chars().count() > 80 {
            format!("{}…", q.chars().take(80).collect::<String>())
        } else {
            q
        }
    });
    match (language, asked) {
        (Some(metnos_core::Language::Italian), Some(q)) => format!(
            "Sono stato riavviato mentre lavoravo a «{q}»: non ho finito, per favore chiedimelo di nuovo."
        ),
        (Some(metnos_core::Language::Italian), None) => "Sono stato riavviato mentre lavoravo alla tua richiesta: non ho finito, per favore chiedimelo di nuovo.".to_owned(),
        (_, Some(q)) => {
            format!("I was restarted while working on «{q}»; I did not finish it, please ask again.")
        }
        (_, None) => "I was restarted while working on your request; I did not finish it, please ask again.".to_owned(),
    }
}

/// The gateway's idempotency key of a turn's notice: the turn and its text (a notice
/// replaced by the turn's answer is another message).
fn notice_key(turn_id: &str, text: &str) -> String {
    let digest = value_sha256("notice", &serde_json::json!({ "text": text })).unwrap_or_default();
    format!("notice:{turn_id}:{}", digest.get(..16).unwrap_or_default())
}

/// `text` as one gateway message may carry it (16 KiB), cut on a character boundary with
/// a note saying where the rest is.
fn within_message(text: &str) -> String {
    const NOTE: &str = "\n… (cut: `metnos turns show` has the whole turn)";
    let max = metnos_core::limits::MESSAGE;
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max - NOTE.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{NOTE}", &text[..end])
}

fn decision_of(status: approval::ApprovalStatus) -> ApprovalDecision {
    match status {
        approval::ApprovalStatus::Approved => ApprovalDecision::Approved,
        approval::ApprovalStatus::Rejected => ApprovalDecision::Rejected,
        approval::ApprovalStatus::Expired => ApprovalDecision::Expired,
        approval::ApprovalStatus::Cancelled => ApprovalDecision::Cancelled,
        approval::ApprovalStatus::Pending | approval::ApprovalStatus::Unspecified => {
            ApprovalDecision::Unknown
        }
    }
}

impl Planner {
    /// Ends the terminal's turns whose request expired while nobody followed them (the
    /// terminal was closed): each goes on without the call to its final answer, kept in
    /// the turn log. (A channel's turns are resumed by that channel: the gateway, which
    /// can still send the final message.) `grace_ms` after the expiry: a terminal still
    /// following its turn sees the expiry first and goes on itself. Returns how many were
    /// taken up.
    pub async fn resume_expired_unfollowed(self: &std::sync::Arc<Self>, grace_ms: i64) -> usize {
        let turns = match self.store.suspended_on(CLI, 1000).await {
            Ok(turns) => turns,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the suspended turns");
                return 0;
            }
        };
        let mut taken = 0;
        for found in turns {
            let Ok(cp) = serde_json::from_str::<Checkpoint>(&found.checkpoint) else {
                // Nothing can resume it: ended, so it neither waits forever nor keeps the
                // sweep's place from the turns after it.
                tracing::error!(turn_id = %found.turn_id, "a suspended turn's checkpoint cannot be read; it is closed");
                self.close_unreadable(&found).await;
                continue;
            };
            let Some(pending) = &cp.pending else {
                continue;
            };
            let expired_at = pending.expires_at.map_or(i64::MAX, |(seconds, nanos)| {
                seconds * 1000 + i64::from(nanos / 1_000_000)
            });
            if now_ms() < expired_at.saturating_add(grace_ms) {
                continue;
            }
            // Only a request that really ended (the approval service expires it), or one
            // the approval service no longer knows (the resumed turn then ends saying so).
            let ended = match self.filters.get_pending(&pending.token).await {
                Ok(p) => p.status != approval::ApprovalStatus::Pending as i32,
                Err(status) => status.code() == tonic::Code::NotFound,
            };
            if !ended
                || !self
                    .store
                    .claim_suspended_at(&found.turn_id, Some(&pending.token), now_ms())
                    .await
                    .unwrap_or(false)
            {
                continue;
            }
            taken += 1;
            tracing::info!(turn_id = %found.turn_id, "a turn whose request expired unfollowed goes on");
            let (sink, mut events) = mpsc::channel(64);
            tokio::spawn(async move { while events.recv().await.is_some() {} });
            let planner = std::sync::Arc::clone(self);
            tokio::spawn(planner.resume(cp, sink));
        }
        taken
    }

    /// The turns whose holder's lease expired (its replica died or lost its store): a
    /// running one is ended — an executor may not be safe to run twice, so it is never
    /// replayed — with its record in the store and the turn log; one being resumed is put
    /// back to wait for its decision, which applies it once wherever it arrives. A turn
    /// released a lease ago and nobody resumed whose request was decided meanwhile is
    /// resumed here: an approved call runs once, on this replica. A channel's person is
    /// told what became of a turn nobody follows any more (see
    /// [`Planner::deliver_notices`]). Returns how many turns were ended, released and
    /// resumed.
    pub async fn sweep_leases(self: &std::sync::Arc<Self>) -> (usize, usize, usize) {
        let now = now_ms();
        let expired = match self.store.expired(now, 200).await {
            Ok(turns) => turns,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the turns whose lease expired");
                return (0, 0, 0);
            }
        };
        let (mut ended, mut released, mut resumed) = (0, 0, 0);
        for turn in expired {
            match turn.state {
                State::Running => {
                    if self.end_interrupted(&turn, true).await {
                        ended += 1;
                    }
                }
                State::Resuming => {
                    if self
                        .store
                        .release_expired(&turn.turn_id, now)
                        .await
                        .unwrap_or(false)
                    {
                        tracing::warn!(turn_id = %turn.turn_id, "a turn whose resumer stopped waits again for its decision");
                        released += 1;
                    }
                }
                State::Suspended | State::Finished => {}
            }
        }
        let lease_ms = self.store.holder().lease_ms;
        let waiting = self
            .store
            .released_before(now.saturating_sub(lease_ms), 200)
            .await
            .unwrap_or_default();
        for found in waiting {
            let Ok(cp) = serde_json::from_str::<Checkpoint>(&found.checkpoint) else {
                self.close_unreadable(&found).await;
                continue;
            };
            let Some(pending) = &cp.pending else {
                continue;
            };
            let decided = match self.filters.get_pending(&pending.token).await {
                Ok(p) => p.status != approval::ApprovalStatus::Pending as i32,
                Err(status) => status.code() == tonic::Code::NotFound,
            };
            if !decided || !self.claim(&found.turn_id, &pending.token).await {
                continue;
            }
            resumed += 1;
            tracing::info!(turn_id = %found.turn_id, "a decided turn nobody resumed goes on here");
            // Nobody follows it: a channel's person gets its final answer as a notice.
            let (sink, events) = mpsc::channel(64);
            let planner = std::sync::Arc::clone(self);
            let told = (found.channel != CLI).then(|| found.turn_id.clone());
            tokio::spawn(planner.deliver_final(events, told));
            tokio::spawn(std::sync::Arc::clone(self).resume(cp, sink));
        }
        self.deliver_notices_soon();
        (ended, released, resumed)
    }

    /// Follows a turn nobody else follows to its end; for `told` (a channel's turn), its
    /// final text becomes the notice its person gets.
    async fn deliver_final(
        self: std::sync::Arc<Self>,
        mut events: mpsc::Receiver<pb::TurnEvent>,
        told: Option<String>,
    ) {
        let mut last = None;
        let person = self.person_of(told.as_deref()).await;
        while let Some(event) = events.recv().await {
            match event.event {
                Some(pb::turn_event::Event::Finished(finished)) => last = Some(finished.text),
                // A new question on the way: its card goes to the person, or nobody could
                // answer it.
                Some(pb::turn_event::Event::AwaitingApproval(asked)) => {
                    if let (Some(person), Some(card)) = (&person, asked.card)
                        && let Err(status) =
                            self.filters.show_card(person, &asked.token, card).await
                    {
                        tracing::warn!(code = ?status.code(), "cannot show the card of a turn nobody follows");
                    }
                }
                _ => {}
            }
        }
        let (Some(turn_id), Some(text)) = (told, last) else {
            return;
        };
        if text.trim().is_empty() {
            return;
        }
        let text = within_message(&text);
        for attempt in 0..3 {
            match self.store.set_notice(&turn_id, &text).await {
                Ok(()) => {
                    self.deliver_notices_soon();
                    return;
                }
                Err(e) if attempt == 2 => {
                    tracing::warn!(%turn_id, error = %e, "cannot keep a turn's answer for its person");
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    /// Whose turn `turn_id` is (none for none, or an unknown turn).
    async fn person_of(&self, turn_id: Option<&str>) -> Option<Principal> {
        let found = self.store.get(turn_id?).await.ok()??;
        Some(Principal {
            channel: found.channel,
            sender_id: found.sender_id,
        })
    }

    /// Ends a suspended turn whose checkpoint cannot be read, with a minimal line in the
    /// turn log (nothing can resume it: it must neither wait forever nor go unrecorded).
    async fn close_unreadable(&self, turn: &crate::store::StoredTurn) {
        if self
            .store
            .close_unreadable(&turn.turn_id, now_ms())
            .await
            .unwrap_or(false)
        {
            self.log.append(
                &bare_record(turn, "the turn's checkpoint could not be read"),
                now_ms(),
            );
        }
    }

    /// Ends a running turn whose holder stopped: its record (or a minimal one, if its
    /// checkpoint is unreadable) in the store and, once, in the turn log.
    /// `tell`: its person is told (not when they asked to stop it).
    async fn end_interrupted(&self, turn: &crate::store::StoredTurn, tell: bool) -> bool {
        const REASON: &str = "interrupted: the planner stopped while the turn ran";
        let checkpoint = serde_json::from_str::<Checkpoint>(&turn.checkpoint).ok();
        let record = match &checkpoint {
            Some(cp) => self.record(cp, FinalKind::Error, Some(REASON)),
            None => bare_record(turn, REASON),
        };
        // A channel's person is told (the terminal saw its stream end).
        let notice = (tell && turn.channel != CLI).then(|| {
            interrupted_notice(
                checkpoint.as_ref().and_then(|cp| cp.language),
                checkpoint.as_ref().map(|cp| cp.query.as_str()),
            )
        });
        match self
            .store
            .close_expired(
                &turn.turn_id,
                &record.to_string(),
                notice.as_deref(),
                now_ms(),
            )
            .await
        {
            Ok(true) => {
                tracing::warn!(turn_id = %turn.turn_id, "a turn left running by a stopped planner was ended");
                self.log.append(&record, now_ms());
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::warn!(turn_id = %turn.turn_id, error = %e, "a turn left running was not ended");
                false
            }
        }
    }

    /// Delivers the notices of turns nobody followed to their end, through the gateway,
    /// on a task of its own (one at a time in this process), so a slow gateway never holds
    /// the lease sweep. See [`Planner::deliver_notices`].
    pub fn deliver_notices_soon(self: &std::sync::Arc<Self>) {
        use std::sync::atomic::Ordering;
        // A run in progress takes this call's notices too: it runs again when it ends.
        self.deliver_again.store(true, Ordering::Release);
        if self.delivering.swap(true, Ordering::AcqRel) {
            return;
        }
        let guard = Delivering(std::sync::Arc::clone(self));
        tokio::spawn(async move {
            let planner = &guard.0;
            while planner.deliver_again.swap(false, Ordering::AcqRel) {
                planner.deliver_notices().await;
            }
        });
    }

    /// Delivers the notices of turns nobody followed to their end, through the gateway:
    /// each claimed in the store (so two replicas never both send one) for longer than the
    /// gateway may take; dropped once sent, or when the gateway refuses it for good (the
    /// person is no longer paired), or took part of it or may have (sending again could
    /// show it twice), or after [`NOTICE_DAYS`]; else tried again later, the later the
    /// older it is. Returns how many went out.
    pub async fn deliver_notices(&self) -> usize {
        let notices = match self.store.notices(now_ms(), 100).await {
            Ok(notices) => notices,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the notices to deliver");
                return 0;
            }
        };
        let mut sent = 0;
        for notice in notices {
            let now = now_ms();
            let claimed_until = now.saturating_add(NOTICE_CLAIM_MS);
            if !self
                .store
                .claim_notice(&notice.turn_id, now, claimed_until)
                .await
                .unwrap_or(false)
            {
                continue;
            }
            let person = Principal {
                channel: notice.channel.clone(),
                sender_id: notice.sender_id.clone(),
            };
            let age = now.saturating_sub(notice.since_ms);
            // The gateway sends it at most once under this key (the turn and this text):
            // asking again after a lost answer or a deadline is safe.
            let key = notice_key(&notice.turn_id, &notice.text);
            let done = match self.filters.tell(&person, &notice.text, &key).await {
                Ok(()) => {
                    sent += 1;
                    tracing::info!(turn_id = %notice.turn_id, "the person was told what became of their turn");
                    true
                }
                // The gateway took part of it or may have: never sent again.
                Err(status) if status.code() == tonic::Code::Aborted => {
                    tracing::warn!(turn_id = %notice.turn_id, code = ?status.code(), reason = %status.message(), "a notice that may have reached the person is not sent again");
                    true
                }
                Err(status)
                    if matches!(
                        status.code(),
                        tonic::Code::NotFound
                            | tonic::Code::InvalidArgument
                            | tonic::Code::PermissionDenied
                    ) =>
                {
                    tracing::warn!(turn_id = %notice.turn_id, code = ?status.code(), reason = %status.message(), "a notice the gateway refuses is dropped");
                    true
                }
                Err(status) if age > NOTICE_DAYS * 86_400_000 => {
                    tracing::warn!(turn_id = %notice.turn_id, code = ?status.code(), "a notice undelivered for a day is dropped");
                    true
                }
                Err(status) => {
                    tracing::debug!(turn_id = %notice.turn_id, code = ?status.code(), "a notice waits for the gateway");
                    false
                }
            };
            let written = if done {
                self.store.drop_notice(&notice.turn_id, claimed_until).await
            } else {
                // Soon while it is fresh (a restart: the gateway comes up in seconds), then
                // less and less often, at most hourly.
                let pause = (age / 10).clamp(5_000, 3_600_000);
                let retry_at = now_ms().saturating_add(pause);
                self.store
                    .release_notice(&notice.turn_id, claimed_until, retry_at)
                    .await
            };
            if let Err(e) = written {
                tracing::warn!(turn_id = %notice.turn_id, error = %e, "cannot note a notice's delivery");
            }
            if !done {
                // The gateway cannot take notices now: the rest wait for a later run.
                break;
            }
        }
        sent
    }

    /// Cancels the turn `found`, wherever it runs: signalled here; ended here if it waits
    /// or its holder's lease expired; else flagged for the replica that holds it, and its
    /// approval request cancelled now, so a decision that comes later cannot run the call
    /// (the holder checks the flag again before it runs anything). `false`: it had already
    /// finished.
    pub async fn cancel_turn(
        self: &std::sync::Arc<Self>,
        found: &crate::store::StoredTurn,
    ) -> Result<bool, crate::error::Error> {
        let store = &self.store;
        let turn_id = &found.turn_id;
        if found.state == State::Finished {
            return Ok(false);
        }
        store.request_cancel(turn_id).await?;
        if self.signal_cancel(turn_id) {
            return Ok(true);
        }
        let expired = found.lease_until < now_ms();
        let takeable =
            found.state == State::Suspended || (found.state == State::Resuming && expired);
        if takeable {
            let mut checkpoint = serde_json::from_str::<Checkpoint>(&found.checkpoint)
                .map_err(crate::error::Error::UnreadableCheckpoint)?;
            let token = found.approval_token.as_deref().unwrap_or_default();
            if store
                .claim_suspended_at(turn_id, Some(token), now_ms())
                .await?
            {
                self.cancel_claimed(&mut checkpoint).await;
                return Ok(true);
            }
        } else if found.state == State::Running
            && expired
            && self.end_interrupted(found, false).await
        {
            return Ok(true);
        }
        if let Some(token) = &found.approval_token {
            let _ = self.filters.cancel(token, "the turn was cancelled").await;
        }
        Ok(true)
    }

    /// Ends a claimed, suspended turn as cancelled (its approval is cancelled too).
    pub async fn cancel_claimed(&self, cp: &mut Checkpoint) {
        if let Some(p) = cp.pending.take() {
            let _ = self
                .filters
                .cancel(&p.token, "the turn was cancelled")
                .await;
        }
        let (sink, _rx) = mpsc::channel(16);
        self.close(cp, &sink, finish(FinalKind::Cancelled, "cancelled"))
            .await;
    }

    /// Registers the approval request for a cleared call, stores the suspended turn and
    /// sends the card. A checkpoint that cannot be stored cancels the request: a decision
    /// nobody could act on is never asked for.
    pub(crate) async fn ask_approval(
        &self,
        cp: &mut Checkpoint,
        sink: &Sink,
        call: Call,
        log: StepLog,
        cleared: &Cleared,
        capability: &str,
    ) -> StepOutcome {
        let asked = Asked {
            args: cleared.args.clone(),
            request: crate::cards::pending_request(cp, &call, cleared, capability),
            named_write: cleared.runs_code_later.as_ref().map(|r| r.real.clone()),
        };
        self.ask_approval_with(cp, sink, call, log, asked).await
    }

    /// Registers `asked.request` for `call` with its arguments `asked.args` (what runs once
    /// approved), stores the suspended turn and sends the card.
    pub(crate) async fn ask_approval_with(
        &self,
        cp: &mut Checkpoint,
        sink: &Sink,
        call: Call,
        mut log: StepLog,
        asked: Asked,
    ) -> StepOutcome {
        let Asked {
            args,
            request,
            named_write,
        } = asked;
        let call_sha256 = match value_sha256(&call.name, &args) {
            Ok(hash) => hash,
            Err(e) => {
                let why = refusal(format!("cannot hash the call: {e}"));
                self.observe(cp, sink, &call, log, why, Vec::new(), Instant::now())
                    .await;
                return StepOutcome::Continue;
            }
        };
        let created = match self.filters.create_pending(request).await {
            Ok(created) => created,
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                // The approval service cannot card this call (too long to show whole, say):
                // it is refused, with its reason, and the turn goes on.
                log.approval_decision = Some(ApprovalDecision::Refused);
                let why = refusal(format!(
                    "this call cannot be put on a card, so it was not run: {}",
                    status.message()
                ));
                self.observe(cp, sink, &call, log, why, Vec::new(), Instant::now())
                    .await;
                return StepOutcome::Continue;
            }
            Err(status) => {
                let message = format!(
                    "approval request failed ({:?}): {}",
                    status.code(),
                    status.message()
                );
                log.approval_decision = Some(ApprovalDecision::Unavailable);
                self.observe(
                    cp,
                    sink,
                    &call,
                    log,
                    refusal(message.clone()),
                    Vec::new(),
                    Instant::now(),
                )
                .await;
                tracing::warn!(code = ?status.code(), reason = %status.message(), "the approval service could not be asked; the turn ends");
                return StepOutcome::Finished(finish(
                    FinalKind::Error,
                    crate::vet::unreachable(cp.language, crate::vet::Dependency::Approval),
                ));
            }
        };
        let pending = created.approval.unwrap_or_default();
        // The step's record names the card as the decisions journal does: the turn log
        // and the owner's listings never hold a live token.
        log.approval_token = Some(metnos_kit::chain::token_name(&pending.token));
        // The log of this step is completed when the decision comes.
        cp.steps.push(log.keys_only());
        cp.pending = Some(PendingCall {
            step: cp.steps.len() as u32,
            call,
            args,
            token: pending.token.clone(),
            call_sha256,
            started_ms: now_ms(),
            card: created
                .card
                .as_ref()
                .map(prost::Message::encode_to_vec)
                .unwrap_or_default(),
            expires_at: pending.expires_at.as_ref().map(|t| (t.seconds, t.nanos)),
            named_write,
        });
        if let Err(e) = self.save(cp, State::Suspended, Some(&pending.token)).await {
            return StepOutcome::Finished(self.withdraw(cp, &pending.token, &e).await);
        }
        let awaiting = pb::AwaitingApproval {
            step: cp.steps.len() as u32,
            token: pending.token.clone(),
            card: created.card,
            expires_at: pending.expires_at,
        };
        self.emit(sink, pb::turn_event::Event::AwaitingApproval(awaiting))
            .await;
        StepOutcome::Suspended
    }

    /// An approved call feeds the approval-fatigue source (on its own task: a proposal is
    /// never worth the turn's time), when Metnos may act on its own and approving it for
    /// good was offered and not chosen.
    fn after_approval(
        &self,
        cp: &Checkpoint,
        pending: &PendingCall,
        decision: &approval::PendingApproval,
    ) {
        let Some(scheduler) = self.scheduler.get() else {
            return;
        };
        let chosen = decision
            .request
            .as_ref()
            .map(|r| r.territory_concession)
            .unwrap_or_default();
        // A turn the world steered (or a firing) is not the person's habit.
        if crate::schedule_tools::is_tool(&pending.call.name)
            || cp.read_the_world()
            || cp.scheduled
            || decision.territory_pattern.is_empty()
            || chosen == approval::TerritoryConcession::Permanent as i32
        {
            return;
        }
        let seen = crate::proposals::Approved {
            person: cp.principal(),
            level: cp.level,
            capability: decision.capability.clone(),
            pattern: decision.territory_pattern.clone(),
            target: decision.target.clone(),
            language: decision
                .request
                .as_ref()
                .map(|r| r.language)
                .unwrap_or_default(),
        };
        tokio::spawn(crate::proposals::after_approval(
            self.store.db().clone(),
            std::sync::Arc::clone(&self.filters),
            scheduler.fatigue,
            seen,
            now_ms(),
        ));
    }

    /// A resumed turn that still waits shows its card again.
    async fn show_card_again(&self, sink: &Sink, pending: &PendingCall) {
        let still_pending = self
            .filters
            .get_pending(&pending.token)
            .await
            .is_ok_and(|p| p.status == approval::ApprovalStatus::Pending as i32);
        if !still_pending {
            return;
        }
        let card = <approval::Card as prost::Message>::decode(pending.card.as_slice()).ok();
        let awaiting = pb::AwaitingApproval {
            step: pending.step,
            token: pending.token.clone(),
            card,
            expires_at: pending
                .expires_at
                .map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
        };
        self.emit(sink, pb::turn_event::Event::AwaitingApproval(awaiting))
            .await;
    }

    /// Waits for the pending call's decision while the client listens; applies it.
    /// `None`: the client went away (the turn stays suspended, any replica may resume it).
    pub(crate) async fn await_decision(
        &self,
        cp: &mut Checkpoint,
        sink: &Sink,
        cancel: &mut watch::Receiver<bool>,
        claimed: bool,
    ) -> Option<StepOutcome> {
        let pending = cp.pending.clone()?;
        if claimed {
            self.show_card_again(sink, &pending).await;
        }
        let turn_id = cp.turn_id.clone();
        let decided = tokio::select! {
            decided = self.filters.wait_decision(&pending.token) => decided,
            () = sink.closed() => return self.wait_elsewhere(cp, &pending, claimed).await,
            () = self.cancelled(&turn_id, cancel) => {
                // A waiting turn is ended by whoever claims it (only one does).
                if !claimed && !self.claim(&turn_id, &pending.token).await {
                    return None;
                }
                let _ = self.filters.cancel(&pending.token, "the turn was cancelled").await;
                // The channel closes the card as cancelled (its buttons go).
                let decided = pb::ApprovalDecided {
                    step: pending.step,
                    token: pending.token.clone(),
                    status: approval::ApprovalStatus::Cancelled as i32,
                };
                self.emit(sink, pb::turn_event::Event::ApprovalDecided(decided)).await;
                cp.pending = None;
                return Some(StepOutcome::Finished(finish(FinalKind::Cancelled, "cancelled")));
            }
        };
        // Only one caller continues a turn: the one that claims it.
        if !claimed && !self.claim(&cp.turn_id, &pending.token).await {
            let suspended = pb::TurnSuspended {
                turn_id: cp.turn_id.clone(),
                token: pending.token.clone(),
            };
            self.emit(sink, pb::turn_event::Event::Suspended(suspended))
                .await;
            return None;
        }
        match decided {
            Ok(decision) => Some(self.apply_decision(cp, sink, decision, cancel).await),
            Err(status) => {
                cp.pending = None;
                tracing::warn!(code = ?status.code(), reason = %status.message(), "the decision could not be awaited; the turn ends");
                Some(StepOutcome::Finished(finish(
                    FinalKind::Error,
                    crate::vet::unreachable(cp.language, crate::vet::Dependency::Approval),
                )))
            }
        }
    }

    /// Nobody listens any more: the turn waits, suspended, for any replica to resume it.
    /// A turn never claimed is already stored suspended with this very checkpoint (saved
    /// when its card went out), so nothing is written (a store closing at shutdown must not
    /// withdraw a request that can still be resumed); a resumed one is put back.
    async fn wait_elsewhere(
        &self,
        cp: &mut Checkpoint,
        pending: &PendingCall,
        claimed: bool,
    ) -> Option<StepOutcome> {
        if !claimed {
            return None;
        }
        let Err(e) = self.save(cp, State::Suspended, Some(&pending.token)).await else {
            return None;
        };
        Some(StepOutcome::Finished(
            self.withdraw(cp, &pending.token, &e).await,
        ))
    }

    /// The suspended turn could not be stored: a turn that cannot be resumed must not
    /// leave a card that seems to work, so the approval is withdrawn and the turn ends.
    async fn withdraw(&self, cp: &mut Checkpoint, token: &str, error: &str) -> Finish {
        tracing::error!(
            error,
            "cannot store the suspended turn; the approval is cancelled"
        );
        let _ = self
            .filters
            .cancel(token, "the planner could not store the turn")
            .await;
        cp.pending = None;
        finish(
            FinalKind::Error,
            "the planner's store is unavailable, so the approval was withdrawn and nothing was done",
        )
    }

    /// What a decision leads to: the approved call run (exactly that one, once), or why
    /// not. Before it runs, the turn is stored running without its pending call — only if
    /// this process still holds it and nobody cancelled it — so no other replica can apply
    /// the same decision, and a cancel that came first wins.
    async fn decided_observation(
        &self,
        cp: &Checkpoint,
        log: &StepLog,
        pending: &PendingCall,
        status: approval::ApprovalStatus,
        decision: &approval::PendingApproval,
        cancel: &mut watch::Receiver<bool>,
    ) -> Result<metnos_executors::Observation, StepOutcome> {
        let decided_sha256 = decision.call_sha256.as_str();
        let executor = match status {
            approval::ApprovalStatus::Approved => {
                let hash = value_sha256(&pending.call.name, &pending.args).unwrap_or_default();
                if hash != pending.call_sha256 || hash != decided_sha256 {
                    return Ok(refusal(
                        "the approved call does not match the call to run; nothing was done",
                    ));
                }
                if crate::schedule_tools::is_carded(&pending.call.name) {
                    // A standing order approved on its card: made (or deleted) here, once.
                    return Ok(self
                        .schedule_decided(cp, pending, &decision.edited_schedule)
                        .await);
                }
                match self.catalog.get(&pending.call.name).cloned() {
                    Some(executor) => executor,
                    None => {
                        return Ok(refusal(format!(
                            "nonexistent executor: {}",
                            pending.call.name
                        )));
                    }
                }
            }
            approval::ApprovalStatus::Rejected => {
                return Ok(refusal("the person rejected this call; it was not run"));
            }
            approval::ApprovalStatus::Expired => {
                return Ok(refusal(
                    "the approval request expired without an answer; the call was not run",
                ));
            }
            _ => {
                return Ok(refusal(
                    "the approval request was cancelled; the call was not run",
                ));
            }
        };
        // The checkpoint a crash during the run leaves: this step decided, not observed.
        let mut committed = cp.clone();
        committed.steps.push(log.clone());
        let checkpoint = serde_json::to_string(&committed).unwrap_or_default();
        match self
            .store
            .commit_to_run(&cp.turn_id, &checkpoint, now_ms())
            .await
        {
            Ok(true) => {
                let named: Vec<std::path::PathBuf> = pending
                    .named_write
                    .iter()
                    .map(std::path::PathBuf::from)
                    .collect();
                Ok(self
                    .execute(&cp.turn_id, &executor, &pending.args, &named, cancel)
                    .await)
            }
            Ok(false) => match self.store.standing(&cp.turn_id).await {
                Ok(s) if s.cancel_requested => Err(StepOutcome::Finished(finish(
                    FinalKind::Cancelled,
                    "cancelled",
                ))),
                _ => Err(StepOutcome::Lost),
            },
            Err(e) => {
                tracing::error!(error = %e, "cannot store the turn before running the approved call");
                Err(StepOutcome::Finished(finish(
                    FinalKind::Error,
                    "the planner's store is unavailable, so the approved call was not run",
                )))
            }
        }
    }

    /// Applies a decided approval to the pending call. The progress is stored; if it
    /// cannot be, the turn ends here (fail closed) instead of going on with state no
    /// replica could recover.
    async fn apply_decision(
        &self,
        cp: &mut Checkpoint,
        sink: &Sink,
        decision: approval::PendingApproval,
        cancel: &mut watch::Receiver<bool>,
    ) -> StepOutcome {
        let Some(pending) = cp.pending.take() else {
            return StepOutcome::Continue;
        };
        let status = approval::ApprovalStatus::try_from(decision.status)
            .unwrap_or(approval::ApprovalStatus::Unspecified);
        let decided = pb::ApprovalDecided {
            step: pending.step,
            token: pending.token.clone(),
            status: status as i32,
        };
        self.emit(sink, pb::turn_event::Event::ApprovalDecided(decided))
            .await;
        let index = pending.step as usize - 1;
        let mut log = cp.steps.get(index).cloned().unwrap_or_default();
        cp.steps.truncate(index);
        let started = Instant::now();
        log.approval_decision = Some(decision_of(status));
        let observation = match self
            .decided_observation(cp, &log, &pending, status, &decision, cancel)
            .await
        {
            Ok(observation) => observation,
            Err(outcome) => {
                cp.steps.push(log);
                return outcome;
            }
        };
        self.note_seen(
            cp,
            &pending.call.name,
            &pending.args,
            pending.step,
            &observation,
        );
        if status == approval::ApprovalStatus::Approved {
            self.after_approval(cp, &pending, &decision);
        }
        let waited =
            Duration::from_millis(u64::try_from(now_ms() - pending.started_ms).unwrap_or(0));
        let started_at = started.checked_sub(waited).unwrap_or(started);
        // Only a call that ran observed the world.
        let labels = if status == approval::ApprovalStatus::Approved {
            self.labels_for(cp, &pending.call, &pending.args, &observation)
        } else {
            Vec::new()
        };
        self.observe(
            cp,
            sink,
            &pending.call,
            log,
            observation,
            labels,
            started_at,
        )
        .await;
        if let Err(e) = self.save(cp, State::Running, None).await {
            tracing::error!(error = %e, "cannot store the turn's progress; it stops here");
            return StepOutcome::Finished(finish(
                FinalKind::Error,
                "the planner's store is unavailable, so the turn stopped after this step",
            ));
        }
        StepOutcome::Continue
    }
}
