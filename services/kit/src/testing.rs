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

/// A service served in-process on a loopback port, stopped on drop.
#[derive(Debug)]
pub struct TestServer {
    pub url: String,
    /// The service it is.
    pub service: crate::ServiceName,
    /// Where the installation's certificates are.
    config: crate::Config,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    /// Serves `service` with `serve(listener, shutdown)` on `listener`, or on a new port-0
    /// one, and waits until its health reports SERVING. `config` gives the certificates
    /// ([`config`] makes them).
    pub async fn start<F, Fut, E>(
        config: &crate::Config,
        service: crate::ServiceName,
        listener: Option<tokio::net::TcpListener>,
        serve: F,
    ) -> TestServer
    where
        F: FnOnce(tokio::net::TcpListener, crate::ShutdownFuture) -> Fut,
        Fut: std::future::Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let listener = match listener {
            Some(listener) => listener,
            None => tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind"),
        };
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown: crate::ShutdownFuture = Box::pin(async move {
            let _ = stopped.await;
        });
        let future = serve(listener, shutdown);
        let task = tokio::spawn(async move {
            if let Err(e) = future.await {
                panic!("test server failed: {e}");
            }
        });
        let server = TestServer {
            url,
            service,
            config: config.clone(),
            stop: Some(stop),
            task: Some(task),
        };
        assert!(
            server.wait_health(service.grpc_name(), true).await,
            "{service} never reported SERVING"
        );
        server
    }

    /// Waits (bounded, 10 s) for health to say SERVING (`true`) or not; false on timeout.
    pub async fn wait_health(&self, grpc_name: &str, serving: bool) -> bool {
        let channel = self.channel();
        for _ in 0..400 {
            let health = crate::client::probe(
                channel.clone(),
                grpc_name,
                std::time::Duration::from_secs(1),
            )
            .await;
            if health.is_serving() == serving {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        false
    }

    /// A traced channel to the server, as the owner.
    pub fn channel(&self) -> crate::client::TracedChannel {
        self.channel_as(crate::tls::Identity::Owner)
    }

    /// A traced channel to the server, presenting `identity`'s certificate.
    pub fn channel_as(&self, identity: crate::tls::Identity) -> crate::client::TracedChannel {
        let tls = crate::tls::Tls::load(&self.config, identity).expect("test certificates");
        crate::client::channel(&tls, crate::tls::Identity::of(self.service), &self.url)
            .expect("valid URL")
    }

    /// Stops the server and waits for it to finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("test server task");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A config for tests: data under `data_dir`, `~` = `/home/roberto`, short grace, and the
/// installation's certificates under `data_dir/pki` (made if missing).
pub fn config(data_dir: &std::path::Path) -> crate::Config {
    let mut config = crate::Config {
        data_dir: data_dir.to_path_buf(),
        ..crate::Config::default()
    };
    config.runtime.user_home = std::path::PathBuf::from("/home/roberto");
    config.server.shutdown_grace_seconds = 1;
    config.tls.dir = data_dir.join("pki");
    crate::tls::init(&config.tls.dir, false).expect("test certificates");
    config
}
