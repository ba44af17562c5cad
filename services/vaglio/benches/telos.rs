//! The telos engine without the model (issue 21's target: the alignment composition and the
//! budget decision ≤ 50 µs per proposal with a year of ledger history for one person; a
//! never-listed proposal is rejected without any LLM call).
//!
//! `cargo bench -p metnos-vaglio --bench telos`
//!
//! - `telos/compose_and_budget/window`: seven telos composed, the bother kernel over the
//!   publications the store reads (the last 24 h of a year-long ledger), the quota, the
//!   decision — the code the engine runs inside its transaction.
//! - `telos/compose_and_budget/whole_year`: the same over every publication of the year (what
//!   it would cost without the store's window).
//! - `telos/evaluate/never_listed`: the whole engine on SQLite for a never-listed proposal
//!   (file check, store lookups; no model).
//! - `telos/evaluate/dry_run`: the whole engine on SQLite with an instant estimator in place
//!   of the model: file check, never-list, stops, window, fitness, the ledger read in its
//!   transaction and the decision (rolled back, so every iteration sees the same year).

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use metnos_core::Principal;
use metnos_kit::clock::ManualClock;
use metnos_kit::config::{TelosConfig, TelosQuotas};
use metnos_kit::store::Pool;
use metnos_vaglio::telos::engine::{self, Bother, Source, Term};
use metnos_vaglio::telos::file::{self, Telos, TelosKey};
use metnos_vaglio::telos::fit::{Asked, Estimate, Fit, FitError, FitEstimator};
use metnos_vaglio::telos::store::{LedgerView, MIGRATIONS, TelosStore};
use metnos_vaglio::telos::{
    Budget, Decision, Evaluation, Files, Origin, ProposalIn, Reason, Settings, TelosEngine,
};

const DAY: i64 = 86_400_000;
const NOW: i64 = 1_795_687_200_000; // 2026-11-26 10:00 UTC

const TELOS: &str = "---
telos_version: 1.1
written_at: 2026-11-01T12:00:00+01:00
written_by: roberto
previous_hash: genesis
---
## t.tempo — Free my time
weight: 0.22
activation_threshold: 0.30
## t.ordine — Keep my data in order
weight: 0.13
activation_threshold: 0.40
## t.puntualita — Don't make me miss deadlines
weight: 0.18
activation_threshold: 0.25
## t.protezione — Protect our privacy
weight: 0.18
activation_threshold: 0.20
## t.discrezione — Do not interrupt me
weight: 0.09
activation_threshold: 0.50
## t.parsimonia — Don't spend more than needed
weight: 0.08
activation_threshold: 0.35
## t.coltivazione_strumenti — Don't leave a request unmet
weight: 0.12
activation_threshold: 0.10
";

/// A year for one person on Telegram: each day three ad-hoc publications, two scheduler
/// firings and ten digest items (the most the quotas allow).
fn year() -> Vec<(i64, &'static str, &'static str, f64)> {
    let mut rows = Vec::new();
    for day in 0..365 {
        let start = NOW - (365 - day) * DAY;
        for h in [9, 13, 18] {
            rows.push((start + h * 3_600_000, "publish", "adhoc", 1.0));
        }
        for h in [8, 20] {
            rows.push((
                start + h * 3_600_000,
                "publish",
                "scheduler_in_cadence",
                0.0,
            ));
        }
        for m in 0..10 {
            rows.push((start + 22 * 3_600_000 + m * 60_000, "digest", "adhoc", 0.0));
        }
    }
    rows
}

fn evaluation() -> Evaluation {
    Evaluation {
        proposal_id: "p".into(),
        person: "telegram:42".into(),
        channel: "telegram".into(),
        effect_class: "grant_offer:fs:write".into(),
        kind: "grant_offer".into(),
        description: String::new(),
        origin: Origin::Adhoc,
        urgency: 1.0,
        confidence: 1.0,
        per_telos: Vec::new(),
        alignment_before_bother: 0.0,
        bother_sum: 0.0,
        bother_cost: 0.0,
        expected_alignment: 0.0,
        decision: Decision::Reject,
        reason: Reason::NoTelosDeclared,
        threshold_used: 0.15,
        at_ms: NOW,
        not_before_ms: None,
        telos_version: String::new(),
        ask_person: None,
    }
}

#[derive(Debug)]
struct Instant7;

#[tonic::async_trait]
impl FitEstimator for Instant7 {
    async fn estimate(&self, _: &Asked<'_>, telos: &[Telos]) -> Result<Estimate, FitError> {
        Ok(telos
            .iter()
            .map(|t| Fit {
                telos_id: t.id.clone(),
                fit: 0.6,
                why: "bench".into(),
            })
            .collect::<Vec<_>>()
            .into())
    }
}

