//! Stores for tests: a SQLite file in a temporary directory, or a fresh database on the
//! throwaway PostgreSQL server that the README's test command starts
//! (`METNOS_TEST_POSTGRES_URL`). Only tests use this module.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::config::StoreSpec;

/// The variable naming the test PostgreSQL server.
pub const POSTGRES_URL_ENV: &str = "METNOS_TEST_POSTGRES_URL";

/// The test PostgreSQL server's admin URL. Panics with instructions when unset: the
/// PostgreSQL half of a dual-backend suite must not silently pass without a server.
pub fn postgres_admin_url() -> String {
    std::env::var(POSTGRES_URL_ENV).unwrap_or_else(|_| {
        panic!(
            "{POSTGRES_URL_ENV} is not set: run the tests with `make test`, which starts a throwaway PostgreSQL"
        )
    })
}

/// A store that exists for one test.
#[derive(Debug)]
pub enum TestStore {
    Sqlite(tempfile::TempDir),
    Postgres { url: String },
}

impl TestStore {
    /// A SQLite file in a new temporary directory.
    pub fn sqlite() -> TestStore {
        TestStore::Sqlite(tempfile::tempdir().expect("temporary directory"))
    }

    /// A new, empty database on the test PostgreSQL server.
    pub async fn postgres() -> TestStore {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let admin_url = postgres_admin_url();
        let database = format!(
            "metnos_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let admin = sqlx::PgPool::connect(&admin_url)
            .await
            .expect("connect to the test PostgreSQL server");
        for statement in [
            format!("DROP DATABASE IF EXISTS {database}"),
            format!("CREATE DATABASE {database}"),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(statement))
                .execute(&admin)
                .await
                .expect("create a test database");
        }
        admin.close().await;
        let (base, _) = admin_url
            .rsplit_once('/')
            .expect("the test URL names a database");
        TestStore::Postgres {
            url: format!("{base}/{database}"),
        }
    }

    /// Where the store is.
    pub fn spec(&self) -> StoreSpec {
        match self {
            // A nested path: opening must create the directories.
            TestStore::Sqlite(dir) => StoreSpec::Sqlite {
                path: dir.path().join("data/store.db"),
            },
            TestStore::Postgres { url } => StoreSpec::Postgres { url: url.clone() },
        }
    }

    /// The value of a service's `store` config key for this store.
    pub fn config_value(&self) -> String {
        match self.spec() {
            StoreSpec::Sqlite { path } => format!("sqlite:{}", path.display()),
            StoreSpec::Postgres { url } => url,
        }
    }
}

/// Runs each listed `async fn case(store: TestStore)` twice, as `sqlite::case` and
/// `postgres::case`: one store test suite for both backends.
#[macro_export]
macro_rules! store_suite {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case($crate::testing::TestStore::sqlite()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case($crate::testing::TestStore::postgres().await).await;
                }
            )*
        }
    };
}
