//! Serving one gRPC service: health (`grpc.health.v1`), reflection (v1 and v1alpha, so
//! stock grpcurl works), W3C trace extraction, and graceful shutdown with a grace period.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::body::Body;
use tonic::server::NamedService;
use tower_service::Service;

use crate::authz::{AuthorizeLayer, Table};
use crate::background::Background;
use crate::config::{Config, ServiceName};
use crate::propagation::ServerTraceLayer;
use crate::readiness::Readiness;
use crate::tls::{Identity, Tls, TlsError};

/// Reflection's own service names, listed so `grpcurl list` shows what stock servers show.
const REFLECTION_V1: &str = "grpc.reflection.v1.ServerReflection";
/// The largest health or reflection request decoded.
const SMALL_REQUEST_BYTES: usize = 64 * 1024;
const REFLECTION_V1ALPHA: &str = "grpc.reflection.v1alpha.ServerReflection";
const HEALTH: &str = "grpc.health.v1.Health";

/// Serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{service}: cannot listen on {addr}: {source}{hint}")]
    Bind {
        service: ServiceName,
        addr: SocketAddr,
        source: io::Error,
        /// Empty, or why the port may be taken and what to do.
        hint: String,
    },
    #[error("{service}: reflection descriptors are invalid: {source}")]
    Reflection {
        service: ServiceName,
        source: tonic_reflection::server::Error,
    },
    #[error("{service}: gRPC server failed: {source}")]
    Transport {
        service: ServiceName,
        source: tonic::transport::Error,
    },
}

/// Binds a service's listen address, with an error that names the service and address.
pub async fn bind(service: ServiceName, addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| bind_error(service, addr, source))
}

fn bind_error(service: ServiceName, addr: SocketAddr, source: io::Error) -> ServeError {
    let hint = if source.kind() == io::ErrorKind::AddrInUse {
        let read = |name: &str| std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}"));
        match (read("ip_local_port_range"), read("ip_local_reserved_ports")) {
            (Ok(range), Ok(reserved)) => ephemeral_hint(addr.port(), &range, &reserved),
            _ => String::new(),
        }
    } else {
        String::new()
    };
    ServeError::Bind {
        service,
        addr,
        source,
        hint,
    }
}

/// When `port` lies in the kernel's range of source ports for outgoing connections and is
/// not reserved, an outgoing connection may be what holds it: say so, and how to reserve it.
fn ephemeral_hint(port: u16, range: &str, reserved: &str) -> String {
    let mut bounds = range
        .split_whitespace()
        .filter_map(|n| n.parse::<u16>().ok());
    let (Some(low), Some(high)) = (bounds.next(), bounds.next()) else {
        return String::new();
    };
    let is_reserved = reserved.trim().split(',').any(|item| {
        let (from, to) = item.split_once('-').unwrap_or((item, item));
        matches!((from.trim().parse::<u16>(), to.trim().parse::<u16>()),
            (Ok(from), Ok(to)) if (from..=to).contains(&port))
    });
    if !(low..=high).contains(&port) || is_reserved {
        return String::new();
    }
    format!(
        " (port {port} is in this machine's range for outgoing connections, {low}-{high}, so \
         a connection may hold it: reserve it by adding it to the sysctl \
         net.ipv4.ip_local_reserved_ports, see the README's Deploy section)"
    )
}

/// Binds a listen address outside any runtime, for a service that will run on a runtime
/// of its own (`tokio::net::TcpListener::from_std` there). The socket is non-blocking.
pub fn bind_std(
    service: ServiceName,
    addr: SocketAddr,
) -> Result<std::net::TcpListener, ServeError> {
    let bind_error = |source| bind_error(service, addr, source);
    let listener = std::net::TcpListener::bind(addr).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    Ok(listener)
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C). The handlers are installed when this is called,
/// not when the future is first polled: a stack that says it is up must already stop
/// cleanly on a Ctrl-C that follows at once (else the default action kills it, leaving its
/// run file behind). Call it inside a Tokio runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let streams = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        )
    };
    async move {
        #[cfg(unix)]
        match streams {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
                    _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
                }
                return;
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM or SIGINT; trying Ctrl-C alone");
            }
        }
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot watch Ctrl-C");
            futures::future::pending::<()>().await;
        }
    }
}

