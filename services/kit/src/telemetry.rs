//! Logs and traces: a `tracing` subscriber per service with fmt logs and, when an OTLP
//! endpoint is configured, span export over OTLP/gRPC under the service's own name.
//!
//! A standalone binary installs its [`Telemetry`] globally. `metnos up` runs five services
//! in one process ([`Telemetry::for_up`]): one subscriber, installed globally, with each
//! service's log and export layers, each layer taking what happens on that service's
//! threads (see [`crate::runtime`]) or inside that service's spans, so traces in Jaeger
//! still show five services. One subscriber, not one per service: a thread no service
//! owns (SQLite's workers) may drop the last reference to a service's span, and closing
//! that span's parent goes through the thread's default subscriber, which must know it.

use std::cell::Cell;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::subscriber::Interest;
use tracing::{Dispatch, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer, Registry, filter::FilterExt, filter::LevelFilter};

use crate::config::{LogFormat, ServiceName, TelemetryConfig};

thread_local! {
    /// The service whose runtime this thread belongs to, if any.
    static THREAD_SERVICE: Cell<Option<ServiceName>> = const { Cell::new(None) };
    /// The spans entered on this thread and their owners, innermost last.
    static ENTERED: std::cell::RefCell<Vec<(tracing::span::Id, Option<ServiceName>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The service a span belongs to (none: the command's), kept in its extensions.
#[derive(Debug, Clone, Copy)]
struct Owner(Option<ServiceName>);

/// Notes each span's owner — the service whose thread made it, else its parent's — and
/// which owner's span each thread is in, so [`Scope`] can tell whose an event on a thread
/// nobody owns is (a SQLite worker running a service's query). Whatever the layers'
/// levels: a span only a service's export took still makes a warning in it that
/// service's.
struct Owners;

impl<S> Layer<S> for Owners
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        _: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        cx: Context<'_, S>,
    ) {
        let Some(span) = cx.span(id) else {
            return;
        };
        let owner = THREAD_SERVICE.with(Cell::get).or_else(|| {
            span.parent()
                .and_then(|parent| parent.extensions().get::<Owner>().and_then(|o| o.0))
        });
        span.extensions_mut().insert(Owner(owner));
    }

    fn on_enter(&self, id: &tracing::span::Id, cx: Context<'_, S>) {
        let owner = cx
            .span(id)
            .and_then(|span| span.extensions().get::<Owner>().and_then(|o| o.0));
        // (A thread being torn down has no stack any more: nothing to note.)
        let _ = ENTERED.try_with(|entered| entered.borrow_mut().push((id.clone(), owner)));
    }

    fn on_exit(&self, id: &tracing::span::Id, _: Context<'_, S>) {
        // Spans may be exited out of order: the one exited goes, wherever it is.
        let _ = ENTERED.try_with(|entered| {
            let mut entered = entered.borrow_mut();
            if let Some(at) = entered.iter().rposition(|(entered, _)| entered == id) {
                entered.remove(at);
            }
        });
    }
}

/// Marks this thread as `service`'s: under [`Telemetry::for_up`], what happens on it is
/// that service's. Called on every thread of a service's runtime.
pub fn mark_thread(service: ServiceName) {
    THREAD_SERVICE.with(|s| s.set(Some(service)));
}

/// Whose logs and spans a layer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Everything (a standalone binary).
    All,
    /// The command's own (`metnos up` itself): threads no service owns, outside any
    /// service's span.
    Command,
    /// One service's: its threads, and its spans wherever they are entered.
    Service(ServiceName),
}

impl<S> Filter<S> for Scope
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn enabled(&self, _: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        if *self == Scope::All {
            return true;
        }
        // A service's thread is the service's; a thread nobody owns belongs to whoever
        // owns the span it is in ([`Owners`]), else to the command.
        let owner = THREAD_SERVICE.with(Cell::get).or_else(|| {
            ENTERED
                .try_with(|entered| entered.borrow().last().and_then(|(_, owner)| *owner))
                .ok()
                .flatten()
        });
        match (*self, owner) {
            (Scope::Service(mine), Some(owner)) => mine == owner,
            (Scope::Command, None) => true,
            _ => false,
        }
    }

    fn callsite_enabled(&self, _: &'static Metadata<'static>) -> Interest {
        // Decided per thread and span, never cached per callsite.
        Interest::sometimes()
    }
}

