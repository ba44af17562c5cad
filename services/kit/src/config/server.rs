//! `[server]`: serving behaviour shared by every service.

use std::num::NonZero;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Serving behaviour shared by every service.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// How long in-flight calls may finish after a shutdown signal (0: not at all).
    pub shutdown_grace_seconds: u64,
    /// How long to wait for a store (Postgres) to answer at start-up.
    pub store_connect_timeout_seconds: NonZero<u64>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            shutdown_grace_seconds: 10,
            store_connect_timeout_seconds: const { NonZero::new(10).unwrap() },
        }
    }
}

impl ServerConfig {
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_seconds)
    }

    pub fn store_connect_timeout(&self) -> Duration {
        Duration::from_secs(self.store_connect_timeout_seconds.get())
    }
}
