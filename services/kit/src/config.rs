//! The one Metnos configuration: `metnos.toml`, then `METNOS_*` environment overrides.
//!
//! Every key can be overridden by `METNOS_` + its path in upper case with `__` between
//! levels: `[runtime.llm.fast] base_url` is `METNOS_RUNTIME__LLM__FAST__BASE_URL`,
//! `data_dir` is `METNOS_DATA_DIR`. Unknown keys and bad values are errors that name the
//! key and where it came from, so a typo never silently falls back to a default.
//! The standard `OTEL_EXPORTER_OTLP_ENDPOINT` turns trace export on.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use metnos_core::level::AutonomyLevel;
use serde::{Deserialize, Serialize};

/// Environment variable naming the config file (the `--config` flag wins over it).
pub const CONFIG_ENV: &str = "METNOS_CONFIG";

/// Prefix of every environment override.
pub const ENV_PREFIX: &str = "METNOS_";

/// The five services, in start-up order (dependencies first).
pub const SERVICES: [ServiceName; 5] = [
    ServiceName::Policy,
    ServiceName::Vaglio,
    ServiceName::Approval,
    ServiceName::Planner,
    ServiceName::Gateway,
];

/// One of the five Metnos services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServiceName {
    Policy,
    Vaglio,
    Approval,
    Planner,
    Gateway,
}

impl ServiceName {
    /// Short name: `policy`, also the config section and the SQLite file stem.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceName::Policy => "policy",
            ServiceName::Vaglio => "vaglio",
            ServiceName::Approval => "approval",
            ServiceName::Planner => "planner",
            ServiceName::Gateway => "gateway",
        }
    }

    /// Binary and OpenTelemetry service name: `metnos-policy`.
    pub fn binary(self) -> &'static str {
        match self {
            ServiceName::Policy => "metnos-policy",
            ServiceName::Vaglio => "metnos-vaglio",
            ServiceName::Approval => "metnos-approval",
            ServiceName::Planner => "metnos-planner",
            ServiceName::Gateway => "metnos-gateway",
        }
    }

    /// Fully qualified gRPC service name, as health and reflection report it.
    pub fn grpc_name(self) -> &'static str {
        use metnos_proto::service_names as n;
        match self {
            ServiceName::Policy => n::POLICY,
            ServiceName::Vaglio => n::VAGLIO,
            ServiceName::Approval => n::APPROVAL,
            ServiceName::Planner => n::PLANNER,
            ServiceName::Gateway => n::GATEWAY,
        }
    }

    /// Default loopback port.
    pub fn default_port(self) -> u16 {
        match self {
            ServiceName::Policy => 50051,
            ServiceName::Vaglio => 50052,
            ServiceName::Approval => 50053,
            ServiceName::Planner => 50054,
            ServiceName::Gateway => 50055,
        }
    }

    /// The services this one calls, whose health it watches at start-up.
    pub fn dependencies(self) -> &'static [ServiceName] {
        match self {
            ServiceName::Policy | ServiceName::Vaglio => &[],
            ServiceName::Approval => &[ServiceName::Policy],
            ServiceName::Planner => &[
                ServiceName::Policy,
                ServiceName::Vaglio,
                ServiceName::Approval,
            ],
            ServiceName::Gateway => &[ServiceName::Planner, ServiceName::Approval],
        }
    }

    /// Parses a short name.
    pub fn parse(name: &str) -> Option<ServiceName> {
        SERVICES.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    pub vaglio: ServiceConfig,
    pub approval: ApprovalConfig,
    pub planner: ServiceConfig,
    pub gateway: ServiceConfig,
    pub runtime: RuntimeConfig,
    pub executors: ExecutorsConfig,
    pub turns: TurnsConfig,
    pub telegram: TelegramConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::new(),
            telemetry: TelemetryConfig::default(),
            server: ServerConfig::default(),
            policy: ServiceConfig::for_service(ServiceName::Policy),
            vaglio: ServiceConfig::for_service(ServiceName::Vaglio),
            approval: ApprovalConfig::default(),
            planner: ServiceConfig::for_service(ServiceName::Planner),
            gateway: ServiceConfig::for_service(ServiceName::Gateway),
            runtime: RuntimeConfig::default(),
            executors: ExecutorsConfig::default(),
            turns: TurnsConfig::default(),
            telegram: TelegramConfig::default(),
        }
    }
}

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

/// Serving behaviour shared by every service.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// How long in-flight calls may finish after a shutdown signal.
    pub shutdown_grace_seconds: u64,
    /// How long to wait for a store (Postgres) to answer at start-up.
    pub store_connect_timeout_seconds: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            shutdown_grace_seconds: 10,
            store_connect_timeout_seconds: 10,
        }
    }
}

