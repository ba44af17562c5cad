//! The guard alone and a full rule-based verdict, in-process, on typical arguments (one to
//! three keys, short paths and commands) — the same cases the Python reference port in
//! benches/reference/ times, so `scripts/bench-vaglio.sh` can put them side by side.
//!
//! `cargo bench -p metnos-vaglio --bench verdict`

use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};
use metnos_vaglio::guard;
use metnos_vaglio::service::{JudgeKind, Proposal, Vaglio};
use serde_json::Value;

/// (intent, executor, args): the cases of benches/reference/cases.json.
fn cases() -> Vec<(String, String, Value)> {
    let text = include_str!("reference/cases.json");
    let cases: Vec<Value> = serde_json::from_str(text).unwrap();
    cases
        .into_iter()
        .map(|c| {
            (
                c["intent"].as_str().unwrap().to_owned(),
                c["executor"].as_str().unwrap().to_owned(),
                c["args"].clone(),
            )
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let cases = cases();
    // As the service does at start: the rule automata fully built.
    guard::warm_up();
    let home = guard::Home::new(Path::new("/home/roberto"));
    c.bench_function("guard/typical_case", |b| {
        let mut i = 0;
        b.iter(|| {
            let (_, executor, args) = &cases[i % cases.len()];
            i += 1;
            std::hint::black_box(guard::check_with(args, executor == "shell_exec", &home))
        })
    });

    // `PER_CASE=1`: each case of the guard on its own, to see which one costs.
    if std::env::var_os("PER_CASE").is_some() {
        for (n, (_, executor, args)) in cases.iter().enumerate() {
            c.bench_function(&format!("case/{n}"), |b| {
                b.iter(|| {
                    std::hint::black_box(guard::check_with(args, executor == "shell_exec", &home))
                })
            });
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let vaglio = runtime.block_on(async {
        Vaglio::new(
            PathBuf::from("/home/roberto"),
            0.30,
            JudgeKind::RuleBased,
            metnos_vaglio::log::VerdictLog::start(dir.path().to_path_buf()),
        )
    });
    let proposals: Vec<(Proposal, Value)> = cases
        .iter()
        .map(|(intent, executor, args)| {
            (
                Proposal {
                    intent: intent.clone(),
                    executor: executor.clone(),
                    args_json: args.to_string(),
                    ..Proposal::default()
                },
                args.clone(),
            )
        })
        .collect();
    c.bench_function("verdict/rule_based_full", |b| {
        let mut i = 0;
        b.iter(|| {
            let (proposal, args) = &proposals[i % proposals.len()];
            i += 1;
            std::hint::black_box(vaglio.rule_verdict(proposal, args))
        })
    });
    // The same cases as the planner sends them for a critical executor with an argument
    // carrying a file's data into a sink (issue 19): every judge signal is computed.
    let critical: Vec<(Proposal, Value)> = proposals
        .iter()
        .map(|(p, args)| {
            let mut p = p.clone();
            p.critical = Some(true);
            p.provenance = vec![metnos_vaglio::service::Provenance {
                arg: "content".into(),
                sources: vec!["file:~/Documents/report.txt".into()],
                sink: true,
            }];
            (p, args.clone())
        })
        .collect();
    c.bench_function("verdict/rule_based_full_critical_tainted", |b| {
        let mut i = 0;
        b.iter(|| {
            let (proposal, args) = &critical[i % critical.len()];
            i += 1;
            std::hint::black_box(vaglio.rule_verdict(proposal, args))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
