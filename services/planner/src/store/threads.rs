//! Threads (issue 40): each person's conversation on one channel, kept in the planner's
//! store. An exchange is one turn: the person's message and Metnos's final answer verbatim,
//! the answer's provenance labels, and each step as one line — never an observation's
//! content. A thread is one person's on one channel: every read names both.
//!
//! Silence longer than the idle time, or the person asking for it (`/new`), starts a new
//! thread; the old one stays until the retention prunes it or the person forgets it.

use metnos_core::Principal;
use metnos_kit::store::Db;
use metnos_kit::store::sql::{Finish, Row, Statement};
use serde::{Deserialize, Serialize};

use super::Held;

/// The longest message or answer an exchange keeps, in bytes: a turn's query and answer are
/// bounded well below it; a longer one is refused whole, never cut silently.
pub const MAX_TEXT: usize = 64 * 1024;

/// Most provenance labels an answer or a step keeps.
pub const MAX_LABELS: usize = 64;

/// Most steps an exchange keeps (a turn's step cap is far below).
pub const MAX_STEPS: usize = 64;

/// Most exchanges [`ThreadStore::recent`] reads back: the history budget holds far fewer.
pub const MAX_RECENT: u32 = 200;

/// A person's conversation on one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    pub id: String,
    pub person: Principal,
    pub started_at: i64,
    /// When its last exchange was written (or it was started).
    pub last_at: i64,
    /// Not written yet: a thread is written with its first exchange (one write for a turn
    /// in a new thread), as this says.
    pub opening: Option<Opening>,
}

/// How a thread not written yet is opened with its first exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Opening {
    /// `/new`: it is the person's current thread once written, whatever they said
    /// elsewhere meanwhile. Otherwise (their first message, or one after the idle time) a
    /// thread of theirs written to since this one was decided on (another turn of theirs
    /// that began after silence, too) takes the exchange instead: one conversation, not
    /// two.
    pub close_others: bool,
}

/// One step of a turn, as its thread keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepLine {
    pub executor: String,
    pub ok: bool,
    /// Where what it observed came from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Where a large observation was kept (the scratchpad), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratchpad_id: Option<String>,
}

/// A turn's exchange, to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewExchange {
    pub turn_id: String,
    /// The person's message, verbatim.
    pub message: String,
    /// Metnos's final answer, verbatim.
    pub answer: String,
    /// The sources the answer's text came from (the labels of what the model saw).
    pub labels: Vec<String>,
    pub steps: Vec<StepLine>,
    /// The message was forwarded from someone else: not the person's words.
    pub forwarded: bool,
}

/// An exchange as the thread keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    /// Its place in the thread, from 1.
    pub seq: i64,
    pub turn_id: String,
    pub at: i64,
    pub message: String,
    pub answer: String,
    pub labels: Vec<String>,
    pub steps: Vec<StepLine>,
    /// The message was forwarded from someone else: not the person's words.
    pub forwarded: bool,
}

/// What a turn sees of its thread.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct History {
    /// The newest exchanges within the budget, oldest first.
    pub exchanges: Vec<Exchange>,
    /// Older exchanges did not fit (a summary may stand for them).
    pub older_left_out: bool,
}

/// What forgetting a person's conversations erased.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Forgotten {
    pub exchanges: u64,
    /// Their long-term memory's entries (when it was asked for).
    pub memories: u64,
}

/// Why a thread could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ThreadError {
    #[error("the {field} is {len} bytes; a thread keeps at most {MAX_TEXT}")]
    TooLong { field: &'static str, len: usize },
    #[error("the {field} has {count} entries; a thread keeps at most {max}")]
    TooMany {
        field: &'static str,
        count: usize,
        max: usize,
    },
    #[error("the {0} holds a NUL character, which a thread cannot keep")]
    Nul(&'static str),
    #[error("no such thread")]
    NoSuchThread,
    #[error("thread store: {0}")]
    Store(#[from] sqlx::Error),
}

impl NewExchange {
    pub(crate) fn check(&self) -> Result<(), ThreadError> {
        for (field, text) in [("message", &self.message), ("answer", &self.answer)] {
            if text.len() > MAX_TEXT {
                return Err(ThreadError::TooLong {
                    field,
                    len: text.len(),
                });
            }
            if text.contains('\0') {
                return Err(ThreadError::Nul(field));
            }
        }
        let many = |field, count, max| ThreadError::TooMany { field, count, max };
        if self.labels.len() > MAX_LABELS {
            return Err(many("answer's labels", self.labels.len(), MAX_LABELS));
        }
        if self.steps.len() > MAX_STEPS {
            return Err(many("steps", self.steps.len(), MAX_STEPS));
        }
        if let Some(step) = self.steps.iter().find(|s| s.labels.len() > MAX_LABELS) {
            return Err(many("step's labels", step.labels.len(), MAX_LABELS));
        }
        Ok(())
    }
}

/// How a turn ends, written with its exchange ([`ThreadStore::append_ending`]): its log
/// record, and the run of the planner that holds it (only its holder ends it).
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    pub record: &'a str,
    pub run: &'a str,
}

impl Ending<'_> {
    /// The turn's end alone (as [`super::Store::finish`] writes it).
    fn statement(&self, turn_id: &str, now_ms: i64) -> Statement {
        Statement::new(finish_turn_sql!())
            .bind(turn_id.to_owned())
            .bind(self.record.to_owned())
            .bind(now_ms)
            .bind(self.run.to_owned())
    }
}

