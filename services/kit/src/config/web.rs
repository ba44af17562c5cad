//! `[web]`: the owner's spectator page, served by the gateway.

use std::net::SocketAddr;
use std::num::NonZero;

use serde::{Deserialize, Serialize};

/// The spectator: a web page where the owner watches turns, verdicts, approvals and grants.
/// Off unless enabled; only the owner signs in, through `metnos web login`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WebConfig {
    pub enabled: bool,
    /// Where the gateway listens (plain HTTP; loopback unless a TLS proxy sits in front).
    pub listen: SocketAddr,
    /// The address the owner's browser uses, when a proxy sits in front (e.g.
    /// `https://metnos.example.org`); empty: `http://<listen>`. Sign-in links are made from
    /// it, only its host is answered, and with `https://` the session cookie is `Secure`.
    pub public_url: String,
    /// `en` or `it`; empty: the browser's language.
    pub lang: String,
    /// How long a sign-in link may wait before it is used (once).
    pub login_ttl_seconds: NonZero<u32>,
    /// How long a session lasts.
    pub session_hours: NonZero<u32>,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            enabled: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 8780)),
            public_url: String::new(),
            lang: String::new(),
            login_ttl_seconds: const { NonZero::new(300).unwrap() },
            session_hours: const { NonZero::new(12).unwrap() },
        }
    }
}

impl WebConfig {
    /// The URL the browser uses, without a trailing slash.
    pub fn base_url(&self) -> String {
        if self.public_url.is_empty() {
            format!("http://{}", self.listen)
        } else {
            self.public_url.trim_end_matches('/').to_owned()
        }
    }
}
