//! Each provider against the fake LLM server over real HTTP: tool-call round trips in the
//! provider's own format, text, JSON-Schema output, and every error path.

use std::collections::BTreeMap;
use std::num::NonZero;
use std::time::{Duration, Instant};

use metnos_kit::config::{LlmProvider, LlmTierConfig};
use metnos_llm::fake::{FakeLlm, Reply};
use metnos_llm::{
    ChatRequest, JsonOutput, LlmError, Message, Outcome, Provider, RetryPolicy, Tier, Tiers,
    ToolDef,
};
use serde_json::{Value, json};

const PROVIDERS: [LlmProvider; 3] = [
    LlmProvider::Ollama,
    LlmProvider::Openai,
    LlmProvider::Anthropic,
];

fn config(provider: LlmProvider, base_url: &str, model: &str) -> LlmTierConfig {
    LlmTierConfig {
        provider,
        model: model.to_owned(),
        base_url: base_url.to_owned(),
        think: false,
        timeout_seconds: NonZero::new(5).unwrap(),
        // Anthropic needs a key variable; HOME is always set where tests run.
        api_key_env: if provider == LlmProvider::Anthropic {
            "HOME".to_owned()
        } else {
            String::new()
        },
        online: None,
    }
}

fn quick() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        base: Duration::from_millis(10),
        cap: Duration::from_secs(5),
    }
}

fn provider(kind: LlmProvider, fake: &FakeLlm) -> Provider {
    Provider::from_config("fast", &config(kind, fake.url(), "m1"))
        .unwrap()
        .with_retry(quick())
}

fn fs_read() -> ToolDef {
    ToolDef {
        name: "fs_read".into(),
        description: "read a file".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }
}

/// The tool definitions in the body, in the provider's own format.
fn sent_tool(kind: LlmProvider, body: &Value) -> (String, Value) {
    let tool = &body["tools"][0];
    match kind {
        LlmProvider::Anthropic => (
            tool["name"].as_str().unwrap().into(),
            tool["input_schema"].clone(),
        ),
        _ => {
            assert_eq!(tool["type"], "function");
            (
                tool["function"]["name"].as_str().unwrap().into(),
                tool["function"]["parameters"].clone(),
            )
        }
    }
}

#[tokio::test]
async fn a_tool_call_round_trip_in_each_providers_format() {
    for kind in PROVIDERS {
        let fake = FakeLlm::start().await;
        fake.push(Reply::ToolCalls(vec![(
            "fs_read".into(),
            json!({"path": "/tmp/diary.md"}),
        )]));
        fake.push(Reply::Text("the last three lines are …".into()));
        let llm = provider(kind, &fake);

        let mut request = ChatRequest {
            system: Some("you are Metnos".into()),
            messages: vec![Message::User("read the diary".into())],
            tools: vec![fs_read()],
            ..ChatRequest::default()
        };
        let first = llm.chat("fast", &request).await.unwrap();
        let Outcome::ToolCalls(calls) = &first.outcome else {
            panic!("{kind:?}: {:?}", first.outcome)
        };
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "fs_read");
        assert_eq!(calls[0].arguments, json!({"path": "/tmp/diary.md"}));
        assert_eq!(first.usage.prompt_tokens, 10, "{kind:?}");
        assert_eq!(first.usage.completion_tokens, 5, "{kind:?}");

        request.messages.push(Message::Assistant {
            text: String::new(),
            tool_calls: calls.clone(),
        });
        request.messages.push(Message::ToolResult {
            call_id: calls[0].id.clone(),
            name: "fs_read".into(),
            content: r#"{"ok":true,"content":"a\nb\nc"}"#.into(),
        });
        let second = llm.chat("fast", &request).await.unwrap();
        assert_eq!(
            second.outcome,
            Outcome::Text("the last three lines are …".into())
        );

        let received = fake.received();
        assert_eq!(received.len(), 2);
        let (name, schema) = sent_tool(kind, &received[0].body);
        assert_eq!(name, "fs_read");
        assert_eq!(
            schema,
            fs_read().parameters,
            "{kind:?}: the schema goes verbatim"
        );
        assert_eq!(received[0].body["model"], "m1");
        // The tool result went back in the provider's own shape.
        let body = &received[1].body;
        match kind {
            LlmProvider::Ollama => {
                assert_eq!(received[1].path, "/api/chat");
                assert_eq!(body["messages"][3]["role"], "tool");
                assert_eq!(body["messages"][3]["tool_name"], "fs_read");
            }
            LlmProvider::Openai => {
                assert_eq!(received[1].path, "/v1/chat/completions");
                assert_eq!(body["messages"][3]["role"], "tool");
                assert_eq!(body["messages"][3]["tool_call_id"], calls[0].id.as_str());
            }
            LlmProvider::Anthropic => {
                assert_eq!(received[1].path, "/v1/messages");
                let block = &body["messages"][2]["content"][0];
                assert_eq!(block["type"], "tool_result");
                assert_eq!(block["tool_use_id"], calls[0].id.as_str());
                assert_eq!(received[1].headers["anthropic-version"], "2023-06-01");
            }
        }
    }
}

