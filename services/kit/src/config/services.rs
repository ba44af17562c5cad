//! `[policy]`, `[planner]`, `[gateway]` and `[approval]`: where each service listens, how
//! the others reach it, where its store is; and how long approvals last. (`[vaglio]` is in
//! `vaglio.rs`, with its judge.)

use std::net::SocketAddr;
use std::num::NonZero;

use serde::{Deserialize, Serialize};

use super::ServiceName;

/// Where one service listens, how others reach it, and where it keeps its store.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// Address to bind, e.g. `127.0.0.1:50051` (`0.0.0.0:50051` in a container).
    pub listen: SocketAddr,
    /// How clients reach it, e.g. `http://policy:50051`. Empty: derived from `listen`.
    #[serde(default)]
    pub url: String,
    /// `sqlite` (a file `<service>.db` under the data directory), `sqlite:<path>`, or a
    /// `postgres://` URL.
    #[serde(default = "default_store")]
    pub store: String,
}

fn default_store() -> String {
    "sqlite".to_owned()
}

impl ServiceConfig {
    /// The defaults of one service: its loopback port, a derived URL, SQLite.
    pub(super) fn for_service(service: ServiceName) -> Self {
        ServiceConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], service.default_port())),
            url: String::new(),
            store: default_store(),
        }
    }
}

/// The approval service: where it runs, and how long requests and concessions last.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalConfig {
    pub listen: SocketAddr,
    pub url: String,
    pub store: String,
    /// How long a person has to answer a card before it expires.
    pub ttl_seconds: NonZero<u64>,
    /// How long a "session" territory concession lasts.
    pub session_seconds: NonZero<u64>,
    /// How often expired requests are swept (and unrecorded territory grants retried);
    /// the gateway looks at its open cards as often.
    pub sweep_interval_seconds: NonZero<u64>,
    /// A card still unanswered this long before it expires gets one reminder (0: none).
    pub remind_before_seconds: u64,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        let ServiceConfig { listen, url, store } =
            ServiceConfig::for_service(ServiceName::Approval);
        ApprovalConfig {
            listen,
            url,
            store,
            ttl_seconds: const { NonZero::new(600).unwrap() },
            session_seconds: const { NonZero::new(8 * 60 * 60).unwrap() },
            sweep_interval_seconds: const { NonZero::new(5).unwrap() },
            remind_before_seconds: 120,
        }
    }
}
