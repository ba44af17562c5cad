//! One live connection to an MCP server over stdio, through the `rmcp` SDK: started from the
//! command the caller built (the box around it is the caller's), its tools listed at once and
//! again after `notifications/tools/list_changed`, each call bounded in time and cancelled
//! (`notifications/cancelled`) when it is dropped, its answer made an observation: text only,
//! within the executor's cap. What a server asks of Metnos — sampling its model, an
//! elicitation, the roots — is refused with an error naming why. The server's process group
//! is killed when the connection is dropped.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// Sampling and roots are deprecated in the protocol (SEP-2577), and servers still ask for
// them: their types name what is refused.
#[allow(deprecated)]
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientConfig, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, ErrorCode, ErrorData, ListRootsResult,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::io::AsyncReadExt;

use super::ToolDefinition;
use super::client::ClientError;
use crate::observation::Observation;

/// How much of a server's standard error is kept (its end), for the errors that quote it.
const STDERR_KEPT: usize = 4096;

/// The answer to what a server asks of Metnos.
fn refused(what: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::INVALID_REQUEST,
        format!(
            "Metnos refuses {what} to MCP servers: a tool's server may not ask anything of the person or their model"
        ),
        None,
    )
}

/// What Metnos does with a server's requests and notifications.
#[derive(Debug, Clone, Default)]
pub struct Handler {
    /// Set by `notifications/tools/list_changed`: the tools are listed and pinned again
    /// before the next call.
    list_changed: Arc<AtomicBool>,
}

#[allow(deprecated)]
impl ClientHandler for Handler {
    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        Err(refused("sampling"))
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Err(refused("roots"))
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Err(refused("elicitation"))
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.store(true, Ordering::SeqCst);
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info.name = "metnos".into();
        info.client_info.version = env!("CARGO_PKG_VERSION").into();
        info
    }
}

/// A server's standard error, its end kept.
#[derive(Debug, Clone, Default)]
pub struct Stderr(Arc<Mutex<Vec<u8>>>);

impl Stderr {
    /// Its last lines, as text.
    pub fn tail(&self) -> String {
        let kept = self.0.lock().map(|k| k.clone()).unwrap_or_default();
        String::from_utf8_lossy(&kept).trim().to_owned()
    }

    /// The line that starts with `prefix`, without it.
    pub fn line_after(&self, prefix: &str) -> Option<String> {
        let text = self.tail();
        text.lines()
            .find_map(|l| l.strip_prefix(prefix).map(str::to_owned))
    }

    fn keep(&self, bytes: &[u8]) {
        if let Ok(mut kept) = self.0.lock() {
            kept.extend_from_slice(bytes);
            if kept.len() > STDERR_KEPT {
                let cut = kept.len() - STDERR_KEPT;
                kept.drain(..cut);
            }
        }
    }

    /// Reads `stream` to its end in the background (a server that floods it is not slowed).
    fn drain(&self, stream: Option<tokio::process::ChildStderr>) {
        let Some(mut stream) = stream else { return };
        let this = self.clone();
        tokio::spawn(async move {
            let mut buffer = [0u8; 8192];
            while let Ok(n) = stream.read(&mut buffer).await {
                if n == 0 {
                    break;
                }
                this.keep(&buffer[..n]);
            }
        });
    }
}

/// `error`, with what the server (or its box) last said; its process group killed.
async fn failed(group: Option<u32>, stderr: &Stderr, error: ClientError) -> ClientError {
    crate::runner::kill_group(group);
    // What it wrote before it ended is still on its way through the pipe.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let tail = stderr.tail();
    if tail.is_empty() {
        return error;
    }
    let last: Vec<&str> = tail.lines().rev().take(3).collect();
    let said = last.into_iter().rev().collect::<Vec<_>>().join(" / ");
    ClientError::Said {
        error: Box::new(error),
        said: cut(&said, 600),
    }
}

