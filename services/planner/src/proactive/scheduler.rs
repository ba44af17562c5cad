//! The builtin scheduler (seed agent_runtime.md ch. 11.2): a builtin of the planner, not an
//! executor. Every tick it looks for due tasks in the planner's store — maintenance tasks
//! and the standing orders people approved — and fires each once:
//!
//! - **once per slot**: a firing is claimed by a conditional UPDATE that moves the task's
//!   owed slot on (`next_run_at` must still be the one read), so two ticks, two replicas on
//!   one PostgreSQL or a restart inside one slot run it once;
//! - **missed slots run once**: after downtime the next slot is counted from now, not from
//!   the missed one;
//! - **the loop never falls**: a task that fails or panics is recorded `error` with its
//!   message, and the others go on;
//! - **protected windows by code**: a standing order due inside its person's protected
//!   window (`[telos] protected_windows`, their time zone) is deferred to the window's end
//!   without any model call; it then fires once, out of its cadence.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use metnos_kit::clock::Clock;
use metnos_kit::config::TelosConfig;
use tokio::task::JoinHandle;

use crate::schedule::Schedule;
use crate::store::tasks::next_slot;
pub use crate::store::tasks::{
    BUILTIN_PREFIX, Claim, Kind, NewTask, Notify, OUTPUT_BYTES, Run, RunEnd, RunStatus, Task,
    TaskState, TaskStore, UnknownWord,
};

/// The most tasks one tick fires (the rest are due at the next).
pub const TICK_LIMIT: u32 = 1000;

/// Firings later than this after their slot are out of their cadence (the planner was
/// down, or the slot fell in a protected window).
const LATE_MS: i64 = 5 * 60_000;

/// One firing, as a job sees it.
#[derive(Debug, Clone)]
pub struct Firing {
    pub task: Task,
    /// The slot it fires for.
    pub slot_at: i64,
    pub now_ms: i64,
    /// In its agreed cadence: on time, not deferred by a window nor late after downtime.
    pub in_cadence: bool,
    pub run_id: i64,
}

/// A firing that ran: its output (kept with the run) and, for an `on_change` standing
/// order, the digest of its result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Done {
    pub output: String,
    pub digest: Option<String>,
}

impl From<String> for Done {
    fn from(output: String) -> Done {
        Done {
            output,
            digest: None,
        }
    }
}

/// Why a firing failed, as kept with its run (each job has its own error enum).
pub type JobError = Box<dyn std::error::Error + Send + Sync>;

/// What a firing does. `Err` is its error, kept with the run.
#[tonic::async_trait]
pub trait Job: Send + Sync + Debug {
    async fn run(&self, firing: &Firing) -> Result<Done, JobError>;
}

/// A builtin job: its task's name and schedule.
pub trait Builtin: Job + 'static {
    const NAME: &'static str;
    const SCHEDULE: &'static str;
}

/// What one tick did.
#[derive(Debug, Default)]
pub struct Tick {
    /// `(task id, slot)` of each firing this tick claimed.
    pub fired: Vec<(String, i64)>,
    /// Standing orders deferred to the end of a protected window: `(task id, until)`.
    pub deferred: Vec<(String, i64)>,
    /// The firings' tasks: they run on after the tick returns.
    running: Vec<JoinHandle<()>>,
}

impl Tick {
    /// Waits until every firing of this tick has run and been recorded.
    pub async fn finished(self) {
        for handle in self.running {
            let _ = handle.await;
        }
    }
}

/// Builtin tasks by name: their schedule and job.
type Jobs = HashMap<String, (Schedule, Arc<dyn Job>)>;

/// The approval-fatigue settings: approvals, days.
#[derive(Debug, Clone, Copy)]
pub struct Fatigue {
    pub approvals: u32,
    pub days: u32,
}

/// The scheduler: the tasks in the store, the jobs that run them.
#[derive(Debug, Clone)]
pub struct Scheduler {
    pub store: TaskStore,
    clock: Arc<dyn Clock>,
    replica: String,
    telos: Arc<TelosConfig>,
    /// Builtin tasks by name, with their schedules.
    jobs: Arc<Jobs>,
    /// Whether the builtin tasks are in the store (put there by the first tick).
    ensured: Arc<std::sync::atomic::AtomicBool>,
    /// What runs a standing order; none: standing orders are due but not fired.
    standing: Option<Arc<dyn Job>>,
    /// Standing orders: the least minutes between firings, the most per person.
    limits: (u32, u32),
    /// Approval fatigue: approvals, days.
    pub fatigue: Fatigue,
}

