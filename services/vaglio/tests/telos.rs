//! The telos engine (seed telos.md, issue 21): every row of the seed's edge-case table by
//! meaning, on SQLite and on a real PostgreSQL server, with the fits given by a fake LLM
//! over real HTTP (Ollama's wire format) and time driven by a settable clock.

use std::collections::BTreeMap;
use std::num::NonZero;
use std::sync::Arc;
use std::time::Duration;

use metnos_core::Principal;
use metnos_kit::clock::{Clock, ManualClock};
use metnos_kit::config::{LlmProvider, LlmTierConfig, TelosConfig};
use metnos_kit::testing::TestStore;
use metnos_llm::Tiers;
use metnos_llm::fake::{FakeLlm, Reply};
use metnos_vaglio::telos::engine::Signal;
use metnos_vaglio::telos::file::{self, TelosKey};
use metnos_vaglio::telos::fit::LlmEstimator;
use metnos_vaglio::telos::store::{MIGRATIONS, TelosStore};
use metnos_vaglio::telos::{
    Decision, Evaluation, Files, Found, Origin, ProposalIn, Settings, TelosEngine, TelosError,
};
use serde_json::json;

/// Thursday 2026-11-26 10:00 UTC.
const TEN_AM: i64 = 1_795_687_200_000;
const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;

const TELOS: &str = "---
telos_version: 1.1
written_at: 2026-11-01T12:00:00+01:00
written_by: roberto
previous_hash: genesis
---
# My ultimate ends
## t.tempo — Free my time from repetitive chores
weight: 0.5
activation_threshold: 0.3
notes: if something frees at least 30 minutes a week,
consider proposing it.
## t.ordine — Keep the order of my digital data
weight: 0.3
activation_threshold: 0.4
notes: small incremental tidying.
## t.coltivazione_strumenti — Don't leave a request of mine unmet, if possible
weight: 0.2
activation_threshold: 0.1
notes: try before saying no.
";

struct World {
    engine: TelosEngine,
    clock: ManualClock,
    fake: FakeLlm,
    files: Files,
    key: TelosKey,
    _dir: tempfile::TempDir,
    _store: TestStore,
}

fn roberto() -> Principal {
    Principal::new("telegram", "42").unwrap()
}

fn settings() -> TelosConfig {
    TelosConfig {
        time_zone: "UTC".into(),
        protected_windows: vec!["23:00-07:00".into()],
        fit_timeout_seconds: NonZero::new(2).unwrap(),
        ..TelosConfig::default()
    }
}

fn tiers(fake: &FakeLlm) -> Tiers {
    let mut llm = BTreeMap::new();
    // The fast tier only: the middle one aliases to it.
    llm.insert(
        "fast".to_owned(),
        LlmTierConfig {
            provider: LlmProvider::Ollama,
            model: "judge".into(),
            base_url: fake.url().to_owned(),
            think: false,
            timeout_seconds: NonZero::new(30).unwrap(),
            api_key_env: String::new(),
            online: None,
        },
    );
    Tiers::build(&llm, |p| {
        p.with_retry(metnos_llm::RetryPolicy {
            max_retries: 0,
            ..Default::default()
        })
    })
    .unwrap()
}

async fn engine_on(
    store: &TestStore,
    dir: &std::path::Path,
    fake: &FakeLlm,
    clock: &ManualClock,
    config: &TelosConfig,
) -> (TelosEngine, Files) {
    let db = metnos_kit::store::open(
        &store.spec(),
        "vaglio",
        &MIGRATIONS,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let files = Files {
        root: dir.join("data/telos"),
        owner_file: dir.join("config/TELOS.md"),
        owner_principals: Vec::new(),
        key_file: dir.join("data/keys/telos.key"),
    };
    let engine = TelosEngine::new(
        TelosStore::new(db),
        Settings::from_config(config),
        files.clone(),
        Arc::new(LlmEstimator {
            tiers: tiers(fake),
            timeout: Duration::from_secs(30),
            online_gate: None,
        }),
        Arc::new(clock.clone()),
    );
    (engine, files)
}

async fn world_with(store: TestStore, config: TelosConfig) -> World {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    let clock = ManualClock::new();
    clock.advance(TEN_AM - clock.now_ms());
    let (engine, files) = engine_on(&store, dir.path(), &fake, &clock, &config).await;
    let key = TelosKey::load_or_create(&files.key_file).unwrap();
    World {
        engine,
        clock,
        fake,
        files,
        key,
        _dir: dir,
        _store: store,
    }
}

async fn world(store: TestStore) -> World {
    let w = world_with(store, settings()).await;
    w.declare(&roberto(), TELOS);
    w
}

impl World {
    /// Writes and signs `text` as `person`'s TELOS.md, as `metnos telos edit` does.
    fn declare(&self, person: &Principal, text: &str) {
        file::commit(
            &self.files.person_file(person),
            text,
            &self.key.scoped(&metnos_vaglio::telos::scope_of(person)),
            "roberto",
            "2026-11-01T12:00:00+01:00",
        )
        .unwrap();
    }

    /// As [`World::declare`], written at `at`.
    fn declare_at(&self, person: &Principal, text: &str, at: &str) {
        file::commit(
            &self.files.person_file(person),
            text,
            &self.key.scoped(&metnos_vaglio::telos::scope_of(person)),
            "roberto",
            at,
        )
        .unwrap();
    }

    /// The fake LLM's next fit estimate: tempo, ordine, coltivazione.
    fn fits(&self, tempo: f64, ordine: f64, coltivazione: f64) {
        self.fake.push(fits(tempo, ordine, coltivazione));
    }

    fn llm_calls(&self) -> usize {
        self.fake
            .received()
            .iter()
            .filter(|r| r.path.ends_with("/chat"))
            .count()
    }

    async fn evaluate(&self, p: &ProposalIn) -> Evaluation {
        self.engine.evaluate(p, false).await.unwrap()
    }
}

fn fits(tempo: f64, ordine: f64, coltivazione: f64) -> Reply {
    Reply::Json(json!({"fits": [
        {"telos_id": "t.tempo", "fit": tempo, "why": "saves time"},
        {"telos_id": "t.ordine", "fit": ordine, "why": "tidies"},
        {"telos_id": "t.coltivazione_strumenti", "fit": coltivazione, "why": "n/a"},
    ]}))
}

fn proposal(id: &str) -> ProposalIn {
    ProposalIn {
        proposal_id: id.to_owned(),
        kind: "grant_offer".into(),
        effect_class: "grant_offer:fs:write".into(),
        description:
            "You approved writes in ~/Documents/invoices 4 times this week. Allow them from now on?"
                .into(),
        channel: "telegram".into(),
        origin: Origin::Adhoc,
        schedule_id: String::new(),
        person: roberto(),
        session_id: String::new(),
        level: None,
        urgency: 1.0,
        confidence: 1.0,
    }
}

fn assert_near(got: f64, want: f64) {
    assert!((got - want).abs() < 1e-9, "got {got}, want {want}");
}

/// Seed: missing TELOS.md → every spontaneous proposal rejected with `no_telos_declared`,
/// the person asked once; no model is called.
async fn a_person_without_a_telos_gets_nothing_and_is_asked_once(store: TestStore) {
    let w = world_with(store, settings()).await;
    let first = w.evaluate(&proposal("p1")).await;
    assert_eq!(first.decision, Decision::Reject);
    assert_eq!(first.reason, "no_telos_declared");
    // The command that writes theirs (not the owner: with --person), for the planner to
    // ask them in their language.
    assert_eq!(
        first.ask_person.as_deref(),
        Some("metnos telos edit --person telegram:42")
    );
    let second = w.evaluate(&proposal("p2")).await;
    assert_eq!(second.reason, "no_telos_declared");
    assert_eq!(second.ask_person, None, "asked once only");
    assert_eq!(w.llm_calls(), 0);
    let journal = w.engine.journal(None, None, 10, 0).await.unwrap();
    assert_eq!(journal.len(), 2);
}

/// Seed: weights that do not sum to 1 are renormalised (a warning, not an error).
async fn unnormalised_weights_are_renormalised(store: TestStore) {
    let w = world_with(store, settings()).await;
    w.declare(
        &roberto(),
        &TELOS
            .replace("weight: 0.5", "weight: 1.0")
            .replace("weight: 0.3\n", "weight: 0.6\n")
            .replace("weight: 0.2", "weight: 0.4"),
    );
    let Found::Good(loaded) = w.engine.load(&roberto()).await.unwrap() else {
        panic!("the file holds");
    };
    assert_eq!(loaded.file.warnings.len(), 1);
    assert_near(loaded.file.telos[0].weight, 0.5);
    w.fits(1.0, 0.0, 0.0);
    let e = w.evaluate(&proposal("p1")).await;
    assert_near(e.per_telos[0].weight_effective, 0.5);
    assert_near(e.alignment_before_bother, 0.5);
    assert_eq!(e.decision, Decision::Publish);
}

/// Seed: fit = 0 on every telos → rejected, and journaled with its breakdown.
async fn zero_fits_are_rejected_and_journaled(store: TestStore) {
    let w = world(store).await;
    w.fits(0.0, 0.0, 0.0);
    let e = w.evaluate(&proposal("p1")).await;
    assert_eq!(e.decision, Decision::Reject);
    assert_eq!(e.reason, "below_threshold");
    assert_eq!(e.expected_alignment, 0.0);
    let journal = w
        .engine
        .journal(Some(&roberto()), None, 10, 0)
        .await
        .unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].per_telos.len(), 3);
    assert_eq!(journal[0].per_telos[0].why, "saves time");
}