impl ServerConfig {
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_seconds)
    }

    pub fn store_connect_timeout(&self) -> Duration {
        Duration::from_secs(self.store_connect_timeout_seconds)
    }
}

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
    fn for_service(service: ServiceName) -> Self {
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
    pub ttl_seconds: u64,
    /// How long a "session" territory concession lasts.
    pub session_seconds: u64,
    /// How often expired requests are swept (and unrecorded territory grants retried).
    pub sweep_interval_seconds: u64,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        let base = ServiceConfig::for_service(ServiceName::Approval);
        ApprovalConfig {
            listen: base.listen,
            url: base.url,
            store: base.store,
            ttl_seconds: 600,
            session_seconds: 8 * 60 * 60,
            sweep_interval_seconds: 5,
        }
    }
}

/// The agent runtime: whose home `~` means and which LLMs plan.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// The home of the person Metnos acts for; `~` in tool arguments expands to it.
    /// Empty: the HOME of the process that loads the config.
    pub user_home: PathBuf,
    /// `local`, `online` or `hybrid`.
    pub mode: PlannerMode,
    /// LLM tiers; only `fast` is needed, a missing tier aliases down.
    pub llm: BTreeMap<String, LlmTierConfig>,
}

/// The executor catalog, who may sign it, and the sandbox of `shell_exec`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorsConfig {
    /// A directory with one folder per executor (`manifest.toml` + `manifest.sig`).
    /// Empty: `<data_dir>/executors`.
    pub catalog_dir: PathBuf,
    /// Signers whose signatures are trusted: name → ed25519 public key (base64, as
    /// `metnos executors keygen` prints it).
    pub trusted_keys: BTreeMap<String, String>,
    /// Programs `shell_exec` may run (by name, looked up in /usr/local/bin, /usr/bin, /bin).
    pub shell_allow: Vec<String>,
    /// Where `shell_exec` runs and the only place it may write. Empty:
    /// `<data_dir>/workspace`.
    pub workspace: PathBuf,
    /// Resource limits of a `shell_exec` command: CPU seconds, address space, file size.
    pub shell_cpu_seconds: u64,
    pub shell_memory_mb: u64,
    pub shell_file_size_mb: u64,
    /// Hosts on this machine or the home network (`nas.lan`, `*.lan`, `192.168.1.10`)
    /// that network executors may reach. Every other loopback, private, link-local or
    /// special-purpose address is refused, whatever an executor's scope says.
    pub local_hosts: Vec<String>,
}

impl Default for ExecutorsConfig {
    fn default() -> Self {
        ExecutorsConfig {
            catalog_dir: PathBuf::new(),
            trusted_keys: BTreeMap::new(),
            shell_allow: [
                "ls", "cat", "head", "tail", "wc", "grep", "find", "du", "df", "date", "echo",
                "sort", "uniq", "git",
            ]
            .map(str::to_owned)
            .to_vec(),
            workspace: PathBuf::new(),
            shell_cpu_seconds: 10,
            shell_memory_mb: 1024,
            shell_file_size_mb: 64,
            local_hosts: Vec::new(),
        }
    }
}

/// The Telegram channel of the gateway. The bot token is never a config key: it comes
/// from the `METNOS_TELEGRAM_TOKEN` environment variable or from `token_file`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelegramConfig {
    /// A file holding the bot token (e.g. a Docker or Kubernetes secret). Empty: only
    /// the environment variable.
    pub token_file: PathBuf,
    /// The Bot API server.
    pub api_url: String,
    /// `polling` (long polling, the default) or `webhook`.
    pub mode: TelegramMode,
    /// Long-polling timeout.
    pub poll_timeout_seconds: u32,
    /// Webhook mode: where the gateway listens for Telegram's POSTs.
    pub webhook_listen: SocketAddr,
    /// Webhook mode: the public HTTPS URL Telegram posts to (registered at start).
    pub webhook_url: String,
    /// Messages per second sent to one chat, and to all chats (Telegram's limits are 1 and 30).
    pub per_chat_per_second: u32,
    pub global_per_second: u32,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        TelegramConfig {
            token_file: PathBuf::new(),
            api_url: "https://api.telegram.org".to_owned(),
            mode: TelegramMode::Polling,
            poll_timeout_seconds: 25,
            webhook_listen: SocketAddr::from(([127, 0, 0, 1], 8443)),
            webhook_url: String::new(),
            per_chat_per_second: 1,
            global_per_second: 30,
        }
    }
}

/// How updates arrive from Telegram.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum TelegramMode {
    #[default]
    Polling,
    Webhook,
}

/// The planner's turns: caps, budget, pre-filter, scratchpad, hybrid escalation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TurnsConfig {
    /// Most tool calls in one turn.
    pub cap_steps: u32,
    /// Most calls of one executor in one turn.
    pub cap_same_executor: u32,
    /// Wall-clock budget of a turn's own work (LLM calls and executors; time spent waiting
    /// for a person's approval does not count).
    pub budget_seconds: u64,
    /// Most executors the pre-filter offers the LLM.
    pub prefilter_max: u32,
    /// Observations larger than this (bytes of JSON) go to the scratchpad.
    pub scratchpad_threshold_bytes: u64,
    /// How long scratchpad entries and finished turns' checkpoints are kept.
    pub retention_hours: u64,
    /// Hybrid mode: escalate to the wise tier after this many failed steps (0: never).
    pub hybrid_escalate_after_failures: u32,
    /// Hybrid mode: escalate to the wise tier when a candidate executor needs one of these
    /// capabilities.
    pub hybrid_wise_capabilities: Vec<String>,
    /// The autonomy level of the local user in `metnos ask` / `metnos chat`.
    pub cli_level: AutonomyLevel,
}