impl Scheduler {
    pub fn new(
        store: TaskStore,
        clock: Arc<dyn Clock>,
        replica: impl Into<String>,
        telos: TelosConfig,
    ) -> Scheduler {
        Scheduler {
            store,
            clock,
            replica: replica.into(),
            telos: Arc::new(telos),
            jobs: Arc::new(HashMap::new()),
            ensured: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            standing: None,
            limits: (15, 20),
            fatigue: Fatigue {
                approvals: 3,
                days: 7,
            },
        }
    }

    /// Adds a builtin task, `name` on `schedule` (put in the store by the next tick).
    pub fn builtin(
        mut self,
        name: &str,
        schedule: &str,
        job: Arc<dyn Job>,
    ) -> Result<Scheduler, BadBuiltin> {
        let parsed = Schedule::parse(schedule).map_err(|e| BadBuiltin {
            name: name.to_owned(),
            error: e.to_string(),
        })?;
        Arc::make_mut(&mut self.jobs).insert(name.to_owned(), (parsed, job));
        self.ensured = Arc::new(std::sync::atomic::AtomicBool::new(false));
        Ok(self)
    }

    /// Adds the builtin job `job` as its type names it.
    pub fn with<J: Builtin>(self, job: J) -> Result<Scheduler, BadBuiltin> {
        self.builtin(J::NAME, J::SCHEDULE, Arc::new(job))
    }

    /// Puts the builtin tasks in the store (once per process; again after a failure).
    pub async fn ensure_builtins(&self) -> Result<(), sqlx::Error> {
        use std::sync::atomic::Ordering;
        if self.ensured.load(Ordering::Acquire) {
            return Ok(());
        }
        let zone = self.telos.local_for("").zone;
        let now = self.clock.now_ms();
        for (name, (schedule, _)) in self.jobs.iter() {
            self.store
                .ensure_builtin(name, schedule, &zone, now)
                .await?;
        }
        self.ensured.store(true, Ordering::Release);
        Ok(())
    }

