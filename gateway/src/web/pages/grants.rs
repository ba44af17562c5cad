//! Grants: active, expired and revoked; an active one revoked after a confirmation.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use metnos_kit::time::{from_timestamp, now_ms};
use metnos_proto::policy::v1 as policy;
use serde::Deserialize;

use super::{at, person, request_name, shown, unanswered};
use crate::web::html::{Lang, Nav, Shown, table};
use crate::web::owner::{CsrfForm, Owner, failure};
use crate::web::state::Web;

/// Whether a grant is `active`, `expired` or `revoked` at `now`.
pub(super) fn grant_state(g: &policy::Grant, now: i64) -> &'static str {
    if g.revoked_at.is_some() {
        "revoked"
    } else if g
        .expires_at
        .as_ref()
        .and_then(from_timestamp)
        .is_some_and(|e| e <= now)
    {
        "expired"
    } else {
        "active"
    }
}

/// Who recorded a grant, without an approval's token (`approval:` and its journal name).
fn granted_by(by: &str) -> String {
    match by.split_once(':') {
        Some(("approval", token)) => format!("approval:{}", request_name(token)),
        _ => by.to_owned(),
    }
}

/// Every grant, inactive ones too.
pub(super) async fn all_grants(web: &Web) -> Result<Vec<policy::Grant>, tonic::Status> {
    let mut client = web.upstream.policy.clone();
    Ok(client
        .list_grants(policy::ListGrantsRequest {
            include_inactive: true,
            ..Default::default()
        })
        .await?
        .into_inner()
        .grants)
}

#[derive(Debug, Default, Deserialize)]
pub struct GrantsQuery {
    #[serde(default)]
    revoked: Option<i64>,
}

/// A grant's row; an active one links to its revocation.
fn grant_row(l: Lang, g: &policy::Grant, active: bool) -> Vec<Markup> {
    let action = html! {
        @if active {
            a href={ "/grants/" (g.id) "/revoke" } { (l.t("Revoke…", "Revoca…")) }
        }
    };
    vec![
        html! { "#" (g.id) },
        html! { (Shown(&person(g.principal.as_ref()))) },
        html! { (Shown(&g.capability)) },
        html! { code { (Shown(&g.target)) } },
        html! { (at(g.granted_at.as_ref())) },
        html! { (at(g.expires_at.as_ref())) },
        html! { (at(g.last_used_at.as_ref())) },
        html! { (Shown(&granted_by(&g.granted_by))) },
        action,
    ]
}

/// `GET /grants`.
pub async fn grants(
    State(web): State<Arc<Web>>,
    owner: Owner,
    Query(q): Query<GrantsQuery>,
) -> Response {
    let l = owner.lang;
    let now = now_ms();
    let (list, notice) = match all_grants(&web).await {
        Ok(list) => (list, None),
        Err(status) => (Vec::new(), Some(unanswered(l, "policy", &status))),
    };
    let head = [
        "",
        l.t("Person", "Persona"),
        l.t("Capability", "Capacità"),
        l.t("Target", "Obiettivo"),
        l.t("Granted", "Concesso"),
        l.t("Expires", "Scade"),
        l.t("Last used", "Ultimo uso"),
        l.t("By", "Da"),
        "",
    ];
    let groups = [
        ("active", l.t("Active", "Attivi")),
        ("expired", l.t("Expired", "Scaduti")),
        ("revoked", l.t("Revoked", "Revocati")),
    ]
    .map(|(state, title)| {
        let rows: Vec<Vec<Markup>> = list
            .iter()
            .filter(|g| grant_state(g, now) == state)
            .map(|g| grant_row(l, g, state == "active"))
            .collect();
        (state, title, rows)
    });
    let body = html! {
        @if let Some(id) = q.revoked {
            p.notice id="revoked" { (l.t("Revoked grant", "Permesso revocato")) " #" (id) }
        }
        @if let Some(notice) = notice { (notice) }
        @for (state, title, rows) in &groups {
            h2 { (title) " (" (rows.len()) ")" }
            @if !rows.is_empty() { (table(&head, rows, &format!("grants-{state}"))) }
        }
    };
    shown(&owner, Nav::Grants, l.t("Grants", "Permessi"), body)
}

/// `GET /grants/<id>/revoke`: what revoking would take away, and the button that does it.
pub async fn revoke_confirm(
    State(web): State<Arc<Web>>,
    owner: Owner,
    Path(id): Path<i64>,
) -> Response {
    let l = owner.lang;
    let grant = match all_grants(&web).await {
        Ok(list) => list.into_iter().find(|g| g.id == id),
        Err(status) => {
            let body = unanswered(l, "policy", &status);
            return shown(&owner, Nav::Grants, l.t("Revoke", "Revoca"), body);
        }
    };
    let Some(g) = grant.filter(|g| grant_state(g, now_ms()) == "active") else {
        return failure(
            StatusCode::NOT_FOUND,
            l,
            l.t("No such grant", "Permesso inesistente"),
            l.t(
                "There is no active grant with this number.",
                "Non c'è un permesso attivo con questo numero.",
            ),
        );
    };
    let body = html! {
        p {
            (l.t("Grant", "Permesso")) " " strong { "#" (g.id) } ": "
            (Shown(&person(g.principal.as_ref()))) " " strong { (Shown(&g.capability)) } " "
            (l.t("on", "su")) " " code { (Shown(&g.target)) } "."
        }
        p {
            (l.t(
                "Once revoked, calls it covered ask for approval again (or are denied, per the level's table).",
                "Revocato, le chiamate che copriva chiederanno di nuovo l'approvazione (o saranno negate, secondo la tabella del livello)."
            ))
        }
        form method="post" action={ "/grants/" (g.id) "/revoke" } {
            input type="hidden" name="csrf" value=(Shown(&owner.session.csrf));
            button type="submit" id="confirm-revoke" { (l.t("Revoke this grant", "Revoca questo permesso")) }
            " "
            a href="/grants" { (l.t("Cancel", "Annulla")) }
        }
    };
    shown(
        &owner,
        Nav::Grants,
        l.t("Revoke a grant", "Revoca un permesso"),
        body,
    )
}

/// `POST /grants/<id>/revoke`: revokes, with the session's CSRF token.
pub async fn revoke(
    State(web): State<Arc<Web>>,
    owner: Owner,
    headers: HeaderMap,
    Path(id): Path<i64>,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Response {
    if let Some(refused) = owner.refuse_post(&web, &headers, &form.csrf) {
        tracing::warn!(
            grant_id = id,
            "a revocation without this page's token was refused"
        );
        return refused;
    }
    let l = owner.lang;
    let mut client = web.upstream.policy.clone();
    let request = policy::RevokeGrantRequest {
        grant_id: id,
        principal: None,
    };
    match client.revoke_grant(request).await {
        Ok(_) => {
            tracing::info!(grant_id = id, "the owner revoked a grant from the web page");
            Redirect::to(&format!("/grants?revoked={id}")).into_response()
        }
        Err(status) => {
            let body = unanswered(l, "policy", &status);
            shown(&owner, Nav::Grants, l.t("Revoke", "Revoca"), body)
        }
    }
}
