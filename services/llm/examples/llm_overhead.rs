//! Client overhead per LLM call: a 20-tool request against the fake server answering at
//! once, so what is measured is request building, HTTP on loopback and parsing — not a
//! model. Reports p50/p99 latency and heap allocations per call.
//!
//! cargo run --release -p metnos-llm --features fake --example llm_overhead -- [--calls N]

use std::alloc::System;
use std::num::NonZero;
use std::time::Instant;

use hdrhistogram::Histogram;
use metnos_kit::config::{LlmProvider, LlmTierConfig};
use metnos_llm::fake::{FakeLlm, Reply};
use metnos_llm::{ChatRequest, Message, Provider, ToolDef};
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn main() {
    let calls: usize = std::env::args()
        .skip_while(|a| a != "--calls")
        .nth(1)
        .map_or(5_000, |v| v.parse().expect("--calls takes a number"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let fake = FakeLlm::start().await;
        fake.keep_requests(false);
        fake.always(Reply::ToolCalls(vec![("fs_read".into(), json!({"path": "/tmp/x"}))]));
        let tools: Vec<ToolDef> = (0..20)
            .map(|i| ToolDef {
                name: format!("tool_{i}"),
                description: format!("does thing number {i} with a file or a URL"),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}, "max_bytes": {"type": "integer"}}, "required": ["path"]}),
            })
            .collect();
        let request = ChatRequest {
            system: Some("You are Metnos. Use the tools.".into()),
            messages: vec![Message::User("read /tmp/x and tell me its last line".into())],
            tools,
            ..ChatRequest::default()
        };
        for provider in [LlmProvider::Ollama, LlmProvider::Openai, LlmProvider::Anthropic] {
            let llm = Provider::from_config(
                "fast",
                &LlmTierConfig {
                    provider,
                    model: "m".into(),
                    base_url: fake.url().to_owned(),
                    think: false,
                    timeout_seconds: NonZero::new(30).unwrap(),
                    api_key_env: if provider == LlmProvider::Anthropic { "HOME".into() } else { String::new() },
                    online: None,
                },
            )
            .unwrap();
            for _ in 0..500 {
                llm.chat("fast", &request).await.unwrap();
            }
            let mut histogram = Histogram::<u64>::new(3).unwrap();
            let region = Region::new(GLOBAL);
            for _ in 0..calls {
                let t = Instant::now();
                let response = llm.chat("fast", &request).await.unwrap();
                histogram.record(t.elapsed().as_nanos() as u64).unwrap();
                std::hint::black_box(response);
            }
            let stats = region.change();
            println!(
                "{:<10} 20 tools  p50={:>6.1}µs p99={:>6.1}µs  allocations/call={:>6.0} (client and fake server together) bytes/call={:>7.0}",
                format!("{provider:?}"),
                histogram.value_at_quantile(0.5) as f64 / 1000.0,
                histogram.value_at_quantile(0.99) as f64 / 1000.0,
                stats.allocations as f64 / calls as f64,
                stats.bytes_allocated as f64 / calls as f64,
            );
        }
    });
}
