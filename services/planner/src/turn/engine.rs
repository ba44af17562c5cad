//! The turn loop (seed agent_runtime.md ch. 2): pre-filter, LLM with native tools, and for
//! each proposed call the filter pipeline ([`crate::turn::vetting`]), then the executor
//! ([`crate::turn::execution`]) — or, when policy asks, a person's approval that suspends
//! the turn ([`crate::turn::suspension`]). The [`Planner`] drives the loop and owns its
//! stages; `step` is the only place a step's outcome is decided.
//!
//! A turn's whole state is a [`Checkpoint`], stored before it waits for a person, so any
//! replica can continue it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use metnos_executors::{Catalog, Runner};
use metnos_kit::config::{ConversationConfig, MemoryConfig, TurnsConfig};
use metnos_kit::time::now_ms;
use metnos_proto::planner::v1 as pb;
use tokio::sync::watch;
use tracing::Instrument;

use crate::filters::Filters;
use crate::llm::{LlmSlot, model_of, tier_used};
use crate::proactive::scheduler::Scheduler;
use crate::proactive::tools::{self as orders, Answer};
use crate::store::memories::MemoryStore;
use crate::store::mnestome::Mnestome;
use crate::store::threads::{ThreadError, ThreadStore};
use crate::store::{State, Store};
use crate::turn::asking::Asking;
use crate::turn::conversation::{self, Threading};
use crate::turn::execution::Execution;
pub use crate::turn::flow::Sink;
use crate::turn::flow::{StepOutcome, emit, refusal};
use crate::turn::prefilter::{Entry, Index};
use crate::turn::record::Records;
use crate::turn::recover::Recovery;
use crate::turn::remember::{self, Remembered};
use crate::turn::repair::Repair;
use crate::turn::rules;
use crate::turn::running::Running;
use crate::turn::scratch;
use crate::turn::summary;
use crate::turn::suspension::Suspension;
use crate::turn::synt;
use crate::turn::vetting::{Refusal, Vetting};
use crate::turn::{
    Call, Checkpoint, FinalKind, Hist, Mode, StepLog, TurnRequest, finish, mode_name, mode_to_wire,
};
use crate::turnlog::TurnLog;

/// What a planner is made of.
#[derive(Debug)]
pub struct Parts {
    pub config: TurnsConfig,
    pub default_mode: Mode,
    /// The LLM, or why there is none (every turn then ends with that error).
    pub llm: LlmSlot,
    pub catalog: Arc<Catalog>,
    pub runner: Runner,
    pub filters: Arc<dyn Filters>,
    pub store: Store,
    pub log: TurnLog,
    /// How much of a person's thread a turn sees, and when silence starts a new one.
    pub conversation: ConversationConfig,
    /// How many entries a person's long-term memory keeps.
    pub memory: MemoryConfig,
    /// The standing orders the model's tools may list, make and change (none: standing
    /// orders are off here, and the tools are not offered).
    pub orders: Option<Scheduler>,
}

/// The planner: everything a turn needs, and the turns it drives.
#[derive(Debug)]
pub struct Planner {
    config: TurnsConfig,
    default_mode: Mode,
    llm: LlmSlot,
    catalog: Arc<Catalog>,
    runner: Runner,
    filters: Arc<dyn Filters>,
    store: Store,
    log: TurnLog,
    conversation: ConversationConfig,
    memories: MemoryStore,
    mnestome: Mnestome,
    orders: Option<Scheduler>,
    index: Index,
    running: Running,
    recovery: Recovery,
}

/// The loop's stages for one use, each holding only what it uses.
#[derive(Clone, Copy)]
pub(crate) struct Stages<'a> {
    pub(crate) vetting: Vetting<'a>,
    pub(crate) execution: Execution<'a>,
    pub(crate) suspension: Suspension<'a>,
    pub(crate) asking: Asking<'a>,
    pub(crate) records: Records<'a>,
}

/// What a proposed call's name names.
enum Tool {
    /// `scratchpad_read`: this turn's large observations.
    Scratchpad,
    /// A standing-order tool ([`crate::proactive::tools`]).
    Orders,
    /// A memory tool ([`crate::turn::remember`]).
    Memory,
    /// A signed executor of the catalog.
    Executor,
    /// Nothing here: the model's own text (the log keeps `?`).
    Unknown,
}

