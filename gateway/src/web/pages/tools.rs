//! Tools: the MCP servers the owner admitted (issue 43), each tool with its capability, its
//! target argument and the pin of its definition, and each server's standing as the
//! planner found it (connected, the tools it disabled and why); then the strongest
//! passages of the mnestome.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};
use metnos_proto::planner::v1 as planner;

use super::{muted, shown, unanswered};
use crate::web::html::{Lang, Nav, Shown, pill, table};
use crate::web::owner::Owner;
use crate::web::state::Web;

fn standing(l: Lang, listed: &planner::ListMcpServersResponse, server: &str) -> Markup {
    match listed.servers.iter().find(|s| s.server == server) {
        None => pill("muted", l.t("not started yet", "non ancora avviato")),
        Some(s) if !s.disabled.is_empty() => html! {
            (pill("pending", l.t("tools disabled until reviewed", "strumenti disattivati fino alla revisione")))
            ul { @for why in &s.disabled { li { (Shown(why)) } } }
        },
        Some(s) if s.connected => html! {
            (pill("ok", l.t("connected", "connesso")))
            @if !s.not_admitted.is_empty() {
                " " span.muted {
                    (l.t("also lists, not admitted:", "elenca anche, non ammessi:")) " "
                    (Shown(&s.not_admitted.join(", ")))
                }
            }
        },
        Some(s) => html! {
            (pill("failed", l.t("down", "fermo"))) " " (Shown(&s.last_error))
        },
    }
}

/// `GET /tools`.
pub async fn tools(State(web): State<Arc<Web>>, owner: Owner) -> Response {
    let l = owner.lang;
    let request = planner::ListMcpServersRequest {};
    let body = match web.upstream.planner.clone().list_mcp_servers(request).await {
        Err(status) => unanswered(l, "planner", &status),
        Ok(listed) => {
            let listed = listed.into_inner();
            let mut servers: Vec<&str> = listed.tools.iter().map(|t| t.server.as_str()).collect();
            servers.sort_unstable();
            servers.dedup();
            let head = [
                l.t("Tool", "Strumento"),
                l.t("The model sees", "Il modello vede"),
                l.t("Capability", "Capacità"),
                l.t("Target", "Bersaglio"),
                l.t(
                    "Pin (SHA-256 of its definition)",
                    "Impronta (SHA-256 della definizione)",
                ),
            ];
            html! {
                @if servers.is_empty() {
                    (muted(l.t(
                        "No MCP server is admitted: `metnos mcp add` admits one.",
                        "Nessun server MCP è ammesso: `metnos mcp add` ne ammette uno.",
                    )))
                }
                @for server in &servers {
                    h2 { "MCP " (Shown(server)) " " (standing(l, &listed, server)) }
                    @let rows: Vec<Vec<Markup>> = listed.tools.iter().filter(|t| t.server == *server).map(|t| vec![
                        html! { (Shown(&t.tool)) },
                        html! { code { (Shown(&t.name)) } },
                        html! { (Shown(&t.capabilities.join(", "))) },
                        html! { (Shown(&t.target_arg)) },
                        html! { code.pin { (Shown(&t.definition_sha256)) } },
                    ]).collect();
                    (table(&head, &rows, "mcp-tools"))
                }
            }
        }
    };
    let body = html! { (body) (passages(&web, l).await) };
    shown(&owner, Nav::Tools, l.t("Tools", "Strumenti"), body)
}

/// The mnestome's strongest passages (issue 46): which tool's output went into which
/// tool's argument, and how often it went well. Names only.
async fn passages(web: &Web, l: Lang) -> Markup {
    let request = planner::ListPassagesRequest {
        limit: 20,
        executor: String::new(),
    };
    let listed = match web.upstream.planner.clone().list_passages(request).await {
        Ok(listed) => listed.into_inner(),
        Err(status) => return unanswered(l, "planner", &status),
    };
    let head = [
        l.t("From (output)", "Da (uscita)"),
        l.t("Into (argument)", "In (argomento)"),
        l.t("Weight", "Peso"),
        l.t("Went well", "Andati bene"),
    ];
    let rows: Vec<Vec<Markup>> = listed
        .passages
        .iter()
        .map(|p| {
            vec![
                html! { (Shown(&format!("{}.{}", p.from_executor, p.from_field))) },
                html! { (Shown(&format!("{}({})", p.to_executor, p.to_arg))) },
                html! { (format!("{:.2}", p.weight)) },
                html! { (p.successes) " / " (p.uses) },
            ]
        })
        .collect();
    html! {
        h2 { (l.t("Passages between tools", "Passaggi tra strumenti")) }
        @if rows.is_empty() {
            (muted(l.t(
                "No step has yet been fed by another's output.",
                "Nessun passo è ancora stato alimentato dall'uscita di un altro.",
            )))
        } @else {
            p id="passages-total" { (listed.total) " " (l.t("passages", "passaggi")) }
            (table(&head, &rows, "passages"))
        }
    }
}
