//! The spectator's pages: turns (live), approvals, grants (revoke), verdicts, telos and
//! schedules, the record's chains, what-if. Each reads the services as the gateway and
//! renders what it got, escaped; a service that does not answer is said on the page.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use metnos_core::level::AutonomyLevel;
use metnos_core::replay::Tally;
use metnos_core::table::Outcome;
use metnos_kit::time::{from_timestamp, now_ms};
use metnos_proto::approval::v1 as approval;
use metnos_proto::common::v1 as common;
use metnos_proto::planner::v1 as planner;
use metnos_proto::policy::v1 as policy;
use metnos_proto::vaglio::v1 as vaglio;
use serde::Deserialize;
use serde_json::Value;

use super::html::{self, Lang, Nav, esc, pill, table, when};
use super::{CsrfForm, Owner, Web, failure};

pub fn routes() -> Router<Arc<Web>> {
    Router::new()
        .route("/turns", get(turns))
        .route("/turns/events", get(turn_events))
        .route("/approvals", get(approvals))
        .route("/grants", get(grants))
        .route("/grants/{id}/revoke", get(revoke_confirm).post(revoke))
        .route("/verdicts", get(verdicts))
        .route("/telos", get(telos))
        .route("/record", get(record))
        .route("/replay", get(replay))
}

/// A page, signed in.
fn shown(owner: &Owner, active: Nav, title: &str, body: &str) -> Response {
    Html(html::page(
        owner.lang,
        active,
        title,
        Some(&owner.session.csrf),
        body,
    ))
    .into_response()
}

/// A service that did not answer, said in a line of the page.
fn unanswered(l: Lang, service: &str, status: &tonic::Status) -> String {
    let message: String = status.message().chars().take(200).collect();
    format!(
        r#"<p class="notice">{} {} ({:?}: {})</p>"#,
        esc(l.t(
            "Not available now: the service did not answer —",
            "Non disponibile ora: il servizio non ha risposto —"
        )),
        esc(service),
        status.code(),
        esc(&message)
    )
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

// ---------------------------------------------------------------------------------------
// Turns

#[derive(Debug, Default, Deserialize)]
struct TurnFilter {
    #[serde(default)]
    day: String,
    #[serde(default)]
    person: String,
    #[serde(default)]
    outcome: String,
    /// The live view: changes after this (milliseconds).
    #[serde(default)]
    after: i64,
}

impl TurnFilter {
    fn keeps(&self, record: &Value) -> bool {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        if !self.person.is_empty() {
            let p = &record["principal"];
            if format!("{}:{}", s(&p["channel"]), s(&p["sender_id"])) != self.person {
                return false;
            }
        }
        if self.outcome.is_empty() {
            return true;
        }
        if s(&record["final_kind"]) == self.outcome {
            return true;
        }
        record["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|step| {
                [
                    &step["policy"],
                    &step["verdict"],
                    &step["approval_decision"],
                ]
                .iter()
                .any(|v| s(v) == self.outcome)
            })
    }

    fn query(&self) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        q.append_pair("person", &self.person);
        q.append_pair("outcome", &self.outcome);
        q.finish()
    }
}

