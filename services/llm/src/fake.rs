//! A scripted fake LLM server for tests (feature `fake`): real HTTP on 127.0.0.1:0,
//! speaking Ollama `/api/chat`, OpenAI `/v1/chat/completions` and Anthropic `/v1/messages`
//! in their own wire formats. Tests push the replies it gives, in order, and read every
//! chat request it received. It lists its models as each provider does (Ollama
//! `/api/tags`, `/v1/models`) without using a scripted reply or counting as a request. It can delay a reply, fail with any status (and Retry-After), or
//! answer a malformed body.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// One scripted reply.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A final text answer.
    Text(String),
    /// Tool calls: names and argument objects.
    ToolCalls(Vec<(String, Value)>),
    /// A JSON-Schema answer: text for Ollama and OpenAI, the forced output tool for
    /// Anthropic.
    Json(Value),
    /// An HTTP error with this body, and a Retry-After header if given (seconds).
    Error {
        status: u16,
        body: String,
        retry_after: Option<u64>,
    },
    /// HTTP 200 with this raw body.
    Malformed(String),
    /// The reply, after a delay.
    Delayed(Duration, Box<Reply>),
    /// A reply worked out from the request's JSON body (e.g. to call a tool with an id
    /// an earlier tool result holds).
    FromRequest(Responder),
}

/// A function from a request body to a reply.
#[derive(Clone)]
pub struct Responder(pub Arc<dyn Fn(&Value) -> Reply + Send + Sync>);

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Responder(..)")
    }
}