    /// Sets what runs standing orders.
    pub fn with_standing(mut self, job: Arc<dyn Job>) -> Scheduler {
        self.standing = Some(job);
        self
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Sets the limits on standing orders (`[scheduler]`).
    pub fn with_limits(mut self, min_interval_minutes: u32, max_per_person: u32) -> Scheduler {
        self.limits = (min_interval_minutes.max(1), max_per_person);
        self
    }

    /// `text` as a standing order's schedule for `person` (`<channel>:<sender>`): readable,
    /// firing at all, and never more often than the least interval.
    pub fn check(&self, text: &str, person: &str) -> Result<Schedule, ScheduleError> {
        let schedule = Schedule::parse(text).map_err(ScheduleError::Unreadable)?;
        let now = self.clock.now_ms();
        let zone = self.local_for(person).zone;
        let next = schedule.upcoming(now, now, &zone, 10);
        if next.is_empty() {
            return Err(ScheduleError::Never(schedule.text().to_owned()));
        }
        let min = self.limits.0;
        if let Some(gap) = schedule.min_gap_ms(now, now, &zone, 10)
            && gap < i64::from(min) * 60_000
        {
            return Err(ScheduleError::TooOften {
                schedule: schedule.text().to_owned(),
                every: gap / 60_000,
                min,
            });
        }
        Ok(schedule)
    }

    /// Adds a standing order the person agreed to (their card, or the owner's own
    /// terminal).
    pub async fn create(&self, order: &Order<'_>) -> Result<Task, ScheduleError> {
        self.create_with_id(order, format!("so-{}", metnos_kit::random::hex(6)))
            .await
    }

    /// As [`Scheduler::create`], for the card approved under `token`: its id comes from the
    /// token, so the same decision applied twice (a retry, another replica) makes one.
    pub async fn create_as(&self, order: &Order<'_>, token: &str) -> Result<Task, ScheduleError> {
        use sha2::{Digest, Sha256};
        let id = format!(
            "so-{}",
            &hex::encode(Sha256::digest(token.as_bytes()))[..12]
        );
        if let Some(task) = self.store.get(&id).await?
            && task.channel == order.person.channel()
            && task.sender_id == order.person.sender_id()
        {
            return Ok(task);
        }
        self.create_with_id(order, id).await
    }

    async fn create_with_id(&self, order: &Order<'_>, id: String) -> Result<Task, ScheduleError> {
        let person = order.person;
        let key = person.to_string();
        let schedule = self.check(order.schedule, &key)?;
        let query = order.query.trim();
        if query.is_empty() {
            return Err(ScheduleError::EmptyQuery);
        }
        visible(order.query, order.name)?;
        let notify = match order.notify {
            "" => Notify::Always,
            other => Notify::parse(other)
                .map_err(|_| ScheduleError::BadNotify(other.chars().take(32).collect()))?,
        };
        let max = self.limits.1;
        if self
            .store
            .count_of(person.channel(), person.sender_id())
            .await?
            >= i64::from(max)
        {
            return Err(ScheduleError::TooMany { person: key, max });
        }
        let name: String = if order.name.trim().is_empty() {
            query
        } else {
            order.name.trim()
        }
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(NAME_CHARS)
        .collect();
        let task = NewTask {
            id,
            kind: Kind::Standing,
            name,
            channel: person.channel().to_owned(),
            sender_id: person.sender_id().to_owned(),
            schedule: schedule.text().to_owned(),
            query: query.to_owned(),
            level: Some(order.level),
            notify,
        };
        let now = self.clock.now_ms();
        // `every N` counts from when its card was shown (what the card's next firings were
        // computed from), at most a day back; else from now.
        let anchor = order
            .anchor_ms
            .filter(|a| *a <= now && now - a <= 86_400_000)
            .unwrap_or(now);
        let (first, _) = next_slot(&schedule, now, anchor, &self.local_for(&key).zone);
        if !self
            .store
            .insert_anchored(&task, first, anchor, now)
            .await?
        {
            return Err(ScheduleError::Taken(task.id));
        }
        tracing::info!(task = %task.id, person = %key, "a standing order was set up");
        self.get(&task.id).await
    }

    pub async fn get(&self, id: &str) -> Result<Task, ScheduleError> {
        self.store
            .get(id)
            .await?
            .ok_or_else(|| ScheduleError::NotFound(id.chars().take(64).collect()))
    }

    /// Pauses or resumes `id`; a resumed task owes its next slot after now.
    pub async fn set_active(&self, id: &str, active: bool) -> Result<Task, ScheduleError> {
        let task = self.get(id).await?;
        if (task.state == TaskState::Active) == active {
            // Already so: a slot it owes (or one a window deferred) is kept.
            return Ok(task);
        }
        let now = self.clock.now_ms();
        let (next, due) = match Schedule::parse(&task.schedule) {
            Ok(schedule) => next_slot(
                &schedule,
                now,
                task.anchor_at,
                &self.local_for(&task.person_key()).zone,
            ),
            Err(why) if active => return Err(ScheduleError::Unreadable(why)),
            Err(_) => (task.next_run_at, task.due_at),
        };
        if !self.store.set_active(id, active, next, due, now).await? {
            return Err(ScheduleError::NotFound(id.chars().take(64).collect()));
        }
        self.get(id).await
    }

    /// Deletes a standing order.
    pub async fn delete(&self, id: &str) -> Result<(), ScheduleError> {
        let task = self.get(id).await?;
        if task.kind == Kind::Maintenance {
            return Err(ScheduleError::Builtin(task.id));
        }
        if !self.store.delete(id).await? {
            return Err(ScheduleError::NotFound(id.chars().take(64).collect()));
        }
        tracing::info!(task = %id, "a standing order was deleted");
        Ok(())
    }

    /// Fires `id` at the next tick.
    pub async fn run_now(&self, id: &str) -> Result<Task, ScheduleError> {
        let task = self.get(id).await?;
        if task.state != TaskState::Active {
            return Err(ScheduleError::Paused(task.id));
        }
        if !self.store.run_now(id, self.clock.now_ms()).await? {
            return Err(ScheduleError::Paused(task.id));
        }
        self.get(id).await
    }

    /// `task`'s next `n` firings (none when paused or unreadable).
    pub fn upcoming(&self, task: &Task, n: usize) -> Vec<i64> {
        if task.state != TaskState::Active || task.next_run_at < 0 {
            return Vec::new();
        }
        let Ok(schedule) = Schedule::parse(&task.schedule) else {
            return Vec::new();
        };
        let zone = self.local_for(&task.person_key()).zone;
        let mut out = vec![task.due_at];
        out.extend(schedule.upcoming(
            task.due_at.max(task.next_run_at),
            task.anchor_at,
            &zone,
            n.saturating_sub(1),
        ));
        out.truncate(n);
        out
    }

    /// The time zone name a task fires in (`local` for this machine's).
    pub fn zone_name(&self, task: &Task) -> String {
        let name = self.telos.time_zone_for(&task.person_key());
        if name.is_empty() {
            "local".to_owned()
        } else {
            name.to_owned()
        }
    }

    /// `person`'s calendar (`<channel>:<sender>`; empty: the default one).
    pub fn local_for(&self, person: &str) -> metnos_kit::config::Local {
        self.telos.local_for(person)
    }

    /// The first slot of a new task on `schedule` for `person`, made now.
    pub fn first_slot(&self, schedule: &Schedule, person: &str, now_ms: i64) -> (i64, i64) {
        next_slot(schedule, now_ms, now_ms, &self.local_for(person).zone)
    }

    /// Looks for due tasks and fires each once. A store that cannot be read is logged
    /// and the tick is empty: the next one tries again.
    pub async fn tick(&self) -> Tick {
        let mut tick = Tick::default();
        if let Err(e) = self.ensure_builtins().await {
            tracing::warn!(error = %e, "the scheduler cannot put its builtin tasks in its store");
        }
        let now = self.clock.now_ms();
        let due = match self
            .store
            .due(now, TICK_LIMIT, self.standing.is_some())
            .await
        {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "the scheduler cannot read its tasks");
                return tick;
            }
        };
        // Read and decided here; the claims written in one transaction.
        let mut ready = Vec::new();
        for task in due {
            match self.decide(&task, now).await {
                Ok(Decided::Fire(job, next, next_due, in_cadence)) => {
                    ready.push((task, job, next, next_due, in_cadence));
                }
                Ok(Decided::Deferred(until)) => tick.deferred.push((task.id.clone(), until)),
                Ok(Decided::Nothing) => {}
                Err(e) => {
                    tracing::warn!(task = %task.id, error = %e, "the scheduler's store failed on a task")
                }
            }
        }
        let claims: Vec<Claim<'_>> = ready
            .iter()
            .map(|(task, _, next, next_due, in_cadence)| Claim {
                task,
                next: *next,
                next_due: *next_due,
                in_cadence: *in_cadence,
            })
            .collect();
        let ids = match self.store.claim_all(&claims, &self.replica, now).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "the scheduler cannot claim its due tasks");
                return tick;
            }
        };
        for ((task, job, _, _, in_cadence), id) in ready.into_iter().zip(ids) {
            let Some(run_id) = id else { continue };
            tick.fired.push((task.id.clone(), task.next_run_at));
            let firing = Firing {
                slot_at: task.next_run_at,
                task,
                now_ms: now,
                in_cadence,
                run_id,
            };
            let store = self.store.clone();
            let clock = Arc::clone(&self.clock);
            tick.running
                .push(tokio::spawn(run_one(job, firing, store, clock)));
        }
        tick
    }

    /// What to do with a due task now.
    async fn decide(&self, task: &Task, now: i64) -> Result<Decided, sqlx::Error> {
        let schedule = match Schedule::parse(&task.schedule) {
            Ok(schedule) => schedule,
            Err(why) => {
                // Its text is the person's: kept with the task, not logged.
                tracing::warn!(task = %task.id, "a task's schedule cannot be read: paused");
                self.store.mark_broken(task, &why, now).await?;
                return Ok(Decided::Nothing);
            }
        };
        let job = match task.kind {
            Kind::Maintenance => match self.jobs.get(&task.name) {
                Some((_, job)) => Arc::clone(job),
                // A builtin this version no longer has: left alone.
                None => return Ok(Decided::Nothing),
            },
            Kind::Standing => match &self.standing {
                Some(job) => Arc::clone(job),
                None => return Ok(Decided::Nothing),
            },
        };
        let local = self.local_for(&task.person_key());
        if task.kind == Kind::Standing && local.protected(now) {
            // Decided by code, before any model: it waits for the window's end.
            let open = local.next_open(now);
            if self.store.defer(task, open, now).await? {
                tracing::info!(task = %task.id, until = %metnos_kit::time::rfc3339(open), "a standing order waits for the end of a protected window");
                return Ok(Decided::Deferred(open));
            }
            return Ok(Decided::Nothing);
        }
        // Missed slots (downtime, a window) are one firing: the next slot is after now.
        let (next, next_due) = next_slot(
            &schedule,
            now.max(task.next_run_at),
            task.anchor_at,
            &local.zone,
        );
        // In its cadence: on time, or at the end of the protected window its slot fell in
        // (the person's own window moved it; their consent to the cadence covers it). Late
        // after downtime — a slot missed before a window began included — it is not.
        let due = if task.deferred && local.protected(task.next_run_at) {
            task.due_at
        } else {
            task.next_run_at
        };
        let in_cadence = now.saturating_sub(due) <= LATE_MS;
        Ok(Decided::Fire(job, next, next_due, in_cadence))
    }
}

