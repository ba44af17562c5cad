//! What a config must satisfy beyond its types: absolute paths, URLs, stores, program and
//! host names, known LLM tiers, distinct listen addresses. Numbers that must be at least 1
//! are `NonZero` in the sections, so the deserializer refuses a 0 with the key and its source.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use super::{Config, ConfigError, LLM_TIERS, SERVICES, ServiceName, StoreSpec, TelegramMode};

/// A key's variable as people name them: upper-case letters, digits and `_`, at most 64.
/// Stricter than the shell on purpose: keys such as `hf_…`, `gsk_…` or `ghp_…` are made of
/// letters, digits and `_` too, and one pasted here must be refused, not echoed back in
/// "… is not set".
fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// Programs whose work is running another program named in their arguments: in
/// `executors.shell_allow` each would make the list meaningless.
const SHELL_LAUNCHERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "fish",
    "csh",
    "tcsh",
    "busybox",
    "env",
    "xargs",
    "nice",
    "nohup",
    "timeout",
    "setsid",
    "stdbuf",
    "flock",
    "chroot",
    "unshare",
    "nsenter",
    "sudo",
    "su",
    "doas",
    "runuser",
    "setpriv",
    "capsh",
    "strace",
    "ltrace",
    "gdb",
    "script",
    "watch",
    "ionice",
    "taskset",
    "chrt",
    "systemd-run",
    "parallel",
    "time",
];

