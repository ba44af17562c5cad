//! The turn loop (seed agent_runtime.md ch. 2): pre-filter, LLM with native tools, and for
//! each proposed call the filter pipeline ([`crate::turn::vetting`]), then the executor — or, when
//! policy asks, a person's approval that suspends the turn ([`crate::turn::suspension`]). Caps and
//! the duplicate-read guard are [`crate::turn::rules`]; the scratchpad, modes, cancellation and a
//! wall-clock budget are here.
//!
//! A turn's whole state is a [`Checkpoint`], stored before it waits for a person, so any
//! replica can continue it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metnos_executors::{Catalog, Executor, Observation, Runner};
use metnos_kit::config::TurnsConfig;
use metnos_kit::time::now_ms;
use metnos_llm::Tier;
use metnos_proto::planner::v1 as pb;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use crate::filters::Filters;
use crate::llm::Llm;
use crate::store::{State, Store};
use crate::turn::prefilter::{Entry, Index};
use crate::turn::rules;
use crate::turn::scratch;
use crate::turn::vetting::Refusal;
use crate::turn::{
    Call, Checkpoint, FinalKind, Finish, Hist, Mode, StepLog, TurnRequest, finish, mode_name,
    mode_to_wire,
};
use crate::turnlog::TurnLog;

/// What handling one call led to.
pub(crate) enum StepOutcome {
    Continue,
    Suspended,
    Finished(Finish),
    /// This process no longer holds the turn (its lease expired and another replica took
    /// it over or closed it): it stops here, writing nothing more.
    Lost,
}

/// Where events go: the RunTurn/ResumeTurn stream (a closed stream is a client gone).
pub type Sink = mpsc::Sender<pb::TurnEvent>;

fn event(e: pb::turn_event::Event) -> pb::TurnEvent {
    pb::TurnEvent { event: Some(e) }
}

/// What a planner is made of.
#[derive(Debug)]
pub struct Parts {
    pub config: TurnsConfig,
    pub default_mode: Mode,
    /// The LLM, or why there is none (every turn then ends with that error).
    pub llm: Result<Arc<dyn Llm>, String>,
    pub catalog: Arc<Catalog>,
    pub runner: Runner,
    pub filters: Arc<dyn Filters>,
    pub store: Store,
    pub log: TurnLog,
}

/// The planner: everything a turn needs.
#[derive(Debug)]
pub struct Planner {
    pub config: TurnsConfig,
    pub default_mode: Mode,
    pub llm: Result<Arc<dyn Llm>, String>,
    pub catalog: Arc<Catalog>,
    pub runner: Runner,
    pub filters: Arc<dyn Filters>,
    pub store: Store,
    pub log: TurnLog,
    /// The builtin scheduler, for the standing-order tools (set once at start; none: the
    /// tools are not offered).
    pub scheduler: std::sync::OnceLock<crate::proactive::scheduler::Scheduler>,
    index: Index,
    /// Turns driven in this process: turn id → (which driver, its cancel signal).
    running: Mutex<HashMap<String, (u64, watch::Sender<bool>)>>,
    generation: std::sync::atomic::AtomicU64,
    /// Whether notices are being delivered now (one delivery at a time), and whether a
    /// run was asked for meanwhile.
    pub(crate) delivering: std::sync::atomic::AtomicBool,
    pub(crate) deliver_again: std::sync::atomic::AtomicBool,
}

/// A turn driven here: removed from [`Planner::running`] when dropped, if still its entry.
struct Registered {
    planner: Arc<Planner>,
    turn_id: String,
    generation: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut running = self.planner.running();
        if running
            .get(&self.turn_id)
            .is_some_and(|(generation, _)| *generation == self.generation)
        {
            running.remove(&self.turn_id);
        }
    }
}

/// A call refused before it ran, as the LLM sees it.
pub(crate) fn refusal(error: impl Into<String>) -> Observation {
    Observation::failure(error)
}