/// Where a turn's exchange went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// At the end of this thread.
    In(String),
    /// It was there already (the turn's end recorded twice).
    Already,
    /// Nowhere: the thread is not the person's, or they forgot it since.
    Nowhere,
}

/// The planner's threads, on SQLite or PostgreSQL alike.
#[derive(Debug, Clone)]
pub struct ThreadStore {
    pub(super) db: Db,
}

/// The key that holds one person's threads against another writer (replicas included).
pub(super) fn person_key(person: &Principal) -> String {
    format!("metnos.threads.{person}")
}

fn thread_from_row(row: &Row) -> Result<Thread, sqlx::Error> {
    Ok(Thread {
        id: row.get("id")?,
        person: metnos_kit::store::stored_principal(
            &row.get::<String, _>("channel")?,
            &row.get::<String, _>("sender_id")?,
        )?,
        started_at: row.get("started_at")?,
        last_at: row.get("last_at")?,
        opening: None,
    })
}

pub(super) fn json_column<T: for<'de> Deserialize<'de>>(
    row: &Row,
    column: &str,
) -> Result<T, sqlx::Error> {
    let text: String = row.get(column)?;
    serde_json::from_str(&text).map_err(|e| sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: Box::new(e),
    })
}

pub(super) fn exchange_from_row(row: &Row) -> Result<Exchange, sqlx::Error> {
    Ok(Exchange {
        seq: row.get("seq")?,
        turn_id: row.get("turn_id")?,
        at: row.get("at")?,
        message: row.get("message")?,
        answer: row.get("answer")?,
        labels: json_column(row, "labels")?,
        steps: json_column(row, "steps")?,
        forwarded: row.get::<i64, _>("forwarded")? != 0,
    })
}

const THREAD_COLUMNS: &str = "id, channel, sender_id, started_at, last_at";

impl ThreadStore {
    pub fn new(db: Db) -> ThreadStore {
        ThreadStore { db }
    }

    /// The thread `person` talks in now: the one chosen last (started, or taken up again
    /// by a reply), unless it has been silent for longer than `idle_ms`; else a new one,
    /// written with its first exchange. Reads only: asking costs a turn no write.
    pub async fn current(
        &self,
        person: &Principal,
        now_ms: i64,
        idle_ms: i64,
    ) -> Result<Thread, ThreadError> {
        let latest = format!(
            "SELECT {THREAD_COLUMNS} FROM threads WHERE channel = $1 AND sender_id = $2 \
             ORDER BY chosen_at DESC, last_at DESC LIMIT 1"
        );
        let found = self
            .db
            .fetch_optional(
                Statement::new(sqlx::AssertSqlSafe(latest))
                    .bind(person.channel().to_owned())
                    .bind(person.sender_id().to_owned()),
            )
            .await?;
        if let Some(row) = found {
            let thread = thread_from_row(&row)?;
            if thread.last_at.saturating_add(idle_ms) >= now_ms {
                return Ok(thread);
            }
        }
        Ok(opening(person, now_ms, false))
    }

    /// A new thread for `person` (`/new`), written with its first exchange: from then on
    /// the ones before are never read into a turn again (unless a reply takes one up).
    pub fn start_new(&self, person: &Principal, now_ms: i64) -> Thread {
        opening(person, now_ms, true)
    }

