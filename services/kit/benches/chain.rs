//! The hash-chained logs (issue 23): what chaining costs a log line, and a verify walk.
//!
//! `cargo bench -p metnos-kit --bench chain`
//!
//! - `chain/append/turn_record`: one turn-log-sized record (≈1 KB of keys and decisions)
//!   appended to a day's file that holds 1 000 lines: the folder's lock, the last line read
//!   back from the file, the line hashed and written, `HEAD` replaced.
//! - `chain/append/plain_write`: the same line appended as before the chain (open, append),
//!   for comparison.
//! - `chain/verify/10k_lines`: `metnos audit verify`'s walk of a 10 000-line file.

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::io::Write;

fn record(n: usize) -> Value {
    json!({
        "turn_id": format!("{n:032x}"),
        "principal": "telegram:4242",
        "level": "Supervised",
        "tier": "fast",
        "model": "qwen3:8b",
        "final_kind": "answer",
        "steps": (0..4).map(|s| json!({
            "step": s,
            "executor": "fs_read",
            "arg_keys": ["path", "tail_bytes"],
            "policy": "allowed",
            "policy_reason": "Supervised x fs:read = allowed",
            "verdict": {"approved": true, "score": 0.85, "reason": "intent matches executor; non-critical executor"},
            "labels": ["file:~/notes/diary.md"],
            "duration_ms": 12,
        })).collect::<Vec<_>>(),
        "tokens": {"prompt": 1234, "completion": 56},
        "latency_ms": 842,
    })
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("chain");
    let dir = tempfile::tempdir().unwrap();
    let file = "2026-11-26.jsonl";
    for n in 0..1000 {
        metnos_kit::chain::append(dir.path(), file, &[record(n)]).unwrap();
    }
    let mut n = 1000;
    group.bench_function("append/turn_record", |b| {
        b.iter(|| {
            n += 1;
            metnos_kit::chain::append(dir.path(), file, &[record(n)]).unwrap()
        })
    });
    let plain = tempfile::tempdir().unwrap();
    group.bench_function("append/plain_write", |b| {
        b.iter(|| {
            n += 1;
            let mut out = metnos_kit::datadir::file_options()
                .create(true)
                .append(true)
                .open(plain.path().join(file))
                .unwrap();
            writeln!(out, "{}", record(n)).unwrap();
        })
    });
    let big = tempfile::tempdir().unwrap();
    let records: Vec<Value> = (0..10_000).map(record).collect();
    metnos_kit::chain::append(big.path(), file, &records).unwrap();
    group.sample_size(20);
    group.bench_function("verify/10k_lines", |b| {
        b.iter(|| {
            let report = metnos_kit::chain::verify(big.path(), None, &|_| false).unwrap();
            assert_eq!(report.broken, None);
            report.lines
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
