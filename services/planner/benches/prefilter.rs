//! The pre-filter over a catalog of 10 000 executors: ranking a typical query and picking
//! the adaptive top K (target ≤ 100 µs); the same with the history boost (issue 46).
//!
//! `cargo bench -p metnos-planner --bench prefilter`

use criterion::{Criterion, criterion_group, criterion_main};
use metnos_planner::store::mnestome::{Passage, Shortcut, Strength};
use metnos_planner::turn::history::boosts;
use metnos_planner::turn::prefilter::{Entry, Index};

/// A deterministic catalog: names, descriptions and affinity words drawn from a
/// vocabulary of 4 000 words (Zipf-like: low word numbers are common).
fn catalog(n: usize) -> Vec<Entry> {
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut word = move || {
        let r = next() % 4000;
        // Squash towards small numbers: common words are shared by many manifests.
        format!("w{}", (r * r) / 4000)
    };
    (0..n)
        .map(|i| Entry {
            name: format!("exec_{i}"),
            description: (0..8).map(|_| word()).collect::<Vec<_>>().join(" "),
            affinity: (0..10).map(|_| word()).collect(),
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let entries = catalog(10_000);
    let index = Index::new(&entries);
    let queries = [
        "please w12 the w340 and w2100 to w77 today",
        "w3 w3000 w999",
        "leggi il file w5 e dimmi w1500",
    ];
    c.bench_function("prefilter/10k_select", |b| {
        let mut i = 0;
        b.iter(|| {
            let q = queries[i % queries.len()];
            i += 1;
            std::hint::black_box(index.select(q, 30))
        })
    });
    // The history boost (issue 46): the points of 20 strong passages from the previous
    // step's executor and of 10 shortcuts, computed and added, per ask.
    let passages: Vec<Strength> = (0..20)
        .map(|i| Strength {
            passage: Passage {
                from_executor: "exec_1".into(),
                from_field: "content".into(),
                to_executor: format!("exec_{}", i * 491 % 10_000),
                to_arg: "text".into(),
            },
            weight: 0.3 + f64::from(i) / 30.0,
            uses: 5,
            successes: 5,
            last_used: 0,
        })
        .collect();
    let shortcuts: Vec<Shortcut> = (0..10)
        .map(|i| Shortcut {
            name: format!("w{}_w{}", i * 7, i * 13),
            from_executor: format!("exec_{}", i * 17),
            chain: vec![format!("exec_{}", i * 19), format!("exec_{}", i * 23)],
            created_at: 0,
        })
        .collect();
    c.bench_function("prefilter/10k_select_with_history", |b| {
        let mut i = 0;
        b.iter(|| {
            let q = queries[i % queries.len()];
            i += 1;
            let boosts = boosts(Some("exec_1"), &passages, &shortcuts, q);
            let boosts: Vec<(&str, u32)> = boosts.iter().map(|(n, p)| (n.as_str(), *p)).collect();
            std::hint::black_box(index.select_boosted(q, 30, &boosts))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
