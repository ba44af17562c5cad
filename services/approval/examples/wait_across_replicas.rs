//! How soon a waiter on one approval replica hears a decision taken on another, both on one
//! PostgreSQL store: create and WaitDecision on replica A, Resolve on replica B, time from
//! B's answer to A's stream saying APPROVED.
//!
//! cargo run --release -p metnos-approval --example wait_across_replicas -- --postgres URL [--requests N]

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

fn main() {
    let requests: usize = flag("--requests").map_or(300, |v| v.parse().expect("a number"));
    let postgres = flag("--postgres").expect("--postgres URL: replicas share a PostgreSQL store");
    let data = tempfile::tempdir().unwrap();
    let mut config = metnos_kit::testing::config(data.path());
    config.approval.store = postgres;
    let planner = Tls::load(&config, Identity::Planner).unwrap();
    let gateway = Tls::load(&config, Identity::Gateway).unwrap();
    let replica = || {
        let config = config.clone();
        spawn_on_loopback(ServiceName::Approval, move |listener, shutdown| {
            metnos_approval::serve(config, listener, shutdown)
        })
        .unwrap()
    };
    let (url_a, _a) = replica();
    let (url_b, _b) = replica();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let on_a = metnos_kit::client::channel(&planner, Identity::Approval, &url_a).unwrap();
        let on_b = metnos_kit::client::channel(&gateway, Identity::Approval, &url_b).unwrap();
        let mut a = ApprovalServiceClient::new(on_a);
        let mut b = ApprovalServiceClient::new(on_b);
        let principal = Principal {
            channel: "telegram".into(),
            sender_id: "roberto".into(),
        };
        let create = pb::CreatePendingRequest {
            requester: Some(principal.clone()),
            request: Some(pb::ApprovalRequest {
                action_verb: "write".into(),
                target_summary: "~/notes.txt".into(),
                capability_class: "fs_write:~/notes.txt".into(),
                reversibility: pb::Reversibility::Reversible as i32,
                language: Language::English as i32,
                ..Default::default()
            }),
            capability: "fs:write".into(),
            target: "~/notes.txt".into(),
            executor: "fs_write".into(),
            args_json: r#"{"path":"~/notes.txt","content":"x"}"#.into(),
            ..Default::default()
        };
        for _ in 0..500 {
            if a.create_pending(create.clone()).await.is_ok()
                && b.list_pending(pb::ListPendingRequest {
                    requester: Some(principal.clone()),
                    ..Default::default()
                })
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut heard = Histogram::<u64>::new(3).unwrap();
        for _ in 0..requests {
            let token = a
                .create_pending(create.clone())
                .await
                .unwrap()
                .into_inner()
                .approval
                .unwrap()
                .token;
            let mut stream = a
                .wait_decision(pb::WaitDecisionRequest {
                    token: token.clone(),
                })
                .await
                .unwrap()
                .into_inner();
            let first = stream.message().await.unwrap().unwrap();
            assert_eq!(
                first.approval.unwrap().status,
                pb::ApprovalStatus::Pending as i32
            );
            b.resolve(pb::ResolveRequest {
                token,
                decision: pb::Decision::Approve as i32,
                decider: Some(principal.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
            let decided = Instant::now();
            let next = stream.message().await.unwrap().unwrap();
            heard.record(decided.elapsed().as_nanos() as u64).unwrap();
            assert_eq!(
                next.approval.unwrap().status,
                pb::ApprovalStatus::Approved as i32
            );
        }
        let ms = |q: f64| heard.value_at_quantile(q) as f64 / 1e6;
        println!(
            "decision on B heard on A  n={} p50={:.1}ms p90={:.1}ms p99={:.1}ms max={:.1}ms",
            heard.len(),
            ms(0.5),
            ms(0.9),
            ms(0.99),
            heard.max() as f64 / 1e6
        );
    });
}