    /// Takes up `person`'s thread `thread_id` again (a reply to one of its answers): it
    /// becomes the one they talk in now, even after `/new` or the idle time. A thread of
    /// someone else, or one no longer kept, is no such thread.
    pub async fn reopen(
        &self,
        person: &Principal,
        thread_id: &str,
        now_ms: i64,
    ) -> Result<Thread, ThreadError> {
        let select = format!(
            "SELECT {THREAD_COLUMNS} FROM threads WHERE id = $1 AND channel = $2 AND sender_id = $3"
        );
        let key = person_key(person);
        self.db
            .locked_tx(&key, async |tx| {
                let Some(row) = tx
                    .fetch_optional(
                        Statement::new(sqlx::AssertSqlSafe(select))
                            .bind(thread_id.to_owned())
                            .bind(person.channel().to_owned())
                            .bind(person.sender_id().to_owned()),
                    )
                    .await?
                else {
                    return Err(ThreadError::NoSuchThread);
                };
                let mut thread = thread_from_row(&row)?;
                thread.last_at = thread.last_at.max(now_ms);
                tx.execute(
                    Statement::new("UPDATE threads SET chosen_at = $1, last_at = $1 WHERE id = $2")
                        .bind(thread.last_at)
                        .bind(thread.id.clone()),
                )
                .await?;
                Ok(Finish::Commit(thread))
            })
            .await
    }

    /// Writes a turn's exchange at the end of `thread` (opened first if it is not written
    /// yet): the id of the thread it went to, or `None` when that turn's exchange is there
    /// already (its end recorded twice). A thread of someone else, or one forgotten since,
    /// is no such thread: nothing is written.
    pub async fn append(
        &self,
        thread: &Thread,
        exchange: &NewExchange,
        now_ms: i64,
    ) -> Result<Option<String>, ThreadError> {
        match self.append_ending(thread, exchange, now_ms, None).await?.1 {
            Kept::In(id) => Ok(Some(id)),
            Kept::Already => Ok(None),
            Kept::Nowhere => Err(ThreadError::NoSuchThread),
        }
    }

    /// [`ThreadStore::append`], and the turn's end in the same transaction when `ending`
    /// says how: a turn in a thread pays one commit for both, as a one-shot turn pays for
    /// its end. Whether the end was its holder's to write (`false` without `ending`), and
    /// where the exchange went; the end is written whether or not the exchange is.
    pub async fn append_ending(
        &self,
        thread: &Thread,
        exchange: &NewExchange,
        now_ms: i64,
        ending: Option<&Ending<'_>>,
    ) -> Result<(Held, Kept), ThreadError> {
        exchange.check()?;
        if let metnos_kit::store::Pool::Sqlite(_) = self.db.pool() {
            return self.append_at_once(thread, exchange, now_ms, ending).await;
        }
        let key = person_key(&thread.person);
        self.db
            .locked_tx(&key, async |tx| {
                let held = match ending {
                    Some(ending) => {
                        tx.execute(ending.statement(&exchange.turn_id, now_ms))
                            .await?
                            == 1
                    }
                    None => false,
                };
                let (id, opened) = match thread.opening {
                    Some(opening) => open_in(tx, thread, opening, now_ms).await?,
                    None => (thread.id.clone(), false),
                };
                if !insert_exchange(tx, &thread.person, &id, exchange, now_ms).await? {
                    return not_kept(tx, thread, exchange, held, ending.is_some()).await;
                }
                if !opened {
                    tx.execute(
                        Statement::new("UPDATE threads SET last_at = $1 WHERE id = $2")
                            .bind(now_ms)
                            .bind(id.clone()),
                    )
                    .await?;
                }
                Ok(Finish::Commit((held, Kept::In(id))))
            })
            .await
    }

