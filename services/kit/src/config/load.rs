//! Loading: which file, then figment (defaults, the file, the seed's aliases, `METNOS_*`),
//! then paths resolved and the whole validated. An error names the key and where its value
//! came from: the file, or the exact environment variable.

use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Map};
use figment::{Figment, Metadata, Profile, Provider};

use super::Config;
use super::runtime::{DEFAULT_OLLAMA_URL, LlmProvider, LlmTierConfig, OLLAMA_HOST_ENV};

/// The trust file's name in the configuration folder (or the data directory).
pub const TRUST_FILE: &str = "trusted_keys.toml";

/// Environment variable naming the config file (the `--config` flag wins over it).
pub const CONFIG_ENV: &str = "METNOS_CONFIG";

/// Prefix of every environment override.
pub const ENV_PREFIX: &str = "METNOS_";

/// The seed's names for the judge's keys, still honoured: (variable, key). When a key is
/// also set by its own `METNOS_VAGLIO__JUDGE__*` variable, that one wins. Only these
/// three: any other `METNOS_JUDGE_*` variable is not configuration.
pub const ENV_ALIASES: [(&str, &str); 3] = [
    ("METNOS_JUDGE_KIND", "vaglio.judge.kind"),
    ("METNOS_JUDGE_THRESHOLD", "vaglio.judge.threshold"),
    (
        "METNOS_JUDGE_TIMEOUT_SECONDS",
        "vaglio.judge.timeout_seconds",
    ),
];

/// The seed's variables for the policy's and the approval service's SQLite files:
/// (variable, the key that replaced it, that key's variable). Refused at start, never
/// silently ignored: the files they named were the proof of concept's, of another schema,
/// and pointing a service at one would migrate a database it does not own.
pub const SEED_STORE_VARIABLES: [(&str, &str, &str); 2] = [
    ("METNOS_GRANTS_DB", "policy.store", "METNOS_POLICY__STORE"),
    (
        "METNOS_APPROVALS_DB",
        "approval.store",
        "METNOS_APPROVAL__STORE",
    ),
];

/// Top-level keys an environment variable may override; any other `METNOS_*` variable
/// (`METNOS_CONFIG`, test settings) is not configuration.
const TOP_LEVEL_KEYS: [&str; 20] = [
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
    "conversation",
    "memory",
    "telegram",
    "telos",
    "scheduler",
    "tls",
    "web",
    "mail",
    "calendar",
];

/// The name figment gives the values of [`ENV_ALIASES`], so an error can name the alias.
const ALIASES_NAME: &str = "the seed's `METNOS_JUDGE_*` environment variable(s)";

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
    pub(super) fn key(key: impl Into<String>, message: impl Into<String>) -> Self {
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
        for (variable, key, replaced_by) in SEED_STORE_VARIABLES {
            if source.var(variable).is_some() {
                return Err(ConfigError::Key {
                    key: key.to_owned(),
                    origin: Some(format!("environment variable `{variable}`")),
                    message: format!(
                        "`{variable}` is the proof of concept's name and is not read: set \
                         `{replaced_by}` (or `store` under [{section}] in metnos.toml) to \
                         `sqlite:<path>` or a postgres:// URL, then unset `{variable}`",
                        section = key.split('.').next().unwrap_or_default()
                    ),
                });
            }
        }
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
        // The aliases first, so that the keys' own variables win over them.
        figment = figment.merge(EnvAliases).merge(env_provider());

        let mut config: Config = figment.extract().map_err(from_figment)?;
        config.telemetry.otlp_endpoint = source
            .var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| source.var("OTEL_EXPORTER_OTLP_ENDPOINT"));
        config.config_file = file.map(|f| std::path::absolute(&f).unwrap_or(f));
        config.resolve_paths(source)?;
        config.resolve_llm(source)?;
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
        self.config_dir = source
            .var("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".config")))
            .map(|dir| dir.join("metnos"))
            .unwrap_or_default();
        if self.runtime.user_home.as_os_str().is_empty()
            && let Some(h) = &home
        {
            self.runtime.user_home = h.clone();
        }
        if self.runtime.user_path.is_empty()
            && let Some(path) = source.var("PATH")
        {
            self.runtime.user_path = std::env::split_paths(&path)
                .filter(|dir| dir.is_absolute())
                .collect();
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
            ("tls.dir", &mut self.tls.dir, "pki"),
        ] {
            if path.as_os_str().is_empty() {
                *path = self.data_dir.join(default);
            }
            *path = expand_tilde(path, home.as_deref())
                .ok_or_else(|| ConfigError::key(key, "starts with ~ but HOME is not set"))?;
        }
        if self.executors.trust_file.as_os_str().is_empty() {
            let base = if self.config_dir.as_os_str().is_empty() {
                &self.data_dir
            } else {
                &self.config_dir
            };
            self.executors.trust_file = base.join(TRUST_FILE);
        }
        self.executors.trust_file = expand_tilde(&self.executors.trust_file, home.as_deref())
            .ok_or_else(|| {
                ConfigError::key("executors.trust_file", "starts with ~ but HOME is not set")
            })?;
        for path in &mut self.executors.shell_readable {
            *path = expand_tilde(path, home.as_deref()).ok_or_else(|| {
                ConfigError::key(
                    "executors.shell_readable",
                    "starts with ~ but HOME is not set",
                )
            })?;
        }
        Ok(())
    }
}

