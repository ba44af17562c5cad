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
    let value = match raw {
        Value::String(text) => serde_json::from_str(text).map_err(|e| LlmError::Malformed {
            provider,
            message: format!("arguments of tool call `{name}` are not JSON: {e}"),
        })?,
        other => other.clone(),
    };
    if !value.is_object() {
        return Err(LlmError::Malformed {
            provider,
            message: format!("arguments of tool call `{name}` are not a JSON object"),
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
