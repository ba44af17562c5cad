//! The page's HTML, rendered with maud (auto-escaping): the layout every page shares, the
//! table and the pill, text from outside shown as [`Shown`], and the two languages.

use std::fmt::Write as _;

use maud::{DOCTYPE, Markup, Render, html};

/// Text from outside (a service's, a person's): escaped as every text is, single quotes
/// too, and its control characters (a log line's, a terminal's escapes) shown, not obeyed.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(pub &'a str);

impl Render for Shown<'_> {
    fn render_to(&self, buffer: &mut String) {
        buffer.push_str(&esc(self.0));
    }
}

/// The escaping behind [`Shown`]: the channels' ([`metnos_core::html::escape_html`]), and
/// single quotes and control characters too.
fn esc(text: &str) -> String {
    let escaped = metnos_core::html::escape_html(text);
    let mut out = String::with_capacity(escaped.len());
    for c in escaped.chars() {
        match c {
            '\'' => out.push_str("&#39;"),
            // Control characters (a log line's, a terminal's escapes) are shown, not obeyed.
            c if c.is_control() && c != '\n' && c != '\t' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The page's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    En,
    It,
}

impl Lang {
    /// `web.lang` when set, else the browser's first language it or en.
    pub fn choose(configured: &str, accept_language: Option<&str>) -> Lang {
        match configured {
            "it" => return Lang::It,
            "en" => return Lang::En,
            _ => {}
        }
        let first = accept_language
            .and_then(|a| a.split(',').next())
            .map(|l| l.trim().to_ascii_lowercase())
            .unwrap_or_default();
        if first.starts_with("it") {
            Lang::It
        } else {
            Lang::En
        }
    }

    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::It => "it",
        }
    }

    /// The text in this language.
    pub fn t(self, en: &'static str, it: &'static str) -> &'static str {
        match self {
            Lang::En => en,
            Lang::It => it,
        }
    }
}

/// The pages of the navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Turns,
    Approvals,
    Grants,
    Verdicts,
    Telos,
    Memory,
    Tools,
    Record,
    Replay,
    None,
}

impl Nav {
    const ALL: [Nav; 9] = [
        Nav::Turns,
        Nav::Approvals,
        Nav::Grants,
        Nav::Verdicts,
        Nav::Telos,
        Nav::Memory,
        Nav::Tools,
        Nav::Record,
        Nav::Replay,
    ];

    fn href(self) -> &'static str {
        match self {
            Nav::Turns | Nav::None => "/turns",
            Nav::Approvals => "/approvals",
            Nav::Grants => "/grants",
            Nav::Verdicts => "/verdicts",
            Nav::Telos => "/telos",
            Nav::Memory => "/memory",
            Nav::Tools => "/tools",
            Nav::Record => "/record",
            Nav::Replay => "/replay",
        }
    }

    fn label(self, l: Lang) -> &'static str {
        match self {
            Nav::Turns | Nav::None => l.t("Turns", "Turni"),
            Nav::Approvals => l.t("Approvals", "Approvazioni"),
            Nav::Grants => l.t("Grants", "Permessi"),
            Nav::Verdicts => l.t("Verdicts", "Verdetti"),
            Nav::Telos => l.t("Telos & schedules", "Telos e pianificazioni"),
            Nav::Memory => l.t("Memory", "Memoria"),
            Nav::Tools => l.t("Tools", "Strumenti"),
            Nav::Record => l.t("Record", "Registro"),
            Nav::Replay => l.t("What-if", "E se…"),
        }
    }
}

/// A whole page: the navigation, `body`, and a sign-out form carrying `csrf` when signed
/// in.
pub fn page(l: Lang, active: Nav, title: &str, csrf: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang=(l.code()) {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (Shown(title)) " · Metnos" }
                link rel="stylesheet" href="/static/app.css";
                script src="/static/app.js" defer {}
            }
            body {
                header {
                    strong.brand { "Metnos" }
                    nav {
                        @if csrf.is_some() {
                            @for item in Nav::ALL {
                                a href=(item.href()) aria-current=[(item == active).then_some("page")] {
                                    (item.label(l))
                                }
                            }
                        }
                    }
                    @if let Some(csrf) = csrf {
                        form.signout method="post" action="/logout" {
                            input type="hidden" name="csrf" value=(Shown(csrf));
                            button type="submit" { (l.t("Sign out", "Esci")) }
                        }
                    }
                }
                main {
                    h1 { (Shown(title)) }
                    (body)
                }
            }
        }
    }
}

/// A date and time, in UTC, to the second (`2026-11-26 20:41:07`).
pub fn when(ms: i64) -> String {
    let text = metnos_kit::time::rfc3339(ms);
    text.get(..19).unwrap_or(&text).replace('T', " ")
}

