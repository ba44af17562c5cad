//! `mail_search` and `mail_read` over IMAP (async-imap): TLS from the first byte or after
//! STARTTLS, the folder opened read-only (`EXAMINE`: reading sets no flag), headers only
//! for a search, the first bytes of one message for a read. Every byte the server sends
//! counts against a budget, so a server that lies about sizes cannot fill the memory.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::TryStreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use metnos_core::accounts::{MailAccount, Tls};

use super::super::{BuiltinError, count_arg, meta};
use super::{Call, message};
use crate::observation::Observation;

/// Messages a search lists by default, and at most.
const DEFAULT_LIMIT: u64 = 20;
const MAX_LIMIT: u64 = 100;
/// Text a read returns by default.
const DEFAULT_READ_BYTES: u64 = 64 * 1024;
/// The most of a message's raw bytes fetched for a read (its text is at the start; what
/// follows is mostly attachments, which are listed from their headers).
const MAX_RAW_BYTES: u64 = 8 * 1024 * 1024;
/// How many of the newest UIDs a search looks at first, then next, before the whole folder.
const SEARCH_WINDOWS: [u32; 2] = [500, 5000];

/// `criteria` limited to the `window` newest UIDs below `uid_next` (CHARSET stays first).
fn within_window(criteria: &str, uid_next: u32, window: u32) -> String {
    if window >= uid_next {
        return criteria.to_owned();
    }
    let range = format!("UID {}:*", uid_next - window);
    match criteria.strip_prefix("CHARSET UTF-8 ") {
        Some(rest) => format!("CHARSET UTF-8 {range} {rest}"),
        None => format!("{range} {criteria}"),
    }
}

/// The most bytes of one message's header a search reads (a spam header block of
/// megabytes does not crowd out the others).
const MAX_HEADER_BYTES: u64 = 16 * 1024;
/// What the server may send in a whole call beyond what was asked for.
const SLACK_BYTES: u64 = 1024 * 1024;

type Session = async_imap::Session<Bounded<tokio_rustls::client::TlsStream<TcpStream>>>;

