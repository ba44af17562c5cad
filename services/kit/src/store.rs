//! Opening a service's relational store: SQLite (a WAL-mode file under the data
//! directory, the embedded default) or PostgreSQL (by `postgres://` URL), with the
//! service's migrations applied at start-up.
//!
//! Each store records which service owns it, so two services pointed at one database by
//! mistake fail at start-up with a clear message instead of mixing their migrations.
//! Services keep one store trait with a SQLite and a Postgres implementation over [`Db`];
//! [`sql`] writes a query once for both, and holds the locked transaction
//! ([`Db::locked_tx`]) a decision shared by replicas is taken in.

use std::borrow::Cow;
use std::fs::File;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Connection, SqlSafeStr};

use crate::config::{ServiceName, StoreSpec, redact_url};

pub mod sql;
pub use sql::{Finish, Row, Statement, Tx};

/// One migration, embedded in the binary with `include_str!`.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedMigration {
    /// Increasing version, e.g. 1 for `0001_grants.sql`.
    pub version: i64,
    pub description: &'static str,
    pub sql: &'static str,
}

/// A service's migrations for both backends (their SQL dialects differ).
#[derive(Debug, Clone, Copy)]
pub struct Migrations {
    pub sqlite: &'static [EmbeddedMigration],
    pub postgres: &'static [EmbeddedMigration],
}

impl Migrations {
    /// No schema of the service's own (yet).
    pub const NONE: Migrations = Migrations {
        sqlite: &[],
        postgres: &[],
    };
}

fn migrator(migrations: &[EmbeddedMigration]) -> Migrator {
    Migrator::with_migrations(
        migrations
            .iter()
            .map(|m| {
                Migration::new(
                    m.version,
                    Cow::Borrowed(m.description),
                    MigrationType::Simple,
                    AssertSqlSafe(m.sql).into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
}

/// How long closing a store waits for connections still in use.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The connection pool of one backend.
#[derive(Debug, Clone)]
pub enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// An open, migrated store. A SQLite store also holds an exclusive lock on
/// `<file>.lock`: one process at a time owns a SQLite store, so a service may trust that
/// nobody else writes it (the policy service caches grants on that ground).
#[derive(Debug, Clone)]
pub struct Db {
    pool: Pool,
    lock: Option<Arc<Mutex<Option<File>>>>,
    /// SQLite's writers in this process, one at a time (see [`Db::writing`]).
    writer: Option<Arc<tokio::sync::Mutex<()>>>,
}

/// The turn of one SQLite writer in this process; dropped, the next one's.
pub type Writing = Option<tokio::sync::OwnedMutexGuard<()>>;

impl Db {
    /// Waits for this process's other SQLite writers to finish, and holds the store's
    /// writes until the returned turn is dropped (PostgreSQL: nothing to wait for).
    ///
    /// SQLite lets one connection write at a time; another that tries meanwhile is told
    /// "busy" and its busy handler *sleeps* — 1, 2, 5, 10 ms — before trying again. Two
    /// turns writing at once therefore waited milliseconds each with the CPU idle: the
    /// serial section that kept two clients at 1.1x the throughput of one (issue 45,
    /// `strace` of `turn_load`: 304 such sleeps in 520 turns with two clients, 3 with one).
    /// Queued here, the next writer starts as the last one commits. Not waited for longer
    /// than the busy timeout: a write nested in another's turn goes on as it did before
    /// (SQLite's own wait), never hangs.
    pub async fn writing(&self) -> Writing {
        let writer = self.writer.clone()?;
        tokio::time::timeout(SQLITE_BUSY, writer.lock_owned())
            .await
            .ok()
    }

    /// The pool, for queries (see [`on_db!`](crate::on_db)).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Whether this process is the only writer of the store (a locked SQLite file).
    pub fn single_writer(&self) -> bool {
        self.lock.is_some()
    }

    /// Closes every connection and releases the SQLite lock. Connections in use are
    /// waited for up to [`CLOSE_WAIT`]: a call still running after a service's grace
    /// period must not keep the process from stopping.
    pub async fn close(&self) {
        self.close_within(CLOSE_WAIT).await;
    }

    /// [`Db::close`], waiting at most `wait` for connections in use; `false` if some were
    /// still out (they close when their holders let go, or with the process).
    pub async fn close_within(&self, wait: Duration) -> bool {
        let closing = async {
            match &self.pool {
                Pool::Sqlite(pool) => pool.close().await,
                Pool::Postgres(pool) => pool.close().await,
            }
        };
        let closed = tokio::time::timeout(wait, closing).await.is_ok();
        if !closed {
            tracing::warn!(
                backend = self.backend(),
                wait_seconds = wait.as_secs_f64(),
                "store closed with connections still in use (a call still running)"
            );
        }
        if let Some(lock) = &self.lock {
            drop(lock.lock().unwrap_or_else(|e| e.into_inner()).take());
        }
        closed
    }

    /// The service that owns this store.
    pub async fn owner(&self) -> Result<String, sqlx::Error> {
        let query = "SELECT value FROM metnos_store WHERE key = 'owner'";
        match &self.pool {
            Pool::Sqlite(pool) => sqlx::query_scalar(query).fetch_one(pool).await,
            Pool::Postgres(pool) => sqlx::query_scalar(query).fetch_one(pool).await,
        }
    }

    /// `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match &self.pool {
            Pool::Sqlite(_) => "sqlite",
            Pool::Postgres(_) => "postgres",
        }
    }

    /// Whether the store answers a trivial query now.
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        match &self.pool {
            Pool::Sqlite(pool) => sqlx::query("SELECT 1").execute(pool).await.map(|_| ()),
            Pool::Postgres(pool) => sqlx::query("SELECT 1").execute(pool).await.map(|_| ()),
        }
    }
}

/// Runs the same code against whichever pool a [`Db`] holds: `on_db!(db, pool =>
/// sqlx::query(SQL).execute(pool).await)`. Both arms must produce the same type, so decode
/// rows inside the body. The SQL must suit both backends (`$1` placeholders work on both).
#[macro_export]
macro_rules! on_db {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db.pool() {
            $crate::store::Pool::Sqlite($pool) => $body,
            $crate::store::Pool::Postgres($pool) => $body,
        }
    };
}

