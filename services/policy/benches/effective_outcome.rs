//! The effective outcome in-process (no gRPC), with 1k, 100k and 1M grants in a SQLite
//! store: a grant that decides, a check no grant matches, and a table-only check.
//!
//! `cargo bench -p metnos-policy --bench effective_outcome`

mod fixture;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use metnos_core::level::AutonomyLevel;

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("effective_outcome");
    for n in [1_000usize, 100_000, 1_000_000] {
        let f = runtime.block_on(fixture::fixture(n));
        let check = |target: &str| {
            let decision = runtime
                .block_on(f.policy.check(
                    AutonomyLevel::Supervised,
                    "fs:write",
                    Some(f.principal.clone()),
                    target,
                ))
                .unwrap();
            std::hint::black_box(decision)
        };
        assert!(
            check(&f.hit).grant_id.is_some(),
            "the fixture's hit must be granted"
        );
        assert!(check(&f.miss).grant_id.is_none());
        group.bench_with_input(BenchmarkId::new("grant_decides", n), &n, |b, _| {
            b.iter(|| check(&f.hit))
        });
        group.bench_with_input(BenchmarkId::new("no_grant_matches", n), &n, |b, _| {
            b.iter(|| check(&f.miss))
        });
        group.bench_with_input(BenchmarkId::new("table_only", n), &n, |b, _| {
            b.iter(|| {
                runtime
                    .block_on(f.policy.check(
                        AutonomyLevel::Full,
                        "fs:write",
                        Some(f.principal.clone()),
                        &f.hit,
                    ))
                    .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
