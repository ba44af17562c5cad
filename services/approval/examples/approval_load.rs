//! Load driver for the approval service: create + resolve round trips over gRPC on
//! loopback, against a SQLite or a PostgreSQL store.
//!
//! cargo run --release -p metnos-approval --example approval_load -- [--requests N] [--concurrency C] [--postgres URL]
//!
//! Without --postgres the store is a SQLite file in a temporary directory.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use metnos_kit::ServiceName;
use metnos_kit::runtime::spawn_on_loopback;
use metnos_kit::tls::{Identity, Tls};
use metnos_proto::approval::v1 as pb;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::common::v1::{Language, Principal};

fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn number(name: &str, default: usize) -> usize {
    flag(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} takes a number"))
    })
}

fn report(label: &str, h: &Histogram<u64>, elapsed: Duration, ops: u64) {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "{label:<22} n={:<6} p50={:>7.1}µs p90={:>7.1}µs p99={:>7.1}µs max={:>8.1}µs  {:>7.0}/s",
        h.len(),
        us(0.5),
        us(0.9),
        us(0.99),
        h.max() as f64 / 1000.0,
        ops as f64 / elapsed.as_secs_f64()
    );
}

fn main() {
    let requests = number("--requests", 5_000);
    let concurrency = number("--concurrency", 1).max(1);
    let data = tempfile::tempdir().unwrap();
    let mut config = metnos_kit::testing::config(data.path());
    let planner = Tls::load(&config, Identity::Planner).unwrap();
    let gateway = Tls::load(&config, Identity::Gateway).unwrap();
    config.approval.store = match flag("--postgres") {
        Some(url) => url,
        None => format!("sqlite:{}", data.path().join("approval.db").display()),
    };
    let backend = if config.approval.store.starts_with("postgres") {
        "postgres"
    } else {
        "sqlite"
    };
    // No policy service: these requests concede no territory.
    let (url, server) = spawn_on_loopback(ServiceName::Approval, move |listener, shutdown| {
        metnos_approval::serve(config, listener, shutdown)
    })
    .unwrap();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // Requests come from the planner, decisions from the gateway (Telegram people).
        let channel = metnos_kit::client::channel(&planner, Identity::Approval, &url).unwrap();
        let decider = metnos_kit::client::channel(&gateway, Identity::Approval, &url).unwrap();
        let principal = Principal {
            channel: "telegram".into(),
            sender_id: "roberto".into(),
        };
        let create = pb::CreatePendingRequest {
            requester: Some(principal.clone()),
            request: Some(pb::ApprovalRequest {
                action_verb: "download".into(),
                target_summary: "report.pdf from drive.google.com -> ~/downloads/ (~2.4 MB)".into(),
                capability_class: "fs_write:~/downloads/**".into(),
                reversibility: pb::Reversibility::Reversible as i32,
                territory_concession: pb::TerritoryConcession::None as i32,
                language: Language::English as i32,
                ..Default::default()
            }),
            capability: "fs:write".into(),
            target: "~/downloads/report.pdf".into(),
            executor: "fs_write".into(),
            args_json: r#"{"path":"~/downloads/report.pdf","content":"x"}"#.into(),
            ..Default::default()
        };
        // Wait for the server, then warm up.
        let mut warm = ApprovalServiceClient::new(channel.clone());
        let mut ready = false;
        for _ in 0..250 {
            // Any answer but UNAVAILABLE: it serves (the planner may not list requests).
            let asked = warm
                .get_pending(pb::GetPendingRequest {
                    token: "0".repeat(32),
                })
                .await;
            if asked
                .as_ref()
                .map_or_else(|s| s.code() != tonic::Code::Unavailable, |_| true)
            {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(ready, "the approval service did not start");
        let started = Instant::now();
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let mut client = ApprovalServiceClient::new(channel.clone());
                let mut deciding = ApprovalServiceClient::new(decider.clone());
                let create = create.clone();
                let principal = principal.clone();
                tokio::spawn(async move {
                    let mut creates = Histogram::<u64>::new(3).unwrap();
                    let mut resolves = Histogram::<u64>::new(3).unwrap();
                    for _ in 0..requests / concurrency {
                        let t = Instant::now();
                        let token = client
                            .create_pending(create.clone())
                            .await
                            .unwrap()
                            .into_inner()
                            .approval
                            .unwrap()
                            .token;
                        creates.record(t.elapsed().as_nanos() as u64).unwrap();
                        let t = Instant::now();
                        deciding
                            .resolve(pb::ResolveRequest {
                                token,
                                decision: pb::Decision::Approve as i32,
                                decider: Some(principal.clone()),
                                ..Default::default()
                            })
                            .await
                            .unwrap();
                        resolves.record(t.elapsed().as_nanos() as u64).unwrap();
                    }
                    (creates, resolves)
                })
            })
            .collect();
        let mut creates = Histogram::<u64>::new(3).unwrap();
        let mut resolves = Histogram::<u64>::new(3).unwrap();
        for task in tasks {
            let (c, r) = task.await.unwrap();
            creates.add(c).unwrap();
            resolves.add(r).unwrap();
        }
        let elapsed = started.elapsed();
        println!("{backend}, {requests} create+resolve pairs, concurrency {concurrency}");
        report("create", &creates, elapsed, creates.len());
        report("resolve", &resolves, elapsed, resolves.len());
        println!(
            "pairs/s: {:.0}",
            creates.len() as f64 / elapsed.as_secs_f64()
        );
    });
    runtime.block_on(server.stop()).unwrap();
}