/// Seed: a high fit only on a telos below its activation threshold contributes nothing.
async fn a_fit_below_its_threshold_is_gated(store: TestStore) {
    let w = world(store).await;
    // t.ordine's threshold is 0.4: 0.39 adds nothing, however heavy the weight.
    w.fits(0.0, 0.39, 0.0);
    let e = w.evaluate(&proposal("p1")).await;
    assert_eq!(e.per_telos[1].contribution, 0.0);
    assert_eq!(e.decision, Decision::Reject);
    // At its threshold it counts: 0.3 · 0.4 = 0.12, still below θ = 0.15 with urgency 1…
    w.fits(0.0, 0.4, 0.0);
    let e = w.evaluate(&proposal("p2")).await;
    assert_near(e.alignment_before_bother, 0.12);
    assert_eq!(e.decision, Decision::Reject);
    // …and above it with urgency 2 (a deadline within 24 h).
    w.fits(0.0, 0.4, 0.0);
    let mut urgent = proposal("p3");
    urgent.urgency = 2.0;
    let e = w.evaluate(&urgent).await;
    assert_near(e.alignment_before_bother, 0.24);
    assert_eq!(e.decision, Decision::Publish);
}

/// Seed: a proposal in a protected window goes to the digest; a scheduler firing there
/// waits for the window's end — both without any model call.
async fn a_protected_window_defers_without_a_model_call(store: TestStore) {
    let w = world(store).await;
    w.clock.advance(13 * HOUR + 30 * MINUTE); // 23:30
    let e = w.evaluate(&proposal("p1")).await;
    assert_eq!(e.decision, Decision::DeferToDigest);
    assert_eq!(e.reason, "protected_window");
    let mut firing = proposal("p2");
    firing.origin = Origin::SchedulerInCadence;
    firing.schedule_id = "morning-summary".into();
    let e = w.evaluate(&firing).await;
    assert_eq!(e.decision, Decision::DeferToSlot);
    // The next 07:00.
    assert_eq!(e.not_before_ms, Some(TEN_AM + 21 * HOUR));
    assert_eq!(w.llm_calls(), 0, "no model in a protected window");
}

/// A person's own time zone and windows (overnight, across midnight local time).
async fn windows_follow_the_person_s_time_zone(store: TestStore) {
    let mut config = settings();
    config.people.insert(
        "telegram:42".into(),
        metnos_kit::config::TelosPerson {
            time_zone: Some("Asia/Tokyo".into()),
            protected_windows: Some(vec!["18:00-20:00".into()]),
            ..metnos_kit::config::TelosPerson::default()
        },
    );
    let w = world_with(store, config).await;
    w.declare(&roberto(), TELOS);
    // 10:00 UTC is 19:00 in Tokyo: inside the person's window.
    let e = w.evaluate(&proposal("p1")).await;
    assert_eq!(e.reason, "protected_window");
    let mut firing = proposal("p2");
    firing.origin = Origin::SchedulerOffCadence;
    let e = w.evaluate(&firing).await;
    assert_eq!(e.not_before_ms, Some(TEN_AM + HOUR), "20:00 Tokyo");
}

/// Seed: "never again" puts the effect class on the never-list at once; the next one of
/// that class is rejected without a model call.
async fn never_again_never_lists_the_effect_class(store: TestStore) {
    let w = world(store).await;
    w.fits(0.9, 0.9, 0.0);
    let e = w.evaluate(&proposal("p1")).await;
    assert_eq!(e.decision, Decision::Publish);
    let (updated, listed) = w
        .engine
        .feedback("p1", Signal::NeverAgain, &roberto())
        .await
        .unwrap();
    assert!(listed);
    // Both contributing telos fell: ema = 0.2 · −2 = −0.4 → factor 0.8.
    assert_eq!(updated.len(), 2);
    assert_near(updated[0].2, 0.5 * 0.8);
    let calls = w.llm_calls();
    w.clock.advance(3 * HOUR);
    let e = w.evaluate(&proposal("p2")).await;
    assert_eq!(e.decision, Decision::Reject);
    assert_eq!(e.reason, "never_list");
    assert_eq!(
        w.llm_calls(),
        calls,
        "no model call for a never-listed class"
    );
    let listed = w
        .engine
        .store()
        .list_never(Some("telegram:42"))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].1, "grant_offer:fs:write");
    // Taken off, the class is weighed again.
    assert!(
        w.engine
            .store()
            .remove_never("telegram:42", "grant_offer:fs:write")
            .await
            .unwrap()
    );
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(w.evaluate(&proposal("p3")).await.reason, "aligned");
}

/// Seed: an explicit request is never judged (anti-paternalism): no model, no record.
async fn an_explicit_request_is_not_evaluated(store: TestStore) {
    let w = world(store).await;
    let mut asked = proposal("p1");
    asked.origin = Origin::ExplicitRequest;
    // Even inside a protected window, even never-listed.
    w.clock.advance(13 * HOUR + 30 * MINUTE);
    w.engine
        .store()
        .add_never("telegram:42", "grant_offer:fs:write", "old", 0)
        .await
        .unwrap();
    let e = w.evaluate(&asked).await;
    assert_eq!(e.decision, Decision::Publish);
    assert_eq!(e.reason, "explicit_request");
    assert_eq!(w.llm_calls(), 0);
    assert!(w.engine.store().find("p1").await.unwrap().is_none());
}

