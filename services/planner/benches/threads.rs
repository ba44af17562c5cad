//! Threads and memory (issue 40's targets: assembling a turn's history from a
//! 1,000-exchange thread ≤ 1 ms p50; `memory_search` ≤ 2 ms p50 at 10,000 entries of a
//! person and ≤ 10 ms at 100,000, SQLite).
//!
//! `cargo bench -p metnos-planner --bench threads`
//!
//! - `threads/history/1000_exchanges`: SQLite, one person's thread of 1,000 exchanges (a
//!   message of about 120 bytes and an answer of about 600, two step lines each) among ten
//!   people's threads; what a turn sees within the default budget of 6,000 tokens, read
//!   newest first (one page of 64).
//! - `threads/append/new_thread`: a turn's exchange written in a new thread of its person
//!   (`/new`), in the store above; eight people taking turns.
//! - `threads/end/one_shot` and `threads/end/new_thread`: a running turn's end written
//!   alone, and with its exchange in a new thread of its person (one transaction), in the
//!   same store: what a thread adds to the write a turn makes anyway.
//! - `memory/search/10000` and `…/100000`: SQLite, one person's memory of that many entries
//!   (eight words each from a vocabulary of 500, so each word is in about 1.6 % of them)
//!   beside another person's 10,000; a two-word search for the best five, each found
//!   entry marked used.

