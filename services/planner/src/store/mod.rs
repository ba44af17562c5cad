//! The planner's store: turns (checkpoint while running or suspended, log record once
//! finished) and the scratchpad. SQLite or PostgreSQL, the same SQL.

/// Ends a running turn its holder still holds, with its log record: `$1` the turn, `$2`
/// its record, `$3` now, `$4` the holder's run. A macro, so that the thread store writes
/// the same text with a turn's exchange ([`threads::ThreadStore::append_ending`]).
macro_rules! finish_turn_sql {
    () => {
        "UPDATE turns SET state = 'finished', approval_token = NULL, record = $2, checkpoint = '', \
         updated_at = $3, lease_until = 0, live = NULL, live_at = $3 \
         WHERE turn_id = $1 AND owner_run = $4 AND state IN ('running', 'resuming')"
    };
}

pub mod memories;
pub mod mnestome;
pub mod summaries;
pub mod tasks;
pub mod threads;

use metnos_kit::on_db;
use metnos_kit::store::{Db, EmbeddedMigration, Migrations};
use sqlx::Row;

const SQLITE: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "turns and scratchpad",
        sql: include_str!("../../migrations/sqlite/0001_turns.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "turn leases",
        sql: include_str!("../../migrations/sqlite/0002_leases.sql"),
    },
    EmbeddedMigration {
        version: 3,
        description: "notices",
        sql: include_str!("../../migrations/sqlite/0003_notices.sql"),
    },
    EmbeddedMigration {
        version: 4,
        description: "scheduler",
        sql: include_str!("../../migrations/sqlite/0004_scheduler.sql"),
    },
    EmbeddedMigration {
        version: 5,
        description: "proposals",
        sql: include_str!("../../migrations/sqlite/0005_proposals.sql"),
    },
    EmbeddedMigration {
        version: 6,
        description: "proposal upkeep",
        sql: include_str!("../../migrations/sqlite/0006_proposal_upkeep.sql"),
    },
    EmbeddedMigration {
        version: 7,
        description: "live",
        sql: include_str!("../../migrations/sqlite/0007_live.sql"),
    },
    EmbeddedMigration {
        version: 8,
        description: "threads",
        sql: include_str!("../../migrations/sqlite/0008_threads.sql"),
    },
    EmbeddedMigration {
        version: 9,
        description: "thread summaries",
        sql: include_str!("../../migrations/sqlite/0009_thread_summaries.sql"),
    },
    EmbeddedMigration {
        version: 10,
        description: "memories",
        sql: include_str!("../../migrations/sqlite/0010_memories.sql"),
    },
    EmbeddedMigration {
        version: 11,
        description: "thread choice",
        sql: include_str!("../../migrations/sqlite/0011_thread_choice.sql"),
    },
    EmbeddedMigration {
        version: 12,
        description: "memory words",
        sql: include_str!("../../migrations/sqlite/0012_memory_words.sql"),
    },
    EmbeddedMigration {
        version: 13,
        description: "memory forgets",
        sql: include_str!("../../migrations/sqlite/0013_memory_forgets.sql"),
    },
    EmbeddedMigration {
        version: 14,
        description: "mnestome",
        sql: include_str!("../../migrations/sqlite/0014_mnestome.sql"),
    },
    EmbeddedMigration {
        version: 15,
        description: "shortcuts",
        sql: include_str!("../../migrations/sqlite/0015_shortcuts.sql"),
    },
];
const POSTGRES: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "turns and scratchpad",
        sql: include_str!("../../migrations/postgres/0001_turns.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "turn leases",
        sql: include_str!("../../migrations/postgres/0002_leases.sql"),
    },
    EmbeddedMigration {
        version: 3,
        description: "notices",
        sql: include_str!("../../migrations/postgres/0003_notices.sql"),
    },
    EmbeddedMigration {
        version: 4,
        description: "scheduler",
        sql: include_str!("../../migrations/postgres/0004_scheduler.sql"),
    },
    EmbeddedMigration {
        version: 5,
        description: "proposals",
        sql: include_str!("../../migrations/postgres/0005_proposals.sql"),
    },
    EmbeddedMigration {
        version: 6,
        description: "proposal upkeep",
        sql: include_str!("../../migrations/postgres/0006_proposal_upkeep.sql"),
    },
    EmbeddedMigration {
        version: 7,
        description: "live",
        sql: include_str!("../../migrations/postgres/0007_live.sql"),
    },
    EmbeddedMigration {
        version: 8,
        description: "threads",
        sql: include_str!("../../migrations/postgres/0008_threads.sql"),
    },
    EmbeddedMigration {
        version: 9,
        description: "thread summaries",
        sql: include_str!("../../migrations/postgres/0009_thread_summaries.sql"),
    },
    EmbeddedMigration {
        version: 10,
        description: "memories",
        sql: include_str!("../../migrations/postgres/0010_memories.sql"),
    },
    EmbeddedMigration {
        version: 11,
        description: "thread choice",
        sql: include_str!("../../migrations/postgres/0011_thread_choice.sql"),
    },
    EmbeddedMigration {
        version: 12,
        description: "memory words",
        sql: include_str!("../../migrations/postgres/0012_memory_words.sql"),
    },
    EmbeddedMigration {
        version: 13,
        description: "memory forgets",
        sql: include_str!("../../migrations/postgres/0013_memory_forgets.sql"),
    },
    EmbeddedMigration {
        version: 14,
        description: "mnestome",
        sql: include_str!("../../migrations/postgres/0014_mnestome.sql"),
    },
    EmbeddedMigration {
        version: 15,
        description: "shortcuts",
        sql: include_str!("../../migrations/postgres/0015_shortcuts.sql"),
    },
];