/// Seed: a stop mid-attempt lowers the non-retreat telos by 0.7 (as an EMA step) and the
/// intent is not retried for 24 hours.
async fn a_stop_lowers_the_non_retreat_telos_and_blocks_the_intent_a_day(store: TestStore) {
    let w = world(store).await;
    let until = w
        .engine
        .stopped(&roberto(), "grant_offer", "a-1")
        .await
        .unwrap();
    assert_eq!(until, TEN_AM + 24 * HOUR);
    let Found::Good(loaded) = w.engine.load(&roberto()).await.unwrap() else {
        panic!()
    };
    let weights = w.engine.weights(&roberto(), &loaded.file).await.unwrap();
    // ema = 0.2 · −0.7 = −0.14 → factor 0.93, on t.coltivazione_strumenti alone.
    assert_near(weights[2].2, -0.14);
    assert_near(weights[2].1, 0.2 * 0.93);
    assert_near(weights[0].1, 0.5);
    let e = w.evaluate(&proposal("p1")).await;
    assert_eq!(e.reason, "stopped_by_person");
    assert_eq!(w.llm_calls(), 0);
    w.clock.advance(24 * HOUR + MINUTE);
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(
        w.evaluate(&proposal("p2")).await.decision,
        Decision::Publish
    );
}

/// Seed: a scheduler firing outside its cadence weighs half an ad-hoc proposal; one in
/// cadence weighs nothing.
async fn an_off_cadence_firing_weighs_half(store: TestStore) {
    let w = world(store).await;
    let mut firing = proposal("f1");
    firing.origin = Origin::SchedulerOffCadence;
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(w.evaluate(&firing).await.decision, Decision::Publish);
    w.clock.advance(MINUTE);
    w.fits(0.9, 0.9, 0.0);
    let e = w.evaluate(&proposal("p1")).await;
    assert_near(e.bother_sum, 0.5 * (-1.0f64 / 120.0).exp());
    // In cadence: nothing.
    let w2 = world(TestStore::sqlite()).await;
    let mut firing = proposal("f1");
    firing.origin = Origin::SchedulerInCadence;
    w2.fits(0.9, 0.9, 0.0);
    w2.evaluate(&firing).await;
    w2.clock.advance(MINUTE);
    w2.fits(0.9, 0.9, 0.0);
    assert_eq!(w2.evaluate(&proposal("p1")).await.bother_sum, 0.0);
}

/// Telos ch. 6: a standing order's firing in its agreed cadence is consented — no fit, no
/// model call — and counts only against the scheduler's quota (2 a day per channel); the
/// third goes to the digest.
async fn an_in_cadence_firing_is_consented_and_only_its_quota_applies(store: TestStore) {
    let w = world(store).await;
    let mut decided = Vec::new();
    for i in 0..3 {
        let mut firing = proposal(&format!("standing:so-1:{i}"));
        firing.origin = Origin::SchedulerInCadence;
        firing.kind = "standing_order".into();
        firing.effect_class = "standing_order:so-1".into();
        firing.schedule_id = "so-1".into();
        let e = w.evaluate(&firing).await;
        decided.push((e.decision, e.reason.to_string()));
        assert!(e.per_telos.is_empty(), "no fit weighed");
        w.clock.advance(MINUTE);
    }
    assert_eq!(
        decided,
        [
            (Decision::Publish, "aligned".to_owned()),
            (Decision::Publish, "aligned".to_owned()),
            (Decision::DeferToDigest, "quota".to_owned()),
        ]
    );
    assert_eq!(w.llm_calls(), 0, "the model was never asked");
    // Someone without a TELOS.md: their consented firing is not silenced for it.
    let mut firing = proposal("standing:so-2:0");
    firing.origin = Origin::SchedulerInCadence;
    firing.kind = "standing_order".into();
    firing.effect_class = "standing_order:so-2".into();
    firing.schedule_id = "so-2".into();
    firing.person = Principal::new("telegram", "7").unwrap();
    let e = w.evaluate(&firing).await;
    assert_eq!(
        (e.decision, e.reason.as_str()),
        (Decision::Publish, "aligned")
    );
    assert!(e.ask_person.is_none());
    // Never again still holds for a consented one.
    let mut firing = proposal("standing:so-3:0");
    firing.origin = Origin::SchedulerInCadence;
    firing.kind = "standing_order".into();
    firing.effect_class = "standing_order:so-3".into();
    firing.schedule_id = "so-3".into();
    w.engine
        .store()
        .add_never(&roberto().to_string(), "standing_order:so-3", "p0", TEN_AM)
        .await
        .unwrap();
    let e = w.evaluate(&firing).await;
    assert_eq!(
        (e.decision, e.reason.as_str()),
        (Decision::Reject, "never_list")
    );
    // "In cadence" on anything but a standing order's firing is weighed like any other:
    // the model is asked for its fits.
    let mut spoofed = proposal("p-spoofed");
    spoofed.origin = Origin::SchedulerInCadence;
    w.fits(0.9, 0.9, 0.0);
    let e = w.evaluate(&spoofed).await;
    assert!(!e.per_telos.is_empty(), "{e:?}");
    assert_eq!(w.llm_calls(), 1);
}

