//! The store test suite: the same cases against SQLite and a real PostgreSQL server.
//!
//! PostgreSQL comes from `METNOS_TEST_POSTGRES_URL` (the README's test command starts a
//! throwaway server and sets it); each case creates a database of its own there.

use std::time::Duration;

use metnos_kit::ServiceName;
use metnos_kit::config::StoreSpec;
use metnos_kit::store::{
    self, Db, EmbeddedMigration, Finish, Migrations, Pool, Statement, StoreError,
};
use metnos_kit::testing::TestStore;
use sqlx::Row;

const SQLITE: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "notes",
        sql: include_str!("migrations/sqlite/0001_notes.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "notes tag",
        sql: include_str!("migrations/sqlite/0002_notes_tag.sql"),
    },
];
const POSTGRES: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "notes",
        sql: include_str!("migrations/postgres/0001_notes.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "notes tag",
        sql: include_str!("migrations/postgres/0002_notes_tag.sql"),
    },
];
const MIGRATIONS: Migrations = Migrations {
    sqlite: SQLITE,
    postgres: POSTGRES,
};
const TIMEOUT: Duration = Duration::from_secs(10);

/// A place for one case's store, removed afterwards.
type Backend = TestStore;

async fn insert_note(db: &Db, body: &str, tag: &str) -> i64 {
    let sql = "INSERT INTO notes (body, created_ms, tag) VALUES ($1, $2, $3) RETURNING id";
    match db.pool() {
        Pool::Sqlite(pool) => {
            sqlx::query_scalar(sql)
                .bind(body)
                .bind(1_700_000_000_000_i64)
                .bind(tag)
                .fetch_one(pool)
                .await
        }
        Pool::Postgres(pool) => {
            sqlx::query_scalar(sql)
                .bind(body)
                .bind(1_700_000_000_000_i64)
                .bind(tag)
                .fetch_one(pool)
                .await
        }
    }
    .unwrap()
}

async fn notes(db: &Db) -> Vec<(i64, String, String)> {
    let sql = "SELECT id, body, tag FROM notes ORDER BY id";
    let rows: Vec<(i64, String, String)> = match db.pool() {
        Pool::Sqlite(pool) => sqlx::query(sql)
            .fetch_all(pool)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect(),
        Pool::Postgres(pool) => sqlx::query(sql)
            .fetch_all(pool)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect(),
    };
    rows
}

async fn applied_versions(db: &Db) -> Vec<i64> {
    let sql = "SELECT version FROM _sqlx_migrations ORDER BY version";
    match db.pool() {
        Pool::Sqlite(pool) => sqlx::query_scalar(sql).fetch_all(pool).await,
        Pool::Postgres(pool) => sqlx::query_scalar(sql).fetch_all(pool).await,
    }
    .unwrap()
}