/// How one service is served.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub service: ServiceName,
    /// How long in-flight calls may finish after the shutdown signal.
    pub grace: Duration,
    /// Services this one calls, with their URLs: watched at start-up (see
    /// [`crate::client::watch_dependencies`]).
    pub dependencies: Vec<(ServiceName, String)>,
    /// What health reports; handlers that see the store fail tell it.
    pub readiness: Readiness,
    /// The service's own certificate: it serves with it and calls others with it.
    pub tls: Tls,
    /// Who may call which of its RPCs.
    pub table: &'static Table,
}

impl ServeOptions {
    /// Options for `service` from the loaded config; its certificate is loaded and checked.
    pub fn new(
        service: ServiceName,
        config: &Config,
        table: &'static Table,
    ) -> Result<ServeOptions, TlsError> {
        Ok(ServeOptions {
            service,
            grace: config.server.shutdown_grace(),
            dependencies: service
                .dependencies()
                .iter()
                .map(|dep| (*dep, config.service_url(*dep)))
                .collect(),
            readiness: Readiness::new(service),
            tls: Tls::load(config, Identity::of(service))?,
            table,
        })
    }
}

/// The status a not-yet-built RPC answers: `UNIMPLEMENTED`, naming the RPC.
pub fn not_implemented(rpc: &str) -> tonic::Status {
    tonic::Status::unimplemented(format!("{rpc} is not implemented yet"))
}

/// A generated gRPC service, as the server takes it.
pub trait GrpcService:
    Service<
        http::Request<Body>,
        Response = http::Response<Body>,
        Error = Infallible,
        Future: Send + 'static,
    > + NamedService
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> GrpcService for S where
    S: Service<
            http::Request<Body>,
            Response = http::Response<Body>,
            Error = Infallible,
            Future: Send + 'static,
        > + NamedService
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// Serves `svc` on `listener` with health and reflection until `shutdown` resolves, then
/// reports NOT_SERVING, stops accepting, and lets in-flight calls finish for at most
/// `options.grace`. Health reports SERVING for the service (and the server, `""`) from
/// the start, as long as `options.readiness` agrees: call this once the service's store
/// is open and migrated.
pub async fn serve<S: GrpcService>(
    options: ServeOptions,
    listener: TcpListener,
    svc: S,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let ServeOptions {
        service,
        grace,
        dependencies,
        readiness,
        tls,
        table,
    } = options;
    // Health and reflection requests are a service name or a symbol: 64 KiB is plenty, and
    // nobody gets tonic's default 4 MiB per message through them.
    let health = tonic_health::pb::health_server::HealthServer::new(
        tonic_health::server::HealthService::from_health_reporter(readiness.reporter()),
    )
    .max_decoding_message_size(SMALL_REQUEST_BYTES);
    readiness.set_started().await;

    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(metnos_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name(service.grpc_name())
            .with_service_name(HEALTH)
            .with_service_name(REFLECTION_V1)
            .with_service_name(REFLECTION_V1ALPHA)
    };
    let reflection_error = |source| ServeError::Reflection { service, source };
    let reflection_v1 = reflection()
        .build_v1()
        .map_err(reflection_error)?
        .max_decoding_message_size(SMALL_REQUEST_BYTES);
    let reflection_v1alpha = reflection()
        .build_v1alpha()
        .map_err(reflection_error)?
        .max_decoding_message_size(SMALL_REQUEST_BYTES);

    let local = listener.local_addr().ok();
    // Small gRPC messages: do not let Nagle's algorithm hold them back.
    let incoming = TcpListenerStream::new(listener).map(|conn| {
        conn.inspect(|stream| {
            let _ = stream.set_nodelay(true);
        })
    });

    let draining = Arc::new(Notify::new());
    let signal = {
        let draining = Arc::clone(&draining);
        let readiness = readiness.clone();
        async move {
            shutdown.await;
            readiness.set_stopping().await;
            tracing::info!(%service, "draining in-flight calls");
            draining.notify_one();
        }
    };

    tracing::info!(%service, addr = ?local, "serving");
    let watch = (!dependencies.is_empty()).then(|| {
        tokio::spawn(crate::client::watch_dependencies(
            tls.clone(),
            service,
            dependencies,
        ))
    });
    let server = tonic::transport::Server::builder()
        .tls_config(tls.server())
        .map_err(|source| ServeError::Transport { service, source })?
        .layer(ServerTraceLayer)
        .layer(crate::edge::StatusLayer)
        .layer(AuthorizeLayer::new(table))
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(svc)
        .serve_with_incoming_shutdown(incoming, signal);
    tokio::pin!(server);

    let result = tokio::select! {
        result = &mut server => result.map_err(|source| ServeError::Transport { service, source }),
        () = async { draining.notified().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(%service, grace_seconds = grace.as_secs(), "calls still running after the grace period; stopping anyway");
            Ok(())
        }
    };
    if let Some(watch) = watch {
        watch.abort();
    }
    if result.is_ok() {
        tracing::info!(%service, "stopped");
    }
    result
}