/// Seed: a TELOS.md revision that removes a telos: the new file is in force, the old one
/// in the audit, the removed telos's fitness discarded, the audit records the diff.
async fn a_removed_telos_loses_its_fitness_and_the_audit_says_so(store: TestStore) {
    let w = world(store).await;
    w.fits(0.9, 0.9, 0.0);
    w.evaluate(&proposal("p1")).await;
    w.engine
        .feedback("p1", Signal::Accept, &roberto())
        .await
        .unwrap();
    let fitness = w.engine.store().fitness("telegram:42").await.unwrap();
    assert_near(fitness["t.ordine"], 0.2);
    let without = TELOS.replace(
        "## t.ordine — Keep the order of my digital data\nweight: 0.3\nactivation_threshold: 0.4\nnotes: small incremental tidying.\n",
        "",
    );
    w.declare(&roberto(), &without);
    let Found::Good(loaded) = w.engine.load(&roberto()).await.unwrap() else {
        panic!()
    };
    assert_eq!(loaded.file.telos.len(), 2);
    let fitness = w.engine.store().fitness("telegram:42").await.unwrap();
    assert!(!fitness.contains_key("t.ordine"), "{fitness:?}");
    assert_near(fitness["t.tempo"], 0.2);
    let dir = w
        .files
        .person_file(&roberto())
        .parent()
        .unwrap()
        .to_path_buf();
    let audit = std::fs::read_to_string(dir.join(".audit/changes.jsonl")).unwrap();
    let line: serde_json::Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(line["removed"], json!(["t.ordine"]));
    assert!(
        line["diff"].as_str().unwrap().contains("-## t.ordine"),
        "{line}"
    );
    let mut kept: Vec<String> = std::fs::read_dir(dir.join(".audit"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(kept.len(), 4, "{kept:?}");
    assert!(kept.contains(&"changes.jsonl".to_owned()) && kept.contains(&"head".to_owned()));
    assert!(kept.contains(&format!("{}.md", line["from"].as_str().unwrap())));
    assert!(kept.contains(&format!("{}.md", line["to"].as_str().unwrap())));
}

/// Seed: ten ad-hoc proposals in an hour on Telegram, however well aligned: three
/// published at most (with the hard quota, one); the rest wait for the digest.
async fn ten_proposals_in_an_hour_publish_three_at_most(store: TestStore) {
    let w = world(store).await;
    let mut published = 0;
    let mut deferred = 0;
    for i in 0..10 {
        w.fits(1.0, 1.0, 1.0);
        let mut p = proposal(&format!("p{i}"));
        p.urgency = 2.0;
        let e = w.evaluate(&p).await;
        match e.decision {
            Decision::Publish => published += 1,
            Decision::DeferToDigest => deferred += 1,
            other => panic!("{other:?} {}", e.reason),
        }
        w.clock.advance(6 * MINUTE);
    }
    assert_eq!(published, 1, "Telegram allows one ad-hoc proposal an hour");
    assert_eq!(deferred, 9);
}

/// Without the hard quotas, the kernel alone: the 4th in an hour is never published
/// (and with these numbers not even the 3rd).
async fn the_bother_kernel_alone_stops_the_fourth_in_an_hour(store: TestStore) {
    let mut config = settings();
    config.quotas.adhoc_per_hour = 100;
    config.quotas.adhoc_per_day = 100;
    config.quotas.digest_items = 100;
    let w = world_with(store, config).await;
    w.declare(&roberto(), TELOS);
    let mut decisions = Vec::new();
    for i in 0..10 {
        w.fits(1.0, 1.0, 1.0);
        let mut p = proposal(&format!("p{i}"));
        p.urgency = 2.0;
        let e = w.evaluate(&p).await;
        if e.decision == Decision::DeferToDigest {
            assert_eq!(e.reason, "bother");
            assert!(e.bother_cost > 0.0 && e.expected_alignment < 0.15);
        }
        decisions.push(e.decision);
        w.clock.advance(6 * MINUTE);
    }
    let published: Vec<usize> = (0..10)
        .filter(|i| decisions[*i] == Decision::Publish)
        .collect();
    assert!((1..=3).contains(&published.len()), "{decisions:?}");
    // Six minutes apart: no publication ever had three others in the hour before it.
    for (n, i) in published.iter().enumerate() {
        let within_the_hour = published[..n].iter().filter(|j| (i - *j) * 6 < 60).count();
        assert!(within_the_hour < 3, "{decisions:?}");
    }
    // Right after two publications in quick succession, nothing gets through.
    assert_eq!(
        &decisions[2..5],
        &[Decision::DeferToDigest; 3],
        "{decisions:?}"
    );
}

/// Seed: quality is not the moment — a strong proposal right after a publication stays
/// silent (the digest), and is published once the bother has decayed.
async fn a_strong_proposal_at_the_wrong_moment_stays_silent(store: TestStore) {
    let mut config = settings();
    config.quotas.adhoc_per_hour = 100;
    let w = world_with(store, config).await;
    w.declare(&roberto(), TELOS);
    w.fits(0.5, 0.5, 0.0);
    assert_eq!(
        w.evaluate(&proposal("p1")).await.decision,
        Decision::Publish
    );
    w.clock.advance(MINUTE);
    // 0.5·0.5 + 0.3·0.5 = 0.4 before bother; bother after one publication ≈ 0.29.
    w.fits(0.5, 0.5, 0.0);
    let e = w.evaluate(&proposal("p2")).await;
    assert_near(e.alignment_before_bother, 0.4);
    assert!(e.bother_cost > 0.25, "{}", e.bother_cost);
    assert_eq!(e.decision, Decision::DeferToDigest);
    assert_eq!(e.reason, "bother");
    w.clock.advance(6 * HOUR);
    w.fits(0.5, 0.5, 0.0);
    assert_eq!(
        w.evaluate(&proposal("p3")).await.decision,
        Decision::Publish
    );
}

/// A fit estimate that fails, times out, or answers something else never publishes.
async fn a_failed_fit_estimate_never_publishes(store: TestStore) {
    let w = world(store).await;
    for (i, reply) in [
        Reply::Text("it is great, publish it".into()),
        Reply::Json(json!({"fits": [{"telos_id": "t.tempo", "fit": 1.0, "why": "x"}]})),
        Reply::Json(json!({"fits": [
            {"telos_id": "t.tempo", "fit": 7, "why": "x"},
            {"telos_id": "t.ordine", "fit": 1, "why": "x"},
            {"telos_id": "t.coltivazione_strumenti", "fit": 1, "why": "x"}]})),
        Reply::Json(json!({"fits": [
            {"telos_id": "t.tempo", "fit": 1, "why": "x"},
            {"telos_id": "t.ordine", "fit": 1, "why": "x"},
            {"telos_id": "t.invented", "fit": 1, "why": "x"}]})),
        Reply::Error {
            status: 500,
            body: "boom".into(),
            retry_after: None,
        },
        Reply::Delayed(Duration::from_secs(4), Box::new(fits(1.0, 1.0, 1.0))),
    ]
    .into_iter()
    .enumerate()
    {
        w.fake.push(reply);
        let e = w.evaluate(&proposal(&format!("p{i}"))).await;
        assert_eq!(e.decision, Decision::Reject, "case {i}");
        assert_eq!(e.reason, "fit_estimation_failed", "case {i}");
    }
}

/// A TELOS.md edited without signing is not in force: proposals are rejected with
/// `telos_signature_invalid` until it is signed again.
async fn a_tampered_telos_rejects_until_signed_again(store: TestStore) {
    let w = world(store).await;
    let path = w.files.person_file(&roberto());
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("weight: 0.2", "weight: 0.9")).unwrap();
    let e = w.evaluate(&proposal("p1")).await;
    assert_eq!(e.reason, "telos_signature_invalid");
    assert_eq!(w.llm_calls(), 0);
    w.declare(&roberto(), &text.replace("weight: 0.2", "weight: 0.9"));
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(
        w.evaluate(&proposal("p2")).await.decision,
        Decision::Publish
    );
}

/// An older signed version put back over the one in force (a restored backup, a sync
/// conflict) is refused: it is signed, but the engine saw a later one.
async fn an_older_version_put_back_is_refused(store: TestStore) {
    let w = world(store).await;
    let path = w.files.person_file(&roberto());
    let first = std::fs::read(&path).unwrap();
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(
        w.evaluate(&proposal("p1")).await.decision,
        Decision::Publish
    );
    w.declare_at(
        &roberto(),
        &TELOS.replace("weight: 0.2", "weight: 0.25"),
        "2026-11-02T12:00:00+01:00",
    );
    w.clock.advance(2 * HOUR);
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(
        w.evaluate(&proposal("p2")).await.decision,
        Decision::Publish
    );
    // The audit's head is put back too: the store remembers what was in force.
    let audit = path.parent().unwrap().join(".audit");
    std::fs::write(audit.join("head"), file::sha256_hex(&first)).unwrap();
    std::fs::write(&path, &first).unwrap();
    let e = w.evaluate(&proposal("p3")).await;
    assert_eq!(e.reason, "telos_signature_invalid");
    assert!(matches!(
        w.engine.load(&roberto()).await.unwrap(),
        Found::Bad(file::FileError::SignatureInvalid(m), _) if m.contains("an older version was put back")
    ));
    // Reviewed and signed again (later), it is in force.
    w.declare_at(&roberto(), TELOS, "2026-11-26T12:00:00Z");
    w.clock.advance(2 * HOUR);
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(
        w.evaluate(&proposal("p4")).await.decision,
        Decision::Publish
    );
}

/// The signed text in force saved again by another editor (CRLF line ends, trailing
/// blanks) is still the version in force.
async fn the_same_signed_text_saved_again_stays_in_force(store: TestStore) {
    let w = world(store).await;
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(
        w.evaluate(&proposal("p1")).await.decision,
        Decision::Publish
    );
    let path = w.files.person_file(&roberto());
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace('\n', " \r\n")).unwrap();
    w.clock.advance(2 * HOUR);
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(
        w.evaluate(&proposal("p2")).await.decision,
        Decision::Publish
    );
}