#[tokio::test]
async fn json_schema_output_in_each_providers_format() {
    let schema = json!({"type": "object", "properties": {"score": {"type": "number"}, "rationale": {"type": "string"}}, "required": ["score", "rationale"]});
    for kind in PROVIDERS {
        let fake = FakeLlm::start().await;
        fake.push(Reply::Json(
            json!({"score": 0.8, "rationale": "matches the intent"}),
        ));
        let request = ChatRequest {
            messages: vec![Message::User("score this call".into())],
            json_output: Some(JsonOutput {
                name: "verdict".into(),
                schema: schema.clone(),
            }),
            ..ChatRequest::default()
        };
        let response = provider(kind, &fake)
            .chat("middle", &request)
            .await
            .unwrap();
        assert_eq!(
            response.json(),
            Some(json!({"score": 0.8, "rationale": "matches the intent"})),
            "{kind:?}"
        );
        let body = &fake.received()[0].body;
        match kind {
            LlmProvider::Ollama => assert_eq!(body["format"], schema),
            LlmProvider::Openai => {
                assert_eq!(body["response_format"]["type"], "json_schema");
                assert_eq!(body["response_format"]["json_schema"]["schema"], schema);
            }
            LlmProvider::Anthropic => {
                assert_eq!(
                    body["tool_choice"],
                    json!({"type": "tool", "name": "verdict"})
                );
                assert_eq!(body["tools"][0]["input_schema"], schema);
            }
        }
    }
}

#[tokio::test]
async fn an_unreachable_server_is_named_after_bounded_retries() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    for kind in PROVIDERS {
        let llm = Provider::from_config("fast", &config(kind, &url, "m"))
            .unwrap()
            .with_retry(quick());
        let err = llm.chat("fast", &ChatRequest::default()).await.unwrap_err();
        assert!(matches!(err, LlmError::Unreachable { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains(&format!("unreachable at {url}")), "{text}");
        assert!(text.contains("connection refused"), "{text}");
    }
}

#[tokio::test]
async fn a_server_error_then_success_is_retried() {
    for kind in PROVIDERS {
        let fake = FakeLlm::start().await;
        fake.push(Reply::Error {
            status: 500,
            body: r#"{"error":"warming up"}"#.into(),
            retry_after: None,
        });
        fake.push(Reply::Error {
            status: 503,
            body: "overloaded".into(),
            retry_after: None,
        });
        fake.push(Reply::Text("ok".into()));
        let response = provider(kind, &fake)
            .chat("fast", &ChatRequest::default())
            .await
            .unwrap();
        assert_eq!(response.outcome, Outcome::Text("ok".into()));
        assert_eq!(fake.received().len(), 3, "{kind:?}");
    }
}

#[tokio::test]
async fn rate_limits_honour_retry_after() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::Error {
        status: 429,
        body: r#"{"error":{"message":"slow down"}}"#.into(),
        retry_after: Some(1),
    });
    fake.push(Reply::Text("ok".into()));
    let started = Instant::now();
    let response = provider(LlmProvider::Openai, &fake)
        .chat("fast", &ChatRequest::default())
        .await
        .unwrap();
    assert_eq!(response.outcome, Outcome::Text("ok".into()));
    // The backoff here is 10 ms; waiting a full second means Retry-After was obeyed.
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn client_errors_are_not_retried_and_retries_are_bounded() {
    for kind in PROVIDERS {
        let fake = FakeLlm::start().await;
        fake.push(Reply::Error {
            status: 400,
            body: r#"{"error":{"message":"bad tools"}}"#.into(),
            retry_after: None,
        });
        let err = provider(kind, &fake)
            .chat("fast", &ChatRequest::default())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Http { status: 400, .. }), "{err}");
        assert!(err.to_string().contains("bad tools"), "{err}");
        assert_eq!(fake.received().len(), 1, "{kind:?}: a 400 is not retried");

        let fake = FakeLlm::start().await;
        fake.always(Reply::Error {
            status: 502,
            body: "bad gateway".into(),
            retry_after: None,
        });
        let err = provider(kind, &fake)
            .chat("fast", &ChatRequest::default())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Http { status: 502, .. }), "{err}");
        assert_eq!(
            fake.received().len(),
            4,
            "{kind:?}: one try and three retries"
        );
    }
}