/// A server's output, each message (one line) at most `limit` bytes: a longer one is an
/// error that closes the connection, so nothing waits for an answer that would be dropped
/// and no server makes Metnos hold more than that.
struct LineCap<R> {
    inner: R,
    limit: usize,
    since_newline: usize,
    tripped: Arc<AtomicBool>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for LineCap<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &polled {
            let fresh = &buf.filled()[before..];
            let mut run = self.since_newline;
            let mut longest = 0;
            for chunk in fresh.split_inclusive(|b| *b == b'\n') {
                run += chunk.len();
                longest = longest.max(run);
                if chunk.ends_with(b"\n") {
                    run = 0;
                }
            }
            self.since_newline = run;
            if longest > self.limit {
                self.tripped.store(true, Ordering::SeqCst);
                return std::task::Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a message over the limit",
                )));
            }
        }
        polled
    }
}

/// A server, started and listing its tools.
pub struct Connection {
    service: RunningService<RoleClient, Handler>,
    handler: Handler,
    /// What it listed at the last listing.
    pub tools: Vec<ToolDefinition>,
    pub stderr: Stderr,
    /// Its process group (the box's outer leads it).
    group: Option<u32>,
    /// Its process (killed when dropped); none for a server reached over HTTP.
    _child: Option<tokio::process::Child>,
    /// The most bytes of one message, and whether one was longer.
    max_message: usize,
    oversized: Arc<AtomicBool>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("tools", &self.tools.len())
            .field("group", &self.group)
            .finish()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        crate::runner::kill_group(self.group);
    }
}

/// The most pages of a tool listing Metnos reads, and the most tools.
const MAX_PAGES: usize = 50;
pub const MAX_TOOLS: usize = 2000;

/// Every page of the server's tools, within [`MAX_PAGES`] and [`MAX_TOOLS`]: a server
/// whose listing never ends is refused, not followed.
async fn list_bounded(
    service: &RunningService<RoleClient, Handler>,
) -> Result<Vec<rmcp::model::Tool>, ClientError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor
            .take()
            .map(|c| rmcp::model::PaginatedRequestParams::default().with_cursor(Some(c)));
        let page = service
            .list_tools(params)
            .await
            .map_err(|e| ClientError::List(e.to_string()))?;
        tools.extend(page.tools);
        if tools.len() > MAX_TOOLS {
            return Err(ClientError::List(format!(
                "it lists more than {MAX_TOOLS} tools"
            )));
        }
        match page.next_cursor {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => return Ok(tools),
        }
    }
    Err(ClientError::List(format!(
        "its listing goes on past {MAX_PAGES} pages"
    )))
}

/// `tools` as Metnos reads them.
fn definitions(tools: Vec<rmcp::model::Tool>) -> Result<Vec<ToolDefinition>, ClientError> {
    tools
        .into_iter()
        .map(|tool| {
            let value =
                serde_json::to_value(&tool).map_err(|e| ClientError::Tool(e.to_string()))?;
            serde_json::from_value(value).map_err(|e| ClientError::Tool(e.to_string()))
        })
        .collect()
}

impl Connection {
    /// Starts `command` (in a process group of its own, killed with the connection),
    /// completes the handshake and lists the tools, all within `timeout`; a message of
    /// the server's over `max_message` bytes closes the connection.
    pub async fn start(
        mut command: tokio::process::Command,
        timeout: Duration,
        max_message: usize,
    ) -> Result<Connection, ClientError> {
        use std::process::Stdio;
        command
            .process_group(0)
            .kill_on_drop(true)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(ClientError::Start)?;
        let group = child.id();
        let stderr = Stderr::default();
        stderr.drain(child.stderr.take());
        let (Some(output), Some(input)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(ClientError::Start(std::io::Error::other(
                "no standard input or output",
            )));
        };
        let oversized = Arc::new(AtomicBool::new(false));
        let output = LineCap {
            inner: output,
            limit: max_message,
            since_newline: 0,
            tripped: oversized.clone(),
        };
        let handler = Handler::default();
        let exchange = async {
            let service = handler
                .clone()
                .serve((output, input))
                .await
                .map_err(|e| ClientError::Handshake(e.to_string()))?;
            let tools = list_bounded(&service).await?;
            Ok::<_, ClientError>((service, tools))
        };
        let outcome = tokio::time::timeout(timeout, exchange).await;
        let (service, tools) = match outcome {
            Ok(Ok(found)) => found,
            Ok(Err(error)) => return Err(failed(group, &stderr, error).await),
            Err(_) => return Err(failed(group, &stderr, ClientError::Timeout(timeout)).await),
        };
        // Whatever the server said before the handshake is not a change.
        handler.list_changed.store(false, Ordering::SeqCst);
        Ok(Connection {
            service,
            handler,
            tools: definitions(tools)?,
            stderr,
            group,
            _child: Some(child),
            max_message,
            oversized,
        })
    }

