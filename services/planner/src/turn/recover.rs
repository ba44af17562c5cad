//! Turns a restart, a crash or an expiry left behind: the terminal's expired turns taken
//! up, the leases of dead replicas swept, a turn whose checkpoint cannot be read ended,
//! and the notices of interrupted turns delivered once through the gateway.

use std::time::Duration;

use metnos_core::call::value_sha256;
use metnos_core::principal::Principal;
use metnos_kit::time::now_ms;
use metnos_proto::approval::v1 as approval;
use metnos_proto::planner::v1 as pb;
use tokio::sync::mpsc;

use crate::store::State;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::filters::Filters;
use crate::store::Store;
use crate::turn::flow::Sink;
use crate::turn::record::Records;
use crate::turn::{Checkpoint, CheckpointError, FinalKind};
use crate::turnlog::TurnLog;

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
const CLI: &str = metnos_core::principal::TERMINAL;

/// How long an undelivered notice is kept (days).
const NOTICE_DAYS: i64 = 1;

/// How long a replica holds a notice it delivers: longer than the gateway may take
/// ([`crate::filters::TELL_DEADLINE`]), so nobody else sends it meanwhile.
const NOTICE_CLAIM_MS: i64 = 180_000;

/// Clears the "delivering" mark when a delivery ends (even by a panic, or a task dropped
/// before it ran).
struct Delivering(Arc<AtomicBool>);

impl Drop for Delivering {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// What a replica does for the turns others left behind, and for the notices of turns
/// nobody follows any more. Cheap to clone: its deliveries run on their own.
#[derive(Debug, Clone)]
pub(crate) struct Recovery {
    store: Store,
    filters: Arc<dyn Filters>,
    log: TurnLog,
    /// Whether notices are being delivered now (one delivery at a time), and whether a
    /// run was asked for meanwhile.
    delivering: Arc<AtomicBool>,
    deliver_again: Arc<AtomicBool>,
}

/// Resumes a turn here (the planner's own loop, for a turn this replica took up).
pub(crate) type Resume<'r> = &'r (dyn Fn(Checkpoint, Sink) + Send + Sync);

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

impl Recovery {
    /// Where the turns it ends are recorded.
    fn records(&self) -> Records<'_> {
        Records::new(&self.store, &self.log)
    }

    pub(crate) fn new(store: Store, filters: Arc<dyn Filters>, log: TurnLog) -> Recovery {
        Recovery {
            store,
            filters,
            log,
            delivering: Arc::new(AtomicBool::new(false)),
            deliver_again: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Ends the terminal's turns whose request expired while nobody followed them (the
    /// terminal was closed): each goes on without the call to its final answer, kept in
    /// the turn log. (A channel's turns are resumed by that channel: the gateway, which
    /// can still send the final message.) `grace_ms` after the expiry: a terminal still
    /// following its turn sees the expiry first and goes on itself. Returns how many were
    /// taken up.
    pub(crate) async fn resume_expired_unfollowed(
        &self,
        grace_ms: i64,
        resume: Resume<'_>,
    ) -> usize {
        let turns = match self.store.suspended_on(CLI, 1000).await {
            Ok(turns) => turns,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the suspended turns");
                return 0;
            }
        };
        let mut taken = 0;
        for found in turns {
            let cp = match Checkpoint::read(&found.checkpoint) {
                Ok(cp) => cp,
                // A replica of its version takes it (a rolling upgrade).
                Err(CheckpointError::Newer(_)) => continue,
                Err(CheckpointError::Unreadable(_)) => {
                    // Nothing can resume it: ended, so it neither waits forever nor keeps
                    // the sweep's place from the turns after it.
                    tracing::error!(turn_id = %found.turn_id, "a suspended turn's checkpoint cannot be read; it is closed");
                    self.close_unreadable(&found).await;
                    continue;
                }
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
            resume(cp, sink);
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
    pub(crate) async fn sweep_leases(&self, resume: Resume<'_>) -> (usize, usize, usize) {
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
            let cp = match Checkpoint::read(&found.checkpoint) {
                Ok(cp) => cp,
                Err(CheckpointError::Newer(_)) => continue,
                Err(CheckpointError::Unreadable(_)) => {
                    self.close_unreadable(&found).await;
                    continue;
                }
            };
            let Some(pending) = &cp.pending else {
                continue;
            };
            let decided = match self.filters.get_pending(&pending.token).await {
                Ok(p) => p.status != approval::ApprovalStatus::Pending as i32,
                Err(status) => status.code() == tonic::Code::NotFound,
            };
            if !decided || !self.records().claim(&found.turn_id, &pending.token).await {
                continue;
            }
            resumed += 1;
            tracing::info!(turn_id = %found.turn_id, "a decided turn nobody resumed goes on here");
            // Nobody follows it: a channel's person gets its final answer as a notice.
            let (sink, events) = mpsc::channel(64);
            let told = (found.channel != CLI).then(|| found.turn_id.clone());
            tokio::spawn(self.clone().deliver_final(events, told));
            resume(cp, sink);
        }
        self.deliver_notices_soon();
        (ended, released, resumed)
    }

    /// Follows a turn nobody else follows to its end; for `told` (a channel's turn), its
    /// final text becomes the notice its person gets.
    async fn deliver_final(self, mut events: mpsc::Receiver<pb::TurnEvent>, told: Option<String>) {
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
        Principal::new(&found.channel, &found.sender_id).ok()
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
            self.log
                .append(
                    &bare_record(turn, "the turn's checkpoint could not be read"),
                    now_ms(),
                )
                .await;
        }
    }

    /// Ends a running turn whose holder stopped: its record (or a minimal one, if its
    /// checkpoint is unreadable) in the store and, once, in the turn log.
    /// `tell`: its person is told (not when they asked to stop it).
    pub(crate) async fn end_interrupted(
        &self,
        turn: &crate::store::StoredTurn,
        tell: bool,
    ) -> bool {
        const REASON: &str = "interrupted: the planner stopped while the turn ran";
        let checkpoint = Checkpoint::read(&turn.checkpoint).ok();
        let record = match &checkpoint {
            Some(cp) => self.records().record(cp, FinalKind::Error, Some(REASON)),
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
                self.log.append(&record, now_ms()).await;
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
    pub(crate) fn deliver_notices_soon(&self) {
        // A run in progress takes this call's notices too: it runs again when it ends.
        self.deliver_again.store(true, Ordering::Release);
        if self.delivering.swap(true, Ordering::AcqRel) {
            return;
        }
        let guard = Delivering(Arc::clone(&self.delivering));
        let recovery = self.clone();
        tokio::spawn(async move {
            let _guard = guard;
            while recovery.deliver_again.swap(false, Ordering::AcqRel) {
                recovery.deliver_notices().await;
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
            // A stored person that is no principal (a row edited by hand) is nobody to tell:
            // dropped, as a notice the gateway refuses is, so it never holds the others back.
            let Ok(person) = Principal::new(&notice.channel, &notice.sender_id) else {
                tracing::warn!(turn_id = %notice.turn_id, "a notice's person is not a principal; it is dropped");
                if let Err(e) = self.store.drop_notice(&notice.turn_id, claimed_until).await {
                    tracing::warn!(turn_id = %notice.turn_id, error = %e, "cannot drop a notice");
                }
                continue;
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
}
