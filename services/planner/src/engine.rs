//! The turn loop (seed agent_runtime.md ch. 2): pre-filter, LLM with native tools, and
//! for each proposed call — references resolved, schema, scope, policy, vaglio and, when
//! policy asks, an approval that suspends the turn — then the executor. Caps, the
//! duplicate-read guard, the scratchpad, modes, cancellation and a wall-clock budget.
//!
//! A turn's whole state is a [`Checkpoint`], stored before it waits for a person, so any
//! replica can continue it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metnos_executors::{Catalog, Observation, Runner};
use metnos_kit::config::{PlannerMode, TurnsConfig};
use metnos_kit::time::now_ms;
use metnos_llm::{ChatRequest, Message, Outcome, Tier, Tiers, ToolCall, ToolDef};
use metnos_proto::approval::v1 as approval;
use metnos_proto::common::v1 as common;
use metnos_proto::planner::v1 as pb;
use metnos_proto::policy::v1 as policy;
use metnos_proto::vaglio::v1 as vaglio;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use crate::filters::Filters;
use crate::piping;
use crate::prefilter::{Entry, Index};
use crate::scratch;
use crate::store::{State, Store};
use crate::turnlog::TurnLog;

/// Executors whose repeated use on the same target is intercepted (seed ch. 10).
const DUPLICATE_GUARDED: &[&str] = &["fs_read", "fs_write", "web_fetch"];

/// A tool call as the checkpoint keeps it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

impl From<&ToolCall> for Call {
    fn from(c: &ToolCall) -> Call {
        Call {
            id: c.id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone(),
        }
    }
}

/// One message of the turn's conversation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Hist {
    User {
        text: String,
    },
    Assistant {
        text: String,
        calls: Vec<Call>,
    },
    Tool {
        call_id: String,
        name: String,
        content: String,
    },
}

/// A call waiting for a person's decision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PendingCall {
    pub step: u32,
    pub call: Call,
    /// The arguments as validated and approved (references resolved).
    pub args: Value,
    pub token: String,
    pub call_sha256: String,
    pub started_ms: i64,
    /// The card, protobuf-encoded, to show it again on resume.
    pub card: Vec<u8>,
    pub expires_at: Option<(i64, i32)>,
}

/// What the turn log keeps of one step: no argument values.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct StepLog {
    pub step: u32,
    pub executor: String,
    pub tier: String,
    pub arg_keys: Vec<String>,
    /// "ok", or what failed: "references", "schema", "scope", "unknown executor",
    /// "duplicate".
    pub validation: String,
    /// "ok" (inside the scope hints), "refused", or "none" (no hints); unset when the
    /// call did not get that far.
    pub scope: Option<String>,
    pub policy: Option<String>,
    pub grant_id: Option<i64>,
    pub verdict: Option<String>,
    pub verdict_score: Option<f64>,
    pub approval_token: Option<String>,
    pub approval_decision: Option<String>,
    pub duration_ms: u64,
    /// Microseconds spent on the checks before the call could run: references, schema
    /// and scope, policy and vaglio (the control plane's overhead).
    pub checks_us: u64,
    pub policy_us: u64,
    pub vaglio_us: u64,
    pub ok: bool,
    pub scratchpad_id: Option<String>,
}

/// Everything a turn needs to go on, on any replica.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Checkpoint {
    pub turn_id: String,
    pub channel: String,
    pub sender_id: String,
    pub level: i32,
    pub language: i32,
    pub query: String,
    pub mode: String,
    /// The tier now in use ("fast", "wise").
    pub tier: String,
    pub tiers_used: BTreeSet<String>,
    pub models: BTreeSet<String>,
    pub candidates: Vec<String>,
    pub history: Vec<Hist>,
    pub steps: Vec<StepLog>,
    /// Each step's observation as the LLM may pipe it (large ones by scratchpad id).
    pub observations: Vec<Value>,
    /// Calls of the last LLM answer not handled yet.
    pub queued: Vec<Call>,
    pub pending: Option<PendingCall>,
    pub scratch_ids: Vec<String>,
    pub failures: u32,
    /// (executor, target) of guarded reads and writes → the step that did it.
    pub seen_targets: Vec<(String, String, u32)>,
    /// Calls per executor.
    pub executor_calls: BTreeMap<String, u32>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub started_ms: i64,
    /// Milliseconds of work so far (LLM and executors; waiting for people excluded).
    pub active_ms: u64,
    /// Online mode: the plan was made, the next LLM call is for the answer.
    pub planned: bool,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    pub kind: pb::FinalKind,
    pub text: String,
}

fn finish(kind: pb::FinalKind, text: impl Into<String>) -> Finish {
    Finish {
        kind,
        text: text.into(),
    }
}

/// What handling one call led to.
enum StepOutcome {
    Continue,
    Suspended,
    Finished(Finish),
}

/// Where events go: the RunTurn/ResumeTurn stream (a closed stream is a client gone).
pub type Sink = mpsc::Sender<pb::TurnEvent>;

fn event(e: pb::turn_event::Event) -> pb::TurnEvent {
    pb::TurnEvent { event: Some(e) }
}

fn language_name(language: i32) -> &'static str {
    if language == common::Language::English as i32 {
        "English"
    } else if language == common::Language::Italian as i32 {
        "Italian"
    } else {
        "the language of the person's request"
    }
}

