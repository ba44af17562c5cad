//! The evening digest on SQLite and on a real PostgreSQL server, time from a settable
//! clock: what the telos engine kept for later reaches its person once, at their
//! `digest_at`, as one message with a numbered line and a button row per item; never twice
//! (another run, another replica), never hours late, at most eight items (the rest the next
//! evening).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use metnos_core::level::AutonomyLevel;
use metnos_core::principal::Principal;
use metnos_kit::clock::ManualClock;
use metnos_kit::config::TelosConfig;
use metnos_kit::testing::TestStore;
use metnos_planner::digest::EveningDigest;
use metnos_planner::filters::{Filters, PolicyAnswer};
use metnos_planner::scheduler::{Firing, Job, Kind, Task};
use metnos_planner::store::MIGRATIONS;
use metnos_proto::approval::v1 as approval;
use metnos_proto::vaglio::v1 as vaglio;
use tonic::Status;

/// What the digest asked of the approval service and the gateway.
#[derive(Debug, Default)]
struct Seen {
    pending: Vec<approval::CreatePendingRequest>,
    cards: Vec<(Principal, String, approval::Card)>,
}

#[derive(Debug, Default, Clone)]
struct Fake(Arc<Mutex<Seen>>);

#[tonic::async_trait]
impl Filters for Fake {
    async fn check(
        &self,
        _: AutonomyLevel,
        _: &Principal,
        _: &str,
        _: &str,
    ) -> Result<PolicyAnswer, Status> {
        Err(Status::unimplemented("not asked"))
    }
    async fn judge(&self, _: vaglio::JudgeRequest) -> Result<vaglio::Verdict, Status> {
        Err(Status::unimplemented("not asked"))
    }
    async fn create_pending(
        &self,
        request: approval::CreatePendingRequest,
    ) -> Result<approval::CreatePendingResponse, Status> {
        let mut seen = self.0.lock().unwrap();
        seen.pending.push(request);
        Ok(approval::CreatePendingResponse {
            approval: Some(approval::PendingApproval {
                token: format!("tok{}", seen.pending.len()),
                ..Default::default()
            }),
            card: None,
        })
    }
    async fn get_pending(&self, _: &str) -> Result<approval::PendingApproval, Status> {
        Err(Status::unimplemented("not asked"))
    }
    async fn wait_decision(&self, _: &str) -> Result<approval::PendingApproval, Status> {
        Err(Status::unimplemented("not asked"))
    }
    async fn cancel(&self, _: &str, _: &str) -> Result<(), Status> {
        Ok(())
    }
    async fn tell(&self, _: &Principal, _: &str, _: &str) -> Result<(), Status> {
        Ok(())
    }
    async fn show_card(
        &self,
        principal: &Principal,
        token: &str,
        card: approval::Card,
    ) -> Result<(), Status> {
        self.0
            .lock()
            .unwrap()
            .cards
            .push((principal.clone(), token.to_owned(), card));
        Ok(())
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
            level: String::new(),
            notify: "always".into(),
            state: "active".into(),
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

async fn the_digest_goes_once_at_its_time_eight_items_at_most(test: TestStore) {
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
    queue(&db, 11, rome("2026-11-26T14:00")).await;
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
        assert_eq!(card.lines[0], "Evening digest — 8 proposal(s):");
        assert_eq!(card.lines.len(), 9);
        assert!(
            card.lines[1].starts_with("1. You approved fs:write in ~/f0/*"),
            "{:?}",
            card.lines
        );
        assert_eq!(card.buttons.len(), 8, "one row per item");
        let row = &card.buttons[2].buttons;
        let texts: Vec<&str> = row.iter().map(|b| b.text.as_str()).collect();
        assert_eq!(texts, ["3 · Accept", "3 · Reject", "3 · Never again"]);
        assert_eq!(row[0].data, "confirm-always:tok3");
        assert_eq!(row[2].data, "never:tok3");
        // Each item's card request: the grant offer, its proposal named for the feedback.
        assert_eq!(seen.pending.len(), 8);
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

metnos_kit::store_suite!(the_digest_goes_once_at_its_time_eight_items_at_most);
