//! Every LLM call is a span with provider, model, tier, token counts and latency — and
//! never the prompt or the answer.

use std::num::NonZero;
use std::sync::{Arc, Mutex};

use metnos_kit::config::{LlmProvider, LlmTierConfig};
use metnos_llm::fake::{FakeLlm, Reply};
use metnos_llm::{ChatRequest, Message, Provider};
use tracing::field::{Field, Visit};
use tracing::instrument::WithSubscriber;
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

/// Every span field and event field seen: (span or event name, field, value).
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(String, String, String)>>>);

struct Collect<'a>(&'a Capture, String);

impl Visit for Collect<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.0.lock().unwrap().push((
            self.1.clone(),
            field.name().to_owned(),
            format!("{value:?}"),
        ));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .0
            .lock()
            .unwrap()
            .push((self.1.clone(), field.name().to_owned(), value.to_owned()));
    }
}

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S>
    for Capture
{
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        attrs.record(&mut Collect(self, attrs.metadata().name().to_owned()));
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let name = ctx
            .span(id)
            .map(|s| s.name().to_owned())
            .unwrap_or_default();
        values.record(&mut Collect(self, name));
    }
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        event.record(&mut Collect(self, "event".to_owned()));
    }
}

#[tokio::test]
async fn a_call_is_a_span_with_names_and_counts_and_no_text() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::Text("SECRET_ANSWER_TEXT".into()));
    let llm = Provider::from_config(
        "fast",
        &LlmTierConfig {
            provider: LlmProvider::Openai,
            model: "qwen3:8b".into(),
            base_url: fake.url().to_owned(),
            think: false,
            timeout_seconds: NonZero::new(5).unwrap(),
            api_key_env: String::new(),
            online: None,
        },
    )
    .unwrap();
    let capture = Capture::default();
    let subscriber = Registry::default().with(capture.clone());
    let request = ChatRequest {
        system: Some("SECRET_SYSTEM_TEXT".into()),
        messages: vec![Message::User("SECRET_PROMPT_TEXT".into())],
        ..ChatRequest::default()
    };
    llm.chat("middle", &request)
        .with_subscriber(subscriber)
        .await
        .unwrap();

    let seen = capture.0.lock().unwrap().clone();
    let field = |name: &str| {
        seen.iter()
            .find(|(span, field, _)| span == "llm.chat" && field == name)
            .map(|(_, _, value)| value.clone())
            .unwrap_or_else(|| panic!("no {name} on llm.chat in {seen:?}"))
    };
    assert_eq!(field("llm.provider"), "openai");
    assert_eq!(field("llm.model"), "qwen3:8b");
    assert_eq!(field("llm.tier"), "middle");
    assert_eq!(field("llm.prompt_tokens"), "10");
    assert_eq!(field("llm.completion_tokens"), "5");
    assert!(field("llm.latency_ms").parse::<u64>().is_ok());
    for (span, name, value) in &seen {
        assert!(
            !value.contains("SECRET_"),
            "{span}.{name} carries text: {value}"
        );
    }
}