/// `mail_search`: the newest messages matching the query, headers only.
pub async fn search(args: &Value, call: &Call<'_>) -> Result<Observation, BuiltinError> {
    let (name, account) = call.account(args)?;
    let criteria = criteria(args.get("query"))?;
    let limit = count_arg(args, "limit")?
        .unwrap_or(DEFAULT_LIMIT)
        .clamp(1, MAX_LIMIT);
    let header_budget = MAX_LIMIT * MAX_HEADER_BYTES;
    let (mut session, mailbox) = connect(account, call, header_budget).await?;
    let host = server(account);
    // The newest messages first: a search over the last few hundred is answered at once, a
    // folder of years is searched whole only when they hold too few.
    let uid_next = mailbox.uid_next.unwrap_or(0);
    let mut found = std::collections::HashSet::new();
    let mut searched = "all";
    for window in SEARCH_WINDOWS.iter().copied().chain([u32::MAX]) {
        let scoped = within_window(&criteria, uid_next, window);
        found = call
            .within(|| format!("searching {host}"), session.uid_search(&scoped))
            .await?;
        if found.len() as u64 >= limit || window >= uid_next {
            if window < uid_next {
                searched = if window == SEARCH_WINDOWS[0] {
                    "newest 500"
                } else {
                    "newest 5000"
                };
            }
            break;
        }
    }
    let total = found.len();
    let mut uids: Vec<u32> = found.into_iter().collect();
    uids.sort_unstable_by(|a, b| b.cmp(a));
    uids.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let mut messages = Vec::new();
    if !uids.is_empty() {
        let set = uids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let fetches: Vec<async_imap::types::Fetch> = call
            .within(|| format!("fetching headers from {host}"), async {
                session
                    .uid_fetch(
                        &set,
                        format!("(UID FLAGS RFC822.SIZE BODY.PEEK[HEADER]<0.{MAX_HEADER_BYTES}>)"),
                    )
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        for fetch in &fetches {
            let Some(uid) = fetch.uid else { continue };
            let seen = fetch
                .flags()
                .any(|f| matches!(f, async_imap::types::Flag::Seen));
            let mut summary = message::summary(fetch.header().unwrap_or_default());
            summary.insert("id".into(), json!(uid));
            summary.insert("unseen".into(), json!(!seen));
            summary.insert("size".into(), json!(fetch.size));
            messages.push((uid, Value::Object(summary)));
        }
        messages.sort_by_key(|m| std::cmp::Reverse(m.0));
    }
    logout(&mut session, call).await;
    let senders = senders(messages.iter().map(|(_, m)| m));
    let listed = messages.len();
    Ok(Observation::success(
        Value::Array(messages.into_iter().map(|(_, m)| m).collect()),
        meta([
            ("account", json!(name)),
            ("mailbox", json!(account.mailbox())),
            ("matched", json!(total)),
            ("searched", json!(searched)),
            ("messages_in_folder", json!(mailbox.exists)),
            ("listed", json!(listed)),
            ("senders", json!(senders)),
        ]),
    ))
}

/// `mail_read`: one message's text and its attachments' names.
pub async fn read(args: &Value, call: &Call<'_>) -> Result<Observation, BuiltinError> {
    let (name, account) = call.account(args)?;
    let uid = count_arg(args, "id")?
        .filter(|&id| (1..=u64::from(u32::MAX)).contains(&id))
        .ok_or_else(|| {
            BuiltinError::Refused("`id` must be a message id from mail_search".into())
        })?;
    let ceiling = (call.context.max_output_bytes / 2).max(1);
    let max_text = count_arg(args, "max_bytes")?
        .unwrap_or(DEFAULT_READ_BYTES)
        .min(ceiling);
    let raw = max_text.saturating_mul(4).clamp(256 * 1024, MAX_RAW_BYTES);
    let (mut session, _) = connect(account, call, raw).await?;
    let host = server(account);
    let fetches: Vec<async_imap::types::Fetch> = call
        .within(|| format!("fetching message {uid} from {host}"), async {
            session
                .uid_fetch(
                    uid.to_string(),
                    format!("(UID RFC822.SIZE BODY.PEEK[]<0.{raw}>)"),
                )
                .await?
                .try_collect()
                .await
        })
        .await?;
    logout(&mut session, call).await;
    let fetch = fetches
        .iter()
        .find(|f| f.uid == Some(uid as u32))
        .ok_or_else(|| format!("no message {uid} in {} of `{name}`", account.mailbox()))?;
    let bytes = fetch.body().unwrap_or_default();
    let size = fetch.size.map(u64::from);
    let cut_raw = size.is_some_and(|s| s > bytes.len() as u64) || bytes.len() as u64 >= raw;
    let mut read = message::read(bytes, usize::try_from(max_text).unwrap_or(usize::MAX));
    let sender = read
        .get("from_address")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    read.insert("id".into(), json!(uid));
    Ok(Observation::success(
        Value::Object(read),
        meta([
            ("account", json!(name)),
            ("mailbox", json!(account.mailbox())),
            ("size", json!(size)),
            ("fetched_bytes", json!(bytes.len())),
            ("message_cut", json!(cut_raw)),
            ("senders", json!([sender])),
        ]),
    ))
}

/// The distinct sender addresses of `messages`, as provenance labels them.
fn senders<'m>(messages: impl Iterator<Item = &'m Value>) -> Vec<String> {
    let mut senders: Vec<String> = messages
        .filter_map(|m| m.get("from_address").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    senders.sort();
    senders.dedup();
    senders
}

fn server(account: &MailAccount) -> String {
    format!(
        "the IMAP server {}:{}",
        account.imap_host,
        account.imap_port()
    )
}

/// Logs in to `account`'s IMAP server and opens its folder read-only; `budget` is how many
/// bytes the call's answers may take beyond the slack.
pub(super) async fn connect(
    account: &MailAccount,
    call: &Call<'_>,
    budget: u64,
) -> Result<(Session, async_imap::types::Mailbox), BuiltinError> {
    let host = server(account);
    let password = super::password(&account.password_file)?;
    let tls = super::tls_config(&account.ca_file)?;
    let stream = call
        .within(
            || format!("connecting to {host}"),
            open_tls(account, tls, budget.saturating_add(SLACK_BYTES)),
        )
        .await?;
    let client = async_imap::Client::new(stream);
    let mut session = call
        .within(
            || format!("logging in to {host} as {}", account.user),
            async {
                client
                    .login(&account.user, &password)
                    .await
                    .map_err(|(e, _)| e)
            },
        )
        .await?;
    drop(password);
    let mailbox = call
        .within(
            || format!("opening the folder `{}` on {host}", account.mailbox()),
            session.examine(account.mailbox()),
        )
        .await?;
    Ok((session, mailbox))
}

/// A TLS connection to the IMAP server, its greeting read: from the first byte, or after
/// STARTTLS on a plain one (nothing but STARTTLS is said in the clear).
pub(crate) async fn open_tls(
    account: &MailAccount,
    tls: std::sync::Arc<rustls::ClientConfig>,
    budget: u64,
) -> Result<Bounded<tokio_rustls::client::TlsStream<TcpStream>>, String> {
    let port = account.imap_port();
    let tcp = TcpStream::connect((account.imap_host.as_str(), port))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls_pki_types::ServerName::try_from(account.imap_host.clone())
        .map_err(|e| format!("`{}` is not a host name: {e}", account.imap_host))?;
    let connector = tokio_rustls::TlsConnector::from(tls);
    let tcp = match account.imap_tls {
        Tls::Implicit => tcp,
        Tls::Starttls => {
            let mut plain = async_imap::Client::new(Bounded::new(tcp, 64 * 1024));
            greeting(&mut plain).await?;
            plain
                .run_command_and_check_ok("STARTTLS", None)
                .await
                .map_err(|e| format!("STARTTLS refused ({e}): the server offers no TLS here"))?;
            plain.into_inner().inner
        }
    };
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let mut client = async_imap::Client::new(Bounded::new(tls, budget));
    if account.imap_tls == Tls::Implicit {
        greeting(&mut client).await?;
    }
    Ok(client.into_inner())
}

async fn greeting<T>(client: &mut async_imap::Client<T>) -> Result<(), String>
where
    T: AsyncRead + AsyncWrite + Unpin + std::fmt::Debug + Send,
{
    match client.read_response().await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("the server closed the connection before its greeting".into()),
        Err(e) => Err(format!("no greeting: {e}")),
    }
}

async fn logout(session: &mut Session, call: &Call<'_>) {
    // Said politely and briefly: the call's answer does not wait on it.
    let left = call.left().min(std::time::Duration::from_secs(2));
    let _ = tokio::time::timeout(left, session.logout()).await;
}

/// The IMAP SEARCH criteria of `query` (`ALL` when empty). Every string is quoted with its
/// quotes and backslashes escaped; a line break or other control character is refused, so
/// nothing the model writes becomes a command of its own.
pub(crate) fn criteria(query: Option<&Value>) -> Result<String, BuiltinError> {
    let Some(query) = query.filter(|q| !q.is_null()) else {
        return Ok("ALL".into());
    };
    let query = query
        .as_object()
        .ok_or_else(|| BuiltinError::Refused("`query` must be an object".into()))?;
    let mut parts = Vec::new();
    let mut utf8 = false;
    for (key, imap_key) in [("from", "FROM"), ("to", "TO"), ("subject", "SUBJECT")] {
        let Some(value) = query.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        let text = value
            .as_str()
            .ok_or_else(|| BuiltinError::NotString(format!("query.{key}")))?;
        if text.chars().any(char::is_control) {
            return Err(format!("`query.{key}` holds a control character").into());
        }
        utf8 |= !text.is_ascii();
        let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
        parts.push(format!("{imap_key} \"{quoted}\""));
    }
    if let Some(since) = query.get("since").filter(|v| !v.is_null()) {
        let text = since
            .as_str()
            .ok_or_else(|| BuiltinError::NotString("query.since".into()))?;
        let date: jiff::civil::Date = text.parse().map_err(|_| {
            format!(
                "`query.since` must be a day, YYYY-MM-DD, not `{}`",
                cut_shown(text)
            )
        })?;
        parts.push(format!("SINCE {}", date.strftime("%-d-%b-%Y")));
    }
    match query.get("unseen") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => parts.push("UNSEEN".into()),
        Some(_) => return Err("`query.unseen` must be true or false".into()),
    }
    if let Some(unknown) = query
        .keys()
        .find(|k| !["from", "to", "subject", "since", "unseen"].contains(&k.as_str()))
    {
        return Err(format!("`query.{}` is not a search key", cut_shown(unknown)).into());
    }
    let parts = if parts.is_empty() {
        "ALL".to_owned()
    } else {
        parts.join(" ")
    };
    Ok(if utf8 {
        format!("CHARSET UTF-8 {parts}")
    } else {
        parts
    })
}

