//! The record: each service's hash chain walked, intact or where it first breaks, with
//! its newest daily root.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};
use metnos_proto::approval::v1 as approval;
use metnos_proto::planner::v1 as planner;
use metnos_proto::policy::v1 as policy;
use metnos_proto::vaglio::v1 as vaglio;

use super::shown;
use crate::web::html::{Lang, Nav, Shown, pill, table};
use crate::web::owner::Owner;
use crate::web::state::Web;

/// What a walk of a chain found: its records, its first break (empty: none), its newest
/// daily root.
type Walked = Result<(u64, String, String), tonic::Status>;

fn chain_row(l: Lang, name: &str, answer: Walked) -> Vec<Markup> {
    let name = html! { (name) };
    match answer {
        Ok((records, broken, day)) => {
            let state = if broken.is_empty() {
                pill("intact", l.t("intact", "integro"))
            } else {
                pill("broken", l.t("BROKEN", "ROTTO"))
            };
            vec![
                name,
                state,
                html! { (records) },
                html! { code { (Shown(&day)) } },
                html! { (Shown(&broken)) },
            ]
        }
        Err(status) => {
            let why = format!("{:?}: {}", status.code(), status.message());
            vec![
                name,
                pill("unavailable", l.t("not checked", "non verificato")),
                html! {},
                html! {},
                html! { (Shown(&why)) },
            ]
        }
    }
}

/// What a log's walk found wrong: its break, else its gap records (issue 41: records
/// answered but never written leave an intact chain that is not a whole record).
fn with_gaps(broken: String, not_logged: u64) -> String {
    if broken.is_empty() && not_logged > 0 {
        format!("{not_logged} record(s) answered but never written (the disk refused them)")
    } else {
        broken
    }
}

/// The four chains, walked one after the other.
async fn walk(web: &Web) -> [Walked; 4] {
    let up = &web.upstream;
    let turns = up
        .planner
        .clone()
        .verify_turn_log(planner::VerifyTurnLogRequest::default())
        .await
        .map(|r| {
            let r = r.into_inner();
            (
                r.records,
                with_gaps(r.broken, r.not_logged),
                r.newest_day_root,
            )
        });
    let verdicts = up
        .vaglio
        .clone()
        .verify_verdict_log(vaglio::VerifyVerdictLogRequest::default())
        .await
        .map(|r| {
            let r = r.into_inner();
            (
                r.records,
                with_gaps(r.broken, r.not_logged),
                r.newest_day_root,
            )
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
    [turns, verdicts, grants, decisions]
}

/// `GET /record`.
pub async fn record(State(web): State<Arc<Web>>, owner: Owner) -> Response {
    let l = owner.lang;
    // A walk reads every record: one at a time, however often the page is reloaded.
    let walked = {
        let _walking = web.walking.lock().await;
        walk(&web).await
    };
    let names = [
        l.t("Turn log", "Registro dei turni"),
        l.t("Verdict log", "Registro dei verdetti"),
        l.t("Grant changes", "Modifiche ai permessi"),
        l.t("Approval decisions", "Decisioni di approvazione"),
    ];
    let rows: Vec<Vec<Markup>> = names
        .into_iter()
        .zip(walked)
        .map(|(name, answer)| chain_row(l, name, answer))
        .collect();
    let head = [
        l.t("Record", "Registro"),
        l.t("State", "Stato"),
        l.t("Records", "Voci"),
        l.t("Newest daily root", "Radice giornaliera più recente"),
        l.t("First break", "Prima rottura"),
    ];
    let body = html! {
        p {
            (l.t(
                "Each record carries the hash of the one before it: an edited, removed or reordered record breaks the chain here and in `metnos audit verify`. Each day's first record keeps the chain as the day began (its daily root): note one down, and a log rewritten whole since will not match it.",
                "Ogni voce porta l'hash della precedente: una voce modificata, tolta o spostata rompe la catena, qui e in `metnos audit verify`. La prima voce di ogni giorno conserva la catena com'era all'inizio del giorno (la radice giornaliera): annotane una, e un registro riscritto per intero dopo non le corrisponderà."
            ))
        }
        (table(&head, &rows, "chains"))
    };
    shown(&owner, Nav::Record, l.t("Record", "Registro"), body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_with_gap_records_is_not_shown_whole() {
        assert_eq!(with_gaps(String::new(), 0), "");
        assert_eq!(
            with_gaps(String::new(), 3),
            "3 record(s) answered but never written (the disk refused them)"
        );
        // A break says more than a gap: it is shown.
        assert_eq!(
            with_gaps("line 2 was edited".into(), 3),
            "line 2 was edited"
        );
    }
}