    /// [`ThreadStore::append_ending`] on SQLite: its statements in one transaction, in one
    /// round trip to the connection ([`Db::sqlite_tx_at_once`]: a turn in a thread pays
    /// the round trip a one-shot turn pays to end).
    async fn append_at_once(
        &self,
        thread: &Thread,
        exchange: &NewExchange,
        now_ms: i64,
        ending: Option<&Ending<'_>>,
    ) -> Result<(Held, Kept), ThreadError> {
        let labels = serde_json::to_string(&exchange.labels).unwrap_or_else(|_| "[]".into());
        let steps = serde_json::to_string(&exchange.steps).unwrap_or_else(|_| "[]".into());
        let (sql, record, run) = match ending {
            Some(ending) => (END_AND_APPEND, ending.record, ending.run),
            None => (APPEND_AT_ONCE, "", ""),
        };
        let statement = Statement::new(sql)
            .bind(exchange.turn_id.clone())
            .bind(record.to_owned())
            .bind(now_ms)
            .bind(run.to_owned())
            .bind(thread.id.clone())
            .bind(thread.person.channel().to_owned())
            .bind(thread.person.sender_id().to_owned())
            .bind(thread.started_at)
            .bind(i64::from(thread.opening.is_some_and(|o| o.close_others)))
            .bind(exchange.message.clone())
            .bind(exchange.answer.clone())
            .bind(labels)
            .bind(i64::from(thread.opening.is_some()))
            .bind(steps)
            .bind(i64::from(exchange.forwarded));
        // Nothing is read after the commit: what was written is said by the batch's rows
        // (and no thread is opened for an exchange kept already).
        let (mut held, mut kept) = (false, Kept::Nowhere);
        for row in self.db.sqlite_tx_at_once(statement).await? {
            match row.get::<String, _>("what")?.as_str() {
                "ended" => held = true,
                "already" => kept = Kept::Already,
                _ => kept = Kept::In(row.get("thread_id")?),
            }
        }
        Ok((held, kept))
    }