/// Feedback: the EMA moves the contributing telos within bounds; one answer per proposal;
/// only the person it was made to may answer.
async fn feedback_moves_the_contributors_once_and_only_from_their_person(store: TestStore) {
    let w = world(store).await;
    w.fits(0.9, 0.0, 0.0);
    w.evaluate(&proposal("p1")).await;
    let mallory = Principal::new("telegram", "666").unwrap();
    assert!(matches!(
        w.engine.feedback("p1", Signal::Accept, &mallory).await,
        Err(TelosError::Denied(_))
    ));
    assert!(matches!(
        w.engine.feedback("nope", Signal::Accept, &roberto()).await,
        Err(TelosError::NotFound(_))
    ));
    let (updated, _) = w
        .engine
        .feedback("p1", Signal::ViewedUndecided, &roberto())
        .await
        .unwrap();
    assert_eq!(updated.len(), 1, "only t.tempo contributed");
    assert_near(updated[0].3, -0.02);
    assert!(matches!(
        w.engine
            .feedback("p1", Signal::ViewedUndecided, &roberto())
            .await,
        Err(TelosError::Precondition(_))
    ));
    let (updated, _) = w
        .engine
        .feedback("p1", Signal::Accept, &roberto())
        .await
        .unwrap();
    // ema = 0.8 · −0.02 + 0.2 · 1 = 0.184 → factor 1.092.
    assert_near(updated[0].3, 0.184);
    assert_near(updated[0].2, 0.5 * 1.092);
    assert!(matches!(
        w.engine.feedback("p1", Signal::Reject, &roberto()).await,
        Err(TelosError::Precondition(_))
    ));
    // Many accepts never push an effective weight past 150 %.
    for i in 0..40 {
        w.clock.advance(24 * HOUR);
        w.fits(0.9, 0.0, 0.0);
        let id = format!("q{i}");
        w.evaluate(&proposal(&id)).await;
        w.engine
            .feedback(&id, Signal::Accept, &roberto())
            .await
            .unwrap();
    }
    let Found::Good(loaded) = w.engine.load(&roberto()).await.unwrap() else {
        panic!()
    };
    let weights = w.engine.weights(&roberto(), &loaded.file).await.unwrap();
    assert!(
        weights[0].1 <= 0.75 + 1e-12 && weights[0].1 > 0.7,
        "{weights:?}"
    );
}

/// The digest takes ten judged items; the eleventh is rejected (`digest_full`) and
/// journaled. Those a protected window deferred unjudged wait apart and do not take them.
async fn the_digest_holds_ten(store: TestStore) {
    let mut config = settings();
    config.quotas.adhoc_per_day = 100;
    let w = world_with(store, config).await;
    w.declare(&roberto(), TELOS);
    w.fake.always(fits(0.9, 0.9, 0.0));
    assert_eq!(
        w.evaluate(&proposal("first")).await.decision,
        Decision::Publish
    );
    for i in 0..10 {
        w.clock.advance(MINUTE);
        let e = w.evaluate(&proposal(&format!("p{i}"))).await;
        assert_eq!(e.decision, Decision::DeferToDigest, "{i}");
        assert_eq!(e.reason, "quota");
    }
    let e = w.evaluate(&proposal("p10")).await;
    assert_eq!(e.decision, Decision::Reject);
    assert_eq!(e.reason, "digest_full");
    // A window's unjudged deferrals do not compete for the ten places.
    w.clock.advance(13 * HOUR); // 23:11
    let calls = w.llm_calls();
    let e = w.evaluate(&proposal("night")).await;
    assert_eq!(e.decision, Decision::DeferToDigest);
    assert_eq!(e.reason, "protected_window");
    assert_eq!(w.llm_calls(), calls);
    // After the next evening's digest there is room again.
    w.clock.advance(22 * HOUR); // 21:11 the next day
    assert_eq!(
        w.evaluate(&proposal("p11")).await.decision,
        Decision::Publish
    );
}

/// A window's unjudged deferrals are bounded too (100 per person and digest).
async fn a_window_defers_at_most_a_hundred(store: TestStore) {
    let w = world(store).await;
    w.clock.advance(13 * HOUR + 30 * MINUTE); // 23:30
    for i in 0..100 {
        let e = w.evaluate(&proposal(&format!("p{i}"))).await;
        assert_eq!(e.decision, Decision::DeferToDigest, "{i}");
    }
    let e = w.evaluate(&proposal("p100")).await;
    assert_eq!(
        (e.decision, e.reason.as_str()),
        (Decision::Reject, "digest_full")
    );
}

/// One person's signed file copied into another's folder does not verify there: the
/// signature names whose file it is.
async fn a_signed_file_copied_to_another_person_is_not_theirs(store: TestStore) {
    let w = world(store).await;
    let other = Principal::new("telegram", "43").unwrap();
    let theirs = w.files.person_file(&other);
    std::fs::create_dir_all(theirs.parent().unwrap()).unwrap();
    std::fs::copy(w.files.person_file(&roberto()), &theirs).unwrap();
    let mut p = proposal("p1");
    p.person = other.clone();
    let e = w.evaluate(&p).await;
    assert_eq!(e.reason, "telos_signature_invalid");
    assert_eq!(w.llm_calls(), 0);
    // Two people whose names would meet in one folder name do not.
    let a = Principal::new("a_b", "c").unwrap();
    let b = Principal::new("a", "b_c").unwrap();
    assert_ne!(w.files.person_file(&a), w.files.person_file(&b));
    // Nor two whose `<channel>:<sender>` would read the same: the scope a signature names
    // is the escaped folder name.
    let c = Principal::new("telegram:4", "2").unwrap();
    let d = Principal::new("telegram", "4:2").unwrap();
    assert_ne!(
        metnos_vaglio::telos::scope_of(&c),
        metnos_vaglio::telos::scope_of(&d)
    );
}

/// A proposal id reused for another proposal is refused; the same proposal again gets
/// the same answer and takes no second slot.
async fn a_reused_proposal_id_is_refused(store: TestStore) {
    let w = world(store).await;
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(
        w.evaluate(&proposal("p1")).await.decision,
        Decision::Publish
    );
    let mut other = proposal("p1");
    other.description = "Something else entirely".into();
    assert!(matches!(
        w.engine.evaluate(&other, false).await,
        Err(TelosError::Conflict(_))
    ));
    let mut elsewhere = proposal("p1");
    elsewhere.person = Principal::new("telegram", "43").unwrap();
    assert!(matches!(
        w.engine.evaluate(&elsewhere, false).await,
        Err(TelosError::Conflict(_))
    ));
}

/// The CLI: two ad-hoc proposals per session; the third waits for the next session (the
/// terminal has no digest), which weighs it again under the same id.
async fn the_cli_takes_two_per_session(store: TestStore) {
    let mut config = settings();
    config.bother_beta = 0.0; // the quota alone
    let w = world_with(store, config).await;
    let me = Principal::new("cli", "roberto").unwrap();
    w.declare(&me, TELOS);
    let on_cli = |id: &str, session: &str| ProposalIn {
        channel: "cli".into(),
        person: me.clone(),
        session_id: session.into(),
        ..proposal(id)
    };
    let mut decisions = Vec::new();
    for i in 0..3 {
        w.fits(0.9, 0.9, 0.0);
        decisions.push(w.evaluate(&on_cli(&format!("p{i}"), "s1")).await.decision);
    }
    assert_eq!(
        decisions,
        [Decision::Publish, Decision::Publish, Decision::DeferToSlot]
    );
    // Nothing kept of the deferral: no digest place, no journal row; and once the session
    // had its two, no model was asked.
    assert!(w.engine.store().find("p2").await.unwrap().is_none());
    let calls = w.llm_calls();
    assert_eq!(
        w.evaluate(&on_cli("p9", "s1")).await.decision,
        Decision::DeferToSlot
    );
    assert_eq!(
        w.llm_calls(),
        calls,
        "no fit asked past the session's quota"
    );
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(
        w.evaluate(&on_cli("p2", "s2")).await.decision,
        Decision::Publish
    );
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(
        w.evaluate(&on_cli("p3", "s2")).await.decision,
        Decision::Publish
    );
    // Published once, it answers the same from then on.
    assert!(w.engine.store().find("p2").await.unwrap().is_some());
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(
        w.evaluate(&on_cli("p4", "s2")).await.decision,
        Decision::DeferToSlot
    );
}

