//! `metnos doctor`: what stands between this installation and a first answer, one line per
//! check — `ok`, `warn` or `fail`, and how to fix it — in the order a person would fix
//! them: the config, each LLM tier (reachable, the model there, a tool call works), the
//! executor catalog, `shell_exec`'s sandbox, the ports, the Telegram token, the data
//! directory's modes, the certificates' dates. Exit 1 on any `fail`.
//!
//! Nothing secret is printed: the bot token and API keys never appear, not even in an
//! error of the HTTP client (which names the URL, and Telegram's URL holds the token).

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use metnos_executors::Catalog;
use metnos_executors::signing::Trust;
use metnos_kit::Config;
use metnos_kit::config::{ConfigError, SERVICES};
use metnos_llm::check::{Finding, Level, TierCheck, check_tier, clean};
use serde_json::json;

use crate::admin::say;
use crate::runfile::RunFile;

/// How long each network check may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The same bound, for the checks kept beside the doctor.
pub(crate) const QUICK: Duration = TIMEOUT;
/// How long the tool call to each tier may take: a local model loading into memory takes
/// a while; a doctor that waits minutes per tier is no help.
const TOOL_CALL_TIMEOUT: u64 = 60;
/// The most of getMe's answer read.
const MAX_GET_ME: usize = 64 << 10;
/// A certificate this close to its end is a warning.
const EXPIRY_WARNING_DAYS: i64 = 30;

/// One check's outcome.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: String,
    pub level: Level,
    pub message: String,
    pub fix: Option<String>,
}

impl Check {
    pub(crate) fn new(name: impl Into<String>, level: Level, message: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            level,
            message: message.into(),
            fix: None,
        }
    }

    pub(crate) fn ok(name: impl Into<String>, message: impl Into<String>) -> Check {
        Check::new(name, Level::Ok, message)
    }

    pub(crate) fn warn(
        name: impl Into<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check::new(name, Level::Warn, message).with_fix(fix)
    }

    pub(crate) fn fail(
        name: impl Into<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check::new(name, Level::Fail, message).with_fix(fix)
    }

    pub(crate) fn with_fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

fn word(level: Level) -> &'static str {
    match level {
        Level::Ok => "ok",
        Level::Warn => "warn",
        Level::Fail => "fail",
    }
}

