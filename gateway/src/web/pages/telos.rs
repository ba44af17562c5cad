//! Telos and schedules: the TELOS.md in force, the proposals the telos engine rejected or
//! nearly did, and the schedules with their next firings.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};
use metnos_proto::planner::v1 as planner;
use metnos_proto::vaglio::v1 as vaglio;

use super::{at, muted, person, shown, unanswered};
use crate::web::html::{Lang, Nav, Shown, pill, table};
use crate::web::owner::Owner;
use crate::web::state::Web;

fn decision_name(d: i32) -> &'static str {
    match vaglio::AlignmentDecision::try_from(d) {
        Ok(vaglio::AlignmentDecision::Publish) => "publish",
        Ok(vaglio::AlignmentDecision::Reject) => "rejected",
        Ok(vaglio::AlignmentDecision::DeferToDigest) => "digest",
        Ok(vaglio::AlignmentDecision::DeferToSlot) => "deferred",
        _ => "unknown",
    }
}

fn alignment_rows(results: &[vaglio::AlignmentResult]) -> Vec<Vec<Markup>> {
    results
        .iter()
        .map(|r| {
            let d = decision_name(r.decision);
            vec![
                html! { (at(r.at.as_ref())) },
                html! { (Shown(&person(r.principal.as_ref()))) },
                html! { (Shown(&r.effect_class)) },
                pill(d, d),
                html! { (Shown(&r.reason)) },
                html! { (format!("{:.2}", r.urgency)) },
                html! { (format!("{:.2}", r.confidence)) },
                html! { (format!("{:.3}", r.alignment_before_bother)) },
                html! { (format!("{:.3}", r.bother_sum)) },
                html! { (format!("{:.3}", r.bother_cost)) },
                html! { (format!("{:.3} / {:.3}", r.expected_alignment, r.threshold_used)) },
            ]
        })
        .collect()
}

/// The telos in force: its warnings, its table, its version.
fn telos_table(l: Lang, t: &vaglio::GetTelosResponse) -> Markup {
    let rows: Vec<Vec<Markup>> = t
        .telos
        .iter()
        .map(|t| {
            vec![
                html! { (Shown(&t.id)) },
                html! { (Shown(&t.phrase)) },
                html! { (format!("{:.3}", t.weight_declared)) },
                html! { (format!("{:.3}", t.weight_effective)) },
                html! { (format!("{:.3}", t.fitness)) },
                html! { (format!("{:.2}", t.activation_threshold)) },
                html! { @if t.is_non_retreat { "✓" } },
            ]
        })
        .collect();
    let head = [
        "id",
        l.t("Phrase", "Frase"),
        l.t("Declared", "Dichiarato"),
        l.t("Effective", "Effettivo"),
        "fitness",
        l.t("Threshold", "Soglia"),
        l.t("Non-retreat", "Non arretramento"),
    ];
    html! {
        @for warning in &t.warnings { p.notice { (Shown(warning)) } }
        @if rows.is_empty() {
            (muted(l.t("No TELOS.md declared.", "Nessun TELOS.md dichiarato.")))
        } @else {
            (table(&head, &rows, "telos"))
        }
        p.muted { (l.t("Version", "Versione")) " " (Shown(t.version.get(..16).unwrap_or(&t.version))) }
    }
}

/// The telos section: the table, or why there is none.
async fn telos_section(web: &Web, l: Lang) -> Markup {
    let asked = web
        .upstream
        .vaglio
        .clone()
        .get_telos(vaglio::GetTelosRequest::default())
        .await;
    match asked {
        Ok(t) => telos_table(l, &t.into_inner()),
        // No TELOS.md yet: said as the vaglio says it (how to write one).
        Err(status) if status.code() == tonic::Code::NotFound => muted(status.message()),
        Err(status) => unanswered(l, "vaglio", &status),
    }
}