impl Default for TurnsConfig {
    fn default() -> Self {
        TurnsConfig {
            cap_steps: 5,
            cap_same_executor: 2,
            budget_seconds: 300,
            prefilter_max: 30,
            scratchpad_threshold_bytes: 4096,
            retention_hours: 24,
            hybrid_escalate_after_failures: 2,
            hybrid_wise_capabilities: Vec::new(),
            cli_level: AutonomyLevel::Supervised,
        }
    }
}

/// How the planner loops.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum PlannerMode {
    #[default]
    Local,
    Online,
    Hybrid,
}

/// One LLM tier, `[runtime.llm.<fast|middle|wise>]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LlmTierConfig {
    pub provider: LlmProvider,
    pub model: String,
    /// Empty: the provider's usual local address.
    #[serde(default)]
    pub base_url: String,
    #[serde(default)]
    pub think: bool,
    #[serde(default = "default_llm_timeout")]
    pub timeout_seconds: u64,
    /// Name of the environment variable holding the API key (never the key itself).
    #[serde(default)]
    pub api_key_env: String,
}

fn default_llm_timeout() -> u64 {
    120
}

/// LLM wire formats.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LlmProvider {
    Ollama,
    Openai,
    Anthropic,
}

/// The LLM tiers that may be configured.
pub const LLM_TIERS: [&str; 3] = ["fast", "middle", "wise"];

/// Top-level keys an environment variable may override; any other `METNOS_*` variable
/// (`METNOS_CONFIG`, test settings) is not configuration.
const TOP_LEVEL_KEYS: [&str; 12] = [
    "data_dir",
    "telemetry",
    "server",
    "policy",
    "vaglio",
    "approval",
    "planner",
    "gateway",
    "runtime",
    "executors",
    "turns",
    "telegram",
];

/// A configuration that cannot be used, with the key and the source at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("config key `{key}`{note}: {message}", note = origin_note(.origin))]
    Key {
        key: String,
        /// Where the bad value came from: the file or the environment variable.
        origin: Option<String>,
        message: String,
    },
}

fn origin_note(origin: &Option<String>) -> String {
    match origin {
        Some(s) => format!(" (from {s})"),
        None => String::new(),
    }
}

impl ConfigError {
    fn key(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Key {
            key: key.into(),
            origin: None,
            message: message.into(),
        }
    }
}

/// Where a config comes from: an optional file plus the process environment.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// Explicit file (`--config`); must exist.
    pub file: Option<PathBuf>,
}

impl ConfigSource {
    /// The file from `--config`, else from `METNOS_CONFIG`, else looked up.
    pub fn from_env(cli_file: Option<PathBuf>) -> Self {
        let file = cli_file.or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from));
        ConfigSource { file }
    }

    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }

    /// The config file to read: the explicit one, else `./metnos.toml`, else
    /// `$XDG_CONFIG_HOME/metnos/metnos.toml` (`~/.config/metnos/metnos.toml`), if present.
    fn resolve_file(&self) -> Result<Option<PathBuf>, ConfigError> {
        if let Some(path) = &self.file {
            if !path.is_file() {
                return Err(ConfigError::File {
                    path: path.clone(),
                    message: "no such file".to_owned(),
                });
            }
            return Ok(Some(path.clone()));
        }
        let local = PathBuf::from("metnos.toml");
        if local.is_file() {
            return Ok(Some(local));
        }
        let xdg = self
            .var("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| self.var("HOME").map(|h| Path::new(&h).join(".config")));
        Ok(xdg
            .map(|dir| dir.join("metnos").join("metnos.toml"))
            .filter(|p| p.is_file()))
    }
}