/// A dry run records nothing; the same id evaluated twice answers the same, once.
async fn dry_runs_record_nothing_and_an_id_is_decided_once(store: TestStore) {
    let w = world(store).await;
    w.fits(0.9, 0.9, 0.0);
    let dry = w.engine.evaluate(&proposal("p1"), true).await.unwrap();
    assert_eq!(dry.decision, Decision::Publish);
    assert!(w.engine.store().find("p1").await.unwrap().is_none());
    w.fits(0.9, 0.9, 0.0);
    let first = w.evaluate(&proposal("p1")).await;
    assert_eq!(first.decision, Decision::Publish);
    let calls = w.llm_calls();
    let again = w.evaluate(&proposal("p1")).await;
    assert_eq!(again, first);
    assert_eq!(w.llm_calls(), calls);
    // The quota saw one publication, not two: the next hour is free again.
    w.clock.advance(HOUR + MINUTE);
    w.fits(0.9, 0.9, 0.0);
    assert_eq!(
        w.evaluate(&proposal("p2")).await.decision,
        Decision::Publish
    );
}

/// Two replicas on one store race for the last slot: exactly one publishes.
async fn two_replicas_never_both_take_the_last_slot(store: TestStore) {
    let w = world(store).await;
    w.fake.always(fits(1.0, 1.0, 1.0));
    // A second engine on the same store (on PostgreSQL, its own pool: another replica).
    let second = if matches!(w._store, TestStore::Postgres { .. }) {
        let (engine, _) = engine_on(&w._store, w._dir.path(), &w.fake, &w.clock, &settings()).await;
        Some(engine)
    } else {
        None
    };
    let other = second.as_ref().unwrap_or(&w.engine);
    for round in 0..3 {
        let a = proposal(&format!("a{round}"));
        let b = proposal(&format!("b{round}"));
        let (x, y) = tokio::join!(w.engine.evaluate(&a, false), other.evaluate(&b, false));
        let published = [x.unwrap(), y.unwrap()]
            .iter()
            .filter(|e| e.decision == Decision::Publish)
            .count();
        assert_eq!(published, 1, "round {round}");
        w.clock.advance(HOUR + MINUTE);
    }
}

/// The journal's borderline view: the N rejected closest to θ.
async fn the_journal_names_the_borderline_ones(store: TestStore) {
    let w = world(store).await;
    // t.ordine (weight 0.3, threshold 0.4): 0, 0.12, 0.135, 0 — all below θ = 0.15.
    for (i, ordine) in [0.0, 0.4, 0.45, 0.0].iter().enumerate() {
        w.fits(0.0, *ordine, 0.0);
        let e = w.evaluate(&proposal(&format!("p{i}"))).await;
        assert_eq!(e.decision, Decision::Reject);
        w.clock.advance(MINUTE);
    }
    let borderline = w.engine.journal(None, None, 100, 1).await.unwrap();
    assert_eq!(borderline.len(), 1);
    assert_eq!(borderline[0].proposal_id, "p2");
    assert_near(borderline[0].alignment_before_bother, 0.135);
    let two = w.engine.journal(None, None, 100, 2).await.unwrap();
    assert_eq!(
        two.iter()
            .map(|e| e.proposal_id.as_str())
            .collect::<Vec<_>>(),
        ["p2", "p1"]
    );
    let all = w.engine.journal(None, None, 100, 0).await.unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(all[0].proposal_id, "p3", "newest first");
    // Another person's journal is not this one.
    let other = Principal::new("telegram", "7").unwrap();
    assert!(
        w.engine
            .journal(Some(&other), None, 100, 0)
            .await
            .unwrap()
            .is_empty()
    );
}

metnos_kit::store_suite!(
    a_person_without_a_telos_gets_nothing_and_is_asked_once,
    unnormalised_weights_are_renormalised,
    zero_fits_are_rejected_and_journaled,
    a_fit_below_its_threshold_is_gated,
    a_protected_window_defers_without_a_model_call,
    windows_follow_the_person_s_time_zone,
    never_again_never_lists_the_effect_class,
    an_explicit_request_is_not_evaluated,
    a_stop_lowers_the_non_retreat_telos_and_blocks_the_intent_a_day,
    an_off_cadence_firing_weighs_half,
    an_in_cadence_firing_is_consented_and_only_its_quota_applies,
    a_removed_telos_loses_its_fitness_and_the_audit_says_so,
    ten_proposals_in_an_hour_publish_three_at_most,
    the_bother_kernel_alone_stops_the_fourth_in_an_hour,
    a_strong_proposal_at_the_wrong_moment_stays_silent,
    a_failed_fit_estimate_never_publishes,
    a_tampered_telos_rejects_until_signed_again,
    an_older_version_put_back_is_refused,
    the_same_signed_text_saved_again_stays_in_force,
    feedback_moves_the_contributors_once_and_only_from_their_person,
    the_digest_holds_ten,
    a_window_defers_at_most_a_hundred,
    a_signed_file_copied_to_another_person_is_not_theirs,
    a_reused_proposal_id_is_refused,
    the_cli_takes_two_per_session,
    dry_runs_record_nothing_and_an_id_is_decided_once,
    two_replicas_never_both_take_the_last_slot,
    the_journal_names_the_borderline_ones,
    consent_pays_no_ad_hoc_bother,
    the_digest_holds_every_scheduler_result,
    the_estimator_s_confidence_multiplies_the_proposer_s,
    close_to_a_window_in_two_time_zones,
    the_question_is_asked_once_across_two_replicas,
    the_seed_s_ten_proposals_in_an_hour_with_its_seven_telos,
    a_strong_proposal_bother_holds_back_is_recorded_whole,
);

/// A standing order's firing in its agreed cadence (`so-1`), for `person`.
fn standing_firing(id: &str, person: &Principal) -> ProposalIn {
    let mut firing = proposal(id);
    firing.origin = Origin::SchedulerInCadence;
    firing.kind = "standing_order".into();
    firing.effect_class = "standing_order:so-1".into();
    firing.schedule_id = "so-1".into();
    firing.person = person.clone();
    firing
}

/// Issue 47, item 1: consent is consent. Two ad hoc publications in the hour before 08:00
/// used to send the 08:00 order's result to the digest (the ad hoc bother subtracted from
/// its consented alignment). In cadence only the scheduler's quota and the never-list
/// apply: the bother is shown, not paid. A firing off its cadence still pays it.
async fn consent_pays_no_ad_hoc_bother(store: TestStore) {
    let mut config = settings();
    config.quotas.adhoc_per_hour = 2;
    let w = world_with(store, config).await;
    w.declare(&roberto(), TELOS);
    // Friday 07:05 and 07:30 UTC: two publications.
    w.clock.advance(21 * HOUR + 5 * MINUTE);
    for (id, wait) in [("p1", 25 * MINUTE), ("p2", 30 * MINUTE)] {
        w.fits(0.9, 0.9, 0.0);
        let e = w.evaluate(&proposal(id)).await;
        assert_eq!(e.decision, Decision::Publish, "{id}: {}", e.reason);
        w.clock.advance(wait);
    }
    // 08:00: the order's firing in its cadence.
    let e = w
        .evaluate(&standing_firing("standing:so-1:0800", &roberto()))
        .await;
    assert!(e.bother_sum > 1.0, "the bother is there: {}", e.bother_sum);
    assert_eq!(e.bother_cost, 0.0, "and not paid");
    assert_eq!(
        (e.decision, e.reason.as_str()),
        (Decision::Publish, "aligned")
    );
    assert_eq!(w.llm_calls(), 2, "no model asked for the consented one");
    // The same order firing off its cadence at that moment pays it: the digest.
    let mut off = standing_firing("standing:so-1:off", &roberto());
    off.origin = Origin::SchedulerOffCadence;
    w.fits(0.9, 0.9, 0.0);
    let e = w.evaluate(&off).await;
    assert!(e.bother_cost > 0.5, "{}", e.bother_cost);
    assert_eq!(
        (e.decision, e.reason.as_str()),
        (Decision::DeferToDigest, "bother")
    );
}

