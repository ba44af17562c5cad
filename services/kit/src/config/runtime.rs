//! `[runtime]` and `[runtime.llm.<tier>]`: whose home `~` means, how the planner loops,
//! and which LLMs plan.

use std::collections::BTreeMap;
use std::num::NonZero;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The agent runtime: whose home `~` means and which LLMs plan.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// The home of the person Metnos acts for; `~` in tool arguments expands to it.
    /// Empty: the HOME of the process that loads the config.
    pub user_home: PathBuf,
    /// The folders of programs the person runs by name (their PATH): a write there runs
    /// code later, so it happens only when the person's message names it, after a card.
    /// Empty: the PATH of the process that loads the config. `~/bin` and `~/go/bin` count
    /// whatever this says.
    pub user_path: Vec<PathBuf>,
    /// `local`, `online` or `hybrid`.
    pub mode: PlannerMode,
    /// LLM tiers; only `fast` is needed, a missing tier aliases down. A config that names
    /// none gets [`LlmTierConfig::default_fast`] when loaded (the seeds' local Ollama with
    /// `qwen3:8b`).
    pub llm: BTreeMap<String, LlmTierConfig>,
}

/// The fast tier's model when none is configured.
pub const DEFAULT_FAST_MODEL: &str = "qwen3:8b";
/// Where Ollama listens when it is installed with its defaults.
pub const DEFAULT_OLLAMA_URL: &str = "http://127.0.0.1:11434";
/// Ollama's own variable for where it listens (`127.0.0.1:11434`, `http://gpu-box:11434`):
/// an Ollama tier without a `base_url` goes there, as the `ollama` command does.
pub const OLLAMA_HOST_ENV: &str = "OLLAMA_HOST";

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
    pub timeout_seconds: NonZero<u64>,
    /// Name of the environment variable holding the API key (never the key itself).
    #[serde(default)]
    pub api_key_env: String,
    /// Whether calls to it are `llm:online` (an outgoing cost, asked of policy): unset, by
    /// the rule of `metnos_llm::Provider::online_host`; `true` for e.g. a proxy in the home
    /// network that forwards to a paid provider, `false` for a model the person runs.
    #[serde(default)]
    pub online: Option<bool>,
}

impl LlmTierConfig {
    /// The fast tier when the config names none: Ollama on this machine (or at
    /// `OLLAMA_HOST`), `qwen3:8b`.
    pub fn default_fast() -> LlmTierConfig {
        LlmTierConfig {
            provider: LlmProvider::Ollama,
            model: DEFAULT_FAST_MODEL.to_owned(),
            base_url: String::new(),
            think: false,
            timeout_seconds: default_llm_timeout(),
            api_key_env: String::new(),
            online: None,
        }
    }
}

fn default_llm_timeout() -> NonZero<u64> {
    const { NonZero::new(120).unwrap() }
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