async fn opens_migrates_twice_and_round_trips(backend: Backend) {
    let spec = backend.spec();
    let db = store::open(&spec, "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(applied_versions(&db).await, vec![1, 2]);
    let id = insert_note(&db, "héllo, wörld — 'quoted'", "t1").await;
    db.close().await;

    // Opening again re-runs nothing and keeps the data.
    let db = store::open(&spec, "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(applied_versions(&db).await, vec![1, 2]);
    assert_eq!(
        notes(&db).await,
        vec![(id, "héllo, wörld — 'quoted'".to_owned(), "t1".to_owned())]
    );
    assert_eq!(db.owner().await.unwrap(), "policy");
    db.ping().await.unwrap();
    db.close().await;
}

async fn refuses_a_store_owned_by_another_service(backend: Backend) {
    let spec = backend.spec();
    store::open(&spec, "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap()
        .close()
        .await;
    let err = store::open(&spec, "approval", &Migrations::NONE, TIMEOUT)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::WrongOwner { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("belongs to service policy, not approval"),
        "{message}"
    );
}

async fn refuses_a_store_whose_migrations_are_unknown(backend: Backend) {
    // A newer binary migrated it; this one does not know version 2: fail, never guess.
    let spec = backend.spec();
    store::open(&spec, "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap()
        .close()
        .await;
    let older = Migrations {
        sqlite: &SQLITE[..1],
        postgres: &POSTGRES[..1],
    };
    let err = store::open(&spec, "policy", &older, TIMEOUT)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Migrate { .. }), "{err}");
}

async fn a_locked_transaction_ends_as_its_work_says_and_holds_its_key(backend: Backend) {
    let db = store::open(&backend.spec(), "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap();
    let insert = |body: &'static str| {
        Statement::new("INSERT INTO notes (body, created_ms, tag) VALUES ($1, $2, $3)")
            .bind(body)
            .bind(1_700_000_000_000_i64)
            .bind(Some("t"))
    };
    let kept: u64 = db
        .locked_tx("metnos.test", async |tx| {
            Ok::<_, sqlx::Error>(Finish::Commit(tx.execute(insert("kept")).await?))
        })
        .await
        .unwrap();
    assert_eq!(kept, 1);
    db.locked_tx("metnos.test", async |tx| {
        tx.execute(insert("rolled back")).await?;
        Ok::<_, sqlx::Error>(Finish::Rollback(()))
    })
    .await
    .unwrap();
    let failed = db
        .locked_tx("metnos.test", async |tx| {
            tx.execute(insert("failed")).await?;
            tx.execute(Statement::new("SELECT nothing FROM nowhere"))
                .await
                .map(Finish::Commit)
        })
        .await;
    assert!(failed.is_err());
    let bodies: Vec<String> = notes(&db).await.into_iter().map(|n| n.1).collect();
    assert_eq!(bodies, vec!["kept".to_owned()]);

    // Read-then-write under one key: eight at once never read the same count.
    let writers = (0..8).map(|_| {
        let db = db.clone();
        tokio::spawn(async move {
            db.locked_tx("metnos.test", async |tx| {
                let count = Statement::new("SELECT COUNT(*) FROM notes");
                let n: i64 = tx.fetch_one(count).await?.get(0)?;
                let next = Statement::new(
                    "INSERT INTO notes (body, created_ms, tag) VALUES ('counted', $1, '')",
                )
                .bind(n);
                tx.execute(next).await?;
                Ok::<_, sqlx::Error>(Finish::Commit(()))
            })
            .await
        })
    });
    for done in futures::future::join_all(writers).await {
        done.unwrap().unwrap();
    }
    let counted = db
        .fetch_all(Statement::new(
            "SELECT created_ms FROM notes WHERE body = 'counted' ORDER BY created_ms",
        ))
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<i64, _>(0).unwrap())
        .collect::<Vec<_>>();
    assert_eq!(counted, (1..=8).collect::<Vec<i64>>());
    db.close().await;
}

/// A transaction in one round trip (SQLite) keeps all of its statements or none: one that
/// fails, or a caller that stops waiting mid-way, leaves nothing behind, and the pool's
/// connections go on working (none is reused inside the transaction left open). On
/// PostgreSQL it is refused, saying so.
async fn a_transaction_in_one_round_trip_is_all_or_nothing(backend: Backend) {
    let db = store::open(&backend.spec(), "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap();
    let both = |a: &'static str, b: &'static str| {
        Statement::new(
            "INSERT INTO notes (body, created_ms, tag) VALUES ($1, 1, 't') RETURNING id; \
             INSERT INTO notes (body, created_ms, tag) VALUES ($2, 2, 't') RETURNING id",
        )
        .bind(a)
        .bind(b)
    };
    if let TestStore::Postgres { .. } = backend {
        let refused = db.sqlite_tx_at_once(both("a", "b")).await.unwrap_err();
        assert!(refused.to_string().contains("SQLite"), "{refused}");
        assert!(notes(&db).await.is_empty());
        return db.close().await;
    }
    assert_eq!(db.sqlite_tx_at_once(both("a", "b")).await.unwrap().len(), 2);
    let failing = Statement::new(
        "INSERT INTO notes (body, created_ms, tag) VALUES ('failed', 3, 't'); \
         SELECT nothing FROM nowhere",
    );
    assert!(db.sqlite_tx_at_once(failing).await.is_err());
    // The caller stops waiting while its second statement runs.
    let slow = Statement::new(
        "INSERT INTO notes (body, created_ms, tag) VALUES ('dropped', 4, 't'); \
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1500000) \
         SELECT COUNT(*) FROM c",
    );
    let waited = tokio::time::timeout(Duration::from_millis(100), db.sqlite_tx_at_once(slow));
    assert!(waited.await.is_err(), "it was still running");
    for round in 0..8 {
        let rows = db.sqlite_tx_at_once(both("c", "d")).await.unwrap();
        assert_eq!(rows.len(), 2, "round {round}");
        db.locked_tx("metnos.test", async |tx| {
            tx.execute(Statement::new(
                "INSERT INTO notes (body, created_ms, tag) VALUES ('locked', 5, 't')",
            ))
            .await
            .map(Finish::Commit)
        })
        .await
        .unwrap();
    }
    let bodies: Vec<String> = notes(&db).await.into_iter().map(|n| n.1).collect();
    assert_eq!(&bodies[..2], ["a", "b"]);
    assert!(
        !bodies.iter().any(|b| b == "failed" || b == "dropped"),
        "{bodies:?}"
    );
    assert_eq!(bodies.len(), 2 + 8 * 3);
    db.close().await;
}

#[tokio::test]
async fn sqlite_a_transaction_in_one_round_trip_is_all_or_nothing() {
    a_transaction_in_one_round_trip_is_all_or_nothing(Backend::sqlite()).await;
}

#[tokio::test]
async fn postgres_a_transaction_in_one_round_trip_is_all_or_nothing() {
    a_transaction_in_one_round_trip_is_all_or_nothing(Backend::postgres().await).await;
}

#[tokio::test]
async fn sqlite_a_locked_transaction_ends_as_its_work_says_and_holds_its_key() {
    a_locked_transaction_ends_as_its_work_says_and_holds_its_key(Backend::sqlite()).await;
}

#[tokio::test]
async fn postgres_a_locked_transaction_ends_as_its_work_says_and_holds_its_key() {
    a_locked_transaction_ends_as_its_work_says_and_holds_its_key(Backend::postgres().await).await;
}

#[tokio::test]
async fn sqlite_opens_migrates_twice_and_round_trips() {
    opens_migrates_twice_and_round_trips(Backend::sqlite()).await;
}

#[tokio::test]
async fn postgres_opens_migrates_twice_and_round_trips() {
    let backend = Backend::postgres().await;
    opens_migrates_twice_and_round_trips(backend).await;
}

#[tokio::test]
async fn sqlite_refuses_a_store_owned_by_another_service() {
    refuses_a_store_owned_by_another_service(Backend::sqlite()).await;
}

#[tokio::test]
async fn postgres_refuses_a_store_owned_by_another_service() {
    refuses_a_store_owned_by_another_service(Backend::postgres().await).await;
}

#[tokio::test]
async fn sqlite_refuses_a_store_whose_migrations_are_unknown() {
    refuses_a_store_whose_migrations_are_unknown(Backend::sqlite()).await;
}

#[tokio::test]
async fn postgres_refuses_a_store_whose_migrations_are_unknown() {
    refuses_a_store_whose_migrations_are_unknown(Backend::postgres().await).await;
}

#[tokio::test]
async fn sqlite_store_is_in_wal_mode() {
    let backend = Backend::sqlite();
    let db = store::open(&backend.spec(), "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap();
    let Pool::Sqlite(pool) = db.pool() else {
        unreachable!()
    };
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn a_sqlite_store_its_wal_shm_lock_and_new_folder_are_private_to_the_owner() {
    use std::os::unix::fs::PermissionsExt;
    // The umask most machines have: without care, SQLite would make 0644 files.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("new-folder").join("planner.db");
    let spec = StoreSpec::Sqlite { path: path.clone() };
    let db = store::open(&spec, "planner", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap();
    let Pool::Sqlite(pool) = db.pool() else {
        unreachable!("a SQLite spec opens a SQLite pool")
    };
    sqlx::query("INSERT INTO notes (body, created_ms) VALUES ('a conversation', 1)")
        .execute(pool)
        .await
        .unwrap();
    let mode = |suffix: &str| {
        let file = format!("{}{suffix}", path.display());
        let meta = std::fs::metadata(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        meta.permissions().mode() & 0o777
    };
    assert_eq!(mode(""), 0o600, "the database file");
    assert_eq!(mode("-wal"), 0o600, "the write-ahead log");
    assert_eq!(mode("-shm"), 0o600, "the shared-memory index");
    assert_eq!(mode(".lock"), 0o600, "the lock file");
    let folder = std::fs::metadata(path.parent().unwrap()).unwrap();
    assert_eq!(folder.permissions().mode() & 0o777, 0o700, "the new folder");
    db.close().await;
}

#[tokio::test]
async fn unreachable_postgres_fails_fast_with_a_clear_message_and_no_password() {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let spec = StoreSpec::Postgres {
        url: "postgres://metnos:hunter2@127.0.0.1:1/metnos".to_owned(),
    };
    let started = std::time::Instant::now();
    let err = store::open(&spec, "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        started.elapsed() < TIMEOUT,
        "waited for the whole timeout: {message}"
    );
    assert!(
        message.starts_with("cannot open postgres://metnos:***@127.0.0.1:1/metnos"),
        "{message}"
    );
    assert!(message.to_lowercase().contains("refused"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
    assert!(!message.contains('\n'), "{message}");
}

#[tokio::test]
async fn a_missing_postgres_database_is_named() {
    let admin_url = metnos_kit::testing::postgres_admin_url();
    let (base, _) = admin_url.rsplit_once('/').unwrap();
    let spec = StoreSpec::Postgres {
        url: format!("{base}/metnos_no_such_db"),
    };
    let message = store::open(&spec, "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap_err()
        .to_string();
    assert!(message.contains("metnos_no_such_db"), "{message}");
    assert!(message.contains("does not exist"), "{message}");
}

#[test]
fn every_service_has_its_own_default_sqlite_file() {
    let dir = std::path::Path::new("/data");
    let files: Vec<StoreSpec> = metnos_kit::config::SERVICES
        .into_iter()
        .map(|s: ServiceName| StoreSpec::parse("sqlite", dir, s).unwrap())
        .collect();
    for (i, a) in files.iter().enumerate() {
        for b in &files[i + 1..] {
            assert_ne!(a, b);
        }
    }
}

#[tokio::test]
async fn a_sqlite_store_is_owned_by_one_process_at_a_time() {
    let backend = Backend::sqlite();
    let spec = backend.spec();
    let first = store::open(&spec, "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap();
    assert!(first.single_writer());
    let err = store::open(&spec, "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    assert!(
        err.to_string().contains("in use by another process"),
        "{err}"
    );
    // Closing releases it, even while clones of the handle are still around.
    let clone = first.clone();
    first.close().await;
    let second = store::open(&spec, "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap();
    second.close().await;
    drop(clone);
}

async fn closing_does_not_wait_forever_for_a_connection_in_use(backend: Backend) {
    let db = store::open(&backend.spec(), "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap();
    // A call still holding a connection after the grace period.
    let held = match db.pool() {
        store::Pool::Sqlite(pool) => Held::Sqlite(pool.acquire().await.unwrap()),
        store::Pool::Postgres(pool) => Held::Postgres(pool.acquire().await.unwrap()),
    };
    assert!(!db.close_within(Duration::from_millis(200)).await);
    drop(held);
    // With nothing held, closing is complete.
    let db = store::open(&backend.spec(), "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap();
    assert!(db.close_within(Duration::from_secs(5)).await);
}

#[allow(dead_code)] // held only to keep the connection out of the pool
enum Held {
    Sqlite(sqlx::pool::PoolConnection<sqlx::Sqlite>),
    Postgres(sqlx::pool::PoolConnection<sqlx::Postgres>),
}

#[tokio::test]
async fn sqlite_closing_does_not_wait_forever_for_a_connection_in_use() {
    closing_does_not_wait_forever_for_a_connection_in_use(Backend::sqlite()).await;
}

#[tokio::test]
async fn postgres_closing_does_not_wait_forever_for_a_connection_in_use() {
    closing_does_not_wait_forever_for_a_connection_in_use(Backend::postgres().await).await;
}

#[tokio::test]
async fn a_postgres_store_is_shared_by_replicas() {
    let backend = Backend::postgres().await;
    let spec = backend.spec();
    let a = store::open(&spec, "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap();
    let b = store::open(&spec, "policy", &MIGRATIONS, TIMEOUT)
        .await
        .unwrap();
    assert!(!a.single_writer() && !b.single_writer());
    insert_note(&a, "from a", "").await;
    assert_eq!(notes(&b).await.len(), 1);
}

#[tokio::test]
async fn replicas_opening_a_new_postgres_store_at_once_all_succeed() {
    let backend = Backend::postgres().await;
    let spec = backend.spec();
    let opens = (0..6).map(|_| {
        let spec = spec.clone();
        tokio::spawn(async move { store::open(&spec, "policy", &MIGRATIONS, TIMEOUT).await })
    });
    for result in futures::future::join_all(opens).await {
        let db = result
            .unwrap()
            .unwrap_or_else(|e| panic!("a replica failed to open: {e}"));
        assert_eq!(db.owner().await.unwrap(), "policy");
    }
}
