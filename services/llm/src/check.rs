//! Whether each configured tier can work, checked without a chat call: the API key's
//! variable is set, the server answers, and it has the model (Ollama `/api/tags`,
//! OpenAI-compatible and Anthropic `/v1/models`). `metnos up` prints one line per tier at
//! start (never failing on it), `metnos doctor` and `metnos status` say the same.
//!
//! What a server says is printed on a terminal: model names are cleaned of control
//! characters and cut short, so a hostile server cannot write escape sequences there.

use std::collections::BTreeMap;
use std::time::Duration;

use metnos_kit::config::{LlmProvider, LlmTierConfig};

use crate::error::LlmError;
use crate::provider::Provider;
use crate::tiers::Tier;

/// How long a tier's check may take where it must not hold anything up (`metnos up`,
/// `metnos status`).
pub const QUICK_TIMEOUT: Duration = Duration::from_secs(3);

/// How bad a finding is: `Fail` means no turn can work on that tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// What the check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Reachable, the model listed, the key (if any) accepted.
    Ready,
    /// `api_key_env` names a variable that is not set.
    NoKey { var: String },
    /// No answer: the cause (connection refused, timed out, no such host).
    Unreachable { why: String },
    /// The server refused the key (HTTP 401 or 403).
    KeyRefused { status: u16 },
    /// The server does not list the model; some of what it does list.
    ModelMissing { available: Vec<String> },
    /// An answer, but not an LLM server's.
    Odd { why: String },
}

/// One tier's check.
#[derive(Debug, Clone)]
pub struct TierCheck {
    pub tier: String,
    pub kind: LlmProvider,
    pub model: String,
    /// Where it is reached (without credentials).
    pub base_url: String,
    /// The variable holding its key, if it has one.
    pub key_var: String,
    pub finding: Finding,
}

/// Models named in a message at most.
const SHOWN_MODELS: usize = 5;

fn provider_word(kind: LlmProvider) -> &'static str {
    match kind {
        LlmProvider::Ollama => "ollama",
        LlmProvider::Openai => "the OpenAI-compatible server",
        LlmProvider::Anthropic => "anthropic",
    }
}

/// A server's word, safe on a terminal: no control characters, no invisible or
/// direction-changing ones, at most 64 characters.
pub fn clean(text: &str) -> String {
    text.chars()
        .map(|c| {
            let hidden = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}');
            if c.is_control() || hidden { '?' } else { c }
        })
        .take(64)
        .collect()
}

impl TierCheck {
    pub fn level(&self) -> Level {
        match &self.finding {
            Finding::Ready => Level::Ok,
            // An OpenAI-compatible server (llama.cpp, vLLM) may serve any name it is asked.
            Finding::ModelMissing { .. } if self.kind == LlmProvider::Openai => Level::Warn,
            Finding::Odd { .. } => Level::Warn,
            _ => Level::Fail,
        }
    }

    /// One line: the tier, what was found, where.
    pub fn line(&self) -> String {
        let tier = &self.tier;
        let word = provider_word(self.kind);
        let (model, url) = (&self.model, &self.base_url);
        match &self.finding {
            Finding::Ready => format!("{tier} tier: ready ({model} on {word} at {url})"),
            Finding::NoKey { var } => format!(
                "{tier} tier: {var} is not set (runtime.llm.{tier}.api_key_env names it as the variable holding the key)"
            ),
            Finding::Unreachable { why } => {
                format!("{tier} tier: {word} is not reachable at {url} ({why})")
            }
            Finding::KeyRefused { status } if self.key_var.is_empty() => format!(
                "{tier} tier: {word} at {url} refused the request (HTTP {status}): it wants a key"
            ),
            Finding::KeyRefused { status } => format!(
                "{tier} tier: {word} at {url} refused the key in {} (HTTP {status})",
                self.key_var
            ),
            Finding::ModelMissing { available } if available.is_empty() => {
                format!("{tier} tier: {word} at {url} has no model {model} (it has none)")
            }
            Finding::ModelMissing { available } => format!(
                "{tier} tier: {word} at {url} has no model {model} (it has {}{})",
                available[..available.len().min(SHOWN_MODELS)].join(", "),
                if available.len() > SHOWN_MODELS {
                    ", …"
                } else {
                    ""
                }
            ),
            Finding::Odd { why } => format!("{tier} tier: {word} at {url}: {why}"),
        }
    }

