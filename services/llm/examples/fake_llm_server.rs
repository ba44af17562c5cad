//! The scripted fake LLM as a process, for smoke tests of a deployed stack: every chat
//! first asks for `time_now` (UTC), then, once a tool result is in the conversation,
//! answers "It is <the tool's content>". Prints its URL and serves until killed.
//!
//! cargo run -p metnos-llm --features fake --example fake_llm_server

use metnos_llm::fake::{FakeLlm, Reply};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let fake = FakeLlm::start().await;
    fake.always(Reply::from_request(|request| {
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        match messages.iter().rev().find(|m| m["role"] == "tool") {
            Some(tool) => {
                let observation: serde_json::Value =
                    serde_json::from_str(tool["content"].as_str().unwrap_or("{}"))
                        .unwrap_or_default();
                Reply::Text(format!(
                    "It is {}",
                    observation["content"].as_str().unwrap_or("unknown")
                ))
            }
            None => Reply::ToolCalls(vec![("time_now".into(), json!({"timezone": "UTC"}))]),
        }
    }));
    println!("{}", fake.url());
    std::future::pending::<()>().await;
}
