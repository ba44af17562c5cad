//! The pre-filter over a catalog of 10 000 executors: ranking a typical query and picking
//! the adaptive top K (target ≤ 100 µs).
//!
//! `cargo bench -p metnos-planner --bench prefilter`

use criterion::{Criterion, criterion_group, criterion_main};
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
