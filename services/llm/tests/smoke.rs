//! Opt-in smoke test against a real LLM server, through the same code path as production:
//! a chat, a JSON-Schema answer and a tool call. Run it with
//!
//! ```sh
//! METNOS_LLM_SMOKE_URL=http://127.0.0.1:8080 METNOS_LLM_SMOKE_PROVIDER=openai \
//! METNOS_LLM_SMOKE_MODEL=any cargo nextest run -p metnos-llm --run-ignored only -E 'test(smoke)'
//! ```
//!
//! (`METNOS_LLM_SMOKE_PROVIDER=ollama` and a pulled model name for Ollama.) The README says
//! how to start llama.cpp's server or Ollama for it.

use std::num::NonZero;
use std::time::Duration;

use metnos_kit::config::{LlmProvider, LlmTierConfig};
use metnos_llm::{ChatRequest, JsonOutput, Message, Outcome, Provider, ToolDef};
use serde_json::json;

fn provider() -> Provider {
    let url = std::env::var("METNOS_LLM_SMOKE_URL")
        .expect("set METNOS_LLM_SMOKE_URL to a running OpenAI-compatible or Ollama server");
    let provider = match std::env::var("METNOS_LLM_SMOKE_PROVIDER").as_deref() {
        Ok("ollama") => LlmProvider::Ollama,
        Ok("openai") | Err(_) => LlmProvider::Openai,
        Ok(other) => panic!("METNOS_LLM_SMOKE_PROVIDER must be openai or ollama, not {other}"),
    };
    let model = std::env::var("METNOS_LLM_SMOKE_MODEL").unwrap_or_else(|_| "default".to_owned());
    Provider::from_config(
        "fast",
        &LlmTierConfig {
            provider,
            model,
            base_url: url,
            think: false,
            timeout_seconds: NonZero::new(300).unwrap(),
            api_key_env: String::new(),
            online: None,
        },
    )
    .expect("a valid smoke configuration")
}

#[tokio::test]
#[ignore = "opt-in: needs a real LLM server named by METNOS_LLM_SMOKE_URL"]
async fn smoke_a_real_server_chats_answers_json_and_calls_a_tool() {
    let llm = provider();
    let chat = ChatRequest {
        messages: vec![Message::User("Say hello in one word.".into())],
        max_tokens: Some(16),
        ..ChatRequest::default()
    };
    let answer = llm.chat("fast", &chat).await.expect("a plain chat");
    let Outcome::Text(text) = &answer.outcome else {
        panic!("expected text, got {:?}", answer.outcome)
    };
    assert!(!text.trim().is_empty());
    assert!(answer.latency > Duration::ZERO);

    let json_request = ChatRequest {
        messages: vec![Message::User(
            "What is the capital of Italy? Answer in JSON.".into(),
        )],
        json_output: Some(JsonOutput {
            name: "answer".into(),
            schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }),
        max_tokens: Some(64),
        ..ChatRequest::default()
    };
    let answer = llm
        .chat("fast", &json_request)
        .await
        .expect("a JSON-Schema answer");
    let value = answer.json().expect("the answer is JSON");
    assert!(value["city"].is_string(), "{value}");

    let tool_request = ChatRequest {
        messages: vec![Message::User(
            "What time is it in Rome? Use the time_now tool.".into(),
        )],
        tools: vec![ToolDef {
            name: "time_now".into(),
            description: "The current time in an IANA timezone".into(),
            parameters: json!({"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}),
        }],
        max_tokens: Some(128),
        ..ChatRequest::default()
    };
    let answer = llm
        .chat("fast", &tool_request)
        .await
        .expect("a tool-calling request");
    match answer.outcome {
        Outcome::ToolCalls(calls) => assert_eq!(calls[0].name, "time_now"),
        Outcome::Text(text) => {
            panic!("the model answered in text instead of calling the tool: {text}")
        }
    }
}