/// The schema of the planner store, per backend.
pub const MIGRATIONS: Migrations = Migrations {
    sqlite: SQLITE,
    postgres: POSTGRES,
};

/// Where a turn is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Running,
    /// Waiting for an approval; its checkpoint holds everything needed to go on.
    Suspended,
    /// Claimed by one caller to continue.
    Resuming,
    Finished,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Suspended => "suspended",
            State::Resuming => "resuming",
            State::Finished => "finished",
        }
    }

    fn parse(text: &str) -> State {
        match text {
            "running" => State::Running,
            "suspended" => State::Suspended,
            "resuming" => State::Resuming,
            _ => State::Finished,
        }
    }
}

/// A turn's change, as the spectator sees it ([`Store::changes`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub turn_id: String,
    pub state: String,
    /// Its record (keys only); empty for a turn ended without one.
    pub record: String,
    pub changed_ms: i64,
}

/// A turn as stored.
#[derive(Debug, Clone)]
pub struct StoredTurn {
    pub turn_id: String,
    /// The person the turn acts for.
    pub channel: String,
    pub sender_id: String,
    pub state: State,
    pub approval_token: Option<String>,
    pub checkpoint: String,
    pub record: Option<String>,
    pub cancel_requested: bool,
    /// The replica that last ran or resumed it, and that replica's process.
    pub owner: String,
    pub owner_run: String,
    /// Until when its owner holds it (ms since the epoch; running and resuming turns).
    pub lease_until: i64,
}

/// What a person must still be told about a turn nobody followed to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub turn_id: String,
    pub channel: String,
    pub sender_id: String,
    pub text: String,
    /// When the turn last changed (ms since the epoch): how old the notice is.
    pub since_ms: i64,
}

/// A scratchpad entry.
#[derive(Debug, Clone)]
pub struct ScratchEntry {
    pub id: String,
    pub turn_id: String,
    pub step: u32,
    pub kind: String,
    pub content: String,
    /// The whole observation, JSON.
    pub observation: String,
    pub size_bytes: u64,
}

/// Who holds the turns this store writes: the replica (stable across its restarts), this
/// process of it, and how long a lease lasts unless renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub replica: String,
    pub run: String,
    pub lease_ms: i64,
}