#[tokio::test]
async fn malformed_answers_and_missing_models_are_typed() {
    for kind in PROVIDERS {
        let fake = FakeLlm::start().await;
        fake.push(Reply::Malformed("{not json".into()));
        let err = provider(kind, &fake)
            .chat("fast", &ChatRequest::default())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Malformed { .. }), "{kind:?}: {err}");

        let fake = FakeLlm::start().await;
        fake.push(Reply::Malformed(r#"{"unexpected": "shape"}"#.into()));
        let err = provider(kind, &fake)
            .chat("fast", &ChatRequest::default())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Malformed { .. }), "{kind:?}: {err}");
    }
    let fake = FakeLlm::start().await;
    fake.push(Reply::Error {
        status: 404,
        body: r#"{"error":"model \"qwen9:1b\" not found, try pulling it first"}"#.into(),
        retry_after: None,
    });
    let llm = Provider::from_config("fast", &config(LlmProvider::Ollama, fake.url(), "qwen9:1b"))
        .unwrap();
    let err = llm.chat("fast", &ChatRequest::default()).await.unwrap_err();
    assert!(matches!(err, LlmError::ModelNotFound { .. }), "{err}");
    assert!(err.to_string().contains("qwen9:1b"), "{err}");
}

#[tokio::test]
async fn a_slow_answer_times_out_without_retrying() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::Delayed(
        Duration::from_secs(3),
        Box::new(Reply::Text("late".into())),
    ));
    let mut cfg = config(LlmProvider::Ollama, fake.url(), "m");
    cfg.timeout_seconds = NonZero::new(1).unwrap();
    let llm = Provider::from_config("fast", &cfg)
        .unwrap()
        .with_retry(quick());
    let err = llm.chat("fast", &ChatRequest::default()).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err}");
    assert_eq!(err.to_string(), "ollama did not answer within 1 s");
    assert_eq!(fake.received().len(), 1);
}

