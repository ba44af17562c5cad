//! The page's state: the services it reads and how it is served.

use std::sync::Arc;
use std::time::Duration;

use metnos_kit::client::TracedChannel;
use metnos_kit::config::WebConfig;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;

use super::sessions::Sessions;

/// The services the page reads, as the gateway.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub planner: PlannerServiceClient<TracedChannel>,
    pub approval: ApprovalServiceClient<TracedChannel>,
    pub policy: PolicyServiceClient<TracedChannel>,
    pub vaglio: VaglioServiceClient<TracedChannel>,
}

/// The page's state.
#[derive(Debug)]
pub struct Web {
    pub sessions: Arc<Sessions>,
    pub upstream: Upstream,
    /// `web.lang`: `en`, `it`, or empty for the browser's.
    pub lang: String,
    /// Behind https: the cookie is `Secure` and `__Host-`.
    pub secure: bool,
    /// The `Host` values answered (lower case).
    pub hosts: Vec<String>,
    /// The origins a state-changing request may come from (`http://127.0.0.1:8780`, and
    /// on loopback `http://localhost:8780`).
    pub origins: Vec<String>,
    /// How often the live view asks the planner for changes.
    pub poll: Duration,
    /// Live views open at once (each polls the planner): a permit each.
    pub live_feeds: Arc<tokio::sync::Semaphore>,
    /// One walk of the chains at a time (the record page asks four services to walk theirs).
    pub walking: tokio::sync::Mutex<()>,
}

/// Live views open at once, every session together.
pub const MAX_LIVE_FEEDS: usize = 8;

impl Web {
    /// The page as configured, reading through `upstream`.
    pub fn new(config: &WebConfig, upstream: Upstream) -> Web {
        let origin = config.base_url();
        let authority = origin
            .split_once("://")
            .map_or(origin.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let mut hosts = vec![authority.clone()];
        // Loopback answers by name too (a browser may be given either).
        if config.public_url.is_empty() && config.listen.ip().is_loopback() {
            hosts.push(format!("localhost:{}", config.listen.port()));
        }
        let secure = origin.starts_with("https://");
        let scheme = if secure { "https" } else { "http" };
        let origins = hosts.iter().map(|h| format!("{scheme}://{h}")).collect();
        if !secure && !config.listen.ip().is_loopback() {
            tracing::warn!(
                listen = %config.listen,
                "the web page listens beyond loopback over plain HTTP: its sign-in links and session cookie cross the network in clear (put a TLS proxy in front and set web.public_url to its https address)"
            );
        }
        Web {
            sessions: Arc::new(Sessions::new(
                origin.clone(),
                i64::from(config.login_ttl_seconds.get()) * 1000,
                i64::from(config.session_hours.get()) * 3_600_000,
            )),
            upstream,
            lang: config.lang.clone(),
            secure,
            hosts,
            origins,
            poll: Duration::from_secs(1),
            live_feeds: Arc::new(tokio::sync::Semaphore::new(MAX_LIVE_FEEDS)),
            walking: tokio::sync::Mutex::new(()),
        }
    }

    /// The session cookie's name (`__Host-` behind https).
    pub fn cookie_name(&self) -> &'static str {
        if self.secure {
            "__Host-metnos"
        } else {
            "metnos"
        }
    }
}
