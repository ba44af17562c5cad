//! Anthropic Messages `/v1/messages`: tools as `tool_use` / `tool_result` blocks. JSON
//! output is asked for the native way: a single tool whose input schema is the schema,
//! which the model is made to call.

use serde_json::{Value, json};

use super::{arguments, error_message, malformed, tool_call};
use crate::error::LlmError;
use crate::types::{ChatRequest, Message, Outcome, Usage};

pub const PROVIDER: &str = "anthropic";
pub const PATH: &str = "/v1/messages";
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const VERSION: &str = "2023-06-01";

/// Anthropic requires max_tokens; this is used when the request gives none.
const DEFAULT_MAX_TOKENS: u32 = 1024;
const THINKING_BUDGET: u32 = 1024;

pub fn body(request: &ChatRequest, model: &str, think: bool) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    for message in &request.messages {
        match message {
            Message::User(text) => messages.push(json!({"role": "user", "content": text})),
            Message::Assistant { text, tool_calls } => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for c in tool_calls {
                    blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}));
                }
                messages.push(json!({"role": "assistant", "content": blocks}));
            }
            Message::ToolResult {
                call_id, content, ..
            } => {
                let block =
                    json!({"type": "tool_result", "tool_use_id": call_id, "content": content});
                // Results of one turn's calls go together in one user message.
                match messages.last_mut() {
                    Some(last)
                        if last["role"] == "user"
                            && last["content"]
                                .as_array()
                                .is_some_and(|c| c.iter().all(|b| b["type"] == "tool_result")) =>
                    {
                        last["content"].as_array_mut().expect("checked").push(block);
                    }
                    _ => messages.push(json!({"role": "user", "content": [block]})),
                }
            }
        }
    }
    let think = request.think.unwrap_or(think);
    let mut max_tokens = request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    let mut body = json!({"model": model, "messages": messages});
    if let Some(system) = &request.system {
        body["system"] = json!(system);
    }
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(
            |t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}),
        )
        .collect();
    if let Some(output) = &request.json_output {
        tools.push(json!({"name": output.name, "description": "Give the answer in this form.", "input_schema": output.schema}));
        body["tool_choice"] = json!({"type": "tool", "name": output.name});
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    if think && request.json_output.is_none() {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": THINKING_BUDGET});
        max_tokens = max_tokens.max(THINKING_BUDGET * 2);
    } else if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    body["max_tokens"] = json!(max_tokens);
    body
}

/// Parses an answer; `json_output` names the forced tool whose input is the JSON answer.
pub fn parse(
    body: &Value,
    json_output: Option<&str>,
) -> Result<(Outcome, Usage, String), LlmError> {
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed(PROVIDER, "no `content` blocks in the answer"))?;
    let usage = Usage {
        prompt_tokens: body
            .pointer("/usage/input_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        completion_tokens: body
            .pointer("/usage/output_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    };
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut calls = Vec::new();
    let mut text = String::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("tool_use") => {
                let name = block
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| malformed(PROVIDER, "tool_use without a name"))?;
                let id = block
                    .get("id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| malformed(PROVIDER, "tool_use without an id"))?;
                let input = arguments(PROVIDER, name, block.get("input").unwrap_or(&json!({})))?;
                if json_output == Some(name) {
                    return Ok((Outcome::Text(input.to_string()), usage, model));
                }
                calls.push(tool_call(id.to_owned(), name.to_owned(), input));
            }
            Some("text") => text.push_str(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ),
            // Thinking blocks are the model's own; not part of the answer.
            _ => {}
        }
    }
    if !calls.is_empty() {
        return Ok((Outcome::ToolCalls(calls), usage, model));
    }
    if json_output.is_some() {
        return Err(malformed(
            PROVIDER,
            "the answer did not use the output tool",
        ));
    }
    Ok((Outcome::Text(text), usage, model))
}