/// Prints `checks`; exit 1 when any failed.
fn report(checks: &[Check], json: bool) -> ExitCode {
    for check in checks {
        if json {
            say(&json!({
                "check": check.name,
                "level": word(check.level),
                "message": check.message,
                "fix": check.fix,
            })
            .to_string());
        } else {
            let mut line = format!(
                "{:<5} {:<14} {}",
                word(check.level),
                check.name,
                check.message
            );
            if let Some(fix) = &check.fix {
                line.push_str(" — ");
                line.push_str(fix);
            }
            say(&line);
        }
    }
    if checks.iter().any(|c| c.level == Level::Fail) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// A config that does not load: the one check there is.
pub fn config_failed(error: &ConfigError, json: bool) -> ExitCode {
    report(
        &[Check::fail(
            "config",
            error.to_string(),
            "correct that key (metnos.example.toml documents every one)",
        )],
        json,
    )
}

/// Every check, in order.
pub async fn doctor(config: &Config, json: bool) -> ExitCode {
    let mut checks = vec![Check::ok(
        "config",
        match &config.config_file {
            Some(file) => format!("{} loads", file.display()),
            None => "no config file: the defaults and METNOS_* variables".to_owned(),
        },
    )];
    checks.extend(llm(config).await);
    let (catalog, catalog_checks) = catalog(config);
    checks.extend(catalog_checks);
    checks.push(crate::prompt_size::check(config, catalog.as_ref()).await);
    checks.push(sandbox(config, catalog.as_ref()).await);
    checks.extend(crate::mcp_cli::doctor_checks(config, catalog.as_ref()).await);
    checks.extend(accounts(config).await);
    checks.extend(ports(config));
    checks.extend(telegram(config).await);
    checks.extend(data_dir(config));
    checks.extend(certificates(config));
    report(&checks, json)
}

/// Each mail account (IMAP and SMTP) and calendar: a real login over TLS, as a call
/// would make it, and what to change when it fails.
async fn accounts(config: &Config) -> Vec<Check> {
    use metnos_executors::builtin::mail::doctor;
    let accounts = config.accounts();
    if accounts.is_empty() {
        return Vec::new();
    }
    let found = tokio::task::spawn_blocking(move || {
        let mut found = Vec::new();
        for name in accounts.mail.keys() {
            found.extend(doctor::mail_account(name, &accounts));
        }
        for name in accounts.calendar.keys() {
            found.push(doctor::calendar(name, &accounts));
        }
        found
    })
    .await
    .unwrap_or_default();
    found
        .into_iter()
        .map(|(name, outcome)| match outcome {
            Ok(message) => Check::ok(name, message),
            Err((why, fix)) => Check::fail(name, why, fix),
        })
        .collect()
}

/// Each configured tier: the listing, then (when it is ready) one small tool call.
async fn llm(config: &Config) -> Vec<Check> {
    let mut checks = Vec::new();
    for tier in metnos_llm::Tier::ALL {
        let Some(tier_config) = config.runtime.llm.get(tier.as_str()) else {
            continue;
        };
        let name = format!("llm:{tier}");
        let listed = check_tier(tier.as_str(), tier_config, TIMEOUT).await;
        if listed.finding != Finding::Ready {
            checks.push(from_tier_check(&name, &listed));
            continue;
        }
        checks.push(tool_call(&name, tier.as_str(), tier_config, &listed).await);
    }
    checks
}

fn from_tier_check(name: &str, check: &TierCheck) -> Check {
    let mut out = Check::new(name, check.level(), check.line());
    out.fix = check.fix();
    out
}

/// One tool call the model must make: Metnos plans with native tool calls only.
async fn tool_call(
    name: &str,
    tier: &str,
    tier_config: &metnos_kit::config::LlmTierConfig,
    listed: &TierCheck,
) -> Check {
    use metnos_llm::{ChatRequest, Message, Outcome, RetryPolicy, ToolDef};
    let mut tier_config = tier_config.clone();
    tier_config.timeout_seconds = tier_config
        .timeout_seconds
        .min(std::num::NonZero::new(TOOL_CALL_TIMEOUT).expect("not zero"));
    let provider = match metnos_llm::Provider::from_config(tier, &tier_config) {
        Ok(provider) => provider.with_retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        }),
        Err(e) => return Check::fail(name, e.to_string(), "correct that tier's settings"),
    };
    let request = ChatRequest {
        messages: vec![Message::User(
            "Call the tool `ping` now, with no arguments.".to_owned(),
        )],
        tools: vec![ToolDef {
            name: "ping".to_owned(),
            description: "Answers pong.".to_owned(),
            parameters: json!({"type": "object", "properties": {}}),
        }],
        max_tokens: Some(64),
        temperature: Some(0.0),
        ..ChatRequest::default()
    };
    let at = format!("{} on {}", listed.model, listed.base_url);
    match provider.chat(tier, &request).await {
        Ok(answer) => match answer.outcome {
            Outcome::ToolCalls(calls) if !calls.is_empty() => Check::ok(
                name,
                format!(
                    "ready: {at} made a tool call ({} ms)",
                    answer.latency.as_millis()
                ),
            ),
            // The call written as text, which the server did not parse: Metnos takes it
            // (issue 42), but a server that parses calls does better.
            Outcome::Text(text)
                if metnos_planner::turn::repair::calls_in_text(&text, &["ping"]).is_some() =>
            {
                Check::warn(
                    name,
                    format!(
                        "{at} wrote its tool call as text: Metnos takes it, the server did not parse it"
                    ),
                    "let the server parse tool calls (llama-server --jinja; a recent Ollama and the model's own template); `metnos eval` measures the difference",
                )
            }
            _ => Check::fail(
                name,
                format!("{at} answered in text when asked to call a tool"),
                "use a model with tool calling (qwen3, llama3.1+, mistral-nemo, …): Metnos plans with tool calls",
            ),
        },
        Err(e) => Check::fail(
            name,
            format!("{at} is listed, but a call failed: {}", e.summary()),
            "see the server's own log; a model that does not fit in memory fails here",
        ),
    }
}