/// A builtin task whose schedule does not parse (a defect, caught at start).
#[derive(Debug, thiserror::Error)]
#[error("builtin task {name}: {error}")]
pub struct BadBuiltin {
    name: String,
    error: String,
}

/// Why a standing order cannot be made or changed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("{0}")]
    Unreadable(String),
    #[error(
        "`{schedule}` fires every {every} minute(s); standing orders fire at most every {min} minutes (scheduler.min_interval_minutes)"
    )]
    TooOften {
        schedule: String,
        every: i64,
        min: u32,
    },
    #[error("`{0}` never fires")]
    Never(String),
    #[error("{person} already has {max} standing orders (scheduler.max_per_person)")]
    TooMany { person: String, max: u32 },
    #[error("the request is empty")]
    EmptyQuery,
    #[error(
        "a standing order's request is at most {request} characters and its name {name} (its card shows them whole)"
    )]
    TooLong { request: usize, name: usize },
    #[error("notify is `always` or `on_change`, not `{0}`")]
    BadNotify(String),
    #[error(
        "the standing order's {0} holds invisible characters (format characters, blank fillers or Unicode tags): text a person cannot read is never stored to be fed to the model at every firing"
    )]
    Invisible(&'static str),
    #[error("no schedule `{0}`")]
    NotFound(String),
    #[error("`{0}` is a maintenance task: pause it instead")]
    Builtin(String),
    #[error("`{0}` is paused: resume it first")]
    Paused(String),
    #[error("the id `{0}` is taken; try again")]
    Taken(String),
    #[error("the scheduler's store failed")]
    Store(#[from] sqlx::Error),
}

/// Refuses a standing order's request or name holding characters a person cannot see
/// (ASCII smuggled in Unicode tags, zero-width or bidi characters, blank fillers): what
/// the card showed must be what fires.
pub fn visible(request: &str, name: &str) -> Result<(), ScheduleError> {
    if metnos_core::html::holds_invisible(request) {
        return Err(ScheduleError::Invisible("request"));
    }
    if metnos_core::html::holds_invisible(name) {
        return Err(ScheduleError::Invisible("name"));
    }
    Ok(())
}

/// A new standing order, as asked.
#[derive(Debug, Clone)]
pub struct Order<'a> {
    pub person: &'a metnos_core::principal::Principal,
    pub schedule: &'a str,
    pub query: &'a str,
    /// Empty: the query's beginning.
    pub name: &'a str,
    /// `always` (or empty) or `on_change`.
    pub notify: &'a str,
    pub level: metnos_core::level::AutonomyLevel,
    /// When an `every N` schedule counts from (its card's time); `None`: now.
    pub anchor_ms: Option<i64>,
}

