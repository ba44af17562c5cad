//! What every provider takes and gives: a chat request (system prompt, messages with tool
//! results, tool definitions as JSON Schema, optional JSON-Schema-constrained output) and
//! either tool calls or text, with token usage and latency.

use std::time::Duration;

use serde_json::Value;

/// A tool the model may call; `parameters` is its JSON Schema, passed on verbatim.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// A call the model asked for. `arguments` is always a JSON object.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's id for the call (Ollama has none: a stable one is made up).
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    User(String),
    /// What the model said before: its text and the calls it made.
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, sent back to the model.
    ToolResult {
        call_id: String,
        name: String,
        content: String,
    },
}

/// Output constrained to a JSON Schema.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonOutput {
    /// A short name for the schema (OpenAI requires one).
    pub name: String,
    pub schema: Value,
}

/// A chat request, provider-neutral.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDef>,
    pub json_output: Option<JsonOutput>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    /// Ask for reasoning where the model supports it; `None` keeps the tier's setting.
    pub think: Option<bool>,
}

/// What the model answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    ToolCalls(Vec<ToolCall>),
    /// Final text; with a JSON output request, the JSON document.
    Text(String),
}

/// Tokens used by one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// One chat call's result.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    pub outcome: Outcome,
    pub usage: Usage,
    pub latency: Duration,
    /// The model that answered, as the provider named it.
    pub model: String,
}

impl ChatResponse {
    /// The text, parsed as JSON (for JSON-Schema output).
    pub fn json(&self) -> Option<Value> {
        match &self.outcome {
            Outcome::Text(text) => serde_json::from_str(text).ok(),
            Outcome::ToolCalls(_) => None,
        }
    }
}
