//! The mail and calendar built-ins, in `metnos-mail`: `mail_search` and `mail_read` over
//! IMAP, `mail_send` over SMTP submission, `calendar_list` over CalDAV or an ICS file, and
//! `calendar_add` over CalDAV.
//!
//! Each call finds its account or calendar by name in the context the runner gives this
//! program only, reads the password from its file for this one call (never from the
//! environment, never shown), speaks TLS with the public roots plus the account's own CA,
//! and keeps within the call's time: a server that hangs is named, not waited for.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use metnos_core::accounts::{CalendarSource, MailAccount};

use super::{BuiltinError, required};
use crate::observation::{ExecContext, Observation};

mod calendar;
pub mod doctor;
mod events;
mod imap;
mod message;
mod smtp;

/// The most memory the mail program may map: a hostile server or calendar is refused
/// before it can make the machine swap.
const MAX_MEMORY_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// Runs the mail built-in `name`.
pub fn run(name: &str, args: &Value, context: &ExecContext) -> Observation {
    harden();
    run_here(name, args, context)
}

/// [`run`] in this process as it is (`metnos doctor`'s checks: not the mail program).
pub(crate) fn run_here(name: &str, args: &Value, context: &ExecContext) -> Observation {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return Observation::failure(format!("cannot start the mail client: {e}")),
    };
    let call = Call::new(context);
    let outcome = runtime.block_on(async {
        match name {
            "mail_search" => imap::search(args, &call).await,
            "mail_read" => imap::read(args, &call).await,
            "mail_send" => smtp::send(args, &call).await,
            "calendar_list" => calendar::list(args, &call).await,
            "calendar_add" => calendar::add(args, &call).await,
            other => Ok(super::elsewhere(super::MAIL_PROGRAM, other)),
        }
    });
    // A name lookup still blocked in its thread is not waited for.
    runtime.shutdown_background();
    outcome.unwrap_or_else(|error| Observation::failure(error.to_string()))
}

/// This process holds a password for the call: it is never dumped (no core file, no
/// other process of the user attaching to it), and its memory is bounded.
fn harden() {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let _ =
            rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
        for (resource, limit) in [(Resource::Core, 0), (Resource::As, MAX_MEMORY_BYTES)] {
            let held = getrlimit(resource).maximum;
            let limit = held.map_or(limit, |h| limit.min(h));
            let _ = setrlimit(
                resource,
                Rlimit {
                    current: Some(limit),
                    maximum: Some(limit),
                },
            );
        }
    }
}

/// One call: its context and when it must be done by.
pub(crate) struct Call<'a> {
    pub context: &'a ExecContext,
    deadline: tokio::time::Instant,
}

impl<'a> Call<'a> {
    fn new(context: &'a ExecContext) -> Call<'a> {
        // A second before the runner's own timeout, so the error names what hung.
        let seconds = context.timeout_seconds.saturating_sub(1).max(1);
        Call {
            context,
            deadline: tokio::time::Instant::now() + Duration::from_secs(seconds),
        }
    }

    /// The time left to the call.
    pub fn left(&self) -> Duration {
        self.deadline
            .saturating_duration_since(tokio::time::Instant::now())
    }

    /// Runs `step` within the call's time; `what` names the step in the error
    /// ("the IMAP server imap.example.org:993 did not answer the login").
    pub async fn within<T, E: std::fmt::Display>(
        &self,
        what: impl FnOnce() -> String,
        step: impl Future<Output = Result<T, E>>,
    ) -> Result<T, BuiltinError> {
        match tokio::time::timeout_at(self.deadline, step).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(BuiltinError::Refused(format!("{}: {e}", what()))),
            Err(_) => Err(BuiltinError::Refused(format!(
                "{}: no answer within {} s, gave up",
                what(),
                self.context.timeout_seconds.saturating_sub(1).max(1)
            ))),
        }
    }

    /// The mail account the call names.
    pub fn account(&self, args: &Value) -> Result<(&'a str, &'a MailAccount), BuiltinError> {
        let name = required(args, "account")?;
        let accounts = &self.context.accounts.mail;
        accounts
            .get_key_value(name)
            .map(|(k, v)| (k.as_str(), v))
            .ok_or_else(|| {
                unknown(
                    "mail account",
                    name,
                    accounts.keys(),
                    "[mail.accounts.<name>]",
                )
            })
    }

    /// The calendar the call names.
    pub fn source(&self, args: &Value) -> Result<(&'a str, &'a CalendarSource), BuiltinError> {
        let name = required(args, "source")?;
        let sources = &self.context.accounts.calendar;
        sources
            .get_key_value(name)
            .map(|(k, v)| (k.as_str(), v))
            .ok_or_else(|| {
                unknown(
                    "calendar",
                    name,
                    sources.keys(),
                    "[calendar.sources.<name>]",
                )
            })
    }
}

fn unknown<'k>(
    what: &str,
    name: &str,
    known: impl Iterator<Item = &'k String>,
    section: &str,
) -> BuiltinError {
    let known: Vec<&str> = known.map(String::as_str).collect();
    let name: String = name.chars().take(64).collect();
    BuiltinError::Refused(if known.is_empty() {
        format!("no {what} is configured: add {section} to metnos.toml")
    } else {
        format!("no {what} `{name}`; configured: {}", known.join(", "))
    })
}

/// The password in `file` (its first line).
pub(crate) fn password(file: &Path) -> Result<String, BuiltinError> {
    crate::secret::first_line(file, "the password file").map_err(BuiltinError::Refused)
}

/// TLS for a server of the person's: the public roots, and the certificates of `ca_file`
/// when one is named (a home server's own CA).
pub(crate) fn tls_config(ca_file: &Path) -> Result<Arc<rustls::ClientConfig>, BuiltinError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in extra_roots(ca_file)? {
        roots
            .add(cert)
            .map_err(|e| format!("the CA file {}: {e}", ca_file.display()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The certificates of `ca_file` (none when it is not named).
pub(crate) fn extra_roots(
    ca_file: &Path,
) -> Result<Vec<rustls_pki_types::CertificateDer<'static>>, BuiltinError> {
    use rustls_pki_types::pem::PemObject;
    if ca_file.as_os_str().is_empty() {
        return Ok(Vec::new());
    }
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(ca_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("the CA file {}: {e}", ca_file.display()))?;
    if certs.is_empty() {
        return Err(format!("the CA file {} holds no certificate", ca_file.display()).into());
    }
    Ok(certs)
}

/// `text` cut to at most `max` bytes on a character boundary, and whether it was cut.
pub(crate) fn cut(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}