/// The most characters of a name made from a query.
const NAME_CHARS: usize = 60;

/// What a tick does with one due task.
enum Decided {
    /// Fire it with this job; its next slot, when that is due, whether in cadence.
    Fire(Arc<dyn Job>, i64, i64, bool),
    /// Deferred to the end of a protected window.
    Deferred(i64),
    /// Not now (unreadable and paused, no job here, or changed meanwhile).
    Nothing,
}

/// Runs one firing on a task of its own (a panic is caught there) and records its end.
async fn run_one(job: Arc<dyn Job>, firing: Firing, store: TaskStore, clock: Arc<dyn Clock>) {
    let id = firing.task.id.clone();
    let started = firing.now_ms;
    let run_id = firing.run_id;
    let span = tracing::info_span!("scheduled task", task = %id, run = run_id);
    let outcome = {
        let firing = firing.clone();
        tokio::spawn(async move { job.run(&firing).await })
    }
    .await;
    let (status, output, digest) = match outcome {
        Ok(Ok(done)) => (RunStatus::Ok, done.output, done.digest),
        Ok(Err(error)) => (RunStatus::Error, error.to_string(), None),
        Err(e) if e.is_panic() => {
            let payload = e.into_panic();
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            (RunStatus::Error, format!("panicked: {message}"), None)
        }
        Err(_) => (
            RunStatus::Error,
            "cancelled: the planner stopped".to_owned(),
            None,
        ),
    };
    {
        let _entered = span.enter();
        // Its output and error are kept with the run (`metnos schedules list`), not logged:
        // they carry what the person asked and what services said about it.
        if status == RunStatus::Ok {
            tracing::info!("a scheduled task ran");
        } else {
            tracing::warn!("a scheduled task failed");
        }
    }
    let end = RunEnd {
        run_id,
        task_id: &id,
        started_at: started,
        status,
        output: &output,
        digest: digest.as_deref(),
    };
    if let Err(e) = store.finish(&end, clock.now_ms()).await {
        tracing::warn!(task = %id, error = %e, "a scheduled task's end was not recorded");
    }
}