    /// Reaches the server at `url` over streamable HTTP ([`super::http`]), with `token` as
    /// its bearer token, completes the handshake and lists the tools within `timeout`; an
    /// answer over `max_message` bytes is refused.
    pub async fn start_http(
        url: &url::Url,
        token: Option<String>,
        timeout: Duration,
        max_message: usize,
    ) -> Result<Connection, ClientError> {
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let client = super::http::Http::new(url, max_message)
            .map_err(|e| ClientError::Start(std::io::Error::other(e.without_url())))?;
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
            .max_json_response_size(max_message)
            .max_sse_event_size(max_message);
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::with_client(client, config);
        let handler = Handler::default();
        let exchange = async {
            let service = handler
                .clone()
                .serve(transport)
                .await
                .map_err(|e| ClientError::Handshake(e.to_string()))?;
            let tools = list_bounded(&service).await?;
            Ok::<_, ClientError>((service, tools))
        };
        let (service, tools) = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout(timeout))??;
        handler.list_changed.store(false, Ordering::SeqCst);
        Ok(Connection {
            service,
            handler,
            tools: definitions(tools)?,
            stderr: Stderr::default(),
            group: None,
            _child: None,
            max_message,
            oversized: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Whether the server said its tools changed since they were last listed (and forgets it).
    pub fn take_list_changed(&self) -> bool {
        self.handler.list_changed.swap(false, Ordering::SeqCst)
    }

    /// Whether the server is gone (it crashed, or closed its output).
    pub fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.is_transport_closed()
    }

    /// Lists the tools again within `timeout`.
    pub async fn relist(&mut self, timeout: Duration) -> Result<(), ClientError> {
        let listed = tokio::time::timeout(timeout, list_bounded(&self.service))
            .await
            .map_err(|_| ClientError::Timeout(timeout))??;
        self.tools = definitions(listed)?;
        Ok(())
    }

    /// Calls `tool` with `args` within `timeout`; its answer as an observation of at most
    /// `cap` bytes of text. Dropped (a turn stopped) or timed out, the call is cancelled at
    /// the server.
    pub async fn call(
        &self,
        tool: &str,
        args: &Value,
        timeout: Duration,
        cap: usize,
    ) -> Observation {
        let arguments = match args {
            Value::Object(map) => Some(map.clone()),
            _ => None,
        };
        let mut params = CallToolRequestParams::new(Cow::Owned(tool.to_owned()));
        params.arguments = arguments;
        let answer = tokio::time::timeout(timeout, self.service.call_tool_once(params)).await;
        if self.oversized.load(Ordering::SeqCst) {
            return Observation::failure(format!(
                "the server sent a message of more than {} bytes for `{tool}`; it was dropped and the server stopped",
                self.max_message
            ));
        }
        match answer {
            Err(_) => Observation::failure(format!(
                "`{tool}` did not answer within {} s; the server was told to cancel the call",
                timeout.as_secs()
            )),
            Ok(Err(error)) => Observation::failure(format!(
                "`{tool}` failed at the server: {}",
                cut(&error.to_string(), 500)
            )),
            Ok(Ok(CallToolResponse::Complete(result))) => {
                observation_of(&serde_json::to_value(&result).unwrap_or(Value::Null), cap)
            }
            Ok(Ok(_)) => Observation::failure(format!(
                "`{tool}` asked for more than an answer (input from the person, or to run as a task): Metnos refuses what servers ask of it"
            )),
        }
    }

    /// Closes the connection and kills what is left of the server.
    pub fn close(self) {
        self.service.cancellation_token().cancel();
    }
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}…")
}