    /// The newest `limit` exchanges of `person`'s thread `thread_id` (at most
    /// [`MAX_RECENT`]), oldest first. Another person's thread reads as empty.
    pub async fn recent(
        &self,
        person: &Principal,
        thread_id: &str,
        limit: u32,
    ) -> Result<Vec<Exchange>, ThreadError> {
        let rows = self
            .db
            .fetch_all(
                Statement::new(
                    "SELECT e.seq, e.turn_id, e.at, e.message, e.answer, e.labels, e.steps, e.forwarded \
                     FROM exchanges e JOIN threads t ON t.id = e.thread_id \
                     WHERE e.thread_id = $1 AND t.channel = $2 AND t.sender_id = $3 \
                     ORDER BY e.seq DESC LIMIT $4",
                )
                .bind(thread_id.to_owned())
                .bind(person.channel().to_owned())
                .bind(person.sender_id().to_owned())
                .bind(i64::from(limit.min(MAX_RECENT))),
            )
            .await?;
        let mut exchanges = rows
            .iter()
            .map(exchange_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        exchanges.reverse();
        Ok(exchanges)
    }

    /// What a turn of `person` sees of thread `thread_id`: its newest exchanges whose
    /// messages and answers fit in `budget` tokens, oldest first, and whether older ones
    /// were left out. Read newest first a page at a time, so a long thread costs what its
    /// budget holds, not its length.
    pub async fn history(
        &self,
        person: &Principal,
        thread_id: &str,
        budget: usize,
    ) -> Result<History, ThreadError> {
        // The default budget (6,000 tokens) holds about 35 exchanges of a few hundred bytes:
        // one page of 64 reads them in one query.
        const PAGE: i64 = 64;
        let mut kept: Vec<Exchange> = Vec::new();
        let mut spent = 0usize;
        let mut before = i64::MAX;
        loop {
            let rows = self
                .db
                .fetch_all(
                    Statement::new(
                        "SELECT e.seq, e.turn_id, e.at, e.message, e.answer, e.labels, e.steps, e.forwarded \
                         FROM exchanges e JOIN threads t ON t.id = e.thread_id \
                         WHERE e.thread_id = $1 AND t.channel = $2 AND t.sender_id = $3 \
                         AND e.seq < $4 ORDER BY e.seq DESC LIMIT $5",
                    )
                    .bind(thread_id.to_owned())
                    .bind(person.channel().to_owned())
                    .bind(person.sender_id().to_owned())
                    .bind(before)
                    .bind(PAGE),
                )
                .await?;
            let page = rows.len();
            for row in &rows {
                let exchange = exchange_from_row(row)?;
                spent = spent.saturating_add(exchange_tokens(&exchange));
                if spent > budget {
                    kept.reverse();
                    return Ok(History {
                        exchanges: kept,
                        older_left_out: true,
                    });
                }
                before = exchange.seq;
                kept.push(exchange);
            }
            if page < PAGE as usize {
                kept.reverse();
                return Ok(History {
                    exchanges: kept,
                    older_left_out: false,
                });
            }
        }
    }

    /// Erases every thread of `person` (their channel's; a person on another channel is
    /// another principal), with its summary, and their long-term memory too when `memory`
    /// says: all in one transaction, or nothing. A turn of theirs that began before
    /// `now_ms` opens no thread after it.
    pub async fn forget(
        &self,
        person: &Principal,
        now_ms: i64,
        memory: bool,
    ) -> Result<Forgotten, ThreadError> {
        let key = person_key(person);
        Ok(self
            .db
            .locked_tx(&key, async |tx| {
                let exchanges = forget_in(tx, person, now_ms).await?;
                let memories = match memory {
                    true => {
                        // Their memory's writers hold its key: a save waits for this.
                        tx.lock(&super::memories::person_key(person)).await?;
                        super::memories::forget_all_in(tx, person, now_ms).await?
                    }
                    false => 0,
                };
                Ok::<_, sqlx::Error>(Finish::Commit(Forgotten {
                    exchanges,
                    memories,
                }))
            })
            .await?)
    }

    /// Moves the marks of when `person` forgot (their conversations; their memory too
    /// when `memory`) to `at`, never back. Called with the time a forget was committed:
    /// a turn that began after [`ThreadStore::forget`] read its clock, but before the
    /// commit, may have read what it erased — it then counts as begun before.
    pub async fn mark_forgotten(
        &self,
        person: &Principal,
        at: i64,
        memory: bool,
    ) -> Result<(), ThreadError> {
        self.db.execute(mark(Forgets::Threads, person, at)).await?;
        if memory {
            self.db.execute(mark(Forgets::Memory, person, at)).await?;
        }
        Ok(())
    }

    /// Whether `person` forgot their conversations at `since_ms` or later (a turn that
    /// began then must not go on with what it read of them).
    pub async fn forgotten_since(
        &self,
        person: &Principal,
        since_ms: i64,
    ) -> Result<bool, ThreadError> {
        Ok(self
            .db
            .fetch_optional(
                Statement::new(
                    "SELECT at FROM thread_forgets WHERE channel = $1 AND sender_id = $2 AND at >= $3",
                )
                .bind(person.channel().to_owned())
                .bind(person.sender_id().to_owned())
                .bind(since_ms),
            )
            .await?
            .is_some())
    }

    /// Removes the threads silent since before `before_ms` (the retention): how many
    /// exchanges went.
    pub async fn prune(&self, before_ms: i64) -> Result<u64, ThreadError> {
        self.db
            .execute(
                Statement::new(
                    "DELETE FROM thread_summaries WHERE thread_id IN \
                     (SELECT id FROM threads WHERE last_at < $1)",
                )
                .bind(before_ms),
            )
            .await?;
        let gone = self
            .db
            .execute(
                Statement::new(
                    "DELETE FROM exchanges WHERE thread_id IN \
                     (SELECT id FROM threads WHERE last_at < $1)",
                )
                .bind(before_ms),
            )
            .await?;
        self.db
            .execute(Statement::new("DELETE FROM threads WHERE last_at < $1").bind(before_ms))
            .await?;
        Ok(gone)
    }
}

/// Erases `person`'s threads and summaries inside the transaction that holds them, and
/// notes when (see [`ThreadStore::forget`]): how many exchanges went.
async fn forget_in(
    tx: &mut metnos_kit::store::sql::Tx,
    person: &Principal,
    now_ms: i64,
) -> Result<u64, sqlx::Error> {
    let (channel, sender) = (person.channel().to_owned(), person.sender_id().to_owned());
    tx.execute(
        Statement::new(
            "DELETE FROM thread_summaries WHERE thread_id IN \
             (SELECT id FROM threads WHERE channel = $1 AND sender_id = $2)",
        )
        .bind(channel.clone())
        .bind(sender.clone()),
    )
    .await?;
    let gone = tx
        .execute(
            Statement::new(
                "DELETE FROM exchanges WHERE thread_id IN \
                 (SELECT id FROM threads WHERE channel = $1 AND sender_id = $2)",
            )
            .bind(channel.clone())
            .bind(sender.clone()),
        )
        .await?;
    tx.execute(
        Statement::new("DELETE FROM threads WHERE channel = $1 AND sender_id = $2")
            .bind(channel.clone())
            .bind(sender.clone()),
    )
    .await?;
    tx.execute(mark(Forgets::Threads, person, now_ms)).await?;
    Ok(gone)
}

/// What a person forgot: the mark of when is kept per kind.
#[derive(Debug, Clone, Copy)]
pub(super) enum Forgets {
    Threads,
    Memory,
}

/// Moves `person`'s mark of when they last forgot `what` to `at` (never back): a turn
/// begun then or before writes nothing of it after.
pub(super) fn mark(what: Forgets, person: &Principal, at: i64) -> Statement {
    let table = match what {
        Forgets::Threads => "thread_forgets",
        Forgets::Memory => "memory_forgets",
    };
    Statement::new(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {table} (channel, sender_id, at) VALUES ($1, $2, $3) \
         ON CONFLICT (channel, sender_id) DO UPDATE SET at = CASE \
         WHEN excluded.at > {table}.at THEN excluded.at ELSE {table}.at END"
    )))
    .bind(person.channel().to_owned())
    .bind(person.sender_id().to_owned())
    .bind(at)
}

