//! Logs and traces: a `tracing` subscriber per service with fmt logs and, when an OTLP
//! endpoint is configured, span export over OTLP/gRPC under the service's own name.
//!
//! A standalone binary installs its [`Telemetry`] globally. `metnos up` runs five services
//! in one process, each on its own runtime whose threads default to that service's
//! subscriber (see [`crate::runtime`]), so traces in Jaeger still show five services.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, filter::LevelFilter};

use crate::config::{LogFormat, TelemetryConfig};

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
        let fmt: Box<dyn Layer<Registry> + Send + Sync> = match config.log_format {
            LogFormat::Text => Box::new(fmt.with_filter(filter)),
            LogFormat::Json => Box::new(fmt.json().with_filter(filter)),
        };

        let (otel, provider) = match &config.otlp_endpoint {
            None => (None, None),
            Some(endpoint) => {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint.clone())
                    .with_timeout(Duration::from_secs(10))
                    .build()
                    .map_err(|e| TelemetryError::Otlp {
                        endpoint: endpoint.clone(),
                        message: e.to_string(),
                    })?;
                let provider = SdkTracerProvider::builder()
                    .with_resource(
                        Resource::builder()
                            .with_service_name(service_name.to_owned())
                            .build(),
                    )
                    .with_batch_exporter(exporter)
                    .build();
                let tracer = provider.tracer(service_name.to_owned());
                // Spans at INFO and above are exported whatever the log filter says.
                let layer = tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(LevelFilter::INFO);
                (Some(layer), Some(provider))
            }
        };

        // Metrics go to the same collector, under the same service name.
        let meters = match &config.otlp_endpoint {
            None => None,
            Some(endpoint) => {
                let exporter = opentelemetry_otlp::MetricExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint.clone())
                    .with_timeout(Duration::from_secs(10))
                    .build()
                    .map_err(|e| TelemetryError::Otlp {
                        endpoint: endpoint.clone(),
                        message: e.to_string(),
                    })?;
                Some(
                    SdkMeterProvider::builder()
                        .with_resource(
                            Resource::builder()
                                .with_service_name(service_name.to_owned())
                                .build(),
                        )
                        .with_periodic_exporter(exporter)
                        .build(),
                )
            }
        };

        let subscriber = Registry::default().with(fmt).with(otel);
        Ok(Telemetry {
            dispatch: Dispatch::new(subscriber),
            provider,
            meters,
        })
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