type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// How long shutdown waits for the last spans to reach the collector.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot set up OTLP export to {endpoint}: {message}")]
    Otlp { endpoint: String, message: String },
    #[error("config key `telemetry.log`: {0}")]
    Filter(String),
    #[error("cannot write logs in {dir}: {message}")]
    LogFile {
        dir: std::path::PathBuf,
        message: String,
    },
}

/// One service's subscriber and, if exporting, its tracer provider. It is the guard that
/// flushes on shutdown: call [`Telemetry::shutdown`] before the process exits; if it is
/// dropped instead, the drop flushes too (blocking, bounded by a timeout).
#[derive(Debug)]
pub struct Telemetry {
    dispatch: Dispatch,
    provider: Option<SdkTracerProvider>,
    meters: Option<SdkMeterProvider>,
    /// Writes the log file's last lines when dropped (`metnos up`'s own telemetry).
    _file: Option<tracing_appender::non_blocking::WorkerGuard>,
}

/// Where `metnos up` logs: a file per day in `dir` (`metnos.YYYY-MM-DD.log`, the last
/// [`LOG_DAYS`] kept) at the configured level, and stderr at WARN unless `verbose`.
#[derive(Debug, Clone)]
pub struct UpLogs {
    pub dir: std::path::PathBuf,
    pub verbose: bool,
}

/// Days of `metnos up` logs kept.
pub const LOG_DAYS: usize = 14;
/// Log lines waiting for the file's writer thread; a line that finds the queue full is
/// dropped rather than holding a service up, as before. tracing-appender's default, 128 000, allocates
/// and touches a 4 MB queue at every start, a fifth of the stack's own memory when idle
/// (issue 45); the writer keeps up with any rate a household's turns make.
const LOG_QUEUE_LINES: usize = 8_192;

/// The name of today's log file in an [`UpLogs`] folder.
pub fn log_file_today() -> String {
    // The appender names days in UTC.
    let today = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    format!("metnos.{today}.log")
}

impl Telemetry {
    /// Builds the subscriber of `service_name` (e.g. `metnos-policy`). With an OTLP
    /// endpoint it must be called inside a Tokio runtime that outlives the export.
    pub fn new(service_name: &str, config: &TelemetryConfig) -> Result<Telemetry, TelemetryError> {
        let (layers, provider, meters) =
            parts(service_name, config, Scope::All, LevelFilter::TRACE)?;
        Ok(Telemetry {
            dispatch: Dispatch::new(Registry::default().with(layers)),
            provider,
            meters,
            _file: None,
        })
    }

    /// The telemetry of `metnos up`: one subscriber for the whole process, with the
    /// command's logs (never exported) and each service's logs and export under its own
    /// name. Returns the command's telemetry (install it globally) and each service's, in
    /// the order of `services` (give each to its runtime, shut each down at the end); all
    /// share the one subscriber.
    pub fn for_up(
        command: &str,
        services: &[ServiceName],
        config: &TelemetryConfig,
        logs: &UpLogs,
    ) -> Result<(Telemetry, Vec<Telemetry>), TelemetryError> {
        let command_config = TelemetryConfig {
            otlp_endpoint: None,
            ..config.clone()
        };
        let stderr_cap = if logs.verbose {
            LevelFilter::TRACE
        } else {
            LevelFilter::WARN
        };
        let (command_layers, _, _) = parts(command, &command_config, Scope::Command, stderr_cap)?;
        // Owners sees exactly the spans some layer takes: those the log filter or, when
        // exporting, INFO enables (it must never make a span nobody wants).
        let owners: BoxedLayer = if config.otlp_endpoint.is_some() {
            Box::new(Owners.with_filter(log_filter(config)?.or(LevelFilter::INFO)))
        } else {
            Box::new(Owners.with_filter(log_filter(config)?))
        };
        let mut layers = vec![owners];
        layers.extend(command_layers);
        let (file_layer, guard) = log_file(config, logs)?;
        layers.push(file_layer);
        let mut exports = Vec::with_capacity(services.len());
        for service in services {
            let (more, provider, meters) = parts(
                service.binary(),
                config,
                Scope::Service(*service),
                stderr_cap,
            )?;
            layers.extend(more);
            exports.push((provider, meters));
        }
        let dispatch = Dispatch::new(Registry::default().with(layers));
        let services = exports
            .into_iter()
            .map(|(provider, meters)| Telemetry {
                dispatch: dispatch.clone(),
                provider,
                meters,
                _file: None,
            })
            .collect();
        let command = Telemetry {
            dispatch,
            provider: None,
            meters: None,
            _file: Some(guard),
        };
        Ok((command, services))
    }

