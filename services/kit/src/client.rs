//! Reaching other services: traced channels, health probes, and the start-up watch that
//! tells the operator when a service's dependencies become reachable.

use std::time::Duration;

use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tower_layer::Layer;

use crate::config::ServiceName;
use crate::propagation::{ClientTrace, ClientTraceLayer};
use crate::tls::{Identity, Tls};

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

/// How often a `dns:///` target is resolved again.
pub const DNS_REFRESH: Duration = Duration::from_secs(10);

/// A service URL a channel cannot be made to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("`{0}` is not dns:///host:port")]
    NotDnsTarget(String),
    #[error("the scheme `{0}` is not http, https or dns")]
    Scheme(String),
    #[error("the URL has no scheme (http://host:port)")]
    NoScheme,
}

/// `dns:///host:port` split into host and port.
pub fn dns_target(url: &str) -> Option<Result<(String, u16), UrlError>> {
    let target = url.strip_prefix("dns:///")?;
    let parsed = target
        .rsplit_once(':')
        .filter(|(host, _)| !host.is_empty())
        .and_then(|(host, port)| {
            Some((host.trim_matches(['[', ']']).to_owned(), port.parse().ok()?))
        });
    Some(parsed.ok_or_else(|| UrlError::NotDnsTarget(url.to_owned())))
}

/// A lazily connecting, traced, mutually authenticated channel from `tls`'s identity to
/// the service `server` at `url`. `http://host:port` (or https) is one connection — TLS
/// whatever the scheme says; `dns:///host:port` is every address the name resolves to —
/// the pods behind a Kubernetes headless Service — with each call balanced across them
/// and the name resolved again every [`DNS_REFRESH`]. (A ClusterIP Service would pin an
/// HTTP/2 connection, and so all its calls, to one pod.) The server's certificate must be
/// signed by the installation's CA and name `server`. Connection errors surface on the
/// first call as `UNAVAILABLE`.
pub fn channel(tls: &Tls, server: Identity, url: &str) -> Result<TracedChannel, EndpointError> {
    let error = |message: String| EndpointError {
        url: url.to_owned(),
        message,
    };
    let client_tls = tls.client(server);
    if let Some(target) = dns_target(url) {
        let (host, port) = target.map_err(|e| error(e.to_string()))?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(error(
                "a dns:/// target needs a running async runtime".to_owned(),
            ));
        }
        let resolve = move || {
            let (host, port) = (host.clone(), port);
            async move {
                Ok(tokio::net::lookup_host((host.as_str(), port))
                    .await?
                    .collect())
            }
        };
        return Ok(ClientTraceLayer.layer(balanced(resolve, DNS_REFRESH, client_tls)));
    }
    let endpoint = Endpoint::from_shared(tls_url(url).map_err(|e| error(e.to_string()))?)
        .map_err(|e| error(e.to_string()))?
        .tls_config(client_tls)
        .map_err(|e| error(e.to_string()))?;
    let channel = endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .connect_lazy();
    Ok(ClientTraceLayer.layer(channel))
}

/// `url` with the `https` scheme every hop uses (`http://` in a config means the same).
fn tls_url(url: &str) -> Result<String, UrlError> {
    match url.split_once("://") {
        Some(("http" | "https", rest)) => Ok(format!("https://{rest}")),
        Some((scheme, _)) => Err(UrlError::Scheme(scheme.to_owned())),
        None => Err(UrlError::NoScheme),
    }
}

/// A channel balancing each call over the addresses `resolve` gives, asked again every
/// `refresh` (endpoints that appear are added, those that go are removed). Needs a running
/// tokio runtime; the resolving task ends when the channel is dropped.
pub fn balanced<F, Fut>(resolve: F, refresh: Duration, tls: ClientTlsConfig) -> Channel
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<Vec<std::net::SocketAddr>>> + Send,
{
    use std::collections::BTreeSet;
    use tonic::transport::channel::Change;
    let (channel, changes) = Channel::balance_channel::<std::net::SocketAddr>(64);
    tokio::spawn(async move {
        let mut known: BTreeSet<std::net::SocketAddr> = BTreeSet::new();
        loop {
            match resolve().await {
                Ok(addresses) => {
                    let now: BTreeSet<_> = addresses.into_iter().collect();
                    for gone in known.difference(&now) {
                        if changes.send(Change::Remove(*gone)).await.is_err() {
                            return;
                        }
                    }
                    for new in now.difference(&known) {
                        let Ok(endpoint) = Endpoint::from_shared(format!("https://{new}"))
                            .and_then(|e| e.tls_config(tls.clone()))
                        else {
                            continue;
                        };
                        let endpoint = endpoint.connect_timeout(CONNECT_TIMEOUT).tcp_nodelay(true);
                        if changes.send(Change::Insert(*new, endpoint)).await.is_err() {
                            return;
                        }
                    }
                    if now != known {
                        tracing::debug!(
                            endpoints = now.len(),
                            "balanced channel endpoints changed"
                        );
                    }
                    known = now;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot resolve a balanced channel's name; keeping its endpoints")
                }
            }
            tokio::time::sleep(refresh).await;
            if changes.is_closed() {
                return;
            }
        }
    });
    channel
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
pub async fn watch_dependencies(tls: Tls, service: ServiceName, urls: Vec<(ServiceName, String)>) {
    let watches = urls.into_iter().map(|(dependency, url)| {
        let tls = tls.clone();
        async move {
        let channel = match channel(&tls, Identity::of(dependency), &url) {
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
        }
    });
    futures::future::join_all(watches).await;
}
