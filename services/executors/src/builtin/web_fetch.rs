//! `web_fetch`: one HTTP(S) request, GET or POST, with a size cap and a capped number of
//! redirects, each hop held to the scope's hosts and to public addresses (or the
//! operator's `local_hosts`, see [`crate::netguard`]); text bodies decoded by their charset.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{BuiltinError, count_arg, meta, required, string_arg};
use crate::netguard::NetGuard;
use crate::observation::{ExecContext, Observation};
use crate::scope::{check_url, host_allowed};

pub const DEFAULT_MAX_BYTES: u64 = 1024 * 1024;
pub const MAX_REDIRECTS: usize = 5;

pub fn run(args: &Value, context: &ExecContext) -> Observation {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return Observation::failure(format!("cannot start the HTTP client: {e}")),
    };
    match runtime.block_on(fetch(args, context)) {
        Ok(observation) => observation,
        Err(error) => Observation::failure(error.to_string()),
    }
}

fn is_text(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence.as_str(),
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-www-form-urlencoded"
                | ""
        )
}

async fn fetch(args: &Value, context: &ExecContext) -> Result<Observation, BuiltinError> {
    let url_text = required(args, "url")?;
    let url = check_url(url_text, &context.scope_hosts)?;
    let guard = NetGuard::new(&context.local_hosts);
    guard
        .check_url(&url)
        .map_err(|e| format!("fetching {url_text} refused: {e}"))?;
    let method = method(args)?;
    let ceiling = (context.max_output_bytes / 2).max(1);
    let max = count_arg(args, "max_bytes")?
        .unwrap_or(DEFAULT_MAX_BYTES)
        .min(ceiling);
    // A POST carries data to where it was asked to go (the planner weighed that host against
    // where the data came from): a redirect may not take it to another site.
    let policy = redirects(
        guard.clone(),
        context.scope_hosts.clone(),
        (method == reqwest::Method::POST).then(|| url.origin()),
    );
    let timeout = Duration::from_secs(context.timeout_seconds.saturating_sub(1).max(1));
    // No proxy: through one, the guard would judge the proxy's address, not the target's.
    let client = reqwest::Client::builder()
        .redirect(policy)
        .dns_resolver(Arc::new(guard))
        .no_proxy()
        .timeout(timeout)
        .user_agent(concat!("metnos-web-fetch/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let request = client.request(method.clone(), url.clone());
    let mut request = request.headers(headers(args)?);
    if let Some(body) = string_arg(args, "body")? {
        if method == reqwest::Method::GET {
            return Err("a body goes with POST, not GET".into());
        }
        request = request.body(body.to_owned());
    }
    let mut response = request.send().await.map_err(|e| describe(&e, url_text))?;
    let status = response.status();
    let final_url = response.url().to_string();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let (body, truncated) = read_capped(&mut response, max, url_text).await?;
    let mut details = meta([
        ("status", json!(status.as_u16())),
        ("content_type", json!(content_type)),
        ("bytes", json!(body.len())),
        ("truncated", json!(truncated)),
        ("final_url", json!(final_url)),
    ]);
    if !status.is_success() {
        return Ok(Observation::failure_with(
            format!("HTTP {status} from {final_url}"),
            details,
        ));
    }
    if !is_text(&content_type) {
        details.insert("encoding".into(), json!("binary"));
        return Ok(Observation::success(
            format!("({} bytes of {content_type}, not text)", body.len()),
            details,
        ));
    }
    let (text, used) = decoded(&body, &content_type);
    details.insert("encoding".into(), json!(used.name().to_ascii_lowercase()));
    Ok(Observation::success(text, details))
}

/// The call's method: GET (the default) or POST.
fn method(args: &Value) -> Result<reqwest::Method, BuiltinError> {
    let method = string_arg(args, "method")?
        .unwrap_or("GET")
        .to_ascii_uppercase();
    match method.as_str() {
        "GET" => Ok(reqwest::Method::GET),
        "POST" => Ok(reqwest::Method::POST),
        other => Err(format!(
            "method `{}` is not GET or POST",
            other.chars().take(16).collect::<String>()
        )
        .into()),
    }
}

/// Where a redirect may go: at most [`MAX_REDIRECTS`] hops, each past the guard, over HTTP(S),
/// to an allowed host; a POST (`post_origin`: where it was sent) never to another site.
fn redirects(
    hop_guard: NetGuard,
    hosts: Vec<String>,
    post_origin: Option<url::Origin>,
) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        if post_origin
            .as_ref()
            .is_some_and(|origin| attempt.url().origin() != *origin)
        {
            let to = match (
                attempt.url().host_str(),
                attempt.url().port_or_known_default(),
            ) {
                (Some(host), Some(port)) => format!("{host}:{port}"),
                (Some(host), None) => host.to_owned(),
                _ => "?".to_owned(),
            };
            return attempt.error(format!("a POST is not redirected to another site ({to})"));
        }
        if let Err(refused) = hop_guard.check_url(attempt.url()) {
            return attempt.error(refused);
        }
        let allowed = matches!(attempt.url().scheme(), "http" | "https")
            && (hosts.is_empty()
                || attempt.url().host_str().is_some_and(|h| {
                    host_allowed(h.trim_start_matches('[').trim_end_matches(']'), &hosts)
                }));
        if allowed {
            attempt.follow()
        } else {
            let to = attempt.url().host_str().unwrap_or("?").to_owned();
            attempt.error(format!("redirected to `{to}`, outside the allowed hosts"))
        }
    })
}