/// A table: the header cells (plain text) and rows of cells.
pub fn table(head: &[&str], rows: &[Vec<Markup>], class: &str) -> Markup {
    html! {
        div.scroll {
            table class=(class) {
                thead { tr { @for h in head { th { (h) } } } }
                tbody {
                    @for row in rows {
                        tr { @for cell in row { td { (cell) } } }
                    }
                }
            }
        }
    }
}

/// A small labelled mark (`<span class="pill k-…">`).
pub fn pill(kind: &str, text: &str) -> Markup {
    let class: String = kind
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    html! { span class={ "pill k-" (class) } { (Shown(text)) } }
}

/// The stylesheet: readable on a phone, no external fonts.
pub const CSS: &str = r#"
:root{color-scheme:light dark;--fg:#1d1d1f;--bg:#fafafa;--muted:#6b6b70;--line:#d8d8dc;--ok:#1b7f3b;--warn:#a86400;--bad:#b3261e;--card:#fff}
@media (prefers-color-scheme:dark){:root{--fg:#eee;--bg:#151517;--muted:#a0a0a8;--line:#3a3a40;--card:#1f1f23}}
*{box-sizing:border-box}body{margin:0;font:15px/1.45 system-ui,sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:center;padding:.6rem 1rem;border-bottom:1px solid var(--line);background:var(--card)}
nav{display:flex;flex-wrap:wrap;gap:.25rem .8rem}nav a{color:inherit;text-decoration:none;padding:.15rem 0}nav a[aria-current]{font-weight:600;border-bottom:2px solid currentColor}
.signout{margin-left:auto}main{padding:1rem;max-width:72rem;margin:0 auto}h1{font-size:1.3rem;margin:.2rem 0 1rem}h2{font-size:1.1rem;margin:1.4rem 0 .5rem}
.scroll{overflow-x:auto}table{border-collapse:collapse;width:100%;font-size:.92rem}th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid var(--line);vertical-align:top}
.turn{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.6rem .8rem;margin:0 0 .7rem;overflow-wrap:anywhere}.turn header{padding:0;border:0;background:none;font-size:.92rem}
.steps{margin:.4rem 0 0;padding-left:1.3rem}.steps li{margin:.25rem 0}.muted{color:var(--muted)}
.pill{display:inline-block;padding:0 .45rem;border-radius:999px;border:1px solid currentColor;font-size:.8rem;white-space:nowrap}
.k-allowed,.k-approved,.k-answer,.k-ok,.k-active,.k-intact{color:var(--ok)}.k-approval-required,.k-awaiting-approval,.k-running,.k-pending,.k-expired{color:var(--warn)}
.k-denied,.k-blocked,.k-rejected,.k-error,.k-failed,.k-revoked,.k-broken,.k-unavailable{color:var(--bad)}
form.filters{display:flex;flex-wrap:wrap;gap:.5rem;align-items:end;margin-bottom:1rem}label{display:flex;flex-direction:column;font-size:.85rem;gap:.15rem}
input,select,button{font:inherit;padding:.3rem .5rem}.card{white-space:pre-wrap;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.5rem .7rem;margin:0}
.notice{padding:.5rem .8rem;border-left:4px solid var(--warn);background:var(--card);overflow-wrap:anywhere}
@media (max-width:40rem){main{padding:.6rem}header{padding:.5rem .6rem}.signout{margin-left:0}}
"#;

/// The page's only script: the turns list follows the server's events (no reload).
pub const JS: &str = r#"(function () {
  var list = document.getElementById('turns');
  if (!list || !window.EventSource) return;
  var src = list.getAttribute('data-events');
  if (!src) return;
  var events = new EventSource(src);
  events.addEventListener('turn', function (e) {
    var t = document.createElement('template');
    t.innerHTML = e.data;
    var turn = t.content.firstElementChild;
    if (!turn || !turn.id) return;
    var old = document.getElementById(turn.id);
    if (old) { old.replaceWith(turn); } else { list.insertBefore(turn, list.firstChild); }
    var none = document.getElementById('no-turns');
    if (none) none.remove();
  });
  events.addEventListener('end', function () { events.close(); });
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_controls_are_shown() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(esc("a\u{1b}[31mb"), "a\\u{1b}[31mb");
        assert_eq!(
            pill("approval_required", "<b>").into_string(),
            r#"<span class="pill k-approval-required">&lt;b&gt;</span>"#
        );
    }

    #[test]
    fn the_language_is_the_configured_one_else_the_browsers() {
        assert_eq!(Lang::choose("", Some("it-IT,it;q=0.9,en;q=0.8")), Lang::It);
        assert_eq!(Lang::choose("", Some("en-GB,it;q=0.5")), Lang::En);
        assert_eq!(Lang::choose("", None), Lang::En);
        assert_eq!(Lang::choose("it", Some("en")), Lang::It);
        assert_eq!(Lang::choose("en", Some("it")), Lang::En);
    }
}