pub fn error(status: u16, body: &str, model: &str) -> LlmError {
    let message = error_message(body);
    let kind = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/type")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default();
    if kind == "not_found_error" && message.contains("model") {
        return LlmError::ModelNotFound {
            provider: PROVIDER,
            model: model.to_owned(),
            message,
        };
    }
    if message.contains("prompt is too long") || message.contains("context window") {
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
    fn tool_results_of_one_turn_share_one_user_message() {
        let request = ChatRequest {
            system: Some("sys".into()),
            messages: vec![
                Message::User("two files".into()),
                Message::Assistant {
                    text: "reading".into(),
                    tool_calls: vec![
                        ToolCall {
                            id: "t1".into(),
                            name: "fs_read".into(),
                            arguments: json!({"path": "/a"}),
                        },
                        ToolCall {
                            id: "t2".into(),
                            name: "fs_read".into(),
                            arguments: json!({"path": "/b"}),
                        },
                    ],
                },
                Message::ToolResult {
                    call_id: "t1".into(),
                    name: "fs_read".into(),
                    content: "A".into(),
                },
                Message::ToolResult {
                    call_id: "t2".into(),
                    name: "fs_read".into(),
                    content: "B".into(),
                },
            ],
            tools: vec![ToolDef {
                name: "fs_read".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }],
            ..ChatRequest::default()
        };
        let b = body(&request, "claude", false);
        assert_eq!(b["system"], "sys");
        assert_eq!(b["max_tokens"], 1024);
        assert_eq!(b["tools"][0]["input_schema"], json!({"type": "object"}));
        assert_eq!(b["messages"].as_array().unwrap().len(), 3);
        assert_eq!(
            b["messages"][1]["content"][1],
            json!({"type": "tool_use", "id": "t1", "name": "fs_read", "input": {"path": "/a"}})
        );
        assert_eq!(b["messages"][2]["content"].as_array().unwrap().len(), 2);
        assert_eq!(b["messages"][2]["content"][1]["tool_use_id"], "t2");
    }

    #[test]
    fn json_output_is_a_forced_tool_whose_input_is_the_answer() {
        let request = ChatRequest {
            messages: vec![Message::User("score it".into())],
            json_output: Some(JsonOutput {
                name: "verdict".into(),
                schema: json!({"type": "object"}),
            }),
            ..ChatRequest::default()
        };
        let b = body(&request, "claude", true);
        assert_eq!(b["tool_choice"], json!({"type": "tool", "name": "verdict"}));
        assert!(
            b.get("thinking").is_none(),
            "forced tool use and thinking do not mix"
        );
        let answer = json!({"model": "claude", "content": [{"type": "tool_use", "id": "x", "name": "verdict", "input": {"score": 0.8}}], "usage": {"input_tokens": 9, "output_tokens": 4}});
        let (outcome, usage, _) = parse(&answer, Some("verdict")).unwrap();
        assert_eq!(outcome, Outcome::Text("{\"score\":0.8}".into()));
        assert_eq!(usage.completion_tokens, 4);
    }

    #[test]
    fn thinking_raises_max_tokens_and_is_not_part_of_the_answer() {
        let request = ChatRequest {
            messages: vec![Message::User("hi".into())],
            ..ChatRequest::default()
        };
        let b = body(&request, "claude", true);
        assert_eq!(b["thinking"]["budget_tokens"], 1024);
        assert_eq!(b["max_tokens"], 2048);
        let answer = json!({"content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "hello"}]});
        assert_eq!(
            parse(&answer, None).unwrap().0,
            Outcome::Text("hello".into())
        );
    }

    #[test]
    fn errors_are_typed() {
        let body =
            r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-9"}}"#;
        assert!(matches!(
            error(404, body, "claude-9"),
            LlmError::ModelNotFound { .. }
        ));
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 300000 tokens > 200000 maximum"}}"#;
        assert!(matches!(
            error(400, body, "c"),
            LlmError::ContextTooLong { .. }
        ));
        assert!(matches!(
            parse(
                &json!({"content": [{"type": "tool_use", "name": "x", "id": "1", "input": "no"}]}),
                None
            ),
            Err(LlmError::BadArguments { .. })
        ));
    }
}