impl Tool {
    fn of(name: &str, catalog: &Catalog) -> Tool {
        if orders::is_tool(name) {
            Tool::Orders
        } else if remember::is_tool(name) {
            Tool::Memory
        } else if name == scratch::TOOL {
            Tool::Scratchpad
        } else if catalog.get(name).is_some() {
            Tool::Executor
        } else {
            Tool::Unknown
        }
    }
}

/// The argument names the tool `name` declares: an executor's manifest, or the planner's
/// own tools (none for a name that is neither).
fn schema_keys(catalog: &Catalog, name: &str) -> Vec<String> {
    if let Some(executor) = catalog.get(name) {
        return crate::turn::schema_keys(&executor.manifest.args);
    }
    orders::tool_defs()
        .into_iter()
        .chain(remember::tool_defs())
        .chain([scratch::tool_def()])
        .find(|def| def.name == name)
        .map(|def| crate::turn::schema_keys(&def.parameters))
        .unwrap_or_default()
}

/// Whether the model asked for `call` (the same tool, the same arguments) three times or
/// more in this turn, up to this one (calls it asked for after, in the same answer, are
/// not counted against it).
fn asked_thrice(cp: &Checkpoint, call: &Call) -> bool {
    let same = |c: &&Call| c.name == call.name && c.arguments == call.arguments;
    let asked = cp
        .history
        .iter()
        .filter_map(|h| match h {
            Hist::Assistant { calls, .. } => Some(calls),
            _ => None,
        })
        .flatten()
        .filter(same)
        .count();
    // This one is out of the queue; the same calls still in it come after it.
    let after = cp.queued.iter().filter(same).count();
    asked.saturating_sub(after) >= 3
}

/// Records a refused call as its step's observation; the turn goes on unless the refusal
/// ends it.
async fn refused(
    execution: &Execution<'_>,
    cp: &mut Checkpoint,
    sink: &Sink,
    call: &Call,
    log: StepLog,
    refusal_of: Refusal,
    started: Instant,
) -> StepOutcome {
    let (why, outcome) = match refusal_of {
        Refusal::Stop(stop) => return StepOutcome::Finished(stop),
        Refusal::Refused(why) => {
            // A step policy denied: what would let Metnos do it is a permission.
            if let Some(a) = crate::turn::attempt::denied(cp, &log) {
                emit(sink, pb::turn_event::Event::Attempt(a)).await;
            }
            (why, StepOutcome::Continue)
        }
        Refusal::Unavailable {
            observation,
            finish,
        } => (observation, StepOutcome::Finished(finish)),
    };
    execution
        .observe(cp, sink, call, log, refusal(why), Vec::new(), started)
        .await;
    outcome
}

impl Planner {
    /// Tells the stream a step is proposed: the step's log, begun.
    async fn proposed(&self, cp: &Checkpoint, call: &Call, sink: &Sink, n: u32) -> StepLog {
        let tier = tier_used(&self.llm, cp.tier);
        let proposed = pb::StepProposed {
            step: n,
            executor: call.name.clone(),
            args_json: call.arguments.to_string(),
            tier: tier.as_str().to_owned(),
        };
        emit(sink, pb::turn_event::Event::StepProposed(proposed)).await;
        StepLog::new(n, call, tier, &schema_keys(&self.catalog, &call.name))
    }

