//! The compose-only synthesis at 10 000 passages (issue 46: ≤ 1 ms p50, no model call):
//! `find_chain` over every passage, over what three hops reach, and the reading of those
//! hops from a SQLite store (`Mnestome::reachable`).
//!
//! `cargo bench -p metnos-planner --bench find_chain`

use criterion::{Criterion, criterion_group, criterion_main};
use metnos_planner::store::mnestome::{Mnestome, Passage, STRONG, Strength};
use metnos_planner::turn::prefilter::{Entry, Index};
use metnos_planner::turn::synt::{MAX_HOPS, find_chain};

const EXECUTORS: u64 = 2_000;
const PASSAGES: usize = 10_000;

fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// 10 000 passages among 2 000 executors, weights 0.30 to 1 (all strong: the search's
/// worst case), and the executors' entries (descriptions of shared words).
fn world() -> (Vec<Strength>, Vec<Entry>) {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut passages = Vec::with_capacity(PASSAGES);
    while passages.len() < PASSAGES {
        let from = xorshift(&mut seed) % EXECUTORS;
        let to = xorshift(&mut seed) % EXECUTORS;
        if from == to {
            continue;
        }
        passages.push(Strength {
            passage: Passage {
                from_executor: format!("exec_{from}"),
                from_field: "content".into(),
                to_executor: format!("exec_{to}"),
                to_arg: format!("arg{}", passages.len() % 3),
            },
            weight: 0.30 + (xorshift(&mut seed) % 70) as f64 / 100.0,
            uses: 3,
            successes: 3,
            last_used: 0,
        });
    }
    let entries = (0..EXECUTORS)
        .map(|i| Entry {
            name: format!("exec_{i}"),
            description: format!("does w{} with w{}", i % 97, i % 31),
            affinity: Vec::new(),
        })
        .collect();
    (passages, entries)
}

fn bench(c: &mut Criterion) {
    let (passages, entries) = world();
    let index = Index::new(&entries);
    let wanted = "w13_with_w7";
    assert!(find_chain(&passages, "exec_1", wanted, &index).is_some());
    c.bench_function("find_chain/10k_passages_all", |b| {
        b.iter(|| std::hint::black_box(find_chain(&passages, "exec_1", wanted, &index)))
    });

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mnestome = runtime.block_on(async {
        let spec = metnos_kit::config::StoreSpec::Sqlite {
            path: dir.path().join("planner.db"),
        };
        let db = metnos_kit::store::open(
            &spec,
            "planner",
            &metnos_planner::store::MIGRATIONS,
            std::time::Duration::from_secs(10),
        )
        .await
        .unwrap();
        let mnestome = Mnestome::new(db);
        for s in &passages {
            mnestome
                .learned(std::slice::from_ref(&s.passage), true, 0)
                .await
                .unwrap();
            mnestome
                .learned(std::slice::from_ref(&s.passage), true, 0)
                .await
                .unwrap();
        }
        mnestome
    });
    let near = runtime
        .block_on(mnestome.reachable("exec_1", MAX_HOPS, STRONG))
        .unwrap();
    println!(
        "three hops from exec_1 reach {} of {PASSAGES} passages",
        near.len()
    );
    c.bench_function(
        "find_chain/10k_passages_reached_in_sqlite_and_searched",
        |b| {
            b.iter(|| {
                let near = runtime
                    .block_on(mnestome.reachable("exec_1", MAX_HOPS, STRONG))
                    .unwrap();
                std::hint::black_box(find_chain(&near, "exec_1", wanted, &index))
            })
        },
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