impl Config {
    /// Loads defaults, then the config file, then `METNOS_*` overrides, and validates.
    pub fn load(source: &ConfigSource) -> Result<Config, ConfigError> {
        let file = source.resolve_file()?;
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = &file {
            // Parse first so a syntax error names the file, not a key.
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
                path: path.clone(),
                message: e.to_string(),
            })?;
            if let Err(e) = text.parse::<toml::Table>() {
                return Err(ConfigError::File {
                    path: path.clone(),
                    message: e.message().to_owned(),
                });
            }
            figment = figment.merge(Toml::file_exact(path));
        }
        figment = figment.merge(env_provider());

        let mut config: Config = figment.extract().map_err(from_figment)?;
        config.telemetry.otlp_endpoint = source
            .var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| source.var("OTEL_EXPORTER_OTLP_ENDPOINT"));
        config.resolve_paths(source)?;
        config.validate()?;
        Ok(config)
    }

    fn resolve_paths(&mut self, source: &ConfigSource) -> Result<(), ConfigError> {
        let home = source.var("HOME").map(PathBuf::from);
        if self.data_dir.as_os_str().is_empty() {
            self.data_dir = match source.var("XDG_DATA_HOME") {
                Some(xdg) => Path::new(&xdg).join("metnos"),
                None => match &home {
                    Some(h) => h.join(".local/share/metnos"),
                    None => {
                        return Err(ConfigError::key(
                            "data_dir",
                            "not set, and neither XDG_DATA_HOME nor HOME is set",
                        ));
                    }
                },
            };
        }
        self.data_dir = expand_tilde(&self.data_dir, home.as_deref())
            .ok_or_else(|| ConfigError::key("data_dir", "starts with ~ but HOME is not set"))?;
        if self.runtime.user_home.as_os_str().is_empty()
            && let Some(h) = &home
        {
            self.runtime.user_home = h.clone();
        }
        for (key, path, default) in [
            (
                "executors.catalog_dir",
                &mut self.executors.catalog_dir,
                "executors",
            ),
            (
                "executors.workspace",
                &mut self.executors.workspace,
                "workspace",
            ),
        ] {
            if path.as_os_str().is_empty() {
                *path = self.data_dir.join(default);
            }
            *path = expand_tilde(path, home.as_deref())
                .ok_or_else(|| ConfigError::key(key, "starts with ~ but HOME is not set"))?;
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !self.data_dir.is_absolute() {
            return Err(ConfigError::key(
                "data_dir",
                format!("must be an absolute path, got {}", self.data_dir.display()),
            ));
        }
        if self.runtime.user_home.as_os_str().is_empty() {
            return Err(ConfigError::key(
                "runtime.user_home",
                "not set and HOME is not set",
            ));
        }
        if !self.runtime.user_home.is_absolute() {
            return Err(ConfigError::key(
                "runtime.user_home",
                format!(
                    "must be an absolute path, got {}",
                    self.runtime.user_home.display()
                ),
            ));
        }
        if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(&self.telemetry.log) {
            return Err(ConfigError::key(
                "telemetry.log",
                format!("not a valid log filter: {e}"),
            ));
        }
        for (key, value) in [
            ("approval.ttl_seconds", self.approval.ttl_seconds),
            ("approval.session_seconds", self.approval.session_seconds),
            (
                "approval.sweep_interval_seconds",
                self.approval.sweep_interval_seconds,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::key(key, "must be at least 1"));
            }
        }
        for (key, value) in [
            (
                "executors.shell_cpu_seconds",
                self.executors.shell_cpu_seconds,
            ),
            ("executors.shell_memory_mb", self.executors.shell_memory_mb),
            (
                "executors.shell_file_size_mb",
                self.executors.shell_file_size_mb,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::key(key, "must be at least 1"));
            }
        }
        check_url(&self.telegram.api_url).map_err(|m| ConfigError::key("telegram.api_url", m))?;
        if self.telegram.mode == TelegramMode::Webhook
            && !self.telegram.webhook_url.starts_with("https://")
        {
            return Err(ConfigError::key(
                "telegram.webhook_url",
                "webhook mode needs the public https:// URL Telegram posts to",
            ));
        }
        for (key, value) in [
            (
                "telegram.poll_timeout_seconds",
                u64::from(self.telegram.poll_timeout_seconds),
            ),
            (
                "telegram.per_chat_per_second",
                u64::from(self.telegram.per_chat_per_second),
            ),
            (
                "telegram.global_per_second",
                u64::from(self.telegram.global_per_second),
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::key(key, "must be at least 1"));
            }
        }
        for (key, value) in [
            ("turns.cap_steps", u64::from(self.turns.cap_steps)),
            (
                "turns.cap_same_executor",
                u64::from(self.turns.cap_same_executor),
            ),
            ("turns.budget_seconds", self.turns.budget_seconds),
            ("turns.prefilter_max", u64::from(self.turns.prefilter_max)),
            (
                "turns.scratchpad_threshold_bytes",
                self.turns.scratchpad_threshold_bytes,
            ),
            ("turns.retention_hours", self.turns.retention_hours),
        ] {
            if value == 0 {
                return Err(ConfigError::key(key, "must be at least 1"));
            }
        }
        for (key, path) in [
            ("executors.catalog_dir", &self.executors.catalog_dir),
            ("executors.workspace", &self.executors.workspace),
        ] {
            if !path.is_absolute() {
                return Err(ConfigError::key(
                    key,
                    format!("must be an absolute path, got {}", path.display()),
                ));
            }
        }
        for program in &self.executors.shell_allow {
            if program.is_empty() || program.contains('/') || program.contains(char::is_whitespace)
            {
                return Err(ConfigError::key(
                    "executors.shell_allow",
                    format!("`{program}` is not a program name (no paths, no spaces)"),
                ));
            }
        }
        for host in &self.executors.local_hosts {
            let pattern = host.strip_prefix("*.").unwrap_or(host);
            if pattern.is_empty()
                || pattern.contains(['/', '*', '@'])
                || pattern.contains(char::is_whitespace)
            {
                return Err(ConfigError::key(
                    "executors.local_hosts",
                    format!(
                        "`{host}` is not a host, an address or `*.domain` (list the hosts one by one: \
                         `*` would open this machine and the whole home network)"
                    ),
                ));
            }
        }
        if self.server.store_connect_timeout_seconds == 0 {
            return Err(ConfigError::key(
                "server.store_connect_timeout_seconds",
                "must be at least 1",
            ));
        }
        for service in SERVICES {
            let section = self.service(service);
            let key = |k: &str| format!("{service}.{k}");
            if !section.url.is_empty() {
                check_service_url(&section.url).map_err(|m| ConfigError::key(key("url"), m))?;
            }
            StoreSpec::parse(&section.store, &self.data_dir, service)
                .map_err(|m| ConfigError::key(key("store"), m))?;
        }
        for (tier, llm) in &self.runtime.llm {
            if !LLM_TIERS.contains(&tier.as_str()) {
                return Err(ConfigError::key(
                    format!("runtime.llm.{tier}"),
                    "unknown tier; the tiers are fast, middle and wise",
                ));
            }
            if llm.model.trim().is_empty() {
                return Err(ConfigError::key(
                    format!("runtime.llm.{tier}.model"),
                    "must not be empty",
                ));
            }
            if !llm.base_url.is_empty() {
                check_url(&llm.base_url)
                    .map_err(|m| ConfigError::key(format!("runtime.llm.{tier}.base_url"), m))?;
            }
            if llm.timeout_seconds == 0 {
                return Err(ConfigError::key(
                    format!("runtime.llm.{tier}.timeout_seconds"),
                    "must be at least 1",
                ));
            }
        }
        Ok(())
    }

    /// Fails when two services would bind the same address (port 0 excepted), as
    /// `metnos up` would otherwise fail half-started.
    pub fn check_distinct_listen(&self) -> Result<(), ConfigError> {
        let mut seen: BTreeMap<SocketAddr, ServiceName> = BTreeMap::new();
        for service in SERVICES {
            let addr = self.service(service).listen;
            if addr.port() == 0 {
                continue;
            }
            if let Some(other) = seen.insert(addr, service) {
                return Err(ConfigError::key(
                    format!("{service}.listen"),
                    format!("{addr} is also {other}.listen"),
                ));
            }
        }
        Ok(())
    }

    /// Where one service listens, how it is reached, where its store is.
    pub fn service(&self, service: ServiceName) -> ServiceConfig {
        match service {
            ServiceName::Policy => self.policy.clone(),
            ServiceName::Vaglio => self.vaglio.clone(),
            ServiceName::Approval => ServiceConfig {
                listen: self.approval.listen,
                url: self.approval.url.clone(),
                store: self.approval.store.clone(),
            },
            ServiceName::Planner => self.planner.clone(),
            ServiceName::Gateway => self.gateway.clone(),
        }
    }

    /// Sets how clients reach a service (`metnos up` points peers at bound ports).
    pub fn set_service_url(&mut self, service: ServiceName, url: String) {
        match service {
            ServiceName::Policy => self.policy.url = url,
            ServiceName::Vaglio => self.vaglio.url = url,
            ServiceName::Approval => self.approval.url = url,
            ServiceName::Planner => self.planner.url = url,
            ServiceName::Gateway => self.gateway.url = url,
        }
    }

    /// How clients reach a service: its `url`, else `http://` + its listen address
    /// (an unspecified address such as 0.0.0.0 becomes loopback).
    pub fn service_url(&self, service: ServiceName) -> String {
        let section = self.service(service);
        if !section.url.is_empty() {
            return section.url;
        }
        url_for_addr(section.listen)
    }

    /// The store of one service, resolved against the data directory.
    pub fn store(&self, service: ServiceName) -> StoreSpec {
        StoreSpec::parse(&self.service(service).store, &self.data_dir, service)
            .expect("validated at load")
    }
}

