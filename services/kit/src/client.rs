//! Reaching other services: traced channels, health probes, and the start-up watch that
//! tells the operator when a service's dependencies become reachable.

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tower_layer::Layer;

use crate::config::ServiceName;
use crate::propagation::{ClientTrace, ClientTraceLayer};

/// A channel whose calls open client spans and carry W3C trace context.
pub type TracedChannel = ClientTrace<Channel>;

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A URL that is not a usable gRPC endpoint.
#[derive(Debug, thiserror::Error)]
#[error("invalid service URL {url}: {message}")]
pub struct EndpointError {
    pub url: String,
    pub message: String,
}

/// A lazily connecting, traced channel to `url` (`http://host:port`). Connection errors
/// surface on the first call as `UNAVAILABLE`.
pub fn channel(url: &str) -> Result<TracedChannel, EndpointError> {
    let endpoint = Endpoint::from_shared(url.to_owned()).map_err(|e| EndpointError {
        url: url.to_owned(),
        message: e.to_string(),
    })?;
    let channel = endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .connect_lazy();
    Ok(ClientTraceLayer.layer(channel))
}

/// What a health probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Serving,
    /// Reachable but not serving (starting, draining, or its store is down).
    NotServing(String),
    /// Not reachable at all.
    Unreachable(String),
}

impl Health {
    pub fn is_serving(&self) -> bool {
        matches!(self, Health::Serving)
    }
}

/// Asks `grpc.health.v1.Health/Check` for `service` at `channel`, within `timeout`.
pub async fn probe(channel: TracedChannel, service: &str, timeout: Duration) -> Health {
    let mut client = HealthClient::new(channel);
    let request = HealthCheckRequest {
        service: service.to_owned(),
    };
    match tokio::time::timeout(timeout, client.check(request)).await {
        Err(_) => Health::Unreachable(format!("no answer within {} ms", timeout.as_millis())),
        Ok(Err(status)) if status.code() == tonic::Code::Unavailable => {
            Health::Unreachable(describe_unavailable(&status))
        }
        Ok(Err(status)) => Health::NotServing(format!("{:?}: {}", status.code(), status.message())),
        Ok(Ok(response)) => match response.into_inner().status() {
            ServingStatus::Serving => Health::Serving,
            other => Health::NotServing(other.as_str_name().to_owned()),
        },
    }
}

/// The root cause of a transport failure ("connection refused"), not tonic's wrapper.
fn describe_unavailable(status: &tonic::Status) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    let mut last = status.message().to_owned();
    while let Some(err) = source {
        last = err.to_string();
        source = err.source();
    }
    last
}

/// Watches, in the background, that each dependency of `service` answers its health
/// check: logs once when it becomes SERVING, and warns (once per state) while it is not,
/// retrying with backoff up to 30 s. Ends when all are serving or the task is dropped.
/// A misconfigured URL is thus visible in the logs at start-up, not at the first turn.
pub async fn watch_dependencies(service: ServiceName, urls: Vec<(ServiceName, String)>) {
    let watches = urls.into_iter().map(|(dependency, url)| async move {
        let channel = match channel(&url) {
            Ok(channel) => channel,
            Err(e) => {
                tracing::error!(%service, %dependency, error = %e, "dependency URL is invalid");
                return;
            }
        };
        let mut delay = Duration::from_millis(100);
        let mut last_warning: Option<String> = None;
        loop {
            let span = tracing::info_span!("dependency.check", %service, %dependency, otel.kind = "internal");
            let health = {
                let probe = probe(channel.clone(), dependency.grpc_name(), Duration::from_secs(2));
                tracing::Instrument::instrument(probe, span.clone()).await
            };
            let _entered = span.enter();
            match health {
                Health::Serving => {
                    tracing::info!(%dependency, %url, "dependency serving");
                    return;
                }
                Health::NotServing(why) | Health::Unreachable(why) => {
                    if last_warning.as_deref() != Some(why.as_str()) {
                        tracing::warn!(%dependency, %url, reason = %why, "dependency not serving yet");
                        last_warning = Some(why);
                    }
                }
            }
            drop(_entered);
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(30));
        }
    });
    futures::future::join_all(watches).await;
}
