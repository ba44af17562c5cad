//! Suspending a turn for a person's approval and going on once they decided (seed
//! agent_runtime.md ch. 7; approval_ux.md): the request is registered, the checkpoint
//! stored, the card sent; the decision is awaited while the client listens, or applied by
//! whichever replica resumes the turn. Only the exact call the person approved runs: its
//! hash is checked against the one the approval recorded.

use std::time::{Duration, Instant};

use metnos_core::call::value_sha256;
use metnos_core::capability::Capability;
use metnos_kit::time::now_ms;
use metnos_proto::approval::v1 as approval;
use metnos_proto::planner::v1 as pb;
use tokio::sync::{mpsc, watch};

use crate::store::State;
use crate::turn::endings::{Ending, StoreDown};
use std::sync::Arc;

use metnos_executors::Catalog;

use crate::filters::Filters;
use crate::proactive::scheduler::Scheduler;
use crate::store::Store;
use crate::store::memories::MemoryStore;
use crate::store::mnestome::Mnestome;
use crate::turn::cards::Asked;
use crate::turn::execution::Execution;
use crate::turn::flow::{Sink, StepOutcome, emit, refusal};
use crate::turn::passages;
use crate::turn::record::{Records, SaveError};
use crate::turn::running::cancelled;
use crate::turn::vetting::Cleared;
use crate::turn::{
    ApprovalDecision, Call, Checkpoint, FinalKind, Finish, PendingCall, StepLog, finish,
};

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

/// Waiting for a person's decision on a call and going on after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Suspension<'a> {
    filters: &'a Arc<dyn Filters>,
    store: &'a Store,
    catalog: &'a Catalog,
    /// The standing orders a card may make or delete (none: they are off here).
    orders: Option<&'a Scheduler>,
    /// The long-term memory an approved save is kept in.
    memories: &'a MemoryStore,
    execution: Execution<'a>,
    records: Records<'a>,
}

