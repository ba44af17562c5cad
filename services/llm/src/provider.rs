//! One configured model behind one provider's API, over reqwest: timeouts, bounded retries
//! with exponential backoff (honouring Retry-After) for connection failures, 429 and 5xx,
//! typed errors, and a tracing span per call with names and counts, never text.

use std::fmt;
use std::time::{Duration, Instant};

use metnos_kit::config::{LlmProvider, LlmTierConfig};
use serde_json::Value;
use tracing::Instrument;
use tracing::field::Empty;

use crate::error::LlmError;
use crate::types::{ChatRequest, ChatResponse, Outcome};
use crate::wire::{anthropic, ollama, openai};

/// How failed calls are retried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first backoff; it doubles each time.
    pub base: Duration,
    /// No wait, backoff or Retry-After, is longer than this.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base: Duration::from_millis(250),
            cap: Duration::from_secs(30),
        }
    }
}

/// The most a chat answer may weigh: far over any real one, far under what would hurt.
const MAX_ANSWER: usize = 32 << 20;

/// A response's body, at most `cap` bytes (`Err(())` past it): a hostile or broken server
/// cannot make a reader hold more.
async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<Result<Vec<u8>, ()>, reqwest::Error> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > cap {
            return Ok(Err(()));
        }
    }
    Ok(Ok(bytes))
}

/// Whether a URL's host is this machine or the home network (see
/// [`Provider::online_host`]).
fn home_host(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Ipv4(ip) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
        url::Host::Ipv6(ip) => {
            ip.is_loopback() || ip.is_unique_local() || ip.is_unicast_link_local()
        }
        url::Host::Domain(name) => {
            let name = name.trim_end_matches('.').to_lowercase();
            name == "localhost"
                || !name.contains('.')
                || [".local", ".localhost", ".internal", ".lan", ".home.arpa"]
                    .iter()
                    .any(|suffix| name.ends_with(suffix))
        }
    }
}

/// The context length in an Ollama `/api/show` or a llama.cpp `/props` answer.
fn context_of(value: &Value) -> Option<u64> {
    let num_ctx = value
        .get("parameters")
        .and_then(Value::as_str)
        .and_then(|p| {
            p.lines().find_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some("num_ctx")).then(|| words.next()?.parse().ok())?
            })
        });
    let trained = value
        .get("model_info")
        .and_then(Value::as_object)
        .and_then(|info| {
            info.iter()
                .find(|(k, _)| k.ends_with(".context_length"))
                .and_then(|(_, v)| v.as_u64())
        });
    let llama_cpp = value
        .pointer("/default_generation_settings/n_ctx")
        .or_else(|| value.get("n_ctx"))
        .and_then(Value::as_u64);
    num_ctx.or(llama_cpp).or(trained)
}

/// An API key: never printed.
#[derive(Clone)]
struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A model behind a provider.
#[derive(Debug, Clone)]
pub struct Provider {
    kind: LlmProvider,
    base_url: String,
    model: String,
    think: bool,
    timeout: Duration,
    api_key: Option<Secret>,
    retry: RetryPolicy,
    http: reqwest::Client,
    /// The config's word on whether it is online (`None`: the rule decides).
    online: Option<bool>,
}

