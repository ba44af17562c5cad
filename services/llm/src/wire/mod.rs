//! The three wire formats, as pure functions: build a request body, parse a response,
//! turn an error body into a typed error. No IO here, so each format is unit-tested on
//! the JSON its API really sends.

pub mod anthropic;
pub mod ollama;
pub mod openai;

use serde_json::Value;

use crate::error::LlmError;
use crate::types::ToolCall;

/// Arguments must be a JSON object; a string holding one is accepted (OpenAI sends them
/// as a string).
pub(crate) fn arguments(
    provider: &'static str,
    name: &str,
    raw: &Value,
) -> Result<Value, LlmError> {
    // The model's words, cut: a tool name is short.
    let tool: String = name.chars().take(64).collect();
    let value = match raw {
        Value::String(text) => serde_json::from_str(text).map_err(|e| LlmError::BadArguments {
            provider,
            tool: tool.clone(),
            message: format!("not JSON ({e})"),
        })?,
        other => other.clone(),
    };
    if !value.is_object() {
        return Err(LlmError::BadArguments {
            provider,
            tool,
            message: "not an object".to_owned(),
        });
    }
    Ok(value)
}

/// A provider-made id for tool calls that come without one.
pub(crate) fn made_up_id(index: usize) -> String {
    format!("call_{index}")
}

pub(crate) fn malformed(provider: &'static str, message: impl Into<String>) -> LlmError {
    LlmError::Malformed {
        provider,
        message: message.into(),
    }
}

/// The text of an error body: a JSON `error.message`, `error` string or `message`, else
/// the body itself, cut short.
pub(crate) fn error_message(body: &str) -> String {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_owned());
    let mut cut: String = text.chars().take(300).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    if cut.is_empty() {
        "(empty body)".to_owned()
    } else {
        cut
    }
}

pub(crate) fn tool_call(id: String, name: String, arguments: Value) -> ToolCall {
    ToolCall {
        id,
        name,
        arguments,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    /// JSON shaped like a provider's answer: the keys the decoders look for, holding
    /// anything at all (wrong types, missing parts, nesting).
    fn answer_like() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            "[a-z{}\\[\\]\":, ]{0,12}".prop_map(Value::from),
            Just(json!("tool_use")),
            Just(json!("text")),
            Just(json!("{\"a\":1}")),
        ];
        let keys = prop::sample::select(vec![
            "message",
            "content",
            "tool_calls",
            "function",
            "name",
            "arguments",
            "choices",
            "type",
            "text",
            "input",
            "id",
            "usage",
            "model",
            "done",
            "stop_reason",
            "finish_reason",
            "prompt_eval_count",
            "eval_count",
            "input_tokens",
            "output_tokens",
            "prompt_tokens",
            "completion_tokens",
            "thinking",
        ]);
        leaf.prop_recursive(5, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((keys.clone(), inner), 0..6).prop_map(|pairs| Value::Object(
                    pairs
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>()
                )),
            ]
        })
    }

    proptest! {
        /// Whatever a provider (or something pretending to be one) answers, decoding gives
        /// an outcome or a clear error; it never panics.
        #[test]
        fn any_answer_decodes_or_is_refused_never_panics(body in answer_like()) {
            let _ = super::ollama::parse(&body);
            let _ = super::openai::parse(&body);
            let _ = super::anthropic::parse(&body, None);
            let _ = super::anthropic::parse(&body, Some("verdict"));
            let _ = super::error_message(&body.to_string());
        }
    }
}
