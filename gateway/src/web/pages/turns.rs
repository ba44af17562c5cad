//! Turns: the day's turns, and while it is today the ones under way, followed live
//! (Server-Sent Events, one rendered `<article>` per change).

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use metnos_kit::time::now_ms;
use metnos_proto::planner::v1 as planner;
use serde::Deserialize;
use serde_json::Value;

use super::{muted, request_name, shown, today, unanswered};
use crate::web::html::{Lang, Nav, Shown, pill};
use crate::web::owner::{Owner, failure};
use crate::web::state::Web;

#[derive(Debug, Default, Deserialize)]
pub struct TurnFilter {
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

/// A JSON array's strings.
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect()
}

/// One turn as an `<article>` (the live view replaces it whole).
pub fn render_turn(l: Lang, record: &Value, state: &str) -> Markup {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let id = s(&record["turn_id"]);
    let kind = if state == "suspended" {
        "awaiting_approval".to_owned()
    } else {
        s(&record["final_kind"])
    };
    let who = format!(
        "{}:{}",
        s(&record["principal"]["channel"]),
        s(&record["principal"]["sender_id"])
    );
    let level = s(&record["level"])
        .replace("AUTONOMY_LEVEL_", "")
        .to_lowercase();
    let tiers = strings(&record["tiers"]).join(", ");
    let latency = record["latency_ms"].as_u64().unwrap_or(0);
    let prompt = record["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    let completion = record["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    html! {
        article.turn id={ "turn-" (Shown(&id)) } {
            header {
                strong { (Shown(&who)) } " · " (Shown(&level)) " · "
                (l.t("tier", "fascia")) " " (Shown(&tiers)) " · " (pill(&kind, &kind)) " · "
                (latency) " ms · " (l.t("tokens", "token")) " " (prompt) "/" (completion) " · "
                span.muted { (Shown(&s(&record["started_at"]))) }
            }
            ol.steps {
                @for step in record["steps"].as_array().into_iter().flatten() {
                    (render_step(l, step))
                }
            }
        }
    }
}

/// One step of a turn: the call (argument keys only), policy, vaglio, approval (its
/// request's name, never its token), the observation.
fn render_step(l: Lang, step: &Value) -> Markup {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let token = s(&step["approval_token"]);
    let name = if token.is_empty() {
        String::new()
    } else {
        request_name(&token)
    };
    let score = step["verdict_score"]
        .as_f64()
        .map_or(String::new(), |v| format!("{v:.2}"));
    let ok = if step["ok"].as_bool() == Some(true) {
        "ok"
    } else {
        "failed"
    };
    html! {
        li {
            strong { (Shown(&s(&step["executor"]))) } "(" (Shown(&strings(&step["arg_keys"]).join(", "))) ")"
            @if let Some(policy) = step["policy"].as_str() {
                " · policy " (pill(policy, policy)) " "
                span.muted { (Shown(&s(&step["policy_reason"]))) }
            }
            @if let Some(verdict) = step["verdict"].as_str() {
                " · vaglio " (pill(verdict, verdict)) " " (score) " "
                span.muted { (Shown(&s(&step["verdict_rule"]))) }
            }
            @if let Some(decision) = step["approval_decision"].as_str() {
                " · " (l.t("approval", "approvazione")) " " (pill(decision, decision)) " "
                span.muted { (Shown(&name)) }
            } @else if !token.is_empty() {
                " · " (pill("awaiting_approval", l.t("card sent", "scheda inviata"))) " "
                span.muted { (Shown(&name)) }
            }
            " · " (l.t("observation", "osservazione")) " " (pill(ok, ok)) " "
            (step["duration_ms"].as_u64().unwrap_or(0)) " ms "
            span.muted { (Shown(&strings(&step["labels"]).join(", "))) }
        }
    }
}

/// The outcomes the filter offers (the empty one: any).
const OUTCOMES: [&str; 12] = [
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
];

/// The turns the filter keeps, rendered: those under way (whichever replica runs them)
/// when `live`, then the day's log; and a notice for each service that did not answer.
async fn gather(
    web: &Web,
    l: Lang,
    filter: &TurnFilter,
    day: &str,
    live: bool,
) -> (Vec<Markup>, Vec<Markup>) {
    let mut client = web.upstream.planner.clone();
    let (mut articles, mut notices) = (Vec::new(), Vec::new());
    let mut seen = HashSet::new();
    if live {
        let unfinished = planner::ListTurnChangesRequest {
            unfinished: true,
            limit: 100,
            ..Default::default()
        };
        match client.list_turn_changes(unfinished).await {
            Ok(changes) => {
                for change in changes.into_inner().changes {
                    if change.state == "finished" || !seen.insert(change.turn_id.clone()) {
                        continue;
                    }
                    if let Ok(record) = serde_json::from_str::<Value>(&change.record_json)
                        && filter.keeps(&record)
                    {
                        articles.push(render_turn(l, &record, &change.state));
                    }
                }
            }
            Err(status) => notices.push(unanswered(l, "planner", &status)),
        }
    }
    let listed = planner::ListTurnsRequest {
        date: day.to_owned(),
        limit: 200,
    };
    match client.list_turns(listed).await {
        Ok(listed) => {
            for json in listed.into_inner().records_json {
                let Ok(record) = serde_json::from_str::<Value>(&json) else {
                    continue;
                };
                let id = record["turn_id"].as_str().unwrap_or_default().to_owned();
                if seen.insert(id) && filter.keeps(&record) {
                    articles.push(render_turn(l, &record, "finished"));
                }
            }
        }
        Err(status) => notices.push(unanswered(l, "planner", &status)),
    }
    (articles, notices)
}

/// `GET /turns`: the filters, the turns, and (today) the live feed's address.
pub async fn turns(
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
    let (articles, notices) = gather(&web, l, &filter, &day, live).await;
    let events = live.then(|| format!("/turns/events?{}&after={started}", filter.query()));
    let body = html! {
        form.filters method="get" action="/turns" {
            label { (l.t("Day", "Giorno")) input type="date" name="day" value=(Shown(&day)); }
            label {
                (l.t("Person", "Persona"))
                input name="person" placeholder="telegram:42" value=(Shown(&filter.person));
            }
            label {
                (l.t("Outcome", "Esito"))
                select name="outcome" {
                    @for outcome in OUTCOMES {
                        option value=(outcome) selected[outcome == filter.outcome] {
                            (if outcome.is_empty() { l.t("any", "tutti") } else { outcome })
                        }
                    }
                }
            }
            button type="submit" { (l.t("Show", "Mostra")) }
        }
        @for notice in &notices { (notice) }
        section id="turns" data-events=[events] {
            @if articles.is_empty() {
                p id="no-turns" class="muted" { (l.t("No turns yet.", "Nessun turno per ora.")) }
            }
            @for article in &articles { (article) }
        }
        @if live {
            (muted(l.t(
                "Live: new turns and steps appear here as they run.",
                "In diretta: i nuovi turni e passi compaiono qui mentre avvengono."
            )))
        }
    };
    shown(&owner, Nav::Turns, l.t("Turns", "Turni"), body)
}

/// Changes asked for at once by the live feed.
const BATCH: u32 = 200;

/// `GET /turns/events`: the turns' changes as Server-Sent Events (`turn`: one rendered
/// `<article>`), while the session lasts.
pub async fn turn_events(
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
                let article = render_turn(l, &record, &change.state).into_string();
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
        let html = render_turn(Lang::En, &record, "suspended").into_string();
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
