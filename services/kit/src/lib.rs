//! Plumbing every Metnos service is built from, and nothing else (no domain types).
//!
//! - [`config`]: the one `metnos.toml` with `METNOS_*` environment overrides.
//! - [`telemetry`]: fmt logs and OTLP trace export under the service's name.
//! - [`propagation`]: W3C trace context across gRPC hops (server and client layers).
//! - [`server`]: binding, serving with health and reflection, graceful shutdown; the one
//!   start-up path of every service ([`server::serve_with_store`]).
//! - [`background`]: a service's background tasks, stopped with it.
//! - [`readiness`]: what health reports, including a store that stopped answering.
//! - [`client`]: traced channels, health probes, the dependency watch.
//! - [`store`]: SQLite / PostgreSQL stores with embedded migrations.
//! - [`datadir`]: the data directory's layout and modes (0700 folders, 0600 files).
//! - [`clock`]: the system clock, or a settable one for tests.
//! - [`time`]: epoch milliseconds, protobuf timestamps, RFC 3339.
//! - [`tls`]: identities, the built-in PKI and mutual TLS; [`authz`]: who may call what.
//! - [`runtime`]: a service on a runtime of its own, for several services in one process.
//! - `testing` (feature `testing`, for tests, benches and examples): SQLite and PostgreSQL
//!   stores and in-process servers for tests.
//! - [`launch`]: the `main` of every `metnos-<service>` binary.

pub mod authz;
pub mod background;
pub mod chain;
pub mod client;
pub mod clock;
pub mod config;
pub mod datadir;
pub mod edge;
pub mod gap;
pub mod journal;
pub mod launch;
pub mod propagation;
pub mod random;
pub mod readiness;
pub mod runtime;
pub mod schedule;
pub mod server;
pub mod store;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time;
pub mod tls;

pub use config::{Config, ConfigSource, ServiceName};
pub use launch::run_service;
pub use runtime::ShutdownFuture;