    /// The subscriber, to install globally or per thread.
    pub fn dispatch(&self) -> &Dispatch {
        &self.dispatch
    }

    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Makes this the process-wide subscriber and meter provider (standalone binaries, or
    /// the process of `metnos up`). Fails if a subscriber is set already.
    pub fn install_global(&self) -> Result<(), tracing::dispatcher::SetGlobalDefaultError> {
        self.install_global_meters();
        tracing::dispatcher::set_global_default(self.dispatch.clone())
    }

    /// Makes this telemetry's meter provider (if exporting) the process-wide one, where
    /// `opentelemetry::global::meter` finds it.
    pub fn install_global_meters(&self) {
        if let Some(meters) = &self.meters {
            opentelemetry::global::set_meter_provider(meters.clone());
        }
    }

    /// Exports the spans finished so far and the metrics, now (off the async threads,
    /// like shutdown).
    pub async fn flush(&self) {
        if let Some(meters) = self.meters.clone() {
            let _ = tokio::task::spawn_blocking(move || meters.force_flush()).await;
        }
        let Some(provider) = self.provider.clone() else {
            return;
        };
        match tokio::task::spawn_blocking(move || provider.force_flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "trace export flush failed"),
            Err(e) => tracing::warn!(error = %e, "trace export flush panicked"),
        }
    }

    /// Flushes pending spans and stops the exporter. Runs the blocking shutdown off the
    /// async threads: the exporter needs the runtime to keep running while it flushes.
    pub async fn shutdown(mut self) {
        if let Some(meters) = self.meters.take() {
            let _ =
                tokio::task::spawn_blocking(move || meters.shutdown_with_timeout(FLUSH_TIMEOUT))
                    .await;
        }
        let Some(provider) = self.provider.take() else {
            return;
        };
        let result =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT))
                .await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: trace export did not flush cleanly: {e}"),
            Err(e) => eprintln!("warning: trace export shutdown failed: {e}"),
        }
    }
}

/// The log filter: `RUST_LOG` when set, else `telemetry.log`. The MCP SDK logs every
/// message a server sends at `info`: a server's words (and a flood of them) stay out of
/// the log unless the directives name `rmcp` themselves.
fn log_filter(config: &TelemetryConfig) -> Result<EnvFilter, TelemetryError> {
    let (directives, from_env) = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => (directives, true),
        _ => (config.log.clone(), false),
    };
    let filter = EnvFilter::builder().parse(&directives).map_err(|e| {
        let e = e.to_string();
        TelemetryError::Filter(if from_env {
            format!("RUST_LOG: {e}")
        } else {
            e
        })
    })?;
    if directives.contains("rmcp") {
        return Ok(filter);
    }
    let quiet = "rmcp=warn"
        .parse()
        .map_err(|e| TelemetryError::Filter(format!("{e}")))?;
    Ok(filter.add_directive(quiet))
}