impl Config {
    /// Checks what the types alone cannot; the first problem found is the error.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.validate_paths()?;
        if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(&self.telemetry.log) {
            return Err(ConfigError::key(
                "telemetry.log",
                format!("not a valid log filter: {e}"),
            ));
        }
        // A turn's steps are numbered below the earlier answers it sees (from 100,000): a
        // cap that reached them would let a step pass for an earlier answer.
        if self.turns.cap_steps.get() > 1_000 {
            return Err(ConfigError::key(
                "turns.cap_steps",
                format!("{} is more than 1000 steps a turn", self.turns.cap_steps),
            ));
        }
        self.validate_telegram()?;
        self.validate_web()?;
        self.validate_executors()?;
        self.validate_accounts()?;
        self.validate_services()?;
        self.telos
            .check()
            .map_err(|(key, message)| ConfigError::key(&key, message))?;
        self.validate_llm()
    }

    fn validate_paths(&self) -> Result<(), ConfigError> {
        let absolute = |key: &str, path: &Path| {
            if path.is_absolute() {
                return Ok(());
            }
            Err(ConfigError::key(
                key,
                format!("must be an absolute path, got {}", path.display()),
            ))
        };
        absolute("data_dir", &self.data_dir)?;
        if self.runtime.user_home.as_os_str().is_empty() {
            return Err(ConfigError::key(
                "runtime.user_home",
                "not set and HOME is not set",
            ));
        }
        absolute("runtime.user_home", &self.runtime.user_home)?;
        absolute("executors.catalog_dir", &self.executors.catalog_dir)?;
        absolute("executors.workspace", &self.executors.workspace)?;
        absolute("executors.trust_file", &self.executors.trust_file)?;
        for path in &self.executors.shell_readable {
            absolute("executors.shell_readable", path)?;
        }
        self.validate_workspace()
    }

    /// The shell's workspace is the one place in Metnos's own folders an executor may use.
    /// One that holds them would open them all: the sandbox grants the workspace whole, and
    /// Landlock cannot hide a folder beneath one it grants.
    fn validate_workspace(&self) -> Result<(), ConfigError> {
        // Resolved as far as it exists: a file the first run has yet to make (the trust
        // file) under a link into the workspace is caught now, not at the next start.
        let real = |path: &Path| {
            let text = metnos_core::path::normalize(&path.to_string_lossy());
            let lexical = std::path::PathBuf::from(text);
            lexical
                .ancestors()
                .find_map(|existing| {
                    let resolved = existing.canonicalize().ok()?;
                    let rest = lexical.strip_prefix(existing).ok()?;
                    Some(if rest.as_os_str().is_empty() {
                        resolved
                    } else {
                        resolved.join(rest)
                    })
                })
                .unwrap_or(lexical)
        };
        let workspace = real(&self.executors.workspace);
        let named = [
            ("data_dir", &self.data_dir),
            ("tls.dir", &self.tls.dir),
            ("executors.catalog_dir", &self.executors.catalog_dir),
            ("executors.trust_file", &self.executors.trust_file),
            ("the configuration folder", &self.config_dir),
        ];
        for (key, own) in named {
            if !own.as_os_str().is_empty() && real(own).starts_with(&workspace) {
                return Err(ConfigError::key(
                    "executors.workspace",
                    format!(
                        "{} holds {key} ({}), which no executor may reach; give the shell a folder of its own (the default is <data_dir>/workspace)",
                        self.executors.workspace.display(),
                        own.display()
                    ),
                ));
            }
        }
        // The box lets a command write anywhere in its workspace: one that is the home (or
        // holds it) or a folder of programs would let it write what runs code later.
        let home = real(&self.runtime.user_home);
        if !home.as_os_str().is_empty() && home.starts_with(&workspace) {
            return Err(ConfigError::key(
                "executors.workspace",
                format!(
                    "{} holds the home {}, whose hidden files and program folders run code later; give the shell a folder of its own (the default is <data_dir>/workspace)",
                    self.executors.workspace.display(),
                    home.display()
                ),
            ));
        }
        let program_dir = self.runtime.user_path.iter().find(|dir| {
            let dir = real(dir);
            dir.is_absolute() && (dir.starts_with(&workspace) || workspace.starts_with(&dir))
        });
        if let Some(dir) = program_dir {
            return Err(ConfigError::key(
                "executors.workspace",
                format!(
                    "{} and {} (on runtime.user_path, the person's PATH) overlap: a command could write programs the person runs by name; give the shell a folder of its own",
                    self.executors.workspace.display(),
                    dir.display()
                ),
            ));
        }
        Ok(())
    }

    fn validate_telegram(&self) -> Result<(), ConfigError> {
        check_url(&self.telegram.api_url)
            .map_err(|m| ConfigError::key("telegram.api_url", m.to_string()))?;
        if self.telegram.mode == TelegramMode::Webhook
            && !self.telegram.webhook_url.starts_with("https://")
        {
            return Err(ConfigError::key(
                "telegram.webhook_url",
                "webhook mode needs the public https:// URL Telegram posts to",
            ));
        }
        Ok(())
    }

    fn validate_web(&self) -> Result<(), ConfigError> {
        if !self.web.public_url.is_empty() {
            check_url(&self.web.public_url)
                .map_err(|m| ConfigError::key("web.public_url", m.to_string()))?;
            let path = self
                .web
                .public_url
                .parse::<http::Uri>()
                .map(|u| u.path().to_owned());
            if path.is_ok_and(|p| p != "/" && !p.is_empty()) {
                return Err(ConfigError::key(
                    "web.public_url",
                    "the page is served at the root: give the proxy's address without a path",
                ));
            }
        }
        if !matches!(self.web.lang.as_str(), "" | "en" | "it") {
            return Err(ConfigError::key(
                "web.lang",
                format!(
                    "must be \"en\", \"it\" or empty (the browser's), got {:?}",
                    self.web.lang
                ),
            ));
        }
        Ok(())
    }

    fn validate_executors(&self) -> Result<(), ConfigError> {
        for program in &self.executors.shell_allow {
            if program.is_empty() || program.contains('/') || program.contains(char::is_whitespace)
            {
                return Err(ConfigError::key(
                    "executors.shell_allow",
                    format!("`{program}` is not a program name (no paths, no spaces)"),
                ));
            }
            if SHELL_LAUNCHERS.contains(&program.as_str()) {
                return Err(ConfigError::key(
                    "executors.shell_allow",
                    format!(
                        "`{program}` runs whatever program it is given, so listing it would allow them all; leave it out"
                    ),
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
        Ok(())
    }

    fn validate_services(&self) -> Result<(), ConfigError> {
        for service in SERVICES {
            let section = self.service(service);
            let key = |k: &str| format!("{service}.{k}");
            if !section.url.is_empty() {
                check_service_url(&section.url)
                    .map_err(|m| ConfigError::key(key("url"), m.to_string()))?;
            }
            StoreSpec::parse(&section.store, &self.data_dir, service)
                .map_err(|m| ConfigError::key(key("store"), m))?;
        }
        Ok(())
    }

    fn validate_llm(&self) -> Result<(), ConfigError> {
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
                check_url(&llm.base_url).map_err(|m| {
                    ConfigError::key(format!("runtime.llm.{tier}.base_url"), m.to_string())
                })?;
            }
            let key_env = format!("runtime.llm.{tier}.api_key_env");
            if !llm.api_key_env.is_empty() && !is_variable_name(&llm.api_key_env) {
                // Never echoed: it may well be the key itself, pasted in the wrong place.
                return Err(ConfigError::key(
                    key_env,
                    "must be the NAME of the environment variable holding the key (upper-case letters, digits and _, e.g. OPENAI_API_KEY), never the key itself",
                ));
            }
            if llm.provider == super::LlmProvider::Anthropic && llm.api_key_env.is_empty() {
                return Err(ConfigError::key(
                    key_env,
                    "anthropic needs a key: name the environment variable holding it (e.g. ANTHROPIC_API_KEY)",
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
}

/// What is wrong with a URL in the config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadUrl {
    #[error("not a valid URL ({reason}): {url}")]
    Invalid { url: String, reason: String },
    /// Not one of `schemes` (said as they are written in the config).
    #[error("must start with {schemes}, got {url}")]
    Scheme { url: String, schemes: &'static str },
    #[error("has no host: {0}")]
    NoHost(String),
    #[error(transparent)]
    Dns(#[from] crate::client::UrlError),
}

/// A service URL: http(s), or `dns:///host:port` for every address of a name.
fn check_service_url(url: &str) -> Result<(), BadUrl> {
    match crate::client::dns_target(url) {
        Some(target) => Ok(target.map(|_| ())?),
        None => url_of_schemes(url, "http://, https:// or dns:///"),
    }
}

fn check_url(url: &str) -> Result<(), BadUrl> {
    url_of_schemes(url, "http:// or https://")
}

/// An http(s) URL with a host; `schemes` is what the message says it must start with.
fn url_of_schemes(url: &str, schemes: &'static str) -> Result<(), BadUrl> {
    let parsed: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| BadUrl::Invalid {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
    match parsed.scheme_str() {
        Some("http") | Some("https") => {}
        _ => {
            return Err(BadUrl::Scheme {
                url: url.to_owned(),
                schemes,
            });
        }
    }
    if parsed.host().is_none_or(str::is_empty) {
        return Err(BadUrl::NoHost(url.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_env::{load, load_err, with_env, write_file};

    #[test]
    fn the_web_page_is_off_by_default_and_its_address_and_language_are_checked() {
        with_env(&[], |_| {
            let web = load()?.web;
            assert!(!web.enabled);
            assert_eq!(web.listen.to_string(), "127.0.0.1:8780");
            assert_eq!(web.base_url(), "http://127.0.0.1:8780");
            Ok(())
        });
        with_env(
            &[("METNOS_WEB__PUBLIC_URL", "https://metnos.example.org/")],
            |_| {
                assert_eq!(load()?.web.base_url(), "https://metnos.example.org");
                Ok(())
            },
        );
        for (key, value, says) in [
            ("METNOS_WEB__PUBLIC_URL", "ftp://x", "web.public_url"),
            (
                "METNOS_WEB__PUBLIC_URL",
                "https://x.org/metnos",
                "without a path",
            ),
            ("METNOS_WEB__LANG", "fr", "web.lang"),
        ] {
            with_env(&[(key, value)], |_| {
                let error = load_err();
                assert!(error.contains(says), "{value}: {error}");
                Ok(())
            });
        }
    }

    #[test]
    fn the_shell_runs_unsandboxed_only_when_told_and_never_a_launcher() {
        with_env(&[], |_| {
            let executors = load()?.executors;
            assert!(!executors.allow_unsandboxed);
            assert_eq!(executors.shell_processes.get(), 64);
            Ok(())
        });
        with_env(
            &[
                ("METNOS_EXECUTORS__ALLOW_UNSANDBOXED", "true"),
                ("METNOS_EXECUTORS__SHELL_PROCESSES", "16"),
            ],
            |_| {
                let executors = load()?.executors;
                assert!(executors.allow_unsandboxed);
                assert_eq!(executors.shell_processes.get(), 16);
                Ok(())
            },
        );
        for launcher in ["sh", "bash", "env", "xargs", "sudo", "timeout"] {
            let list = format!(r#"["ls", "{launcher}"]"#);
            with_env(&[("METNOS_EXECUTORS__SHELL_ALLOW", list.as_str())], |_| {
                let error = load_err();
                assert!(
                    error.contains("executors.shell_allow")
                        && error.contains(&format!("`{launcher}` runs whatever program")),
                    "{error}"
                );
                Ok(())
            });
        }
    }

    #[test]
    fn folders_the_shell_may_read_are_absolute_with_the_tilde_expanded() {
        with_env(&[], |_| {
            assert!(load()?.executors.shell_readable.is_empty());
            Ok(())
        });
        with_env(
            &[(
                "METNOS_EXECUTORS__SHELL_READABLE",
                r#"["~/projects", "/srv/music"]"#,
            )],
            |_| {
                assert_eq!(
                    load()?.executors.shell_readable,
                    [
                        std::path::PathBuf::from("/home/u/projects"),
                        std::path::PathBuf::from("/srv/music")
                    ]
                );
                Ok(())
            },
        );
        with_env(
            &[("METNOS_EXECUTORS__SHELL_READABLE", r#"["projects"]"#)],
            |_| {
                let error = load_err();
                assert!(
                    error.contains("executors.shell_readable")
                        && error.contains("must be an absolute path, got projects"),
                    "{error}"
                );
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
    fn a_workspace_that_holds_metnos_s_own_folders_is_refused() {
        // The default data directory is /home/u/.local/share/metnos here.
        for (workspace, holds) in [
            ("/home/u", "data_dir"),
            ("/home/u/.local/share/metnos", "data_dir"),
            ("/home/u/./.local/../.local", "data_dir"),
        ] {
            with_env(&[("METNOS_EXECUTORS__WORKSPACE", workspace)], |_| {
                let err = load_err();
                assert!(
                    err.contains("`executors.workspace`") && err.contains(holds),
                    "{workspace}: {err}"
                );
                Ok(())
            });
        }
        // Certificates kept elsewhere count as much as the data directory.
        with_env(
            &[
                ("METNOS_EXECUTORS__WORKSPACE", "/srv/shell"),
                ("METNOS_TLS__DIR", "/srv/shell/pki"),
            ],
            |_| {
                let err = load_err();
                assert!(err.contains("tls.dir"), "{err}");
                Ok(())
            },
        );
        // The default, and a folder of its own, are fine.
        with_env(&[], |_| {
            load()?;
            Ok(())
        });
        with_env(&[("METNOS_EXECUTORS__WORKSPACE", "/home/u/shell")], |_| {
            load()?;
            Ok(())
        });
    }

    #[test]
    fn a_workspace_that_holds_the_home_or_a_program_folder_is_refused() {
        // The data directory elsewhere: only the home's own files are at stake.
        for (workspace, says) in [("/home", "holds the home"), ("/home/u/bin", "overlap")] {
            with_env(
                &[
                    ("METNOS_EXECUTORS__WORKSPACE", workspace),
                    ("METNOS_DATA_DIR", "/srv/metnos"),
                    ("XDG_CONFIG_HOME", "/srv/config"),
                    ("PATH", "/home/u/bin:/usr/bin:/bin"),
                ],
                |_| {
                    let err = load_err();
                    assert!(
                        err.contains("`executors.workspace`") && err.contains(says),
                        "{workspace}: {err}"
                    );
                    Ok(())
                },
            );
        }
        with_env(
            &[
                ("METNOS_EXECUTORS__WORKSPACE", "/srv/shell"),
                ("METNOS_DATA_DIR", "/srv/metnos"),
                ("PATH", "/srv/shell/bin:/usr/bin"),
            ],
            |_| {
                let err = load_err();
                assert!(err.contains("overlap"), "{err}");
                Ok(())
            },
        );
    }

    #[test]
    fn a_trust_file_yet_to_be_made_behind_a_link_into_the_workspace_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("shell");
        std::fs::create_dir(&workspace).unwrap();
        std::os::unix::fs::symlink(&workspace, dir.path().join("keys")).unwrap();
        let trust = dir.path().join("keys/metnos/trusted_keys.toml");
        with_env(
            &[
                (
                    "METNOS_EXECUTORS__WORKSPACE",
                    &workspace.display().to_string(),
                ),
                ("METNOS_EXECUTORS__TRUST_FILE", &trust.display().to_string()),
            ],
            |_| {
                let err = load_err();
                assert!(
                    err.contains("`executors.workspace`") && err.contains("executors.trust_file"),
                    "{err}"
                );
                Ok(())
            },
        );
    }

    #[test]
    fn unknown_llm_tier_bad_provider_and_bad_log_filter_are_refused() {
        with_env(&[], |jail| {
            write_file(
                jail,
                "[runtime.llm.huge]\nprovider = \"ollama\"\nmodel = \"m\"\n",
            )?;
            let err = load_err();
            assert!(err.contains("`runtime.llm.huge`"), "{err}");
            write_file(
                jail,
                "[runtime.llm.fast]\nprovider = \"gpt\"\nmodel = \"m\"\n",
            )?;
            let err = load_err();
            assert!(err.contains("`runtime.llm.fast.provider`"), "{err}");
            write_file(jail, "")?;
            jail.set_env("METNOS_TELEMETRY__LOG", "info,[[[");
            let err = load_err();
            assert!(err.contains("`telemetry.log`"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_misspelt_capability_for_the_wise_tier_is_refused_not_ignored() {
        with_env(&[], |jail| {
            write_file(
                jail,
                "[turns]\nhybrid_wise_capabilities = [\"mail:send\", \"network:https\"]\n",
            )?;
            let err = load_err();
            assert!(err.contains("turns.hybrid_wise_capabilities"), "{err}");
            assert!(err.contains("unknown capability `network:https`"), "{err}");
            write_file(
                jail,
                "[turns]\nhybrid_wise_capabilities = [\"mail:send\", \"network:http\"]\n",
            )?;
            assert_eq!(
                load()?.turns.hybrid_wise_capabilities,
                vec![
                    metnos_core::capability::Capability::MailSend,
                    metnos_core::capability::Capability::NetworkHttp
                ]
            );
            Ok(())
        });
    }

    /// Issue 40: a turn's steps stay below the earlier answers' numbers.
    #[test]
    fn a_step_cap_past_a_thousand_is_refused() {
        with_env(&[], |jail| {
            write_file(jail, "[turns]\ncap_steps = 100001\n")?;
            let err = load_err();
            assert!(
                err.contains("`turns.cap_steps`") && err.contains("1000"),
                "{err}"
            );
            write_file(jail, "[turns]\ncap_steps = 1000\n")?;
            assert_eq!(load()?.turns.cap_steps.get(), 1000);
            Ok(())
        });
    }

    #[test]
    fn without_any_tier_the_fast_one_is_the_seeds_local_ollama() {
        with_env(&[], |jail| {
            let config = load()?;
            let fast = &config.runtime.llm["fast"];
            assert_eq!(config.runtime.llm.len(), 1);
            assert_eq!(fast.provider, super::super::LlmProvider::Ollama);
            assert_eq!(fast.model, "qwen3:8b");
            assert_eq!(fast.base_url, "http://127.0.0.1:11434");

            // Where Ollama's own variable says, in each of the forms Ollama reads.
            for (host, url) in [
                ("127.0.0.1:11500", "http://127.0.0.1:11500"),
                ("gpu-box", "http://gpu-box:11434"),
                ("https://ollama.example.org", "https://ollama.example.org"),
                ("http://[::1]:11434/", "http://[::1]:11434"),
                // What Ollama's server listens on, not an address to call: this machine.
                ("0.0.0.0", "http://127.0.0.1:11434"),
                ("0.0.0.0:11500", "http://127.0.0.1:11500"),
                (":11500", "http://127.0.0.1:11500"),
                ("[::]:11434", "http://[::1]:11434"),
            ] {
                jail.set_env("OLLAMA_HOST", host);
                assert_eq!(load()?.runtime.llm["fast"].base_url, url, "{host}");
            }
            // A tier of the config that names Ollama without an address goes there too;
            // one with an address keeps it.
            jail.set_env("OLLAMA_HOST", "gpu-box:11434");
            write_file(
                jail,
                "[runtime.llm.wise]\nprovider = \"ollama\"\nmodel = \"qwen3:32b\"\n[runtime.llm.fast]\nprovider = \"ollama\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:1\"\n",
            )?;
            let config = load()?;
            assert_eq!(config.runtime.llm["wise"].base_url, "http://gpu-box:11434");
            assert_eq!(config.runtime.llm["fast"].base_url, "http://127.0.0.1:1");

            // A tier named: no default added beside it.
            write_file(
                jail,
                "[runtime.llm.fast]\nprovider = \"openai\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:8080\"\n",
            )?;
            assert_eq!(load()?.runtime.llm.len(), 1);

            write_file(jail, "")?;
            jail.set_env("OLLAMA_HOST", "ftp://user:secret@x");
            assert_eq!(
                load_err(),
                "config key `runtime.llm.fast.base_url` (from OLLAMA_HOST): not host[:port] or an http(s) URL"
            );
            Ok(())
        });
    }

    #[test]
    fn an_llm_key_setting_that_can_never_work_is_refused_without_showing_it() {
        with_env(&[], |jail| {
            write_file(
                jail,
                "[runtime.llm.wise]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\n",
            )?;
            assert_eq!(
                load_err(),
                "config key `runtime.llm.wise.api_key_env`: anthropic needs a key: name the environment variable holding it (e.g. ANTHROPIC_API_KEY)"
            );
            // The key itself pasted where its variable's name goes.
            write_file(
                jail,
                "[runtime.llm.fast]\nprovider = \"openai\"\nmodel = \"m\"\napi_key_env = \"sk-live-0123456789abcdef\"\n",
            )?;
            let err = load_err();
            assert!(err.contains("`runtime.llm.fast.api_key_env`"), "{err}");
            assert!(err.contains("never the key itself"), "{err}");
            assert!(!err.contains("sk-live"), "the value was shown: {err}");
            // A key made only of letters, digits and `_` is no variable name either.
            write_file(
                jail,
                "[runtime.llm.fast]\nprovider = \"openai\"\nmodel = \"m\"\napi_key_env = \"hf_AbCdEfGh0123456789\"\n",
            )?;
            let err = load_err();
            assert!(
                err.contains("never the key itself") && !err.contains("hf_"),
                "{err}"
            );
            write_file(
                jail,
                "[runtime.llm.fast]\nprovider = \"anthropic\"\nmodel = \"m\"\napi_key_env = \"ANTHROPIC_API_KEY\"\n",
            )?;
            load()?;
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
}