fn mode_of(mode: &str) -> pb::Mode {
    match mode {
        "online" => pb::Mode::Online,
        "hybrid" => pb::Mode::Hybrid,
        _ => pb::Mode::Local,
    }
}

fn tier_of(name: &str) -> Tier {
    match name {
        "wise" => Tier::Wise,
        "middle" => Tier::Middle,
        _ => Tier::Fast,
    }
}

const SYSTEM_PROMPT: &str = "You are Metnos, a personal agent acting for one person. \
Use the tools to do what they ask, one step at a time; when you have what you need, answer in plain \
text without calling any tool. To pass a previous step's result to a tool, set an argument's whole \
value to {{stepN.field}}, for example {{step1.content}} or {{step2.metadata.path}}; it works only as \
an argument's entire value. In your final answer write the actual values, never {{...}} references. \
Observations are JSON with their step number; a large one is stored in the scratchpad and shown as a \
summary with a scratchpad_id: call scratchpad_read with that id to read more of it. If a tool call \
is refused, do not insist: explain or try another way.";

/// What a planner is made of.
#[derive(Debug)]
pub struct Parts {
    pub config: TurnsConfig,
    pub default_mode: PlannerMode,
    /// The LLM tiers, or why there are none (every turn then ends with that error).
    pub tiers: Result<Tiers, String>,
    pub catalog: Arc<Catalog>,
    pub runner: Runner,
    pub filters: Filters,
    pub store: Store,
    pub log: TurnLog,
}

/// The planner: everything a turn needs.
#[derive(Debug)]
pub struct Planner {
    pub config: TurnsConfig,
    pub default_mode: PlannerMode,
    pub tiers: Result<Tiers, String>,
    pub catalog: Arc<Catalog>,
    pub runner: Runner,
    pub filters: Filters,
    pub store: Store,
    pub log: TurnLog,
    index: Index,
    /// Turns running in this process: turn id → cancel signal.
    running: Mutex<HashMap<String, watch::Sender<bool>>>,
}

/// How strict a policy outcome is: denied over approval over allowed.
fn strictness(outcome: policy::Outcome) -> u8 {
    match outcome {
        policy::Outcome::Allowed => 0,
        policy::Outcome::ApprovalRequired => 1,
        _ => 2,
    }
}

/// A call refused before it ran, as the LLM sees it.
fn refusal(error: impl Into<String>) -> Observation {
    Observation::failure(error)
}

impl Planner {
    pub fn new(parts: Parts) -> Planner {
        let Parts {
            config,
            default_mode,
            tiers,
            catalog,
            runner,
            filters,
            store,
            log,
        } = parts;
        let entries: Vec<Entry> = catalog
            .executors()
            .map(|e| Entry {
                name: e.manifest.name.clone(),
                description: e.manifest.description.clone(),
                affinity: e.manifest.affinity.clone(),
            })
            .collect();
        Planner {
            config,
            default_mode,
            tiers,
            index: Index::new(&entries),
            catalog,
            runner,
            filters,
            store,
            log,
            running: Mutex::new(HashMap::new()),
        }
    }