/// Whether `thread_id` is `person`'s thread, inside the transaction that holds their
/// threads: someone else's, or none, is [`ThreadError::NoSuchThread`].
pub(super) async fn owned_in(
    tx: &mut metnos_kit::store::sql::Tx,
    person: &Principal,
    thread_id: &str,
) -> Result<(), ThreadError> {
    let owned = tx
        .fetch_optional(
            Statement::new(
                "SELECT id FROM threads WHERE id = $1 AND channel = $2 AND sender_id = $3",
            )
            .bind(thread_id.to_owned())
            .bind(person.channel().to_owned())
            .bind(person.sender_id().to_owned()),
        )
        .await?;
    owned.map(|_| ()).ok_or(ThreadError::NoSuchThread)
}

/// A thread of `person`'s not written yet, decided on at `now_ms`.
fn opening(person: &Principal, now_ms: i64, close_others: bool) -> Thread {
    Thread {
        id: metnos_kit::random::hex(16),
        person: person.clone(),
        started_at: now_ms,
        last_at: now_ms,
        opening: Some(Opening { close_others }),
    }
}

/// [`ThreadStore::append_at_once`]: `$1` the turn, `$3` now, `$5` the thread, `$6` `$7` its
/// person, `$8` when it was decided on, `$9` `/new`, `$10`–`$12` the message, answer and
/// labels, `$13` whether the thread is to be opened, `$14` the steps, `$15` forwarded (`$2`
/// and `$4` are the turn's end's, [`END_AND_APPEND`]). As [`open_in`], [`insert_exchange`]
/// and the `last_at` update do in a transaction: the thread opened (unless the exchange is
/// kept already, the person forgot since, or — not `/new` — another thread of theirs was
/// written to since); the exchange
/// written at the end of that one or of this; the thread's `last_at` moved to it. The
/// exchange's thread comes back (`what` = `kept`) when it was written; a row `what` =
/// `already` says it was there before.
macro_rules! append_sql {
    () => {
        "SELECT 'already' AS what, '' AS thread_id \
         WHERE EXISTS (SELECT 1 FROM exchanges WHERE turn_id = $1); \
         INSERT INTO threads (id, channel, sender_id, started_at, last_at, chosen_at) \
         SELECT $5, $6, $7, $8, $3, $3 WHERE $13 = 1 \
         AND NOT EXISTS (SELECT 1 FROM exchanges WHERE turn_id = $1) \
         AND NOT EXISTS (SELECT 1 FROM thread_forgets WHERE channel = $6 AND sender_id = $7 AND at >= $8) \
         AND ($9 = 1 OR NOT EXISTS (SELECT 1 FROM threads \
         WHERE channel = $6 AND sender_id = $7 AND last_at >= $8)) \
         ON CONFLICT (id) DO NOTHING; \
         INSERT INTO exchanges (thread_id, seq, turn_id, at, message, answer, labels, steps, forwarded) \
         SELECT t.id, COALESCE((SELECT MAX(e.seq) FROM exchanges e WHERE e.thread_id = t.id), 0) + 1, \
         $1, $3, $10, $11, $12, $14, $15 FROM threads t \
         WHERE t.channel = $6 AND t.sender_id = $7 AND t.id = COALESCE( \
         (SELECT id FROM threads WHERE id = $5 AND channel = $6 AND sender_id = $7), \
         (SELECT id FROM threads WHERE $13 = 1 AND $9 = 0 AND channel = $6 AND sender_id = $7 \
         AND last_at >= $8 AND NOT EXISTS (SELECT 1 FROM thread_forgets \
         WHERE channel = $6 AND sender_id = $7 AND at >= $8) \
         ORDER BY chosen_at DESC, last_at DESC LIMIT 1)) \
         ON CONFLICT (turn_id) DO NOTHING RETURNING 'kept' AS what, thread_id; \
         UPDATE threads SET last_at = $3 \
         WHERE id = (SELECT thread_id FROM exchanges WHERE turn_id = $1 AND at = $3) AND last_at < $3"
    };
}

const APPEND_AT_ONCE: &str = append_sql!();

