//! Ollama `/api/chat` with native tools, `think`, and `format` for JSON-Schema output.

use serde_json::{Value, json};

use super::{arguments, error_message, made_up_id, malformed, tool_call};
use crate::error::LlmError;
use crate::types::{ChatRequest, Message, Outcome, Usage};

pub const PROVIDER: &str = "ollama";
pub const PATH: &str = "/api/chat";
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:11434";

pub fn body(request: &ChatRequest, model: &str, think: bool) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        messages.push(match message {
            Message::User(text) => json!({"role": "user", "content": text}),
            Message::Assistant { text, tool_calls } => {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .map(|c| json!({"function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
                json!({"role": "assistant", "content": text, "tool_calls": calls})
            }
            Message::ToolResult { name, content, .. } => {
                json!({"role": "tool", "content": content, "tool_name": name})
            }
        });
    }
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": false,
        "think": request.think.unwrap_or(think),
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect();
    }
    if let Some(output) = &request.json_output {
        body["format"] = output.schema.clone();
    }
    let mut options = serde_json::Map::new();
    if let Some(t) = request.temperature {
        options.insert("temperature".into(), json!(t));
    }
    if let Some(n) = request.max_tokens {
        options.insert("num_predict".into(), json!(n));
    }
    if !options.is_empty() {
        body["options"] = Value::Object(options);
    }
    body
}

pub fn parse(body: &Value) -> Result<(Outcome, Usage, String), LlmError> {
    let message = body
        .get("message")
        .ok_or_else(|| malformed(PROVIDER, "no `message` in the answer"))?;
    let usage = Usage {
        prompt_tokens: body
            .get("prompt_eval_count")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        completion_tokens: body.get("eval_count").and_then(Value::as_u64).unwrap_or(0),
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
            let function = call
                .get("function")
                .ok_or_else(|| malformed(PROVIDER, "tool call without `function`"))?;
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| malformed(PROVIDER, "tool call without a name"))?;
            let args = arguments(
                PROVIDER,
                name,
                function.get("arguments").unwrap_or(&json!({})),
            )?;
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| made_up_id(i), str::to_owned);
            out.push(tool_call(id, name.to_owned(), args));
        }
        return Ok((Outcome::ToolCalls(out), usage, model));
    }
    let text = message
        .get("content")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed(PROVIDER, "message without `content`"))?;
    Ok((Outcome::Text(text.to_owned()), usage, model))
}

pub fn error(status: u16, body: &str, model: &str) -> LlmError {
    let message = error_message(body);
    if status == 404 || message.contains("not found") && message.contains("model") {
        return LlmError::ModelNotFound {
            provider: PROVIDER,
            model: model.to_owned(),
            message,
        };
    }
    if message.contains("context") && (message.contains("length") || message.contains("too long")) {
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
    fn the_request_carries_tools_results_think_and_format() {
        let request = ChatRequest {
            system: Some("be brief".into()),
            messages: vec![
                Message::User("read /tmp/x".into()),
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "call_0".into(),
                        name: "fs_read".into(),
                        arguments: json!({"path": "/tmp/x"}),
                    }],
                },
                Message::ToolResult {
                    call_id: "call_0".into(),
                    name: "fs_read".into(),
                    content: "{\"ok\":true}".into(),
                },
            ],
            tools: vec![ToolDef {
                name: "fs_read".into(),
                description: "read a file".into(),
                parameters: json!({"type": "object"}),
            }],
            json_output: Some(JsonOutput {
                name: "out".into(),
                schema: json!({"type": "object"}),
            }),
            temperature: Some(0.0),
            max_tokens: Some(64),
            think: None,
        };
        let b = body(&request, "qwen3:8b", true);
        assert_eq!(b["model"], "qwen3:8b");
        assert_eq!(b["stream"], false);
        assert_eq!(b["think"], true);
        assert_eq!(
            b["messages"][0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(
            b["messages"][2]["tool_calls"][0]["function"]["arguments"],
            json!({"path": "/tmp/x"})
        );
        assert_eq!(
            b["messages"][3],
            json!({"role": "tool", "content": "{\"ok\":true}", "tool_name": "fs_read"})
        );
        assert_eq!(
            b["tools"][0]["function"]["parameters"],
            json!({"type": "object"})
        );
        assert_eq!(b["format"], json!({"type": "object"}));
        assert_eq!(b["options"], json!({"temperature": 0.0, "num_predict": 64}));
    }

    #[test]
    fn tool_calls_and_text_are_parsed_with_usage() {
        let answer = json!({"model": "qwen3:8b", "message": {"role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": "fs_read", "arguments": {"path": "/tmp/x"}}}]},
            "done": true, "prompt_eval_count": 12, "eval_count": 3});
        let (outcome, usage, model) = parse(&answer).unwrap();
        assert_eq!(
            outcome,
            Outcome::ToolCalls(vec![ToolCall {
                id: "call_0".into(),
                name: "fs_read".into(),
                arguments: json!({"path": "/tmp/x"})
            }])
        );
        assert_eq!(
            usage,
            Usage {
                prompt_tokens: 12,
                completion_tokens: 3
            }
        );
        assert_eq!(model, "qwen3:8b");
        let (outcome, ..) =
            parse(&json!({"message": {"role": "assistant", "content": "hi"}})).unwrap();
        assert_eq!(outcome, Outcome::Text("hi".into()));
    }

    #[test]
    fn bad_answers_and_errors_are_typed() {
        assert!(matches!(
            parse(&json!({"nope": 1})),
            Err(LlmError::Malformed { .. })
        ));
        let bad_args =
            json!({"message": {"tool_calls": [{"function": {"name": "x", "arguments": [1]}}]}});
        assert!(matches!(
            parse(&bad_args),
            Err(LlmError::BadArguments { .. })
        ));
        assert!(matches!(
            error(404, r#"{"error":"model 'qwen9' not found"}"#, "qwen9"),
            LlmError::ModelNotFound { .. }
        ));
        let e = error(500, r#"{"error":"boom"}"#, "m");
        assert_eq!(e.to_string(), "ollama answered HTTP 500: boom");
    }
}
