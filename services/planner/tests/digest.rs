//! The evening digest on SQLite and on a real PostgreSQL server, time from a settable
//! clock: what the telos engine kept for later reaches its person once, at their
//! `digest_at`, as one message with a numbered line and a button row per item; never twice
//! (another run, another replica), never hours late, at most ten items (the rest the next
//! evening); the weekly line of discarded proposals; the unused-grants offer and the
//! upkeep that says a card's silence once and prunes what the proposals kept.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use metnos_core::level::AutonomyLevel;
use metnos_core::principal::Principal;
use metnos_kit::clock::ManualClock;
use metnos_kit::config::TelosConfig;
use metnos_kit::testing::TestStore;
use metnos_planner::filters::{ClientError, Filters, PolicyAnswer};
use metnos_planner::proactive::digest::EveningDigest;
use metnos_planner::proactive::scheduler::{Firing, Job, Kind, Task};
use metnos_planner::store::MIGRATIONS;
use metnos_proto::approval::v1 as approval;
use metnos_proto::policy::v1 as policy;
use metnos_proto::vaglio::v1 as vaglio;
use tonic::Status;

/// What the digest asked of the approval service and the gateway, and what the fakes of
/// policy, the gateway's pairings and the telos engine answer.
#[derive(Debug, Default)]
struct Seen {
    pending: Vec<approval::CreatePendingRequest>,
    cards: Vec<(Principal, String, approval::Card)>,
    /// Policy's active grants.
    grants: Vec<policy::Grant>,
    /// Paired people (others are not).
    paired: Vec<String>,
    /// The telos engine's decision on every proposal, and the proposals it was asked.
    decision: i32,
    weighed: Vec<vaglio::ActionProposal>,
    /// Approval requests' states by token (status, expiry).
    states: std::collections::HashMap<String, (approval::ApprovalStatus, i64)>,
    silences: Vec<(String, String)>,
    /// Approval requests whose arguments hold one of these are refused (INVALID_ARGUMENT).
    refuse: Vec<String>,
    /// People who read Italian (the others English).
    italian: Vec<String>,
    /// The rejected journal.
    discarded: Vec<vaglio::AlignmentResult>,
    /// Approval requests as the approval service has them, whole, by token (over `states`).
    answered: std::collections::HashMap<String, approval::PendingApproval>,
    /// Every request the telos engine was asked (with its urgency and confidence).
    asked: Vec<vaglio::EvaluateProposalRequest>,
    /// What the telos engine answers in `ask_person`.
    ask: String,
    /// What was told, and whether telling fails.
    told: Vec<(String, String, String)>,
    tell_fails: bool,
    /// Telling answers ABORTED: the gateway may have sent it.
    tell_aborts: bool,
    /// The telos engine's reason (empty: "aligned").
    reason: String,
    /// Showing a card fails.
    card_fails: bool,
}

#[derive(Debug, Default, Clone)]
struct Fake(Arc<Mutex<Seen>>);

#[tonic::async_trait]
impl Filters for Fake {
    async fn check(
        &self,
        _: AutonomyLevel,
        _: &Principal,
        _: metnos_core::Capability,
        _: &str,
    ) -> Result<PolicyAnswer, ClientError> {
        Err(Status::unimplemented("not asked").into())
    }
    async fn judge(&self, _: vaglio::JudgeRequest) -> Result<vaglio::Verdict, ClientError> {
        Err(Status::unimplemented("not asked").into())
    }
    async fn create_pending(
        &self,
        request: approval::CreatePendingRequest,
    ) -> Result<approval::CreatePendingResponse, ClientError> {
        let mut seen = self.0.lock().unwrap();
        if seen
            .refuse
            .iter()
            .any(|r| request.args_json.contains(r.as_str()))
        {
            return Err(Status::invalid_argument("a revocation offer must name …").into());
        }
        seen.pending.push(request);
        Ok(approval::CreatePendingResponse {
            approval: Some(approval::PendingApproval {
                token: format!("tok{}", seen.pending.len()),
                ..Default::default()
            }),
            card: Some(approval::Card {
                lines: vec![format!("card {}", seen.pending.len())],
                ..Default::default()
            }),
        })
    }
    async fn get_pending(&self, token: &str) -> Result<approval::PendingApproval, ClientError> {
        let seen = self.0.lock().unwrap();
        if let Some(pending) = seen.answered.get(token) {
            return Ok(pending.clone());
        }
        let (status, expires) = seen
            .states
            .get(token)
            .ok_or_else(|| Status::not_found("unknown token"))?;
        Ok(approval::PendingApproval {
            token: token.to_owned(),
            status: *status as i32,
            expires_at: Some(metnos_kit::time::to_timestamp(*expires)),
            ..Default::default()
        })
    }
    async fn wait_decision(&self, _: &str) -> Result<approval::PendingApproval, ClientError> {
        Err(Status::unimplemented("not asked").into())
    }
    async fn cancel(&self, _: &str, _: &str) -> Result<(), ClientError> {
        Ok(())
    }
    async fn tell(&self, person: &Principal, text: &str, key: &str) -> Result<(), ClientError> {
        let mut seen = self.0.lock().unwrap();
        if seen.tell_fails {
            return Err(Status::unavailable("the gateway is down").into());
        }
        if seen.tell_aborts {
            return Err(Status::aborted("the message may have been sent").into());
        }
        seen.told
            .push((person.to_string(), text.to_owned(), key.to_owned()));
        Ok(())
    }
    async fn show_card(
        &self,
        principal: &Principal,
        token: &str,
        card: approval::Card,
    ) -> Result<(), ClientError> {
        let mut seen = self.0.lock().unwrap();
        if seen.card_fails {
            return Err(Status::unavailable("the gateway is down").into());
        }
        seen.cards.push((principal.clone(), token.to_owned(), card));
        Ok(())
    }
    async fn pairing_level(
        &self,
        principal: &Principal,
    ) -> Result<Option<AutonomyLevel>, ClientError> {
        let paired = self
            .0
            .lock()
            .unwrap()
            .paired
            .contains(&principal.to_string());
        Ok(paired.then_some(AutonomyLevel::Supervised))
    }
    async fn evaluate_proposal(
        &self,
        request: vaglio::EvaluateProposalRequest,
    ) -> Result<vaglio::AlignmentResult, ClientError> {
        let mut seen = self.0.lock().unwrap();
        seen.asked.push(request.clone());
        seen.weighed.push(request.proposal.unwrap());
        let ask_person = std::mem::take(&mut seen.ask);
        let reason = if seen.reason.is_empty() {
            "aligned".to_owned()
        } else {
            seen.reason.clone()
        };
        Ok(vaglio::AlignmentResult {
            decision: seen.decision,
            reason,
            ask_person,
            ..Default::default()
        })
    }
    async fn list_grants(&self) -> Result<Vec<policy::Grant>, ClientError> {
        Ok(self.0.lock().unwrap().grants.clone())
    }
    async fn pairing_language(&self, principal: &Principal) -> metnos_core::language::Language {
        if self
            .0
            .lock()
            .unwrap()
            .italian
            .contains(&principal.to_string())
        {
            metnos_core::language::Language::Italian
        } else {
            metnos_core::language::Language::English
        }
    }
    async fn record_silence(
        &self,
        proposal_id: &str,
        person: &Principal,
    ) -> Result<(), ClientError> {
        self.0
            .lock()
            .unwrap()
            .silences
            .push((proposal_id.to_owned(), person.to_string()));
        Ok(())
    }
    async fn discarded(
        &self,
        person: Option<&Principal>,
        _since_ms: i64,
        closest: u32,
    ) -> Result<metnos_planner::filters::Discarded, ClientError> {
        let seen = self.0.lock().unwrap();
        let of = |r: &&vaglio::AlignmentResult| {
            person.is_none_or(|p| r.principal.as_ref() == Some(&p.to_proto()))
        };
        let all: Vec<_> = seen.discarded.iter().filter(of).cloned().collect();
        let mut nearest = all.clone();
        nearest.sort_by(|a, b| b.expected_alignment.total_cmp(&a.expected_alignment));
        nearest.truncate(closest as usize);
        Ok((all, nearest))
    }
}

