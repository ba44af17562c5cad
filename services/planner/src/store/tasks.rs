//! The scheduler's tables: its tasks (builtin maintenance and people's standing orders)
//! and their runs, SQLite or PostgreSQL. Every claim is a conditional UPDATE, so a slot
//! fires once across ticks, replicas and restarts ([`crate::proactive::scheduler`]).

use metnos_core::level::AutonomyLevel;
use metnos_kit::on_db;
use metnos_kit::store::Db;
use sqlx::Row;

use crate::schedule::Schedule;

/// The id of a builtin maintenance task: `builtin:<name>`.
pub const BUILTIN_PREFIX: &str = "builtin:";

/// The most of a task's output kept with its run.
pub const OUTPUT_BYTES: usize = 4096;

/// A closed set stored and shown as words: `as_str` for the store and the contract,
/// `parse` at the store's boundary (a word it does not know is an error naming it).
macro_rules! words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Result<$name, UnknownWord> {
                match text {
                    $($text => Ok($name::$variant),)+
                    other => Err(UnknownWord { what: stringify!($name), word: other.chars().take(32).collect() }),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

/// A word a closed set does not hold (a store written by something else).
#[derive(Debug, thiserror::Error)]
#[error("unknown {what} `{word}`")]
pub struct UnknownWord {
    what: &'static str,
    word: String,
}

words! {
    /// Whether a task fires.
    TaskState { Active => "active", Paused => "paused" }
}

words! {
    /// When a standing order's person is told: every firing, or only when its result
    /// differs from the last.
    Notify { Always => "always", OnChange => "on_change" }
}

words! {
    /// How a run stands.
    RunStatus { Running => "running", Ok => "ok", Error => "error" }
}

/// `text` parsed as a word of a closed set, as a column decode error naming it.
fn word<T>(
    column: &str,
    text: &str,
    parse: fn(&str) -> Result<T, UnknownWord>,
) -> Result<T, sqlx::Error> {
    parse(text).map_err(|e| sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: Box::new(e),
    })
}

/// What a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A builtin maintenance task: no person, no model, never deferred.
    Maintenance,
    /// A person's standing order: a turn as that person at their level.
    Standing,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Maintenance => "maintenance",
            Kind::Standing => "standing",
        }
    }

    fn parse(text: &str) -> Kind {
        match text {
            "maintenance" => Kind::Maintenance,
            _ => Kind::Standing,
        }
    }
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub id: String,
    pub kind: Kind,
    pub name: String,
    /// The person of a standing order (empty for maintenance).
    pub channel: String,
    pub sender_id: String,
    pub schedule: String,
    /// When the schedule was made: the `every` form counts from it.
    pub anchor_at: i64,
    /// A standing order's request, in the person's words.
    pub query: String,
    /// A standing order's autonomy level (none for maintenance).
    pub level: Option<AutonomyLevel>,
    pub notify: Notify,
    pub state: TaskState,
    /// The slot it owes next (-1: never again).
    pub next_run_at: i64,
    /// When that slot may run (its end of a protected window when deferred).
    pub due_at: i64,
    pub deferred: bool,
    pub last_run_at: Option<i64>,
    pub last_status: Option<String>,
    pub last_output: Option<String>,
    pub last_digest: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Task {
    /// The person's key in `[telos]` (`<channel>:<sender>`); empty for maintenance.
    pub fn person_key(&self) -> String {
        if self.kind == Kind::Maintenance {
            String::new()
        } else {
            format!("{}:{}", self.channel, self.sender_id)
        }
    }
}

/// A new task.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub id: String,
    pub kind: Kind,
    pub name: String,
    pub channel: String,
    pub sender_id: String,
    pub schedule: String,
    pub query: String,
    pub level: Option<AutonomyLevel>,
    pub notify: Notify,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub id: i64,
    pub task_id: String,
    pub slot_at: i64,
    pub in_cadence: bool,
    pub replica: String,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub status: RunStatus,
    pub output: Option<String>,
}