/// The person a stored row names, checked as any principal is: a row that names none
/// (edited by hand, written by a bug) is a decode error, never a person.
pub fn stored_principal(
    channel: &str,
    sender_id: &str,
) -> Result<metnos_core::Principal, sqlx::Error> {
    metnos_core::Principal::new(channel, sender_id)
        .map_err(|e| sqlx::Error::Decode(format!("stored {e}").into()))
}

/// Whether a driver error means the store cannot be reached (as opposed to a bad query
/// or a constraint): the service should answer UNAVAILABLE and report NOT_SERVING.
pub fn is_unreachable(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_)
    )
}

/// What a caller is answered when `service`'s store failed: UNAVAILABLE ("try again
/// shortly") when the store cannot be reached, INTERNAL otherwise. `store` names it for
/// people ("the grant store"). The cause is logged here and never sent: a database's error
/// text can name tables, paths and hosts.
pub fn failure_status(service: ServiceName, store: &str, error: &sqlx::Error) -> tonic::Status {
    if is_unreachable(error) {
        tracing::error!(%service, error = %error, "store unreachable");
        tonic::Status::unavailable(format!("{store} is unreachable; try again shortly"))
    } else {
        tracing::error!(%service, error = %error, "store failed");
        tonic::Status::internal(format!("{store} failed; see the {service} service log"))
    }
}

/// A store could not be opened. Messages never contain a password.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the directory {dir} for {store}: {source}")]
    CreateDir {
        dir: String,
        store: String,
        source: std::io::Error,
    },
    #[error("cannot create {file} for {store}: {source}")]
    CreateFile {
        file: String,
        store: String,
        source: std::io::Error,
    },
    #[error("cannot open {store}: {message}")]
    Open { store: String, message: String },
    #[error("cannot connect to {store}: timed out after {seconds} s")]
    Timeout { store: String, seconds: u64 },
    #[error(
        "{store} belongs to service {found}, not {expected}: give each service its own database"
    )]
    WrongOwner {
        store: String,
        expected: String,
        found: String,
    },
    #[error("cannot migrate {store}: {message}")]
    Migrate { store: String, message: String },
    #[error("{store} is in use by another process (lock {lock}); one process owns a SQLite store")]
    Locked { store: String, lock: String },
    #[error("cannot lock {lock} for {store}: {source}")]
    Lock {
        store: String,
        lock: String,
        source: std::io::Error,
    },
}

/// How long a SQLite write waits for another to finish before it fails as busy.
const SQLITE_BUSY: Duration = Duration::from_secs(5);

/// At most this many connections to one SQLite store: readers run side by side in WAL
/// mode; the writer is one at a time whatever the count.
const SQLITE_CONNECTIONS: u32 = 8;

