//! The planner's store: turns (checkpoint while running or suspended, log record once
//! finished) and the scratchpad. SQLite or PostgreSQL, the same SQL.

use metnos_kit::on_db;
use metnos_kit::store::{Db, EmbeddedMigration, Migrations};
use sqlx::Row;

const SQLITE: &[EmbeddedMigration] = &[EmbeddedMigration {
    version: 1,
    description: "turns and scratchpad",
    sql: include_str!("../migrations/sqlite/0001_turns.sql"),
}];
const POSTGRES: &[EmbeddedMigration] = &[EmbeddedMigration {
    version: 1,
    description: "turns and scratchpad",
    sql: include_str!("../migrations/postgres/0001_turns.sql"),
}];

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

#[derive(Debug, Clone)]
pub struct Store {
    db: Db,
}

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
    })
}

const TURN_COLUMNS: &str =
    "turn_id, channel, sender_id, state, approval_token, checkpoint, record, cancel_requested";

impl Store {
    pub fn new(db: Db) -> Store {
        Store { db }
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Records a new running turn.
    pub async fn insert_turn(
        &self,
        turn_id: &str,
        channel: &str,
        sender_id: &str,
        checkpoint: &str,
        now_ms: i64,
    ) -> Result<(), sqlx::Error> {
        let sql = "INSERT INTO turns (turn_id, channel, sender_id, state, checkpoint, created_at, updated_at) \
                   VALUES ($1, $2, $3, 'running', $4, $5, $5)";
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(turn_id).bind(channel).bind(sender_id).bind(checkpoint).bind(now_ms)
                .execute(pool).await?;
        });
        Ok(())
    }

    /// Saves a checkpoint in `state` (with the approval token it waits on, if any).
    pub async fn save(
        &self,
        turn_id: &str,
        state: State,
        approval_token: Option<&str>,
        checkpoint: &str,
        now_ms: i64,
    ) -> Result<(), sqlx::Error> {
        let sql = "UPDATE turns SET state = $2, approval_token = $3, checkpoint = $4, updated_at = $5 WHERE turn_id = $1";
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(turn_id).bind(state.as_str()).bind(approval_token).bind(checkpoint).bind(now_ms)
                .execute(pool).await?;
        });
        Ok(())
    }

    /// Claims a suspended turn for one caller: `true` when this caller won it.
    pub async fn claim_suspended(&self, turn_id: &str, now_ms: i64) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE turns SET state = 'resuming', updated_at = $2 WHERE turn_id = $1 AND state = 'suspended'";
        let affected = on_db!(&self.db, pool => {
            sqlx::query(sql).bind(turn_id).bind(now_ms).execute(pool).await?.rows_affected()
        });
        Ok(affected == 1)
    }

    /// Ends a turn with its log record.
    pub async fn finish(
        &self,
        turn_id: &str,
        record: &str,
        now_ms: i64,
    ) -> Result<(), sqlx::Error> {
        let sql = "UPDATE turns SET state = 'finished', approval_token = NULL, record = $2, checkpoint = '', updated_at = $3 WHERE turn_id = $1";
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(turn_id).bind(record).bind(now_ms).execute(pool).await?;
        });
        Ok(())
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
    pub async fn close_unreadable(&self, turn_id: &str, now_ms: i64) -> Result<(), sqlx::Error> {
        let sql = "UPDATE turns SET state = 'finished', approval_token = NULL, checkpoint = '', \
                   updated_at = $2 WHERE turn_id = $1 AND state = 'suspended'";
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(turn_id).bind(now_ms).execute(pool).await?;
        });
        Ok(())
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
        let sql = "SELECT cancel_requested FROM turns WHERE turn_id = $1";
        let flag: Option<i64> = on_db!(&self.db, pool => {
            sqlx::query_scalar(sql).bind(turn_id).fetch_optional(pool).await?
        });
        Ok(flag.unwrap_or(0) != 0)
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

    /// Closes turns left running (or being resumed) by a planner that stopped: no
    /// progress saved since `before_ms`. Their record says so; they are not replayed
    /// (an executor may not be safe to run twice). Returns how many.
    pub async fn close_orphans(&self, before_ms: i64, now_ms: i64) -> Result<u64, sqlx::Error> {
        let sql = "UPDATE turns SET state = 'finished', approval_token = NULL, checkpoint = '', \
                   record = '{\"final_kind\":\"error\",\"reason\":\"orphaned: the planner stopped while the turn ran\"}', \
                   updated_at = $2 WHERE state IN ('running', 'resuming') AND updated_at < $1";
        let closed = on_db!(&self.db, pool => {
            sqlx::query(sql).bind(before_ms).bind(now_ms).execute(pool).await?.rows_affected()
        });
        Ok(closed)
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
