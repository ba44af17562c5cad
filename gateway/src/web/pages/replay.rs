//! What-if: the last days' policy questions asked again at another level, with the grants
//! active now, and what would have changed.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{Markup, html};
use metnos_core::level::AutonomyLevel;
use metnos_core::replay::Tally;
use metnos_core::table::Outcome;
use metnos_kit::time::now_ms;
use metnos_proto::planner::v1 as planner;
use serde::Deserialize;
use serde_json::Value;

use super::grants::{all_grants, grant_state};
use super::{shown, today, unanswered};
use crate::web::html::{Lang, Nav, Shown};
use crate::web::owner::Owner;
use crate::web::state::Web;

#[derive(Debug, Default, Deserialize)]
pub struct ReplayQuery {
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

/// The form: the level to ask at and how many days back.
fn form(l: Lang, level: AutonomyLevel, days: u32) -> Markup {
    html! {
        form.filters method="get" action="/replay" {
            label {
                (l.t("Level", "Livello"))
                select name="level" {
                    @for candidate in AutonomyLevel::ALL {
                        option value=(candidate.as_str()) selected[candidate == level] { (candidate.as_str()) }
                    }
                }
            }
            label {
                (l.t("Days back", "Giorni indietro"))
                input type="number" name="days" min="0" max="90" value=(days);
            }
            button type="submit" { (l.t("Replay", "Simula")) }
        }
    }
}

/// The days' turns asked again into `tally`; the notice of a service that did not answer.
async fn tally_days(web: &Web, l: Lang, days: u32, tally: &mut Tally) -> Result<(), Markup> {
    let mut client = web.upstream.planner.clone();
    let today: jiff::civil::Date = today().parse().unwrap_or_default();
    for back in (0..=days).rev() {
        let Ok(day) = today.checked_sub(jiff::Span::new().days(i64::from(back))) else {
            continue;
        };
        let request = planner::ListTurnsRequest {
            date: day.to_string(),
            limit: 1000,
        };
        let listed = client
            .list_turns(request)
            .await
            .map_err(|status| unanswered(l, "planner", &status))?;
        for json in listed.into_inner().records_json {
            if let Ok(record) = serde_json::from_str::<Value>(&json) {
                tally.add(&record);
            }
        }
    }
    Ok(())
}

/// What the tally found: how many questions, what would have changed, what would not.
fn summary(l: Lang, tally: &Tally, days: u32, level: AutonomyLevel) -> Markup {
    html! {
        p id="replay-summary" {
            (tally.questions) " " (l.t("policy questions of", "domande a policy di")) " "
            (tally.turns) " " (l.t("turns in the last", "turni negli ultimi")) " " (days) " "
            (l.t("days", "giorni")) ", " (l.t("asked again at", "richieste di nuovo a")) " "
            (level.as_str()) " " (l.t("with the grants active now", "con i permessi attivi ora")) ":"
        }
        ul {
            @for change in tally.changes() {
                @let caps: Vec<String> = change.capabilities.iter().map(|(c, n)| format!("{c} {n}")).collect();
                li {
                    strong { (change.count) } " " (would_text(l, change.from, change.to)) " "
                    span.muted { "(" (Shown(&caps.join(", "))) ")" }
                }
            }
            li { (tally.unchanged) " " (l.t("unchanged", "invariate")) }
        }
    }
}

/// `GET /replay?level=…&days=…`.
pub async fn replay(
    State(web): State<Arc<Web>>,
    owner: Owner,
    Query(q): Query<ReplayQuery>,
) -> Response {
    let l = owner.lang;
    let days = q.days.unwrap_or(7).min(90);
    let level = AutonomyLevel::parse(&q.level).unwrap_or(AutonomyLevel::Full);
    let form = form(l, level, days);
    let title = l.t("What-if", "E se…");
    let active: HashSet<i64> = match all_grants(&web).await {
        Ok(list) => {
            let now = now_ms();
            list.iter()
                .filter(|g| grant_state(g, now) == "active")
                .map(|g| g.id)
                .collect()
        }
        Err(status) => {
            let notice = unanswered(l, "policy", &status);
            return shown(&owner, Nav::Replay, title, html! { (form) (notice) });
        }
    };
    let mut tally = Tally::new(level, active);
    if let Err(notice) = tally_days(&web, l, days, &mut tally).await {
        return shown(&owner, Nav::Replay, title, html! { (form) (notice) });
    }
    let summary = summary(l, &tally, days, level);
    shown(&owner, Nav::Replay, title, html! { (form) (summary) })
}