/// The rejected proposals, and the borderline ones of the last 7 days.
async fn proposals(web: &Web, l: Lang) -> Markup {
    let head = [
        l.t("When", "Quando"),
        l.t("Person", "Persona"),
        l.t("Effect", "Effetto"),
        l.t("Decision", "Decisione"),
        l.t("Why", "Perché"),
        l.t("Urgency", "Urgenza"),
        l.t("Confidence", "Fiducia"),
        l.t("Alignment", "Allineamento"),
        l.t("Bother sum", "Somma disturbo"),
        l.t("Bother cost", "Costo disturbo"),
        l.t("Expected / θ", "Atteso / θ"),
    ];
    let mut sections = Vec::new();
    for (title, borderline) in [
        (l.t("Rejected proposals", "Proposte respinte"), 0),
        (l.t("Borderline (7 days)", "Al limite (7 giorni)"), 10),
    ] {
        let request = vaglio::ListRejectedProposalsRequest {
            limit: 50,
            borderline,
            ..Default::default()
        };
        let shown = match web
            .upstream
            .vaglio
            .clone()
            .list_rejected_proposals(request)
            .await
        {
            Ok(r) => {
                let rows = alignment_rows(&r.into_inner().results);
                if rows.is_empty() {
                    muted(l.t("None.", "Nessuna."))
                } else {
                    table(&head, &rows, "proposals")
                }
            }
            Err(status) => unanswered(l, "vaglio", &status),
        };
        sections.push(html! { h2 { (title) } (shown) });
    }
    html! { @for section in &sections { (section) } }
}

/// The schedules, with their next firings and last run.
async fn schedules(web: &Web, l: Lang) -> Markup {
    let listed = web
        .upstream
        .planner
        .clone()
        .list_schedules(planner::ListSchedulesRequest::default())
        .await;
    let schedules = match listed {
        Ok(s) => s.into_inner().schedules,
        Err(status) => return unanswered(l, "planner", &status),
    };
    let rows: Vec<Vec<Markup>> = schedules
        .iter()
        .map(|s| {
            let next: Vec<String> = s.next.iter().map(|t| at(Some(t))).collect();
            let last = format!("{} {}", at(s.last_run_at.as_ref()), s.last_status);
            vec![
                html! { (Shown(&s.name)) },
                html! { (Shown(&s.kind)) },
                html! { (Shown(&person(s.principal.as_ref()))) },
                html! { (Shown(&s.described)) },
                pill(&s.state, &s.state),
                html! { (Shown(&next.join(", "))) },
                html! { (Shown(&last)) },
            ]
        })
        .collect();
    let head = [
        l.t("Name", "Nome"),
        l.t("Kind", "Tipo"),
        l.t("Person", "Persona"),
        l.t("When", "Quando"),
        l.t("State", "Stato"),
        l.t("Next firings", "Prossime esecuzioni"),
        l.t("Last run", "Ultima esecuzione"),
    ];
    table(&head, &rows, "schedules")
}

/// `GET /telos`.
pub async fn telos(State(web): State<Arc<Web>>, owner: Owner) -> Response {
    let l = owner.lang;
    let telos = telos_section(&web, l).await;
    let proposals = proposals(&web, l).await;
    let schedules = schedules(&web, l).await;
    let body = html! {
        h2 { (l.t("Telos in force", "Telos in vigore")) }
        (telos)
        (proposals)
        h2 { (l.t("Schedules", "Pianificazioni")) }
        (schedules)
    };
    shown(
        &owner,
        Nav::Telos,
        l.t("Telos & schedules", "Telos e pianificazioni"),
        body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 47, item 4: the spectator shows a proposal's urgency and confidence beside its
    /// alignment, and nothing of its words.
    #[test]
    fn a_rejected_proposal_s_row_shows_its_urgency_and_confidence() {
        let result = vaglio::AlignmentResult {
            effect_class: "grant_offer:fs:write".into(),
            decision: vaglio::AlignmentDecision::Reject as i32,
            reason: "below_threshold".into(),
            urgency: 2.0,
            confidence: 0.6,
            alignment_before_bother: 0.12,
            threshold_used: 0.15,
            ..Default::default()
        };
        let rows = alignment_rows(&[result]);
        let cells: Vec<String> = rows[0].iter().map(|m| m.clone().into_string()).collect();
        assert_eq!(cells[5], "2.00", "{cells:?}");
        assert_eq!(cells[6], "0.60", "{cells:?}");
        assert_eq!(cells[7], "0.120", "{cells:?}");
    }
}