impl Config {
    /// No tier named: the seeds' default fast tier. An Ollama tier without a `base_url`
    /// goes where `OLLAMA_HOST` says (as the `ollama` command does), else to Ollama's
    /// default address.
    fn resolve_llm(&mut self, source: &ConfigSource) -> Result<(), ConfigError> {
        if self.runtime.llm.is_empty() {
            self.runtime
                .llm
                .insert("fast".to_owned(), LlmTierConfig::default_fast());
        }
        let host = source.var(OLLAMA_HOST_ENV);
        for (tier, llm) in &mut self.runtime.llm {
            if llm.provider != LlmProvider::Ollama || !llm.base_url.is_empty() {
                continue;
            }
            llm.base_url = match &host {
                Some(host) => ollama_url(host).ok_or_else(|| ConfigError::Key {
                    key: format!("runtime.llm.{tier}.base_url"),
                    origin: Some(OLLAMA_HOST_ENV.to_owned()),
                    // Not echoed: it may hold a user and password.
                    message: "not host[:port] or an http(s) URL".to_owned(),
                })?,
                None => DEFAULT_OLLAMA_URL.to_owned(),
            };
        }
        Ok(())
    }
}

/// `OLLAMA_HOST` as a base URL: `host`, `host:port` or a URL; the scheme defaults to http
/// and the port to 11434, as Ollama reads it.
fn ollama_url(host: &str) -> Option<String> {
    let host = host.trim().trim_end_matches('/');
    let with_scheme = if host.contains("://") {
        host.to_owned()
    } else if host.starts_with(':') {
        // `:11500`: Ollama's own reading is this machine.
        format!("http://127.0.0.1{host}")
    } else {
        format!("http://{host}")
    };
    let mut url = url::Url::parse(&with_scheme).ok()?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return None;
    }
    // 0.0.0.0 and :: are where a server listens, meaning every address of this machine;
    // the address to call is its loopback.
    match url.host() {
        Some(url::Host::Ipv4(ip)) if ip.is_unspecified() => {
            url.set_ip_host(std::net::Ipv4Addr::LOCALHOST.into()).ok()?;
        }
        Some(url::Host::Ipv6(ip)) if ip.is_unspecified() => {
            url.set_ip_host(std::net::Ipv6Addr::LOCALHOST.into()).ok()?;
        }
        _ => {}
    }
    if url.port().is_none() && !host.contains("://") {
        url.set_port(Some(11434)).ok()?;
    }
    Some(url.as_str().trim_end_matches('/').to_owned())
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

/// The variables of [`ENV_ALIASES`], read as figment reads `METNOS_*` (the same value
/// syntax) but under a name of their own.
struct EnvAliases;

impl Provider for EnvAliases {
    fn metadata(&self) -> Metadata {
        Metadata::named(ALIASES_NAME)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Env::raw()
            .filter_map(|variable| {
                ENV_ALIASES
                    .iter()
                    .find(|(alias, _)| variable.as_str() == *alias)
                    .map(|(_, key)| (*key).into())
            })
            .data()
    }
}

fn from_figment(error: figment::Error) -> ConfigError {
    use figment::error::{Actual, Kind};
    // figment may chain several errors; the first is the one to fix first.
    let error = error
        .into_iter()
        .next()
        .expect("figment error has one entry");
    let key = error.path.join(".");
    let message = match &error.kind {
        // The path already ends with the unknown field.
        Kind::UnknownField(..) => "unknown key".to_owned(),
        // A 0 given to a `NonZero` key.
        Kind::InvalidValue(Actual::Unsigned(0) | Actual::Signed(0), expected)
            if expected.starts_with("a nonzero") =>
        {
            "must be at least 1".to_owned()
        }
        kind => kind.to_string(),
    };
    ConfigError::Key {
        origin: origin(&error, &key),
        key: if key.is_empty() {
            "(root)".to_owned()
        } else {
            key
        },
        message,
    }
}