impl Provider {
    /// A provider from a `[runtime.llm.<tier>]` section; the API key is read from the
    /// environment variable it names.
    pub fn from_config(tier: &str, config: &LlmTierConfig) -> Result<Provider, LlmError> {
        let api_key = if config.api_key_env.is_empty() {
            None
        } else {
            let value = std::env::var(&config.api_key_env).map_err(|_| {
                LlmError::Config(format!(
                    "runtime.llm.{tier}.api_key_env names {}, which is not set",
                    config.api_key_env
                ))
            })?;
            Some(Secret(value))
        };
        let base_url = if config.base_url.is_empty() {
            match config.provider {
                LlmProvider::Ollama => ollama::DEFAULT_BASE_URL,
                LlmProvider::Openai => openai::DEFAULT_BASE_URL,
                LlmProvider::Anthropic => anthropic::DEFAULT_BASE_URL,
            }
            .to_owned()
        } else {
            config.base_url.trim_end_matches('/').to_owned()
        };
        if config.provider == LlmProvider::Anthropic && api_key.is_none() {
            return Err(LlmError::Config(format!(
                "runtime.llm.{tier}: anthropic needs api_key_env (the variable holding the key)"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            // A key sent as `x-api-key` would follow a redirect to another host.
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .build()
            .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Provider {
            kind: config.provider,
            base_url,
            model: config.model.clone(),
            think: config.think,
            timeout: Duration::from_secs(config.timeout_seconds.get()),
            api_key,
            retry: RetryPolicy::default(),
            http,
            online: config.online,
        })
    }

    /// The same provider with this API key (instead of one from the environment).
    pub fn with_api_key(mut self, key: impl Into<String>) -> Provider {
        self.api_key = Some(Secret(key.into()));
        self
    }

    /// The same provider with another retry policy (tests shorten the waits).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Provider {
        self.retry = retry;
        self
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    /// The host an online provider is reached at (`llm:online`: an outgoing cost), lower
    /// case; `None` for a local one (`llm:local`). Policy is asked with it before every
    /// call, so a grant can name one provider. The config's `online` decides when set;
    /// else Anthropic is online, and Ollama or an OpenAI-compatible server is local only on
    /// this machine or the home network: loopback, private, link-local or unique-local
    /// addresses, `localhost`, a name without a dot (a compose service), or one under
    /// `.local`, `.localhost`, `.internal`, `.lan`, `.home.arpa`. Anything else (a public
    /// host, a cloud Ollama, a URL that does not parse) is online.
    pub fn online_host(&self) -> Option<String> {
        let url = reqwest::Url::parse(&self.base_url).ok();
        let host = url
            .as_ref()
            .and_then(|u| u.host_str())
            .map_or_else(|| self.base_url.clone(), str::to_lowercase);
        let online = self.online.unwrap_or_else(|| match self.kind {
            LlmProvider::Anthropic => true,
            LlmProvider::Ollama | LlmProvider::Openai => !url
                .as_ref()
                .and_then(|u| u.host())
                .is_some_and(|h| home_host(&h)),
        });
        online.then_some(host)
    }

    pub fn provider_name(&self) -> &'static str {
        match self.kind {
            LlmProvider::Ollama => ollama::PROVIDER,
            LlmProvider::Openai => openai::PROVIDER,
            LlmProvider::Anthropic => anthropic::PROVIDER,
        }
    }

    fn url(&self) -> String {
        let path = match self.kind {
            LlmProvider::Ollama => ollama::PATH,
            LlmProvider::Openai => openai::PATH,
            LlmProvider::Anthropic => anthropic::PATH,
        };
        format!("{}{path}", self.base_url)
    }

    /// One chat call, as tier `tier` (for the span).
    pub async fn chat(&self, tier: &str, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let span = tracing::info_span!(
            "llm.chat",
            otel.kind = "client",
            otel.status_code = Empty,
            llm.provider = self.provider_name(),
            llm.model = %self.model,
            llm.tier = tier,
            llm.tools = request.tools.len(),
            llm.prompt_tokens = Empty,
            llm.completion_tokens = Empty,
            llm.latency_ms = Empty,
            llm.attempts = Empty,
        );
        async {
            let started = Instant::now();
            let result = self.call_with_retries(request).await;
            let span = tracing::Span::current();
            span.record("llm.latency_ms", started.elapsed().as_millis() as u64);
            match &result {
                Ok(response) => {
                    span.record("llm.prompt_tokens", response.usage.prompt_tokens);
                    span.record("llm.completion_tokens", response.usage.completion_tokens);
                }
                Err(e) => {
                    span.record("otel.status_code", "ERROR");
                    tracing::warn!(error = %e, "llm call failed");
                }
            }
            result
        }
        .instrument(span)
        .await
    }

    async fn call_with_retries(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let body = match self.kind {
            LlmProvider::Ollama => ollama::body(request, &self.model, self.think),
            LlmProvider::Openai => openai::body(request, &self.model),
            LlmProvider::Anthropic => anthropic::body(request, &self.model, self.think),
        };
        let body = serde_json::to_vec(&body).map_err(|e| LlmError::Config(e.to_string()))?;
        let json_output = request.json_output.as_ref().map(|o| o.name.as_str());
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (result, retry_after) = self.attempt(&body, json_output).await;
            match result {
                Ok((outcome, usage, model)) => {
                    tracing::Span::current().record("llm.attempts", attempt);
                    return Ok(ChatResponse {
                        outcome,
                        usage,
                        latency: started.elapsed(),
                        model: if model.is_empty() {
                            self.model.clone()
                        } else {
                            model
                        },
                    });
                }
                Err(e) if e.is_transient() && attempt <= self.retry.max_retries => {
                    let backoff = self.retry.base.saturating_mul(1 << (attempt - 1).min(16));
                    let wait = retry_after.unwrap_or(backoff).min(self.retry.cap);
                    tracing::info!(attempt, wait_ms = wait.as_millis() as u64, error = %e, "llm call failed; retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => {
                    tracing::Span::current().record("llm.attempts", attempt);
                    return Err(e);
                }
            }
        }
    }

    /// One HTTP exchange: the parsed answer, or the error and any Retry-After.
    async fn attempt(
        &self,
        body: &[u8],
        json_output: Option<&str>,
    ) -> (
        Result<(Outcome, crate::types::Usage, String), LlmError>,
        Option<Duration>,
    ) {
        let provider = self.provider_name();
        let url = self.url();
        // What messages show: no user or password from the base URL.
        let shown = format!("{}{}", self.base_url(), &url[self.base_url.len()..]);
        let request = self.authorized(
            self.http
                .post(&url)
                .timeout(self.timeout)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(body.to_vec()),
        );
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => return (Err(self.transport_error(&shown, &e)), None),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = match read_capped(response, MAX_ANSWER).await {
            Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            Ok(Err(())) => {
                return (
                    Err(LlmError::Malformed {
                        provider,
                        message: format!("the answer is over {} MiB", MAX_ANSWER >> 20),
                    }),
                    None,
                );
            }
            Err(e) => return (Err(self.transport_error(&shown, &e)), None),
        };
        if !status.is_success() {
            let error = match self.kind {
                LlmProvider::Ollama => ollama::error(status.as_u16(), &text, &self.model),
                LlmProvider::Openai => openai::error(status.as_u16(), &text, &self.model),
                LlmProvider::Anthropic => anthropic::error(status.as_u16(), &text, &self.model),
            };
            return (Err(error), retry_after);
        }
        let value: Value = match serde_json::from_str(&text) {
            Ok(value) => value,
            Err(e) => {
                return (
                    Err(LlmError::Malformed {
                        provider,
                        message: format!("the answer is not JSON: {e}"),
                    }),
                    None,
                );
            }
        };
        let parsed = match self.kind {
            LlmProvider::Ollama => ollama::parse(&value),
            LlmProvider::Openai => openai::parse(&value),
            LlmProvider::Anthropic => anthropic::parse(&value, json_output),
        };
        (parsed, None)
    }

    /// The base URL, as messages show it (without any user or password in it).
    pub fn base_url(&self) -> String {
        match reqwest::Url::parse(&self.base_url) {
            Ok(mut url) => {
                let _ = url.set_username("");
                let _ = url.set_password(None);
                url.as_str().trim_end_matches('/').to_owned()
            }
            Err(_) => self.base_url.clone(),
        }
    }

    /// Whether an API key is set (read from the variable the config names).
    pub fn has_api_key(&self) -> bool {
        self.api_key.is_some()
    }

    /// The models the server offers (Ollama `/api/tags`, OpenAI-compatible `/v1/models`),
    /// in one attempt bounded by `timeout`: no retries, for a check at start. Anthropic
    /// lists dated ids a page at a time, and a configured alias is not among them: it is
    /// asked about this model alone (`/v1/models/<model>`, which knows aliases), and the
    /// answer is this model, or none.
    pub async fn list_models(&self, timeout: Duration) -> Result<Vec<String>, LlmError> {
        let provider = self.provider_name();
        let path = match self.kind {
            LlmProvider::Ollama => "/api/tags".to_owned(),
            LlmProvider::Openai => "/v1/models".to_owned(),
            LlmProvider::Anthropic => {
                let mut url = reqwest::Url::parse("http://x/v1/models/").expect("a fixed URL");
                url.path_segments_mut()
                    .expect("an http URL")
                    .pop_if_empty()
                    .push(&self.model);
                url.path().to_owned()
            }
        };
        let url = format!("{}{path}", self.base_url);
        let request = self.authorized(self.http.get(&url).timeout(timeout));
        let shown = format!("{}{path}", self.base_url());
        let response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                LlmError::Timeout {
                    provider,
                    after: timeout,
                }
            } else {
                self.transport_error(&shown, &e)
            }
        })?;
        let status = response.status();
        // A model list is small; a server that answers megabytes is not an LLM server.
        const MAX_LIST: usize = 4 << 20;
        let bytes = read_capped(response, MAX_LIST)
            .await
            .map_err(|e| self.transport_error(&shown, &e))?
            .map_err(|()| LlmError::Malformed {
                provider,
                message: format!("GET {path} answered more than {} MiB", MAX_LIST >> 20),
            })?;
        if self.kind == LlmProvider::Anthropic && status.as_u16() == 404 {
            return Ok(Vec::new());
        }
        if !status.is_success() {
            return Err(LlmError::Http {
                provider,
                status: status.as_u16(),
                message: format!("GET {path}"),
            });
        }
        if self.kind == LlmProvider::Anthropic {
            return Ok(vec![self.model.clone()]);
        }
        let value: Value = serde_json::from_slice(&bytes).map_err(|_| LlmError::Malformed {
            provider,
            message: format!("GET {path} did not answer JSON"),
        })?;
        let (list, field) = match self.kind {
            LlmProvider::Ollama => (value.get("models"), "name"),
            _ => (value.get("data"), "id"),
        };
        let list = list.and_then(Value::as_array).ok_or(LlmError::Malformed {
            provider,
            message: format!("GET {path} answered no model list"),
        })?;
        Ok(list
            .iter()
            .filter_map(|m| m.get(field).and_then(Value::as_str))
            .map(str::to_owned)
            .collect())
    }

    /// The context the server gives this model, in tokens, when it says: Ollama's
    /// `/api/show` (the model's `num_ctx` parameter, else its `…context_length`), llama.cpp's
    /// `/props` (`n_ctx`). `None`: the server does not say (or is not asked: Anthropic). One
    /// attempt within `timeout`.
    pub async fn context_length(&self, timeout: Duration) -> Option<u64> {
        let request = match self.kind {
            LlmProvider::Ollama => self
                .http
                .post(format!("{}/api/show", self.base_url))
                .json(&serde_json::json!({"model": self.model})),
            LlmProvider::Openai => self.http.get(format!("{}/props", self.base_url)),
            LlmProvider::Anthropic => return None,
        };
        let response = self
            .authorized(request.timeout(timeout))
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        let bytes = read_capped(response, 4 << 20).await.ok()?.ok()?;
        let value: Value = serde_json::from_slice(&bytes).ok()?;
        context_of(&value)
    }

    /// Whether `listed` (a name from [`Provider::list_models`]) is this provider's model:
    /// the same name, or for Ollama the name with its implicit `:latest` tag.
    pub fn is_model(&self, listed: &str) -> bool {
        listed == self.model
            || (self.kind == LlmProvider::Ollama
                && !self.model.contains(':')
                && listed.strip_suffix(":latest") == Some(self.model.as_str()))
    }

    pub fn kind(&self) -> LlmProvider {
        self.kind
    }

    /// `request` with the key (as the provider takes it) and Anthropic's version header.
    fn authorized(&self, mut request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(key) = &self.api_key {
            request = match self.kind {
                LlmProvider::Anthropic => request.header("x-api-key", &key.0),
                _ => request.bearer_auth(&key.0),
            };
        }
        if self.kind == LlmProvider::Anthropic {
            request = request.header("anthropic-version", anthropic::VERSION);
        }
        request
    }

    fn transport_error(&self, url: &str, error: &reqwest::Error) -> LlmError {
        let provider = self.provider_name();
        if error.is_timeout() {
            return LlmError::Timeout {
                provider,
                after: self.timeout,
            };
        }
        // The innermost cause reads best: "connection refused".
        let mut cause = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(inner) = source {
            cause = inner.to_string();
            source = inner.source();
        }
        LlmError::Unreachable {
            provider,
            url: url.to_owned(),
            cause: cause.to_lowercase(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_context_is_read_from_ollama_and_llama_cpp_answers() {
        let ollama = json!({"parameters": "stop \"<|im_end|>\"\nnum_ctx 8192",
            "model_info": {"qwen3.context_length": 40960}});
        assert_eq!(super::context_of(&ollama), Some(8192));
        let trained = json!({"model_info": {"llama.context_length": 131072}});
        assert_eq!(super::context_of(&trained), Some(131072));
        let llama_cpp = json!({"default_generation_settings": {"n_ctx": 4096}});
        assert_eq!(super::context_of(&llama_cpp), Some(4096));
        assert_eq!(super::context_of(&json!({"x": 1})), None);
    }
}
