//! `metnos eval` (issue 42): how well Metnos works with a model — a fixed suite of tasks
//! run through the whole stack, in a throwaway home and data directory on ports of its
//! own, against the model the person names; a table (stderr) and JSON lines (stdout), and
//! exit 1 below `--min-pass`.
//!
//! - [`suite`]: the suite's format and the default suite;
//! - [`stack`]: the throwaway stack and the pages' server;
//! - [`run`]: one task's turns and their checks; [`checks`]: the checks that need no stack.

pub mod checks;
pub mod run;
pub mod stack;
pub mod suite;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use metnos_kit::Config;
use metnos_kit::config::{LlmProvider, LlmTierConfig};
use metnos_kit::launch::EXIT_CONFIG;

use run::Outcome;
use stack::{Model, Throwaway};
use suite::Suite;

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// The tier of your config to measure (fast, middle or wise; a missing one aliases
    /// down, as in the stack).
    #[arg(long, default_value = "fast", conflicts_with = "provider")]
    pub tier: String,
    /// A model not in your config: its provider (ollama, openai, anthropic) …
    #[arg(long, value_name = "PROVIDER", requires = "model")]
    pub provider: Option<String>,
    /// … its name …
    #[arg(long, value_name = "MODEL", requires = "provider")]
    pub model: Option<String>,
    /// … where it is served (default: the provider's usual local address) …
    #[arg(long, value_name = "URL", requires = "provider")]
    pub base_url: Option<String>,
    /// … and the variable holding its API key, if it needs one.
    #[arg(long, value_name = "VAR", requires = "provider")]
    pub api_key_env: Option<String>,
    /// Your own suite instead of the default one (its format: eval/suite.toml).
    #[arg(long, value_name = "FILE")]
    pub suite: Option<PathBuf>,
    /// Only these tasks (by id; repeat the flag for more).
    #[arg(long = "task", value_name = "ID")]
    pub tasks: Vec<String>,
    /// Exit 1 when fewer tasks pass (default: 16 of the default 20; four in five of
    /// another suite).
    #[arg(long, value_name = "N")]
    pub min_pass: Option<usize>,
    /// How long one turn may take, in seconds (a slow model needs more).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub turn_timeout: u64,
}

