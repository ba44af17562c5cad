//! Each tier checked against a real HTTP server speaking the providers' model listings:
//! ready, a model not pulled, a server that is not there, a refused key, a variable that
//! is not set, and a hostile server's model names kept off the terminal.

use std::time::Duration;

use metnos_kit::config::{LlmProvider, LlmTierConfig};
use metnos_llm::check::{Finding, Level, check_tier};
use metnos_llm::fake::FakeLlm;

const TIMEOUT: Duration = Duration::from_secs(3);

fn tier(provider: LlmProvider, model: &str, base_url: &str, key_env: &str) -> LlmTierConfig {
    LlmTierConfig {
        provider,
        model: model.to_owned(),
        base_url: base_url.to_owned(),
        think: false,
        timeout_seconds: std::num::NonZero::new(5).unwrap(),
        api_key_env: key_env.to_owned(),
        online: None,
    }
}

#[tokio::test]
async fn a_pulled_model_is_ready_on_each_provider() {
    let fake = FakeLlm::start().await;
    for provider in [LlmProvider::Ollama, LlmProvider::Openai] {
        let check = check_tier("fast", &tier(provider, "qwen3:8b", fake.url(), ""), TIMEOUT).await;
        assert_eq!(check.finding, Finding::Ready, "{provider:?}");
        assert_eq!(check.level(), Level::Ok);
        assert_eq!(check.fix(), None);
    }
    // Ollama's implicit tag: `qwen3` is `qwen3:latest`.
    fake.set_models(&["qwen3:latest"]);
    let check = check_tier(
        "fast",
        &tier(LlmProvider::Ollama, "qwen3", fake.url(), ""),
        TIMEOUT,
    )
    .await;
    assert_eq!(check.finding, Finding::Ready);
    assert!(
        fake.received().is_empty(),
        "a listing is not a chat request"
    );
}

#[tokio::test]
async fn a_model_not_pulled_says_which_ones_there_are_and_how_to_get_it() {
    let fake = FakeLlm::start().await;
    fake.set_models(&["llama3.2:3b", "mistral:7b"]);
    let check = check_tier(
        "fast",
        &tier(LlmProvider::Ollama, "qwen3:8b", fake.url(), ""),
        TIMEOUT,
    )
    .await;
    assert_eq!(check.level(), Level::Fail);
    assert_eq!(
        check.line(),
        format!(
            "fast tier: ollama at {} has no model qwen3:8b (it has llama3.2:3b, mistral:7b)",
            fake.url()
        )
    );
    assert_eq!(
        check.fix().unwrap(),
        "`ollama pull qwen3:8b`, or set [runtime.llm.fast] model to one it has"
    );
    // An OpenAI-compatible server may serve a name it does not list: a warning.
    let check = check_tier(
        "middle",
        &tier(LlmProvider::Openai, "qwen3:8b", fake.url(), ""),
        TIMEOUT,
    )
    .await;
    assert_eq!(check.level(), Level::Warn);
}

#[tokio::test]
async fn a_server_that_is_not_there_is_named_with_its_fix() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let check = check_tier(
        "fast",
        &tier(LlmProvider::Ollama, "qwen3:8b", &url, ""),
        TIMEOUT,
    )
    .await;
    assert_eq!(check.level(), Level::Fail);
    assert_eq!(
        check.line(),
        format!("fast tier: ollama is not reachable at {url} (connection refused)")
    );
    assert!(
        check.fix().unwrap().contains("ollama serve"),
        "{:?}",
        check.fix()
    );
}

#[tokio::test]
async fn a_refused_key_and_an_unset_variable_are_told_apart_and_the_key_never_shown() {
    let fake = FakeLlm::start().await;
    fake.set_models_status(401);
    // A variable every test process has stands for the key (no unsafe set_var here).
    let key = std::env::var("HOME").expect("HOME is set");
    let check = check_tier(
        "wise",
        &tier(
            LlmProvider::Anthropic,
            "claude-sonnet-4-5",
            fake.url(),
            "HOME",
        ),
        TIMEOUT,
    )
    .await;
    assert_eq!(check.finding, Finding::KeyRefused { status: 401 });
    assert_eq!(check.level(), Level::Fail);
    let said = format!("{} {}", check.line(), check.fix().unwrap());
    assert!(
        said.contains("refused the key in HOME (HTTP 401)"),
        "{said}"
    );
    assert!(!said.contains(&key), "{said}");
    let sent = fake.received();
    assert!(sent.is_empty(), "listings are not recorded: {sent:?}");

    let check = check_tier(
        "wise",
        &tier(
            LlmProvider::Anthropic,
            "claude-sonnet-4-5",
            fake.url(),
            "METNOS_CHECK_TEST_UNSET",
        ),
        TIMEOUT,
    )
    .await;
    assert_eq!(
        check.finding,
        Finding::NoKey {
            var: "METNOS_CHECK_TEST_UNSET".to_owned()
        }
    );
    assert!(check.line().contains("METNOS_CHECK_TEST_UNSET is not set"));
}