/// The turn's end (`$1` the turn, `$2` its record, `$3` now, `$4` its holder's run; a row
/// `what` = `ended` when it was this holder's), then [`APPEND_AT_ONCE`].
const END_AND_APPEND: &str = concat!(
    finish_turn_sql!(),
    " RETURNING 'ended' AS what, '' AS thread_id; ",
    append_sql!()
);

/// A turn's exchange that was not written, in `tx` (after its end, when `ending`): there
/// already, or nowhere. Without an end, nothing of the write stays; with one, the end
/// stays and a thread opened for the exchange goes (a thread is never kept empty).
async fn not_kept(
    tx: &mut metnos_kit::store::sql::Tx,
    thread: &Thread,
    exchange: &NewExchange,
    held: Held,
    ending: bool,
) -> Result<Finish<(Held, Kept)>, ThreadError> {
    let before = tx
        .fetch_optional(
            Statement::new("SELECT seq FROM exchanges WHERE turn_id = $1")
                .bind(exchange.turn_id.clone()),
        )
        .await?;
    let kept = match before {
        Some(_) => Kept::Already,
        None => Kept::Nowhere,
    };
    if !ending {
        return Ok(Finish::Rollback((held, kept)));
    }
    if thread.opening.is_some() {
        tx.execute(
            Statement::new(
                "DELETE FROM threads WHERE id = $1 \
                 AND NOT EXISTS (SELECT 1 FROM exchanges WHERE thread_id = $1)",
            )
            .bind(thread.id.clone()),
        )
        .await?;
    }
    Ok(Finish::Commit((held, kept)))
}

/// Opens `thread` inside the transaction that holds its person's threads, as `opening`
/// says: the id the exchange goes to, and whether this wrote the thread (its `last_at` is
/// the exchange's then). Nothing is opened for a person who forgot since it was decided
/// on (the exchange then finds no thread).
async fn open_in(
    tx: &mut metnos_kit::store::sql::Tx,
    thread: &Thread,
    opening: Opening,
    now_ms: i64,
) -> Result<(String, bool), sqlx::Error> {
    let (channel, sender) = (thread.person.channel(), thread.person.sender_id());
    // One statement: the thread, unless the person forgot since, or (not `/new`) another
    // thread of theirs was written to since.
    let opened = tx
        .execute(
            Statement::new(
                "INSERT INTO threads (id, channel, sender_id, started_at, last_at, chosen_at) \
                 SELECT $1, $2, $3, $4, $5, $5 \
                 WHERE NOT EXISTS (SELECT 1 FROM thread_forgets \
                 WHERE channel = $2 AND sender_id = $3 AND at >= $4) \
                 AND ($6 = 1 OR NOT EXISTS (SELECT 1 FROM threads \
                 WHERE channel = $2 AND sender_id = $3 AND last_at >= $4)) \
                 ON CONFLICT (id) DO NOTHING",
            )
            .bind(thread.id.clone())
            .bind(channel.to_owned())
            .bind(sender.to_owned())
            .bind(thread.started_at)
            .bind(now_ms)
            .bind(i64::from(opening.close_others)),
        )
        .await?;
    if opened == 1 || opening.close_others {
        return Ok((thread.id.clone(), opened == 1));
    }
    let live = tx
        .fetch_optional(
            Statement::new(
                "SELECT id FROM threads WHERE channel = $1 AND sender_id = $2 \
                 AND last_at >= $3 AND NOT EXISTS (SELECT 1 FROM thread_forgets \
                 WHERE channel = $1 AND sender_id = $2 AND at >= $3) \
                 ORDER BY chosen_at DESC, last_at DESC LIMIT 1",
            )
            .bind(channel.to_owned())
            .bind(sender.to_owned())
            .bind(thread.started_at),
        )
        .await?;
    Ok(match live {
        Some(row) => (row.get("id")?, false),
        None => (thread.id.clone(), false),
    })
}