fn bench(c: &mut Criterion) {
    let year = year();
    let fits = [0.6, 0.2, 0.7, 0.1, 0.9, 0.4, 0.3];
    let thresholds = [0.30, 0.40, 0.25, 0.20, 0.50, 0.35, 0.10];
    let weights = [0.22, 0.13, 0.18, 0.18, 0.09, 0.08, 0.12];
    let budget = Budget {
        bother: Bother::default(),
        theta: 0.15,
        quotas: TelosQuotas::default(),
        source: Source::Adhoc,
        cli: false,
        now_ms: NOW,
        consented: false,
        near_window: false,
    };
    let view_of = |since: i64| {
        let mut view = LedgerView::default();
        for (at, place, source, m) in &year {
            if *place == "publish" && *at >= since {
                view.publications.push((*at, *m));
                if *source == "adhoc" && *at >= NOW - DAY {
                    view.adhoc_today += 1;
                }
            }
        }
        view
    };
    let mut group = c.benchmark_group("telos/compose_and_budget");
    for (name, view) in [
        ("window", view_of(NOW - 24 * 3_600_000)),
        ("whole_year", view_of(0)),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let terms: Vec<Term> = (0..7)
                    .map(|i| Term {
                        fit: fits[i],
                        threshold: thresholds[i],
                        weight_effective: weights[i] * engine::fitness_factor(0.1),
                    })
                    .collect();
                let mut e = evaluation();
                e.alignment_before_bother = engine::alignment(1.5, 0.9, &terms);
                budget.decide(std::hint::black_box(&view), &mut e);
                std::hint::black_box(e.decision)
            })
        });
    }
    group.finish();

    // The whole engine on SQLite with the year in its ledger.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = runtime.block_on(async {
        let spec = metnos_kit::config::StoreSpec::Sqlite {
            path: dir.path().join("vaglio.db"),
        };
        let db = metnos_kit::store::open(&spec, "vaglio", &MIGRATIONS, Duration::from_secs(10))
            .await
            .unwrap();
        if let Pool::Sqlite(pool) = db.pool() {
            let mut tx = pool.begin().await.unwrap();
            for (i, (at, place, source, m)) in year.iter().enumerate() {
                sqlx::query(
                    "INSERT INTO telos_ledger (person, channel, place, source, weight, session, proposal_id, at_ms) \
                     VALUES ('telegram:42', 'telegram', $1, $2, $3, '', $4, $5)",
                )
                .bind(place)
                .bind(source)
                .bind(m)
                .bind(format!("old-{i}"))
                .bind(at)
                .execute(&mut *tx)
                .await
                .unwrap();
            }
            tx.commit().await.unwrap();
        }
        let files = Files {
            root: dir.path().join("telos"),
            owner_file: dir.path().join("config/TELOS.md"),
            owner_principals: Vec::new(),
            key_file: dir.path().join("keys/telos.key"),
        };
        let key = TelosKey::load_or_create(&files.key_file).unwrap();
        let person = Principal::new("telegram", "42").unwrap();
        file::commit(
            &files.person_file(&person),
            TELOS,
            &key.scoped("telegram_42"),
            "r",
            "2026-11-01T12:00:00Z",
        )
        .unwrap();
        let store = TelosStore::new(db);
        store
            .add_never("telegram:42", "never:this", "old", 0)
            .await
            .unwrap();
        let clock = ManualClock::new();
        clock.advance(NOW - metnos_kit::clock::Clock::now_ms(&clock));
        let config = TelosConfig {
            time_zone: "UTC".into(),
            protected_windows: Vec::new(),
            ..TelosConfig::default()
        };
        TelosEngine::new(
            store,
            Settings::from_config(&config),
            files,
            Arc::new(Instant7),
            Arc::new(clock),
        )
    });
    let proposal = |effect_class: &str| ProposalIn {
        proposal_id: "bench".into(),
        kind: "grant_offer".into(),
        effect_class: effect_class.into(),
        description: "Allow writes in ~/Documents/invoices from now on?".into(),
        channel: "telegram".into(),
        origin: Origin::Adhoc,
        schedule_id: String::new(),
        person: Principal::new("telegram", "42").unwrap(),
        session_id: String::new(),
        level: None,
        urgency: 1.0,
        confidence: 1.0,
    };
    let mut group = c.benchmark_group("telos/evaluate");
    let never = proposal("never:this");
    group.bench_function("never_listed", |b| {
        b.iter(|| {
            let e = runtime.block_on(engine.evaluate(&never, true)).unwrap();
            assert_eq!(e.reason, "never_list");
        })
    });
    let weighed = proposal("grant_offer:fs:write");
    group.bench_function("dry_run", |b| {
        b.iter(|| {
            let e = runtime.block_on(engine.evaluate(&weighed, true)).unwrap();
            assert_eq!(e.per_telos.len(), 7);
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