#[tokio::test]
async fn a_hostile_server_cannot_write_escape_sequences_on_the_terminal() {
    let fake = FakeLlm::start().await;
    let long = "x".repeat(500);
    fake.set_models(&["evil\u{1b}]0;pwned\u{7}\u{1b}[2J", &long]);
    let check = check_tier(
        "fast",
        &tier(LlmProvider::Ollama, "qwen3:8b", fake.url(), ""),
        TIMEOUT,
    )
    .await;
    let line = check.line();
    assert!(!line.chars().any(char::is_control), "{line:?}");
    assert!(line.contains("evil?]0;pwned??[2J"), "{line:?}");
    assert!(
        !line.contains(&"x".repeat(65)),
        "names are cut short: {line}"
    );
}

#[tokio::test]
async fn an_answer_that_is_no_model_list_is_a_warning_about_the_address() {
    let fake = FakeLlm::start().await;
    fake.set_models_status(404);
    let check = check_tier(
        "fast",
        &tier(LlmProvider::Ollama, "qwen3:8b", fake.url(), ""),
        TIMEOUT,
    )
    .await;
    assert_eq!(check.level(), Level::Warn);
    assert!(
        check.line().contains("GET /api/tags answered HTTP 404"),
        "{}",
        check.line()
    );
    assert!(check.fix().unwrap().contains("an Ollama server"));
}

#[tokio::test]
async fn an_anthropic_alias_is_asked_about_by_name_not_looked_up_in_a_page_of_ids() {
    let fake = FakeLlm::start().await;
    fake.set_models(&["claude-sonnet-4-5"]);
    let ready = check_tier(
        "wise",
        &tier(
            LlmProvider::Anthropic,
            "claude-sonnet-4-5",
            fake.url(),
            "HOME",
        ),
        TIMEOUT,
    )
    .await;
    assert_eq!(ready.finding, Finding::Ready, "{}", ready.line());
    let missing = check_tier(
        "wise",
        &tier(
            LlmProvider::Anthropic,
            "claude-nonexistent",
            fake.url(),
            "HOME",
        ),
        TIMEOUT,
    )
    .await;
    assert_eq!(missing.level(), Level::Fail);
    assert!(
        missing.line().contains("has no model claude-nonexistent"),
        "{}",
        missing.line()
    );
}

#[tokio::test]
async fn a_list_shown_whole_has_no_ellipsis_and_invisible_characters_are_shown() {
    let fake = FakeLlm::start().await;
    fake.set_models(&["a", "b", "c", "d", "e"]);
    let check = check_tier(
        "fast",
        &tier(LlmProvider::Ollama, "qwen3:8b", fake.url(), ""),
        TIMEOUT,
    )
    .await;
    assert!(
        check.line().ends_with("(it has a, b, c, d, e)"),
        "{}",
        check.line()
    );
    fake.set_models(&["a", "b", "c", "d", "e", "f"]);
    let check = check_tier(
        "fast",
        &tier(LlmProvider::Ollama, "qwen3:8b", fake.url(), ""),
        TIMEOUT,
    )
    .await;
    assert!(
        check.line().ends_with("(it has a, b, c, d, e, …)"),
        "{}",
        check.line()
    );
    // A right-to-left override would make a name read as another.
    fake.set_models(&["qwen\u{202e}b8:3"]);
    let check = check_tier(
        "fast",
        &tier(LlmProvider::Ollama, "qwen3:8b", fake.url(), ""),
        TIMEOUT,
    )
    .await;
    assert!(check.line().contains("qwen?b8:3"), "{}", check.line());
}
