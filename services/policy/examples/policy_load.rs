//! Load driver for the policy service: latency percentiles of the effective outcome
//! in-process and over gRPC on loopback, with N grants in a SQLite store.
//!
//! cargo run --release -p metnos-policy --example policy_load -- --grants 1000000
//!
//! Flags: --grants N (1000), --requests R (20000), --concurrency C (1 = latency, more =
//! throughput).

#[path = "../benches/fixture.rs"]
mod fixture;

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use metnos_core::level::AutonomyLevel;
use metnos_kit::ServiceName;
use metnos_kit::client;
use metnos_kit::runtime::spawn_on_loopback;
use metnos_kit::tls::{Identity, Tls};
use metnos_policy::service::Policy;
use metnos_proto::common::v1::Principal;
use metnos_proto::policy::v1::CheckRequest;
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;

fn flag(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, got {v}"))
        })
        .unwrap_or(default)
}

fn report(label: &str, histogram: &Histogram<u64>, elapsed: Duration) {
    let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "{label:<28} n={:<7} p50={:>7.1}µs p90={:>7.1}µs p99={:>7.1}µs max={:>8.1}µs  {:>8.0} checks/s",
        histogram.len(),
        us(0.50),
        us(0.90),
        us(0.99),
        histogram.max() as f64 / 1000.0,
        histogram.len() as f64 / elapsed.as_secs_f64(),
    );
}

fn main() {
    let grants = flag("--grants", 1_000);
    let requests = flag("--requests", 20_000);
    let concurrency = flag("--concurrency", 1).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();

    let setup = Instant::now();
    let f = runtime.block_on(fixture::fixture(grants));
    println!(
        "store with {grants} grants ready in {:.1} s",
        setup.elapsed().as_secs_f64()
    );

    // In-process: the service core, no gRPC; with the grant cache (SQLite, the default)
    // and without it (every check asks the store, as replicas sharing PostgreSQL do).
    let uncached = Policy::with_cache(f.db.clone(), fixture::HOME.into(), false);
    let cases = [
        ("in-process, cached, grant", f.policy.as_ref(), &f.hit),
        ("in-process, cached, no grant", f.policy.as_ref(), &f.miss),
        ("in-process, store, grant", &uncached, &f.hit),
        ("in-process, store, no grant", &uncached, &f.miss),
    ];
    for (label, policy, target) in cases {
        let check = || {
            policy.check(
                AutonomyLevel::Supervised,
                "fs:write",
                Some(f.principal.clone()),
                target,
            )
        };
        let mut histogram = Histogram::<u64>::new(3).unwrap();
        let started = runtime.block_on(async {
            for _ in 0..1_000 {
                check().await.unwrap();
            }
            let started = Instant::now();
            for _ in 0..requests {
                let t = Instant::now();
                let d = check().await.unwrap();
                histogram.record(t.elapsed().as_nanos() as u64).unwrap();
                assert_eq!(d.grant_id.is_some(), target == &f.hit);
            }
            started
        });
        report(label, &histogram, started.elapsed());
    }

    // Over gRPC: the real server on its own runtime, clients on this one. It owns the
    // store now.
    runtime.block_on(f.db.close());
    let data = tempfile::tempdir().unwrap();
    let mut config = metnos_kit::Config {
        data_dir: data.path().to_path_buf(),
        ..metnos_kit::Config::default()
    };
    config.runtime.user_home = fixture::HOME.into();
    config.policy.store = format!("sqlite:{}", fixture::store_path(f.dir.path()).display());
    config.tls.dir = data.path().join("pki");
    metnos_kit::tls::init(&config.tls.dir, false).unwrap();
    // The driver asks as the planner does.
    let planner = Tls::load(&config, Identity::Planner).unwrap();
    let (url, server) = spawn_on_loopback(ServiceName::Policy, move |listener, shutdown| {
        metnos_policy::serve(config, listener, shutdown)
    })
    .unwrap();

    let request = CheckRequest {
        level: AutonomyLevel::Supervised.to_wire(),
        capability: "fs:write".to_owned(),
        principal: Some(Principal {
            channel: f.principal.channel().to_owned(),
            sender_id: f.principal.sender_id().to_owned(),
        }),
        target: f.hit.clone(),
    };
    let (histogram, elapsed) = runtime.block_on(async {
        let channel = client::channel(&planner, Identity::Policy, &url).unwrap();
        let mut warm = PolicyServiceClient::new(channel.clone());
        for _ in 0..200 {
            loop {
                match warm.check(request.clone()).await {
                    Ok(r) => {
                        assert!(r.into_inner().grant_id.is_some());
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }
        let started = Instant::now();
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let mut client = PolicyServiceClient::new(channel.clone());
                let request = request.clone();
                tokio::spawn(async move {
                    let mut histogram = Histogram::<u64>::new(3).unwrap();
                    for _ in 0..requests / concurrency {
                        let t = Instant::now();
                        client.check(request.clone()).await.unwrap();
                        histogram.record(t.elapsed().as_nanos() as u64).unwrap();
                    }
                    histogram
                })
            })
            .collect();
        let mut total = Histogram::<u64>::new(3).unwrap();
        for task in tasks {
            total.add(task.await.unwrap()).unwrap();
        }
        (total, started.elapsed())
    });
    report(
        &format!("gRPC loopback, c={concurrency}"),
        &histogram,
        elapsed,
    );
    runtime.block_on(server.stop()).unwrap();
}