/// The catalog as the planner loads it, and a line per executor refused.
fn catalog(config: &Config) -> (Option<Catalog>, Vec<Check>) {
    let dir = &config.executors.catalog_dir;
    let trust = match Trust::load(&config.executors.trusted_keys, &config.executors.trust_file) {
        Ok(trust) => trust,
        Err(e) => {
            return (
                None,
                vec![Check::fail(
                    "catalog",
                    format!("executors: {e}"),
                    "correct the trusted keys; until then the planner does not start",
                )],
            );
        }
    };
    let catalog = Catalog::load(dir, &trust);
    let mut checks = Vec::new();
    for refusal in catalog.refused() {
        let name = refusal.name.clone().unwrap_or_else(|| {
            refusal
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        checks.push(Check::fail(
            format!("executor:{name}"),
            format!("refused: {}", refusal.reason),
            format!(
                "`metnos executors install` (a catalog metnos up set up), else `metnos executors sign {} --key <your key>`",
                refusal.dir.display()
            ),
        ));
    }
    if catalog.is_empty() && catalog.refused().is_empty() {
        checks.push(Check::warn(
            "catalog",
            format!("no executors in {}: Metnos has no tools", dir.display()),
            "`metnos up` installs and signs the built-ins on its first run (or `metnos executors install`)",
        ));
    } else if !catalog.is_empty() {
        let mut names: Vec<&str> = catalog.executors().map(|e| e.name()).collect();
        names.sort_unstable();
        checks.insert(
            0,
            Check::ok(
                "catalog",
                format!("{} executors load: {}", names.len(), names.join(", ")),
            ),
        );
    }
    (Some(catalog), checks)
}

/// Whether `shell_exec`'s box can be built here.
async fn sandbox(config: &Config, catalog: Option<&Catalog>) -> Check {
    let Some(catalog) = catalog.filter(|c| c.get("shell_exec").is_some()) else {
        return Check::ok("sandbox", "no shell_exec in the catalog: nothing to box");
    };
    let runner = metnos_executors::Runner {
        prestart: false,
        ..metnos_planner::runner_from_config(config)
    };
    let observation = runner.check_shell_sandbox(catalog).await;
    let meta = observation.metadata.clone().unwrap_or_default();
    let boxed = &meta.get("sandbox").cloned().unwrap_or_default();
    if meta.get("available").and_then(|v| v.as_bool()) == Some(true) {
        let abi = boxed
            .get("landlock_abi")
            .and_then(|v| v.as_u64())
            .map_or_else(|| "?".to_owned(), |abi| abi.to_string());
        return Check::ok(
            "sandbox",
            format!(
                "shell_exec's box can be built: user, PID, network, IPC and mount namespaces, Landlock ABI {abi}"
            ),
        );
    }
    let why = observation
        .error
        .unwrap_or_else(|| "the box cannot be built".to_owned());
    let fix = "a kernel with unprivileged user namespaces and Landlock (5.13+), or a container allowed to unshare (README: Deploy); `metnos executors sandbox` shows what is there";
    if config.executors.allow_unsandboxed {
        Check::warn(
            "sandbox",
            format!("{why}; executors.allow_unsandboxed runs shell commands without it"),
            fix,
        )
    } else {
        Check::fail(
            "sandbox",
            format!("{why}: shell_exec refuses every command"),
            fix,
        )
    }
}

/// Each service's address: free (or this stack's), and on Linux kept out of the range the
/// kernel hands to outgoing connections.
fn ports(config: &Config) -> Vec<Check> {
    if let Some(run) = RunFile::read_live(&config.data_dir) {
        return vec![Check::ok(
            "ports",
            format!("in use by the running stack (pid {})", run.pid),
        )];
    }
    let ephemeral = ephemeral_range();
    let reserved = reserved_ports();
    let mut checks = Vec::new();
    let mut in_range = Vec::new();
    for service in SERVICES {
        let addr: SocketAddr = config.service(service).listen;
        if addr.port() == 0 {
            continue;
        }
        if let Err(e) = std::net::TcpListener::bind(addr) {
            checks.push(Check::fail(
                format!("port:{service}"),
                format!("{addr} is taken ({e})"),
                format!("stop what listens there (`ss -ltnp 'sport = :{}'`), or set {service}.listen to a free address", addr.port()),
            ));
            continue;
        }
        if unreserved_ephemeral(addr.port(), ephemeral, &reserved) {
            in_range.push(addr.port());
        }
    }
    if let (Some((low, high)), false) = (ephemeral, in_range.is_empty()) {
        let list: Vec<String> = in_range.iter().map(u16::to_string).collect();
        checks.push(Check::warn(
            "ports",
            format!(
                "{} free, but inside the range outgoing connections take ports from ({low}-{high}): one may take a port while Metnos is down",
                list.join(", ")
            ),
            format!(
                "reserve them: `sudo sysctl -w net.ipv4.ip_local_reserved_ports={}` (and in /etc/sysctl.d/ to keep it)",
                list.join(",")
            ),
        ));
    }
    if checks.is_empty() {
        checks.push(Check::ok("ports", "every service's address is free"));
    }
    checks
}

/// Whether an outgoing connection may be handed `port` (in the kernel's ephemeral
/// `range`, not among the `reserved` ranges).
fn unreserved_ephemeral(port: u16, range: Option<(u16, u16)>, reserved: &[(u16, u16)]) -> bool {
    range.is_some_and(|(low, high)| (low..=high).contains(&port))
        && !reserved.iter().any(|(a, b)| (*a..=*b).contains(&port))
}

fn ephemeral_range() -> Option<(u16, u16)> {
    parse_range(&std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?)
}

/// `ip_local_port_range`: two numbers.
fn parse_range(text: &str) -> Option<(u16, u16)> {
    let mut parts = text.split_whitespace().map(|p| p.parse::<u16>().ok());
    Some((parts.next()??, parts.next()??))
}

fn reserved_ports() -> Vec<(u16, u16)> {
    parse_reserved(
        &std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_reserved_ports").unwrap_or_default(),
    )
}

/// `ip_local_reserved_ports`: `50051-50055,8080`, or empty.
fn parse_reserved(text: &str) -> Vec<(u16, u16)> {
    text.trim()
        .split(',')
        .filter_map(|part| {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
        })
        .collect()
}

/// The bot token, when one is set: Telegram's `getMe` answers with the bot's name.
async fn telegram(config: &Config) -> Option<Check> {
    let token = match metnos_gateway::bot_token(config) {
        Ok(Some(token)) => token,
        Ok(None) => return None,
        Err(e) => {
            return Some(Check::fail(
                "telegram",
                e,
                "point telegram.token_file at a file holding the token",
            ));
        }
    };
    let url = format!(
        "{}/bot{token}/getMe",
        config.telegram.api_url.trim_end_matches('/')
    );
    let hide = |text: String| text.replace(&token, "***");
    let client = match reqwest::Client::builder().timeout(TIMEOUT).build() {
        Ok(client) => client,
        Err(e) => {
            return Some(Check::fail(
                "telegram",
                hide(e.to_string()),
                "this machine's TLS setup (a system certificate store)",
            ));
        }
    };
    let answer = match client.get(&url).send().await {
        Ok(answer) => answer,
        Err(e) => {
            // The innermost cause, without the URL (which holds the token).
            let mut cause = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(inner) = source {
                cause = inner.to_string();
                source = inner.source();
            }
            return Some(Check::fail(
                "telegram",
                format!(
                    "{} does not answer ({})",
                    config.telegram.api_url,
                    hide(cause)
                ),
                "check this machine's connection, or telegram.api_url",
            ));
        }
    };
    let status = answer.status();
    // Bounded: a fake API must not make the doctor hold gigabytes.
    let mut answer = answer;
    let mut bytes = Vec::new();
    while let Ok(Some(chunk)) = answer.chunk().await {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_GET_ME {
            break;
        }
    }
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if status.as_u16() == 401 || status.as_u16() == 404 {
        return Some(Check::fail(
            "telegram",
            format!("the bot token was refused (HTTP {})", status.as_u16()),
            "copy the token again from @BotFather into METNOS_TELEGRAM_TOKEN or telegram.token_file",
        ));
    }
    let username = body["result"]["username"].as_str();
    match (status.is_success(), username) {
        (true, Some(name)) => Some(Check::ok(
            "telegram",
            format!("the token is the bot @{}", clean(name)),
        )),
        _ => Some(Check::fail(
            "telegram",
            format!("getMe answered HTTP {} without a bot", status.as_u16()),
            "check telegram.api_url",
        )),
    }
}

/// The data directory and Metnos's secrets: nobody but the owner may get in.
fn data_dir(config: &Config) -> Vec<Check> {
    use std::os::unix::fs::PermissionsExt;
    // What a link leads to is what others could open.
    let mode = |path: &Path| {
        std::fs::metadata(path)
            .ok()
            .map(|m| m.permissions().mode() & 0o777)
    };
    let mut checks = Vec::new();
    let dir = &config.data_dir;
    match mode(dir) {
        None => checks.push(Check::ok(
            "data_dir",
            format!(
                "{} does not exist yet: metnos up makes it (0700)",
                dir.display()
            ),
        )),
        Some(m) if m & 0o077 != 0 => checks.push(Check::fail(
            "data_dir",
            format!(
                "{} is open to other users (mode {m:o}): conversations, logs and stores are in it",
                dir.display()
            ),
            format!("chmod 700 {} (metnos up also tightens it)", dir.display()),
        )),
        Some(_) => checks.push(Check::ok(
            "data_dir",
            format!("{} is yours alone (0700)", dir.display()),
        )),
    }
    let key = crate::setup::default_key_path(config, crate::setup::OWNER_SIGNER);
    let tls_dir = &config.tls.dir;
    for (name, path, allowed) in [
        ("signing key", key.as_path(), 0o077),
        ("trust file", config.executors.trust_file.as_path(), 0o022),
        ("certificates", tls_dir.as_path(), 0o077),
    ] {
        if let Some(m) = mode(path)
            && m & allowed != 0
        {
            checks.push(Check::fail(
                "data_dir",
                format!(
                    "the {name} {} is open to other users (mode {m:o})",
                    path.display()
                ),
                format!("chmod go-rwx {}", path.display()),
            ));
        }
    }
    checks
}

/// The CA's and the owner's certificates: valid now, by this machine's clock.
fn certificates(config: &Config) -> Vec<Check> {
    let (ca, owner, _) = metnos_kit::tls::files(config, metnos_kit::tls::Identity::Owner);
    let now = jiff::Timestamp::now().as_second();
    let mut checks = Vec::new();
    for (name, path) in [("CA", ca), ("owner's", owner)] {
        if !path.exists() {
            checks.push(Check::ok(
                "certificates",
                format!(
                    "no {name} certificate yet ({}): metnos up makes them",
                    path.display()
                ),
            ));
            continue;
        }
        let (from, until) = match metnos_kit::tls::valid_between(&path) {
            Ok(v) => v,
            Err(e) => {
                checks.push(Check::fail(
                    "certificates",
                    e.to_string(),
                    "metnos pki init --rotate",
                ));
                continue;
            }
        };
        let date = |t: i64| {
            jiff::Timestamp::from_second(t)
                .map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string())
                .unwrap_or_default()
        };
        if now < from {
            checks.push(Check::fail(
                "certificates",
                format!("the {name} certificate is valid only from {}: this machine's clock is behind, or was ahead when it was made", date(from)),
                "set the clock right (timedatectl set-ntp true), or metnos pki init --rotate",
            ));
        } else if now > until {
            checks.push(Check::fail(
                "certificates",
                format!("the {name} certificate expired on {}", date(until)),
                "metnos pki init --rotate, then restart every service",
            ));
        } else if until - now < EXPIRY_WARNING_DAYS * 86_400 {
            checks.push(Check::warn(
                "certificates",
                format!("the {name} certificate expires on {}", date(until)),
                "metnos pki init --rotate, then restart every service",
            ));
        } else {
            checks.push(Check::ok(
                "certificates",
                format!("the {name} certificate is valid until {}", date(until)),
            ));
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_the_kernel_may_hand_out_is_told_unless_reserved() {
        let range = parse_range("32768\t60999\n");
        assert_eq!(range, Some((32768, 60999)));
        let reserved = parse_reserved("50051-50053,50055\n");
        assert_eq!(reserved, [(50051, 50053), (50055, 50055)]);
        assert!(!unreserved_ephemeral(50051, range, &reserved));
        assert!(!unreserved_ephemeral(50055, range, &reserved));
        assert!(unreserved_ephemeral(50054, range, &reserved));
        assert!(
            !unreserved_ephemeral(8443, range, &reserved),
            "below the range"
        );
        assert!(parse_reserved("\n").is_empty());
        assert!(unreserved_ephemeral(50054, range, &parse_reserved("")));
        assert!(
            !unreserved_ephemeral(50054, None, &[]),
            "not Linux: nothing to say"
        );
    }

    /// A self-signed certificate valid between two dates, as the CA and the owner's.
    fn config_with_certificate(dir: &Path, from: (i32, u8, u8), until: (i32, u8, u8)) -> Config {
        let mut params = rcgen::CertificateParams::new(vec!["owner.metnos".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
        params.not_after = rcgen::date_time_ymd(until.0, until.1, until.2);
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        let path = dir.join("cert.pem");
        std::fs::write(&path, pem).unwrap();
        let mut config = Config::default();
        config.tls.ca_file = path.clone();
        config.tls.cert_file = path;
        config
    }

    fn levels(checks: &[Check]) -> Vec<(Level, String)> {
        checks
            .iter()
            .map(|c| (c.level, c.message.clone()))
            .collect()
    }

    #[test]
    fn a_certificate_not_yet_valid_or_expired_fails_with_its_fix() {
        let dir = tempfile::tempdir().unwrap();
        let year = jiff::Zoned::now().year() as i32;
        // Made on a machine whose clock was ahead (or this one is behind).
        let config = config_with_certificate(dir.path(), (year + 1, 1, 1), (year + 5, 1, 1));
        let checks = certificates(&config);
        assert!(
            checks.iter().all(|c| c.level == Level::Fail),
            "{:?}",
            levels(&checks)
        );
        assert!(
            checks[0].message.contains("valid only from"),
            "{}",
            checks[0].message
        );
        assert!(checks[0].fix.as_deref().unwrap().contains("clock"));

        let config = config_with_certificate(dir.path(), (year - 5, 1, 1), (year - 1, 1, 1));
        let checks = certificates(&config);
        assert!(
            checks[0].message.contains("expired on"),
            "{:?}",
            levels(&checks)
        );
        assert_eq!(checks[0].level, Level::Fail);
        assert!(
            checks[0]
                .fix
                .as_deref()
                .unwrap()
                .contains("metnos pki init --rotate")
        );

        let config = config_with_certificate(dir.path(), (year - 1, 1, 1), (year + 5, 1, 1));
        let checks = certificates(&config);
        assert!(
            checks.iter().all(|c| c.level == Level::Ok),
            "{:?}",
            levels(&checks)
        );
        assert!(checks[0].message.contains("is valid until"));
    }

    #[test]
    fn a_certificate_near_its_end_is_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let soon = jiff::Zoned::now()
            .date()
            .saturating_add(jiff::Span::new().days(10));
        let config = config_with_certificate(
            dir.path(),
            (soon.year() as i32 - 2, 1, 1),
            (soon.year() as i32, soon.month() as u8, soon.day() as u8),
        );
        let checks = certificates(&config);
        assert_eq!(checks[0].level, Level::Warn, "{:?}", levels(&checks));
        assert!(checks[0].message.contains("expires on"));
    }
}
