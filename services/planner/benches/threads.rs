//! Threads (issue 40's target: assembling a turn's history from a 1,000-exchange thread
//! ≤ 1 ms p50).
//!
//! `cargo bench -p metnos-planner --bench threads`
//!
//! - `threads/history/1000_exchanges`: SQLite, one person's thread of 1,000 exchanges (a
//!   message of about 120 bytes and an answer of about 600, two step lines each) among ten
//!   people's threads; what a turn sees within the default budget of 6,000 tokens, read
//!   newest first.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use metnos_core::Principal;
use metnos_kit::config::StoreSpec;
use metnos_planner::store::MIGRATIONS;
use metnos_planner::store::threads::{NewExchange, StepLine, ThreadStore};

fn exchange(turn: usize) -> NewExchange {
    let step = |executor: &str, label: &str| StepLine {
        executor: executor.to_owned(),
        ok: true,
        labels: vec![label.to_owned()],
        scratchpad_id: None,
    };
    NewExchange {
        turn_id: format!("turn-{turn:06}"),
        message: format!(
            "what did the report in ~/notes/day-{turn}.md say about the budget for next quarter?"
        ),
        answer: "The report says the budget grows by four percent, mostly for the new \
                 laboratory; travel stays flat and the hiring plan waits for March. "
            .repeat(4),
        labels: vec![format!("file:~/notes/day-{turn}.md")],
        steps: vec![
            step("fs_list", "file:~/notes"),
            step("fs_read", &format!("file:~/notes/day-{turn}.md")),
        ],
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ada = Principal::new("telegram", "4242").unwrap();
    let (threads, thread) = runtime.block_on(async {
        let spec = StoreSpec::Sqlite {
            path: dir.path().join("planner.db"),
        };
        let db = metnos_kit::store::open(&spec, "planner", &MIGRATIONS, Duration::from_secs(10))
            .await
            .unwrap();
        let threads = ThreadStore::new(db);
        // Nine other people's threads beside hers.
        for other in 0..9 {
            let person = Principal::new("telegram", &format!("10{other}")).unwrap();
            let theirs = threads.current(&person, 1_000, i64::MAX).await.unwrap();
            for turn in 0..100 {
                let mut e = exchange(turn);
                e.turn_id = format!("other-{other}-{turn}");
                threads
                    .append(&person, &theirs.id, &e, 1_000)
                    .await
                    .unwrap();
            }
        }
        let thread = threads.current(&ada, 1_000, i64::MAX).await.unwrap();
        for turn in 0..1_000 {
            threads
                .append(&ada, &thread.id, &exchange(turn), 2_000 + turn as i64)
                .await
                .unwrap();
        }
        (threads, thread)
    });
    let mut group = c.benchmark_group("threads/history");
    group.bench_function("1000_exchanges", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let seen = threads.history(&ada, &thread.id, 6_000).await.unwrap();
                assert!(seen.older_left_out && !seen.exchanges.is_empty());
                seen
            })
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