    pub fn new(parts: Parts) -> Planner {
        // A mail or calendar built-in without an account is never a candidate.
        let entries: Vec<Entry> = parts
            .catalog
            .executors()
            .filter(|e| {
                metnos_executors::builtin::usable_with(&e.manifest.name, &parts.runner.accounts)
            })
            .map(|e| Entry {
                name: e.manifest.name.clone(),
                description: e.manifest.description.clone(),
                affinity: e.manifest.affinity.clone(),
            })
            .collect();
        let recovery = Recovery::new(
            parts.store.clone(),
            Arc::clone(&parts.filters),
            parts.log.clone(),
        );
        let memories = MemoryStore::new(parts.store.db().clone(), parts.memory.max_entries.get());
        let mnestome = Mnestome::new(parts.store.db().clone());
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
            conversation: parts.conversation,
            memories,
            mnestome,
            orders: parts.orders,
            running: Running::default(),
            recovery,
        }
    }

    /// The planner's store (turns, the scratchpad, the scheduler's tables).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The people's long-term memory.
    pub fn memories(&self) -> &MemoryStore {
        &self.memories
    }

    /// Which executors' outputs were piped into which (the installation's).
    pub fn mnestome(&self) -> &Mnestome {
        &self.mnestome
    }

    /// The nightly compose-only synthesis over the mnestome's recurring protos.
    pub async fn suggest_chains(&self) -> Result<Vec<synt::Suggestion>, sqlx::Error> {
        synt::suggest(&self.mnestome, &self.index).await
    }

    /// What the catalog holds of MCP servers, and each started server's standing.
    pub async fn mcp_servers(&self) -> metnos_proto::planner::v1::ListMcpServersResponse {
        use metnos_proto::planner::v1 as pb;
        let tools = self
            .catalog
            .executors()
            .filter_map(|e| {
                let pin = e.manifest.mcp.as_ref()?;
                Some(pb::McpTool {
                    server: pin.server.clone(),
                    tool: pin.tool.clone(),
                    name: e.manifest.name.clone(),
                    capabilities: e.manifest.capabilities.clone(),
                    target_arg: e.manifest.target_arg.clone().unwrap_or_default(),
                    definition_sha256: pin.definition_sha256.clone(),
                })
            })
            .collect();
        let servers = self
            .runner
            .mcp
            .states()
            .into_iter()
            .map(|s| pb::McpServerState {
                server: s.server,
                connected: s.connected,
                enabled: s.enabled,
                disabled: s
                    .disabled
                    .into_iter()
                    .map(|(t, why)| format!("{t}: {why}"))
                    .collect(),
                last_error: s.last_error.unwrap_or_default(),
                not_admitted: s.not_admitted,
            })
            .collect();
        pb::ListMcpServersResponse { tools, servers }
    }

    fn stages(&self) -> Stages<'_> {
        let records = Records::new(&self.store, &self.log);
        let execution = Execution::new(
            &self.config,
            &self.catalog,
            &self.runner,
            &self.store,
            &self.llm,
            records,
        );
        Stages {
            vetting: Vetting::new(
                &self.config,
                &self.catalog,
                &self.runner,
                self.filters.as_ref(),
                &self.store,
            ),
            execution,
            suspension: Suspension::new(
                &self.filters,
                &self.store,
                &self.catalog,
                self.orders.as_ref(),
                &self.memories,
                execution,
                records,
            ),
            asking: Asking::new(
                &self.llm,
                &self.catalog,
                &self.config,
                self.filters.as_ref(),
                &self.store,
                self.orders.is_some(),
            ),
            records,
        }
    }

    /// Renews the leases of the turns this process runs or resumes.
    pub async fn renew_leases(&self) {
        for id in self.running.ids() {
            if let Err(e) = self.store.renew(&id, now_ms()).await {
                tracing::warn!(turn_id = %id, error = %e, "cannot renew a turn's lease");
            }
        }
    }

    /// Signals a turn running here to stop; `false` if it is not running here.
    pub fn signal_cancel(&self, turn_id: &str) -> bool {
        self.running.signal_cancel(turn_id)
    }

    /// Cancels the turn `found`, wherever it runs: signalled here; ended here if it waits
    /// or its holder's lease expired; else flagged for the replica that holds it, and its
    /// approval request cancelled now, so a decision that comes later cannot run the call
    /// (the holder checks the flag again before it runs anything). `false`: it had already
    /// finished.
    pub async fn cancel_turn(
        &self,
        found: &crate::store::StoredTurn,
    ) -> Result<bool, crate::error::Error> {
        let store = &self.store;
        let turn_id = &found.turn_id;
        if found.state == State::Finished {
            return Ok(false);
        }
        store.request_cancel(turn_id).await?;
        if self.running.signal_cancel(turn_id) {
            return Ok(true);
        }
        let expired = found.lease_until < now_ms();
        let takeable =
            found.state == State::Suspended || (found.state == State::Resuming && expired);
        // One stored by a newer planner is ended by a planner of its version, which sees
        // the flag: its card is withdrawn below all the same.
        let readable = match Checkpoint::read(&found.checkpoint) {
            Err(crate::turn::CheckpointError::Newer(_)) => None,
            read => Some(read),
        };
        if let (true, Some(read)) = (takeable, readable) {
            let mut checkpoint = read?;
            let token = found.approval_token.as_deref().unwrap_or_default();
            if store
                .claim_suspended_at(turn_id, Some(token), now_ms())
                .await?
            {
                self.stages()
                    .suspension
                    .cancel_claimed(&mut checkpoint)
                    .await;
                return Ok(true);
            }
        } else if found.state == State::Running
            && expired
            && self.recovery.end_interrupted(found, false).await
        {
            return Ok(true);
        }
        if let Some(token) = &found.approval_token {
            let _ = self.filters.cancel(token, "the turn was cancelled").await;
        }
        Ok(true)
    }

    /// Cancels `person`'s unfinished turns begun before `forgot_at` that carry a thread
    /// (all of them when their `memory` went too; see [`Planner::cancel_turn`]): their
    /// conversation was forgotten, and a waiting turn's checkpoint holds its words. How
    /// many were; one that cannot be is said in the log.
    pub async fn cancel_threaded(
        &self,
        person: &metnos_core::Principal,
        forgot_at: i64,
        memory: bool,
    ) -> usize {
        let turns = match self
            .store
            .unfinished_of(person.channel(), person.sender_id())
            .await
        {
            Ok(turns) => turns,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the turns of a person who forgot their conversations");
                return 0;
            }
        };
        let mut stopped = 0;
        for turn in &turns {
            // A checkpoint that cannot be read may hold a thread too; any turn may hold
            // what it recalled of their memory. (One begun after the forget reads only
            // what is kept since.)
            let carries = Checkpoint::read(&turn.checkpoint).map_or(true, |cp| {
                (cp.thread_id.is_some() || memory) && cp.started_ms < forgot_at
            });
            if !carries {
                continue;
            }
            match self.cancel_turn(turn).await {
                Ok(true) => stopped += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(turn_id = %turn.turn_id, error = %e, "cannot stop a turn that holds a forgotten conversation")
                }
            }
        }
        stopped
    }

    /// Ends the terminal's turns whose request expired while nobody followed them (see
    /// [`Recovery::resume_expired_unfollowed`]); how many were taken up.
    pub async fn resume_expired_unfollowed(self: &Arc<Self>, grace_ms: i64) -> usize {
        let planner = Arc::clone(self);
        let resume = move |cp, sink| {
            tokio::spawn(Arc::clone(&planner).resume(cp, sink));
        };
        self.recovery
            .resume_expired_unfollowed(grace_ms, &resume)
            .await
    }

    /// Sweeps the turns whose holder's lease expired (see [`Recovery::sweep_leases`]): how
    /// many were ended, released and resumed.
    pub async fn sweep_leases(self: &Arc<Self>) -> (usize, usize, usize) {
        let planner = Arc::clone(self);
        let resume = move |cp, sink| {
            tokio::spawn(Arc::clone(&planner).resume(cp, sink));
        };
        self.recovery.sweep_leases(&resume).await
    }

    /// Whether `name` may be offered to the model: not an MCP tool its server changed since
    /// it was admitted (a mail built-in without an account is not in the index at all).
    fn offerable(&self, name: &str) -> bool {
        let pin = self.catalog.get(name).and_then(|e| e.manifest.mcp.as_ref());
        !pin.is_some_and(|p| self.runner.mcp.is_disabled(&p.server, &p.tool))
    }

    /// The pre-filter by history ([`crate::turn::history`]): before the model is asked, the
    /// offered executors are chosen anew with points for what strong passages lead to from
    /// the last executor that succeeded in this turn, and for the shortcuts the request
    /// names. Nothing to add: the offer stays. Fail-safe: the mnestome unread, the offer
    /// stays (logged).
    async fn reoffer(&self, cp: &mut Checkpoint) {
        let prefilter = crate::turn::history::Prefilter {
            mnestome: &self.mnestome,
            index: &self.index,
            max: self.config.prefilter_max.get() as usize,
            known: &|name| self.catalog.get(name).is_some(),
            offerable: &|name| self.offerable(name),
            wise: &|name| self.wise_capability(name),
        };
        prefilter.reoffer(cp).await;
    }

    /// Whether executor `name` has a capability a hybrid turn asks the wise tier for.
    fn wise_capability(&self, name: &str) -> bool {
        self.catalog.get(name).is_some_and(|e| {
            e.capabilities
                .iter()
                .any(|c| self.config.hybrid_wise_capabilities.contains(c))
        })
    }

    /// A new turn's checkpoint.
    pub fn start(&self, request: &TurnRequest) -> Checkpoint {
        let mode = rules::mode_of(request.mode, self.default_mode);
        let candidates: Vec<String> = self
            .index
            .select(&request.query, self.config.prefilter_max.get() as usize)
            .into_iter()
            .map(|c| c.name)
            .filter(|name| self.offerable(name))
            .collect();
        let wise_capability_offered = candidates.iter().any(|n| self.wise_capability(n));
        Checkpoint {
            version: crate::turn::CHECKPOINT_VERSION,
            turn_id: metnos_kit::random::hex(16),
            person: request.principal.clone(),
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
            thread_id: None,
            thread_opening: None,
            earlier: Vec::new(),
            index: crate::turn::taint::Index::default(),
            llm_ms: 0,
            repairs: Vec::new(),
            attempt: None,
        }
    }

    /// Reads the person's thread into a new turn `cp` (as `threading` says), before its
    /// message: the newest exchanges within `conversation.history_tokens`, and the summary
    /// of older ones (folded first when due: the turn pays its tokens). A thread that
    /// cannot be read leaves the turn one-shot, said in the log: the person still gets an
    /// answer.
    pub async fn attach_thread(&self, cp: &mut Checkpoint, threading: &Threading) {
        let threads = ThreadStore::new(self.store.db().clone());
        let now = now_ms();
        let idle_ms = self.conversation.idle_ms();
        let thread = match threading {
            Threading::None => return,
            Threading::Continue => threads.current(&cp.person, now, idle_ms).await,
            Threading::New => Ok(threads.start_new(&cp.person, now)),
            Threading::Older(id) => match threads.reopen(&cp.person, id, now).await {
                Err(ThreadError::NoSuchThread) => {
                    tracing::info!(turn_id = %cp.turn_id, "the thread replied to is not kept (or not theirs); the turn continues the current one");
                    threads.current(&cp.person, now, idle_ms).await
                }
                reopened => reopened,
            },
        };
        let llm = self.llm.as_ref().ok().map(|llm| llm.as_ref());
        let read = match thread {
            // A thread not written yet has nothing to read.
            Ok(thread) if thread.opening.is_some() => Ok((thread, summary::Seen::default())),
            Ok(thread) => summary::seen(
                &threads,
                llm,
                &cp.person,
                &thread.id,
                &self.conversation,
                now,
            )
            .await
            .map(|seen| (thread, seen)),
            Err(e) => Err(e),
        };
        match read {
            Ok((thread, seen)) => {
                cp.prompt_tokens += seen.usage.prompt_tokens;
                cp.completion_tokens += seen.usage.completion_tokens;
                conversation::read_in(cp, &seen);
                cp.thread_id = Some(thread.id);
                cp.thread_opening = thread.opening;
            }
            Err(e) => {
                tracing::warn!(turn_id = %cp.turn_id, error = %e, "the person's thread cannot be read; this turn is one-shot");
            }
        }
    }

    /// Runs a new turn to its end or its suspension, sending events to `sink`.
    pub async fn run(self: Arc<Self>, mut cp: Checkpoint, sink: Sink) {
        let span = tracing::info_span!("turn", turn_id = %cp.turn_id, mode = mode_name(cp.mode));
        async move {
            let live = self
                .stages()
                .records
                .record_as(&cp, "running", None)
                .to_string();
            let inserted = match serde_json::to_string(&cp) {
                Ok(checkpoint) => self
                    .store
                    .insert_turn(
                        &cp.turn_id,
                        cp.person.channel(),
                        cp.person.sender_id(),
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
                    text: crate::turn::endings::Ending::StoreDown(
                        crate::turn::endings::StoreDown::NothingDone,
                    )
                    .say(cp.language.unwrap_or(metnos_core::Language::English)),
                    ..Default::default()
                };
                emit(&sink, pb::turn_event::Event::Finished(finished)).await;
                return;
            }
            let (cancel, _registered) = self.running.register(&cp.turn_id);
            let started = pb::TurnStarted {
                turn_id: cp.turn_id.clone(),
                mode: mode_to_wire(cp.mode) as i32,
                tier: tier_used(&self.llm, cp.tier).as_str().to_owned(),
                model: model_of(&self.llm, cp.tier),
            };
            emit(&sink, pb::turn_event::Event::Started(started)).await;
            if self.forgotten_meanwhile(&cp).await {
                let text = conversation::forgotten_meanwhile_text(cp.language);
                let ended = finish(FinalKind::Cancelled, text);
                self.stages().records.close(&mut cp, &sink, ended).await;
                return;
            }
            self.drive(&mut cp, &sink, cancel, false).await;
        }
        .instrument(span)
        .await;
    }

    /// Whether the person forgot their conversations after this turn began, once it read
    /// its thread and before it was stored (where forgetting would have stopped it): it
    /// must not go on with what it read. A store that cannot say counts as yes. A turn
    /// that read nothing (one-shot, or a thread not written yet) has nothing to forget:
    /// its exchange is not written after the forget ([`ThreadStore::append`] refuses).
    async fn forgotten_meanwhile(&self, cp: &Checkpoint) -> bool {
        if cp.thread_id.is_none() || cp.thread_opening.is_some() {
            return false;
        }
        let threads = ThreadStore::new(self.store.db().clone());
        match threads.forgotten_since(&cp.person, cp.started_ms).await {
            Ok(forgotten) => forgotten,
            Err(e) => {
                tracing::warn!(turn_id = %cp.turn_id, error = %e, "cannot tell whether the person forgot their conversations; the turn stops");
                true
            }
        }
    }

    /// Continues a claimed, suspended turn: applies the decision on its pending call.
    pub async fn resume(self: Arc<Self>, mut cp: Checkpoint, sink: Sink) {
        let span = tracing::info_span!("turn", turn_id = %cp.turn_id, mode = mode_name(cp.mode), resumed = true);
        async move {
            let (cancel, _registered) = self.running.register(&cp.turn_id);
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
        let stages = self.stages();
        let outcome = loop {
            // A turn waiting unclaimed for its decision is stored suspended (nobody's).
            let waiting = cp.pending.is_some() && !claimed;
            let standing = self.store.standing(&cp.turn_id).await.ok();
            if standing.is_some_and(|s| !s.held && !waiting && !s.cancel_requested) {
                return stages.records.lost(cp, sink).await;
            }
            if *cancel.borrow() || standing.is_some_and(|s| s.cancel_requested) {
                // A waiting turn is ended by whoever claims it (only one does).
                let token = cp
                    .pending
                    .as_ref()
                    .map(|p| p.token.clone())
                    .unwrap_or_default();
                if waiting && !stages.records.claim(&cp.turn_id, &token).await {
                    return;
                }
                if let Some(p) = cp.pending.take() {
                    let _ = self
                        .filters
                        .cancel(&p.token, "the turn was cancelled")
                        .await;
                }
                break crate::turn::endings::Ending::Cancelled.finish(cp.language);
            }
            // (A turn waiting unclaimed is nobody's to end: its budget counts no waiting.)
            if !waiting && cp.active_ms >= self.config.budget_seconds.get() * 1000 {
                break crate::turn::endings::Ending::OutOfTime {
                    seconds: self.config.budget_seconds.get(),
                    waiting_llm: false,
                }
                .finish(cp.language);
            }
            if cp.pending.is_some() {
                let outcome = stages
                    .suspension
                    .await_decision(cp, sink, &mut cancel, claimed)
                    .await;
                claimed = false;
                match outcome {
                    Some(StepOutcome::Continue) => continue,
                    Some(StepOutcome::Finished(f)) => break f,
                    Some(StepOutcome::Lost) => return stages.records.lost(cp, sink).await,
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
                    StepOutcome::Lost => return stages.records.lost(cp, sink).await,
                }
            }
            let started = Instant::now();
            self.reoffer(cp).await;
            let asked = stages.asking.ask_llm(cp, &mut cancel).await;
            cp.active_ms += started.elapsed().as_millis() as u64;
            match asked {
                Ok(None) => continue,
                Ok(Some(f)) | Err(f) => break f,
            }
        };
        stages.records.close(cp, sink, outcome).await;
    }

    /// What the model is told of `call` asked for a third time with the same arguments
    /// (issue 42); `None`: it goes on. The note comes once: a model that asks again meets
    /// the seed's cap on one executor (in the vetting), which ends the turn.
    fn repeated(&self, cp: &Checkpoint, call: &Call) -> Option<String> {
        let capped = self.catalog.get(&call.name).is_some()
            && rules::over_cap_same_executor(
                &call.name,
                cp.executor_calls.get(&call.name).copied().unwrap_or(0),
                self.config.cap_same_executor.get(),
                cp.language,
            )
            .is_some();
        let noted = capped && cp.has_repaired(Repair::RepeatedCall);
        (!noted && asked_thrice(cp, call)).then(|| {
            format!(
                "you called {} with these same arguments three times in this turn: it is not run again; answer with what you have, or try another way",
                call.name.chars().take(64).collect::<String>()
            )
        })
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
        if let Some(stop) = rules::over_cap_steps(n, self.config.cap_steps.get(), cp.language) {
            return StepOutcome::Finished(stop);
        }
        let started = Instant::now();
        let mut log = self.proposed(cp, &call, sink, n).await;
        let Stages {
            vetting,
            execution,
            suspension,
            ..
        } = self.stages();
        // What the LLM was shown so far, indexed for copies (rebuilt after a resume).
        cp.index.catch_up(&cp.fence_nonce, &cp.history);
        if let Some(why) = self.repeated(cp, &call) {
            cp.repaired(Repair::RepeatedCall);
            log.validation = crate::turn::Validation::Repeated;
            execution
                .observe(cp, sink, &call, log, refusal(why), Vec::new(), started)
                .await;
            return StepOutcome::Continue;
        }
        match Tool::of(&call.name, &self.catalog) {
            Tool::Orders => {
                return match orders::answer(self.orders.as_ref(), cp, call).await {
                    Answer::Observed(call, observation) => {
                        execution
                            .observe(cp, sink, &call, log, observation, Vec::new(), started)
                            .await;
                        StepOutcome::Continue
                    }
                    Answer::Ask(call, asked) => {
                        suspension
                            .ask_approval_with(cp, sink, call, log, *asked)
                            .await
                    }
                };
            }
            Tool::Memory => {
                return match remember::answer(&self.memories, cp, call).await {
                    Remembered::Observed(call, observation, labels) => {
                        execution
                            .observe(cp, sink, &call, log, observation, labels, started)
                            .await;
                        StepOutcome::Continue
                    }
                    Remembered::Ask(call, asked) => {
                        suspension
                            .ask_approval_with(cp, sink, call, log, *asked)
                            .await
                    }
                };
            }
            Tool::Scratchpad => {
                let (observation, labels) = execution.read_scratch(cp, &call).await;
                execution
                    .observe(cp, sink, &call, log, observation, labels, started)
                    .await;
                return StepOutcome::Continue;
            }
            Tool::Unknown => {
                log.executor = "?".to_owned();
                cp.repaired(Repair::UnknownTool);
            }
            Tool::Executor => {}
        }
        let (findings, vetted) = vetting.vet(cp, &call, n, started).await;
        for e in findings.record(&mut log) {
            emit(sink, e).await;
        }
        let cleared = match vetted {
            Ok(cleared) => cleared,
            Err(Refusal::Refused(why))
                if log.validation == crate::turn::Validation::UnknownExecutor =>
            {
                let wish = synt::Wish(&self.mnestome, &self.index, &call, &log);
                let observation = wish.refused(cp, sink, why, n).await;
                execution
                    .observe(cp, sink, &call, log, observation, Vec::new(), started)
                    .await;
                return StepOutcome::Continue;
            }
            Err(why) => return refused(&execution, cp, sink, &call, log, why, started).await,
        };
        *cp.executor_calls.entry(call.name.clone()).or_insert(0) += 1;
        if let Some(capability) = cleared.approval {
            return suspension
                .ask_approval(cp, sink, call, log, &cleared, capability)
                .await;
        }
        // At the point of use: a turn cancelled (on any replica) or no longer held here
        // runs nothing more.
        match self.store.standing(&cp.turn_id).await {
            Ok(s) if s.cancel_requested => {
                return StepOutcome::Finished(
                    crate::turn::endings::Ending::Cancelled.finish(cp.language),
                );
            }
            Ok(s) if !s.held => return StepOutcome::Lost,
            _ => {}
        }
        let observation = execution
            .run_learning(cp, &call, &cleared, &log, cancel)
            .await;
        execution.note_seen(cp, &call.name, &cleared.args, n, &observation);
        let labels = execution.labels_for(cp, &call, &cleared.args, &observation);
        execution
            .observe(cp, sink, &call, log, observation, labels, started)
            .await;
        StepOutcome::Continue
    }
}
