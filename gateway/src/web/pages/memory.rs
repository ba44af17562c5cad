//! Memory: how many entries a person's long-term memory holds, how many came from the world,
//! and each entry's id, dates and sources — never its words (the planner does not send
//! them to the page's identity).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{Markup, html};
use metnos_proto::common::v1 as common;
use metnos_proto::planner::v1 as planner;
use serde::Deserialize;

use super::{at, muted, shown, unanswered};
use crate::web::html::{Lang, Nav, Shown, table};
use crate::web::owner::Owner;
use crate::web::state::Web;

/// `?person=<channel>:<sender>`.
#[derive(Debug, Default, Deserialize)]
pub struct MemoryQuery {
    #[serde(default)]
    person: String,
}

/// The form asking whose memory to show.
fn form(l: Lang, person: &str) -> Markup {
    html! {
        form method="get" action="/memory" {
            label { (l.t("Person", "Persona")) " "
                input type="text" name="person" value=(person) placeholder="telegram:42";
            }
            " " button type="submit" { (l.t("Show", "Mostra")) }
        }
    }
}

/// A person's entries: counts, then a row each (id, saved, last used, sources).
async fn entries(web: &Web, l: Lang, who: common::Principal) -> Markup {
    let request = planner::ListMemoriesRequest {
        principal: Some(who),
        limit: 50,
    };
    let listed = match web.upstream.planner.clone().list_memories(request).await {
        Ok(listed) => listed.into_inner(),
        Err(status) => return unanswered(l, "planner", &status),
    };
    let rows: Vec<Vec<Markup>> = listed
        .entries
        .iter()
        .map(|e| {
            let sources = if e.sources.is_empty() {
                l.t("their own words", "parole sue").to_owned()
            } else {
                e.sources.join(", ")
            };
            vec![
                html! { (Shown(&e.id)) },
                html! { (at(e.saved_at.as_ref())) },
                html! { (at(e.used_at.as_ref())) },
                html! { (Shown(&sources)) },
            ]
        })
        .collect();
    let head = [
        "id",
        l.t("Saved", "Salvato"),
        l.t("Last used", "Ultimo uso"),
        l.t("Sources", "Fonti"),
    ];
    html! {
        p id="memory-counts" {
            (listed.total) " " (l.t("entries", "voci")) ", "
            (listed.from_the_world) " " (l.t("from the world", "dal mondo"))
        }
        @if !rows.is_empty() { (table(&head, &rows, "memory")) }
    }
}

/// `GET /memory`.
pub async fn memory(
    State(web): State<Arc<Web>>,
    owner: Owner,
    Query(q): Query<MemoryQuery>,
) -> Response {
    let l = owner.lang;
    let person = q.person.trim();
    let listed = match person.split_once(':') {
        Some((channel, sender)) if !channel.is_empty() && !sender.is_empty() => {
            let who = common::Principal {
                channel: channel.to_owned(),
                sender_id: sender.to_owned(),
            };
            entries(&web, l, who).await
        }
        _ if person.is_empty() => muted(l.t(
            "Whose memory? Give a person as channel:sender.",
            "La memoria di chi? Indica una persona come canale:mittente.",
        )),
        _ => muted(l.t(
            "A person is channel:sender (telegram:42).",
            "Una persona è canale:mittente (telegram:42).",
        )),
    };
    let body = html! {
        (form(l, person))
        (listed)
        (muted(l.t(
            "The words of what Metnos remembers are never shown here: `metnos memory list` shows them to the owner.",
            "Le parole di ciò che Metnos ricorda non compaiono mai qui: `metnos memory list` le mostra al proprietario.",
        )))
    };
    shown(&owner, Nav::Memory, l.t("Memory", "Memoria"), body)
}
