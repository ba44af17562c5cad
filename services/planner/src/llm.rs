//! The LLM as the turn loop sees it: a tier answers a chat ([`Llm`]; [`Tiers`], the
//! configured providers, is the real one, engine tests script their own). One turn's
//! question to it is [`crate::turn::asking`].

use std::sync::Arc;

use metnos_llm::{ChatRequest, ChatResponse, LlmError, Tier, Tiers};

/// What the turn loop needs of the LLM tiers.
#[tonic::async_trait]
pub trait Llm: Send + Sync + std::fmt::Debug {
    /// The tier that really answers for `tier` (an unconfigured tier uses a lower one).
    fn resolve(&self, tier: Tier) -> Tier;

    /// The model behind `tier`.
    fn model(&self, tier: Tier) -> String;

    /// One chat with `tier`.
    async fn chat(&self, tier: Tier, request: &ChatRequest) -> Result<ChatResponse, LlmError>;

    /// The host of the online provider behind `tier` (`llm:online`); `None` for a local one.
    fn online_host(&self, _tier: Tier) -> Option<String> {
        None
    }

    /// A local tier to ask instead of `tier` (see [`Tiers::local_instead_of`]).
    fn local_instead_of(&self, _tier: Tier) -> Option<Tier> {
        None
    }
}

#[tonic::async_trait]
impl Llm for Tiers {
    fn resolve(&self, tier: Tier) -> Tier {
        Tiers::resolve(self, tier)
    }

    fn model(&self, tier: Tier) -> String {
        self.provider(tier).model().to_owned()
    }

    async fn chat(&self, tier: Tier, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Tiers::chat(self, tier, request).await
    }

    fn online_host(&self, tier: Tier) -> Option<String> {
        Tiers::online_host(self, tier)
    }

    fn local_instead_of(&self, tier: Tier) -> Option<Tier> {
        Tiers::local_instead_of(self, tier)
    }
}

/// Why the planner has no LLM: its configuration's error, told at the end of every turn.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct NoLlm(pub String);

/// The planner's LLM, or why there is none (every turn then ends with that error).
pub type LlmSlot = Result<Arc<dyn Llm>, NoLlm>;

/// The tier that really answers for `tier` (an unconfigured tier uses a lower one): what
/// events and the turn log show, so they never name a tier that did not run.
pub(crate) fn tier_used(llm: &LlmSlot, tier: Tier) -> Tier {
    llm.as_ref().map_or(tier, |l| l.resolve(tier))
}

/// The model that answers for `tier` (empty: no LLM).
pub(crate) fn model_of(llm: &LlmSlot, tier: Tier) -> String {
    llm.as_ref()
        .map_or_else(|_| String::new(), |l| l.model(tier))
}