impl Reply {
    /// A reply computed from the request body.
    pub fn from_request(f: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Reply {
        Reply::FromRequest(Responder(Arc::new(f)))
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: http::HeaderMap,
    pub body: Value,
}

#[derive(Debug)]
struct State {
    script: VecDeque<Reply>,
    fallback: Option<Reply>,
    received: Vec<Received>,
    keep_requests: bool,
    /// What the model listings answer, and with which status.
    models: Vec<String>,
    models_status: u16,
    /// What Ollama's `/api/show` and llama.cpp's `/props` say of the context (none: 404).
    context: Option<u64>,
}

/// The models a fake lists unless told otherwise: the seeds' default and the tests' own.
pub const FAKE_MODELS: [&str; 2] = ["qwen3:8b", "qwen-test"];

impl Default for State {
    fn default() -> Self {
        State {
            script: VecDeque::new(),
            fallback: None,
            received: Vec::new(),
            keep_requests: true,
            models: FAKE_MODELS.map(str::to_owned).to_vec(),
            models_status: 200,
            context: None,
        }
    }
}

/// The running fake server; stops when dropped.
#[derive(Debug)]
pub struct FakeLlm {
    url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeLlm {
    /// Starts on a free loopback port.
    pub async fn start() -> FakeLlm {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let state: Arc<Mutex<State>> = Arc::default();
        let task = {
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let _ = stream.set_nodelay(true);
                    let state = Arc::clone(&state);
                    tokio::spawn(async move {
                        let service =
                            service_fn(move |request| handle(Arc::clone(&state), request));
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            })
        };
        FakeLlm { url, state, task }
    }

    /// `http://127.0.0.1:PORT`, the base URL for any of the three providers.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Queues a reply.
    pub fn push(&self, reply: Reply) {
        self.lock().script.push_back(reply);
    }

    /// The reply given whenever the queue is empty (e.g. for a benchmark).
    pub fn always(&self, reply: Reply) {
        self.lock().fallback = Some(reply);
    }

    /// Whether to keep each request for [`FakeLlm::received`] (on by default; a benchmark
    /// turns it off so the server's own bookkeeping does not weigh on the measure).
    pub fn keep_requests(&self, keep: bool) {
        self.lock().keep_requests = keep;
    }

    /// The models the listings name from now on.
    pub fn set_models(&self, models: &[&str]) {
        self.lock().models = models.iter().map(|m| (*m).to_owned()).collect();
    }

    /// The status the listings answer with (e.g. 401, a refused key).
    pub fn set_models_status(&self, status: u16) {
        self.lock().models_status = status;
    }

    /// The context length `/api/show` and `/props` answer from now on.
    pub fn set_context(&self, tokens: u64) {
        self.lock().context = Some(tokens);
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Body = Full<Bytes>;

/// The few request fields a reply depends on.
#[derive(Debug, Default, serde::Deserialize)]
struct Peek {
    model: Option<String>,
    tool_choice: Option<ToolChoice>,
}

#[derive(Debug, serde::Deserialize)]
struct ToolChoice {
    name: Option<String>,
}

fn respond(status: StatusCode, body: String, retry_after: Option<u64>) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
    }
    response
}

async fn handle(
    state: Arc<Mutex<State>>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().to_owned();
    if request.method() == hyper::Method::GET
        && (path == "/api/tags" || path == "/v1/models" || path.starts_with("/v1/models/"))
    {
        return Ok(listing(&state, &path));
    }
    if path == "/api/show" || path == "/props" {
        let context = state.lock().unwrap_or_else(|e| e.into_inner()).context;
        return Ok(match context {
            Some(n) if path == "/props" => respond(
                StatusCode::OK,
                json!({"default_generation_settings": {"n_ctx": n}}).to_string(),
                None,
            ),
            Some(n) => respond(
                StatusCode::OK,
                json!({"parameters": format!("num_ctx {n}"), "model_info": {"qwen3.context_length": 40960}}).to_string(),
                None,
            ),
            None => respond(StatusCode::NOT_FOUND, "{\"error\":\"not found\"}".into(), None),
        });
    }
    let headers = request.headers().clone();
    let bytes = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Ok(respond(
                StatusCode::BAD_REQUEST,
                "{\"error\":\"unreadable body\"}".into(),
                None,
            ));
        }
    };
    // Only what the replies need is read; the whole body only when it is kept.
    let peek: Peek = serde_json::from_slice(&bytes).unwrap_or_default();
    let reply = {
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        if state.keep_requests {
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            state.received.push(Received {
                path: path.clone(),
                headers,
                body,
            });
        }
        state.script.pop_front().or_else(|| state.fallback.clone())
    };
    let Some(mut reply) = reply else {
        return Ok(respond(
            StatusCode::INTERNAL_SERVER_ERROR,
            "{\"error\":\"fake LLM: no scripted reply left\"}".into(),
            None,
        ));
    };
    loop {
        match reply {
            Reply::Delayed(delay, inner) => {
                tokio::time::sleep(delay).await;
                reply = *inner;
            }
            Reply::FromRequest(responder) => {
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                reply = (responder.0)(&body);
            }
            _ => break,
        }
    }
    let model = peek.model.unwrap_or_else(|| "fake".to_owned());
    let output_tool = peek.tool_choice.and_then(|c| c.name);
    let rendered = match (&reply, path.as_str()) {
        (
            Reply::Error {
                status,
                body,
                retry_after,
            },
            _,
        ) => {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return Ok(respond(status, body.clone(), *retry_after));
        }
        (Reply::Malformed(raw), _) => return Ok(respond(StatusCode::OK, raw.clone(), None)),
        (_, "/api/chat") => ollama(&reply, &model),
        (_, "/v1/chat/completions") => openai(&reply, &model),
        (_, "/v1/messages") => anthropic(&reply, &model, output_tool.as_deref()),
        _ => {
            return Ok(respond(
                StatusCode::NOT_FOUND,
                "{\"error\":\"not found\"}".into(),
                None,
            ));
        }
    };
    Ok(respond(StatusCode::OK, rendered.to_string(), None))
}

/// A model listing in the provider's own format: Ollama's `{"models": [{"name": …}]}`,
/// OpenAI's and Anthropic's `{"data": [{"id": …}]}`.
fn listing(state: &Mutex<State>, path: &str) -> Response<Body> {
    let (models, status) = {
        let state = state.lock().unwrap_or_else(|e| e.into_inner());
        (state.models.clone(), state.models_status)
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if !status.is_success() {
        return respond(status, "{\"error\":\"fake LLM: refused\"}".into(), None);
    }
    // Anthropic's one model, by id or alias.
    if let Some(model) = path.strip_prefix("/v1/models/") {
        return if models.iter().any(|m| m == model) {
            respond(
                StatusCode::OK,
                json!({"type": "model", "id": format!("{model}-20261101"), "display_name": model})
                    .to_string(),
                None,
            )
        } else {
            respond(
                StatusCode::NOT_FOUND,
                json!({"type": "error", "error": {"type": "not_found_error", "message": format!("model: {model}")}}).to_string(),
                None,
            )
        };
    }
    let body = if path == "/api/tags" {
        json!({"models": models.iter().map(|m| json!({
            "name": m, "model": m, "modified_at": "2026-11-01T00:00:00Z", "size": 5_200_000_000u64,
            "digest": "0".repeat(64), "details": {"format": "gguf", "family": "qwen3"},
        })).collect::<Vec<_>>()})
    } else {
        json!({"object": "list", "data": models.iter().map(|m| json!({
            "id": m, "object": "model", "type": "model", "created": 1_764_000_000u64, "owned_by": "fake",
        })).collect::<Vec<_>>()})
    };
    respond(StatusCode::OK, body.to_string(), None)
}

fn text_of(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Text(text) => Some(text.clone()),
        Reply::Json(value) => Some(value.to_string()),
        _ => None,
    }
}

fn ollama(reply: &Reply, model: &str) -> Value {
    let message = match reply {
        Reply::ToolCalls(calls) => json!({"role": "assistant", "content": "",
            "tool_calls": calls.iter().map(|(name, args)| json!({"function": {"name": name, "arguments": args}})).collect::<Vec<_>>()}),
        other => json!({"role": "assistant", "content": text_of(other).unwrap_or_default()}),
    };
    json!({"model": model, "created_at": "2026-11-22T00:00:00Z", "message": message, "done": true,
        "done_reason": "stop", "prompt_eval_count": 10, "eval_count": 5})
}

fn openai(reply: &Reply, model: &str) -> Value {
    let (message, finish) = match reply {
        Reply::ToolCalls(calls) => (
            json!({"role": "assistant", "content": null, "tool_calls": calls.iter().enumerate().map(|(i, (name, args))|
                json!({"id": format!("call_{i}"), "type": "function", "function": {"name": name, "arguments": args.to_string()}})).collect::<Vec<_>>()}),
            "tool_calls",
        ),
        other => (
            json!({"role": "assistant", "content": text_of(other).unwrap_or_default()}),
            "stop",
        ),
    };
    json!({"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
}

fn anthropic(reply: &Reply, model: &str, output_tool: Option<&str>) -> Value {
    let (content, stop) = match reply {
        Reply::ToolCalls(calls) => (
            calls.iter().enumerate().map(|(i, (name, args))| json!({"type": "tool_use", "id": format!("toolu_{i}"), "name": name, "input": args})).collect::<Vec<_>>(),
            "tool_use",
        ),
        Reply::Json(value) => {
            let name = output_tool.unwrap_or("output");
            (vec![json!({"type": "tool_use", "id": "toolu_json", "name": name, "input": value})], "tool_use")
        }
        other => (vec![json!({"type": "text", "text": text_of(other).unwrap_or_default()})], "end_turn"),
    };
    json!({"id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop, "usage": {"input_tokens": 10, "output_tokens": 5}})
}