const TASK_COLUMNS: &str = "id, kind, name, channel, sender_id, schedule, anchor_at, query, level, \
     notify, state, next_run_at, due_at, deferred, last_run_at, last_status, last_output, \
     last_digest, created_at, updated_at";

fn task_from_row<R: Row>(row: &R) -> Result<Task, sqlx::Error>
where
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database>,
    for<'r> Option<i64>: sqlx::Decode<'r, R::Database>,
{
    Ok(Task {
        id: row.try_get("id")?,
        kind: Kind::parse(&row.try_get::<String, _>("kind")?),
        name: row.try_get("name")?,
        channel: row.try_get("channel")?,
        sender_id: row.try_get("sender_id")?,
        schedule: row.try_get("schedule")?,
        anchor_at: row.try_get("anchor_at")?,
        query: row.try_get("query")?,
        level: match row.try_get::<String, _>("level")?.as_str() {
            "" => None,
            level => Some(
                AutonomyLevel::parse(level).map_err(|e| sqlx::Error::ColumnDecode {
                    index: "level".to_owned(),
                    source: Box::new(e),
                })?,
            ),
        },
        notify: word(
            "notify",
            &row.try_get::<String, _>("notify")?,
            Notify::parse,
        )?,
        state: word(
            "state",
            &row.try_get::<String, _>("state")?,
            TaskState::parse,
        )?,
        next_run_at: row.try_get("next_run_at")?,
        due_at: row.try_get("due_at")?,
        deferred: row.try_get::<i64, _>("deferred")? != 0,
        last_run_at: row.try_get("last_run_at")?,
        last_status: row.try_get("last_status")?,
        last_output: row.try_get("last_output")?,
        last_digest: row.try_get("last_digest")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// The rows that read as tasks. One that does not (a word this version does not know) is
/// logged and left out, so it never holds the others back.
fn readable<R: Row>(rows: &[R]) -> Vec<Task>
where
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database>,
    for<'r> Option<i64>: sqlx::Decode<'r, R::Database>,
{
    rows.iter()
        .filter_map(|row| match task_from_row(row) {
            Ok(task) => Some(task),
            Err(e) => {
                let id: String = row.try_get("id").unwrap_or_default();
                tracing::warn!(task = %id, error = %e, "a task cannot be read; it is left out");
                None
            }
        })
        .collect()
}

fn run_from_row<R: Row>(row: &R) -> Result<Run, sqlx::Error>
where
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database>,
    for<'r> Option<i64>: sqlx::Decode<'r, R::Database>,
{
    Ok(Run {
        id: row.try_get("id")?,
        task_id: row.try_get("task_id")?,
        slot_at: row.try_get("slot_at")?,
        in_cadence: row.try_get::<i64, _>("in_cadence")? != 0,
        replica: row.try_get("replica")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        status: word(
            "status",
            &row.try_get::<String, _>("status")?,
            RunStatus::parse,
        )?,
        output: row.try_get("output")?,
    })
}

/// The next slot of `schedule` after `after_ms` (-1: never again) and when it is due.
pub(crate) fn next_slot(
    schedule: &Schedule,
    after_ms: i64,
    anchor_at: i64,
    zone: &jiff::tz::TimeZone,
) -> (i64, i64) {
    match schedule.next_after(after_ms, anchor_at, zone) {
        Some(next) => (next, next),
        None => (-1, i64::MAX),
    }
}

/// A run's end, as [`TaskStore::finish`] writes it.
#[derive(Debug, Clone, Copy)]
pub struct RunEnd<'a> {
    pub run_id: i64,
    pub task_id: &'a str,
    /// When it was claimed (the task's `last_run_at`).
    pub started_at: i64,
    pub status: RunStatus,
    pub output: &'a str,
    /// For an `on_change` order: the result's digest.
    pub digest: Option<&'a str>,
}

/// One firing to claim: the task as read, and where its schedule goes next.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    pub task: &'a Task,
    pub next: i64,
    pub next_due: i64,
    pub in_cadence: bool,
}

/// The tasks and runs tables.
#[derive(Debug, Clone)]
pub struct TaskStore {
    db: Db,
}

impl TaskStore {
    pub fn new(db: Db) -> TaskStore {
        TaskStore { db }
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Adds a task whose first slot is `first_slot` (-1: never). `false` when the id is
    /// taken.
    pub async fn insert(
        &self,
        task: &NewTask,
        first_slot: i64,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        self.insert_anchored(task, first_slot, now_ms, now_ms).await
    }

    /// As [`TaskStore::insert`], an `every N` schedule counted from `anchor_ms`.
    pub async fn insert_anchored(
        &self,
        task: &NewTask,
        first_slot: i64,
        anchor_ms: i64,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let due = if first_slot < 0 { i64::MAX } else { first_slot };
        let sql = "INSERT INTO tasks (id, kind, name, channel, sender_id, schedule, anchor_at, query, \
                   level, notify, state, next_run_at, due_at, deferred, created_at, updated_at) \
                   VALUES ($1, $2, $3, $4, $5, $6, $13, $8, $9, $10, 'active', $11, $12, 0, $7, $7) \
                   ON CONFLICT (id) DO NOTHING";
        on_db!(&self.db, pool => {
            let done = sqlx::query(sql)
                .bind(&task.id)
                .bind(task.kind.as_str())
                .bind(&task.name)
                .bind(&task.channel)
                .bind(&task.sender_id)
                .bind(&task.schedule)
                .bind(now_ms)
                .bind(&task.query)
                .bind(task.level.map_or("", AutonomyLevel::as_str))
                .bind(task.notify.as_str())
                .bind(first_slot)
                .bind(due)
                .bind(anchor_ms)
                .execute(pool)
                .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// Puts a builtin task in place: added when missing, its schedule replaced (and its
    /// next slot with it) when the code changed it; otherwise left as it is.
    pub async fn ensure_builtin(
        &self,
        name: &str,
        schedule: &Schedule,
        zone: &jiff::tz::TimeZone,
        now_ms: i64,
    ) -> Result<(), sqlx::Error> {
        let id = format!("{BUILTIN_PREFIX}{name}");
        let (next, due) = next_slot(schedule, now_ms, now_ms, zone);
        let task = NewTask {
            id: id.clone(),
            kind: Kind::Maintenance,
            name: name.to_owned(),
            channel: String::new(),
            sender_id: String::new(),
            schedule: schedule.text().to_owned(),
            query: String::new(),
            level: None,
            notify: Notify::Always,
        };
        if self.insert(&task, next, now_ms).await? {
            return Ok(());
        }
        let sql = "UPDATE tasks SET schedule = $2, anchor_at = $3, next_run_at = $4, due_at = $5, \
                   deferred = 0, updated_at = $3 WHERE id = $1 AND schedule <> $2";
        on_db!(&self.db, pool => {
            sqlx::query(sql)
                .bind(&id)
                .bind(schedule.text())
                .bind(now_ms)
                .bind(next)
                .bind(due)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    pub async fn get(&self, id: &str) -> Result<Option<Task>, sqlx::Error> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1");
        on_db!(&self.db, pool => {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(pool).await?;
            row.as_ref().map(task_from_row).transpose()
        })
    }

    /// Every task, or a person's (`Some((channel, sender))`), oldest first.
    pub async fn list(&self, person: Option<(&str, &str)>) -> Result<Vec<Task>, sqlx::Error> {
        on_db!(&self.db, pool => {
            let rows = match person {
                Some((channel, sender)) => {
                    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE channel = $1 AND sender_id = $2 ORDER BY created_at, id");
                    sqlx::query(sqlx::AssertSqlSafe(sql)).bind(channel).bind(sender).fetch_all(pool).await?
                }
                None => {
                    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks ORDER BY created_at, id");
                    sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?
                }
            };
            Ok(readable(&rows))
        })
    }

    /// Active tasks due at `now_ms`, the longest waiting first; maintenance tasks only
    /// unless `standing` (standing orders off must not fill a tick and starve them).
    pub async fn due(
        &self,
        now_ms: i64,
        limit: u32,
        standing: bool,
    ) -> Result<Vec<Task>, sqlx::Error> {
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE state = 'active' AND due_at <= $1 \
             AND (kind = 'maintenance' OR $3 = 1) ORDER BY due_at, id LIMIT $2"
        );
        on_db!(&self.db, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now_ms).bind(i64::from(limit)).bind(i64::from(standing)).fetch_all(pool).await?;
            Ok(readable(&rows))
        })
    }

    /// Defers `task`'s owed slot to `open_at` (the end of a protected window). `false`
    /// when another tick changed the task first.
    pub async fn defer(&self, task: &Task, open_at: i64, now_ms: i64) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE tasks SET due_at = $4, deferred = 1, updated_at = $5 \
                   WHERE id = $1 AND state = 'active' AND next_run_at = $2 AND due_at = $3";
        on_db!(&self.db, pool => {
            let done = sqlx::query(sql)
                .bind(&task.id)
                .bind(task.next_run_at)
                .bind(task.due_at)
                .bind(open_at)
                .bind(now_ms)
                .execute(pool)
                .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// Claims each task's owed slot for this replica, in one transaction: a task whose
    /// slot is still the one read moves on to its `next` slot (due at `next_due`) and gets
    /// a run row. Returns the run ids, `None` for each task another tick or replica claimed
    /// first (or paused, deleted or changed meanwhile).
    pub async fn claim_all(
        &self,
        claims: &[Claim<'_>],
        replica: &str,
        now_ms: i64,
    ) -> Result<Vec<Option<i64>>, sqlx::Error> {
        let update = "UPDATE tasks SET next_run_at = $4, due_at = $5, deferred = 0, last_run_at = $6, \
                      last_status = 'running', updated_at = $6 \
                      WHERE id = $1 AND state = 'active' AND next_run_at = $2 AND due_at = $3";
        // A slot that already has its run (a clock stepped back) moves on without one: never
        // an error that would hold every other task.
        let insert = "INSERT INTO runs (task_id, slot_at, in_cadence, replica, started_at, status) \
                      VALUES ($1, $2, $3, $4, $5, 'running') \
                      ON CONFLICT (task_id, slot_at) DO NOTHING RETURNING id";
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        // Rows locked in one order by every replica: no deadlock between two ticks.
        let mut order: Vec<usize> = (0..claims.len()).collect();
        order.sort_by(|a, b| claims[*a].task.id.cmp(&claims[*b].task.id));
        on_db!(&self.db, pool => {
            let mut tx = pool.begin().await?;
            let mut ids = vec![None; claims.len()];
            for i in order {
                let claim = &claims[i];
                let task = claim.task;
                let moved = sqlx::query(update)
                    .bind(&task.id)
                    .bind(task.next_run_at)
                    .bind(task.due_at)
                    .bind(claim.next)
                    .bind(claim.next_due)
                    .bind(now_ms)
                    .execute(&mut *tx)
                    .await?;
                if moved.rows_affected() != 1 {
                    continue;
                }
                let row = sqlx::query(insert)
                    .bind(&task.id)
                    .bind(task.next_run_at)
                    .bind(i64::from(claim.in_cadence))
                    .bind(replica)
                    .bind(now_ms)
                    .fetch_optional(&mut *tx)
                    .await?;
                ids[i] = row.map(|r| r.try_get::<i64, _>(0)).transpose()?;
            }
            tx.commit().await?;
            Ok(ids)
        })
    }

    /// Writes a run's end, and the task's last status and output when this is its newest
    /// run. `digest` (for `on_change` orders) is kept only with an `ok`.
    pub async fn finish(&self, end: &RunEnd<'_>, now_ms: i64) -> Result<(), sqlx::Error> {
        let RunEnd {
            run_id,
            task_id,
            started_at,
            status,
            output,
            digest,
        } = *end;
        let output = clip(output, OUTPUT_BYTES);
        let run = "UPDATE runs SET finished_at = $2, status = $3, output = $4 WHERE id = $1 AND finished_at IS NULL";
        let task = "UPDATE tasks SET last_status = $3, last_output = $4, \
                    last_digest = COALESCE($5, last_digest), updated_at = $6 \
                    WHERE id = $1 AND last_run_at = $2";
        on_db!(&self.db, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(run).bind(run_id).bind(now_ms).bind(status.as_str()).bind(output).execute(&mut *tx).await?;
            sqlx::query(task)
                .bind(task_id)
                .bind(started_at)
                .bind(status.as_str())
                .bind(output)
                .bind(digest)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Stops a task whose stored schedule cannot be read any more: paused, with why.
    pub async fn mark_broken(
        &self,
        task: &Task,
        why: &str,
        now_ms: i64,
    ) -> Result<(), sqlx::Error> {
        let sql = "UPDATE tasks SET state = 'paused', last_status = 'error', last_output = $2, \
                   updated_at = $3 WHERE id = $1";
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(&task.id).bind(clip(why, OUTPUT_BYTES)).bind(now_ms).execute(pool).await?;
        });
        Ok(())
    }

    /// A task's runs, newest first.
    pub async fn runs(&self, task_id: &str, limit: u32) -> Result<Vec<Run>, sqlx::Error> {
        let sql = "SELECT id, task_id, slot_at, in_cadence, replica, started_at, finished_at, status, output \
                   FROM runs WHERE task_id = $1 ORDER BY started_at DESC, id DESC LIMIT $2";
        on_db!(&self.db, pool => {
            let rows = sqlx::query(sql).bind(task_id).bind(i64::from(limit)).fetch_all(pool).await?;
            rows.iter().map(run_from_row).collect()
        })
    }

    /// Pauses (`active = false`) or resumes a task. A resumed task owes its next slot
    /// after `now_ms` (`next`, `next_due`): slots missed while paused never fire. `false`
    /// when there is no such task.
    pub async fn set_active(
        &self,
        id: &str,
        active: bool,
        next: i64,
        next_due: i64,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        on_db!(&self.db, pool => {
            let done = if active {
                sqlx::query("UPDATE tasks SET state = 'active', next_run_at = $2, due_at = $3, deferred = 0, updated_at = $4 WHERE id = $1")
                    .bind(id).bind(next).bind(next_due).bind(now_ms).execute(pool).await?
            } else {
                sqlx::query("UPDATE tasks SET state = 'paused', updated_at = $2 WHERE id = $1")
                    .bind(id).bind(now_ms).execute(pool).await?
            };
            Ok(done.rows_affected() == 1)
        })
    }

    /// Makes an active task due now (its cadence goes on after). `false` when there is no
    /// such active task.
    pub async fn run_now(&self, id: &str, now_ms: i64) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE tasks SET next_run_at = $2, due_at = $2, deferred = 0, updated_at = $2 \
                   WHERE id = $1 AND state = 'active'";
        on_db!(&self.db, pool => {
            let done = sqlx::query(sql).bind(id).bind(now_ms).execute(pool).await?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// How many standing orders `channel:sender` has.
    pub async fn count_of(&self, channel: &str, sender: &str) -> Result<i64, sqlx::Error> {
        let sql = "SELECT COUNT(*) FROM tasks WHERE kind = 'standing' AND channel = $1 AND sender_id = $2";
        on_db!(&self.db, pool => {
            let row = sqlx::query(sql).bind(channel).bind(sender).fetch_one(pool).await?;
            row.try_get::<i64, _>(0)
        })
    }

    /// Deletes a task (its runs stay). `false` when there was none.
    pub async fn delete(&self, id: &str) -> Result<bool, sqlx::Error> {
        on_db!(&self.db, pool => {
            let done = sqlx::query("DELETE FROM tasks WHERE id = $1").bind(id).execute(pool).await?;
            Ok(done.rows_affected() == 1)
        })
    }
}

/// `text` cut to at most `max` bytes on a character boundary.
fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