/// Issue 47, item 2: the digest holds every scheduler result ("1 digest, unlimited"):
/// they never take the ten places of ad hoc proposals; a hundred are kept per digest, the
/// hundred and first is refused (`digest_full`, the planner's digest counts it).
async fn the_digest_holds_every_scheduler_result(store: TestStore) {
    let mut config = settings();
    config.quotas.adhoc_per_day = 100;
    config.quotas.scheduler_per_day = 0;
    let w = world_with(store, config).await;
    w.declare(&roberto(), TELOS);
    w.fake.always(fits(0.9, 0.9, 0.0));
    w.evaluate(&proposal("first")).await;
    for i in 0..10 {
        w.clock.advance(MINUTE);
        let e = w.evaluate(&proposal(&format!("p{i}"))).await;
        assert_eq!(e.decision, Decision::DeferToDigest, "{i}");
    }
    assert_eq!(
        w.evaluate(&proposal("p10")).await.reason,
        "digest_full",
        "ten ad hoc places"
    );
    for i in 0..100 {
        let e = w
            .evaluate(&standing_firing(&format!("standing:so-1:{i}"), &roberto()))
            .await;
        assert_eq!(
            (e.decision, e.reason.as_str()),
            (Decision::DeferToDigest, "quota"),
            "{i}"
        );
    }
    let e = w
        .evaluate(&standing_firing("standing:so-1:100", &roberto()))
        .await;
    assert_eq!(
        (e.decision, e.reason.as_str()),
        (Decision::Reject, "digest_full")
    );
}

/// Issue 47, item 4: the estimator may say how sure it is of its fits; the engine
/// multiplies the proposer's confidence by it (and urgency scales the alignment). A
/// confidence that is not a number from 0 to 1 is a failed estimate.
async fn the_estimator_s_confidence_multiplies_the_proposer_s(store: TestStore) {
    let w = world(store).await;
    w.fake.push(Reply::Json(json!({"fits": [
        {"telos_id": "t.tempo", "fit": 0.8, "why": "saves time"},
        {"telos_id": "t.ordine", "fit": 0.5, "why": "tidies"},
        {"telos_id": "t.coltivazione_strumenti", "fit": 0.0, "why": "n/a"},
    ], "confidence": 0.5})));
    let mut p = proposal("p1");
    p.confidence = 0.8;
    p.urgency = 2.0;
    let e = w.evaluate(&p).await;
    assert_near(e.confidence, 0.4);
    assert_near(e.urgency, 2.0);
    // 2 · 0.4 · (0.5·0.8 + 0.3·0.5)
    assert_near(e.alignment_before_bother, 2.0 * 0.4 * 0.55);
    w.fake.push(Reply::Json(json!({"fits": [
        {"telos_id": "t.tempo", "fit": 0.8, "why": "x"},
        {"telos_id": "t.ordine", "fit": 0.5, "why": "x"},
        {"telos_id": "t.coltivazione_strumenti", "fit": 0.0, "why": "x"},
    ], "confidence": 1.5})));
    let e = w.evaluate(&proposal("p2")).await;
    assert_eq!(
        (e.decision, e.reason.as_str()),
        (Decision::Reject, "fit_estimation_failed")
    );
}

/// Issue 47, item 5: close to a window, not only inside. With the default windows (sleep
/// 23:00–07:00, lunch 12:30–13:30, dinner 19:30–20:30) and the default lead of 30
/// minutes, one manual clock, two people in two time zones (Rome, UTC+1; New York,
/// UTC−5, in November): an ad hoc proposal within the lead that would have been published
/// goes to the digest instead (judged: one that fits too little is still rejected);
/// inside a window no model is asked; a scheduler firing is not moved by the lead.
async fn close_to_a_window_in_two_time_zones(store: TestStore) {
    let config = TelosConfig {
        time_zone: "Europe/Rome".into(),
        fit_timeout_seconds: NonZero::new(2).unwrap(),
        ..TelosConfig::default()
    };
    assert_eq!(config.window_lead_minutes, 30);
    let mut config = config;
    let ny = Principal::new("telegram", "7").unwrap();
    config.people.insert(
        ny.to_string(),
        metnos_kit::config::TelosPerson {
            time_zone: Some("America/New_York".into()),
            ..metnos_kit::config::TelosPerson::default()
        },
    );
    let w = world_with(store, config).await;
    w.declare(&roberto(), TELOS);
    w.declare(&ny, TELOS);
    let of = |id: &str, person: &Principal| {
        let mut p = proposal(id);
        p.person = person.clone();
        p
    };
    let mut seen = Vec::new();
    // 11:10 UTC: 12:10 in Rome (lunch at 12:30), 06:10 in New York (asleep).
    w.clock.advance(70 * MINUTE);
    w.fits(0.9, 0.9, 0.0);
    seen.push(w.evaluate(&of("r1", &roberto())).await);
    seen.push(w.evaluate(&of("n1", &ny)).await);
    w.fits(0.1, 0.1, 0.0);
    let weak = w.evaluate(&of("r-weak", &roberto())).await;
    assert_eq!(
        (weak.decision, weak.reason.as_str()),
        (Decision::Reject, "below_threshold")
    );
    // A scheduler firing off its cadence in Rome at 12:10 is weighed (the lead is for ad
    // hoc proposals).
    let mut firing = of("r-firing", &roberto());
    firing.origin = Origin::SchedulerOffCadence;
    w.fits(0.9, 0.9, 0.0);
    let e = w.evaluate(&firing).await;
    assert_eq!(
        (e.decision, e.reason.as_str()),
        (Decision::Publish, "aligned")
    );
    // 14:00 UTC: 15:00 in Rome, 09:00 in New York: both free.
    w.clock.advance(170 * MINUTE);
    w.fits(0.9, 0.9, 0.0);
    seen.push(w.evaluate(&of("r2", &roberto())).await);
    w.fits(0.9, 0.9, 0.0);
    seen.push(w.evaluate(&of("n2", &ny)).await);
    // 18:05 UTC: 19:05 in Rome (dinner at 19:30), 13:05 in New York (at lunch).
    w.clock.advance(245 * MINUTE);
    w.fits(0.9, 0.9, 0.0);
    seen.push(w.evaluate(&of("r3", &roberto())).await);
    seen.push(w.evaluate(&of("n3", &ny)).await);
    // 18:40 UTC: 19:40 in Rome (at dinner), 13:40 in New York (free again).
    w.clock.advance(35 * MINUTE);
    seen.push(w.evaluate(&of("r4", &roberto())).await);
    w.fits(0.9, 0.9, 0.0);
    seen.push(w.evaluate(&of("n4", &ny)).await);
    let decided: Vec<(&str, Decision, &str)> = seen
        .iter()
        .map(|e| (e.proposal_id.as_str(), e.decision, e.reason.as_str()))
        .collect();
    assert_eq!(
        decided,
        [
            ("r1", Decision::DeferToDigest, "near_window"),
            ("n1", Decision::DeferToDigest, "protected_window"),
            ("r2", Decision::Publish, "aligned"),
            ("n2", Decision::Publish, "aligned"),
            ("r3", Decision::DeferToDigest, "near_window"),
            ("n3", Decision::DeferToDigest, "protected_window"),
            ("r4", Decision::DeferToDigest, "protected_window"),
            ("n4", Decision::Publish, "aligned"),
        ]
    );
    assert_eq!(w.llm_calls(), 7, "no model for what a window decided");
}

