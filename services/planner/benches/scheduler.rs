//! The builtin scheduler (issue 22's targets: a tick with 10k schedules of which 100 are
//! due ≤ 20 ms; the no-model path of a deferred firing: 0 LLM calls, ≤ 1 ms).
//!
//! `cargo bench -p metnos-planner --bench scheduler`
//!
//! - `scheduler/tick/10k_schedules_100_due`: SQLite, 10 000 standing orders of which 100
//!   are due: the tick reads the due ones and claims them (a conditional UPDATE and a run
//!   row each, in one transaction) and starts their jobs; the jobs (doing nothing) and the
//!   recording of their ends are awaited outside the measured time.
//! - `scheduler/tick/deferred_in_window`: one standing order due inside its person's
//!   protected window: the tick defers it to the window's end (a store write, no job, no
//!   model); the bench counts the job's calls and fails if there is one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use metnos_kit::clock::ManualClock;
use metnos_kit::config::StoreSpec;
use metnos_kit::config::TelosConfig;
use metnos_planner::proactive::scheduler::{
    Done, Firing, Job, JobError, Kind, NewTask, Scheduler, TaskStore,
};
use metnos_planner::store::MIGRATIONS;

const NOW: i64 = 1_795_687_200_000; // 2026-11-26 10:00 UTC

#[derive(Debug, Default)]
struct Noop(AtomicUsize);

#[tonic::async_trait]
impl Job for Noop {
    async fn run(&self, _: &Firing) -> Result<Done, JobError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(Done::default())
    }
}

fn order(id: String) -> NewTask {
    NewTask {
        id,
        kind: Kind::Standing,
        name: "order".to_owned(),
        channel: "telegram".to_owned(),
        sender_id: "42".to_owned(),
        schedule: "every 15 minutes".to_owned(),
        query: "summarise ~/notes/today.md".to_owned(),
        level: Some(metnos_core::level::AutonomyLevel::Supervised),
        notify: metnos_planner::proactive::scheduler::Notify::Always,
    }
}

async fn reset(store: &TaskStore, prefix: &str, at: i64) {
    metnos_kit::on_db!(store.db(), pool => {
        sqlx::query("UPDATE tasks SET next_run_at = $1, due_at = $1, deferred = 0 WHERE id LIKE $2")
            .bind(at)
            .bind(format!("{prefix}%"))
            .execute(pool)
            .await
            .unwrap();
    });
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    clock.set(NOW);
    let job = Arc::new(Noop::default());
    let telos = TelosConfig {
        time_zone: "UTC".to_owned(),
        protected_windows: vec!["23:00-07:00".to_owned()],
        ..TelosConfig::default()
    };
    let scheduler = runtime.block_on(async {
        let spec = StoreSpec::Sqlite {
            path: dir.path().join("planner.db"),
        };
        let db = metnos_kit::store::open(&spec, "planner", &MIGRATIONS, Duration::from_secs(10))
            .await
            .unwrap();
        let store = TaskStore::new(db);
        for i in 0..10_000 {
            // 9 900 due in a month, 100 due now.
            let id = if i < 100 {
                format!("due-{i:05}")
            } else {
                format!("later-{i:05}")
            };
            let first = if i < 100 {
                NOW - 1000
            } else {
                NOW + 30 * 86_400_000
            };
            store
                .insert(&order(id), first, NOW - 3_600_000)
                .await
                .unwrap();
        }
        Scheduler::new(store, Arc::new(clock.clone()), "bench", telos)
            .with_standing(job.clone() as Arc<dyn Job>)
    });
    let mut group = c.benchmark_group("scheduler/tick");
    // A new minute for every tick measured (a run is one per task and slot).
    let mut minute = 0_i64;
    group.bench_function("10k_schedules_100_due", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    // Every iteration is a new minute with the same 100 due.
                    minute += 1;
                    let now = NOW + minute * 60_000;
                    clock.set(now);
                    reset(&scheduler.store, "due-", now - 1000).await;
                    let started = Instant::now();
                    let tick = scheduler.tick().await;
                    spent += started.elapsed();
                    assert_eq!(tick.fired.len(), 100, "minute {minute}");
                    // The jobs and their ends recorded, outside the tick.
                    tick.finished().await;
                }
                spent
            })
        });
    });
    // 03:00 UTC, inside the night window.
    let mut night = NOW - 7 * 3_600_000;
    let before = job.0.load(Ordering::Relaxed);
    group.bench_function("deferred_in_window", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    night += 1;
                    clock.set(night);
                    reset(&scheduler.store, "due-00000", night - 1000).await;
                    let started = Instant::now();
                    let tick = scheduler.tick().await;
                    spent += started.elapsed();
                    assert_eq!(tick.deferred.len(), 1);
                    assert!(tick.fired.is_empty());
                }
                spent
            })
        });
    });
    assert_eq!(
        job.0.load(Ordering::Relaxed),
        before,
        "a deferred firing ran its job"
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
