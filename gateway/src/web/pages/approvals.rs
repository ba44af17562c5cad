//! Approvals: the requests waiting and those decided, each card as its person saw it.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};
use metnos_kit::client::TracedChannel;
use metnos_proto::approval::v1 as approval;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;

use super::{at, muted, person, request_name, shown, unanswered};
use crate::web::html::{Lang, Nav, Shown, pill};
use crate::web::owner::Owner;
use crate::web::state::Web;

fn status_name(status: i32) -> &'static str {
    match approval::ApprovalStatus::try_from(status) {
        Ok(approval::ApprovalStatus::Pending) => "pending",
        Ok(approval::ApprovalStatus::Approved) => "approved",
        Ok(approval::ApprovalStatus::Rejected) => "rejected",
        Ok(approval::ApprovalStatus::Expired) => "expired",
        Ok(approval::ApprovalStatus::Cancelled) => "cancelled",
        _ => "unknown",
    }
}

/// The card as its person saw it, in their language (rendered without its token); a
/// terminal person's card words are not given to the gateway.
async fn card_words(
    client: &mut ApprovalServiceClient<TracedChannel>,
    a: &approval::PendingApproval,
    l: Lang,
) -> String {
    let Some(request) = a.request.as_ref().filter(|r| !r.target_summary.is_empty()) else {
        return l
            .t(
                "(Shown on the terminal that asked: its words are not given to the gateway.)",
                "(Mostrata sul terminale che l'ha chiesta: le sue parole non sono date al gateway.)",
            )
            .to_owned();
    };
    let mut request = request.clone();
    request.token.clear();
    let render = approval::RenderCardRequest {
        request: Some(request),
        capability: a.capability.clone(),
    };
    match client.render_card(render).await {
        Ok(card) => card
            .into_inner()
            .card
            .map(|c| c.lines.join("\n"))
            .unwrap_or_default(),
        Err(status) => format!("({})", status.message()),
    }
}

/// One request: its state, who asked, the card, when.
fn request(l: Lang, a: &approval::PendingApproval, card: &str) -> Markup {
    let status = status_name(a.status);
    html! {
        div.turn {
            header {
                (pill(status, status)) " " strong { (Shown(&person(a.requester.as_ref()))) }
                " · " (Shown(&a.executor)) " · "
                span.muted { (l.t("request", "richiesta")) " " (Shown(&request_name(&a.token))) }
            }
            pre.card { (Shown(card)) }
            p.muted {
                (l.t("asked", "chiesta")) " " (at(a.created_at.as_ref())) " · "
                (l.t("expires", "scade")) " " (at(a.expires_at.as_ref()))
                @if let Some(ts) = &a.decision_at {
                    " · " (l.t("decided", "decisa")) " " (at(Some(ts))) " "
                    (Shown(&person(a.decided_by.as_ref())))
                }
            }
        }
    }
}

/// `GET /approvals`.
pub async fn approvals(State(web): State<Arc<Web>>, owner: Owner) -> Response {
    let l = owner.lang;
    let mut client = web.upstream.approval.clone();
    let listed = client
        .list_pending(approval::ListPendingRequest {
            include_resolved: true,
            limit: 100,
            requester: None,
        })
        .await;
    let (all, notice) = match listed {
        Ok(listed) => (listed.into_inner().approvals, None),
        Err(status) => (Vec::new(), Some(unanswered(l, "approval", &status))),
    };
    let (pending, decided): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|a| a.status == approval::ApprovalStatus::Pending as i32);
    let mut groups = Vec::new();
    for (title, group) in [
        (l.t("Pending", "In attesa"), pending),
        (l.t("Decided", "Decise"), decided),
    ] {
        let mut shown_requests = Vec::new();
        for a in &group {
            let card = card_words(&mut client, a, l).await;
            shown_requests.push(request(l, a, &card));
        }
        groups.push((title, shown_requests));
    }
    let body = html! {
        @if let Some(notice) = notice { (notice) }
        @for (title, requests) in &groups {
            h2 { (title) }
            @if requests.is_empty() { (muted(l.t("None.", "Nessuna."))) }
            @for request in requests { (request) }
        }
    };
    shown(
        &owner,
        Nav::Approvals,
        l.t("Approvals", "Approvazioni"),
        body,
    )
}