/// `http://` URL for a bound address; an unspecified IP becomes loopback.
pub fn url_for_addr(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => std::net::IpAddr::from([127, 0, 0, 1]),
        ip if ip.is_unspecified() => std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

/// A service URL: http(s), or `dns:///host:port` for every address of a name.
fn check_service_url(url: &str) -> Result<(), String> {
    match crate::client::dns_target(url) {
        Some(target) => target.map(|_| ()),
        None => check_url(url)
            .map_err(|e| e.replace("http:// or https://", "http://, https:// or dns:///")),
    }
}

fn check_url(url: &str) -> Result<(), String> {
    let parsed: http::Uri = url
        .parse()
        .map_err(|e| format!("not a valid URL ({e}): {url}"))?;
    match parsed.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(format!("must start with http:// or https://, got {url}")),
    }
    if parsed.host().is_none_or(str::is_empty) {
        return Err(format!("has no host: {url}"));
    }
    Ok(())
}

fn expand_tilde(path: &Path, home: Option<&Path>) -> Option<PathBuf> {
    let Ok(rest) = path.strip_prefix("~") else {
        return Some(path.to_path_buf());
    };
    home.map(|h| h.join(rest))
}

fn env_provider() -> Env {
    Env::prefixed(ENV_PREFIX).split("__").filter(|key| {
        let top = key.as_str().split('.').next().unwrap_or_default();
        TOP_LEVEL_KEYS.iter().any(|k| k.eq_ignore_ascii_case(top))
    })
}