/// Runs `metnos eval`.
pub async fn eval(config: &Config, args: EvalArgs) -> ExitCode {
    let (suite, origin) = match load_suite(&args) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("metnos eval: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let model = match model_of(config, &args) {
        Ok(model) => model,
        Err(e) => {
            eprintln!("metnos eval: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let min_pass = args
        .min_pass
        .unwrap_or_else(|| (suite.tasks.len() * 4).div_ceil(5));
    if min_pass > suite.tasks.len() {
        eprintln!(
            "metnos eval: --min-pass {min_pass} is more than the {} tasks run",
            suite.tasks.len()
        );
        return ExitCode::from(EXIT_CONFIG);
    }
    // The address as messages show it: no user or password from the URL.
    let shown = metnos_llm::Provider::from_config("fast", &model.tier)
        .map(|p| p.base_url())
        .unwrap_or_else(|_| "its usual local address".to_owned());
    eprintln!(
        "metnos eval: {} tasks of {origin} with {} {} ({shown}); a throwaway stack starts…",
        suite.tasks.len(),
        provider_name(model.tier.provider),
        model.tier.model,
    );
    let stack = match Throwaway::start(&model).await {
        Ok(stack) => stack,
        Err(e) => {
            eprintln!("metnos eval: {e}");
            return ExitCode::FAILURE;
        }
    };
    let limit = Duration::from_secs(args.turn_timeout.max(1));
    // Ctrl-C stops the throwaway stack and removes its folder (its keys, its logs).
    let outcomes = tokio::select! {
        outcomes = run_all(&stack, &suite, limit) => outcomes,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("metnos eval: interrupted; the throwaway stack stops");
            stack.stop().await;
            return ExitCode::from(130);
        }
    };
    stack.stop().await;
    let Ok(outcomes) = outcomes else {
        return ExitCode::FAILURE;
    };
    let passed = outcomes.iter().filter(|o| o.passed).count();
    summary(&outcomes, &model, min_pass);
    if passed >= min_pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every task in order, each outcome printed as a JSON line when it is known.
async fn run_all(stack: &Throwaway, suite: &Suite, limit: Duration) -> Result<Vec<Outcome>, ()> {
    let mut clients = match run::Clients::connect(stack) {
        Ok(clients) => clients,
        Err(e) => {
            eprintln!("metnos eval: {e}");
            return Err(());
        }
    };
    let mut outcomes = Vec::with_capacity(suite.tasks.len());
    for task in &suite.tasks {
        let outcome = run::run_task(stack, &mut clients, task, limit).await;
        if let Ok(line) = serde_json::to_string(&outcome) {
            println!("{line}");
        }
        eprintln!(
            "  {:<22} {}",
            outcome.task,
            if outcome.passed { "pass" } else { "FAIL" }
        );
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

fn load_suite(args: &EvalArgs) -> Result<(Suite, String), String> {
    let (text, origin) = match &args.suite {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the suite {}: {e}", path.display()))?,
            path.display().to_string(),
        ),
        None => (suite::DEFAULT.to_owned(), "the default suite".to_owned()),
    };
    let mut suite = Suite::parse(&text, &origin).map_err(|e| e.to_string())?;
    if !args.tasks.is_empty() {
        if let Some(unknown) = args.tasks.iter().find(|id| suite.task(id).is_none()) {
            return Err(format!("{origin} has no task `{unknown}`"));
        }
        suite.tasks.retain(|t| args.tasks.contains(&t.id));
    }
    Ok((suite, origin))
}

/// The model to measure: the one named on the command line, else the config's tier (as
/// the stack aliases it), else the stack's default fast tier.
fn model_of(config: &Config, args: &EvalArgs) -> Result<Model, String> {
    let tier = match (&args.provider, &args.model) {
        (Some(provider), Some(model)) => {
            let provider: LlmProvider = serde_json::from_value(serde_json::json!(provider))
                .map_err(|_| {
                    format!("--provider `{provider}` is not one of ollama, openai, anthropic")
                })?;
            let mut tier = LlmTierConfig::default_fast();
            tier.provider = provider;
            tier.model = model.clone();
            tier.base_url = args.base_url.clone().unwrap_or_default();
            tier.api_key_env = args.api_key_env.clone().unwrap_or_default();
            if !tier.base_url.is_empty()
                && !reqwest::Url::parse(&tier.base_url)
                    .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
            {
                // Not echoed: it may hold a password.
                return Err("--base-url is not an http:// or https:// URL".to_owned());
            }
            tier
        }
        _ => {
            let order: &[&str] = match args.tier.as_str() {
                "wise" => &["wise", "middle", "fast"],
                "middle" => &["middle", "fast"],
                "fast" => &["fast"],
                other => return Err(format!("--tier `{other}` is not fast, middle or wise")),
            };
            order
                .iter()
                .find_map(|t| config.runtime.llm.get(*t).cloned())
                .unwrap_or_else(LlmTierConfig::default_fast)
        }
    };
    let name = tier.api_key_env.as_str();
    if name == "PATH" || name == "HOME" || name.starts_with("METNOS_") {
        return Err(format!(
            "the API key variable may not be {name}: the throwaway stack sets it"
        ));
    }
    let api_key = if tier.api_key_env.is_empty() {
        None
    } else {
        let value = std::env::var(&tier.api_key_env)
            .map_err(|_| format!("the API key variable {} is not set", tier.api_key_env))?;
        Some((tier.api_key_env.clone(), value))
    };
    Ok(Model { tier, api_key })
}

/// A provider's name as the config writes it (`ollama`, `openai`, `anthropic`).
pub(crate) fn provider_name(provider: LlmProvider) -> String {
    serde_json::to_value(provider)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The table and the summary line (stderr), and the summary as a last JSON line.
fn summary(outcomes: &[Outcome], model: &Model, min_pass: usize) {
    eprintln!();
    eprintln!(
        "{:<22} {:<6} {:>5} {:>9} {:>9} {:>8}  why",
        "task", "result", "steps", "tokens", "turn ms", "llm ms"
    );
    for o in outcomes {
        eprintln!(
            "{:<22} {:<6} {:>5} {:>9} {:>9} {:>8}  {}",
            o.task,
            if o.passed { "pass" } else { "FAIL" },
            o.steps,
            o.prompt_tokens + o.completion_tokens,
            o.latency_ms / o.turns.max(1) as u64,
            o.llm_ms,
            o.why.join("; ")
        );
    }
    let passed = outcomes.iter().filter(|o| o.passed).count();
    let failed = outcomes.len() - passed;
    let mut turns: Vec<u64> = outcomes
        .iter()
        .map(|o| o.latency_ms / o.turns.max(1) as u64)
        .collect();
    turns.sort_unstable();
    let median = turns.get(turns.len() / 2).copied().unwrap_or(0);
    eprintln!(
        "{passed} passed, {failed} failed; median turn {median} ms (needed: {min_pass} to pass)"
    );
    let line = serde_json::json!({"summary": {
        "passed": passed, "failed": failed, "min_pass": min_pass, "median_turn_ms": median,
        "provider": provider_name(model.tier.provider), "model": model.tier.model,
    }});
    println!("{line}");
}