use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use metnos_core::Principal;
use metnos_kit::config::StoreSpec;
use metnos_kit::store::sql::{Finish, Statement};
use metnos_planner::store::threads::{Ending, Kept, NewExchange, StepLine, ThreadStore};
use metnos_planner::store::{Holder, MIGRATIONS, Store};

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
        forwarded: false,
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ada = Principal::new("telegram", "4242").unwrap();
    let (threads, thread, db) = runtime.block_on(async {
        let spec = StoreSpec::Sqlite {
            path: dir.path().join("planner.db"),
        };
        let db = metnos_kit::store::open(&spec, "planner", &MIGRATIONS, Duration::from_secs(10))
            .await
            .unwrap();
        let threads = ThreadStore::new(db.clone());
        // Nine other people's threads beside hers.
        for other in 0..9 {
            let person = Principal::new("telegram", &format!("10{other}")).unwrap();
            let theirs = threads.current(&person, 1_000, i64::MAX).await.unwrap();
            for turn in 0..100 {
                let mut e = exchange(turn);
                e.turn_id = format!("other-{other}-{turn}");
                threads.append(&theirs, &e, 1_000).await.unwrap();
            }
        }
        let thread = threads.current(&ada, 1_000, i64::MAX).await.unwrap();
        for turn in 0..1_000 {
            threads
                .append(&thread, &exchange(turn), 2_000 + turn as i64)
                .await
                .unwrap();
        }
        (threads, thread, db)
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
    // A turn's exchange written in a new thread of its person (`/new`: the thread opened
    // with it), in the same store.
    let mut group = c.benchmark_group("threads/append");
    let mut turn = 10_000usize;
    group.bench_function("new_thread", |b| {
        b.iter(|| {
            turn += 1;
            let person = Principal::new("cli", &format!("bench{}", turn % 8)).unwrap();
            runtime.block_on(async {
                let thread = threads.start_new(&person, 1_000_000 + turn as i64);
                let written = threads
                    .append(&thread, &exchange(turn), 1_000_000 + turn as i64)
                    .await
                    .unwrap();
                assert!(written.is_some());
            })
        });
    });
    group.finish();
    bench_end(
        c,
        &runtime,
        &threads,
        Store::with_holder(db, Holder::new("bench", 1 << 40)),
    );
}

/// A turn's end, alone and with its exchange in a new thread (see the module's doc).
fn bench_end(
    c: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    threads: &ThreadStore,
    store: Store,
) {
    // About what a one-step turn's record holds.
    let record = serde_json::json!({
        "turn_id": "t", "principal": "cli:bench", "level": "FULL", "mode": "local",
        "tiers": ["fast"], "models": ["fake"], "final_kind": "answer", "latency_ms": 7,
        "steps": [{"executor": "time_now", "ok": true, "checks_us": 700, "policy_us": 200,
                   "vaglio_us": 300, "labels": []}],
        "usage": {"prompt_tokens": 420, "completion_tokens": 30},
        "started_at": "2026-11-29T08:00:00Z", "ended_at": "2026-11-29T08:00:00Z",
    })
    .to_string();
    let mut group = c.benchmark_group("threads/end");
    let mut turn = 100_000usize;
    let running = |turn: &mut usize| {
        *turn += 1;
        let exchange = exchange(*turn);
        runtime
            .block_on(store.insert_turn(&exchange.turn_id, "cli", "bench", "{}", "{}", 1))
            .unwrap();
        (exchange, *turn)
    };
    group.bench_function("one_shot", |b| {
        b.iter_batched(
            || running(&mut turn),
            |(exchange, _)| {
                let held = runtime.block_on(store.finish(&exchange.turn_id, &record, 2));
                assert!(held.unwrap());
            },
            BatchSize::SmallInput,
        );
    });
    let ending = Ending {
        record: &record,
        run: &store.holder().run,
    };
    group.bench_function("new_thread", |b| {
        b.iter_batched(
            || running(&mut turn),
            |(exchange, n)| {
                let person = Principal::new("cli", &format!("end{}", n % 8)).unwrap();
                let thread = threads.start_new(&person, 2);
                let ended =
                    runtime.block_on(threads.append_ending(&thread, &exchange, 3, Some(&ending)));
                assert!(matches!(ended.unwrap(), (true, Kept::In(_))));
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

/// Entry `i` of a person's memory: eight words of a 500-word vocabulary.
fn entry(i: usize) -> String {
    let word = |k: usize| {
        format!(
            "w{}",
            (i.wrapping_mul(7919).wrapping_add(k * 104_729)) % 500
        )
    };
    format!(
        "note {i}: {}",
        (0..8).map(word).collect::<Vec<_>>().join(" ")
    )
}

fn memory_bench(c: &mut Criterion) {
    use metnos_planner::store::memories::MemoryStore;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("memory/search");
    for entries in [10_000usize, 100_000] {
        let dir = tempfile::tempdir().unwrap();
        let ada = Principal::new("telegram", "4242").unwrap();
        let bob = Principal::new("telegram", "4343").unwrap();
        let memories = runtime.block_on(async {
            let spec = StoreSpec::Sqlite {
                path: dir.path().join("planner.db"),
            };
            let db =
                metnos_kit::store::open(&spec, "planner", &MIGRATIONS, Duration::from_secs(10))
                    .await
                    .unwrap();
            // Written in one transaction (a save a time counts the person's entries each
            // time: fine at the default cap of 5,000, slow for setting up 110,000).
            let people = [(&bob, 10_000), (&ada, entries)];
            db.locked_tx("bench", async |tx| {
                for (person, n) in people {
                    for i in 0..n {
                        tx.execute(
                            Statement::new(
                                "INSERT INTO memories (id, channel, sender_id, text, labels, turn_id, saved_at, used_at) \
                                 VALUES ($1, $2, $3, $4, '[]', 't', 1, 1)",
                            )
                            .bind(format!("m-{}-{i}", person.sender_id()))
                            .bind(person.channel().to_owned())
                            .bind(person.sender_id().to_owned())
                            .bind(entry(i)),
                        )
                        .await?;
                    }
                }
                Ok::<_, sqlx::Error>(Finish::Commit(()))
            })
            .await
            .unwrap();
            // Indexed as a planner does entries it finds without words when it starts.
            let memories = MemoryStore::new(db, 1_000_000);
            assert_eq!(
                memories.index_missing().await.unwrap(),
                10_000 + entries as u64
            );
            memories
        });
        group.bench_function(entries.to_string(), |b| {
            b.iter(|| {
                runtime.block_on(async {
                    let found = memories.search(&ada, "w17 w242", 5, 2).await.unwrap();
                    assert_eq!(found.len(), 5);
                    found
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench, memory_bench);
criterion_main!(benches);