    fn register(&self, turn_id: &str) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(turn_id.to_owned(), tx);
        rx
    }

    fn unregister(&self, turn_id: &str) {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(turn_id);
    }

    /// Signals a turn running here to stop; `false` if it is not running here.
    pub fn signal_cancel(&self, turn_id: &str) -> bool {
        match self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(turn_id)
        {
            Some(tx) => {
                let _ = tx.send(true);
                true
            }
            None => false,
        }
    }

    /// Resolves when the turn is cancelled: here (the watch) or on any replica (the
    /// store's flag, looked at twice a second).
    async fn cancelled(&self, turn_id: &str, cancel: &mut watch::Receiver<bool>) {
        let mut every = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                changed = cancel.changed() => {
                    if changed.is_err() || *cancel.borrow() {
                        return;
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

    /// A new turn's checkpoint (after the request was checked).
    pub fn start(&self, request: &pb::RunTurnRequest) -> Checkpoint {
        let principal = request.principal.clone().unwrap_or_default();
        let mode = match pb::Mode::try_from(request.mode).unwrap_or(pb::Mode::Unspecified) {
            pb::Mode::Online => "online",
            pb::Mode::Hybrid => "hybrid",
            pb::Mode::Local => "local",
            pb::Mode::Unspecified => match self.default_mode {
                PlannerMode::Local => "local",
                PlannerMode::Online => "online",
                PlannerMode::Hybrid => "hybrid",
            },
        };
        let candidates: Vec<String> = self
            .index
            .select(&request.query, self.config.prefilter_max.get() as usize)
            .into_iter()
            .map(|c| c.name)
            .collect();
        let wise_needed = mode == "hybrid"
            && candidates.iter().any(|name| {
                self.catalog.get(name).is_some_and(|e| {
                    e.manifest
                        .capabilities
                        .iter()
                        .any(|c| self.config.hybrid_wise_capabilities.contains(c))
                })
            });
        let tier = if mode == "online" || wise_needed {
            "wise"
        } else {
            "fast"
        };
        Checkpoint {
            turn_id: metnos_kit::random::hex(16),
            channel: principal.channel,
            sender_id: principal.sender_id,
            level: request.level,
            language: request.language,
            query: request.query.clone(),
            mode: mode.to_owned(),
            tier: tier.to_owned(),
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
        }
    }

    fn model_of(&self, tier: &str) -> String {
        match &self.tiers {
            Ok(tiers) => tiers.provider(tier_of(tier)).model().to_owned(),
            Err(_) => String::new(),
        }
    }

    /// The tier that really answers for `tier` (an unconfigured tier uses a lower one):
    /// what events and the turn log show, so they never name a tier that did not run.
    fn tier_used(&self, tier: &str) -> String {
        match &self.tiers {
            Ok(tiers) => tiers.resolve(tier_of(tier)).as_str().to_owned(),
            Err(_) => tier.to_owned(),
        }
    }

    /// Runs a new turn to its end or its suspension, sending events to `sink`.
    pub async fn run(self: Arc<Self>, mut cp: Checkpoint, sink: Sink) {
        let span = tracing::info_span!("turn", turn_id = %cp.turn_id, mode = %cp.mode);
        async move {
            let checkpoint = serde_json::to_string(&cp).unwrap_or_default();
            if let Err(e) = self
                .store
                .insert_turn(
                    &cp.turn_id,
                    &cp.channel,
                    &cp.sender_id,
                    &checkpoint,
                    now_ms(),
                )
                .await
            {
                let _ = sink
                    .send(event(pb::turn_event::Event::Finished(pb::TurnFinished {
                        turn_id: cp.turn_id.clone(),
                        kind: pb::FinalKind::Error as i32,
                        text: format!("the planner's store is unavailable: {e}"),
                        ..Default::default()
                    })))
                    .await;
                return;
            }
            let cancel = self.register(&cp.turn_id);
            let _ = sink
                .send(event(pb::turn_event::Event::Started(pb::TurnStarted {
                    turn_id: cp.turn_id.clone(),
                    mode: mode_of(&cp.mode) as i32,
                    tier: self.tier_used(&cp.tier),
                    model: self.model_of(&cp.tier),
                })))
                .await;
            self.drive(&mut cp, &sink, cancel, false).await;
            self.unregister(&cp.turn_id);
        }
        .instrument(span)
        .await;
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
        self.close(cp, &sink, finish(pb::FinalKind::Cancelled, "cancelled"))
            .await;
    }

    /// Continues a claimed, suspended turn: applies the decision on its pending call.
    pub async fn resume(self: Arc<Self>, mut cp: Checkpoint, sink: Sink) {
        let span =
            tracing::info_span!("turn", turn_id = %cp.turn_id, mode = %cp.mode, resumed = true);
        async move {
            let cancel = self.register(&cp.turn_id);
            self.drive(&mut cp, &sink, cancel, true).await;
            self.unregister(&cp.turn_id);
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
            if *cancel.borrow()
                || self
                    .store
                    .cancel_requested(&cp.turn_id)
                    .await
                    .unwrap_or(false)
            {
                if let Some(p) = cp.pending.take() {
                    let _ = self
                        .filters
                        .cancel(&p.token, "the turn was cancelled")
                        .await;
                }
                break finish(pb::FinalKind::Cancelled, "cancelled");
            }
            if cp.active_ms >= self.config.budget_seconds.get() * 1000 {
                break finish(
                    pb::FinalKind::Timeout,
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
                    Some(StepOutcome::Suspended) | None => return,
                }
            }
            if !cp.queued.is_empty() {
                let call = cp.queued.remove(0);
                let started = Instant::now();
                let outcome = self.step(cp, call, sink, &mut cancel).await;
                cp.active_ms += started.elapsed().as_millis() as u64;
                match outcome {
                    StepOutcome::Continue => continue,
                    StepOutcome::Suspended => continue,
                    StepOutcome::Finished(f) => break f,
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

    /// One LLM call: tool calls are queued (`Ok(None)`), text finishes the turn.
    async fn ask_llm(
        &self,
        cp: &mut Checkpoint,
        cancel: &mut watch::Receiver<bool>,
    ) -> Result<Option<Finish>, Finish> {
        let tiers = self
            .tiers
            .as_ref()
            .map_err(|e| finish(pb::FinalKind::Error, e.clone()))?;
        if self.catalog.is_empty() {
            return Err(finish(
                pb::FinalKind::Error,
                "no executors are available (empty catalog)",
            ));
        }
        let offer_tools = !(cp.mode == "online" && cp.planned);
        let mut tools: Vec<ToolDef> = Vec::new();
        if offer_tools {
            for name in &cp.candidates {
                if let Some(e) = self.catalog.get(name) {
                    tools.push(ToolDef {
                        name: e.manifest.name.clone(),
                        description: e.manifest.description.clone(),
                        parameters: e.manifest.args.clone(),
                    });
                }
            }
            if !cp.scratch_ids.is_empty() {
                tools.push(scratch::tool_def());
            }
        }
        let request = ChatRequest {
            system: Some(format!(
                "{SYSTEM_PROMPT} Answer in {}.",
                language_name(cp.language)
            )),
            messages: to_messages(&cp.history),
            tools,
            temperature: Some(0.0),
            ..ChatRequest::default()
        };
        let tier = tier_of(&cp.tier);
        let remaining = Duration::from_millis(
            (self.config.budget_seconds.get() * 1000).saturating_sub(cp.active_ms),
        );
        let call = tiers.chat(tier, &request);
        let response = tokio::select! {
            r = tokio::time::timeout(remaining, call) => match r {
                Ok(Ok(response)) => response,
                Ok(Err(e)) => {
                    return Err(finish(
                        pb::FinalKind::Error,
                        format!("the LLM ({} tier) failed: {e}", tiers.resolve(tier).as_str()),
                    ));
                }
                Err(_) => {
                    return Err(finish(
                        pb::FinalKind::Timeout,
                        format!("the turn ran out of its {} s budget waiting for the LLM", self.config.budget_seconds),
                    ));
                }
            },
            () = self.cancelled(&cp.turn_id, cancel) => return Err(finish(pb::FinalKind::Cancelled, "cancelled")),
        };
        cp.tiers_used
            .insert(tiers.resolve(tier).as_str().to_owned());
        cp.models.insert(response.model.clone());
        cp.prompt_tokens += response.usage.prompt_tokens;
        cp.completion_tokens += response.usage.completion_tokens;
        match response.outcome {
            Outcome::Text(text) => Ok(Some(finish(pb::FinalKind::Answer, text))),
            Outcome::ToolCalls(calls) if !offer_tools => {
                // The answer call of an online plan asked for more tools: it has what it has.
                let _ = calls;
                Err(finish(
                    pb::FinalKind::Error,
                    "the online plan asked for more tool calls after its single plan",
                ))
            }
            Outcome::ToolCalls(calls) => {
                let calls: Vec<Call> = calls.iter().map(Call::from).collect();
                cp.history.push(Hist::Assistant {
                    text: String::new(),
                    calls: calls.clone(),
                });
                cp.queued = calls;
                if cp.mode == "online" {
                    cp.planned = true;
                }
                Ok(None)
            }
        }
    }

    async fn emit(&self, sink: &Sink, e: pb::turn_event::Event) {
        let _ = sink.send(event(e)).await;
    }

    /// Records the observation of step `n` for the LLM and for piping.
    async fn observe(
        &self,
        cp: &mut Checkpoint,
        sink: &Sink,
        call: &Call,
        mut log: StepLog,
        observation: Observation,
        started: Instant,
    ) {
        let n = log.step;
        let mut value = serde_json::to_value(&observation).unwrap_or(Value::Null);
        let size = value.to_string().len() as u64;
        let mut scratchpad_id = String::new();
        let mut shown = value.clone();
        if size > self.config.scratchpad_threshold_bytes.get() {
            match scratch::store(&self.store, &cp.turn_id, n, &observation, size).await {
                Ok(synthetic) => {
                    scratchpad_id = synthetic["scratchpad_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    cp.scratch_ids.push(scratchpad_id.clone());
                    shown = synthetic;
                    // Piping still gets the whole observation, through the scratchpad.
                    value = json!({"scratchpad_id": scratchpad_id});
                }
                Err(e) => {
                    tracing::warn!(error = %e, "scratchpad unavailable; the observation is cut");
                    let text = shown.to_string();
                    shown = json!({"ok": observation.ok, "summary": scratch::summary(&text)});
                }
            }
        }
        if let Value::Object(map) = &mut shown {
            map.insert("step".to_owned(), json!(n));
        }
        while cp.observations.len() < n as usize {
            cp.observations.push(Value::Null);
        }
        cp.observations[n as usize - 1] = value;
        cp.history.push(Hist::Tool {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: shown.to_string(),
        });
        if !observation.ok {
            cp.failures += 1;
            if cp.mode == "hybrid"
                && cp.tier != "wise"
                && self.config.hybrid_escalate_after_failures > 0
                && cp.failures >= self.config.hybrid_escalate_after_failures
            {
                if self.tier_used("wise") == self.tier_used(&cp.tier) {
                    tracing::info!(
                        failures = cp.failures,
                        "hybrid turn would escalate, but no wise tier is configured"
                    );
                } else {
                    tracing::info!(
                        failures = cp.failures,
                        "hybrid turn escalates to the wise tier"
                    );
                }
                cp.tier = "wise".to_owned();
            }
        }
        log.ok = observation.ok;
        log.duration_ms = started.elapsed().as_millis() as u64;
        log.scratchpad_id = (!scratchpad_id.is_empty()).then(|| scratchpad_id.clone());
        let summary = match (&observation.error, &observation.content) {
            (Some(error), _) => error.clone(),
            (None, Some(Value::String(text))) => text.chars().take(200).collect(),
            (None, Some(other)) => other.to_string().chars().take(200).collect(),
            (None, None) => String::new(),
        };
        let duration_ms = log.duration_ms;
        cp.steps.push(log);
        self.emit(
            sink,
            pb::turn_event::Event::Observation(pb::ObservationSummary {
                step: n,
                ok: observation.ok,
                summary,
                scratchpad_id,
                duration_ms,
            }),
        )
        .await;
    }

    /// One proposed call through every filter; runs it if all agree.
    async fn step(
        &self,
        cp: &mut Checkpoint,
        call: Call,
        sink: &Sink,
        cancel: &mut watch::Receiver<bool>,
    ) -> StepOutcome {
        let n = cp.steps.len() as u32 + 1;
        if n > self.config.cap_steps.get() {
            return StepOutcome::Finished(finish(
                pb::FinalKind::CapSteps,
                format!(
                    "stopped after {} steps (cap_steps) without an answer",
                    self.config.cap_steps
                ),
            ));
        }
        let started = Instant::now();
        self.emit(
            sink,
            pb::turn_event::Event::StepProposed(pb::StepProposed {
                step: n,
                executor: call.name.clone(),
                args_json: call.arguments.to_string(),
                tier: self.tier_used(&cp.tier),
            }),
        )
        .await;
        let mut log = StepLog {
            step: n,
            executor: call.name.clone(),
            tier: self.tier_used(&cp.tier),
            arg_keys: call
                .arguments
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
            validation: "ok".to_owned(),
            ..StepLog::default()
        };

        if call.name == scratch::TOOL {
            let observation = if cp.scratch_ids.is_empty() {
                refusal("the scratchpad is empty in this turn")
            } else {
                scratch::read(&self.store, &cp.turn_id, &call.arguments).await
            };
            self.observe(cp, sink, &call, log, observation, started)
                .await;
            return StepOutcome::Continue;
        }
        let Some(executor) = self.catalog.get(&call.name).cloned() else {
            log.validation = "unknown executor".to_owned();
            let observation = refusal(format!(
                "nonexistent executor: {} (available: {})",
                call.name.chars().take(64).collect::<String>(),
                cp.candidates.join(", ")
            ));
            self.observe(cp, sink, &call, log, observation, started)
                .await;
            return StepOutcome::Continue;
        };

        // References to earlier steps.
        let args = match self.resolve_refs(cp, &call.arguments).await {
            Ok(args) => args,
            Err(e) => {
                log.validation = "references".to_owned();
                self.observe(cp, sink, &call, log, refusal(e), started)
                    .await;
                return StepOutcome::Continue;
            }
        };

        // The duplicate-read guard.
        let target = executor
            .manifest
            .target_arg
            .as_deref()
            .and_then(|k| args.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if DUPLICATE_GUARDED.contains(&call.name.as_str())
            && !target.is_empty()
            && let Some((_, _, earlier)) = cp
                .seen_targets
                .iter()
                .find(|(e, t, _)| *e == call.name && *t == target)
        {
            log.validation = "duplicate".to_owned();
            let message =
                format!("you already have this data at step {earlier}: formulate the final_answer");
            self.observe(cp, sink, &call, log, refusal(message), started)
                .await;
            return StepOutcome::Continue;
        }
        let calls_so_far = cp.executor_calls.get(&call.name).copied().unwrap_or(0);
        if calls_so_far >= self.config.cap_same_executor.get() {
            return StepOutcome::Finished(finish(
                pb::FinalKind::CapSameExecutor,
                format!(
                    "stopped: {} was called {} times (cap_same_executor) without an answer",
                    call.name, self.config.cap_same_executor
                ),
            ));
        }

        // Schema and scope.
        let hinted =
            !executor.manifest.scope.paths.is_empty() || !executor.manifest.scope.hosts.is_empty();
        log.scope = Some(if hinted { "ok" } else { "none" }.to_owned());
        if let Err(e) = executor.check_args(&args, &self.runner.user_home) {
            (log.validation, log.scope) = match e {
                metnos_executors::CallError::Scope(_) => {
                    ("scope".to_owned(), Some("refused".to_owned()))
                }
                _ => ("schema".to_owned(), None),
            };
            self.observe(cp, sink, &call, log, refusal(e.to_string()), started)
                .await;
            return StepOutcome::Continue;
        }

        // Policy (every capability the executor declares; the strictest answer wins) and
        // the vaglio are asked at once: neither depends on the other, and policy's answer
        // is applied first.
        let principal = common::Principal {
            channel: cp.channel.clone(),
            sender_id: cp.sender_id.clone(),
        };
        let level =
            common::AutonomyLevel::try_from(cp.level).unwrap_or(common::AutonomyLevel::Unspecified);
        let several = executor.manifest.capabilities.len() > 1;
        let ask_policy = async {
            let started = Instant::now();
            let mut outcome = policy::Outcome::Allowed;
            let mut reason = String::new();
            let mut grant_id = None;
            let mut approval_capability = String::new();
            for capability in &executor.manifest.capabilities {
                let kind = metnos_core::capability::Capability::parse(capability)
                    .map(|c| c.spec().target_kind)
                    .unwrap_or(metnos_core::capability::TargetKind::Exact);
                let cap_target = if kind == metnos_core::capability::TargetKind::None {
                    String::new()
                } else {
                    target.clone()
                };
                // A secondary capability that needs a target the call does not give is not
                // exercised (parse_local on text reads no file).
                if several
                    && cap_target.is_empty()
                    && kind != metnos_core::capability::TargetKind::None
                {
                    continue;
                }
                let answer = self
                    .filters
                    .check(level, &principal, capability, &cap_target)
                    .await?;
                let this =
                    policy::Outcome::try_from(answer.outcome).unwrap_or(policy::Outcome::Denied);
                if this == policy::Outcome::ApprovalRequired && approval_capability.is_empty() {
                    approval_capability = capability.clone();
                }
                if reason.is_empty() || strictness(this) > strictness(outcome) {
                    outcome = this;
                    reason = answer.reason;
                    grant_id = answer.grant_id;
                }
            }
            Ok::<_, tonic::Status>((
                outcome,
                reason,
                grant_id,
                approval_capability,
                started.elapsed(),
            ))
        };
        let request = vaglio::JudgeRequest {
            intent: cp.query.clone(),
            executor: call.name.clone(),
            args_json: args.to_string(),
            context: Some(vaglio::JudgeContext {
                mode: cp.mode.clone(),
                step: n,
                capability: executor
                    .manifest
                    .capabilities
                    .first()
                    .cloned()
                    .unwrap_or_default(),
                critical: Some(executor.manifest.critical),
            }),
        };
        let ask_vaglio = async {
            let started = Instant::now();
            self.filters
                .judge(request)
                .await
                .map(|v| (v, started.elapsed()))
        };
        let (policy_answer, vaglio_answer) = tokio::join!(ask_policy, ask_vaglio);

        let (outcome, reason, grant_id, approval_capability, policy_time) = match policy_answer {
            Ok(answer) => answer,
            Err(status) => {
                let message = format!(
                    "policy check failed ({:?}): {}",
                    status.code(),
                    status.message()
                );
                log.policy = Some("unavailable".to_owned());
                self.observe(cp, sink, &call, log, refusal(message.clone()), started)
                    .await;
                return StepOutcome::Finished(finish(
                    pb::FinalKind::Error,
                    format!(
                        "the policy service could not be asked, so nothing was done: {message}"
                    ),
                ));
            }
        };
        log.policy_us = policy_time.as_micros() as u64;
        log.policy = Some(
            match outcome {
                policy::Outcome::Allowed => "allowed",
                policy::Outcome::ApprovalRequired => "approval_required",
                _ => "denied",
            }
            .to_owned(),
        );
        log.grant_id = grant_id;
        self.emit(
            sink,
            pb::turn_event::Event::PolicyOutcome(pb::PolicyOutcome {
                step: n,
                outcome: outcome as i32,
                reason: reason.clone(),
                grant_id,
            }),
        )
        .await;
        if outcome != policy::Outcome::Allowed && outcome != policy::Outcome::ApprovalRequired {
            log.checks_us = started.elapsed().as_micros() as u64;
            self.observe(
                cp,
                sink,
                &call,
                log,
                refusal(format!("policy: denied ({reason})")),
                started,
            )
            .await;
            return StepOutcome::Continue;
        }

        let verdict = match vaglio_answer {
            Ok((verdict, took)) => {
                log.vaglio_us = took.as_micros() as u64;
                verdict
            }
            Err(status) => {
                let message = format!("vaglio failed ({:?}): {}", status.code(), status.message());
                log.verdict = Some("unavailable".to_owned());
                self.observe(cp, sink, &call, log, refusal(message.clone()), started)
                    .await;
                return StepOutcome::Finished(finish(
                    pb::FinalKind::Error,
                    format!("the vaglio could not be asked, so nothing was done: {message}"),
                ));
            }
        };
        log.checks_us = started.elapsed().as_micros() as u64;
        log.verdict = Some(if verdict.approved {
            "approved".to_owned()
        } else {
            "blocked".to_owned()
        });
        log.verdict_score = Some(verdict.score);
        self.emit(
            sink,
            pb::turn_event::Event::Verdict(pb::VerdictGiven {
                step: n,
                verdict: Some(verdict.clone()),
            }),
        )
        .await;
        if !verdict.approved {
            self.observe(
                cp,
                sink,
                &call,
                log,
                refusal(format!("vaglio: {}", verdict.reason)),
                started,
            )
            .await;
            return StepOutcome::Continue;
        }

        *cp.executor_calls.entry(call.name.clone()).or_insert(0) += 1;
        if !target.is_empty() && DUPLICATE_GUARDED.contains(&call.name.as_str()) {
            cp.seen_targets.push((call.name.clone(), target.clone(), n));
        }

        if outcome == policy::Outcome::ApprovalRequired {
            return self
                .ask_approval(
                    cp,
                    sink,
                    call,
                    args,
                    log,
                    &executor,
                    &approval_capability,
                    &target,
                )
                .await;
        }
        let observation = self.execute(&executor, &args, cancel).await;
        self.observe(cp, sink, &call, log, observation, started)
            .await;
        StepOutcome::Continue
    }

    async fn execute(
        &self,
        executor: &metnos_executors::Executor,
        args: &Value,
        cancel: &mut watch::Receiver<bool>,
    ) -> Observation {
        let span = tracing::info_span!("executor", executor = %executor.name());
        let run = self
            .runner
            .run(&self.catalog, executor, args)
            .instrument(span);
        tokio::select! {
            observation = run => observation,
            _ = cancel.changed() => Observation::failure("cancelled before the executor finished"),
        }
    }

    async fn resolve_refs(&self, cp: &Checkpoint, args: &Value) -> Result<Value, String> {
        let wanted = piping::referenced_steps(args);
        let mut found: HashMap<u32, Value> = HashMap::new();
        for step in wanted {
            let Some(value) = step
                .checked_sub(1)
                .and_then(|i| cp.observations.get(i as usize))
                .filter(|v| !v.is_null())
            else {
                continue;
            };
            let full = match value.get("scratchpad_id").and_then(Value::as_str) {
                Some(id) if value.as_object().is_some_and(|m| m.len() == 1) => {
                    match self.store.get_scratch(&cp.turn_id, id).await {
                        Ok(Some(entry)) => {
                            serde_json::from_str(&entry.observation).unwrap_or(Value::Null)
                        }
                        _ => {
                            return Err(format!(
                                "step {step}'s observation is no longer in the scratchpad"
                            ));
                        }
                    }
                }
                _ => value.clone(),
            };
            found.insert(step, full);
        }
        piping::resolve(args, &|n| found.get(&n).cloned(), cp.steps.len() as u32)
            .map_err(|e| e.to_string())
    }

    #[allow(clippy::too_many_arguments)]
    async fn ask_approval(
        &self,
        cp: &mut Checkpoint,
        sink: &Sink,
        call: Call,
        args: Value,
        mut log: StepLog,
        executor: &metnos_executors::Executor,
        capability: &str,
        target: &str,
    ) -> StepOutcome {
        let args_json = args.to_string();
        let call_sha256 = match metnos_core::call::call_sha256(&call.name, &args_json) {
            Ok(hash) => hash,
            Err(e) => {
                self.observe(
                    cp,
                    sink,
                    &call,
                    log,
                    refusal(format!("cannot hash the call: {e}")),
                    Instant::now(),
                )
                .await;
                return StepOutcome::Continue;
            }
        };
        let request =
            crate::cards::pending_request(cp, executor, capability, target, &call.name, &args_json);
        let created = match self.filters.create_pending(request).await {
            Ok(created) => created,
            Err(status) => {
                let message = format!(
                    "approval request failed ({:?}): {}",
                    status.code(),
                    status.message()
                );
                log.approval_decision = Some("unavailable".to_owned());
                self.observe(
                    cp,
                    sink,
                    &call,
                    log,
                    refusal(message.clone()),
                    Instant::now(),
                )
                .await;
                return StepOutcome::Finished(finish(
                    pb::FinalKind::Error,
                    format!(
                        "the approval service could not be asked, so nothing was done: {message}"
                    ),
                ));
            }
        };
        let pending = created.approval.unwrap_or_default();
        log.approval_token = Some(pending.token.clone());
        // The log of this step is completed when the decision comes.
        cp.steps.push(log);
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
        });
        let checkpoint = serde_json::to_string(&*cp).unwrap_or_default();
        if let Err(e) = self
            .store
            .save(
                &cp.turn_id,
                State::Suspended,
                Some(&pending.token),
                &checkpoint,
                now_ms(),
            )
            .await
        {
            tracing::error!(error = %e, "cannot store the checkpoint; the approval is cancelled");
            let _ = self
                .filters
                .cancel(&pending.token, "the planner could not store the turn")
                .await;
            return StepOutcome::Finished(finish(
                pb::FinalKind::Error,
                format!("the planner's store is unavailable: {e}"),
            ));
        }
        self.emit(
            sink,
            pb::turn_event::Event::AwaitingApproval(pb::AwaitingApproval {
                step: cp.steps.len() as u32,
                token: pending.token.clone(),
                card: created.card,
                expires_at: pending.expires_at,
            }),
        )
        .await;
        StepOutcome::Suspended
    }

    /// Waits for the pending call's decision while the client listens; applies it.
    /// `None`: the client went away (the turn stays suspended, any replica may resume it).
    async fn await_decision(
        &self,
        cp: &mut Checkpoint,
        sink: &Sink,
        cancel: &mut watch::Receiver<bool>,
        claimed: bool,
    ) -> Option<StepOutcome> {
        let pending = cp.pending.clone()?;
        let still_pending =
            |p: &approval::PendingApproval| p.status == approval::ApprovalStatus::Pending as i32;
        if claimed
            && self
                .filters
                .get_pending(&pending.token)
                .await
                .is_ok_and(|p| still_pending(&p))
        {
            // A resumed turn that still waits shows its card again.
            let card = <approval::Card as prost::Message>::decode(pending.card.as_slice()).ok();
            self.emit(
                sink,
                pb::turn_event::Event::AwaitingApproval(pb::AwaitingApproval {
                    step: pending.step,
                    token: pending.token.clone(),
                    card,
                    expires_at: pending
                        .expires_at
                        .map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
                }),
            )
            .await;
        }
        let turn_id = cp.turn_id.clone();
        let decided = tokio::select! {
            decided = self.filters.wait_decision(&pending.token) => decided,
            () = sink.closed() => {
                // Nobody listens: the turn waits, suspended, for any replica to resume it.
                let checkpoint = serde_json::to_string(&*cp).unwrap_or_default();
                let _ = self.store.save(&cp.turn_id, State::Suspended, Some(&pending.token), &checkpoint, now_ms()).await;
                return None;
            }
            () = self.cancelled(&turn_id, cancel) => {
                let _ = self.filters.cancel(&pending.token, "the turn was cancelled").await;
                cp.pending = None;
                return Some(StepOutcome::Finished(finish(pb::FinalKind::Cancelled, "cancelled")));
            }
        };
        // Only one caller continues a turn: the one that claims it.
        if !claimed
            && !self
                .store
                .claim_suspended(&cp.turn_id, now_ms())
                .await
                .unwrap_or(false)
        {
            self.emit(
                sink,
                pb::turn_event::Event::Suspended(pb::TurnSuspended {
                    turn_id: cp.turn_id.clone(),
                    token: pending.token.clone(),
                }),
            )
            .await;
            return None;
        }
        match decided {
            Ok(decision) => Some(self.apply_decision(cp, sink, decision, cancel).await),
            Err(status) => {
                cp.pending = None;
                Some(StepOutcome::Finished(finish(
                    pb::FinalKind::Error,
                    format!(
                        "the approval service could not be asked ({:?}): {}",
                        status.code(),
                        status.message()
                    ),
                )))
            }
        }
    }

    /// Applies a decided approval to the pending call.
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
        self.emit(
            sink,
            pb::turn_event::Event::ApprovalDecided(pb::ApprovalDecided {
                step: pending.step,
                token: pending.token.clone(),
                status: status as i32,
            }),
        )
        .await;
        let index = pending.step as usize - 1;
        let mut log = cp.steps.get(index).cloned().unwrap_or_default();
        cp.steps.truncate(index);
        let started = Instant::now();
        let decision_name = match status {
            approval::ApprovalStatus::Approved => "approved",
            approval::ApprovalStatus::Rejected => "rejected",
            approval::ApprovalStatus::Expired => "expired",
            approval::ApprovalStatus::Cancelled => "cancelled",
            _ => "unknown",
        };
        log.approval_decision = Some(decision_name.to_owned());
        let observation = match status {
            approval::ApprovalStatus::Approved => {
                // Exactly the call the person approved, or nothing.
                let hash =
                    metnos_core::call::call_sha256(&pending.call.name, &pending.args.to_string())
                        .unwrap_or_default();
                if hash != pending.call_sha256 || hash != decision.call_sha256 {
                    refusal("the approved call does not match the call to run; nothing was done")
                } else {
                    match self.catalog.get(&pending.call.name).cloned() {
                        Some(executor) => self.execute(&executor, &pending.args, cancel).await,
                        None => refusal(format!("nonexistent executor: {}", pending.call.name)),
                    }
                }
            }
            approval::ApprovalStatus::Rejected => {
                refusal("the person rejected this call; it was not run")
            }
            approval::ApprovalStatus::Expired => {
                refusal("the approval request expired without an answer; the call was not run")
            }
            _ => refusal("the approval request was cancelled; the call was not run"),
        };
        let started_at = started
            .checked_sub(Duration::from_millis(
                u64::try_from(now_ms() - pending.started_ms).unwrap_or(0),
            ))
            .unwrap_or(started);
        self.observe(cp, sink, &pending.call, log, observation, started_at)
            .await;
        let checkpoint = serde_json::to_string(&*cp).unwrap_or_default();
        let _ = self
            .store
            .save(&cp.turn_id, State::Running, None, &checkpoint, now_ms())
            .await;
        StepOutcome::Continue
    }

    /// Ends the turn: the event, the log, the store.
    async fn close(&self, cp: &mut Checkpoint, sink: &Sink, outcome: Finish) {
        let latency_ms = u64::try_from(now_ms() - cp.started_ms).unwrap_or(0);
        let kind_name = match outcome.kind {
            pb::FinalKind::Answer => "answer",
            pb::FinalKind::CapSteps => "cap_steps",
            pb::FinalKind::CapSameExecutor => "cap_same_executor",
            pb::FinalKind::Cancelled => "cancelled",
            pb::FinalKind::Timeout => "timeout",
            _ => "error",
        };
        let record = json!({
            "turn_id": cp.turn_id,
            "principal": {"channel": cp.channel, "sender_id": cp.sender_id},
            "level": common::AutonomyLevel::try_from(cp.level).map(|l| l.as_str_name()).unwrap_or("AUTONOMY_LEVEL_UNSPECIFIED"),
            "mode": cp.mode,
            "tiers": cp.tiers_used,
            "models": cp.models,
            "steps": cp.steps,
            "final_kind": kind_name,
            "latency_ms": latency_ms,
            "active_ms": cp.active_ms,
            "usage": {"prompt_tokens": cp.prompt_tokens, "completion_tokens": cp.completion_tokens},
            "started_at": metnos_kit::time::rfc3339(cp.started_ms),
            "ended_at": metnos_kit::time::rfc3339(now_ms()),
        });
        self.log.append(&record, now_ms());
        if let Err(e) = self
            .store
            .finish(&cp.turn_id, &record.to_string(), now_ms())
            .await
        {
            tracing::warn!(error = %e, "cannot record the finished turn in the store");
        }
        tracing::info!(
            final_kind = kind_name,
            latency_ms,
            steps = cp.steps.len(),
            "turn finished"
        );
        self.emit(
            sink,
            pb::turn_event::Event::Finished(pb::TurnFinished {
                turn_id: cp.turn_id.clone(),
                kind: outcome.kind as i32,
                text: outcome.text,
                latency_ms,
                usage: Some(pb::TokenUsage {
                    prompt_tokens: cp.prompt_tokens,
                    completion_tokens: cp.completion_tokens,
                }),
            }),
        )
        .await;
    }
}

fn to_messages(history: &[Hist]) -> Vec<Message> {
    history
        .iter()
        .map(|h| match h {
            Hist::User { text } => Message::User(text.clone()),
            Hist::Assistant { text, calls } => Message::Assistant {
                text: text.clone(),
                tool_calls: calls
                    .iter()
                    .map(|c| ToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    })
                    .collect(),
            },
            Hist::Tool {
                call_id,
                name,
                content,
            } => Message::ToolResult {
                call_id: call_id.clone(),
                name: name.clone(),
                content: content.clone(),
            },
        })
        .collect()
}