fn from_figment(error: figment::Error) -> ConfigError {
    // figment may chain several errors; the first is the one to fix first.
    let error = error
        .into_iter()
        .next()
        .expect("figment error has one entry");
    let key = error.path.join(".");
    let origin = error.metadata.as_ref().map(|md| match &md.source {
        Some(figment::Source::File(path)) => path.display().to_string(),
        _ if md.name.contains("environment") => {
            format!("{ENV_PREFIX}{}", error.path.join("__").to_ascii_uppercase())
        }
        _ => md.name.to_string(),
    });
    let message = match &error.kind {
        // The path already ends with the unknown field.
        figment::error::Kind::UnknownField(..) => "unknown key".to_owned(),
        kind => kind.to_string(),
    };
    ConfigError::Key {
        key: if key.is_empty() {
            "(root)".to_owned()
        } else {
            key
        },
        origin,
        message,
    }
}

/// Where a service keeps its relational store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// A SQLite file (WAL mode).
    Sqlite { path: PathBuf },
    /// A PostgreSQL database.
    Postgres { url: String },
}

impl StoreSpec {
    /// Parses a `store` value: `sqlite`, `sqlite:<path>` (relative paths are under the
    /// data directory) or `postgres://…` / `postgresql://…`.
    pub fn parse(value: &str, data_dir: &Path, service: ServiceName) -> Result<StoreSpec, String> {
        let value = value.trim();
        if value.is_empty() || value == "sqlite" {
            return Ok(StoreSpec::Sqlite {
                path: data_dir.join(format!("{service}.db")),
            });
        }
        if let Some(path) = value.strip_prefix("sqlite:") {
            let path = path.trim_start_matches("//");
            if path.is_empty() {
                return Err(
                    "sqlite: needs a file path, e.g. sqlite:/var/lib/metnos/policy.db".to_owned(),
                );
            }
            let path = Path::new(path);
            let path = if path.is_absolute() {
                path.to_path_buf()
            } else {
                data_dir.join(path)
            };
            return Ok(StoreSpec::Sqlite { path });
        }
        if value.starts_with("postgres://") || value.starts_with("postgresql://") {
            let parsed: Result<sqlx::postgres::PgConnectOptions, _> = value.parse();
            if let Err(e) = parsed {
                return Err(format!(
                    "not a valid PostgreSQL URL ({}): {}",
                    first_line(&e.to_string()),
                    redact_url(value)
                ));
            }
            return Ok(StoreSpec::Postgres {
                url: value.to_owned(),
            });
        }
        Err(format!(
            "must be `sqlite`, `sqlite:<path>` or a postgres:// URL, got {}",
            redact_url(value)
        ))
    }

