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
    fn enabled(&self, _: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        match (*self, THREAD_SERVICE.with(Cell::get)) {
            (Scope::All, _) => true,
            (Scope::Service(mine), Some(thread)) => mine == thread,
            (Scope::Command, Some(_)) => false,
            // A thread nobody owns: whoever owns the span it is in (its current span as
            // this layer sees it is one this layer took).
            (Scope::Service(_), None) => cx.lookup_current().is_some(),
            (Scope::Command, None) => {
                cx.current_span().id().is_none() || cx.lookup_current().is_some()
            }
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
}

/// One service's subscriber and, if exporting, its tracer provider. It is the guard that
/// flushes on shutdown: call [`Telemetry::shutdown`] before the process exits; if it is
/// dropped instead, the drop flushes too (blocking, bounded by a timeout).
#[derive(Debug)]
pub struct Telemetry {
    dispatch: Dispatch,
    provider: Option<SdkTracerProvider>,
    meters: Option<SdkMeterProvider>,
}

impl Telemetry {
    /// Builds the subscriber of `service_name` (e.g. `metnos-policy`). With an OTLP
    /// endpoint it must be called inside a Tokio runtime that outlives the export.
    pub fn new(service_name: &str, config: &TelemetryConfig) -> Result<Telemetry, TelemetryError> {
        let (layers, provider, meters) = parts(service_name, config, Scope::All)?;
        Ok(Telemetry {
            dispatch: Dispatch::new(Registry::default().with(layers)),
            provider,
            meters,
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
    ) -> Result<(Telemetry, Vec<Telemetry>), TelemetryError> {
        let command_config = TelemetryConfig {
            otlp_endpoint: None,
            ..config.clone()
        };
        let (mut layers, _, _) = parts(command, &command_config, Scope::Command)?;
        let mut exports = Vec::with_capacity(services.len());
        for service in services {
            let (more, provider, meters) =
                parts(service.binary(), config, Scope::Service(*service))?;
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
            })
            .collect();
        let command = Telemetry {
            dispatch,
            provider: None,
            meters: None,
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

/// The log and export layers of `service_name`, taking what `scope` says, with the
/// tracer and meter providers when exporting.
#[allow(clippy::type_complexity)]
fn parts(
    service_name: &str,
    config: &TelemetryConfig,
    scope: Scope,
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

    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => EnvFilter::builder()
            .parse(&directives)
            .map_err(|e| TelemetryError::Filter(format!("RUST_LOG: {e}")))?,
        _ => EnvFilter::builder()
            .parse(&config.log)
            .map_err(|e| TelemetryError::Filter(e.to_string()))?,
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true);
    let fmt: BoxedLayer = match config.log_format {
        LogFormat::Text => Box::new(fmt.with_filter(filter.and(scope))),
        LogFormat::Json => Box::new(fmt.json().with_filter(filter.and(scope))),
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
        let (command, services) =
            Telemetry::for_up("metnos", &[ServiceName::Policy], &config).unwrap();
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