/// Opens the store, checks that `owner` owns it (claiming a new one), and applies the
/// migrations of the matching backend. Applying them again is a no-op.
pub async fn open(
    spec: &StoreSpec,
    owner: &str,
    migrations: &Migrations,
    connect_timeout: Duration,
) -> Result<Db, StoreError> {
    let store = spec.describe();
    let db = match spec {
        StoreSpec::Sqlite { path } => {
            if let Some(dir) = path.parent() {
                crate::datadir::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                    dir: dir.display().to_string(),
                    store: store.clone(),
                    source,
                })?;
            }
            let lock = lock_file(path, &store)?;
            create_private(path, &store)?;
            let options = SqliteConnectOptions::new()
                .filename(path)
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(SQLITE_BUSY)
                .foreign_keys(true)
                // Reads of a large store come from memory, not a 2 MB page cache.
                .pragma("mmap_size", "268435456")
                .pragma("cache_size", "-32000");
            let pool = SqlitePoolOptions::new()
                .max_connections(SQLITE_CONNECTIONS)
                // Each connection is a thread of sqlx's and a page cache: one unused for a
                // minute closes (a store touched now and then keeps one), and opens again
                // in well under a millisecond when a burst needs it. The pool hands out its
                // idle connections in turn, so a store its background jobs touch every few
                // seconds keeps those it once opened (issue 45: 18 sqlx threads at rest).
                .min_connections(1)
                .idle_timeout(Duration::from_secs(60))
                // A local file does not drop connections; a ping before every query
                // would double the cost of each one.
                .test_before_acquire(false)
                .acquire_timeout(connect_timeout)
                .connect_with(options)
                .await
                .map_err(|e| open_error(&store, &e))?;
            Db {
                pool: Pool::Sqlite(pool),
                lock: Some(Arc::new(Mutex::new(Some(lock)))),
                writer: Some(Arc::default()),
            }
        }
        StoreSpec::Postgres { url } => {
            let options = PgConnectOptions::from_str(url).map_err(|e| open_error(&store, &e))?;
            // One direct attempt first: the pool would retry until its timeout and then
            // report only that it timed out, losing "connection refused" or "no such
            // database", which is what a person needs to read.
            let probe =
                tokio::time::timeout(connect_timeout, sqlx::PgConnection::connect_with(&options))
                    .await
                    .map_err(|_| StoreError::Timeout {
                        store: store.clone(),
                        seconds: connect_timeout.as_secs(),
                    })?
                    .map_err(|e| open_error(&store, &e))?;
            let _ = probe.close().await;
            let pool = PgPoolOptions::new()
                .max_connections(10)
                .acquire_timeout(connect_timeout)
                .connect_with(options)
                .await
                .map_err(|e| open_error(&store, &e))?;
            Db {
                pool: Pool::Postgres(pool),
                lock: None,
                writer: None,
            }
        }
    };

    claim(&db, &store, owner).await?;

    let (migrator, backend) = match db.pool() {
        Pool::Sqlite(_) => (migrator(migrations.sqlite), "sqlite"),
        Pool::Postgres(_) => (migrator(migrations.postgres), "postgres"),
    };
    let migrated = match db.pool() {
        Pool::Sqlite(pool) => migrator.run(pool).await,
        Pool::Postgres(pool) => migrator.run(pool).await,
    };
    migrated.map_err(|e| StoreError::Migrate {
        store: store.clone(),
        message: redact_in(&e.to_string()),
    })?;
    tracing::info!(%store, backend, owner, "store open");
    Ok(db)
}

/// Takes the exclusive lock of a SQLite store (`<file>.lock`), or says who holds it.
fn lock_file(path: &std::path::Path, store: &str) -> Result<File, StoreError> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = std::path::PathBuf::from(lock_path);
    let lock_error = |source| StoreError::Lock {
        store: store.to_owned(),
        lock: lock_path.display().to_string(),
        source,
    };
    let file = crate::datadir::file_options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(lock_error)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Locked {
            store: store.to_owned(),
            lock: lock_path.display().to_string(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(lock_error(e)),
    }
}

/// Creates a new SQLite file 0600 before SQLite opens it: SQLite would create it with the
/// umask's mode (0644), and gives its `-wal` and `-shm` the mode of the database file.
fn create_private(path: &std::path::Path, store: &str) -> Result<(), StoreError> {
    match crate::datadir::file_options()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(StoreError::CreateFile {
            file: path.display().to_string(),
            store: store.to_owned(),
            source,
        }),
    }
}

async fn claim(db: &Db, store: &str, owner: &str) -> Result<(), StoreError> {
    let create =
        "CREATE TABLE IF NOT EXISTS metnos_store (key TEXT PRIMARY KEY, value TEXT NOT NULL)";
    let insert =
        "INSERT INTO metnos_store (key, value) VALUES ('owner', $1) ON CONFLICT (key) DO NOTHING";
    let result = match db.pool() {
        Pool::Sqlite(pool) => match sqlx::query(create).execute(pool).await {
            Ok(_) => sqlx::query(insert)
                .bind(owner)
                .execute(pool)
                .await
                .map(|_| ()),
            Err(e) => Err(e),
        },
        // Replicas starting together would race on CREATE TABLE IF NOT EXISTS (it is not
        // atomic in PostgreSQL's catalog): one at a time, under an advisory lock held for
        // this transaction only.
        Pool::Postgres(pool) => {
            async {
                let mut tx = pool.begin().await?;
                sqlx::query("SELECT pg_advisory_xact_lock(7028355001)")
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(create).execute(&mut *tx).await?;
                sqlx::query(insert).bind(owner).execute(&mut *tx).await?;
                tx.commit().await
            }
            .await
        }
    };
    result.map_err(|e| open_error(store, &e))?;
    let found = db.owner().await.map_err(|e| open_error(store, &e))?;
    if found != owner {
        return Err(StoreError::WrongOwner {
            store: store.to_owned(),
            expected: owner.to_owned(),
            found,
        });
    }
    Ok(())
}

fn open_error(store: &str, e: &sqlx::Error) -> StoreError {
    StoreError::Open {
        store: store.to_owned(),
        message: redact_in(&e.to_string()),
    }
}

/// Redacts any URL-looking word of a driver message, in case one echoes the URL.
fn redact_in(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message);
    first
        .split(' ')
        .map(|word| {
            if word.contains("://") {
                redact_url(word)
            } else {
                word.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