impl<'a> Suspension<'a> {
    pub(crate) fn new(
        filters: &'a Arc<dyn Filters>,
        store: &'a Store,
        catalog: &'a Catalog,
        orders: Option<&'a Scheduler>,
        memories: &'a MemoryStore,
        execution: Execution<'a>,
        records: Records<'a>,
    ) -> Suspension<'a> {
        Suspension {
            filters,
            store,
            catalog,
            orders,
            memories,
            execution,
            records,
        }
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
        self.records
            .close(cp, &sink, Ending::Cancelled.finish(cp.language))
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
        capability: Capability,
    ) -> StepOutcome {
        let asked = Asked {
            args: cleared.args.clone(),
            request: crate::turn::cards::pending_request(cp, &call, cleared, capability),
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
                self.execution
                    .observe(cp, sink, &call, log, why, Vec::new(), Instant::now())
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
                self.execution
                    .observe(cp, sink, &call, log, why, Vec::new(), Instant::now())
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
                self.execution
                    .observe(
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
                    crate::turn::vetting::unreachable(
                        cp.language,
                        crate::turn::vetting::Dependency::Approval,
                    ),
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
        if let Err(e) = self
            .records
            .save(cp, State::Suspended, Some(&pending.token))
            .await
        {
            return StepOutcome::Finished(self.withdraw(cp, &pending.token, &e).await);
        }
        let awaiting = pb::AwaitingApproval {
            step: cp.steps.len() as u32,
            token: pending.token.clone(),
            card: created.card,
            expires_at: pending.expires_at,
            traceparent: metnos_kit::propagation::current_traceparent(),
        };
        emit(sink, pb::turn_event::Event::AwaitingApproval(awaiting)).await;
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
        let Some(scheduler) = self.orders else {
            return;
        };
        let chosen = decision
            .request
            .as_ref()
            .map(|r| r.territory_concession)
            .unwrap_or_default();
        // A turn the world steered (or a firing), or a call carrying the words of an earlier
        // answer made from the world, is not the person's habit.
        if crate::proactive::tools::is_tool(&pending.call.name)
            || crate::turn::remember::is_tool(&pending.call.name)
            || cp.read_the_world()
            || crate::turn::conversation::carries_the_world(cp, &pending.args)
            || cp.scheduled
            || decision.territory_pattern.is_empty()
            || chosen == approval::TerritoryConcession::Permanent as i32
        {
            return;
        }
        // A capability the approval service named and this planner does not know offers
        // nothing.
        let Ok(capability) = decision.capability.parse::<Capability>() else {
            return;
        };
        let seen = crate::proactive::proposals::Approved {
            person: cp.principal(),
            level: cp.level,
            capability,
            pattern: decision.territory_pattern.clone(),
            target: decision.target.clone(),
            language: decision
                .request
                .as_ref()
                .map(|r| r.language)
                .unwrap_or_default(),
        };
        tokio::spawn(crate::proactive::proposals::after_approval(
            self.store.db().clone(),
            std::sync::Arc::clone(self.filters),
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
            traceparent: metnos_kit::propagation::current_traceparent(),
        };
        emit(sink, pb::turn_event::Event::AwaitingApproval(awaiting)).await;
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
            () = cancelled(self.store, &turn_id, cancel) => {
                // A waiting turn is ended by whoever claims it (only one does).
                if !claimed && !self.records.claim(&turn_id, &pending.token).await {
                    return None;
                }
                let _ = self.filters.cancel(&pending.token, "the turn was cancelled").await;
                // The channel closes the card as cancelled (its buttons go).
                let decided = pb::ApprovalDecided {
                    step: pending.step,
                    token: pending.token.clone(),
                    status: approval::ApprovalStatus::Cancelled as i32,
                };
                emit(sink, pb::turn_event::Event::ApprovalDecided(decided)).await;
                cp.pending = None;
                return Some(StepOutcome::Finished(Ending::Cancelled.finish(cp.language)));
            }
        };
        // Only one caller continues a turn: the one that claims it.
        if !claimed && !self.records.claim(&cp.turn_id, &pending.token).await {
            let suspended = pb::TurnSuspended {
                turn_id: cp.turn_id.clone(),
                token: pending.token.clone(),
            };
            emit(sink, pb::turn_event::Event::Suspended(suspended)).await;
            return None;
        }
        match decided {
            Ok(decision) => Some(self.apply_decision(cp, sink, decision, cancel).await),
            Err(status) => {
                cp.pending = None;
                tracing::warn!(code = ?status.code(), reason = %status.message(), "the decision could not be awaited; the turn ends");
                Some(StepOutcome::Finished(finish(
                    FinalKind::Error,
                    crate::turn::vetting::unreachable(
                        cp.language,
                        crate::turn::vetting::Dependency::Approval,
                    ),
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
        let Err(e) = self
            .records
            .save(cp, State::Suspended, Some(&pending.token))
            .await
        else {
            return None;
        };
        Some(StepOutcome::Finished(
            self.withdraw(cp, &pending.token, &e).await,
        ))
    }

    /// The suspended turn could not be stored: a turn that cannot be resumed must not
    /// leave a card that seems to work, so the approval is withdrawn and the turn ends.
    async fn withdraw(&self, cp: &mut Checkpoint, token: &str, error: &SaveError) -> Finish {
        tracing::error!(
            %error,
            "cannot store the suspended turn; the approval is cancelled"
        );
        let _ = self
            .filters
            .cancel(token, "the planner could not store the turn")
            .await;
        cp.pending = None;
        Ending::StoreDown(StoreDown::Withdrawn).finish(cp.language)
    }

    /// An approved call of the planner's own tools, applied here once the turn is
    /// committed to it: a memory from the world's data kept, a standing order made (or
    /// deleted) as its card says.
    async fn apply_here(
        &self,
        cp: &Checkpoint,
        pending: &PendingCall,
        decision: &approval::PendingApproval,
    ) -> metnos_executors::Observation {
        if crate::turn::remember::is_carded(&pending.call.name) {
            return crate::turn::remember::decided(self.memories, cp, pending).await;
        }
        crate::proactive::tools::decided(self.orders, cp, pending, &decision.edited_schedule).await
    }

    /// What a decision leads to: the approved call run (exactly that one, once), or why
    /// not. Before it runs, the turn is stored running without its pending call — only if
    /// this process still holds it and nobody cancelled it — so no other replica can apply
    /// the same decision, and a cancel that came first wins.
    async fn decided_observation(
        &self,
        cp: &mut Checkpoint,
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
                if is_applied_here(&pending.call.name) {
                    None
                } else {
                    match self.catalog.get(&pending.call.name).cloned() {
                        Some(executor) => Some(executor),
                        None => {
                            return Ok(refusal(format!(
                                "nonexistent executor: {}",
                                pending.call.name
                            )));
                        }
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
                let Some(executor) = executor else {
                    return Ok(self.apply_here(cp, pending, decision).await);
                };
                let named: Vec<std::path::PathBuf> = pending
                    .named_write
                    .iter()
                    .map(std::path::PathBuf::from)
                    .collect();
                // An approved call that ran teaches as one run at once would (a call
                // refused above never ran and teaches nothing). The copy index first: a
                // turn resumed on another replica has it rebuilt from its history.
                cp.index.catch_up(&cp.fence_nonce, &cp.history);
                let keys = crate::turn::schema_keys(&executor.manifest.args);
                let fed = passages::fed(cp, &pending.call.arguments, &pending.call.name, &keys);
                let observation = self
                    .execution
                    .execute(&cp.turn_id, &executor, &pending.args, &named, cancel)
                    .await;
                let mnestome = Mnestome::new(self.store.db().clone());
                passages::learn(&mnestome, &fed, observation.ok).await;
                Ok(observation)
            }
            Ok(false) => match self.store.standing(&cp.turn_id).await {
                Ok(s) if s.cancel_requested => {
                    Err(StepOutcome::Finished(Ending::Cancelled.finish(cp.language)))
                }
                _ => Err(StepOutcome::Lost),
            },
            Err(e) => {
                tracing::error!(error = %e, "cannot store the turn before running the approved call");
                Err(StepOutcome::Finished(
                    Ending::StoreDown(StoreDown::NotRun).finish(cp.language),
                ))
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
        emit(sink, pb::turn_event::Event::ApprovalDecided(decided)).await;
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
        self.execution.note_seen(
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
            self.execution
                .labels_for(cp, &pending.call, &pending.args, &observation)
        } else {
            Vec::new()
        };
        self.execution
            .observe(
                cp,
                sink,
                &pending.call,
                log,
                observation,
                labels,
                started_at,
            )
            .await;
        if let Err(e) = self.records.save(cp, State::Running, None).await {
            tracing::error!(error = %e, "cannot store the turn's progress; it stops here");
            return StepOutcome::Finished(
                Ending::StoreDown(StoreDown::StoppedAfterStep).finish(cp.language),
            );
        }
        StepOutcome::Continue
    }
}

/// Whether an approved call is the planner's own tool, applied here rather than run by an
/// executor (see `Suspension::apply_here`).
fn is_applied_here(name: &str) -> bool {
    crate::turn::remember::is_carded(name) || crate::proactive::tools::is_carded(name)
}
