//! MCP servers reached over streamable HTTP (issue 43): rmcp's transport over Metnos's own
//! reqwest 0.12 client (rmcp's is on reqwest 0.13, and teloxide keeps the tree on 0.12).
//! Only the manifest's origin is ever asked: every request's URL is checked against it,
//! no redirect is followed (a server cannot send the bearer token, the session id or a
//! call elsewhere), TLS is verified against the web's roots (plain `http` only on
//! loopback), and the token is sent as the `Authorization` header to that origin only —
//! never logged, never in an error.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};

const SESSION: &str = "Mcp-Session-Id";
const LAST_EVENT: &str = "Last-Event-Id";
const JSON: &str = "application/json";
const EVENTS: &str = "text/event-stream";

type Failure = StreamableHttpError<reqwest::Error>;

/// Why an MCP server's URL is not one Metnos reaches.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("`{0}` is not a URL")]
    NotUrl(String),
    #[error("an MCP server's URL is https (plain http only on this machine's loopback): {0}")]
    NotHttps(String),
    #[error("an MCP server's URL carries no user or password (the token goes in --token-file)")]
    Credentials,
}

/// `url` as Metnos reaches a server: https, or http on a loopback address; no credentials.
pub fn check_url(url: &str) -> Result<url::Url, UrlError> {
    let parsed =
        url::Url::parse(url).map_err(|_| UrlError::NotUrl(url.chars().take(200).collect()))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(UrlError::Credentials);
    }
    let loopback = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    };
    match parsed.scheme() {
        "https" => Ok(parsed),
        "http" if loopback => Ok(parsed),
        _ => Err(UrlError::NotHttps(parsed.origin().ascii_serialization())),
    }
}

/// The HTTP client of one server: its origin, and the limit of one answer.
#[derive(Debug, Clone)]
pub struct Http {
    client: reqwest::Client,
    origin: url::Origin,
    max_message: usize,
}

impl Http {
    pub fn new(url: &url::Url, max_message: usize) -> Result<Http, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // Straight to the server: no proxy from the environment hears the token.
            .no_proxy()
            .connect_timeout(std::time::Duration::from_secs(10))
            .https_only(url.scheme() == "https")
            .build()?;
        Ok(Http {
            client,
            origin: url.origin(),
            max_message,
        })
    }

    /// `uri`, when it is this server's origin.
    fn at(&self, uri: &str) -> Result<url::Url, Failure> {
        match url::Url::parse(uri) {
            Ok(url) if url.origin() == self.origin => Ok(url),
            _ => Err(StreamableHttpError::UnexpectedServerResponse(
                Cow::Borrowed("a request to another origin than the server's was refused"),
            )),
        }
    }

    fn request(
        &self,
        builder: reqwest::RequestBuilder,
        session: Option<&str>,
        token: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> reqwest::RequestBuilder {
        let mut builder = builder;
        if let Some(session) = session {
            builder = builder.header(SESSION, session);
        }
        if let Some(token) = token {
            builder = builder.bearer_auth(token);
        }
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        builder
    }

    /// The body of `response`, at most the limit.
    async fn bounded(&self, response: reqwest::Response) -> Result<Vec<u8>, Failure> {
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(StreamableHttpError::Client)?;
            if body.len() + chunk.len() > self.max_message {
                return Err(StreamableHttpError::ResponseBodyTooLarge {
                    max_size: self.max_message,
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

fn media(response: &reqwest::Response) -> Option<String> {
    let value = response.headers().get(CONTENT_TYPE)?.to_str().ok()?;
    Some(value.split(';').next()?.trim().to_ascii_lowercase())
}

/// A failure status, said without the body (the server's words are not trusted here).
fn status_failure(status: reqwest::StatusCode) -> Failure {
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!("HTTP {status}")))
}

/// The events of `response`, each at most `limit` bytes: past it the stream fails and
/// nothing more of that event is kept (a server sending one endless event holds no memory).
fn events(response: reqwest::Response, limit: usize) -> BoxStream<'static, Result<Sse, SseError>> {
    let mut in_event = 0usize;
    let mut last = 0u8;
    let bounded = response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        for &byte in chunk.iter() {
            if byte == b'\r' {
                continue;
            }
            in_event = if byte == b'\n' && last == b'\n' {
                0
            } else {
                in_event + 1
            };
            last = byte;
        }
        if in_event > limit {
            return Err(std::io::Error::other(format!(
                "an event of more than {limit} bytes"
            )));
        }
        Ok(chunk)
    });
    SseStream::from_bytes_stream(bounded).boxed()
}

impl StreamableHttpClient for Http {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        let url = self.at(&uri)?;
        let builder = self
            .client
            .post(url)
            .header(ACCEPT, format!("{JSON}, {EVENTS}"))
            .json(&message);
        let response = self
            .request(builder, session_id.as_deref(), auth_header, custom_headers)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if matches!(
            status,
            reqwest::StatusCode::ACCEPTED | reqwest::StatusCode::NO_CONTENT
        ) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == reqwest::StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        if !status.is_success() {
            return Err(status_failure(status));
        }
        let session = response
            .headers()
            .get(SESSION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let awaits_nothing = !matches!(message, ClientJsonRpcMessage::Request(_));
        match media(&response).as_deref() {
            Some(EVENTS) => Ok(StreamableHttpPostResponse::Sse(
                events(response, self.max_message),
                session,
            )),
            Some(JSON) => {
                let body = self.bounded(response).await?;
                match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                    Ok(parsed) => Ok(StreamableHttpPostResponse::Json(parsed, session)),
                    Err(_) if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
                    Err(e) => Err(StreamableHttpError::Deserialize(e)),
                }
            }
            _ if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
            other => Err(StreamableHttpError::UnexpectedContentType(
                other.map(str::to_owned),
            )),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Failure> {
        let url = self.at(&uri)?;
        let builder = self.client.delete(url);
        let response = self
            .request(builder, Some(&session_id), auth_header, custom_headers)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if status.is_success() || status == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            Ok(())
        } else {
            Err(status_failure(status))
        }
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failure> {
        let url = self.at(&uri)?;
        let mut builder = self.client.get(url).header(ACCEPT, EVENTS);
        if let Some(last) = last_event_id {
            builder = builder.header(LAST_EVENT, last);
        }
        let response = self
            .request(builder, session_id.as_deref(), auth_header, custom_headers)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if status == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !status.is_success() {
            return Err(status_failure(status));
        }
        match media(&response).as_deref() {
            Some(EVENTS) => Ok(events(response, self.max_message)),
            other => Err(StreamableHttpError::UnexpectedContentType(
                other.map(str::to_owned),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_without_credentials() {
        assert!(check_url("https://mcp.example.com/mcp").is_ok());
        assert!(check_url("http://127.0.0.1:8080/mcp").is_ok());
        assert!(check_url("http://[::1]:8080/mcp").is_ok());
        assert_eq!(
            check_url("http://mcp.example.com/mcp").unwrap_err(),
            UrlError::NotHttps("http://mcp.example.com".into())
        );
        assert_eq!(
            check_url("https://me:secret@mcp.example.com/").unwrap_err(),
            UrlError::Credentials
        );
        assert!(matches!(check_url("not a url"), Err(UrlError::NotUrl(_))));
        assert!(matches!(
            check_url("ftp://127.0.0.1/"),
            Err(UrlError::NotHttps(_))
        ));
    }
}
