//! The LLM as the turn loop sees it: a tier answers a chat. [`Tiers`] (the configured
//! providers) is the real one; engine tests script their own.

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
}