/// Where the value at fault came from: the file, or the variable that set `key`.
fn origin(error: &figment::Error, key: &str) -> Option<String> {
    let md = error.metadata.as_ref()?;
    if let Some(figment::Source::File(path)) = &md.source {
        return Some(path.display().to_string());
    }
    if md.name == ALIASES_NAME
        && let Some((alias, _)) = ENV_ALIASES.iter().find(|(_, k)| *k == key)
    {
        return Some((*alias).to_owned());
    }
    if md.name.contains("environment") {
        return Some(format!(
            "{ENV_PREFIX}{}",
            error.path.join("__").to_ascii_uppercase()
        ));
    }
    Some(md.name.to_string())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::test_env::{load, load_err, with_env, write_file};
    use super::*;

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
                write_file(
                    jail,
                    "[runtime.llm.fast]\nprovider = \"ollama\"\nmodel = \"qwen3:8b\"\nbase_url = \"http://127.0.0.1:11434\"\n",
                )?;
                let config = load()?;
                let fast = &config.runtime.llm["fast"];
                assert_eq!(fast.base_url, "http://127.0.0.1:9999");
                assert_eq!(fast.model, "qwen3:8b");
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
            write_file(jail, "[server]\nshutdown_grace_seconds = \"soon\"\n")?;
            let err = load_err();
            assert!(err.contains("`server.shutdown_grace_seconds`"), "{err}");
            assert!(err.contains("metnos.toml"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_zero_from_the_environment_names_the_key_and_the_variable() {
        for (variable, key) in [
            ("METNOS_TURNS__CAP_STEPS", "turns.cap_steps"),
            ("METNOS_APPROVAL__TTL_SECONDS", "approval.ttl_seconds"),
            (
                "METNOS_SERVER__STORE_CONNECT_TIMEOUT_SECONDS",
                "server.store_connect_timeout_seconds",
            ),
            (
                "METNOS_TELEGRAM__GLOBAL_PER_SECOND",
                "telegram.global_per_second",
            ),
            (
                "METNOS_VAGLIO__JUDGE__TIMEOUT_SECONDS",
                "vaglio.judge.timeout_seconds",
            ),
        ] {
            with_env(&[(variable, "0")], |_| {
                assert_eq!(
                    load_err(),
                    format!("config key `{key}` (from {variable}): must be at least 1")
                );
                Ok(())
            });
        }
    }

    #[test]
    fn a_zero_in_the_file_names_the_key_and_the_file() {
        with_env(&[], |jail| {
            for (section, key) in [
                ("turns", "retention_hours"),
                ("executors", "shell_memory_mb"),
                ("approval", "sweep_interval_seconds"),
            ] {
                write_file(jail, &format!("[{section}]\n{key} = 0\n"))?;
                assert_eq!(
                    load_err(),
                    format!("config key `{section}.{key}` (from metnos.toml): must be at least 1")
                );
            }
            write_file(
                jail,
                "[runtime.llm.fast]\nprovider = \"ollama\"\nmodel = \"m\"\ntimeout_seconds = 0\n",
            )?;
            assert_eq!(
                load_err(),
                "config key `runtime.llm.fast.timeout_seconds` (from metnos.toml): must be at least 1"
            );
            Ok(())
        });
    }

    #[test]
    fn the_seed_s_store_variables_are_refused_naming_their_settings() {
        for (variable, key, replaced_by) in SEED_STORE_VARIABLES {
            with_env(&[(variable, "/srv/seed/grants.db")], |_| {
                let err = load().unwrap_err();
                assert!(err.contains(&format!("config key `{key}`")), "{err}");
                assert!(err.contains(variable) && err.contains(replaced_by), "{err}");
                assert!(
                    !err.contains("/srv/seed"),
                    "the value is not repeated: {err}"
                );
                Ok(())
            });
        }
        // Empty is unset.
        with_env(&[("METNOS_GRANTS_DB", "")], |_| load().map(|_| ()));
    }

    #[test]
    fn an_unknown_key_is_an_error_not_a_silent_default() {
        with_env(&[], |jail| {
            write_file(jail, "[policy]\nlisten = \"127.0.0.1:1\"\nlsten = \"x\"\n")?;
            let err = load_err();
            assert!(err.contains("`policy.lsten`"), "{err}");
            assert!(err.contains("unknown key"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_toml_syntax_error_names_the_file() {
        with_env(&[], |jail| {
            write_file(jail, "[policy\n")?;
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
    fn every_section_can_be_set_from_the_environment() {
        // A section missing from TOP_LEVEL_KEYS would have its METNOS_* variables ignored
        // without a word.
        let defaults = serde_json::to_value(Config::default()).unwrap();
        let sections: Vec<&String> = defaults.as_object().unwrap().keys().collect();
        for section in &sections {
            assert!(
                TOP_LEVEL_KEYS.contains(&section.as_str()),
                "`{section}` is not in TOP_LEVEL_KEYS"
            );
        }
        assert_eq!(sections.len(), TOP_LEVEL_KEYS.len());
    }

    #[test]
    fn the_documented_example_is_exactly_the_defaults() {
        let example = include_str!("../../../../metnos.example.toml");
        with_env(&[], |jail| {
            let defaults = load()?;
            write_file(jail, example)?;
            let mut from_file = load()?;
            assert!(from_file.config_file.is_some(), "the file was read");
            from_file.config_file = None;
            assert_eq!(from_file, defaults);
            Ok(())
        });
    }
}