/// The evening digest of people in Rome, on `db`, through `fake`, at `clock`'s time.
fn rome_digest(db: &metnos_kit::store::Db, fake: &Fake, clock: &ManualClock) -> EveningDigest {
    EveningDigest {
        db: db.clone(),
        filters: Arc::new(fake.clone()),
        telos: TelosConfig {
            time_zone: "Europe/Rome".into(),
            ..TelosConfig::default()
        },
        clock: Arc::new(clock.clone()),
    }
}

fn rome(text: &str) -> i64 {
    text.parse::<jiff::civil::DateTime>()
        .unwrap()
        .to_zoned(jiff::tz::TimeZone::get("Europe/Rome").unwrap())
        .unwrap()
        .timestamp()
        .as_millisecond()
}

fn firing(now: i64) -> Firing {
    Firing {
        task: Task {
            id: "builtin:evening_digest".into(),
            kind: Kind::Maintenance,
            name: "evening_digest".into(),
            channel: String::new(),
            sender_id: String::new(),
            schedule: "every 5 minutes".into(),
            anchor_at: 0,
            query: String::new(),
            level: None,
            notify: metnos_planner::proactive::scheduler::Notify::Always,
            state: metnos_planner::proactive::scheduler::TaskState::Active,
            next_run_at: now,
            due_at: now,
            deferred: false,
            last_run_at: None,
            last_status: None,
            last_output: None,
            last_digest: None,
            created_at: 0,
            updated_at: 0,
        },
        slot_at: now,
        now_ms: now,
        in_cadence: true,
        run_id: 1,
    }
}

async fn queue(db: &metnos_kit::store::Db, n: usize, at: i64) {
    for i in 0..n {
        let payload = serde_json::json!({"capability": "fs:write", "pattern": format!("~/f{i}/*"), "target": format!("/home/a/f{i}/x"), "count": 3, "days": 7});
        metnos_kit::on_db!(db, pool => {
            sqlx::query("INSERT INTO proposals (id, channel, sender_id, kind, subject, description, payload, decision, reason, created_at) VALUES ($1, 'telegram', '42', 'grant_offer', $2, $3, $4, 'digest', 'quota', $5)")
                .bind(format!("go-{at}-{i:02}"))
                .bind(format!("fs:write|~/f{i}/*"))
                .bind(format!("You approved fs:write in ~/f{i}/* 3 times in 7 days. Allow them from now on?"))
                .bind(payload.to_string())
                .bind(at + i as i64)
                .execute(pool)
                .await
                .unwrap();
        });
    }
}