    /// Printable description with any password removed.
    pub fn describe(&self) -> String {
        match self {
            StoreSpec::Sqlite { path } => format!("sqlite:{}", path.display()),
            StoreSpec::Postgres { url } => redact_url(url),
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// A URL with its password (if any) replaced by `***`, safe to log.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let user = userinfo.split(':').next().unwrap_or_default();
    if userinfo.contains(':') {
        format!("{scheme}://{user}:***@{host}{tail}")
    } else {
        format!("{scheme}://{user}@{host}{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::Jail;

    /// Runs `f` with a clean environment (HOME=/home/u plus `vars`) in a temp directory.
    #[allow(clippy::result_large_err)] // figment's Jail API fixes the error type
    fn with_env(vars: &[(&str, &str)], f: impl FnOnce(&mut Jail) -> Result<(), String>) {
        Jail::expect_with(|jail| {
            jail.clear_env();
            jail.set_env("HOME", "/home/u");
            for (k, v) in vars {
                jail.set_env(k, v);
            }
            f(jail).map_err(figment::Error::from)
        });
    }

    fn load() -> Result<Config, String> {
        Config::load(&ConfigSource::default()).map_err(|e| e.to_string())
    }

    fn load_err() -> String {
        match load() {
            Ok(c) => panic!("expected an error, got {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn service_urls_may_be_dns_targets_for_client_side_balancing() {
        with_env(
            &[("METNOS_VAGLIO__URL", "dns:///metnos-vaglio-pods:50052")],
            |_| {
                let config = load()?;
                assert_eq!(
                    config.service_url(ServiceName::Vaglio),
                    "dns:///metnos-vaglio-pods:50052"
                );
                Ok(())
            },
        );
        with_env(
            &[("METNOS_VAGLIO__URL", "dns:///metnos-vaglio-pods")],
            |_| {
                let error = load_err();
                assert!(
                    error.contains("vaglio.url") && error.contains("dns:///host:port"),
                    "{error}"
                );
                Ok(())
            },
        );
        with_env(
            &[
                ("METNOS_RUNTIME__LLM__FAST__PROVIDER", "ollama"),
                ("METNOS_RUNTIME__LLM__FAST__MODEL", "m"),
                ("METNOS_RUNTIME__LLM__FAST__BASE_URL", "dns:///ollama:11434"),
            ],
            |_| {
                // Only service URLs: an LLM is reached over plain HTTP.
                assert!(load_err().contains("runtime.llm.fast.base_url"));
                Ok(())
            },
        );
    }

    #[test]
    fn local_hosts_are_named_one_by_one() {
        with_env(
            &[(
                "METNOS_EXECUTORS__LOCAL_HOSTS",
                r#"["nas.lan", "*.home", "192.168.1.10", "::1"]"#,
            )],
            |_| {
                assert_eq!(
                    load()?.executors.local_hosts,
                    ["nas.lan", "*.home", "192.168.1.10", "::1"]
                );
                Ok(())
            },
        );
        for bad in [
            r#"["*"]"#,
            r#"["*.*"]"#,
            r#"["a b"]"#,
            r#"["http://nas/"]"#,
            r#"[""]"#,
        ] {
            with_env(&[("METNOS_EXECUTORS__LOCAL_HOSTS", bad)], |_| {
                let error = load_err();
                assert!(
                    error.contains("executors.local_hosts")
                        && error.contains("is not a host, an address or `*.domain`"),
                    "{bad}: {error}"
                );
                Ok(())
            });
        }
    }

    #[test]
    fn defaults_give_five_loopback_services_and_sqlite_under_the_data_dir() {
        with_env(&[], |_| {
            let config = load()?;
            assert_eq!(
                config.data_dir,
                PathBuf::from("/home/u/.local/share/metnos")
            );
            assert_eq!(
                config.service_url(ServiceName::Policy),
                "http://127.0.0.1:50051"
            );
            assert_eq!(
                config.service_url(ServiceName::Gateway),
                "http://127.0.0.1:50055"
            );
            assert_eq!(
                config.store(ServiceName::Approval),
                StoreSpec::Sqlite {
                    path: PathBuf::from("/home/u/.local/share/metnos/approval.db")
                }
            );
            assert_eq!(config.runtime.user_home, PathBuf::from("/home/u"));
            config.check_distinct_listen().map_err(|e| e.to_string())
        });
    }

    #[test]
    fn data_dir_comes_from_metnos_data_dir_then_xdg() {
        with_env(&[("XDG_DATA_HOME", "/x")], |jail| {
            assert_eq!(load()?.data_dir, PathBuf::from("/x/metnos"));
            jail.set_env("METNOS_DATA_DIR", "/srv/m");
            assert_eq!(load()?.data_dir, PathBuf::from("/srv/m"));
            jail.set_env("METNOS_DATA_DIR", "~/m");
            assert_eq!(load()?.data_dir, PathBuf::from("/home/u/m"));
            Ok(())
        });
    }

    #[test]
    fn the_local_metnos_toml_is_found_and_env_overrides_a_nested_key() {
        with_env(
            &[(
                "METNOS_RUNTIME__LLM__FAST__BASE_URL",
                "http://127.0.0.1:9999",
            )],
            |jail| {
                jail.create_file(
                    "metnos.toml",
                    "[runtime.llm.fast]\nprovider = \"ollama\"\nmodel = \"qwen3:8b\"\nbase_url = \"http://127.0.0.1:11434\"\n",
                )
                .map_err(|e| e.to_string())?;
                let config = load()?;
                let fast = &config.runtime.llm["fast"];
                assert_eq!(fast.base_url, "http://127.0.0.1:9999");
                assert_eq!(fast.model, "qwen3:8b");
                Ok(())
            },
        );
    }

    #[test]
    fn env_overrides_listen_and_store() {
        with_env(
            &[
                ("METNOS_POLICY__LISTEN", "127.0.0.1:6000"),
                (
                    "METNOS_POLICY__STORE",
                    "postgres://metnos:s3cret@db:5432/policy",
                ),
            ],
            |_| {
                let config = load()?;
                assert_eq!(config.policy.listen.port(), 6000);
                assert_eq!(
                    config.service_url(ServiceName::Policy),
                    "http://127.0.0.1:6000"
                );
                assert_eq!(
                    config.store(ServiceName::Policy).describe(),
                    "postgres://metnos:***@db:5432/policy"
                );
                Ok(())
            },
        );
    }

    #[test]
    fn a_bad_env_value_names_the_key_and_the_variable() {
        with_env(&[("METNOS_POLICY__LISTEN", "not-an-address")], |_| {
            let err = load_err();
            assert!(err.contains("`policy.listen`"), "{err}");
            assert!(err.contains("METNOS_POLICY__LISTEN"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_bad_file_value_names_the_key_and_the_file() {
        with_env(&[], |jail| {
            jail.create_file(
                "metnos.toml",
                "[server]\nshutdown_grace_seconds = \"soon\"\n",
            )
            .map_err(|e| e.to_string())?;
            let err = load_err();
            assert!(err.contains("`server.shutdown_grace_seconds`"), "{err}");
            assert!(err.contains("metnos.toml"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn an_unknown_key_is_an_error_not_a_silent_default() {
        with_env(&[], |jail| {
            jail.create_file(
                "metnos.toml",
                "[policy]\nlisten = \"127.0.0.1:1\"\nlsten = \"x\"\n",
            )
            .map_err(|e| e.to_string())?;
            let err = load_err();
            assert!(err.contains("`policy.lsten`"), "{err}");
            assert!(err.contains("unknown key"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_toml_syntax_error_names_the_file() {
        with_env(&[], |jail| {
            jail.create_file("metnos.toml", "[policy\n")
                .map_err(|e| e.to_string())?;
            let err = load_err();
            assert!(err.starts_with("config file metnos.toml"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_missing_explicit_file_is_an_error() {
        with_env(&[("METNOS_CONFIG", "/nonexistent/metnos.toml")], |_| {
            let err = Config::load(&ConfigSource::from_env(None))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("/nonexistent/metnos.toml: no such file"),
                "{err}"
            );
            Ok(())
        });
    }

    #[test]
    fn bad_store_values_are_refused_with_the_password_hidden() {
        with_env(&[("METNOS_APPROVAL__STORE", "mysql://u:pw@h/db")], |jail| {
            let err = load_err();
            assert!(err.contains("`approval.store`"), "{err}");
            assert!(!err.contains("pw"), "{err}");
            jail.set_env("METNOS_APPROVAL__STORE", "postgres://u:pw@h:notaport/db");
            let err = load_err();
            assert!(err.contains("not a valid PostgreSQL URL"), "{err}");
            assert!(!err.contains(":pw@"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn other_metnos_variables_are_not_configuration() {
        with_env(
            &[
                ("METNOS_TEST_POSTGRES_URL", "postgres://x"),
                ("METNOS_JUDGE_KIND", "llm-v1"),
            ],
            |_| load().map(|_| ()),
        );
    }

    #[test]
    fn unknown_llm_tier_bad_provider_and_bad_log_filter_are_refused() {
        with_env(&[], |jail| {
            jail.create_file(
                "metnos.toml",
                "[runtime.llm.huge]\nprovider = \"ollama\"\nmodel = \"m\"\n",
            )
            .map_err(|e| e.to_string())?;
            let err = load_err();
            assert!(err.contains("`runtime.llm.huge`"), "{err}");
            jail.create_file(
                "metnos.toml",
                "[runtime.llm.fast]\nprovider = \"gpt\"\nmodel = \"m\"\n",
            )
            .map_err(|e| e.to_string())?;
            let err = load_err();
            assert!(err.contains("`runtime.llm.fast.provider`"), "{err}");
            jail.create_file("metnos.toml", "")
                .map_err(|e| e.to_string())?;
            jail.set_env("METNOS_TELEMETRY__LOG", "info,[[[");
            let err = load_err();
            assert!(err.contains("`telemetry.log`"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn two_services_on_one_address_are_refused() {
        with_env(&[("METNOS_VAGLIO__LISTEN", "127.0.0.1:50051")], |_| {
            let err = load()?.check_distinct_listen().unwrap_err().to_string();
            assert!(err.contains("`vaglio.listen`"), "{err}");
            assert!(err.contains("policy.listen"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn the_documented_example_is_exactly_the_defaults() {
        let example = include_str!("../../../metnos.example.toml");
        with_env(&[], |jail| {
            let defaults = load()?;
            jail.create_file("metnos.toml", example)
                .map_err(|e| e.to_string())?;
            assert_eq!(load()?, defaults);
            Ok(())
        });
    }

    #[test]
    fn unspecified_listen_addresses_are_reached_on_loopback() {
        assert_eq!(
            url_for_addr("0.0.0.0:7".parse().unwrap()),
            "http://127.0.0.1:7"
        );
        assert_eq!(url_for_addr("[::]:7".parse().unwrap()), "http://[::1]:7");
    }

    #[test]
    fn redaction_hides_only_the_password() {
        assert_eq!(
            redact_url("postgres://u:p@h:1/d?x=1"),
            "postgres://u:***@h:1/d?x=1"
        );
        assert_eq!(redact_url("postgres://u@h/d"), "postgres://u@h/d");
        assert_eq!(redact_url("postgres://h/d"), "postgres://h/d");
    }
}