impl Holder {
    /// A holder named `replica`, for this process (a fresh run id).
    pub fn new(replica: impl Into<String>, lease_ms: i64) -> Holder {
        Holder {
            replica: replica.into(),
            run: metnos_kit::random::hex(8),
            lease_ms: lease_ms.max(1),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Store {
    db: Db,
    holder: Holder,
}

/// Whether the conditional write was this holder's to make.
pub type Held = bool;

fn turn_from_row<R>(row: &R) -> Result<StoredTurn, sqlx::Error>
where
    R: Row,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let state: String = row.try_get("state")?;
    let cancel: i64 = row.try_get("cancel_requested")?;
    Ok(StoredTurn {
        turn_id: row.try_get("turn_id")?,
        channel: row.try_get("channel")?,
        sender_id: row.try_get("sender_id")?,
        state: State::parse(&state),
        approval_token: row.try_get("approval_token")?,
        checkpoint: row.try_get("checkpoint")?,
        record: row.try_get("record")?,
        cancel_requested: cancel != 0,
        owner: row.try_get("owner")?,
        owner_run: row.try_get("owner_run")?,
        lease_until: row.try_get("lease_until")?,
    })
}

const TURN_COLUMNS: &str = "turn_id, channel, sender_id, state, approval_token, checkpoint, record, \
     cancel_requested, owner, owner_run, lease_until";

impl Store {
    /// A store whose turns are held by a replica named `local` (one planner, or a test).
    pub fn new(db: Db) -> Store {
        Store::with_holder(db, Holder::new("local", 15_000))
    }

    pub fn with_holder(db: Db, holder: Holder) -> Store {
        Store { db, holder }
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    fn lease_from(&self, now_ms: i64) -> i64 {
        now_ms.saturating_add(self.holder.lease_ms)
    }

    async fn execute(&self, sql: &'static str, binds: Binds<'_>) -> Result<u64, sqlx::Error> {
        let _writing = self.db.writing().await;
        on_db!(&self.db, pool => {
            let mut query = sqlx::query(sql);
            for bind in binds.0 {
                query = match bind {
                    Bind::Text(t) => query.bind(*t),
                    Bind::OptText(t) => query.bind(*t),
                    Bind::Int(i) => query.bind(*i),
                };
            }
            Ok(query.execute(pool).await?.rows_affected())
        })
    }

    /// Records a new running turn, held by this process.
    pub async fn insert_turn(
        &self,
        turn_id: &str,
        channel: &str,
        sender_id: &str,
        checkpoint: &str,
        live: &str,
        now_ms: i64,
    ) -> Result<(), sqlx::Error> {
        let sql = "INSERT INTO turns (turn_id, channel, sender_id, state, checkpoint, created_at, updated_at, \
                   owner, owner_run, lease_until, live, live_at) \
                   VALUES ($1, $2, $3, 'running', $4, $5, $5, $6, $7, $8, $9, $5)";
        let h = &self.holder;
        self.execute(
            sql,
            Binds(&[
                Bind::Text(turn_id),
                Bind::Text(channel),
                Bind::Text(sender_id),
                Bind::Text(checkpoint),
                Bind::Int(now_ms),
                Bind::Text(&h.replica),
                Bind::Text(&h.run),
                Bind::Int(self.lease_from(now_ms)),
                Bind::Text(live),
            ]),
        )
        .await?;
        Ok(())
    }

    /// Shows a turn this process holds as it is now (`live`: its record so far, keys
    /// only). `false`: it is no longer this process's, and nothing was written.
    pub async fn set_live(
        &self,
        turn_id: &str,
        live: &str,
        now_ms: i64,
    ) -> Result<Held, sqlx::Error> {
        let sql = "UPDATE turns SET live = $2, live_at = $3 \
                   WHERE turn_id = $1 AND owner_run = $4 AND state IN ('running', 'resuming')";
        let affected = self
            .execute(
                sql,
                Binds(&[
                    Bind::Text(turn_id),
                    Bind::Text(live),
                    Bind::Int(now_ms),
                    Bind::Text(&self.holder.run),
                ]),
            )
            .await?;
        Ok(affected == 1)
    }

    /// The turns changed after `after_ms` (a step, a wait, an end), oldest change first,
    /// at most `limit`, whichever replica ran them: each as its record (the log's once
    /// finished, the live one before).
    pub async fn changes(&self, after_ms: i64, limit: u32) -> Result<Vec<Change>, sqlx::Error> {
        self.shown(
            "WHERE live_at > $1 ORDER BY live_at LIMIT $2",
            after_ms,
            limit,
        )
        .await
    }

    /// The turns not finished (running, resuming, waiting for an approval), newest change
    /// first, at most `limit`.
    pub async fn unfinished(&self, limit: u32) -> Result<Vec<Change>, sqlx::Error> {
        self.shown(
            "WHERE state <> 'finished' AND live IS NOT NULL AND live_at > $1 ORDER BY live_at DESC LIMIT $2",
            0,
            limit,
        )
        .await
    }

    async fn shown(
        &self,
        filter: &'static str,
        after_ms: i64,
        limit: u32,
    ) -> Result<Vec<Change>, sqlx::Error> {
        let sql = format!(
            "SELECT turn_id, state, COALESCE(record, live) AS shown, live_at FROM turns {filter}"
        );
        on_db!(&self.db, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(after_ms).bind(i64::from(limit)).fetch_all(pool).await?;
            rows.iter()
                .map(|row| {
                    Ok(Change {
                        turn_id: row.try_get("turn_id")?,
                        state: row.try_get("state")?,
                        record: row.try_get::<Option<String>, _>("shown")?.unwrap_or_default(),
                        changed_ms: row.try_get("live_at")?,
                    })
                })
                .collect()
        })
    }

    /// Saves a checkpoint of a turn this process holds, in `state` (with the approval
    /// token it waits on, if any). A suspended turn is nobody's: any replica may resume
    /// it. `false`: the turn is no longer this process's (its lease expired and another
    /// replica took it over or closed it), and nothing was written.
    pub async fn save(
        &self,
        turn_id: &str,
        state: State,
        approval_token: Option<&str>,
        checkpoint: &str,
        now_ms: i64,
    ) -> Result<Held, sqlx::Error> {
        let sql = "UPDATE turns SET state = $2, approval_token = $3, checkpoint = $4, updated_at = $5, \
                   lease_until = $6 \
                   WHERE turn_id = $1 AND owner_run = $7 AND state IN ('running', 'resuming')";
        let lease = match state {
            State::Running | State::Resuming => self.lease_from(now_ms),
            State::Suspended | State::Finished => 0,
        };
        let affected = self
            .execute(
                sql,
                Binds(&[
                    Bind::Text(turn_id),
                    Bind::Text(state.as_str()),
                    Bind::OptText(approval_token),
                    Bind::Text(checkpoint),
                    Bind::Int(now_ms),
                    Bind::Int(lease),
                    Bind::Text(&self.holder.run),
                ]),
            )
            .await?;
        Ok(affected == 1)
    }

    /// Claims a turn for this process to continue: a suspended one, or one being resumed
    /// by a replica whose lease expired (it died before applying the decision). `true`
    /// when this caller won it.
    pub async fn claim_suspended(&self, turn_id: &str, now_ms: i64) -> Result<bool, sqlx::Error> {
        self.claim_suspended_at(turn_id, None, now_ms).await
    }

    /// [`Store::claim_suspended`], only while the turn still waits on the card `token` it
    /// was read with (`Some("")`: on none): a turn that went on and waits on another card
    /// since is not resumed from the checkpoint read before.
    pub async fn claim_suspended_at(
        &self,
        turn_id: &str,
        token: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE turns SET state = 'resuming', updated_at = $2, owner = $3, owner_run = $4, \
                   lease_until = $5 \
                   WHERE turn_id = $1 AND (state = 'suspended' OR (state = 'resuming' AND lease_until < $2)) \
                   AND ($6 IS NULL OR COALESCE(approval_token, '') = $6)";
        let h = &self.holder;
        let affected = self
            .execute(
                sql,
                Binds(&[
                    Bind::Text(turn_id),
                    Bind::Int(now_ms),
                    Bind::Text(&h.replica),
                    Bind::Text(&h.run),
                    Bind::Int(self.lease_from(now_ms)),
                    Bind::OptText(token),
                ]),
            )
            .await?;
        Ok(affected == 1)
    }

    /// The point of no return before an approved call runs: the turn becomes running with
    /// `checkpoint` (its pending call taken off, so no replica can apply the decision
    /// again) — only if this process still holds it and nobody asked to cancel it. `false`:
    /// the call must not run.
    pub async fn commit_to_run(
        &self,
        turn_id: &str,
        checkpoint: &str,
        now_ms: i64,
    ) -> Result<Held, sqlx::Error> {
        let sql = "UPDATE turns SET state = 'running', approval_token = NULL, checkpoint = $2, \
                   updated_at = $3, lease_until = $4 \
                   WHERE turn_id = $1 AND owner_run = $5 AND state = 'resuming' AND cancel_requested = 0";
        let affected = self
            .execute(
                sql,
                Binds(&[
                    Bind::Text(turn_id),
                    Bind::Text(checkpoint),
                    Bind::Int(now_ms),
                    Bind::Int(self.lease_from(now_ms)),
                    Bind::Text(&self.holder.run),
                ]),
            )
            .await?;
        Ok(affected == 1)
    }

    /// Extends this process's lease on a turn it runs or resumes. `false`: it no longer
    /// holds it.
    pub async fn renew(&self, turn_id: &str, now_ms: i64) -> Result<Held, sqlx::Error> {
        let sql = "UPDATE turns SET lease_until = $2 \
                   WHERE turn_id = $1 AND owner_run = $3 AND state IN ('running', 'resuming')";
        let affected = self
            .execute(
                sql,
                Binds(&[
                    Bind::Text(turn_id),
                    Bind::Int(self.lease_from(now_ms)),
                    Bind::Text(&self.holder.run),
                ]),
            )
            .await?;
        Ok(affected == 1)
    }

    /// Ends a turn this process holds, with its log record. `false`: it no longer holds it
    /// (another replica closed or took it over), and nothing was written.
    pub async fn finish(
        &self,
        turn_id: &str,
        record: &str,
        now_ms: i64,
    ) -> Result<Held, sqlx::Error> {
        let affected = self
            .execute(
                finish_turn_sql!(),
                Binds(&[
                    Bind::Text(turn_id),
                    Bind::Text(record),
                    Bind::Int(now_ms),
                    Bind::Text(&self.holder.run),
                ]),
            )
            .await?;
        Ok(affected == 1)
    }

    /// Ends a running turn whose owner's lease expired (it stopped while the turn ran),
    /// with `notice` for its person if they must be told: `true` when this caller closed
    /// it.
    pub async fn close_expired(
        &self,
        turn_id: &str,
        record: &str,
        notice: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE turns SET state = 'finished', approval_token = NULL, record = $2, checkpoint = '', \
                   updated_at = $3, lease_until = 0, notice = $4, live = NULL, live_at = $3 \
                   WHERE turn_id = $1 AND state = 'running' AND lease_until < $3";
        let affected = self
            .execute(
                sql,
                Binds(&[
                    Bind::Text(turn_id),
                    Bind::Text(record),
                    Bind::Int(now_ms),
                    Bind::OptText(notice),
                ]),
            )
            .await?;
        Ok(affected == 1)
    }

    /// Keeps `text` to tell the person of a finished turn (one nobody followed).
    pub async fn set_notice(&self, turn_id: &str, text: &str) -> Result<(), sqlx::Error> {
        let sql = "UPDATE turns SET notice = $2, notice_claimed_until = 0 \
                   WHERE turn_id = $1 AND state = 'finished'";
        self.execute(sql, Binds(&[Bind::Text(turn_id), Bind::Text(text)]))
            .await?;
        Ok(())
    }

    /// The person of a turn was given its answer after all (its driver finished it after
    /// another replica had ended it): a notice nobody is delivering yet is dropped.
    pub async fn answered(&self, turn_id: &str, now_ms: i64) -> Result<(), sqlx::Error> {
        let sql = "UPDATE turns SET notice = NULL, notice_claimed_until = 0 \
                   WHERE turn_id = $1 AND notice_claimed_until < $2";
        self.execute(sql, Binds(&[Bind::Text(turn_id), Bind::Int(now_ms)]))
            .await?;
        Ok(())
    }

    /// Notices of finished turns still to deliver that nobody is delivering now (nor
    /// waiting to try again), oldest first.
    pub async fn notices(&self, now_ms: i64, limit: u32) -> Result<Vec<Notice>, sqlx::Error> {
        let sql = "SELECT turn_id, channel, sender_id, notice, updated_at FROM turns \
                   WHERE notice IS NOT NULL AND state = 'finished' AND notice_claimed_until < $1 \
                   ORDER BY updated_at LIMIT $2";
        on_db!(&self.db, pool => {
            let rows = sqlx::query(sql).bind(now_ms).bind(i64::from(limit)).fetch_all(pool).await?;
            rows.iter()
                .map(|row| {
                    Ok(Notice {
                        turn_id: row.try_get("turn_id")?,
                        channel: row.try_get("channel")?,
                        sender_id: row.try_get("sender_id")?,
                        text: row.try_get("notice")?,
                        since_ms: row.try_get("updated_at")?,
                    })
                })
                .collect()
        })
    }

    /// Takes the delivery of a turn's notice until `until_ms`: `false` when another
    /// replica has it, it waits to be tried again, or it was delivered.
    pub async fn claim_notice(
        &self,
        turn_id: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Held, sqlx::Error> {
        let sql = "UPDATE turns SET notice_claimed_until = $3 \
                   WHERE turn_id = $1 AND notice IS NOT NULL AND notice_claimed_until < $2";
        let affected = self
            .execute(
                sql,
                Binds(&[Bind::Text(turn_id), Bind::Int(now_ms), Bind::Int(until_ms)]),
            )
            .await?;
        Ok(affected == 1)
    }

    /// A notice delivered (or given up) by the claim made until `claimed_until`: gone.
    /// Another claimer's claim is left alone.
    pub async fn drop_notice(&self, turn_id: &str, claimed_until: i64) -> Result<(), sqlx::Error> {
        let sql = "UPDATE turns SET notice = NULL, notice_claimed_until = 0 \
                   WHERE turn_id = $1 AND notice_claimed_until = $2";
        self.execute(sql, Binds(&[Bind::Text(turn_id), Bind::Int(claimed_until)]))
            .await?;
        Ok(())
    }

    /// A notice the claim made until `claimed_until` could not deliver now: tried again
    /// from `retry_at_ms`. Another claimer's claim is left alone.
    pub async fn release_notice(
        &self,
        turn_id: &str,
        claimed_until: i64,
        retry_at_ms: i64,
    ) -> Result<(), sqlx::Error> {
        let sql = "UPDATE turns SET notice_claimed_until = $3 \
                   WHERE turn_id = $1 AND notice IS NOT NULL AND notice_claimed_until = $2";
        self.execute(
            sql,
            Binds(&[
                Bind::Text(turn_id),
                Bind::Int(claimed_until),
                Bind::Int(retry_at_ms),
            ]),
        )
        .await?;
        Ok(())
    }

    /// Puts a turn whose resumer's lease expired back to waiting (its pending call
    /// intact), so whoever gets the decision continues it. The expired lease is kept: it
    /// says since when nobody holds it.
    pub async fn release_expired(&self, turn_id: &str, now_ms: i64) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE turns SET state = 'suspended', updated_at = $2 \
                   WHERE turn_id = $1 AND state = 'resuming' AND lease_until < $2";
        let affected = self
            .execute(sql, Binds(&[Bind::Text(turn_id), Bind::Int(now_ms)]))
            .await?;
        Ok(affected == 1)
    }

    /// At start: the turns an earlier process of this same replica held are nobody's now,
    /// whatever their lease says (that process is gone). Returns how many.
    pub async fn expire_previous_runs(&self) -> Result<u64, sqlx::Error> {
        // 1, not 0: expired, and still marked as once held (a released turn whose decision
        // came meanwhile is resumed by the sweep).
        let sql = "UPDATE turns SET lease_until = 1 \
                   WHERE owner = $1 AND owner_run <> $2 AND state IN ('running', 'resuming') AND lease_until > 1";
        let h = &self.holder;
        self.execute(sql, Binds(&[Bind::Text(&h.replica), Bind::Text(&h.run)]))
            .await
    }

    /// Running and resuming turns whose lease expired before `now_ms` (at most `limit`).
    pub async fn expired(&self, now_ms: i64, limit: u32) -> Result<Vec<StoredTurn>, sqlx::Error> {
        let sql = format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE state IN ('running', 'resuming') AND lease_until < $1 \
             ORDER BY lease_until LIMIT $2"
        );
        on_db!(&self.db, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now_ms).bind(i64::from(limit)).fetch_all(pool).await?;
            rows.iter().map(turn_from_row).collect()
        })
    }

    /// Suspended turns released from a resumer whose lease expired before `before_ms`
    /// (at most `limit`): their decision may have come while nobody held them.
    pub async fn released_before(
        &self,
        before_ms: i64,
        limit: u32,
    ) -> Result<Vec<StoredTurn>, sqlx::Error> {
        let sql = format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE state = 'suspended' AND lease_until > 0 AND lease_until < $1 \
             ORDER BY lease_until LIMIT $2"
        );
        on_db!(&self.db, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(before_ms).bind(i64::from(limit)).fetch_all(pool).await?;
            rows.iter().map(turn_from_row).collect()
        })
    }

    pub async fn get(&self, turn_id: &str) -> Result<Option<StoredTurn>, sqlx::Error> {
        let sql = format!("SELECT {TURN_COLUMNS} FROM turns WHERE turn_id = $1");
        on_db!(&self.db, pool => {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(turn_id).fetch_optional(pool).await?;
            row.as_ref().map(turn_from_row).transpose()
        })
    }

    pub async fn by_token(&self, token: &str) -> Result<Option<StoredTurn>, sqlx::Error> {
        let sql = format!("SELECT {TURN_COLUMNS} FROM turns WHERE approval_token = $1");
        on_db!(&self.db, pool => {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(token).fetch_optional(pool).await?;
            row.as_ref().map(turn_from_row).transpose()
        })
    }

    /// The principal's newest unfinished turn.
    pub async fn current_of(
        &self,
        channel: &str,
        sender_id: &str,
    ) -> Result<Option<StoredTurn>, sqlx::Error> {
        let sql = format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE channel = $1 AND sender_id = $2 AND state <> 'finished' \
             ORDER BY created_at DESC LIMIT 1"
        );
        on_db!(&self.db, pool => {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(channel).bind(sender_id).fetch_optional(pool).await?;
            row.as_ref().map(turn_from_row).transpose()
        })
    }

    /// Every unfinished turn of the principal, newest first.
    pub async fn unfinished_of(
        &self,
        channel: &str,
        sender_id: &str,
    ) -> Result<Vec<StoredTurn>, sqlx::Error> {
        let sql = format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE channel = $1 AND sender_id = $2 AND state <> 'finished' \
             ORDER BY created_at DESC"
        );
        on_db!(&self.db, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(channel).bind(sender_id).fetch_all(pool).await?;
            rows.iter().map(turn_from_row).collect()
        })
    }

    /// Ends a suspended turn whose checkpoint cannot be read (no record: nothing to tell).
    /// `true` when this caller closed it.
    pub async fn close_unreadable(&self, turn_id: &str, now_ms: i64) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE turns SET state = 'finished', approval_token = NULL, checkpoint = '', \
                   updated_at = $2, lease_until = 0, live = NULL, live_at = $2 WHERE turn_id = $1 AND state = 'suspended'";
        let affected = self
            .execute(sql, Binds(&[Bind::Text(turn_id), Bind::Int(now_ms)]))
            .await?;
        Ok(affected == 1)
    }

    /// Suspended turns of `channel`'s people, oldest change first (at most `limit`).
    pub async fn suspended_on(
        &self,
        channel: &str,
        limit: u32,
    ) -> Result<Vec<StoredTurn>, sqlx::Error> {
        let sql = format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE channel = $1 AND state = 'suspended' \
             ORDER BY updated_at LIMIT $2"
        );
        on_db!(&self.db, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(channel).bind(i64::from(limit)).fetch_all(pool).await?;
            rows.iter().map(turn_from_row).collect()
        })
    }

    /// Marks a turn to stop at its next step (any replica running it sees it).
    pub async fn request_cancel(&self, turn_id: &str) -> Result<(), sqlx::Error> {
        let sql = "UPDATE turns SET cancel_requested = 1 WHERE turn_id = $1";
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(turn_id).execute(pool).await?;
        });
        Ok(())
    }

    pub async fn cancel_requested(&self, turn_id: &str) -> Result<bool, sqlx::Error> {
        Ok(self.standing(turn_id).await?.cancel_requested)
    }

    /// Whether the turn was asked to stop, and whether this process still holds it.
    pub async fn standing(&self, turn_id: &str) -> Result<Standing, sqlx::Error> {
        let sql = "SELECT cancel_requested, owner_run, state FROM turns WHERE turn_id = $1";
        let found: Option<(i64, String, String)> = on_db!(&self.db, pool => {
            sqlx::query_as(sql).bind(turn_id).fetch_optional(pool).await?
        });
        Ok(match found {
            None => Standing {
                cancel_requested: false,
                held: false,
            },
            Some((cancel, run, state)) => Standing {
                cancel_requested: cancel != 0,
                held: run == self.holder.run
                    && matches!(State::parse(&state), State::Running | State::Resuming),
            },
        })
    }

    pub async fn put_scratch(&self, entry: &ScratchEntry, now_ms: i64) -> Result<(), sqlx::Error> {
        let sql = "INSERT INTO scratchpad (id, turn_id, step, kind, content, observation, size_bytes, created_at) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
        on_db!(&self.db, pool => {
            sqlx::query(sql)
                .bind(&entry.id)
                .bind(&entry.turn_id)
                .bind(i64::from(entry.step))
                .bind(&entry.kind)
                .bind(&entry.content)
                .bind(&entry.observation)
                .bind(i64::try_from(entry.size_bytes).unwrap_or(i64::MAX))
                .bind(now_ms)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    pub async fn get_scratch(
        &self,
        turn_id: &str,
        id: &str,
    ) -> Result<Option<ScratchEntry>, sqlx::Error> {
        let sql = "SELECT id, turn_id, step, kind, content, observation, size_bytes FROM scratchpad WHERE id = $1 AND turn_id = $2";
        on_db!(&self.db, pool => {
            let row = sqlx::query(sql).bind(id).bind(turn_id).fetch_optional(pool).await?;
            match row {
                None => Ok(None),
                Some(row) => {
                    let step: i64 = row.try_get("step")?;
                    let size: i64 = row.try_get("size_bytes")?;
                    Ok(Some(ScratchEntry {
                        id: row.try_get("id")?,
                        turn_id: row.try_get("turn_id")?,
                        step: u32::try_from(step).unwrap_or(0),
                        kind: row.try_get("kind")?,
                        content: row.try_get("content")?,
                        observation: row.try_get("observation")?,
                        size_bytes: u64::try_from(size).unwrap_or(0),
                    }))
                }
            }
        })
    }

    /// Drops the scratchpad entries of turns that finished before `before_ms` (and any
    /// entry older than that whose turn is gone).
    pub async fn prune_scratch(&self, before_ms: i64) -> Result<u64, sqlx::Error> {
        let sql = "DELETE FROM scratchpad WHERE created_at < $1 AND turn_id NOT IN \
                   (SELECT turn_id FROM turns WHERE state <> 'finished')";
        let removed = on_db!(&self.db, pool => {
            sqlx::query(sql).bind(before_ms).execute(pool).await?.rows_affected()
        });
        Ok(removed)
    }
}

/// A stop request and who holds a turn, as one replica sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub cancel_requested: bool,
    /// This process holds it (it is running or being resumed here).
    pub held: bool,
}

/// One bound value of a query (the same SQL on both backends).
enum Bind<'a> {
    Text(&'a str),
    OptText(Option<&'a str>),
    Int(i64),
}

struct Binds<'a>(&'a [Bind<'a>]);
