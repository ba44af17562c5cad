//! What the admin commands share: finding a service, and saying what went wrong in one line.

use std::process::ExitCode;

use metnos_kit::client::{self, TracedChannel};
use metnos_kit::tls::{Identity, Tls};
use metnos_kit::{Config, ServiceName};

use crate::runfile::service_urls;

/// The owner's certificate: what every command presents to the services.
pub fn owner_tls(config: &Config) -> Result<Tls, ExitCode> {
    Tls::load(config, Identity::Owner).map_err(|e| {
        eprintln!("metnos: the owner's certificate: {e}");
        ExitCode::FAILURE
    })
}

/// A traced channel to `service`, found as every command finds it (run file, else config),
/// presenting the owner's certificate.
pub fn connect(config: &Config, service: ServiceName) -> Result<(TracedChannel, String), ExitCode> {
    let url = service_urls(config)
        .remove(&service)
        .unwrap_or_else(|| config.service_url(service));
    let tls = owner_tls(config)?;
    match client::channel(&tls, Identity::of(service), &url) {
        Ok(channel) => Ok((channel, url)),
        Err(e) => {
            eprintln!("metnos: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// Prints a failed call as one line and returns exit code 1.
pub fn failed(service: ServiceName, url: &str, status: &tonic::Status) -> ExitCode {
    if status.code() == tonic::Code::Unavailable {
        let cause = root_cause(status);
        eprintln!(
            "metnos: the {service} service at {url} is unavailable ({cause}); is `metnos up` running?"
        );
    } else {
        eprintln!("metnos: {service}: {}", terminal(status.message()));
    }
    ExitCode::FAILURE
}

fn root_cause(status: &tonic::Status) -> String {
    let mut cause = status.message().to_owned();
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(err) = source {
        cause = err.to_string();
        source = err.source();
    }
    cause
}

/// Prints one JSON value on its own line.
pub fn print_line(value: &serde_json::Value) {
    say(&value.to_string());
}

/// `text` safe for a terminal: every control character but a new line and a tab spelled
/// (`\x1b`, `\u009b`), so a page or a model's words cannot drive the terminal (set the
/// clipboard with OSC 52, hide what follows, erase the lines above a card); and what a
/// person cannot see (a bidi override, a blank letter) spelled too (`\u202e`).
pub fn terminal(text: &str) -> std::borrow::Cow<'_, str> {
    let hidden =
        |c: char| (c.is_control() && c != '\n' && c != '\t') || metnos_core::html::is_invisible(c);
    if !text.contains(hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| match c {
                c if !hidden(c) => c.to_string(),
                c if u32::from(c) < 0x80 => format!("\\x{:02x}", u32::from(c)),
                c if u32::from(c) <= 0xFFFF => format!("\\u{:04x}", u32::from(c)),
                c => format!("\\U{:08x}", u32::from(c)),
            })
            .collect(),
    )
}

/// Writes a line to stdout, safe for a terminal ([`terminal`]). A closed pipe (`metnos …
/// | head -1`) ends the command quietly with success, as Unix tools do, instead of a panic.
pub fn say(line: &str) {
    use std::io::Write;
    let line = terminal(line);
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("metnos: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}
