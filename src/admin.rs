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
    let mut out = String::with_capacity(text.len() + 16);
    let mut previous = ' ';
    for c in text.chars() {
        // An emoji's joiner or presentation selector right after an emoji (`👨‍💻`, `⚠️`,
        // `❤️‍🔥`): part of the picture. After anything else (a no-break space) it could carry
        // bits unseen, and is spelled.
        let joins = matches!(c, '\u{200d}' | '\u{fe0e}' | '\u{fe0f}')
            && (emoji(previous) || (previous == '\u{fe0f}' && c == '\u{200d}'));
        match c {
            c if !hidden(c) || joins => out.push(c),
            // DEL as `\u007f`: JSON leaves it raw, and a JSON line stays JSON (the other
            // ASCII controls never reach a terminal raw from JSON).
            c if u32::from(c) < 0x7f => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            // Past the first plane as JSON spells it (a surrogate pair): a tag character.
            c => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
        previous = c;
    }
    std::borrow::Cow::Owned(out)
}

/// Whether `c` is drawn as an emoji (the pictographic blocks, arrows and symbols).
fn emoji(c: char) -> bool {
    matches!(
        u32::from(c),
        0x1F000..=0x1FAFF | 0x2600..=0x27BF | 0x2300..=0x23FF | 0x2B00..=0x2BFF | 0x2190..=0x21FF
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

#[cfg(test)]
mod tests {
    use super::terminal;

    /// A JSON line with what JSON leaves raw (DEL, a C1 control, a bidi override) stays
    /// JSON with the same value once spelled; plain text keeps its new lines and tabs.
    #[test]
    fn what_reaches_a_terminal_is_spelled_and_a_json_line_stays_json() {
        let value =
            serde_json::json!({"summary": "a\u{7f}b\u{9b}8m\u{202e}c\u{1b}d\u{e0067}\u{e007f}"});
        let line = value.to_string();
        let shown = terminal(&line);
        assert!(
            !shown.contains(['\u{7f}', '\u{9b}', '\u{202e}', '\u{1b}', '\u{e0067}']),
            "{shown}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&shown).unwrap(),
            value
        );
        assert_eq!(terminal("a\tb\nc"), "a\tb\nc");
        assert_eq!(terminal("\u{1b}[8m"), r"\x1b[8m");
        // An emoji's joiner and selector stay; alone, after ASCII, a zero width is spelled.
        assert_eq!(terminal("👨\u{200d}💻 ⚠\u{fe0f}"), "👨\u{200d}💻 ⚠\u{fe0f}");
        assert_eq!(terminal("a\u{200d}b"), r"a\u200db");
        // Bits carried after a no-break space or a letter are spelled.
        assert_eq!(
            terminal("x\u{a0}\u{200d}\u{a0}\u{200c}"),
            "x\u{a0}\\u200d\u{a0}\\u200c"
        );
        assert_eq!(terminal("é\u{200d}"), r"é\u200d");
        assert_eq!(terminal("❤\u{fe0f}\u{200d}🔥"), "❤\u{fe0f}\u{200d}🔥");
    }
}
