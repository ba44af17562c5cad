//! Verdicts: a month's vaglio verdicts, counted by rule, then each one (blocked first).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{Markup, html};
use metnos_kit::time::from_timestamp;
use metnos_proto::vaglio::v1 as vaglio;
use serde::Deserialize;

use super::{at, shown, today, unanswered};
use crate::web::html::{Lang, Nav, Shown, pill, table};
use crate::web::owner::Owner;
use crate::web::state::Web;

#[derive(Debug, Default, Deserialize)]
pub struct MonthQuery {
    #[serde(default)]
    month: String,
}

/// The rule that decided, or the judge when no rule did.
fn rule_of(r: &vaglio::VerdictRecord) -> String {
    let v = r.verdict.clone().unwrap_or_default();
    if v.rule_id.is_empty() {
        v.judge_kind
    } else {
        v.rule_id
    }
}

/// How many verdicts each rule gave, approved and blocked apart.
fn counts(l: Lang, records: &[vaglio::VerdictRecord]) -> Markup {
    let mut counts: BTreeMap<(bool, String), u64> = BTreeMap::new();
    for r in records {
        let approved = r.verdict.as_ref().is_some_and(|v| v.approved);
        *counts.entry((approved, rule_of(r))).or_default() += 1;
    }
    let rows: Vec<Vec<Markup>> = counts
        .iter()
        .map(|((approved, rule), n)| {
            let v = if *approved { "approved" } else { "blocked" };
            vec![pill(v, v), html! { (Shown(rule)) }, html! { (n) }]
        })
        .collect();
    let head = [
        l.t("Verdict", "Verdetto"),
        l.t("Rule", "Regola"),
        l.t("Count", "Numero"),
    ];
    table(&head, &rows, "verdict-counts")
}

/// Every verdict: blocked first, each group newest first.
fn each(records: &[vaglio::VerdictRecord]) -> Vec<Vec<Markup>> {
    let mut sorted: Vec<&vaglio::VerdictRecord> = records.iter().collect();
    sorted.sort_by_key(|r| {
        let v = r.verdict.as_ref();
        (
            v.is_some_and(|v| v.approved),
            std::cmp::Reverse(v.and_then(|v| v.ts.as_ref()).and_then(from_timestamp)),
        )
    });
    sorted
        .iter()
        .map(|r| {
            let v = r.verdict.clone().unwrap_or_default();
            let kind = if v.approved { "approved" } else { "blocked" };
            vec![
                html! { (at(v.ts.as_ref())) },
                pill(kind, kind),
                html! { (format!("{:.2}", v.score)) },
                html! { (Shown(&rule_of(r))) },
                html! { (Shown(&r.executor)) },
                html! { (Shown(&r.args_keys.join(", "))) },
                html! { (Shown(&v.reason)) },
            ]
        })
        .collect()
}

/// `GET /verdicts?month=YYYY-MM`.
pub async fn verdicts(
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
    let listed = vaglio::ListVerdictsRequest {
        month: month.clone(),
        blocked_only: false,
        limit: 1000,
    };
    let (records, notice) = match client.list_verdicts(listed).await {
        Ok(r) => (r.into_inner().records, None),
        Err(status) => (Vec::new(), Some(unanswered(l, "vaglio", &status))),
    };
    let rows = each(&records);
    let head = [
        l.t("When", "Quando"),
        l.t("Verdict", "Verdetto"),
        l.t("Score", "Punteggio"),
        l.t("Rule", "Regola"),
        l.t("Executor", "Esecutore"),
        l.t("Argument keys", "Chiavi degli argomenti"),
        l.t("Reason", "Motivo"),
    ];
    let body = html! {
        form.filters method="get" action="/verdicts" {
            label { (l.t("Month", "Mese")) input type="month" name="month" value=(Shown(&month)); }
            button type="submit" { (l.t("Show", "Mostra")) }
        }
        @if let Some(notice) = notice { (notice) }
        h2 { (l.t("By rule", "Per regola")) }
        (counts(l, &records))
        h2 { (l.t("Verdicts", "Verdetti")) " (" (rows.len()) ")" }
        (table(&head, &rows, "verdicts"))
    };
    shown(&owner, Nav::Verdicts, l.t("Verdicts", "Verdetti"), body)
}
