//! gRPC Judge latency on loopback: the real vaglio server on its own runtime, one client,
//! the typical cases of benches/reference/cases.json in turn.
//!
//! cargo run --release -p metnos-vaglio --example vaglio_load -- [--requests N]

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use metnos_kit::ServiceName;
use metnos_kit::runtime::spawn_on_loopback;
use metnos_proto::vaglio::v1::JudgeRequest;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;
use serde_json::Value;

fn main() {
    let requests: usize = std::env::args()
        .skip_while(|a| a != "--requests")
        .nth(1)
        .map_or(20_000, |v| v.parse().expect("--requests takes a number"));
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("../benches/reference/cases.json")).unwrap();
    let data = tempfile::tempdir().unwrap();
    let config = metnos_kit::testing::config(data.path());
    let planner = metnos_kit::tls::Tls::load(&config, metnos_kit::tls::Identity::Planner).unwrap();
    let (url, server) = spawn_on_loopback(ServiceName::Vaglio, move |listener, shutdown| {
        metnos_vaglio::serve(config, listener, shutdown)
    })
    .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = VaglioServiceClient::new(
            metnos_kit::client::channel(&planner, metnos_kit::tls::Identity::Vaglio, &url).unwrap(),
        );
        let request = |i: usize| {
            let case = &cases[i % cases.len()];
            JudgeRequest {
                intent: case["intent"].as_str().unwrap().to_owned(),
                executor: case["executor"].as_str().unwrap().to_owned(),
                args_json: case["args"].to_string(),
                context: None,
            }
        };
        for i in 0..1_000 {
            loop {
                match client.judge(request(i)).await {
                    Ok(_) => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }
        let mut histogram = Histogram::<u64>::new(3).unwrap();
        let started = Instant::now();
        for i in 0..requests {
            let t = Instant::now();
            client.judge(request(i)).await.unwrap();
            histogram.record(t.elapsed().as_nanos() as u64).unwrap();
        }
        let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
        println!(
            "gRPC Judge, {requests} calls: p50={:.1}µs p90={:.1}µs p99={:.1}µs  {:.0} verdicts/s",
            us(0.5),
            us(0.9),
            us(0.99),
            requests as f64 / started.elapsed().as_secs_f64()
        );
    });
    runtime.block_on(server.stop()).unwrap();
}