/// `metnos up`'s log file: every service's and the command's lines at the configured
/// level, in `logs.dir` (0700), a file per day (0600 when this run makes it), the last
/// [`LOG_DAYS`] kept.
fn log_file(
    config: &TelemetryConfig,
    logs: &UpLogs,
) -> Result<(BoxedLayer, tracing_appender::non_blocking::WorkerGuard), TelemetryError> {
    let failed = |e: &dyn std::fmt::Display| TelemetryError::LogFile {
        dir: logs.dir.clone(),
        message: e.to_string(),
    };
    crate::datadir::create_dir_all(&logs.dir).map_err(|e| failed(&e))?;
    // The appender creates a day's file with the umask's mode; today's is made private
    // first (later days' are tightened by the start-up check).
    let today = logs.dir.join(log_file_today());
    crate::datadir::file_options()
        .append(true)
        .create(true)
        .open(&today)
        .map_err(|e| failed(&e))?;
    let appender = tracing_appender::rolling::Builder::new()
        .rotation(tracing_appender::rolling::Rotation::DAILY)
        .filename_prefix("metnos")
        .filename_suffix("log")
        .max_log_files(LOG_DAYS)
        .build(&logs.dir)
        .map_err(|e| failed(&e))?;
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(LOG_QUEUE_LINES)
        .finish(appender);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(false)
        .with_target(true);
    let filter = log_filter(config)?;
    let layer: BoxedLayer = match config.log_format {
        LogFormat::Text => Box::new(fmt.with_filter(filter)),
        LogFormat::Json => Box::new(fmt.json().with_filter(filter)),
    };
    Ok((layer, guard))
}

/// The log and export layers of `service_name`, taking what `scope` says (stderr at most
/// `stderr_cap`), with the tracer and meter providers when exporting.
#[allow(clippy::type_complexity)]
fn parts(
    service_name: &str,
    config: &TelemetryConfig,
    scope: Scope,
    stderr_cap: LevelFilter,
) -> Result<
    (
        Vec<BoxedLayer>,
        Option<SdkTracerProvider>,
        Option<SdkMeterProvider>,
    ),
    TelemetryError,
