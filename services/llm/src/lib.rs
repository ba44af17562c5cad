//! LLM providers for Metnos (DESIGN.md §7; seed agent_runtime.md ch. 3, 4, 6): Ollama
//! `/api/chat`, OpenAI-compatible `/v1/chat/completions` and Anthropic `/v1/messages`,
//! each with its native tool calling. A call a server hands over as text (it did not parse
//! the model's template) is the planner's to take or not (`metnos_planner::turn::repair`,
//! issue 42): this crate reports what the server said.
//!
//! Layout: [`types`] is the provider-neutral request and answer; [`wire`] the three
//! formats as pure functions; [`provider`] one model over HTTP with retries and spans;
//! [`tiers`] fast / middle / wise with aliasing; [`check`] whether each tier can work; [`fake`] (feature `fake`) a scripted LLM
//! server that speaks all three formats over real HTTP, for tests.

pub mod check;
pub mod error;
#[cfg(feature = "fake")]
pub mod fake;
pub mod provider;
pub mod tiers;
pub mod types;
pub mod wire;

pub use error::LlmError;
pub use provider::{Provider, RetryPolicy};
pub use tiers::{Tier, Tiers};
pub use types::{
    ChatRequest, ChatResponse, JsonOutput, Message, Outcome, ToolCall, ToolDef, Usage,
};