fn cut_shown(text: &str) -> String {
    text.chars().take(40).collect()
}

/// A stream that refuses to read more than its budget: what a server sends past it ends
/// the connection with an error, whatever sizes it announced.
#[derive(Debug)]
pub(crate) struct Bounded<S> {
    pub inner: S,
    left: u64,
}

impl<S> Bounded<S> {
    pub fn new(inner: S, budget: u64) -> Bounded<S> {
        Bounded {
            inner,
            left: budget,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.left == 0 {
            return Poll::Ready(Err(std::io::Error::other(
                "the server sent more than this call may read (a message larger than it said?)",
            )));
        }
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = (buf.filled().len() - before) as u64;
        self.left = self.left.saturating_sub(read);
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_looks_at_the_newest_uids_first_with_its_charset_first() {
        assert_eq!(within_window("ALL", 10_001, 500), "UID 9501:* ALL");
        assert_eq!(
            within_window("CHARSET UTF-8 FROM \"Jürgen\"", 10_001, 500),
            "CHARSET UTF-8 UID 9501:* FROM \"Jürgen\""
        );
        assert_eq!(within_window("UNSEEN", 300, 500), "UNSEEN");
    }

    #[test]
    fn a_query_becomes_quoted_criteria_and_never_a_command() {
        assert_eq!(criteria(None).unwrap(), "ALL");
        assert_eq!(
            criteria(Some(
                &json!({"from": "plumber", "since": "2026-03-05", "unseen": true})
            ))
            .unwrap(),
            "FROM \"plumber\" SINCE 5-Mar-2026 UNSEEN"
        );
        assert_eq!(
            criteria(Some(&json!({"subject": "a \"b\" \\ c"}))).unwrap(),
            "SUBJECT \"a \\\"b\\\" \\\\ c\""
        );
        assert_eq!(
            criteria(Some(&json!({"from": "Jürgen"}))).unwrap(),
            "CHARSET UTF-8 FROM \"Jürgen\""
        );
        for bad in [
            json!({"from": "x\"\r\nA1 DELETE INBOX"}),
            json!({"since": "yesterday"}),
            json!({"unseen": "yes"}),
            json!({"body": "x"}),
        ] {
            assert!(criteria(Some(&bad)).is_err(), "{bad}");
        }
    }
}