async fn the_digest_goes_once_at_its_time_ten_items_at_most(test: TestStore) {
    let db = metnos_kit::store::open(
        &test.spec(),
        "planner",
        &MIGRATIONS,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let fake = Fake::default();
    let clock = ManualClock::new();
    let telos = TelosConfig {
        time_zone: "Europe/Rome".into(),
        ..TelosConfig::default()
    };
    let digest = |db: metnos_kit::store::Db| EveningDigest {
        db,
        filters: Arc::new(fake.clone()),
        telos: telos.clone(),
        clock: Arc::new(clock.clone()),
    };
    let one = digest(db.clone());
    let other = digest(match &test {
        TestStore::Sqlite(_) => db.clone(),
        TestStore::Postgres { .. } => metnos_kit::store::open(
            &test.spec(),
            "planner",
            &MIGRATIONS,
            Duration::from_secs(10),
        )
        .await
        .unwrap(),
    });
    queue(&db, 13, rome("2026-11-26T14:00")).await;
    let cards = |f: &Fake| f.0.lock().unwrap().cards.len();

    // Before 20:30 local: nothing.
    for at in ["2026-11-26T18:00", "2026-11-26T20:29"] {
        clock.set(rome(at));
        one.run(&firing(rome(at))).await.unwrap();
    }
    assert_eq!(cards(&fake), 0);
    // 20:31: one digest, whichever of two replicas runs; the second finds it sent.
    let now = rome("2026-11-26T20:31");
    clock.set(now);
    let f = firing(now);
    let (a, b) = tokio::join!(one.run(&f), other.run(&f));
    a.unwrap();
    b.unwrap();
    assert_eq!(cards(&fake), 1);
    {
        let seen = fake.0.lock().unwrap();
        let (person, _, card) = &seen.cards[0];
        assert_eq!(person.to_string(), "telegram:42");
        assert_eq!(card.lines[0], "Evening digest — 10 proposal(s):");
        assert_eq!(card.lines.len(), 11);
        assert!(
            card.lines[1].starts_with("1. You approved fs:write in ~/f0/*"),
            "{:?}",
            card.lines
        );
        assert_eq!(card.buttons.len(), 10, "one row per item");
        let row = &card.buttons[2].buttons;
        let texts: Vec<&str> = row.iter().map(|b| b.text.as_str()).collect();
        assert_eq!(texts, ["3 · Accept", "3 · Reject", "3 · Never again"]);
        assert_eq!(row[0].data, "confirm-always:tok3");
        assert_eq!(row[2].data, "never:tok3");
        // Each item's card request: the grant offer, its proposal named for the feedback.
        assert_eq!(seen.pending.len(), 10);
        assert_eq!(seen.pending[0].executor, "grant_offer");
        assert!(
            seen.pending[0]
                .request
                .as_ref()
                .unwrap()
                .extra_json
                .contains("go-")
        );
    }
    // Later the same evening: nothing more.
    let now = rome("2026-11-26T21:00");
    clock.set(now);
    one.run(&firing(now)).await.unwrap();
    assert_eq!(cards(&fake), 1);
    // The next evening: the three left, once. A planner down until 23:45 sends nothing late.
    let late = rome("2026-11-27T23:45");
    clock.set(late);
    one.run(&firing(late)).await.unwrap();
    assert_eq!(cards(&fake), 1, "three hours late: not sent");
    let now = rome("2026-11-28T20:35");
    clock.set(now);
    one.run(&firing(now)).await.unwrap();
    assert_eq!(cards(&fake), 2);
    assert_eq!(fake.0.lock().unwrap().cards[1].2.lines.len(), 4);
    // Nothing queued: no digest.
    let now = rome("2026-11-29T20:35");
    clock.set(now);
    one.run(&firing(now)).await.unwrap();
    assert_eq!(cards(&fake), 2);
}

metnos_kit::store_suite!(
    the_digest_goes_once_at_its_time_ten_items_at_most,
    the_weekly_line_names_the_discarded_once_a_week,
    unused_grants_are_offered_for_revocation_once,
    an_unanswered_card_is_silence_once_and_old_notes_are_pruned,
    a_chain_for_a_recurring_wish_is_offered_once_and_kept_only_as_accepted,
    a_digest_lists_every_standing_result_and_counts_past_a_hundred,
    the_telos_question_reaches_the_person_in_their_language_once,
    what_a_window_deferred_unjudged_is_judged_at_the_digest,
    a_digest_tried_again_sends_the_same_results_and_a_later_one_waits,
);

async fn open(test: &TestStore) -> metnos_kit::store::Db {
    metnos_kit::store::open(
        &test.spec(),
        "planner",
        &MIGRATIONS,
        Duration::from_secs(10),
    )
    .await
    .unwrap()
}

fn rejected(sender: &str, description: &str, alignment: f64) -> vaglio::AlignmentResult {
    vaglio::AlignmentResult {
        principal: Some(metnos_proto::common::v1::Principal {
            channel: "telegram".into(),
            sender_id: sender.into(),
        }),
        description: description.into(),
        expected_alignment: alignment,
        threshold_used: 0.5,
        ..Default::default()
    }
}

/// Once a week (even with nothing queued) the digest says how many proposals were
/// discarded and the five closest to being shown; not the next evening; again a week on.
async fn the_weekly_line_names_the_discarded_once_a_week(test: TestStore) {
    let db = open(&test).await;
    let fake = Fake::default();
    {
        let mut seen = fake.0.lock().unwrap();
        for i in 0..7 {
            seen.discarded.push(rejected(
                "42",
                &format!("Read the news about topic {i}?"),
                0.1 * f64::from(i),
            ));
        }
        seen.discarded.push(rejected("7", "Bob's proposal", 0.49));
        seen.italian = vec!["telegram:7".into()];
    }
    let clock = ManualClock::new();
    let digest = rome_digest(&db, &fake, &clock);
    let run = async |at: &str| {
        clock.set(rome(at));
        digest.run(&firing(rome(at))).await.unwrap();
    };
    let cards_to = |who: &str| -> Vec<approval::Card> {
        fake.0
            .lock()
            .unwrap()
            .cards
            .iter()
            .filter(|(p, ..)| p.to_string() == who)
            .map(|(_, _, c)| c.clone())
            .collect()
    };
    run("2026-11-26T20:31").await;
    let ada = cards_to("telegram:42");
    assert_eq!(ada.len(), 1, "nothing queued, but the weekly line goes");
    assert_eq!(
        ada[0].lines,
        [
            "Evening digest",
            "This week 7 proposal(s) were discarded; the 5 closest to being shown:",
            "  · Read the news about topic 6? (0.60 of 0.50)",
            "  · Read the news about topic 5? (0.50 of 0.50)",
            "  · Read the news about topic 4? (0.40 of 0.50)",
            "  · Read the news about topic 3? (0.30 of 0.50)",
            "  · Read the news about topic 2? (0.20 of 0.50)",
        ]
    );
    assert!(ada[0].buttons.is_empty());
    let bob = cards_to("telegram:7");
    assert_eq!(bob.len(), 1);
    assert_eq!(
        bob[0].lines,
        [
            "Riepilogo serale",
            "Proposte scartate questa settimana: 1; le 1 più vicine a essere mostrate:",
            "  · Bob's proposal (0.49 su 0.50)",
        ],
        "in his language"
    );
    assert!(!bob[0].lines.join("\n").contains("topic"), "only his own");
    // The next evening: a queued item goes, without the weekly line.
    queue(&db, 1, rome("2026-11-27T10:00")).await;
    run("2026-11-27T20:31").await;
    let ada = cards_to("telegram:42");
    assert_eq!(ada.len(), 2);
    assert_eq!(ada[1].lines.len(), 2, "{:?}", ada[1].lines);
    assert!(!ada[1].lines.join("\n").contains("discarded"));
    // Nothing on the evenings after; a week on, the line again.
    for day in ["2026-11-28T20:31", "2026-12-02T20:31"] {
        run(day).await;
    }
    assert_eq!(cards_to("telegram:42").len(), 2);
    run("2026-12-03T20:31").await;
    let ada = cards_to("telegram:42");
    assert_eq!(ada.len(), 3);
    assert!(ada[2].lines[1].starts_with("This week 7 proposal(s)"));
}

fn grant(
    id: i64,
    sender: &str,
    target: &str,
    granted_days_ago: i64,
    used_days_ago: Option<i64>,
    now: i64,
) -> policy::Grant {
    let ago = |days: i64| Some(metnos_kit::time::to_timestamp(now - days * 86_400_000));
    policy::Grant {
        id,
        principal: Some(metnos_proto::common::v1::Principal {
            channel: if sender == "cli" {
                "cli".into()
            } else {
                "telegram".into()
            },
            sender_id: if sender == "cli" {
                "ada".into()
            } else {
                sender.into()
            },
        }),
        capability: "fs:write".into(),
        target: target.into(),
        granted_at: ago(granted_days_ago),
        expires_at: None,
        granted_by: "approval:x".into(),
        revoked_at: None,
        last_used_at: used_days_ago.and_then(ago),
    }
}

/// Grants unused for 90 days: one revocation offer per person (the grants by id, the
/// oldest first, four at most), never for grants that expire on their own, an unpaired
/// person or the terminal; not again within 30 days, never twice for the same grants; kept
/// for the digest when the telos engine says so, where its Accept approves the revocation.
async fn unused_grants_are_offered_for_revocation_once(test: TestStore) {
    use metnos_planner::proactive::proposals::{GRANT_REVOKE, StaleGrants};
    let db = open(&test).await;
    let fake = Fake::default();
    let now = rome("2026-11-26T11:00");
    {
        let mut seen = fake.0.lock().unwrap();
        seen.paired = vec!["telegram:42".into()];
        seen.decision = vaglio::AlignmentDecision::Publish as i32;
        let mut session = grant(5, "42", "/home/a/session/*", 200, None, now);
        session.expires_at = Some(metnos_kit::time::to_timestamp(now + 3_600_000));
        seen.grants = vec![
            grant(1, "42", "/home/a/old/*", 120, Some(100), now),
            grant(2, "42", "example.org", 95, None, now),
            grant(3, "42", "/home/a/busy/*", 300, Some(2), now),
            grant(4, "42", "/home/a/new/*", 10, None, now),
            session,
            grant(6, "7", "/home/b/old/*", 200, None, now),
            grant(7, "cli", "/home/a/cli/*", 200, None, now),
        ];
    }
    let job = StaleGrants {
        db: db.clone(),
        filters: Arc::new(fake.clone()),
        unused_days: 90,
        enabled: true,
    };
    job.run(&firing(now)).await.unwrap();
    {
        let seen = fake.0.lock().unwrap();
        assert_eq!(
            seen.weighed.len(),
            1,
            "one offer, Ada's: {:?}",
            seen.weighed
        );
        let weighed = &seen.weighed[0];
        assert_eq!(weighed.kind, GRANT_REVOKE);
        // How sure: its least-unused grant, 95 days against the 90 that make an offer.
        let confidence = seen.asked[0].confidence.unwrap();
        assert!((confidence - (0.6 + 0.2 * (3.0 * 95.0 / 90.0 - 3.0) / 3.0)).abs() < 1e-9);
        assert_eq!(weighed.principal.as_ref().unwrap().sender_id, "42");
        assert!(
            weighed
                .description
                .starts_with("Revoke 2 grant(s) you have not used for 90 days?")
                && weighed.description.contains("/home/a/old/*")
                && weighed.description.contains("example.org"),
            "{}",
            weighed.description
        );
        assert_eq!(seen.pending.len(), 1);
        let request = &seen.pending[0];
        assert_eq!(request.executor, GRANT_REVOKE);
        assert_eq!(request.args_json, r#"{"grants":[1,2]}"#);
        assert!(request.capability.is_empty());
        assert_eq!(seen.cards.len(), 1, "published: its card shown");
        assert_eq!(seen.cards[0].0.to_string(), "telegram:42");
        assert_eq!(seen.cards[0].1, "tok1");
    }
    // The next day, and 31 days on with the same grants: nothing new.
    for days in [1, 31] {
        job.run(&firing(now + days * 86_400_000)).await.unwrap();
    }
    assert_eq!(fake.0.lock().unwrap().weighed.len(), 1);
    // One more goes stale after 31 days: a new offer naming the three, kept for the digest.
    {
        let mut seen = fake.0.lock().unwrap();
        seen.grants[2] = grant(3, "42", "/home/a/busy/*", 300, Some(100), now);
        seen.decision = vaglio::AlignmentDecision::DeferToDigest as i32;
    }
    let later = now + 31 * 86_400_000;
    job.run(&firing(later)).await.unwrap();
    assert_eq!(fake.0.lock().unwrap().weighed.len(), 2);
    let digest = rome_digest(&db, &fake, &ManualClock::new());
    // An older queued offer whose grant was revoked meanwhile: the approval service refuses
    // its card; it is dropped, and the digest goes with the rest.
    metnos_kit::on_db!(&db, pool => {
        sqlx::query("INSERT INTO proposals (id, channel, sender_id, kind, subject, description, payload, decision, reason, created_at) VALUES ('sg-old', 'telegram', '42', 'grant_revoke', '999', 'Revoke 1 grant(s)?', '{\"grants\":[999]}', 'digest', 'quota', $1)")
            .bind(later - 1).execute(pool).await.unwrap();
    });
    fake.0.lock().unwrap().refuse = vec!["999".into()];
    let evening = rome("2026-12-27T20:31");
    digest.run(&firing(evening)).await.unwrap();
    {
        let seen = fake.0.lock().unwrap();
        let (_, _, card) = seen.cards.last().expect("the digest");
        assert_eq!(card.lines[0], "Evening digest — 1 proposal(s):");
        assert_eq!(card.lines.len(), 2, "{:?}", card.lines);
        assert!(
            card.lines[1].starts_with("1. Revoke 3 grant(s)"),
            "{:?}",
            card.lines
        );
        let row = &card.buttons[0].buttons;
        assert!(row[0].data.starts_with("approve:"), "{row:?}");
        assert_eq!(
            seen.pending.last().unwrap().args_json,
            r#"{"grants":[1,2,3]}"#
        );
    }
    let dropped: String = metnos_kit::on_db!(&db, pool => {
        use sqlx::Row;
        sqlx::query("SELECT decision FROM proposals WHERE id = 'sg-old'").fetch_one(pool).await.unwrap().get(0)
    });
    assert_eq!(dropped, "dropped", "not offered again every evening");
    // The first offer forgotten (90 days on), the same two grants unused still: a new offer
    // with an id of its own (the telos engine keeps its answer to the first for good).
    let first = fake.0.lock().unwrap().weighed[0].proposal_id.clone();
    {
        let mut seen = fake.0.lock().unwrap();
        seen.grants.truncate(2);
        seen.decision = vaglio::AlignmentDecision::Publish as i32;
    }
    let upkeep = metnos_planner::proactive::proposals::ProposalUpkeep {
        db: db.clone(),
        filters: Arc::new(fake.clone()),
        fatigue_days: 7,
    };
    let day = 86_400_000;
    upkeep.run(&firing(now + 91 * day)).await.unwrap();
    job.run(&firing(now + 91 * day)).await.unwrap();
    {
        let seen = fake.0.lock().unwrap();
        assert_eq!(seen.weighed.len(), 3);
        assert_ne!(seen.weighed[2].proposal_id, first);
        assert_eq!(
            seen.pending.last().unwrap().args_json,
            r#"{"grants":[1,2]}"#
        );
    }
    // Off: no proposal at all.
    let off = StaleGrants {
        db,
        filters: Arc::new(fake.clone()),
        unused_days: 1,
        enabled: false,
    };
    off.run(&firing(later + 40 * 86_400_000)).await.unwrap();
    assert_eq!(fake.0.lock().unwrap().weighed.len(), 3);
}

/// A proposal's card unanswered when it expired is said to the telos engine as silence,
/// once, by one of two replicas; an answered one is not; the fatigue source's notes past
/// its window and proposals past 90 days are deleted.
async fn an_unanswered_card_is_silence_once_and_old_notes_are_pruned(test: TestStore) {
    use metnos_planner::proactive::proposals::ProposalUpkeep;
    let db = open(&test).await;
    let fake = Fake::default();
    let now = rome("2026-11-26T12:00");
    let hour = 3_600_000;
    let rows = [
        (
            "p-silent",
            "tok-a",
            now - 49 * hour,
            approval::ApprovalStatus::Expired,
        ),
        (
            "p-unswept",
            "tok-b",
            now - 49 * hour,
            approval::ApprovalStatus::Pending,
        ),
        (
            "p-answered",
            "tok-c",
            now - 49 * hour,
            approval::ApprovalStatus::Approved,
        ),
        (
            "p-young",
            "tok-d",
            now - 47 * hour,
            approval::ApprovalStatus::Pending,
        ),
    ];
    for (id, token, sent, status) in rows {
        fake.0
            .lock()
            .unwrap()
            .states
            .insert(token.into(), (status, sent + 48 * hour));
        metnos_kit::on_db!(&db, pool => {
            sqlx::query("INSERT INTO proposals (id, channel, sender_id, kind, subject, description, payload, decision, reason, created_at, token, sent_at) VALUES ($1, 'telegram', '42', 'grant_offer', $1, 'd', '{}', 'publish', 'aligned', $2, $3, $2)")
                .bind(id).bind(sent).bind(token).execute(pool).await.unwrap();
        });
    }
    metnos_kit::on_db!(&db, pool => {
        sqlx::query("INSERT INTO proposals (id, channel, sender_id, kind, subject, description, payload, decision, reason, created_at) VALUES ('p-ancient', 'telegram', '42', 'grant_offer', 's', 'd', '{\"target\":\"/home/a/secret?token=x\"}', 'reject', 'below_threshold', $1)")
            .bind(now - 91 * 86_400_000).execute(pool).await.unwrap();
        for (i, days) in [(0, 8), (1, 6)] {
            sqlx::query("INSERT INTO approvals_seen (person, capability, pattern, target, at) VALUES ('telegram:42', 'fs:write', '~/x/*', $1, $2)")
                .bind(format!("/home/a/x/{i}")).bind(now - days * 86_400_000).execute(pool).await.unwrap();
        }
    });
    let upkeep = |db: metnos_kit::store::Db| ProposalUpkeep {
        db,
        filters: Arc::new(fake.clone()),
        fatigue_days: 7,
    };
    let other = match &test {
        TestStore::Sqlite(_) => db.clone(),
        TestStore::Postgres { .. } => open(&test).await,
    };
    let (one, two) = (upkeep(db.clone()), upkeep(other));
    let f = firing(now);
    let (a, b) = tokio::join!(one.run(&f), two.run(&f));
    a.unwrap();
    b.unwrap();
    let mut silences = fake.0.lock().unwrap().silences.clone();
    silences.sort();
    assert_eq!(
        silences,
        [("p-silent".to_owned(), "telegram:42".to_owned())],
        "the expired card once, across two replicas; one the approval service has not \
         expired yet may still be answered"
    );
    one.run(&firing(now + 1_800_000)).await.unwrap();
    assert_eq!(fake.0.lock().unwrap().silences.len(), 1, "not said twice");
    // Once the approval service expired them, unanswered: their turn.
    for token in ["tok-b", "tok-d"] {
        fake.0.lock().unwrap().states.insert(
            token.into(),
            (approval::ApprovalStatus::Expired, now + hour),
        );
    }
    one.run(&firing(now + 2 * hour)).await.unwrap();
    assert_eq!(fake.0.lock().unwrap().silences.len(), 3);
    let (proposals, seen): (i64, i64) = metnos_kit::on_db!(&db, pool => {
        use sqlx::Row;
        let p = sqlx::query("SELECT COUNT(*) FROM proposals WHERE id = 'p-ancient'").fetch_one(pool).await.unwrap().get(0);
        let s = sqlx::query("SELECT COUNT(*) FROM approvals_seen").fetch_one(pool).await.unwrap().get(0);
        (p, s)
    });
    assert_eq!(
        proposals, 0,
        "a proposal past 90 days is gone, with the target it held"
    );
    assert_eq!(
        seen, 1,
        "the note past the fatigue window is gone, the one within kept"
    );
}

/// Issue 46, item 3, on both stores: `synt_suggest`'s chain for a recurring wish is offered
/// to the owner through the telos engine (an approval request `shortcut_offer` whose
/// arguments are the chain), once across two replicas; the upkeep keeps the shortcut only
/// when the approval service says the request was approved, by the person it was offered
/// to, for the very chain offered (its hash) — an approval of another chain, or by another
/// person, keeps nothing and is not looked at again.
async fn a_chain_for_a_recurring_wish_is_offered_once_and_kept_only_as_accepted(test: TestStore) {
    use metnos_planner::proactive::shortcuts::{self, SHORTCUT_OFFER};
    use metnos_planner::store::mnestome::{Mnestome, Passage};
    use metnos_planner::turn::prefilter::{Entry, Index};
    let db = open(&test).await;
    let other = match &test {
        TestStore::Sqlite(_) => db.clone(),
        TestStore::Postgres { .. } => open(&test).await,
    };
    let fake = Fake::default();
    {
        let mut seen = fake.0.lock().unwrap();
        seen.paired.push("telegram:42".into());
        seen.decision = vaglio::AlignmentDecision::Publish as i32;
    }
    let mnestome = Mnestome::new(db.clone());
    let index = Index::new(&[
        Entry {
            name: "parse_local".into(),
            description: "Parse a document".into(),
            affinity: vec!["table".into(), "extract".into()],
        },
        Entry {
            name: "shell_exec".into(),
            description: "Run a command".into(),
            affinity: vec!["run".into(), "csv".into()],
        },
    ]);
    let now = 1_000_000;
    let piped = |to: &str| Passage {
        from_executor: "web_fetch".into(),
        from_field: "content".into(),
        to_executor: to.into(),
        to_arg: "text".into(),
    };
    for to in ["parse_local", "shell_exec"] {
        for _ in 0..2 {
            mnestome.learned(&[piped(to)], true, now).await.unwrap();
        }
    }
    for wanted in ["table_extract", "csv_run"] {
        for _ in 0..3 {
            mnestome
                .proto("web_fetch", wanted, &["page".into()], now)
                .await
                .unwrap();
        }
    }
    let found = metnos_planner::turn::synt::suggest(&mnestome, &index)
        .await
        .unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    let owner = shortcuts::owner(&db, &["telegram:42".into()])
        .await
        .unwrap()
        .unwrap();
    // Offered once, whichever replica runs (twice each).
    for found in &found {
        let (a, b) = tokio::join!(
            shortcuts::offer(&db, &fake, &owner, found, now),
            shortcuts::offer(&other, &fake, &owner, found, now)
        );
        assert!(a.unwrap() ^ b.unwrap(), "one of two replicas offers it");
        assert!(
            !shortcuts::offer(&db, &fake, &owner, found, now)
                .await
                .unwrap()
        );
    }
    let (requests, weighed) = {
        let seen = fake.0.lock().unwrap();
        (seen.pending.clone(), seen.weighed.clone())
    };
    assert_eq!(requests.len(), 2);
    assert_eq!(weighed.len(), 2);
    assert!(
        weighed
            .iter()
            .all(|w| w.kind == SHORTCUT_OFFER && w.effect_class.starts_with("shortcut_offer:"))
    );
    // Never again on one wish's card is about that wish.
    let mut classes: Vec<&str> = weighed.iter().map(|w| w.effect_class.as_str()).collect();
    classes.sort_unstable();
    assert_eq!(
        classes,
        ["shortcut_offer:csv_run", "shortcut_offer:table_extract"]
    );
    let args =
        |i: usize| -> serde_json::Value { serde_json::from_str(&requests[i].args_json).unwrap() };
    let table = (0..2)
        .find(|&i| args(i)["wanted"] == "table_extract")
        .unwrap();
    let csv = 1 - table;
    assert_eq!(
        args(table),
        serde_json::json!({"wanted": "table_extract", "from": "web_fetch", "chain": ["parse_local"], "uses": 3})
    );
    assert!(weighed.iter().any(|w| w.description == "table_extract was asked for 3 times; web_fetch → parse_local does it. Keep it as a shortcut?"));
    assert!(
        requests.iter().all(|r| r.executor == SHORTCUT_OFFER
            && r.capability.is_empty()
            && r.target.is_empty())
    );
    // Not answered yet: nothing kept, asked again on the next run.
    let token = |i: usize| format!("tok{}", i + 1);
    for i in 0..2 {
        fake.0
            .lock()
            .unwrap()
            .states
            .insert(token(i), (approval::ApprovalStatus::Pending, now + 1));
    }
    assert_eq!(shortcuts::keep_accepted(&db, &fake, now).await.unwrap(), 0);
    assert!(mnestome.shortcuts().await.unwrap().is_empty());
    // Approved: the table one as offered; the csv one bound to another chain.
    let approved = |i: usize, chain: &[&str], who: &str| {
        approval::PendingApproval {
        token: token(i),
        status: approval::ApprovalStatus::Approved as i32,
        executor: SHORTCUT_OFFER.into(),
        requester: Some(Principal::new("telegram", who).unwrap().to_proto()),
        call_sha256: metnos_core::call::call_sha256(
            SHORTCUT_OFFER,
            &serde_json::json!({"wanted": args(i)["wanted"], "from": "web_fetch", "chain": chain, "uses": 3}).to_string(),
        )
        .unwrap(),
        ..Default::default()
    }
    };
    {
        let mut seen = fake.0.lock().unwrap();
        seen.answered
            .insert(token(csv), approved(csv, &["fs_write"], "42"));
        seen.answered
            .insert(token(table), approved(table, &["parse_local"], "42"));
    }
    assert_eq!(
        shortcuts::keep_accepted(&db, &fake, now + 5).await.unwrap(),
        1
    );
    let kept = mnestome.shortcuts().await.unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        (kept[0].name.as_str(), kept[0].from_executor.as_str()),
        ("table_extract", "web_fetch")
    );
    assert_eq!(kept[0].chain, ["parse_local"]);
    assert_eq!(kept[0].created_at, now + 5);
    // Both offers are closed: a corrected answer later changes nothing.
    fake.0
        .lock()
        .unwrap()
        .answered
        .insert(token(csv), approved(csv, &["shell_exec"], "42"));
    assert_eq!(
        shortcuts::keep_accepted(&db, &fake, now + 6).await.unwrap(),
        0
    );
    assert_eq!(mnestome.shortcuts().await.unwrap().len(), 1);
    // Offered already kept: not offered again, even once the old offer is forgotten.
    metnos_kit::on_db!(&db, pool => {
        sqlx::query("DELETE FROM proposals").execute(pool).await.unwrap();
    });
    let table_found = found
        .iter()
        .find(|f| f.proto.wanted == "table_extract")
        .unwrap();
    assert!(
        !shortcuts::offer(&db, &fake, &owner, table_found, now)
            .await
            .unwrap()
    );
    // The digest and a terminal session make its card from the stored arguments.
    let (request, accept) = metnos_planner::proactive::proposals::queued_request(
        &owner,
        "sc-1",
        SHORTCUT_OFFER,
        &requests[table].args_json,
        metnos_core::language::Language::English,
    )
    .unwrap();
    assert_eq!(accept, "approve");
    assert_eq!(request.args_json, requests[table].args_json);
    // Someone else's approval of the very chain keeps nothing either.
    let csv_found = found.iter().find(|f| f.proto.wanted == "csv_run").unwrap();
    assert!(
        shortcuts::offer(&db, &fake, &owner, csv_found, now)
            .await
            .unwrap()
    );
    let last = fake.0.lock().unwrap().pending.len() - 1;
    let mut by_bob = approved(csv, &["shell_exec"], "43");
    by_bob.token = format!("tok{}", last + 1);
    fake.0
        .lock()
        .unwrap()
        .answered
        .insert(by_bob.token.clone(), by_bob);
    assert_eq!(
        shortcuts::keep_accepted(&db, &fake, now + 7).await.unwrap(),
        0
    );
    assert_eq!(mnestome.shortcuts().await.unwrap().len(), 1);
}

/// Queues `n` standing orders' results for telegram:42's digest.
async fn queue_results(db: &metnos_kit::store::Db, n: usize, at: i64) {
    for i in 0..n {
        metnos_kit::on_db!(db, pool => {
            sqlx::query("INSERT INTO proposals (id, channel, sender_id, kind, subject, description, payload, decision, reason, created_at) VALUES ($1, 'telegram', '42', 'standing_order', 'so-1', $2, '{}', 'digest', 'deferred', $3)")
                .bind(format!("so-{i:03}"))
                .bind(format!("⏰ morning: result number {i:03} {}", "words ".repeat(20)))
                .bind(at + i as i64)
                .execute(pool)
                .await
                .unwrap();
        });
    }
}

/// Issue 47, item 2: the evening digest holds every standing order's result apart from
/// the ten places of proposals: twelve proposals and 130 results make one card with ten
/// proposals (and a line saying the results came), the first hundred results listed in
/// messages of their own (each within Telegram's size), the other thirty counted; all of
/// them marked sent, none listed again the next evening.
async fn a_digest_lists_every_standing_result_and_counts_past_a_hundred(test: TestStore) {
    let db = open(&test).await;
    let fake = Fake::default();
    let clock = ManualClock::new();
    let digest = rome_digest(&db, &fake, &clock);
    queue(&db, 12, rome("2026-11-26T14:00")).await;
    queue_results(&db, 130, rome("2026-11-26T08:00")).await;
    let now = rome("2026-11-26T20:31");
    clock.set(now);
    digest.run(&firing(now)).await.unwrap();
    {
        let seen = fake.0.lock().unwrap();
        assert_eq!(seen.cards.len(), 1);
        let card = &seen.cards[0].2;
        assert_eq!(card.lines[0], "Evening digest — 10 proposal(s):");
        assert_eq!(
            card.buttons.len(),
            10,
            "ten proposals, not a result among them"
        );
        assert_eq!(
            card.lines.last().unwrap(),
            "Results of your standing orders: 130 (in the messages above)."
        );
        let texts: Vec<&str> = seen.told.iter().map(|(_, t, _)| t.as_str()).collect();
        assert!(texts.len() > 1, "more than one message");
        assert!(texts.iter().all(|t| t.chars().count() <= 3600), "{texts:?}");
        let lines: Vec<&str> = texts.iter().flat_map(|t| t.lines()).collect();
        assert_eq!(lines.len(), 101, "{lines:?}");
        assert!(lines[0].contains("result number 000"), "{}", lines[0]);
        assert!(lines[99].contains("result number 099"), "{}", lines[99]);
        assert_eq!(lines[100], "… and 30 more result(s) not listed.");
        let keys: std::collections::HashSet<&str> =
            seen.told.iter().map(|(_, _, k)| k.as_str()).collect();
        assert_eq!(keys.len(), seen.told.len(), "one key per message");
    }
    // The next evening: the two proposals left, no result again.
    let now = rome("2026-11-27T20:31");
    clock.set(now);
    let told = fake.0.lock().unwrap().told.len();
    digest.run(&firing(now)).await.unwrap();
    let seen = fake.0.lock().unwrap();
    assert_eq!(seen.cards.len(), 2);
    assert_eq!(seen.cards[1].2.buttons.len(), 2);
    assert_eq!(seen.told.len(), told, "no result twice");
}

/// Issue 47, item 3: the telos engine's once-only question reaches its person on their
/// channel, in their language, naming the command that writes their TELOS.md; if the
/// gateway cannot take it, it is told again later, once. A grant offer's confidence comes
/// from the approvals it rests on (three: 0.6).
async fn the_telos_question_reaches_the_person_in_their_language_once(test: TestStore) {
    use metnos_planner::proactive::proposals::{Approved, Fatigue, after_approval};
    let db = open(&test).await;
    let fake = Fake::default();
    let now = rome("2026-11-26T11:00");
    {
        let mut seen = fake.0.lock().unwrap();
        seen.decision = vaglio::AlignmentDecision::Reject as i32;
        seen.italian = vec!["telegram:7".into()];
    }
    let approve = |who: &str, n: usize| Approved {
        person: Principal::new("telegram", who).unwrap(),
        level: AutonomyLevel::Supervised,
        capability: "fs:write".parse().unwrap(),
        pattern: format!("~/f{n}/*"),
        target: format!("/home/a/f{n}/x"),
        language: 0,
    };
    let fatigue = Fatigue {
        approvals: 3,
        days: 7,
    };
    let filters: Arc<dyn Filters> = Arc::new(fake.clone());
    fake.0.lock().unwrap().ask = "metnos telos edit --person telegram:7".into();
    for i in 0..3 {
        after_approval(
            db.clone(),
            Arc::clone(&filters),
            fatigue,
            approve("7", 1),
            now + i,
        )
        .await;
    }
    {
        let seen = fake.0.lock().unwrap();
        assert_eq!(seen.asked.len(), 1, "one offer");
        assert_eq!(seen.asked[0].confidence, Some(0.6));
        assert_eq!(seen.told.len(), 1);
        let (person, text, key) = &seen.told[0];
        assert_eq!(person, "telegram:7");
        assert!(
            text.contains("`metnos telos edit --person telegram:7`"),
            "{text}"
        );
        assert!(text.contains("Chiedi a chi gestisce"), "in Italian: {text}");
        assert_eq!(key, "telos_question:telegram:7");
    }
    // Another person, the gateway down: the proposals' upkeep tells it again, under the
    // same key (the gateway's: a message that went after all is not sent twice), once.
    {
        let mut seen = fake.0.lock().unwrap();
        seen.ask = "metnos telos edit --person telegram:42".into();
        seen.tell_fails = true;
    }
    for i in 0..3 {
        after_approval(
            db.clone(),
            Arc::clone(&filters),
            fatigue,
            approve("42", 2),
            now + i,
        )
        .await;
    }
    let upkeep = metnos_planner::proactive::proposals::ProposalUpkeep {
        db: db.clone(),
        filters: Arc::clone(&filters),
        fatigue_days: 7,
    };
    upkeep.run(&firing(now + 60_000)).await.unwrap();
    assert_eq!(fake.0.lock().unwrap().told.len(), 1, "still down");
    fake.0.lock().unwrap().tell_fails = false;
    for later in [30, 60] {
        upkeep.run(&firing(now + later * 60_000)).await.unwrap();
    }
    let to_42: Vec<_> = fake
        .0
        .lock()
        .unwrap()
        .told
        .iter()
        .filter(|(p, ..)| p == "telegram:42")
        .cloned()
        .collect();
    assert_eq!(to_42.len(), 1, "told once: {to_42:?}");
    assert!(
        to_42[0]
            .1
            .contains("`metnos telos edit --person telegram:42`")
    );
    assert_eq!(to_42[0].2, "telos_question:telegram:42");
    // A third, the gateway unsure it went (ABORTED): never told again.
    {
        let mut seen = fake.0.lock().unwrap();
        seen.ask = "metnos telos edit --person telegram:9".into();
        seen.tell_aborts = true;
    }
    for i in 0..3 {
        after_approval(
            db.clone(),
            Arc::clone(&filters),
            fatigue,
            approve("9", 3),
            now + i,
        )
        .await;
    }
    fake.0.lock().unwrap().tell_aborts = false;
    upkeep.run(&firing(now + 90 * 60_000)).await.unwrap();
    let seen = fake.0.lock().unwrap();
    assert!(
        !seen.told.iter().any(|(p, ..)| p == "telegram:9"),
        "not sent again"
    );
}

/// A proposal a protected window sent to the digest unjudged is judged there (the telos
/// engine's dry run: nothing recorded, no place taken) before it takes a place: one the
/// engine would reject now is dropped, one it would not stays.
async fn what_a_window_deferred_unjudged_is_judged_at_the_digest(test: TestStore) {
    let db = open(&test).await;
    let fake = Fake::default();
    let clock = ManualClock::new();
    let digest = rome_digest(&db, &fake, &clock);
    queue(&db, 3, rome("2026-11-26T14:00")).await;
    metnos_kit::on_db!(&db, pool => {
        sqlx::query("UPDATE proposals SET reason = 'protected_window' WHERE id LIKE '%-00' OR id LIKE '%-01'")
            .execute(pool).await.unwrap();
    });
    {
        let mut seen = fake.0.lock().unwrap();
        seen.decision = vaglio::AlignmentDecision::Reject as i32;
        seen.reason = "below_threshold".into();
    }
    let now = rome("2026-11-26T20:31");
    clock.set(now);
    digest.run(&firing(now)).await.unwrap();
    let seen = fake.0.lock().unwrap();
    assert_eq!(seen.asked.len(), 2, "the two a window deferred, judged");
    assert!(seen.asked.iter().all(|a| a.dry_run), "nothing recorded");
    let card = &seen.cards[0].2;
    assert_eq!(card.lines[0], "Evening digest — 1 proposal(s):");
    assert!(card.lines[1].contains("~/f2/"), "{:?}", card.lines);
}

/// The results went but the card did not: the digest is tried again five minutes later
/// with the same results in the same message under the same key (the gateway sends a key
/// once), and a result that came in between waits for the next evening.
async fn a_digest_tried_again_sends_the_same_results_and_a_later_one_waits(test: TestStore) {
    let db = open(&test).await;
    let fake = Fake::default();
    let clock = ManualClock::new();
    let digest = rome_digest(&db, &fake, &clock);
    queue_results(&db, 3, rome("2026-11-26T08:00")).await;
    fake.0.lock().unwrap().card_fails = true;
    let now = rome("2026-11-26T20:31");
    clock.set(now);
    digest.run(&firing(now)).await.unwrap();
    metnos_kit::on_db!(&db, pool => {
        sqlx::query("INSERT INTO proposals (id, channel, sender_id, kind, subject, description, payload, decision, reason, created_at) VALUES ('so-late', 'telegram', '42', 'standing_order', 'so-1', '⏰ late: came in between', '{}', 'digest', 'deferred', $1)")
            .bind(now + 60_000)
            .execute(pool).await.unwrap();
    });
    fake.0.lock().unwrap().card_fails = false;
    let again = now + 5 * 60_000;
    clock.set(again);
    digest.run(&firing(again)).await.unwrap();
    {
        let seen = fake.0.lock().unwrap();
        assert_eq!(seen.told.len(), 2, "{:?}", seen.told);
        assert_eq!(
            seen.told[0], seen.told[1],
            "the same message under the same key"
        );
        assert!(!seen.told[1].1.contains("came in between"));
        assert_eq!(
            seen.cards[0].2.lines.last().unwrap(),
            "Results of your standing orders: 3 (in the messages above)."
        );
    }
    let next = rome("2026-11-27T20:31");
    clock.set(next);
    digest.run(&firing(next)).await.unwrap();
    let seen = fake.0.lock().unwrap();
    assert_eq!(seen.told.len(), 3);
    assert_eq!(seen.told[2].1, "⏰ late: came in between");
}
