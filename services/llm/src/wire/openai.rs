//! OpenAI-compatible `/v1/chat/completions` (llama.cpp server, vLLM, LM Studio, OpenAI):
//! tools, `tool_choice`, `response_format` with a JSON Schema.

use serde_json::{Value, json};

use super::{arguments, error_message, made_up_id, malformed, tool_call};
use crate::error::LlmError;
use crate::types::{ChatRequest, Message, Outcome, Usage};

pub const PROVIDER: &str = "openai";
pub const PATH: &str = "/v1/chat/completions";
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:8080";

pub fn body(request: &ChatRequest, model: &str) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        messages.push(match message {
            Message::User(text) => json!({"role": "user", "content": text}),
            Message::Assistant { text, tool_calls } if tool_calls.is_empty() => {
                json!({"role": "assistant", "content": text})
            }
            Message::Assistant { text, tool_calls } => {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments.to_string()}}))
                    .collect();
                let content = if text.is_empty() { Value::Null } else { json!(text) };
                json!({"role": "assistant", "content": content, "tool_calls": calls})
            }
            Message::ToolResult { call_id, content, .. } => {
                json!({"role": "tool", "tool_call_id": call_id, "content": content})
            }
        });
    }
    let mut body = json!({"model": model, "messages": messages, "stream": false});
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect();
        body["tool_choice"] = json!("auto");
    }
    if let Some(output) = &request.json_output {
        body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": output.name, "schema": output.schema, "strict": true}});
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(n) = request.max_tokens {
        body["max_tokens"] = json!(n);
    }
    body
}

pub fn parse(body: &Value) -> Result<(Outcome, Usage, String), LlmError> {
    let message = body
        .pointer("/choices/0/message")
        .ok_or_else(|| malformed(PROVIDER, "no `choices[0].message` in the answer"))?;
    let usage = Usage {
        prompt_tokens: body
            .pointer("/usage/prompt_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        completion_tokens: body
            .pointer("/usage/completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    };
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !calls.is_empty() {
        let mut out = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .ok_or_else(|| malformed(PROVIDER, "tool call without a name"))?;
            let raw = call
                .pointer("/function/arguments")
                .cloned()
                .unwrap_or(json!("{}"));
            let args = arguments(PROVIDER, name, &raw)?;
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| made_up_id(i), str::to_owned);
            out.push(tool_call(id, name.to_owned(), args));
        }
        return Ok((Outcome::ToolCalls(out), usage, model));
    }
    match message.get("content") {
        Some(Value::String(text)) => Ok((Outcome::Text(text.clone()), usage, model)),
        _ => Err(malformed(PROVIDER, "message without text or tool calls")),
    }
}

pub fn error(status: u16, body: &str, model: &str) -> LlmError {
    let message = error_message(body);
    let code = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/code")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default();
    if code == "model_not_found" || status == 404 && message.contains("model") {
        return LlmError::ModelNotFound {
            provider: PROVIDER,
            model: model.to_owned(),
            message,
        };
    }
    if code == "context_length_exceeded"
        || message.contains("context length")
        || message.contains("exceeds the context")
    {
        return LlmError::ContextTooLong {
            provider: PROVIDER,
            message,
        };
    }
    LlmError::Http {
        provider: PROVIDER,
        status,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{JsonOutput, ToolCall, ToolDef};

    #[test]
    fn tool_results_go_back_by_call_id_and_arguments_as_a_string() {
        let request = ChatRequest {
            messages: vec![
                Message::User("fetch".into()),
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "web_fetch".into(),
                        arguments: json!({"url": "http://x"}),
                    }],
                },
                Message::ToolResult {
                    call_id: "c1".into(),
                    name: "web_fetch".into(),
                    content: "body".into(),
                },
            ],
            tools: vec![ToolDef {
                name: "web_fetch".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }],
            json_output: Some(JsonOutput {
                name: "verdict".into(),
                schema: json!({"type": "object"}),
            }),
            ..ChatRequest::default()
        };
        let b = body(&request, "gpt");
        assert_eq!(
            b["messages"][1]["tool_calls"][0]["function"]["arguments"],
            json!("{\"url\":\"http://x\"}")
        );
        assert_eq!(b["messages"][1]["content"], Value::Null);
        assert_eq!(
            b["messages"][2],
            json!({"role": "tool", "tool_call_id": "c1", "content": "body"})
        );
        assert_eq!(b["tool_choice"], "auto");
        assert_eq!(b["response_format"]["json_schema"]["name"], "verdict");
    }

    #[test]
    fn string_arguments_are_parsed_and_bad_ones_refused() {
        let answer = json!({"model": "m", "choices": [{"message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "fs_read", "arguments": "{\"path\":\"/x\"}"}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2}});
        let (outcome, usage, _) = parse(&answer).unwrap();
        assert_eq!(
            outcome,
            Outcome::ToolCalls(vec![ToolCall {
                id: "c9".into(),
                name: "fs_read".into(),
                arguments: json!({"path": "/x"})
            }])
        );
        assert_eq!(usage.prompt_tokens, 5);
        let bad = json!({"choices": [{"message": {"tool_calls": [{"function": {"name": "x", "arguments": "{oops"}}]}}]});
        assert!(matches!(parse(&bad), Err(LlmError::BadArguments { .. })));
        assert!(matches!(
            parse(&json!({"choices": []})),
            Err(LlmError::Malformed { .. })
        ));
    }

    #[test]
    fn errors_are_typed_from_their_code() {
        let body = r#"{"error":{"message":"The model `gpt-9` does not exist","type":"invalid_request_error","code":"model_not_found"}}"#;
        assert!(matches!(
            error(404, body, "gpt-9"),
            LlmError::ModelNotFound { .. }
        ));
        let body = r#"{"error":{"message":"too long","code":"context_length_exceeded"}}"#;
        assert!(matches!(
            error(400, body, "m"),
            LlmError::ContextTooLong { .. }
        ));
        assert_eq!(
            error(400, r#"{"error":{"message":"bad"}}"#, "m").to_string(),
            "openai answered HTTP 400: bad"
        );
    }
}