#[tokio::test]
async fn api_keys_travel_in_headers_and_never_in_errors() {
    let fake = FakeLlm::start().await;
    fake.always(Reply::Error {
        status: 401,
        body: r#"{"error":{"message":"invalid key"}}"#.into(),
        retry_after: None,
    });
    let openai = Provider::from_config("fast", &config(LlmProvider::Openai, fake.url(), "gpt"))
        .unwrap()
        .with_api_key("sk-secret-123");
    let err = openai
        .chat("fast", &ChatRequest::default())
        .await
        .unwrap_err();
    assert!(!err.to_string().contains("sk-secret-123"), "{err}");
    assert!(
        !format!("{openai:?}").contains("sk-secret-123"),
        "Debug prints the key"
    );
    assert_eq!(
        fake.received()[0].headers["authorization"],
        "Bearer sk-secret-123"
    );
    let anthropic = Provider::from_config(
        "fast",
        &config(LlmProvider::Anthropic, fake.url(), "claude"),
    )
    .unwrap()
    .with_api_key("ak-secret-456");
    let _ = anthropic
        .chat("fast", &ChatRequest::default())
        .await
        .unwrap_err();
    assert_eq!(fake.received()[1].headers["x-api-key"], "ak-secret-456");

    let mut cfg = config(LlmProvider::Openai, fake.url(), "gpt");
    cfg.api_key_env = "METNOS_SURELY_UNSET_KEY_VARIABLE".into();
    let err = Provider::from_config("wise", &cfg).unwrap_err().to_string();
    assert!(
        err.contains(
            "runtime.llm.wise.api_key_env names METNOS_SURELY_UNSET_KEY_VARIABLE, which is not set"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn missing_tiers_alias_down_and_each_tier_has_its_preamble() {
    let fake = FakeLlm::start().await;
    fake.always(Reply::Text("ok".into()));
    let mut llm = BTreeMap::new();
    llm.insert(
        "fast".to_owned(),
        config(LlmProvider::Ollama, fake.url(), "small"),
    );
    let tiers = Tiers::from_config(&llm).unwrap();
    assert_eq!(tiers.resolve(Tier::Middle), Tier::Fast);
    assert_eq!(tiers.resolve(Tier::Wise), Tier::Fast);
    for tier in Tier::ALL {
        let request = ChatRequest {
            system: Some("be Metnos".into()),
            ..ChatRequest::default()
        };
        tiers.chat(tier, &request).await.unwrap();
    }
    let received = fake.received();
    assert!(received.iter().all(|r| r.body["model"] == "small"));
    let systems: Vec<String> = received
        .iter()
        .map(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(systems[0].starts_with(Tier::Fast.preamble()) && systems[0].ends_with("be Metnos"));
    assert!(systems[1].starts_with(Tier::Middle.preamble()));
    assert!(systems[2].starts_with(Tier::Wise.preamble()));

    llm.insert(
        "wise".to_owned(),
        config(LlmProvider::Ollama, fake.url(), "big"),
    );
    let tiers = Tiers::from_config(&llm).unwrap();
    assert_eq!(
        tiers.resolve(Tier::Middle),
        Tier::Fast,
        "middle aliases down, not up"
    );
    assert_eq!(tiers.provider(Tier::Wise).model(), "big");
    llm.remove("fast");
    assert!(
        Tiers::from_config(&llm)
            .unwrap_err()
            .to_string()
            .contains("fast tier is required")
    );
}

#[test]
fn an_online_provider_is_named_by_its_host_and_a_home_one_is_local() {
    use LlmProvider::{Anthropic, Ollama, Openai};
    let host = |provider, base_url: &str| {
        Provider::from_config("fast", &config(provider, base_url, "m"))
            .unwrap()
            .online_host()
    };
    // Anthropic is always online (an outgoing cost), wherever it is reached.
    assert_eq!(host(Anthropic, "").as_deref(), Some("api.anthropic.com"));
    assert_eq!(
        host(Anthropic, "http://127.0.0.1:9").as_deref(),
        Some("127.0.0.1")
    );
    // An OpenAI-compatible server is online unless it is on this machine or the home net.
    assert_eq!(
        host(Openai, "https://API.openai.com/v1/").as_deref(),
        Some("api.openai.com")
    );
    for home in [
        "",
        "http://127.0.0.1:8080",
        "http://[::1]:8080",
        "http://localhost:8080",
        "http://192.168.1.20:8000",
        "http://10.0.0.5",
        "http://gpu-box.local:8000",
        "http://[fd00::5]:8000",
    ] {
        assert_eq!(host(Openai, home), None, "{home}");
    }
    // Ollama on this machine or the home network is llm:local (a compose service name
    // too); a cloud one is online.
    for home in [
        "",
        "http://ollama:11434",
        "http://gpu.lan:11434",
        "http://192.168.1.9:11434",
    ] {
        assert_eq!(host(Ollama, home), None, "{home}");
    }
    assert_eq!(
        host(Ollama, "https://ollama.example.com").as_deref(),
        Some("ollama.example.com")
    );
    // The config's word wins: a proxy at home that forwards to a paid provider.
    let mut proxy = config(Openai, "http://litellm.ai.svc.cluster.local:4000", "m");
    assert_eq!(
        Provider::from_config("fast", &proxy).unwrap().online_host(),
        None
    );
    proxy.online = Some(true);
    assert_eq!(
        Provider::from_config("fast", &proxy)
            .unwrap()
            .online_host()
            .as_deref(),
        Some("litellm.ai.svc.cluster.local")
    );
    let mut own = config(Anthropic, "http://127.0.0.1:9", "m");
    own.online = Some(false);
    assert_eq!(
        Provider::from_config("fast", &own).unwrap().online_host(),
        None
    );
}

#[test]
fn a_local_tier_answers_instead_of_an_online_one() {
    let mut llm = BTreeMap::new();
    llm.insert("fast".to_owned(), config(LlmProvider::Ollama, "", "small"));
    llm.insert("wise".to_owned(), config(LlmProvider::Anthropic, "", "big"));
    let tiers = Tiers::from_config(&llm).unwrap();
    assert_eq!(
        tiers.online_host(Tier::Wise).as_deref(),
        Some("api.anthropic.com")
    );
    assert_eq!(tiers.online_host(Tier::Fast), None);
    assert_eq!(tiers.local_instead_of(Tier::Wise), Some(Tier::Fast));
    let mut online_only = BTreeMap::new();
    online_only.insert("fast".to_owned(), config(LlmProvider::Anthropic, "", "big"));
    let tiers = Tiers::from_config(&online_only).unwrap();
    assert_eq!(tiers.local_instead_of(Tier::Fast), None);
    assert_eq!(tiers.local_instead_of(Tier::Wise), None);
}
