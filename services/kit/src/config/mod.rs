//! The one Metnos configuration: `metnos.toml`, then `METNOS_*` environment overrides.
//!
//! Every key can be overridden by `METNOS_` + its path in upper case with `__` between
//! levels: `[runtime.llm.fast] base_url` is `METNOS_RUNTIME__LLM__FAST__BASE_URL`,
//! `data_dir` is `METNOS_DATA_DIR`. Unknown keys and bad values are errors that name the
//! key and where it came from, so a typo never silently falls back to a default.
//! The standard `OTEL_EXPORTER_OTLP_ENDPOINT` turns trace export on.
//!
//! Layout: this file is the [`Config`] root and its defaults; `load.rs` finds the file,
//! merges it with the environment through figment and maps its errors ([`ConfigError`]);
//! `validate.rs` checks what the types cannot; `topology.rs` is the five services, their
//! names, ports, dependencies and URLs; `store_spec.rs` parses a `store` key. Each section
//! has a file of its own: `telemetry.rs`, `server.rs`, `services.rs` (a service's address
//! and store, and `[approval]`), `vaglio.rs` (with `[vaglio.judge]`), `runtime.rs` (with
//! the LLM tiers), `turns.rs`, `executors.rs`, `telegram.rs`, `tls.rs`, `mail.rs` (with `[calendar]`).

mod conversation;
mod executors;
mod load;
mod mail;
mod runtime;
mod scheduler;
mod server;
mod services;
mod store_spec;
mod telegram;
mod telemetry;
mod telos;
#[cfg(test)]
mod test_env;
mod tls;
mod topology;
mod turns;
mod vaglio;
mod validate;
mod web;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use conversation::{ConversationConfig, MemoryConfig};
pub use executors::ExecutorsConfig;
pub use load::{CONFIG_ENV, ConfigError, ConfigSource, ENV_ALIASES, ENV_PREFIX};
pub use mail::{CalendarConfig, MailConfig};
pub use runtime::{LLM_TIERS, LlmProvider, LlmTierConfig, PlannerMode, RuntimeConfig};
pub use scheduler::SchedulerConfig;
pub use server::ServerConfig;
pub use services::{ApprovalConfig, ServiceConfig};
pub use store_spec::{StoreSpec, redact_url};
pub use telegram::{TelegramConfig, TelegramMode};
pub use telemetry::{LogFormat, TelemetryConfig};
pub use telos::{
    Local, TelosConfig, TelosPerson, TelosQuotas, TimeOfDayError, Window, WindowError, minutes_of,
};
pub use tls::TlsConfig;
pub use topology::{SERVICES, ServiceName, url_for_addr};
pub use turns::TurnsConfig;
pub use vaglio::{JudgeConfig, JudgeKind, JudgeThreshold, VaglioConfig};
pub use web::WebConfig;

/// The whole configuration, as loaded and validated.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where every service keeps its files. Empty: `$XDG_DATA_HOME/metnos`, else
    /// `~/.local/share/metnos`. Resolved by [`Config::load`].
    pub data_dir: PathBuf,
    pub telemetry: TelemetryConfig,
    pub server: ServerConfig,
    pub policy: ServiceConfig,
    pub vaglio: VaglioConfig,
    pub approval: ApprovalConfig,
    pub planner: ServiceConfig,
    pub gateway: ServiceConfig,
    pub runtime: RuntimeConfig,
    pub executors: ExecutorsConfig,
    pub turns: TurnsConfig,
    pub conversation: ConversationConfig,
    pub memory: MemoryConfig,
    pub telegram: TelegramConfig,
    pub tls: TlsConfig,
    pub telos: TelosConfig,
    pub scheduler: SchedulerConfig,
    pub web: WebConfig,
    pub mail: MailConfig,
    pub calendar: CalendarConfig,
    /// Metnos's own configuration folder (`$XDG_CONFIG_HOME/metnos`, else
    /// `~/.config/metnos`; the signing keys live there). Resolved by [`Config::load`], never
    /// read from a file.
    #[serde(skip)]
    pub config_dir: PathBuf,
    /// The config file read, if any (absolute). Set by [`Config::load`].
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::new(),
            telemetry: TelemetryConfig::default(),
            server: ServerConfig::default(),
            policy: ServiceConfig::for_service(ServiceName::Policy),
            vaglio: VaglioConfig::default(),
            approval: ApprovalConfig::default(),
            planner: ServiceConfig::for_service(ServiceName::Planner),
            gateway: ServiceConfig::for_service(ServiceName::Gateway),
            runtime: RuntimeConfig::default(),
            executors: ExecutorsConfig::default(),
            turns: TurnsConfig::default(),
            conversation: ConversationConfig::default(),
            memory: MemoryConfig::default(),
            telegram: TelegramConfig::default(),
            tls: TlsConfig::default(),
            telos: TelosConfig::default(),
            scheduler: SchedulerConfig::default(),
            web: WebConfig::default(),
            mail: MailConfig::default(),
            calendar: CalendarConfig::default(),
            config_dir: PathBuf::new(),
            config_file: None,
        }
    }
}

impl Config {
    /// Metnos's own files, which no executor may touch and the guard refuses to see named:
    /// the data directory, the certificates (and a mesh's key file), the executor catalog,
    /// the configuration folder (keys included), the config file in use and the password
    /// files of mail accounts and calendars.
    pub fn own_paths(&self) -> Vec<PathBuf> {
        let mut own = vec![
            self.data_dir.clone(),
            self.tls.dir.clone(),
            self.tls.key_file.clone(),
            self.executors.catalog_dir.clone(),
            self.executors.trust_file.clone(),
            self.config_dir.clone(),
        ];
        own.extend(self.config_file.clone());
        // The passwords of mail accounts and calendars, wherever the person keeps them: only
        // the one mail call that logs in reads one.
        own.extend(self.mail.accounts.values().map(|a| a.password_file.clone()));
        own.extend(
            self.calendar
                .sources
                .values()
                .map(|s| s.password_file.clone()),
        );
        own.retain(|p| !p.as_os_str().is_empty());
        own.dedup();
        own
    }
}