/// Issue 47, item 3: the once-only question is spent only when a proposal was held back
/// for the missing TELOS.md (not by a dry run, not by a consented firing that goes on
/// without one), and exactly once across two replicas racing on one store.
async fn the_question_is_asked_once_across_two_replicas(store: TestStore) {
    let w = world_with(store, settings()).await;
    // A second engine on the same store (on PostgreSQL, its own pool: another replica; a
    // SQLite file has one process).
    let second = if matches!(w._store, TestStore::Postgres { .. }) {
        let (engine, _) = engine_on(&w._store, w._dir.path(), &w.fake, &w.clock, &settings()).await;
        Some(engine)
    } else {
        None
    };
    let second = second.as_ref().unwrap_or(&w.engine);
    for n in 0..5 {
        let person = Principal::new("telegram", &format!("10{n}")).unwrap();
        let dry = w.engine.evaluate(&proposal_for("dry", &person), true).await;
        assert_eq!(dry.unwrap().ask_person, None, "a dry run asks nobody");
        let consented = w
            .evaluate(&standing_firing(&format!("standing:so-1:{n}"), &person))
            .await;
        assert_eq!(consented.decision, Decision::Publish);
        assert_eq!(consented.ask_person, None, "nothing was held back");
        let a = proposal_for(&format!("a{n}"), &person);
        let b = proposal_for(&format!("b{n}"), &person);
        let (x, y) = tokio::join!(w.engine.evaluate(&a, false), second.evaluate(&b, false));
        let asked: Vec<String> = [x.unwrap(), y.unwrap()]
            .into_iter()
            .filter_map(|e| e.ask_person)
            .collect();
        assert_eq!(
            asked,
            [format!("metnos telos edit --person telegram:10{n}")],
            "person {n}"
        );
        let later = proposal_for(&format!("c{n}"), &person);
        let later = second.evaluate(&later, false).await.unwrap();
        assert_eq!(later.ask_person, None);
    }
    // The owner is named the owner's command.
    let owner = Principal::new("cli", "ada").unwrap();
    let mut p = proposal_for("o1", &owner);
    p.channel = "cli".into();
    p.session_id = "session-1".into();
    assert_eq!(
        w.evaluate(&p).await.ask_person.as_deref(),
        Some("metnos telos edit")
    );
}

fn proposal_for(id: &str, person: &Principal) -> ProposalIn {
    let mut p = proposal(id);
    p.person = person.clone();
    p
}

/// The seed's TELOS.md example, its seven telos verbatim.
const SEED_TELOS: &str = include_str!("fixtures/seed_telos.md");

const SEED_IDS: [&str; 7] = [
    "t.tempo",
    "t.ordine",
    "t.puntualita",
    "t.protezione",
    "t.discrezione",
    "t.parsimonia",
    "t.coltivazione_strumenti",
];

/// Every seed telos at `fit`.
fn seed_fits(fit: f64) -> Reply {
    let fits: Vec<serde_json::Value> = SEED_IDS
        .iter()
        .map(|id| json!({"telos_id": id, "fit": fit, "why": "serves it"}))
        .collect();
    Reply::Json(json!({ "fits": fits }))
}

/// Seed, its edge-case table: ten ad hoc proposals in one hour on Telegram, against the
/// seed's own seven-telos TELOS.md (weights 0.22/0.13/0.18/0.18/0.09/0.08/0.12), every fit
/// high and urgency 2 — the best a proposal can be. With the hard quotas one is published;
/// with them lifted, the kernel alone: from the 4th on each is held back
/// (`defer_to_digest`, reason `bother`), and no publication ever has three others in the
/// hour before it.
async fn the_seed_s_ten_proposals_in_an_hour_with_its_seven_telos(store: TestStore) {
    let lifted = {
        let mut c = settings();
        c.quotas.adhoc_per_hour = 100;
        c.quotas.adhoc_per_day = 100;
        c.quotas.digest_items = 100;
        c
    };
    let store2 = match &store {
        TestStore::Postgres { .. } => TestStore::postgres().await,
        _ => TestStore::sqlite(),
    };
    for (store, config) in [(store, settings()), (store2, lifted)] {
        let quotas = config.quotas.adhoc_per_hour == 1;
        let w = world_with(store, config).await;
        w.declare(&roberto(), SEED_TELOS);
        let Found::Good(loaded) = w.engine.load(&roberto()).await.unwrap() else {
            panic!("the seed's file is in force")
        };
        let weights: Vec<f64> = loaded.file.telos.iter().map(|t| t.weight).collect();
        for (got, want) in weights
            .iter()
            .zip([0.22, 0.13, 0.18, 0.18, 0.09, 0.08, 0.12])
        {
            assert_near(*got, want);
        }
        assert_eq!(weights.len(), 7);
        assert!(
            loaded.file.warnings.is_empty(),
            "{:?}",
            loaded.file.warnings
        );
        w.fake.always(seed_fits(0.95));
        let mut decided = Vec::new();
        for i in 0..10 {
            let mut p = proposal(&format!("p{i}"));
            p.urgency = 2.0;
            let e = w.evaluate(&p).await;
            assert!(
                e.alignment_before_bother > 1.8,
                "{}",
                e.alignment_before_bother
            );
            decided.push((e.decision, e.reason.to_string()));
            w.clock.advance(6 * MINUTE);
        }
        let published: Vec<usize> = (0..10)
            .filter(|i| decided[*i].0 == Decision::Publish)
            .collect();
        if quotas {
            assert_eq!(published, [0], "{decided:?}");
            assert!(decided[1..].iter().all(|d| d.0 == Decision::DeferToDigest));
            continue;
        }
        assert_eq!(
            decided[3],
            (Decision::DeferToDigest, "bother".to_owned()),
            "the 4th"
        );
        for (n, i) in published.iter().enumerate() {
            let within_the_hour = published[..n].iter().filter(|j| (i - *j) * 6 < 60).count();
            assert!(within_the_hour < 3, "{decided:?}");
        }
        assert!(
            published.len() < 10 && !published.contains(&3),
            "{decided:?}"
        );
    }
}

/// Seed: quality is not the moment — a strong proposal (every fit 0.95 on the seed's
/// TELOS.md) that bother holds back is recorded with every field of the seed's journal
/// line: its id, kind, expected alignment, the breakdown per telos (fit, why,
/// contribution), the reason and when; with the bother that held it back.
async fn a_strong_proposal_bother_holds_back_is_recorded_whole(store: TestStore) {
    let mut config = settings();
    config.quotas.adhoc_per_hour = 100;
    let w = world_with(store, config).await;
    w.declare(&roberto(), SEED_TELOS);
    w.fake.always(seed_fits(0.95));
    for id in ["p1", "p2"] {
        assert_eq!(w.evaluate(&proposal(id)).await.decision, Decision::Publish);
        w.clock.advance(MINUTE);
    }
    let e = w.evaluate(&proposal("p3")).await;
    assert_eq!(
        (e.decision, e.reason.as_str()),
        (Decision::DeferToDigest, "bother")
    );
    let recorded = w.engine.store().find("p3").await.unwrap().unwrap();
    let line: serde_json::Value = serde_json::from_str(&recorded.result_json).unwrap();
    assert_eq!(line["proposal_id"], "p3");
    assert_eq!(line["kind"], "grant_offer");
    assert_eq!(line["reason"], "bother");
    assert_eq!(line["at_ms"], TEN_AM + 2 * MINUTE);
    assert_near(line["alignment_before_bother"].as_f64().unwrap(), 0.95);
    assert!(line["bother_cost"].as_f64().unwrap() > 0.9);
    assert!(line["expected_alignment"].as_f64().unwrap() < 0.15);
    let breakdown = line["per_telos"].as_array().unwrap();
    assert_eq!(breakdown.len(), 7);
    for (term, id) in breakdown.iter().zip(SEED_IDS) {
        assert_eq!(term["telos_id"], id);
        assert_eq!(term["fit"], 0.95);
        assert_eq!(term["why"], "serves it");
        assert!(term["contribution"].as_f64().unwrap() > 0.0, "{term}");
    }
    assert_eq!(recorded.contributors.len(), 7);
}
