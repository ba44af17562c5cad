//! The spectator's pages, one file each: [`turns`] (live), [`approvals`], [`grants`]
//! (revoke), [`verdicts`], [`telos`] and schedules, [`memory`] (counts and sources, never
//! the words), the [`record`]'s chains, [`replay`] (what-if), the MCP [`tools`] and their pins. Each reads the services as the gateway and renders what it got with maud; a
//! service that does not answer is said on the page. This file holds what they share.

use axum::response::{Html, IntoResponse, Response};
use maud::{Markup, html};
use metnos_kit::time::{from_timestamp, now_ms};
use metnos_proto::common::v1 as common;

use super::html::{self, Lang, Nav, Shown, when};
use super::owner::Owner;

pub mod approvals;
pub mod grants;
pub mod memory;
pub mod record;
pub mod replay;
pub mod telos;
pub mod tools;
pub mod turns;
pub mod verdicts;

/// A page, signed in.
fn shown(owner: &Owner, active: Nav, title: &str, body: Markup) -> Response {
    let page = html::page(owner.lang, active, title, Some(&owner.session.csrf), body);
    Html(page.into_string()).into_response()
}

/// A service that did not answer, said in a line of the page.
fn unanswered(l: Lang, service: &str, status: &tonic::Status) -> Markup {
    let message: String = status.message().chars().take(200).collect();
    let code = format!("{:?}", status.code());
    html! {
        p.notice {
            (l.t(
                "Not available now: the service did not answer —",
                "Non disponibile ora: il servizio non ha risposto —"
            ))
            " " (service) " (" (code) ": " (Shown(&message)) ")"
        }
    }
}

/// A muted line (`None.`, `No turns yet.`).
fn muted(text: &str) -> Markup {
    html! { p.muted { (Shown(text)) } }
}

fn person(p: Option<&common::Principal>) -> String {
    p.map_or_else(String::new, |p| format!("{}:{}", p.channel, p.sender_id))
}

fn at(ts: Option<&prost_types::Timestamp>) -> String {
    ts.and_then(from_timestamp).map_or_else(String::new, when)
}

/// An approval token as the page names it: the first 16 hex digits of its sha256 (the
/// decisions journal's name), whether the gateway got the token or that name already.
fn request_name(token: &str) -> String {
    if token.len() == 16 {
        token.to_owned()
    } else {
        metnos_kit::chain::hash(token)[..16].to_owned()
    }
}

fn today() -> String {
    metnos_kit::time::rfc3339(now_ms())[..10].to_owned()
}