    /// How to fix it, when something is wrong.
    pub fn fix(&self) -> Option<String> {
        let tier = &self.tier;
        let model = &self.model;
        Some(match (&self.finding, self.kind) {
            (Finding::Ready, _) => return None,
            (Finding::NoKey { var }, _) => {
                format!("export {var}=<your key> in the environment metnos up starts from")
            }
            (Finding::Unreachable { .. }, LlmProvider::Ollama) => format!(
                "start Ollama (`ollama serve`, https://ollama.com/download), or set [runtime.llm.{tier}] base_url to where it listens"
            ),
            (Finding::Unreachable { .. }, LlmProvider::Openai) => format!(
                "start the server, or set [runtime.llm.{tier}] base_url to where it listens"
            ),
            (Finding::Unreachable { .. }, LlmProvider::Anthropic) => {
                "check this machine's connection to the internet".to_owned()
            }
            (Finding::KeyRefused { .. }, _) if self.key_var.is_empty() => {
                format!("set [runtime.llm.{tier}] api_key_env to the variable holding its key")
            }
            (Finding::KeyRefused { .. }, _) => format!(
                "put a valid key in {}; the provider's console lists yours",
                self.key_var
            ),
            (Finding::ModelMissing { .. }, LlmProvider::Ollama) => {
                format!("`ollama pull {model}`, or set [runtime.llm.{tier}] model to one it has")
            }
            (Finding::ModelMissing { .. }, _) => {
                format!("set [runtime.llm.{tier}] model to one the server lists")
            }
            (Finding::Odd { .. }, kind) => format!(
                "check that [runtime.llm.{tier}] base_url is {}",
                match kind {
                    LlmProvider::Ollama => "an Ollama server",
                    LlmProvider::Openai => "an OpenAI-compatible server (its /v1 API)",
                    LlmProvider::Anthropic => "https://api.anthropic.com",
                }
            ),
        })
    }
}

/// Checks one tier, in at most about `timeout`.
pub async fn check_tier(tier: &str, config: &LlmTierConfig, timeout: Duration) -> TierCheck {
    let mut check = TierCheck {
        tier: tier.to_owned(),
        kind: config.provider,
        model: clean(&config.model),
        base_url: String::new(),
        key_var: config.api_key_env.clone(),
        finding: Finding::Ready,
    };
    if !config.api_key_env.is_empty() && std::env::var_os(&config.api_key_env).is_none() {
        check.finding = Finding::NoKey {
            var: config.api_key_env.clone(),
        };
        return check;
    }
    let provider = match Provider::from_config(tier, config) {
        Ok(provider) => provider,
        Err(e) => {
            check.finding = Finding::Odd { why: e.to_string() };
            return check;
        }
    };
    check.base_url = provider.base_url();
    check.finding = match provider.list_models(timeout).await {
        Ok(models) if models.iter().any(|m| provider.is_model(m)) => Finding::Ready,
        Ok(models) => Finding::ModelMissing {
            // One more than shown, to tell "…" from a list shown whole.
            available: models
                .iter()
                .take(SHOWN_MODELS + 1)
                .map(|m| clean(m))
                .collect(),
        },
        Err(LlmError::Unreachable { cause, .. }) => Finding::Unreachable {
            // "connection refused (os error 111)": the number says nothing more.
            why: match cause.find(" (os error") {
                Some(at) => cause[..at].to_owned(),
                None => cause,
            },
        },
        Err(LlmError::Timeout { after, .. }) => Finding::Unreachable {
            why: format!("no answer within {} s", after.as_secs()),
        },
        Err(LlmError::Http { status, .. }) if status == 401 || status == 403 => {
            Finding::KeyRefused { status }
        }
        Err(LlmError::Http {
            status, message, ..
        }) => Finding::Odd {
            why: format!("{message} answered HTTP {status}"),
        },
        Err(e) => Finding::Odd { why: e.to_string() },
    };
    check
}

/// Checks every configured tier at once; in tier order (fast, middle, wise).
pub async fn check_tiers(
    llm: &BTreeMap<String, LlmTierConfig>,
    timeout: Duration,
) -> Vec<TierCheck> {
    let checks = Tier::ALL.iter().filter_map(|tier| {
        llm.get(tier.as_str())
            .map(|config| check_tier(tier.as_str(), config, timeout))
    });
    futures::future::join_all(checks).await
}
