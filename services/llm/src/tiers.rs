//! Three tiers of LLM (seed agent_runtime.md ch. 4): `fast` (always there), `middle` and
//! `wise`. A missing tier aliases down (wise → middle → fast); each tier has its own
//! preamble, so one model still gives three roles.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use metnos_kit::config::LlmTierConfig;

use crate::error::LlmError;
use crate::provider::Provider;
use crate::types::{ChatRequest, ChatResponse};

/// One of the three tiers; written `fast`, `middle`, `wise`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Fast,
    Middle,
    Wise,
}

impl Tier {
    pub const ALL: [Tier; 3] = [Tier::Fast, Tier::Middle, Tier::Wise];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Fast => "fast",
            Tier::Middle => "middle",
            Tier::Wise => "wise",
        }
    }

    /// What each tier is asked to be, before the caller's own system prompt.
    pub fn preamble(self) -> &'static str {
        match self {
            Tier::Fast => "Act directly: choose the one tool call that does the job, or answer.",
            Tier::Middle => "Consider the alternatives and their risks before you choose.",
            Tier::Wise => {
                "Reflect deeply: weigh alternatives, consequences and what the person really needs before you answer."
            }
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The configured tiers.
#[derive(Debug, Clone)]
pub struct Tiers {
    providers: BTreeMap<Tier, Arc<Provider>>,
    /// Which tier each one really uses (itself, or the one it aliases to).
    resolved: BTreeMap<Tier, Tier>,
}

impl Tiers {
    /// Builds the tiers from `[runtime.llm.*]`; `fast` is required. Aliases are logged once.
    pub fn from_config(llm: &BTreeMap<String, LlmTierConfig>) -> Result<Tiers, LlmError> {
        Tiers::build(llm, |provider| provider)
    }

    /// As [`Tiers::from_config`], with each provider adjusted (e.g. its retry policy).
    pub fn build(
        llm: &BTreeMap<String, LlmTierConfig>,
        adjust: impl Fn(Provider) -> Provider,
    ) -> Result<Tiers, LlmError> {
        if !llm.contains_key("fast") {
            return Err(LlmError::Config(
                "no [runtime.llm.fast] section: the fast tier is required".to_owned(),
            ));
        }
        let mut providers = BTreeMap::new();
        let mut resolved = BTreeMap::new();
        for tier in Tier::ALL {
            if let Some(config) = llm.get(tier.as_str()) {
                providers.insert(
                    tier,
                    Arc::new(adjust(Provider::from_config(tier.as_str(), config)?)),
                );
                resolved.insert(tier, tier);
            }
        }
        for tier in Tier::ALL {
            if resolved.contains_key(&tier) {
                continue;
            }
            let below = Tier::ALL
                .iter()
                .rev()
                .filter(|t| **t < tier)
                .find(|t| providers.contains_key(t))
                .copied()
                .unwrap_or(Tier::Fast);
            resolved.insert(tier, below);
            tracing::info!(
                tier = tier.as_str(),
                uses = below.as_str(),
                "llm tier not configured; it uses a lower one"
            );
        }
        Ok(Tiers {
            providers,
            resolved,
        })
    }

    /// The tier `tier` really uses.
    pub fn resolve(&self, tier: Tier) -> Tier {
        self.resolved[&tier]
    }

    pub fn provider(&self, tier: Tier) -> &Provider {
        &self.providers[&self.resolve(tier)]
    }

    /// The host of the online provider behind `tier` (`None`: a local one).
    pub fn online_host(&self, tier: Tier) -> Option<String> {
        self.provider(tier).online_host()
    }

    /// The local tier to use instead of `tier` when an online one may not be called: the
    /// highest local tier not above it, else the lowest local one above it; `None` when
    /// every configured tier is online.
    pub fn local_instead_of(&self, tier: Tier) -> Option<Tier> {
        let local = |t: &Tier| {
            self.providers
                .get(t)
                .is_some_and(|p| p.online_host().is_none())
        };
        Tier::ALL
            .iter()
            .rev()
            .filter(|t| **t <= tier)
            .find(|t| local(t))
            .or_else(|| Tier::ALL.iter().filter(|t| **t > tier).find(|t| local(t)))
            .copied()
    }

    /// A chat call as `tier`, with the tier's preamble before the caller's system prompt.
    pub async fn chat(&self, tier: Tier, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let mut request = request.clone();
        request.system = Some(match &request.system {
            Some(system) => format!("{}\n\n{system}", tier.preamble()),
            None => tier.preamble().to_owned(),
        });
        self.provider(tier).chat(tier.as_str(), &request).await
    }
}
