//! What `metnos doctor` checks of each mail account and calendar: a real login over TLS,
//! as a call would make it (IMAP: the folder opened read-only and its capabilities; SMTP:
//! the submission login, no mail sent; a calendar: the next week listed), and for each
//! failure what to change.

use std::time::Duration;

use serde_json::json;

use metnos_core::accounts::{Accounts, Tls};

use super::Call;
use crate::observation::ExecContext;

/// How long one check may take.
const CHECK_SECONDS: u64 = 15;

/// One check's outcome: what works, or why not and what to change.
pub type Outcome = Result<String, (String, String)>;

fn context(accounts: Accounts) -> ExecContext {
    ExecContext {
        timeout_seconds: CHECK_SECONDS + 1,
        accounts,
        ..ExecContext::default()
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, (String, String)> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| (format!("cannot start the mail client: {e}"), String::new()))
}

/// What to change for a failure `why` of a server reached at `host_key` (the config keys).
fn fix_for(why: &str, keys: &str, tls_key: &str) -> String {
    let lower = why.to_lowercase();
    if lower.contains("certificate") || lower.contains("unknownissuer") {
        format!(
            "the server's certificate is not trusted: set {keys}.ca_file to the PEM of the CA that signed it"
        )
    } else if lower.contains("password file") {
        format!("write the password on the first line of {keys}.password_file and `chmod 600` it")
    } else if lower.contains("authentic") || lower.contains("535") || lower.contains("logging in") {
        format!("check {keys}.user and the password in {keys}.password_file")
    } else if lower.contains("starttls") {
        format!(
            "the server offers no STARTTLS there: set {keys}.{tls_key} = \"implicit\" and its TLS port"
        )
    } else if lower.contains("refused")
        || lower.contains("no answer")
        || lower.contains("connecting")
    {
        format!("check {keys}'s host and port, and that the server runs")
    } else {
        format!("check {keys} in metnos.toml")
    }
}

/// The IMAP and SMTP checks of the mail account `name`.
pub fn mail_account(name: &str, accounts: &Accounts) -> [(String, Outcome); 2] {
    let keys = format!("mail.accounts.{name}");
    let checks = runtime().map(|rt| {
        let context = context(accounts.clone());
        let call = Call::new(&context);
        rt.block_on(async {
            let imap = imap(name, &call).await;
            let smtp = smtp(name, &call).await;
            (imap, smtp)
        })
    });
    let (imap, smtp) = match checks {
        Ok(both) => both,
        Err(e) => (Err(e.0.clone()), Err(e.0)),
    };
    [
        (
            format!("mail:{name}:imap"),
            imap.map_err(|why| {
                let fix = fix_for(&why, &keys, "imap_tls");
                (why, fix)
            }),
        ),
        (
            format!("mail:{name}:smtp"),
            smtp.map_err(|why| {
                let fix = fix_for(&why, &keys, "smtp_tls");
                (why, fix)
            }),
        ),
    ]
}

async fn imap(name: &str, call: &Call<'_>) -> Result<String, String> {
    let (_, account) = call
        .account(&json!({"account": name}))
        .map_err(|e| e.to_string())?;
    let (mut session, _) = super::imap::connect(account, call, 1024 * 1024)
        .await
        .map_err(|e| e.to_string())?;
    let capabilities = call
        .within(
            || "asking for the capabilities".to_owned(),
            session.capabilities(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut names: Vec<String> = capabilities.iter().map(|c| format!("{c:?}")).collect();
    names.sort();
    let found = call
        .within(|| "counting the messages".to_owned(), async {
            session.uid_search("ALL").await
        })
        .await
        .map(|uids| uids.len())
        .map_err(|e| e.to_string())?;
    let _ = tokio::time::timeout(Duration::from_secs(2), session.logout()).await;
    Ok(format!(
        "logged in to {}:{} as {} over {}; `{}` has {found} message(s); {} capabilities",
        account.imap_host,
        account.imap_port(),
        account.user,
        tls_word(account.imap_tls),
        account.mailbox(),
        names.len()
    ))
}

async fn smtp(name: &str, call: &Call<'_>) -> Result<String, String> {
    let (_, account) = call
        .account(&json!({"account": name}))
        .map_err(|e| e.to_string())?;
    let transport = super::smtp::transport(account, call).map_err(|e| e.to_string())?;
    let server = format!(
        "the SMTP server {}:{}",
        account.smtp_host,
        account.smtp_port()
    );
    let connected = call
        .within(
            || format!("logging in to {server}"),
            transport.test_connection(),
        )
        .await
        .map_err(|e| e.to_string())?;
    if !connected {
        return Err(format!("{server} closed the connection after the login"));
    }
    Ok(format!(
        "logged in to {}:{} as {} over {} (nothing sent)",
        account.smtp_host,
        account.smtp_port(),
        account.user,
        tls_word(account.smtp_tls)
    ))
}

fn tls_word(tls: Tls) -> &'static str {
    match tls {
        Tls::Implicit => "TLS",
        Tls::Starttls => "STARTTLS",
    }
}

/// The check of the calendar `name`: its next week listed.
pub fn calendar(name: &str, accounts: &Accounts) -> (String, Outcome) {
    let check = format!("calendar:{name}");
    let keys = format!("calendar.sources.{name}");
    let observation = super::run_here(
        "calendar_list",
        &json!({"source": name}),
        &context(accounts.clone()),
    );
    let outcome = if observation.ok {
        let count = observation
            .content
            .as_ref()
            .and_then(|c| c.as_array())
            .map_or(0, Vec::len);
        Ok(format!("read; {count} event(s) in the next week"))
    } else {
        let why = observation.error.unwrap_or_default();
        let fix = fix_for(&why, &keys, "caldav_url");
        Err((why, fix))
    };
    (check, outcome)
}