> {
    // Standard W3C trace context; setting it twice is harmless.
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());

    let filter = log_filter(config)?;
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true);
    let fmt: BoxedLayer = match config.log_format {
        LogFormat::Text => Box::new(fmt.with_filter(filter.and(scope).and(stderr_cap))),
        LogFormat::Json => Box::new(fmt.json().with_filter(filter.and(scope).and(stderr_cap))),
    };
    let mut layers = vec![fmt];

    let Some(endpoint) = &config.otlp_endpoint else {
        return Ok((layers, None, None));
    };
    let otlp_error = |e: &dyn std::fmt::Display| TelemetryError::Otlp {
        endpoint: endpoint.clone(),
        message: e.to_string(),
    };
    let resource = || {
        Resource::builder()
            .with_service_name(service_name.to_owned())
            .build()
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| otlp_error(&e))?;
    let provider = SdkTracerProvider::builder()
        .with_resource(resource())
        .with_batch_exporter(exporter)
        .build();
    let tracer = provider.tracer(service_name.to_owned());
    // Spans at INFO and above are exported whatever the log filter says.
    layers.push(Box::new(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(LevelFilter::INFO.and(scope)),
    ));

    // Metrics go to the same collector, under the same service name.
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| otlp_error(&e))?;
    let meters = SdkMeterProvider::builder()
        .with_resource(resource())
        .with_periodic_exporter(exporter)
        .build();
    Ok((layers, Some(provider), Some(meters)))
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(meters) = self.meters.take() {
            let _ = std::thread::spawn(move || meters.shutdown_with_timeout(FLUSH_TIMEOUT)).join();
        }
        let Some(provider) = self.provider.take() else {
            return;
        };
        // On a thread of its own: the exporter may need this thread's runtime to progress.
        let flushed =
            std::thread::spawn(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT)).join();
        if let Ok(Err(e)) = flushed {
            eprintln!("warning: trace export did not flush cleanly: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As in SQLite's worker threads: a service's span is created on the service's
    /// thread, its parent ends there, and the last reference to the span itself is dropped
    /// on a thread no service owns. Closing it closes its parent through that thread's
    /// default subscriber — the global one — which must be the subscriber that made them.
    /// (Run by nextest, one process per test: it installs the global subscriber.)
    #[test]
    fn a_service_span_closed_on_a_thread_nobody_owns_closes_its_parent_without_a_panic() {
        let config = TelemetryConfig {
            log: "info".to_owned(),
            ..TelemetryConfig::default()
        };
        let logs = tempfile::tempdir().unwrap();
        let logs = UpLogs {
            dir: logs.path().join("logs"),
            verbose: false,
        };
        let (command, services) =
            Telemetry::for_up("metnos", &[ServiceName::Policy], &config, &logs).unwrap();
        command
            .install_global()
            .expect("no global subscriber yet (nextest runs each test in its own process)");
        let dispatch = services[0].dispatch().clone();
        let (child, parent) = std::thread::spawn(move || {
            mark_thread(ServiceName::Policy);
            tracing::dispatcher::with_default(&dispatch, || {
                let parent = tracing::info_span!("parent");
                let child = tracing::info_span!(parent: &parent, "child");
                (child, parent)
            })
        })
        .join()
        .unwrap();
        assert!(!child.is_disabled() && !parent.is_disabled());
        drop(parent);
        let closed = std::thread::spawn(move || {
            let _entered = child.enter();
        })
        .join();
        assert!(closed.is_ok(), "closing the span panicked its thread");
    }

    /// Counts the events it takes.
    struct Counter(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl<S: Subscriber> Layer<S> for Counter {
        fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A warning on a SQLite worker (a thread nobody owns) inside a span of the policy's
    /// that only its export took (logs at WARN): the policy's log has it, the command's
    /// does not; a warning outside any span is the command's.
    #[test]
    fn a_warning_on_a_thread_nobody_owns_is_logged_by_whoever_owns_its_span() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (policy_log, command_log) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let policy = Scope::Service(ServiceName::Policy);
        let dispatch = Dispatch::new(
            Registry::default()
                .with(Owners.with_filter(LevelFilter::INFO))
                .with(Counter(Arc::clone(&policy_log)).with_filter(LevelFilter::WARN.and(policy)))
                .with(
                    Counter(Arc::clone(&command_log))
                        .with_filter(LevelFilter::WARN.and(Scope::Command)),
                )
                .with(Counter(Arc::default()).with_filter(LevelFilter::INFO.and(policy))),
        );
        let made = dispatch.clone();
        let span = std::thread::spawn(move || {
            mark_thread(ServiceName::Policy);
            tracing::dispatcher::with_default(&made, || tracing::info_span!("query"))
        })
        .join()
        .unwrap();
        assert!(!span.is_disabled());
        let worker = dispatch.clone();
        std::thread::spawn(move || {
            tracing::dispatcher::with_default(&worker, || {
                let _in = span.enter();
                tracing::warn!("slow statement");
            });
        })
        .join()
        .unwrap();
        assert_eq!(policy_log.load(Ordering::SeqCst), 1, "the policy's warning");
        assert_eq!(command_log.load(Ordering::SeqCst), 0, "not the command's");
        std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || tracing::warn!("the command's"));
        })
        .join()
        .unwrap();
        assert_eq!(command_log.load(Ordering::SeqCst), 1);
        assert_eq!(policy_log.load(Ordering::SeqCst), 1);
    }

    /// The same with a subscriber per service, as `metnos up` had it: the parent's close
    /// reaches a subscriber that never saw it, and the thread panics. (Why
    /// [`Telemetry::for_up`] shares one.)
    #[test]
    fn with_a_subscriber_per_service_the_same_close_panics() {
        let config = TelemetryConfig {
            log: "info".to_owned(),
            ..TelemetryConfig::default()
        };
        let global = Telemetry::new("metnos", &config).unwrap();
        global
            .install_global()
            .expect("no global subscriber yet (nextest runs each test in its own process)");
        let service = Telemetry::new("metnos-policy", &config).unwrap();
        let dispatch = service.dispatch().clone();
        let (child, parent) = tracing::dispatcher::with_default(&dispatch, || {
            let parent = tracing::info_span!("parent");
            let child = tracing::info_span!(parent: &parent, "child");
            (child, parent)
        });
        drop(parent);
        let closed = std::thread::spawn(move || drop(child)).join();
        assert!(closed.is_err(), "the foreign close was expected to panic");
    }
}