/// A `tools/call` result (as JSON) as an observation: its text parts joined, anything else
/// left out with a note; over `cap` bytes, refused; `isError`, a failure in the server's
/// words. The structured result stands in when there is no text.
pub fn observation_of(result: &Value, cap: usize) -> Observation {
    let mut texts: Vec<String> = Vec::new();
    let mut left_out: Vec<String> = Vec::new();
    let parts = result.get("content").and_then(Value::as_array);
    for part in parts.into_iter().flatten() {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("?");
        match kind {
            "text" => texts.push(
                part.get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            ),
            "resource" => match part.pointer("/resource/text").and_then(Value::as_str) {
                Some(text) => texts.push(text.to_owned()),
                None => left_out.push("a binary resource".to_owned()),
            },
            "resource_link" => {
                let uri = part.get("uri").and_then(Value::as_str).unwrap_or_default();
                texts.push(format!("(link: {uri})"));
            }
            "image" => left_out.push("an image".to_owned()),
            "audio" => left_out.push("an audio clip".to_owned()),
            other => left_out.push(format!("a part of type `{}`", cut(other, 40))),
        }
    }
    if texts.is_empty()
        && let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null())
    {
        texts.push(structured.to_string());
    }
    let text = texts.join("\n");
    if text.len() > cap {
        return Observation::failure(format!(
            "the server answered {} bytes of text, more than this tool's output cap of {cap} bytes; the answer was dropped",
            text.len()
        ));
    }
    let mut metadata = Map::new();
    if !left_out.is_empty() {
        metadata.insert(
            "left_out".to_owned(),
            json!(format!(
                "{} left out: Metnos takes only text from MCP tools",
                left_out.join(", ")
            )),
        );
    }
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let error = if text.is_empty() {
            "the tool reported an error".to_owned()
        } else {
            text
        };
        return Observation::failure_with(error, metadata);
    }
    if text.is_empty() && !left_out.is_empty() {
        let note = metadata["left_out"].as_str().unwrap_or_default().to_owned();
        return Observation::failure_with(note, metadata);
    }
    Observation::success(text, metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_text_comes_back_within_the_cap_and_an_error_is_a_failure() {
        let answer = json!({"content": [
            {"type": "text", "text": "It is 10:00."},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///x", "text": "x text"}},
        ]});
        let seen = observation_of(&answer, 1000);
        assert!(seen.ok);
        assert_eq!(seen.content, Some(json!("It is 10:00.\nx text")));
        assert!(
            seen.metadata.unwrap()["left_out"]
                .as_str()
                .unwrap()
                .starts_with("an image left out")
        );
        let only_audio =
            json!({"content": [{"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}]});
        let seen = observation_of(&only_audio, 1000);
        assert!(!seen.ok);
        assert!(seen.error.unwrap().contains("only text"));
        let big = json!({"content": [{"type": "text", "text": "x".repeat(2000)}]});
        let seen = observation_of(&big, 1000);
        assert!(!seen.ok);
        assert!(seen.error.unwrap().contains("output cap of 1000 bytes"));
        let failed =
            json!({"content": [{"type": "text", "text": "no such zone"}], "isError": true});
        let seen = observation_of(&failed, 1000);
        assert_eq!(
            (seen.ok, seen.error.as_deref()),
            (false, Some("no such zone"))
        );
        let structured = json!({"content": [], "structuredContent": {"t": 1}});
        assert_eq!(
            observation_of(&structured, 1000).content,
            Some(json!("{\"t\":1}"))
        );
    }
}