/// A service could not start or failed while serving.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{service}: {source}")]
    Store {
        service: ServiceName,
        source: crate::store::StoreError,
    },
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("{service}: {message}")]
    Settings {
        service: ServiceName,
        message: String,
    },
    #[error("{service}: {source}")]
    Tls {
        service: ServiceName,
        source: TlsError,
    },
}

/// What a service is built from once its store is open: the store, what health reports,
/// its background tasks, and its certificate (to call other services with).
#[derive(Debug)]
pub struct Running<'a> {
    pub db: crate::store::Db,
    pub readiness: Readiness,
    pub background: &'a mut Background,
    pub tls: &'a Tls,
}

/// How a service with a store starts: who it is, its store's schema, the loaded config.
#[derive(Debug, Clone, Copy)]
pub struct Startup<'a> {
    pub service: ServiceName,
    pub migrations: &'a crate::store::Migrations,
    /// Who may call which RPC.
    pub table: &'static Table,
    pub config: &'a Config,
}

impl<'a> Startup<'a> {
    pub fn new(
        service: ServiceName,
        migrations: &'a crate::store::Migrations,
        table: &'static Table,
        config: &'a Config,
    ) -> Startup<'a> {
        Startup {
            service,
            migrations,
            table,
            config,
        }
    }

    /// The life of every service: open and migrate its store, build its gRPC service from
    /// the store, its readiness and its [`Background`] tasks, serve until `shutdown` (the
    /// tasks are told to stop when it resolves), then wait for the tasks, run their last
    /// steps (final flushes) and close the store.
    pub async fn serve_with_store<S, F>(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
        make: F,
    ) -> Result<(), StartError>
    where
        F: FnOnce(Running<'_>) -> Result<S, StartError>,
        S: GrpcService,
    {
        let Startup {
            service,
            migrations,
            table,
            config,
        } = self;
        let options = ServeOptions::new(service, config, table)
            .map_err(|source| StartError::Tls { service, source })?;
        crate::datadir::secure(config);
        let db = crate::store::open(
            &config.store(service),
            service.as_str(),
            migrations,
            config.server.store_connect_timeout(),
        )
        .await
        .map_err(|source| StartError::Store { service, source })?;
        let grace = options.grace;
        let mut background = Background::new();
        let running = Running {
            db: db.clone(),
            readiness: options.readiness.clone(),
            background: &mut background,
            tls: &options.tls,
        };
        let svc = match make(running) {
            Ok(svc) => svc,
            Err(e) => {
                background.finish(tokio::time::Instant::now() + grace).await;
                db.close().await;
                return Err(e);
            }
        };
        // The tasks stop with the drain and share its grace period: the whole shutdown
        // takes at most the grace (plus the last steps), not twice it.
        let stop = background.signal();
        let stopping_at = Arc::new(std::sync::OnceLock::new());
        let shutdown = {
            let stopping_at = Arc::clone(&stopping_at);
            async move {
                shutdown.await;
                let _ = stopping_at.set(tokio::time::Instant::now());
                stop();
            }
        };
        let result = serve(options, listener, svc, shutdown).await;
        let stopped = stopping_at
            .get()
            .copied()
            .unwrap_or_else(tokio::time::Instant::now);
        background.finish(stopped + grace).await;
        db.close().await;
        Ok(result?)
    }
}

#[cfg(test)]
mod tests {
    use super::ephemeral_hint;

    #[test]
    fn a_busy_port_in_the_outgoing_range_is_explained_unless_reserved() {
        let hint = ephemeral_hint(50054, "32768\t60999\n", "\n");
        assert_eq!(
            hint,
            " (port 50054 is in this machine's range for outgoing connections, 32768-60999, so a \
             connection may hold it: reserve it by adding it to the sysctl \
             net.ipv4.ip_local_reserved_ports, see the README's Deploy section)"
        );
        assert_eq!(
            ephemeral_hint(50054, "32768 60999", "8080,50051-50055\n"),
            ""
        );
        assert_eq!(ephemeral_hint(50054, "32768 60999", "50054"), "");
        assert_eq!(ephemeral_hint(8443, "32768 60999", ""), "");
        assert_eq!(ephemeral_hint(50054, "garbage", ""), "");
    }
}
