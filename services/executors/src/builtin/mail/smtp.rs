//! `mail_send` over SMTP submission (lettre): TLS from the first byte or STARTTLS required
//! (never plain text), the account's login, one plain-text message with every recipient
//! the card showed and no other.

use std::str::FromStr;
use std::time::Duration;

use lettre::message::{Mailbox, Mailboxes, header::ContentType};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde_json::{Value, json};

use metnos_core::accounts::{MailAccount, Tls as Mode};

use super::super::{BuiltinError, meta, required, string_arg};
use super::Call;
use crate::observation::Observation;

/// The most recipients of one message (to and cc together).
const MAX_RECIPIENTS: usize = 50;
/// The most bytes of a message's text.
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// `mail_send`: one message from the account's address.
pub async fn send(args: &Value, call: &Call<'_>) -> Result<Observation, BuiltinError> {
    let (name, account) = call.account(args)?;
    let to = recipients(args, "to")?;
    if to.is_empty() {
        return Err("`to` names no recipient".into());
    }
    let cc = recipients(args, "cc")?;
    if to.len() + cc.len() > MAX_RECIPIENTS {
        return Err(format!("more than {MAX_RECIPIENTS} recipients in one message").into());
    }
    let subject = required(args, "subject")?;
    let body = required(args, "body")?;
    if body.len() > MAX_BODY_BYTES {
        return Err(format!("the text is over {MAX_BODY_BYTES} bytes").into());
    }
    let from = Mailbox::from_str(account.from()).map_err(|e| {
        format!(
            "the account's address `{}` is not an address: {e}",
            account.from()
        )
    })?;
    let id = message_id(&from);
    let mut builder = Message::builder()
        .from(from)
        .subject(subject)
        .message_id(Some(id.clone()))
        .header(ContentType::TEXT_PLAIN)
        .user_agent(concat!("Metnos/", env!("CARGO_PKG_VERSION")).to_owned());
    for m in &to {
        builder = builder.to(m.clone());
    }
    for m in &cc {
        builder = builder.cc(m.clone());
    }
    if let Some(reply) = string_arg(args, "in_reply_to")?.filter(|r| !r.trim().is_empty()) {
        let reply = reply.trim();
        let fine = reply.starts_with('<')
            && reply.ends_with('>')
            && reply.len() <= 998
            && !reply.contains(|c: char| c.is_control() || c.is_whitespace());
        if !fine {
            return Err("`in_reply_to` must be a Message-ID, <…@…>, as mail_read gave it".into());
        }
        builder = builder
            .in_reply_to(reply.to_owned())
            .references(reply.to_owned());
    }
    let message = builder
        .body(body.to_owned())
        .map_err(|e| format!("cannot build the message: {e}"))?;
    let transport = transport(account, call)?;
    let server = format!(
        "the SMTP server {}:{}",
        account.smtp_host,
        account.smtp_port()
    );
    let response = call
        .within(
            || format!("sending through {server}"),
            transport.send(message),
        )
        .await?;
    let shown = |list: &[Mailbox]| list.iter().map(Mailbox::to_string).collect::<Vec<_>>();
    Ok(Observation::success(
        json!({
            "sent": true,
            "message_id": id,
            "to": shown(&to),
            "cc": shown(&cc),
            "subject": subject,
        }),
        meta([
            ("account", json!(name)),
            ("server_reply", json!(response.code().to_string())),
        ]),
    ))
}

/// The addresses of the comma-separated list `key` (none when absent or blank).
fn recipients(args: &Value, key: &str) -> Result<Vec<Mailbox>, BuiltinError> {
    let Some(text) = string_arg(args, key)?.filter(|t| !t.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    if text.chars().any(char::is_control) {
        return Err(format!("`{key}` holds a control character").into());
    }
    let list = Mailboxes::from_str(text).map_err(|e| {
        format!(
            "`{key}` is not a list of addresses ({e}): write a@example.org, Bob <b@example.org>"
        )
    })?;
    let list: Vec<Mailbox> = list.into_iter().collect();
    // A quoted local part hides an address behind another ("<a@b>"@evil.example): what the
    // card shows and what the server is told must be plainly the same.
    if let Some(quoted) = list
        .iter()
        .find(|m| m.email.user().contains(['"', '\\', '<', '>']))
    {
        return Err(format!(
            "`{key}` holds a quoted address ({}): write plain addresses only",
            quoted.email
        )
        .into());
    }
    Ok(list)
}

/// A new Message-ID at the sender's domain.
fn message_id(from: &Mailbox) -> String {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).unwrap_or_default();
    format!("<{}.metnos@{}>", hex::encode(random), from.email.domain())
}

/// The account's SMTP submission transport: TLS required, its login.
pub(super) fn transport(
    account: &MailAccount,
    call: &Call<'_>,
) -> Result<AsyncSmtpTransport<Tokio1Executor>, BuiltinError> {
    let mut params = TlsParameters::builder(account.smtp_host.clone());
    if !account.ca_file.as_os_str().is_empty() {
        let pem = std::fs::read(&account.ca_file)
            .map_err(|e| format!("the CA file {}: {e}", account.ca_file.display()))?;
        let cert = Certificate::from_pem(&pem)
            .map_err(|e| format!("the CA file {}: {e}", account.ca_file.display()))?;
        params = params.add_root_certificate(cert);
    }
    let params = params
        .build_rustls()
        .map_err(|e| format!("TLS for {}: {e}", account.smtp_host))?;
    let tls = match account.smtp_tls {
        Mode::Implicit => Tls::Wrapper(params),
        Mode::Starttls => Tls::Required(params),
    };
    let password = super::password(&account.password_file)?;
    // Each command's wait ends well before the call's: a server that takes the message and
    // then stalls on QUIT leaves the send reported as sent, not as failed (and sent twice).
    let timeout = call
        .left()
        .saturating_sub(Duration::from_secs(3))
        .clamp(Duration::from_secs(1), Duration::from_secs(10));
    Ok(
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(account.smtp_host.clone())
            .port(account.smtp_port())
            .tls(tls)
            .credentials(Credentials::new(account.user.clone(), password))
            .timeout(Some(timeout))
            .build(),
    )
}
