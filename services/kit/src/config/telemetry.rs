//! `[telemetry]`: logs and traces.

use serde::{Deserialize, Serialize};

/// Logs and traces.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Log filter in `tracing` directive syntax (`info`, `metnos_policy=debug,info`).
    /// `RUST_LOG`, when set, wins.
    pub log: String,
    /// `text` or `json`.
    pub log_format: LogFormat,
    /// OTLP/gRPC collector for traces. Set from `OTEL_EXPORTER_OTLP_ENDPOINT`, the standard
    /// variable; empty means no export.
    #[serde(skip)]
    pub otlp_endpoint: Option<String>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            log: "info".to_owned(),
            log_format: LogFormat::Text,
            otlp_endpoint: None,
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}