/// The call's headers (`headers`: an object of strings), none of them the connection's.
fn headers(args: &Value) -> Result<reqwest::header::HeaderMap, BuiltinError> {
    let mut map = reqwest::header::HeaderMap::new();
    let Some(headers) = args.get("headers").filter(|h| !h.is_null()) else {
        return Ok(map);
    };
    let headers = headers
        .as_object()
        .ok_or("`headers` must be an object of strings")?;
    for (name, value) in headers {
        let value = value
            .as_str()
            .ok_or_else(|| format!("header `{name}` must be a string"))?;
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("`{name}` is not a valid header name"))?;
        if CONNECTION_HEADERS.contains(&name.as_str()) {
            return Err(format!(
                "header `{name}` is the connection's, not the call's: the host is the URL's and the client sets the rest"
            ).into());
        }
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|_| format!("the value of header `{name}` is not valid"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// The response's body, at most `max` bytes, and whether more was cut.
async fn read_capped(
    response: &mut reqwest::Response,
    max: u64,
    url_text: &str,
) -> Result<(Vec<u8>, bool), BuiltinError> {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| describe(&e, url_text))? {
        let room = max - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// `body` as text, in the charset `content_type` names (UTF-8 when none or unknown), and
/// the encoding used.
fn decoded(body: &[u8], content_type: &str) -> (String, &'static encoding_rs::Encoding) {
    let charset = content_type
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("charset="))
        .next()
        .map(|c| c.trim_matches('"'));
    let encoding = charset
        .and_then(|c| encoding_rs::Encoding::for_label(c.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8);
    let (text, used, _) = encoding.decode(body);
    (text.into_owned(), used)
}

/// Headers a call may not set: `Host` would send the request to another site than the
/// URL's (and the card's) on a shared address; the others frame the connection itself.
const CONNECTION_HEADERS: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// A request error in one line, naming what failed (reqwest's own text can be vague).
fn describe(error: &reqwest::Error, url: &str) -> String {
    if let Some(refused) = NetGuard::refusal_in(error) {
        return format!("fetching {url} refused: {refused}");
    }
    let what = if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_redirect() {
        format!(
            "redirect refused: {}",
            std::error::Error::source(error)
                .map(ToString::to_string)
                .unwrap_or_else(|| error.to_string())
        )
    } else if error.is_connect() {
        "could not connect".to_owned()
    } else {
        error.to_string()
    };
    format!("fetching {url} failed: {what}")
}