/// One turn as an `<article>` (the live view replaces it whole).
pub fn render_turn(l: Lang, record: &Value, state: &str) -> String {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let id = s(&record["turn_id"]);
    let kind = match state {
        "" | "finished" => s(&record["final_kind"]),
        "suspended" => "awaiting_approval".to_owned(),
        _ => s(&record["final_kind"]),
    };
    let tiers: Vec<String> = record["tiers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(s)
        .collect();
    let mut out = format!(
        r#"<article class="turn" id="turn-{}"><header><strong>{}</strong> · {} · {} {} · {} · {} ms · {} {}/{} · <span class="muted">{}</span></header><ol class="steps">"#,
        esc(&id),
        esc(&format!(
            "{}:{}",
            s(&record["principal"]["channel"]),
            s(&record["principal"]["sender_id"])
        )),
        esc(&s(&record["level"])
            .replace("AUTONOMY_LEVEL_", "")
            .to_lowercase()),
        esc(l.t("tier", "fascia")),
        esc(&tiers.join(", ")),
        pill(&kind, &kind),
        record["latency_ms"].as_u64().unwrap_or(0),
        esc(l.t("tokens", "token")),
        record["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
        record["usage"]["completion_tokens"].as_u64().unwrap_or(0),
        esc(&s(&record["started_at"])),
    );
    for step in record["steps"].as_array().into_iter().flatten() {
        let keys: Vec<String> = step["arg_keys"]
            .as_array()
            .into_iter()
            .flatten()
            .map(s)
            .collect();
        let _ = write!(
            out,
            "<li><strong>{}</strong>({})",
            esc(&s(&step["executor"])),
            esc(&keys.join(", "))
        );
        if let Some(policy) = step["policy"].as_str() {
            let _ = write!(
                out,
                " · policy {} <span class=\"muted\">{}</span>",
                pill(policy, policy),
                esc(&s(&step["policy_reason"]))
            );
        }
        if let Some(verdict) = step["verdict"].as_str() {
            let score = step["verdict_score"]
                .as_f64()
                .map_or(String::new(), |v| format!("{v:.2}"));
            let _ = write!(
                out,
                " · vaglio {} {} <span class=\"muted\">{}</span>",
                pill(verdict, verdict),
                esc(&score),
                esc(&s(&step["verdict_rule"]))
            );
        }
        if let Some(decision) = step["approval_decision"].as_str() {
            let token = s(&step["approval_token"]);
            let _ = write!(
                out,
                " · {} {} <span class=\"muted\">{}</span>",
                esc(l.t("approval", "approvazione")),
                pill(decision, decision),
                esc(&if token.is_empty() {
                    String::new()
                } else {
                    request_name(&token)
                })
            );
        } else if !s(&step["approval_token"]).is_empty() {
            let _ = write!(
                out,
                " · {} <span class=\"muted\">{}</span>",
                pill("awaiting_approval", l.t("card sent", "scheda inviata")),
                esc(&request_name(&s(&step["approval_token"])))
            );
        }
        let labels: Vec<String> = step["labels"]
            .as_array()
            .into_iter()
            .flatten()
            .map(s)
            .collect();
        let ok = if step["ok"].as_bool() == Some(true) {
            "ok"
        } else {
            "failed"
        };
        let _ = write!(
            out,
            " · {} {} {} ms <span class=\"muted\">{}</span></li>",
            esc(l.t("observation", "osservazione")),
            pill(ok, ok),
            step["duration_ms"].as_u64().unwrap_or(0),
            esc(&labels.join(", "))
        );
    }
    out.push_str("</ol></article>");
    out
}

fn today() -> String {
    metnos_kit::time::rfc3339(now_ms())[..10].to_owned()
}

async fn turns(
    State(web): State<Arc<Web>>,
    owner: Owner,
    Query(filter): Query<TurnFilter>,
) -> Response {
    let l = owner.lang;
    let day = if filter.day.is_empty() {
        today()
    } else {
        filter.day.clone()
    };
    let live = day == today();
    let started = now_ms();
    let mut client = web.upstream.planner.clone();
    let mut body = format!(
        r#"<form class="filters" method="get" action="/turns"><label>{}<input type="date" name="day" value="{}"></label><label>{}<input name="person" placeholder="telegram:42" value="{}"></label><label>{}<select name="outcome">"#,
        esc(l.t("Day", "Giorno")),
        esc(&day),
        esc(l.t("Person", "Persona")),
        esc(&filter.person),
        esc(l.t("Outcome", "Esito")),
    );
    for outcome in [
        "",
        "answer",
        "error",
        "cancelled",
        "awaiting_approval",
        "running",
        "allowed",
        "approval_required",
        "denied",
        "blocked",
        "approved",
        "rejected",
    ] {
        let selected = if outcome == filter.outcome {
            " selected"
        } else {
            ""
        };
        let _ = write!(
            body,
            r#"<option value="{0}"{selected}>{1}</option>"#,
            esc(outcome),
            esc(if outcome.is_empty() {
                l.t("any", "tutti")
            } else {
                outcome
            })
        );
    }
    let _ = write!(
        body,
        r#"</select></label><button type="submit">{}</button></form>"#,
        esc(l.t("Show", "Mostra"))
    );
    let mut articles: Vec<(String, String)> = Vec::new();
    // The turns under way (whichever replica runs them), then the day's log.
    let mut seen = HashSet::new();
    if live {
        match client
            .list_turn_changes(planner::ListTurnChangesRequest {
                unfinished: true,
                limit: 100,
                ..Default::default()
            })
            .await
        {
            Ok(changes) => {
                for change in changes.into_inner().changes {
                    if change.state == "finished" || !seen.insert(change.turn_id.clone()) {
                        continue;
                    }
                    if let Ok(record) = serde_json::from_str::<Value>(&change.record_json)
                        && filter.keeps(&record)
                    {
                        articles.push((change.turn_id, render_turn(l, &record, &change.state)));
                    }
                }
            }
            Err(status) => body.push_str(&unanswered(l, "planner", &status)),
        }
    }
    match client
        .list_turns(planner::ListTurnsRequest {
            date: day.clone(),
            limit: 200,
        })
        .await
    {
        Ok(listed) => {
            for json in listed.into_inner().records_json {
                let Ok(record) = serde_json::from_str::<Value>(&json) else {
                    continue;
                };
                let id = record["turn_id"].as_str().unwrap_or_default().to_owned();
                if seen.insert(id.clone()) && filter.keeps(&record) {
                    articles.push((id, render_turn(l, &record, "finished")));
                }
            }
        }
        Err(status) => body.push_str(&unanswered(l, "planner", &status)),
    }
    let events = if live {
        format!(
            r#" data-events="/turns/events?{}&amp;after={}""#,
            esc(&filter.query()),
            started
        )
    } else {
        String::new()
    };
    let _ = write!(body, r#"<section id="turns"{events}>"#);
    if articles.is_empty() {
        let _ = write!(
            body,
            r#"<p id="no-turns" class="muted">{}</p>"#,
            esc(l.t("No turns yet.", "Nessun turno per ora."))
        );
    }
    for (_, article) in &articles {
        body.push_str(article);
    }
    body.push_str("</section>");
    if live {
        let _ = write!(
            body,
            r#"<p class="muted">{}</p>"#,
            esc(l.t(
                "Live: new turns and steps appear here as they run.",
                "In diretta: i nuovi turni e passi compaiono qui mentre avvengono."
            ))
        );
    }
    shown(&owner, Nav::Turns, l.t("Turns", "Turni"), &body)
}

/// Changes asked for at once by the live feed.
const BATCH: u32 = 200;

/// `GET /turns/events`: the turns' changes as Server-Sent Events (`turn`: one rendered
/// `<article>`), while the session lasts.
async fn turn_events(
    State(web): State<Arc<Web>>,
    owner: Owner,
    Query(filter): Query<TurnFilter>,
) -> Response {
    let l = owner.lang;
    // Each live view polls the planner: a few at once, every session together.
    let Ok(permit) = Arc::clone(&web.live_feeds).try_acquire_owned() else {
        return failure(
            StatusCode::TOO_MANY_REQUESTS,
            l,
            l.t("Too many live views", "Troppe viste in diretta"),
            l.t(
                "Too many pages are following the turns live; close one and reload.",
                "Troppe pagine seguono i turni in diretta; chiudine una e ricarica.",
            ),
        );
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(32);
    tokio::spawn(async move {
        let _permit = permit;
        let mut client = web.upstream.planner.clone();
        let mut cursor = filter.after;
        // What each turn last showed: a change seen twice (the overlap below) is sent once.
        let mut sent: HashMap<String, i64> = HashMap::new();
        let mut ticks = tokio::time::interval(web.poll);
        let mut full = false;
        loop {
            ticks.tick().await;
            // The browser went away: nothing more to ask for it.
            if tx.is_closed() {
                return;
            }
            if web.sessions.session(&owner.cookie, now_ms()).is_none() {
                let _ = tx
                    .send(Event::default().event("end").data("signed out"))
                    .await;
                return;
            }
            // Two seconds back: a change committed late with an earlier time (another
            // replica's clock, a slow transaction) is not skipped. After a full batch, from
            // where it ended (more changes than a batch within two seconds would be asked
            // for again and again).
            let after = if full {
                cursor
            } else {
                cursor.saturating_sub(2000)
            };
            // Never longer than a few seconds (a planner that hangs holds no feed), and not
            // at all once the browser has gone.
            let ask = client.list_turn_changes(planner::ListTurnChangesRequest {
                after_ms: after,
                limit: BATCH,
                unfinished: false,
            });
            let asked = tokio::select! {
                asked = tokio::time::timeout(std::time::Duration::from_secs(5), ask) => asked,
                () = tx.closed() => return,
            };
            let Ok(Ok(changes)) = asked else {
                continue;
            };
            let changes = changes.into_inner().changes;
            full = changes.len() == BATCH as usize;
            for change in changes {
                cursor = cursor.max(change.changed_ms);
                if sent.get(&change.turn_id) == Some(&change.changed_ms) {
                    continue;
                }
                sent.insert(change.turn_id.clone(), change.changed_ms);
                let Ok(record) = serde_json::from_str::<Value>(&change.record_json) else {
                    continue;
                };
                if !filter.keeps(&record) {
                    continue;
                }
                let article = render_turn(l, &record, &change.state);
                let event = Event::default().event("turn").data(article);
                if tx.send(event).await.is_err() {
                    return;
                }
            }
            sent.retain(|_, at| *at > cursor.saturating_sub(10_000));
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|event| (Ok::<_, Infallible>(event), rx))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

// ---------------------------------------------------------------------------------------
// Approvals

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

async fn approvals(State(web): State<Arc<Web>>, owner: Owner) -> Response {
    let l = owner.lang;
    let mut client = web.upstream.approval.clone();
    let listed = client
        .list_pending(approval::ListPendingRequest {
            include_resolved: true,
            limit: 100,
            requester: None,
        })
        .await;
    let mut body = String::new();
    let all = match listed {
        Ok(listed) => listed.into_inner().approvals,
        Err(status) => {
            body.push_str(&unanswered(l, "approval", &status));
            Vec::new()
        }
    };
    let (pending, decided): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|a| a.status == approval::ApprovalStatus::Pending as i32);
    for (title, group) in [
        (l.t("Pending", "In attesa"), pending),
        (l.t("Decided", "Decise"), decided),
    ] {
        let _ = write!(body, "<h2>{}</h2>", esc(title));
        if group.is_empty() {
            let _ = write!(
                body,
                r#"<p class="muted">{}</p>"#,
                esc(l.t("None.", "Nessuna."))
            );
        }
        for a in group {
            // The card as its person saw it, in their language (rendered without its token);
            // a terminal person's card words are not given to the gateway.
            let card = match &a.request {
                Some(request) if !request.target_summary.is_empty() => {
                    let mut request = request.clone();
                    request.token.clear();
                    match client
                        .render_card(approval::RenderCardRequest {
                            request: Some(request),
                            capability: a.capability.clone(),
                        })
                        .await
                    {
                        Ok(card) => card
                            .into_inner()
                            .card
                            .map(|c| c.lines.join("\n"))
                            .unwrap_or_default(),
                        Err(status) => format!("({})", status.message()),
                    }
                }
                _ => l
                    .t(
                        "(Shown on the terminal that asked: its words are not given to the gateway.)",
                        "(Mostrata sul terminale che l'ha chiesta: le sue parole non sono date al gateway.)",
                    )
                    .to_owned(),
            };
            let status = status_name(a.status);
            let _ = write!(
                body,
                r#"<div class="turn"><header>{} <strong>{}</strong> · {} · <span class="muted">{} {}</span></header><pre class="card">{}</pre><p class="muted">{} {} · {} {}{}</p></div>"#,
                pill(status, status),
                esc(&person(a.requester.as_ref())),
                esc(&a.executor),
                esc(l.t("request", "richiesta")),
                esc(&request_name(&a.token)),
                esc(&card),
                esc(l.t("asked", "chiesta")),
                esc(&at(a.created_at.as_ref())),
                esc(l.t("expires", "scade")),
                esc(&at(a.expires_at.as_ref())),
                match &a.decision_at {
                    Some(ts) => format!(
                        " · {} {} {}",
                        esc(l.t("decided", "decisa")),
                        esc(&at(Some(ts))),
                        esc(&person(a.decided_by.as_ref()))
                    ),
                    None => String::new(),
                }
            );
        }
    }
    shown(
        &owner,
        Nav::Approvals,
        l.t("Approvals", "Approvazioni"),
        &body,
    )
}

// ---------------------------------------------------------------------------------------
// Grants

fn grant_state(g: &policy::Grant, now: i64) -> &'static str {
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

async fn all_grants(web: &Web) -> Result<Vec<policy::Grant>, tonic::Status> {
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
struct GrantsQuery {
    #[serde(default)]
    revoked: Option<i64>,
}

async fn grants(
    State(web): State<Arc<Web>>,
    owner: Owner,
    Query(q): Query<GrantsQuery>,
) -> Response {
    let l = owner.lang;
    let now = now_ms();
    let mut body = String::new();
    if let Some(id) = q.revoked {
        let _ = write!(
            body,
            r#"<p class="notice" id="revoked">{} #{id}</p>"#,
            esc(l.t("Revoked grant", "Permesso revocato"))
        );
    }
    let list = match all_grants(&web).await {
        Ok(list) => list,
        Err(status) => {
            body.push_str(&unanswered(l, "policy", &status));
            Vec::new()
        }
    };
    for (state, title) in [
        ("active", l.t("Active", "Attivi")),
        ("expired", l.t("Expired", "Scaduti")),
        ("revoked", l.t("Revoked", "Revocati")),
    ] {
        let rows: Vec<Vec<String>> = list
            .iter()
            .filter(|g| grant_state(g, now) == state)
            .map(|g| {
                let action = if state == "active" {
                    format!(
                        r#"<a href="/grants/{}/revoke">{}</a>"#,
                        g.id,
                        esc(l.t("Revoke…", "Revoca…"))
                    )
                } else {
                    String::new()
                };
                vec![
                    format!("#{}", g.id),
                    esc(&person(g.principal.as_ref())),
                    esc(&g.capability),
                    format!("<code>{}</code>", esc(&g.target)),
                    esc(&at(g.granted_at.as_ref())),
                    esc(&at(g.expires_at.as_ref())),
                    esc(&at(g.last_used_at.as_ref())),
                    esc(&granted_by(&g.granted_by)),
                    action,
                ]
            })
            .collect();
        let _ = write!(body, "<h2>{} ({})</h2>", esc(title), rows.len());
        if !rows.is_empty() {
            body.push_str(&table(
                &[
                    "",
                    l.t("Person", "Persona"),
                    l.t("Capability", "Capacità"),
                    l.t("Target", "Obiettivo"),
                    l.t("Granted", "Concesso"),
                    l.t("Expires", "Scade"),
                    l.t("Last used", "Ultimo uso"),
                    l.t("By", "Da"),
                    "",
                ],
                &rows,
                &format!("grants-{state}"),
            ));
        }
    }
    shown(&owner, Nav::Grants, l.t("Grants", "Permessi"), &body)
}

/// `GET /grants/<id>/revoke`: what revoking would take away, and the button that does it.
async fn revoke_confirm(
    State(web): State<Arc<Web>>,
    owner: Owner,
    Path(id): Path<i64>,
) -> Response {
    let l = owner.lang;
    let grant = match all_grants(&web).await {
        Ok(list) => list.into_iter().find(|g| g.id == id),
        Err(status) => {
            let body = unanswered(l, "policy", &status);
            return shown(&owner, Nav::Grants, l.t("Revoke", "Revoca"), &body);
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
    let body = format!(
        r#"<p>{} <strong>#{}</strong>: {} <strong>{}</strong> {} <code>{}</code>.</p><p>{}</p><form method="post" action="/grants/{}/revoke"><input type="hidden" name="csrf" value="{}"><button type="submit" id="confirm-revoke">{}</button> <a href="/grants">{}</a></form>"#,
        esc(l.t("Grant", "Permesso")),
        g.id,
        esc(&person(g.principal.as_ref())),
        esc(&g.capability),
        esc(l.t("on", "su")),
        esc(&g.target),
        esc(l.t(
            "Once revoked, calls it covered ask for approval again (or are denied, per the level's table).",
            "Revocato, le chiamate che copriva chiederanno di nuovo l'approvazione (o saranno negate, secondo la tabella del livello)."
        )),
        g.id,
        esc(&owner.session.csrf),
        esc(l.t("Revoke this grant", "Revoca questo permesso")),
        esc(l.t("Cancel", "Annulla")),
    );
    shown(
        &owner,
        Nav::Grants,
        l.t("Revoke a grant", "Revoca un permesso"),
        &body,
    )
}

/// `POST /grants/<id>/revoke`: revokes, with the session's CSRF token.
async fn revoke(
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
    match client
        .revoke_grant(policy::RevokeGrantRequest {
            grant_id: id,
            principal: None,
        })
        .await
    {
        Ok(_) => {
            tracing::info!(grant_id = id, "the owner revoked a grant from the web page");
            Redirect::to(&format!("/grants?revoked={id}")).into_response()
        }
        Err(status) => {
            let body = unanswered(l, "policy", &status);
            shown(&owner, Nav::Grants, l.t("Revoke", "Revoca"), &body)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Verdicts

#[derive(Debug, Default, Deserialize)]
struct MonthQuery {
    #[serde(default)]
    month: String,
}

async fn verdicts(
    State(web): State<Arc<Web>>,
    owner: Owner,
    Query(q): Query<MonthQuery>,
) -> Response {
    let l = owner.lang;
    let mut client = web.upstream.vaglio.clone();
    let month = if q.month.is_empty() {
        today()[..7].to_owned()
    } else {
        q.month.chars().take(7).collect()
    };
    let mut body = format!(
        r#"<form class="filters" method="get" action="/verdicts"><label>{}<input type="month" name="month" value="{}"></label><button type="submit">{}</button></form>"#,
        esc(l.t("Month", "Mese")),
        esc(&month),
        esc(l.t("Show", "Mostra"))
    );
    let records = match client
        .list_verdicts(vaglio::ListVerdictsRequest {
            month: month.clone(),
            blocked_only: false,
            limit: 1000,
        })
        .await
    {
        Ok(r) => r.into_inner().records,
        Err(status) => {
            body.push_str(&unanswered(l, "vaglio", &status));
            Vec::new()
        }
    };
    let rule_of = |r: &vaglio::VerdictRecord| {
        let v = r.verdict.clone().unwrap_or_default();
        if v.rule_id.is_empty() {
            v.judge_kind
        } else {
            v.rule_id
        }
    };
    let mut counts: BTreeMap<(bool, String), u64> = BTreeMap::new();
    for r in &records {
        let approved = r.verdict.as_ref().is_some_and(|v| v.approved);
        *counts.entry((approved, rule_of(r))).or_default() += 1;
    }
    let _ = write!(body, "<h2>{}</h2>", esc(l.t("By rule", "Per regola")));
    let rows: Vec<Vec<String>> = counts
        .iter()
        .map(|((approved, rule), n)| {
            let v = if *approved { "approved" } else { "blocked" };
            vec![pill(v, v), esc(rule), n.to_string()]
        })
        .collect();
    body.push_str(&table(
        &[
            l.t("Verdict", "Verdetto"),
            l.t("Rule", "Regola"),
            l.t("Count", "Numero"),
        ],
        &rows,
        "verdict-counts",
    ));
    // Blocked first, each group newest first.
    let mut sorted: Vec<&vaglio::VerdictRecord> = records.iter().collect();
    sorted.sort_by_key(|r| {
        let v = r.verdict.as_ref();
        (
            v.is_some_and(|v| v.approved),
            std::cmp::Reverse(v.and_then(|v| v.ts.as_ref()).and_then(from_timestamp)),
        )
    });
    let rows: Vec<Vec<String>> = sorted
        .iter()
        .map(|r| {
            let v = r.verdict.clone().unwrap_or_default();
            let kind = if v.approved { "approved" } else { "blocked" };
            vec![
                esc(&at(v.ts.as_ref())),
                pill(kind, kind),
                format!("{:.2}", v.score),
                esc(&rule_of(r)),
                esc(&r.executor),
                esc(&r.args_keys.join(", ")),
                esc(&v.reason),
            ]
        })
        .collect();
    let _ = write!(
        body,
        "<h2>{} ({})</h2>",
        esc(l.t("Verdicts", "Verdetti")),
        rows.len()
    );
    body.push_str(&table(
        &[
            l.t("When", "Quando"),
            l.t("Verdict", "Verdetto"),
            l.t("Score", "Punteggio"),
            l.t("Rule", "Regola"),
            l.t("Executor", "Esecutore"),
            l.t("Argument keys", "Chiavi degli argomenti"),
            l.t("Reason", "Motivo"),
        ],
        &rows,
        "verdicts",
    ));
    shown(&owner, Nav::Verdicts, l.t("Verdicts", "Verdetti"), &body)
}

// ---------------------------------------------------------------------------------------
// Telos and schedules

fn decision_name(d: i32) -> &'static str {
    match vaglio::AlignmentDecision::try_from(d) {
        Ok(vaglio::AlignmentDecision::Publish) => "publish",
        Ok(vaglio::AlignmentDecision::Reject) => "rejected",
        Ok(vaglio::AlignmentDecision::DeferToDigest) => "digest",
        Ok(vaglio::AlignmentDecision::DeferToSlot) => "deferred",
        _ => "unknown",
    }
}

fn alignment_rows(results: &[vaglio::AlignmentResult]) -> Vec<Vec<String>> {
    results
        .iter()
        .map(|r| {
            let d = decision_name(r.decision);
            vec![
                esc(&at(r.at.as_ref())),
                esc(&person(r.principal.as_ref())),
                esc(&r.effect_class),
                pill(d, d),
                esc(&r.reason),
                format!("{:.3}", r.alignment_before_bother),
                format!("{:.3}", r.bother_sum),
                format!("{:.3}", r.bother_cost),
                format!("{:.3} / {:.3}", r.expected_alignment, r.threshold_used),
            ]
        })
        .collect()
}

async fn telos(State(web): State<Arc<Web>>, owner: Owner) -> Response {
    let l = owner.lang;
    let mut body = String::new();
    let mut vaglio_client = web.upstream.vaglio.clone();
    let _ = write!(
        body,
        "<h2>{}</h2>",
        esc(l.t("Telos in force", "Telos in vigore"))
    );
    match vaglio_client
        .get_telos(vaglio::GetTelosRequest::default())
        .await
    {
        Ok(t) => {
            let t = t.into_inner();
            for warning in &t.warnings {
                let _ = write!(body, r#"<p class="notice">{}</p>"#, esc(warning));
            }
            let rows: Vec<Vec<String>> = t
                .telos
                .iter()
                .map(|t| {
                    vec![
                        esc(&t.id),
                        esc(&t.phrase),
                        format!("{:.3}", t.weight_declared),
                        format!("{:.3}", t.weight_effective),
                        format!("{:.3}", t.fitness),
                        format!("{:.2}", t.activation_threshold),
                        if t.is_non_retreat {
                            "✓".into()
                        } else {
                            String::new()
                        },
                    ]
                })
                .collect();
            if rows.is_empty() {
                let _ = write!(
                    body,
                    r#"<p class="muted">{}</p>"#,
                    esc(l.t("No TELOS.md declared.", "Nessun TELOS.md dichiarato."))
                );
            } else {
                body.push_str(&table(
                    &[
                        "id",
                        l.t("Phrase", "Frase"),
                        l.t("Declared", "Dichiarato"),
                        l.t("Effective", "Effettivo"),
                        "fitness",
                        l.t("Threshold", "Soglia"),
                        l.t("Non-retreat", "Non arretramento"),
                    ],
                    &rows,
                    "telos",
                ));
            }
            let _ = write!(
                body,
                r#"<p class="muted">{} {}</p>"#,
                esc(l.t("Version", "Versione")),
                esc(t.version.get(..16).unwrap_or(&t.version))
            );
        }
        // No TELOS.md yet: said as the vaglio says it (how to write one).
        Err(status) if status.code() == tonic::Code::NotFound => {
            let _ = write!(body, r#"<p class="muted">{}</p>"#, esc(status.message()));
        }
        Err(status) => body.push_str(&unanswered(l, "vaglio", &status)),
    }
    let head = [
        l.t("When", "Quando"),
        l.t("Person", "Persona"),
        l.t("Effect", "Effetto"),
        l.t("Decision", "Decisione"),
        l.t("Why", "Perché"),
        l.t("Alignment", "Allineamento"),
        l.t("Bother sum", "Somma disturbo"),
        l.t("Bother cost", "Costo disturbo"),
        l.t("Expected / θ", "Atteso / θ"),
    ];
    for (title, borderline) in [
        (l.t("Rejected proposals", "Proposte respinte"), 0),
        (l.t("Borderline (7 days)", "Al limite (7 giorni)"), 10),
    ] {
        let _ = write!(body, "<h2>{}</h2>", esc(title));
        match vaglio_client
            .list_rejected_proposals(vaglio::ListRejectedProposalsRequest {
                limit: 50,
                borderline,
                ..Default::default()
            })
            .await
        {
            Ok(r) => {
                let rows = alignment_rows(&r.into_inner().results);
                if rows.is_empty() {
                    let _ = write!(
                        body,
                        r#"<p class="muted">{}</p>"#,
                        esc(l.t("None.", "Nessuna."))
                    );
                } else {
                    body.push_str(&table(&head, &rows, "proposals"));
                }
            }
            Err(status) => body.push_str(&unanswered(l, "vaglio", &status)),
        }
    }
    let _ = write!(body, "<h2>{}</h2>", esc(l.t("Schedules", "Pianificazioni")));
    let mut planner_client = web.upstream.planner.clone();
    match planner_client
        .list_schedules(planner::ListSchedulesRequest::default())
        .await
    {
        Ok(s) => {
            let rows: Vec<Vec<String>> = s
                .into_inner()
                .schedules
                .iter()
                .map(|s| {
                    let next: Vec<String> = s.next.iter().map(|t| at(Some(t))).collect();
                    vec![
                        esc(&s.name),
                        esc(&s.kind),
                        esc(&person(s.principal.as_ref())),
                        esc(&s.described),
                        pill(&s.state, &s.state),
                        esc(&next.join(", ")),
                        esc(&format!("{} {}", at(s.last_run_at.as_ref()), s.last_status)),
                    ]
                })
                .collect();
            body.push_str(&table(
                &[
                    l.t("Name", "Nome"),
                    l.t("Kind", "Tipo"),
                    l.t("Person", "Persona"),
                    l.t("When", "Quando"),
                    l.t("State", "Stato"),
                    l.t("Next firings", "Prossime esecuzioni"),
                    l.t("Last run", "Ultima esecuzione"),
                ],
                &rows,
                "schedules",
            ));
        }
        Err(status) => body.push_str(&unanswered(l, "planner", &status)),
    }
    shown(
        &owner,
        Nav::Telos,
        l.t("Telos & schedules", "Telos e pianificazioni"),
        &body,
    )
}

// ---------------------------------------------------------------------------------------
// The record's chains

fn chain_row(
    l: Lang,
    name: &str,
    answer: Result<(u64, String, String), tonic::Status>,
) -> Vec<String> {
    match answer {
        Ok((records, broken, day)) if broken.is_empty() => vec![
            esc(name),
            pill("intact", l.t("intact", "integro")),
            records.to_string(),
            format!("<code>{}</code>", esc(&day)),
            String::new(),
        ],
        Ok((records, broken, day)) => vec![
            esc(name),
            pill("broken", l.t("BROKEN", "ROTTO")),
            records.to_string(),
            format!("<code>{}</code>", esc(&day)),
            esc(&broken),
        ],
        Err(status) => vec![
            esc(name),
            pill("unavailable", l.t("not checked", "non verificato")),
            String::new(),
            String::new(),
            esc(&format!("{:?}: {}", status.code(), status.message())),
        ],
    }
}

async fn record(State(web): State<Arc<Web>>, owner: Owner) -> Response {
    let l = owner.lang;
    // A walk reads every record: one at a time, however often the page is reloaded.
    let _walking = web.walking.lock().await;
    let up = &web.upstream;
    let turns = up
        .planner
        .clone()
        .verify_turn_log(planner::VerifyTurnLogRequest::default())
        .await
        .map(|r| {
            let r = r.into_inner();
            (r.records, r.broken, r.newest_day_root)
        });
    let verdicts = up
        .vaglio
        .clone()
        .verify_verdict_log(vaglio::VerifyVerdictLogRequest::default())
        .await
        .map(|r| {
            let r = r.into_inner();
            (r.records, r.broken, r.newest_day_root)
        });
    let grants = up
        .policy
        .clone()
        .verify_grant_changes(policy::VerifyGrantChangesRequest::default())
        .await
        .map(|r| {
            let r = r.into_inner();
            (r.records, r.broken, r.newest_day_root)
        });
    let decisions = up
        .approval
        .clone()
        .verify_decisions(approval::VerifyDecisionsRequest::default())
        .await
        .map(|r| {
            let r = r.into_inner();
            (r.records, r.broken, r.newest_day_root)
        });
    let rows = vec![
        chain_row(l, l.t("Turn log", "Registro dei turni"), turns),
        chain_row(l, l.t("Verdict log", "Registro dei verdetti"), verdicts),
        chain_row(l, l.t("Grant changes", "Modifiche ai permessi"), grants),
        chain_row(
            l,
            l.t("Approval decisions", "Decisioni di approvazione"),
            decisions,
        ),
    ];
    let mut body = format!(
        r#"<p>{}</p>"#,
        esc(l.t(
            "Each record carries the hash of the one before it: an edited, removed or reordered record breaks the chain here and in `metnos audit verify`. Each day's first record keeps the chain as the day began (its daily root): note one down, and a log rewritten whole since will not match it.",
            "Ogni voce porta l'hash della precedente: una voce modificata, tolta o spostata rompe la catena, qui e in `metnos audit verify`. La prima voce di ogni giorno conserva la catena com'era all'inizio del giorno (la radice giornaliera): annotane una, e un registro riscritto per intero dopo non le corrisponderà."
        ))
    );
    body.push_str(&table(
        &[
            l.t("Record", "Registro"),
            l.t("State", "Stato"),
            l.t("Records", "Voci"),
            l.t("Newest daily root", "Radice giornaliera più recente"),
            l.t("First break", "Prima rottura"),
        ],
        &rows,
        "chains",
    ));
    shown(&owner, Nav::Record, l.t("Record", "Registro"), &body)
}

// ---------------------------------------------------------------------------------------
// What-if

#[derive(Debug, Default, Deserialize)]
struct ReplayQuery {
    #[serde(default)]
    level: String,
    #[serde(default)]
    days: Option<u32>,
}

fn would_text(l: Lang, from: Outcome, to: Outcome) -> String {
    let was = match from {
        Outcome::Allowed => l.t("allowed", "permesse"),
        Outcome::ApprovalRequired => l.t("needing approval", "che chiedevano approvazione"),
        Outcome::Denied => l.t("denied", "negate"),
    };
    let would = match to {
        Outcome::Allowed => l.t("would have been allowed", "sarebbero state permesse"),
        Outcome::ApprovalRequired => l.t(
            "would have needed approval",
            "avrebbero chiesto approvazione",
        ),
        Outcome::Denied => l.t("would have been denied", "sarebbero state negate"),
    };
    format!("{} {was} {would}", l.t("calls", "chiamate"))
}

async fn replay(
    State(web): State<Arc<Web>>,
    owner: Owner,
    Query(q): Query<ReplayQuery>,
) -> Response {
    let l = owner.lang;
    let days = q.days.unwrap_or(7).min(90);
    let level = AutonomyLevel::parse(&q.level).unwrap_or(AutonomyLevel::Full);
    let mut body = format!(
        r#"<form class="filters" method="get" action="/replay"><label>{}<select name="level">"#,
        esc(l.t("Level", "Livello"))
    );
    for candidate in [
        AutonomyLevel::ReadOnly,
        AutonomyLevel::Supervised,
        AutonomyLevel::Full,
    ] {
        let selected = if candidate == level { " selected" } else { "" };
        let _ = write!(
            body,
            r#"<option value="{0}"{selected}>{0}</option>"#,
            esc(candidate.as_str())
        );
    }
    let _ = write!(
        body,
        r#"</select></label><label>{}<input type="number" name="days" min="0" max="90" value="{days}"></label><button type="submit">{}</button></form>"#,
        esc(l.t("Days back", "Giorni indietro")),
        esc(l.t("Replay", "Simula"))
    );
    let active: HashSet<i64> = match all_grants(&web).await {
        Ok(list) => {
            let now = now_ms();
            list.iter()
                .filter(|g| grant_state(g, now) == "active")
                .map(|g| g.id)
                .collect()
        }
        Err(status) => {
            body.push_str(&unanswered(l, "policy", &status));
            return shown(&owner, Nav::Replay, l.t("What-if", "E se…"), &body);
        }
    };
    let mut tally = Tally::new(level, active);
    let mut client = web.upstream.planner.clone();
    let today: jiff::civil::Date = today().parse().unwrap_or_default();
    for back in (0..=days).rev() {
        let Ok(day) = today.checked_sub(jiff::Span::new().days(i64::from(back))) else {
            continue;
        };
        match client
            .list_turns(planner::ListTurnsRequest {
                date: day.to_string(),
                limit: 1000,
            })
            .await
        {
            Ok(listed) => {
                for json in listed.into_inner().records_json {
                    if let Ok(record) = serde_json::from_str::<Value>(&json) {
                        tally.add(&record);
                    }
                }
            }
            Err(status) => {
                body.push_str(&unanswered(l, "planner", &status));
                return shown(&owner, Nav::Replay, l.t("What-if", "E se…"), &body);
            }
        }
    }
    let _ = write!(
        body,
        r#"<p id="replay-summary">{} {} {} {} {} {}, {} {} {}:</p><ul>"#,
        tally.questions,
        esc(l.t("policy questions of", "domande a policy di")),
        tally.turns,
        esc(l.t("turns in the last", "turni negli ultimi")),
        days,
        esc(l.t("days", "giorni")),
        esc(l.t("asked again at", "richieste di nuovo a")),
        esc(level.as_str()),
        esc(l.t("with the grants active now", "con i permessi attivi ora")),
    );
    for change in tally.changes() {
        let caps: Vec<String> = change
            .capabilities
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        let _ = write!(
            body,
            "<li><strong>{}</strong> {} <span class=\"muted\">({})</span></li>",
            change.count,
            esc(&would_text(l, change.from, change.to)),
            esc(&caps.join(", "))
        );
    }
    let _ = write!(
        body,
        "<li>{} {}</li></ul>",
        tally.unchanged,
        esc(l.t("unchanged", "invariate"))
    );
    shown(&owner, Nav::Replay, l.t("What-if", "E se…"), &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_filters_keep_a_turn_by_person_and_by_any_outcome_it_had() {
        let record = json!({
            "turn_id": "t1",
            "principal": {"channel": "telegram", "sender_id": "42"},
            "final_kind": "answer",
            "steps": [
                {"executor": "fs_write", "policy": "approval_required", "verdict": "approved", "approval_decision": "rejected"},
            ],
        });
        let filter = |person: &str, outcome: &str| TurnFilter {
            person: person.into(),
            outcome: outcome.into(),
            ..TurnFilter::default()
        };
        for (person, outcome, kept) in [
            ("", "", true),
            ("telegram:42", "", true),
            ("telegram:4", "", false),
            ("cli:42", "", false),
            ("", "answer", true),
            ("", "approval_required", true),
            ("", "rejected", true),
            ("", "denied", false),
            ("telegram:42", "blocked", false),
        ] {
            assert_eq!(
                filter(person, outcome).keeps(&record),
                kept,
                "{person} {outcome}"
            );
        }
    }

    #[test]
    fn a_turn_shows_keys_and_labels_escaped_and_never_a_token() {
        let token = "f".repeat(43);
        let record = json!({
            "turn_id": "t\"><script>",
            "principal": {"channel": "cli", "sender_id": "<b>me</b>"},
            "final_kind": "answer",
            "steps": [{"executor": "fs_read", "arg_keys": ["<img src=x>"], "policy": "allowed",
                       "policy_reason": "Supervised x fs:read = allowed", "approval_token": token,
                       "labels": ["file:/tmp/<x>"], "ok": true}],
        });
        let html = render_turn(Lang::En, &record, "suspended");
        assert!(
            !html.contains("<script>") && !html.contains("<img") && !html.contains("<b>"),
            "{html}"
        );
        assert!(
            html.contains(r#"id="turn-t&quot;&gt;&lt;script&gt;""#),
            "{html}"
        );
        assert!(!html.contains(&token), "{html}");
        assert!(
            html.contains(&metnos_kit::chain::hash(&token)[..16]),
            "{html}"
        );
        assert!(html.contains("k-awaiting-approval"), "{html}");
    }
}