impl Planner {
    pub fn new(parts: Parts) -> Planner {
        let entries: Vec<Entry> = parts
            .catalog
            .executors()
            .map(|e| Entry {
                name: e.manifest.name.clone(),
                description: e.manifest.description.clone(),
                affinity: e.manifest.affinity.clone(),
            })
            .collect();
        Planner {
            config: parts.config,
            default_mode: parts.default_mode,
            llm: parts.llm,
            index: Index::new(&entries),
            catalog: parts.catalog,
            runner: parts.runner,
            filters: parts.filters,
            store: parts.store,
            log: parts.log,
            scheduler: std::sync::OnceLock::new(),
            running: Mutex::new(HashMap::new()),
            generation: std::sync::atomic::AtomicU64::new(0),
            delivering: std::sync::atomic::AtomicBool::new(false),
            deliver_again: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, watch::Sender<bool>)>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a turn as driven here (its cancel signal, its lease renewed) until the guard
    /// drops — also when the task panics or is aborted. A turn driven twice here (a
    /// ResumeTurn while its first stream still waits) is one entry per driver: each
    /// removes only its own.
    fn register(self: &Arc<Self>, turn_id: &str) -> (watch::Receiver<bool>, Registered) {
        let (tx, rx) = watch::channel(false);
        let generation = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.running().insert(turn_id.to_owned(), (generation, tx));
        let guard = Registered {
            planner: Arc::clone(self),
            turn_id: turn_id.to_owned(),
            generation,
        };
        (rx, guard)
    }

    /// Claims a suspended turn (or one whose resumer's lease expired) for this process,
    /// while it still waits on the card `token` its checkpoint was read with.
    pub(crate) async fn claim(&self, turn_id: &str, token: &str) -> bool {
        self.store
            .claim_suspended_at(turn_id, Some(token), now_ms())
            .await
            .unwrap_or(false)
    }

    /// Renews the leases of the turns this process runs or resumes.
    pub async fn renew_leases(&self) {
        let ids: Vec<String> = self.running().keys().cloned().collect();
        for id in ids {
            if let Err(e) = self.store.renew(&id, now_ms()).await {
                tracing::warn!(turn_id = %id, error = %e, "cannot renew a turn's lease");
            }
        }
    }

    /// Signals a turn running here to stop; `false` if it is not running here.
    pub fn signal_cancel(&self, turn_id: &str) -> bool {
        match self.running().get(turn_id) {
            Some((_, tx)) => {
                let _ = tx.send(true);
                true
            }
            None => false,
        }
    }

    /// Resolves when the turn is cancelled: here (the watch) or on any replica (the
    /// store's flag, looked at twice a second).
    pub(crate) async fn cancelled(&self, turn_id: &str, cancel: &mut watch::Receiver<bool>) {
        let mut every = tokio::time::interval(Duration::from_millis(500));
        // A signal dropped (another driver of this turn took its place here) is not a
        // cancel: the store's flag still is.
        let mut local = true;
        loop {
            tokio::select! {
                changed = cancel.changed(), if local => {
                    match changed {
                        Err(_) => local = false,
                        Ok(()) if *cancel.borrow() => return,
                        Ok(()) => {}
                    }
                }
                _ = every.tick() => {
                    if self.store.cancel_requested(turn_id).await.unwrap_or(false) {
                        return;
                    }
                }
            }
        }
    }

    /// A new turn's checkpoint.
    pub fn start(&self, request: &TurnRequest) -> Checkpoint {
        let mode = rules::mode_of(request.mode, self.default_mode);
        let candidates: Vec<String> = self
            .index
            .select(&request.query, self.config.prefilter_max.get() as usize)
            .into_iter()
            .map(|c| c.name)
            .collect();
        let wise_capability_offered = candidates.iter().any(|name| {
            self.catalog.get(name).is_some_and(|e| {
                e.manifest
                    .capabilities
                    .iter()
                    .any(|c| self.config.hybrid_wise_capabilities.contains(c))
            })
        });
        Checkpoint {
            turn_id: metnos_kit::random::hex(16),
            channel: request.principal.channel.clone(),
            sender_id: request.principal.sender_id.clone(),
            level: request.level,
            language: request.language,
            query: request.query.clone(),
            forwarded: request.forwarded,
            mode,
            tier: rules::starting_tier(mode, wise_capability_offered),
            tiers_used: BTreeSet::new(),
            models: BTreeSet::new(),
            candidates,
            history: vec![Hist::User {
                text: request.query.clone(),
            }],
            steps: Vec::new(),
            observations: Vec::new(),
            queued: Vec::new(),
            pending: None,
            scratch_ids: Vec::new(),
            failures: 0,
            seen_targets: Vec::new(),
            executor_calls: BTreeMap::new(),
            prompt_tokens: 0,
            completion_tokens: 0,
            started_ms: now_ms(),
            active_ms: 0,
            planned: false,
            fence_nonce: crate::turn::taint::new_nonce(),
            scheduled: false,
            index: crate::turn::taint::Index::default(),
        }
    }

    fn model_of(&self, tier: Tier) -> String {
        self.llm
            .as_ref()
            .map_or_else(|_| String::new(), |l| l.model(tier))
    }

    /// The tier that really answers for `tier` (an unconfigured tier uses a lower one):
    /// what events and the turn log show, so they never name a tier that did not run.
    pub(crate) fn tier_used(&self, tier: Tier) -> Tier {
        self.llm.as_ref().map_or(tier, |l| l.resolve(tier))
    }

    /// Runs a new turn to its end or its suspension, sending events to `sink`.
    pub async fn run(self: Arc<Self>, mut cp: Checkpoint, sink: Sink) {
        let span = tracing::info_span!("turn", turn_id = %cp.turn_id, mode = mode_name(cp.mode));
        async move {
            let live = self.record_as(&cp, "running", None).to_string();
            let inserted = match serde_json::to_string(&cp) {
                Ok(checkpoint) => self
                    .store
                    .insert_turn(
                        &cp.turn_id,
                        &cp.channel,
                        &cp.sender_id,
                        &checkpoint,
                        &live,
                        now_ms(),
                    )
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = inserted {
                tracing::error!(error = %e, "cannot store the new turn");
                let finished = pb::TurnFinished {
                    turn_id: cp.turn_id.clone(),
                    kind: pb::FinalKind::Error as i32,
                    text: "the planner's store is unavailable; nothing was done".to_owned(),
                    ..Default::default()
                };
                let _ = sink
                    .send(event(pb::turn_event::Event::Finished(finished)))
                    .await;
                return;
            }
            let (cancel, _registered) = self.register(&cp.turn_id);
            let started = pb::TurnStarted {
                turn_id: cp.turn_id.clone(),
                mode: mode_to_wire(cp.mode) as i32,
                tier: self.tier_used(cp.tier).as_str().to_owned(),
                model: self.model_of(cp.tier),
            };
            let _ = sink
                .send(event(pb::turn_event::Event::Started(started)))
                .await;
            self.drive(&mut cp, &sink, cancel, false).await;
        }
        .instrument(span)
        .await;
    }

    /// Continues a claimed, suspended turn: applies the decision on its pending call.
    pub async fn resume(self: Arc<Self>, mut cp: Checkpoint, sink: Sink) {
        let span = tracing::info_span!("turn", turn_id = %cp.turn_id, mode = mode_name(cp.mode), resumed = true);
        async move {
            let (cancel, _registered) = self.register(&cp.turn_id);
            self.drive(&mut cp, &sink, cancel, true).await;
        }
        .instrument(span)
        .await;
    }

    /// The loop: pending decision, queued calls, LLM, until the turn finishes or waits.
    async fn drive(
        &self,
        cp: &mut Checkpoint,
        sink: &Sink,
        mut cancel: watch::Receiver<bool>,
        mut claimed: bool,
    ) {
        let outcome = loop {
            // A turn waiting unclaimed for its decision is stored suspended (nobody's).
            let waiting = cp.pending.is_some() && !claimed;
            let standing = self.store.standing(&cp.turn_id).await.ok();
            if standing.is_some_and(|s| !s.held && !waiting && !s.cancel_requested) {
                return self.lost(cp, sink).await;
            }
            if *cancel.borrow() || standing.is_some_and(|s| s.cancel_requested) {
                // A waiting turn is ended by whoever claims it (only one does).
                let token = cp
                    .pending
                    .as_ref()
                    .map(|p| p.token.clone())
                    .unwrap_or_default();
                if waiting && !self.claim(&cp.turn_id, &token).await {
                    return;
                }
                if let Some(p) = cp.pending.take() {
                    let _ = self
                        .filters
                        .cancel(&p.token, "the turn was cancelled")
                        .await;
                }
                break finish(FinalKind::Cancelled, "cancelled");
            }
            // (A turn waiting unclaimed is nobody's to end: its budget counts no waiting.)
            if !waiting && cp.active_ms >= self.config.budget_seconds.get() * 1000 {
                break finish(
                    FinalKind::Timeout,
                    format!(
                        "the turn ran out of its {} s budget",
                        self.config.budget_seconds
                    ),
                );
            }
            if cp.pending.is_some() {
                let outcome = self.await_decision(cp, sink, &mut cancel, claimed).await;
                claimed = false;
                match outcome {
                    Some(StepOutcome::Continue) => continue,
                    Some(StepOutcome::Finished(f)) => break f,
                    Some(StepOutcome::Lost) => return self.lost(cp, sink).await,
                    Some(StepOutcome::Suspended) | None => return,
                }
            }
            if !cp.queued.is_empty() {
                let call = cp.queued.remove(0);
                let started = Instant::now();
                let outcome = self.step(cp, call, sink, &mut cancel).await;
                cp.active_ms += started.elapsed().as_millis() as u64;
                match outcome {
                    StepOutcome::Continue | StepOutcome::Suspended => continue,
                    StepOutcome::Finished(f) => break f,
                    StepOutcome::Lost => return self.lost(cp, sink).await,
                }
            }
            let started = Instant::now();
            let asked = self.ask_llm(cp, &mut cancel).await;
            cp.active_ms += started.elapsed().as_millis() as u64;
            match asked {
                Ok(None) => continue,
                Ok(Some(f)) | Err(f) => break f,
            }
        };
        self.close(cp, sink, outcome).await;
    }

    pub(crate) async fn emit(&self, sink: &Sink, e: pb::turn_event::Event) {
        let _ = sink.send(event(e)).await;
    }

    /// One proposed call through the filter pipeline; runs it, suspends for a person, or
    /// records why not — here, and only here.
    async fn step(
        &self,
        cp: &mut Checkpoint,
        call: Call,
        sink: &Sink,
        cancel: &mut watch::Receiver<bool>,
    ) -> StepOutcome {
        let n = cp.next_step();
        if let Some(stop) = rules::over_cap_steps(n, self.config.cap_steps.get()) {
            return StepOutcome::Finished(stop);
        }
        let started = Instant::now();
        let tier = self.tier_used(cp.tier);
        let proposed = pb::StepProposed {
            step: n,
            executor: call.name.clone(),
            args_json: call.arguments.to_string(),
            tier: tier.as_str().to_owned(),
        };
        self.emit(sink, pb::turn_event::Event::StepProposed(proposed))
            .await;
        let mut log = StepLog::new(n, &call, tier, &self.schema_keys(&call.name));
        // A name that is no tool here is the model's text: the log keeps `?`.
        if self.catalog.get(&call.name).is_none()
            && !crate::proactive::tools::is_tool(&call.name)
            && call.name != scratch::TOOL
        {
            log.executor = "?".to_owned();
        }
        if crate::proactive::tools::is_tool(&call.name) {
            return self.schedule_tool(cp, sink, call, log, started).await;
        }
        if call.name == scratch::TOOL {
            let (observation, labels) = if cp.scratch_ids.is_empty() {
                (refusal("the scratchpad is empty in this turn"), Vec::new())
            } else {
                let observation = scratch::read(&self.store, &cp.turn_id, &call.arguments).await;
                let labels = self.labels_for(cp, &call, &call.arguments, &observation);
                (observation, labels)
            };
            self.observe(cp, sink, &call, log, observation, labels, started)
                .await;
            return StepOutcome::Continue;
        }
        // What the LLM was shown so far, indexed for copies (rebuilt after a resume).
        cp.index.catch_up(&cp.fence_nonce, &cp.history);
        let mut events = Vec::new();
        let vetted = self.vet(cp, &call, &mut log, &mut events, started).await;
        for e in events {
            self.emit(sink, e).await;
        }
        let cleared = match vetted {
            Ok(cleared) => cleared,
            Err(Refusal::Stop(stop)) => return StepOutcome::Finished(stop),
            Err(Refusal::Refused(why)) => {
                self.observe(cp, sink, &call, log, refusal(why), Vec::new(), started)
                    .await;
                return StepOutcome::Continue;
            }
            Err(Refusal::Unavailable {
                observation,
                finish,
            }) => {
                self.observe(
                    cp,
                    sink,
                    &call,
                    log,
                    refusal(observation),
                    Vec::new(),
                    started,
                )
                .await;
                return StepOutcome::Finished(finish);
            }
        };
        *cp.executor_calls.entry(call.name.clone()).or_insert(0) += 1;
        if let Some(capability) = &cleared.approval {
            return self
                .ask_approval(cp, sink, call, log, &cleared, capability)
                .await;
        }
        // At the point of use: a turn cancelled (on any replica) or no longer held here
        // runs nothing more.
        match self.store.standing(&cp.turn_id).await {
            Ok(s) if s.cancel_requested => {
                return StepOutcome::Finished(finish(FinalKind::Cancelled, "cancelled"));
            }
            Ok(s) if !s.held => return StepOutcome::Lost,
            _ => {}
        }
        let observation = self
            .execute(&cp.turn_id, &cleared.executor, &cleared.args, &[], cancel)
            .await;
        self.note_seen(cp, &call.name, &cleared.args, n, &observation);
        let labels = self.labels_for(cp, &call, &cleared.args, &observation);
        self.observe(cp, sink, &call, log, observation, labels, started)
            .await;
        StepOutcome::Continue
    }

    /// The argument names the tool `name` declares: an executor's manifest, or the
    /// planner's own tools (none for a name that is neither).
    fn schema_keys(&self, name: &str) -> Vec<String> {
        if let Some(executor) = self.catalog.get(name) {
            return crate::turn::schema_keys(&executor.manifest.args);
        }
        crate::proactive::tools::tool_defs()
            .into_iter()
            .chain([scratch::tool_def()])
            .find(|def| def.name == name)
            .map(|def| crate::turn::schema_keys(&def.parameters))
            .unwrap_or_default()
    }

    /// The duplicate-read guard learns a target once a call on it succeeded (a failed
    /// read, a timed-out fetch or a refused write may be tried again).
    pub(crate) fn note_seen(
        &self,
        cp: &mut Checkpoint,
        executor: &str,
        args: &Value,
        step: u32,
        observation: &Observation,
    ) {
        if !observation.ok {
            return;
        }
        if let Some(key) = self.guard_key_of(executor, args) {
            cp.seen_targets.push((executor.to_owned(), key, step));
        }
    }

    /// The turn was taken from this process (its lease expired): the stream says so and
    /// ends; the replica that holds it now writes its end.
    pub(crate) async fn lost(&self, cp: &Checkpoint, sink: &Sink) {
        tracing::warn!(turn_id = %cp.turn_id, "this planner no longer holds the turn; it stops here");
        let finished = pb::TurnFinished {
            turn_id: cp.turn_id.clone(),
            kind: pb::FinalKind::Error as i32,
            text: "this planner lost the turn to another replica (its store was out of reach for longer than the lease), so it stopped here".to_owned(),
            ..Default::default()
        };
        self.emit(sink, pb::turn_event::Event::Finished(finished))
            .await;
    }

    /// Runs the signed executor, unless the turn is cancelled first. `named_writes`: the
    /// resolved paths that run code later which the person named and approved.
    pub(crate) async fn execute(
        &self,
        turn_id: &str,
        executor: &Executor,
        args: &Value,
        named_writes: &[std::path::PathBuf],
        cancel: &mut watch::Receiver<bool>,
    ) -> Observation {
        let span = tracing::info_span!("executor", executor = %executor.name());
        let run = self
            .runner
            .run_naming(&self.catalog, executor, args, named_writes)
            .instrument(span);
        tokio::select! {
            observation = run => observation,
            () = self.cancelled(turn_id, cancel) => Observation::failure("cancelled before the executor finished"),
        }
    }

    /// Stores the checkpoint as `state` (with the token it waits on, if any).
    pub(crate) async fn save(
        &self,
        cp: &Checkpoint,
        state: State,
        token: Option<&str>,
    ) -> Result<(), String> {
        let checkpoint = serde_json::to_string(cp).map_err(|e| e.to_string())?;
        let status = match state {
            State::Suspended => "awaiting_approval",
            _ => "running",
        };
        self.show(cp, status).await;
        match self
            .store
            .save(&cp.turn_id, state, token, &checkpoint, now_ms())
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err("the turn is no longer held by this planner".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Shows the turn as it is now to the spectator (its record so far, `status` for its
    /// end: `running`, `awaiting_approval`); a failure costs the view, never the turn.
    pub(crate) async fn show(&self, cp: &Checkpoint, status: &str) {
        let live = self.record_as(cp, status, None).to_string();
        if let Err(e) = self.store.set_live(&cp.turn_id, &live, now_ms()).await {
            tracing::debug!(error = %e, "the turn's live record was not written");
        }
    }

    /// The turn's record, as the turn log and the store keep it (no values, no text).
    pub(crate) fn record(&self, cp: &Checkpoint, kind: FinalKind, reason: Option<&str>) -> Value {
        self.record_as(cp, kind.as_str(), reason)
    }

    fn record_as(&self, cp: &Checkpoint, kind: &str, reason: Option<&str>) -> Value {
        let latency_ms = u64::try_from(now_ms() - cp.started_ms).unwrap_or(0);
        let mut record = json!({
            "turn_id": cp.turn_id,
            "principal": {"channel": cp.channel, "sender_id": cp.sender_id},
            "level": cp.level.to_proto().as_str_name(),
            "mode": cp.mode,
            "tiers": cp.tiers_used,
            "models": cp.models,
            "steps": cp.steps,
            "final_kind": kind,
            "latency_ms": latency_ms,
            "active_ms": cp.active_ms,
            "usage": {"prompt_tokens": cp.prompt_tokens, "completion_tokens": cp.completion_tokens},
            "started_at": metnos_kit::time::rfc3339(cp.started_ms),
            "ended_at": metnos_kit::time::rfc3339(now_ms()),
        });
        if let Some(reason) = reason {
            record["reason"] = json!(reason);
        }
        record
    }

    /// Ends the turn: the store, the log, the event. Written once: a turn this process no
    /// longer holds was ended (or taken over) elsewhere.
    pub(crate) async fn close(&self, cp: &mut Checkpoint, sink: &Sink, outcome: Finish) {
        let latency_ms = u64::try_from(now_ms() - cp.started_ms).unwrap_or(0);
        let kind_name = outcome.kind.as_str();
        let record = self.record(cp, outcome.kind, None);
        let mut finished = self
            .store
            .finish(&cp.turn_id, &record.to_string(), now_ms())
            .await;
        // A store that failed for a moment is asked again while the lease holds: a turn
        // left to the sweep would be ended as interrupted after its person got the answer.
        for _ in 0..3 {
            if finished.is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            finished = self
                .store
                .finish(&cp.turn_id, &record.to_string(), now_ms())
                .await;
        }
        match finished {
            Ok(true) => self.log.append(&record, now_ms()),
            Ok(false) => {
                tracing::warn!(
                    "the turn is no longer held by this planner; its end is not recorded here"
                );
                // Another replica ended it meanwhile, keeping a notice for its person; the
                // person gets this answer, not "I was restarted".
                let _ = self.store.answered(&cp.turn_id, now_ms()).await;
            }
            Err(e) => {
                // Its lease lapses: whichever replica sweeps it writes its one line.
                tracing::warn!(error = %e, "cannot record the finished turn in the store; the lease sweep will end it");
            }
        }
        tracing::info!(
            final_kind = kind_name,
            latency_ms,
            steps = cp.steps.len(),
            "turn finished"
        );
        let finished = pb::TurnFinished {
            turn_id: cp.turn_id.clone(),
            kind: outcome.kind.to_wire() as i32,
            text: outcome.text,
            latency_ms,
            usage: Some(pb::TokenUsage {
                prompt_tokens: cp.prompt_tokens,
                completion_tokens: cp.completion_tokens,
            }),
        };
        self.emit(sink, pb::turn_event::Event::Finished(finished))
            .await;
    }
}