/// Writes `exchange` at the end of `person`'s thread `thread_id` inside the transaction
/// that holds their threads: `false` when nothing was (the thread is not theirs or not
/// kept, or the turn's exchange is there already).
async fn insert_exchange(
    tx: &mut metnos_kit::store::sql::Tx,
    person: &Principal,
    thread_id: &str,
    exchange: &NewExchange,
    now_ms: i64,
) -> Result<bool, sqlx::Error> {
    let labels = serde_json::to_string(&exchange.labels).unwrap_or_else(|_| "[]".into());
    let steps = serde_json::to_string(&exchange.steps).unwrap_or_else(|_| "[]".into());
    let written = tx
        .execute(
            Statement::new(
                "INSERT INTO exchanges \
                 (thread_id, seq, turn_id, at, message, answer, labels, steps, forwarded) \
                 SELECT t.id, COALESCE((SELECT MAX(e.seq) FROM exchanges e WHERE e.thread_id = t.id), 0) + 1, \
                 $4, $5, $6, $7, $8, $9, $10 FROM threads t \
                 WHERE t.id = $1 AND t.channel = $2 AND t.sender_id = $3 \
                 ON CONFLICT (turn_id) DO NOTHING",
            )
            .bind(thread_id.to_owned())
            .bind(person.channel().to_owned())
            .bind(person.sender_id().to_owned())
            .bind(exchange.turn_id.clone())
            .bind(now_ms)
            .bind(exchange.message.clone())
            .bind(exchange.answer.clone())
            .bind(labels)
            .bind(steps)
            .bind(i64::from(exchange.forwarded)),
        )
        .await?;
    Ok(written == 1)
}

/// A text's length in tokens, estimated as the common tokenizers come out on mixed prose
/// and code: about four bytes a token, never less than one per word.
pub fn estimate_tokens(text: &str) -> usize {
    text.len().div_ceil(4).max(text.split_whitespace().count())
}

/// What one exchange costs of the history budget: its message and answer, and a few tokens
/// of each message's framing.
pub fn exchange_tokens(exchange: &Exchange) -> usize {
    const FRAMING: usize = 8;
    estimate_tokens(&exchange.message) + estimate_tokens(&exchange.answer) + 2 * FRAMING
}

/// How many of `exchanges` (oldest first) fit in `budget` tokens, newest kept: the last
/// that many. The rest are older than what the turn sees.
pub fn fitting(exchanges: &[Exchange], budget: usize) -> usize {
    let mut spent = 0usize;
    let mut kept = 0;
    for exchange in exchanges.iter().rev() {
        spent = spent.saturating_add(exchange_tokens(exchange));
        if spent > budget {
            break;
        }
        kept += 1;
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(seq: i64, message: &str, answer: &str) -> Exchange {
        Exchange {
            seq,
            turn_id: format!("t{seq}"),
            at: seq,
            message: message.to_owned(),
            answer: answer.to_owned(),
            labels: Vec::new(),
            steps: Vec::new(),
            forwarded: false,
        }
    }

    #[test]
    fn the_newest_exchanges_are_kept_within_the_budget() {
        let thread: Vec<Exchange> = (1..=10)
            .map(|i| exchange(i, &"m".repeat(400), &"a".repeat(400)))
            .collect();
        // Each costs 100 + 100 + 16 tokens.
        assert_eq!(exchange_tokens(&thread[0]), 216);
        assert_eq!(fitting(&thread, 216 * 3), 3);
        assert_eq!(fitting(&thread, 216 * 3 - 1), 2);
        assert_eq!(fitting(&thread, 0), 0);
        assert_eq!(fitting(&thread, usize::MAX), 10);
        // One huge old exchange does not hide the newer ones, and stops the count.
        let mut thread = thread;
        thread[7] = exchange(8, &"x".repeat(40_000), "");
        assert_eq!(fitting(&thread, 6_000), 2);
    }

    #[test]
    fn tokens_are_estimated_from_bytes_and_words() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("a b c d e f"), 6, "one per word at least");
    }

    #[test]
    fn an_exchange_beyond_its_bounds_is_refused_whole() {
        let ok = NewExchange {
            turn_id: "t".into(),
            message: "hi".into(),
            answer: "hello".into(),
            labels: vec!["file:~/a".into()],
            steps: vec![StepLine {
                executor: "fs_read".into(),
                ok: true,
                labels: vec!["file:~/a".into()],
                scratchpad_id: None,
            }],
            forwarded: false,
        };
        assert!(ok.check().is_ok());
        let long = NewExchange {
            message: "x".repeat(MAX_TEXT + 1),
            ..ok.clone()
        };
        assert_eq!(
            long.check().unwrap_err().to_string(),
            format!(
                "the message is {} bytes; a thread keeps at most {MAX_TEXT}",
                MAX_TEXT + 1
            )
        );
        let many = NewExchange {
            labels: vec!["web:a.example".into(); MAX_LABELS + 1],
            ..ok
        };
        assert!(
            many.check()
                .unwrap_err()
                .to_string()
                .contains("answer's labels")
        );
    }
}
