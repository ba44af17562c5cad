//! Load driver for the planner: one-step turns (`time_now`, then an answer) against a
//! zero-latency fake LLM, with policy, vaglio, approval and the planner each served on
//! loopback in this process and the real `metnos-exec` spawned for every step.
//!
//! Reports the control-plane overhead of a tool call — from StepProposed to the vaglio's
//! verdict as the client sees them: references, schema and scope, policy and vaglio over
//! gRPC, no LLM and no executor time — and whole turns per second.
//!
//! cargo build --release -p metnos-executors --bin metnos-exec
//! cargo run --release --example turn_load -- [--turns N] [--concurrency C] [--thread none|new|continue|both]
//!
//! `--thread`: each turn one-shot (none, the default), in a new thread of its person
//! (new: an empty history read, the exchange written), or going on with its person's
//! thread (continue: the newest exchanges within the budget read in, fenced); `both`
//! alternates one-shot turns and turns in a new thread in one run, and reports each
//! apart: the side-by-side under the same load and the same noise of the machine.

use std::num::NonZero;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use metnos_kit::ServiceName;
use metnos_kit::config::{LlmProvider, LlmTierConfig};
use metnos_kit::runtime::spawn_on_loopback;
use metnos_kit::tls::{Identity, Tls};
use metnos_llm::fake::{FakeLlm, Reply};
use metnos_proto::common::v1 as common;
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
use metnos_proto::planner::v1::turn_event::Event;
use serde_json::json;

fn number(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
}

/// The `--thread` option: `None` for `both` (turn `n` one-shot when even, in a new thread
/// when odd).
fn thread() -> Option<pb::Thread> {
    let args: Vec<String> = std::env::args().collect();
    match args
        .iter()
        .position(|a| a == "--thread")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
    {
        None | Some("none") => Some(pb::Thread::Unspecified),
        Some("new") => Some(pb::Thread::New),
        Some("continue") => Some(pb::Thread::Continue),
        Some("both") => None,
        Some(other) => panic!("--thread takes none, new, continue or both, not {other}"),
    }
}

/// CPU seconds (user and system) of this process and of its children waited for (the
/// executors), from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // utime, stime, cutime, cstime: fields 14 to 17 of proc(5), counted after the name.
    let ticks: u64 = fields[11..15]
        .iter()
        .map(|f| f.parse::<u64>().unwrap())
        .sum();
    ticks as f64 / 100.0
}

fn report(label: &str, h: &Histogram<u64>) {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "{label:<28} n={:<6} p50={:>8.1}µs p90={:>8.1}µs p99={:>8.1}µs max={:>9.1}µs",
        h.len(),
        us(0.5),
        us(0.9),
        us(0.99),
        h.max() as f64 / 1000.0
    );
}

fn main() {
    let turns = number("--turns", 500);
    let thread = thread();
    let concurrency = number("--concurrency", 1).max(1);
    let exe = std::env::current_exe().unwrap();
    let program = exe.parent().unwrap().parent().unwrap().join("metnos-exec");
    assert!(
        program.is_file(),
        "{} is not built (cargo build --release -p metnos-executors --bin metnos-exec)",
        program.display()
    );

    let data = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = runtime.block_on(FakeLlm::start());
    // A tool call first, the answer once the tool's result is there.
    fake.always(Reply::from_request(|request| {
        let last_is_tool = request["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m["role"] == "tool");
        if last_is_tool {
            Reply::Text("it is noon".into())
        } else {
            Reply::ToolCalls(vec![("time_now".into(), json!({"timezone": "UTC"}))])
        }
    }));

    let mut config = metnos_kit::testing::config(data.path());
    // The driver is the owner's CLI; its turns may run at Full.
    config.turns.cli_level = metnos_core::AutonomyLevel::Full;
    let owner = Tls::load(&config, Identity::Owner).unwrap();
    config.runtime.user_home = data.path().to_owned();
    config.telemetry.log = "error".into();
    config.runtime.llm.insert(
        "fast".into(),
        LlmTierConfig {
            provider: LlmProvider::Ollama,
            model: "fake".into(),
            base_url: fake.url().to_owned(),
            think: false,
            timeout_seconds: NonZero::new(30).unwrap(),
            api_key_env: String::new(),
            online: None,
        },
    );
    let catalog = data.path().join("executors");
    metnos_executors::install::install_builtins(&catalog, &program).unwrap();
    let key = metnos_executors::signing::generate().unwrap();
    metnos_executors::install::sign_dir(&catalog, &key, "bench", false).unwrap();
    config.executors.catalog_dir = catalog;
    config.executors.workspace = data.path().join("workspace");
    config.executors.trusted_keys.insert(
        "bench".into(),
        metnos_executors::signing::public_key_text(&key.verifying_key()),
    );
    config.turns.cap_same_executor = NonZero::new(1_000_000).unwrap();

    let mut threads = Vec::new();
    for service in [
        ServiceName::Policy,
        ServiceName::Vaglio,
        ServiceName::Approval,
    ] {
        let c = config.clone();
        let (url, thread) = spawn_on_loopback(service, move |listener, shutdown| async move {
            match service {
                ServiceName::Policy => metnos_policy::serve(c, listener, shutdown).await,
                ServiceName::Vaglio => metnos_vaglio::serve(c, listener, shutdown).await,
                _ => metnos_approval::serve(c, listener, shutdown).await,
            }
        })
        .unwrap();
        config.set_service_url(service, url);
        threads.push(thread);
    }
    let c = config.clone();
    let (planner_url, planner) = spawn_on_loopback(ServiceName::Planner, move |l, s| {
        metnos_planner::serve(c, l, s)
    })
    .unwrap();
    threads.push(planner);

    runtime.block_on(async move {
        // Let the services come up.
        let channel = metnos_kit::client::channel(&owner, Identity::Planner, &planner_url)
            .expect("a valid URL");
        let planner_name = ServiceName::Planner.grpc_name();
        while !metnos_kit::client::probe(channel.clone(), planner_name, Duration::from_secs(1))
            .await
            .is_serving()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut client = PlannerServiceClient::new(channel);
        let one_turn = move |mut client: PlannerServiceClient<
            metnos_kit::client::TracedChannel,
        >,
                             n: usize| async move {
            let thread = thread.unwrap_or(if n.is_multiple_of(2) {
                pb::Thread::Unspecified
            } else {
                pb::Thread::New
            });
            let request = pb::RunTurnRequest {
                principal: Some(common::Principal {
                    channel: "cli".into(),
                    sender_id: format!("bench{}", n % 8),
                }),
                level: common::AutonomyLevel::Full as i32,
                query: "what time is it".into(),
                language: common::Language::English as i32,
                mode: pb::Mode::Local as i32,
                forwarded: false,
                thread: thread as i32,
                thread_id: String::new(),
            };
            let started = Instant::now();
            let mut stream = client.run_turn(request).await.unwrap().into_inner();
            let (mut proposed, mut judged) = (None, None);
            while let Some(message) = stream.message().await.unwrap() {
                match message.event.and_then(|e| e.event) {
                    Some(Event::StepProposed(_)) => proposed = Some(Instant::now()),
                    Some(Event::Verdict(_)) => judged = Some(Instant::now()),
                    Some(Event::Finished(f)) => {
                        assert_eq!(f.kind, pb::FinalKind::Answer as i32, "{f:?}");
                        break;
                    }
                    _ => {}
                }
            }
            let overhead = judged.unwrap() - proposed.unwrap();
            (overhead, started.elapsed(), thread)
        };
        // Warm-up.
        for n in 0..20 {
            one_turn(client.clone(), n).await;
        }
        // Each client runs its turns one after another, independently of the others (in
        // lockstep batches, the faster client waited for the slower: a serial section of
        // the driver's own, issue 45).
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let cpu_before = cpu_seconds();
        let started = Instant::now();
        let clients: Vec<_> = (0..concurrency)
            .map(|_| {
                let (client, next) = (client.clone(), next.clone());
                tokio::spawn(async move {
                    let mut done = Vec::new();
                    loop {
                        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if n >= turns {
                            return done;
                        }
                        done.push(one_turn(client.clone(), n).await);
                    }
                })
            })
            .collect();
        let mut overhead = Histogram::<u64>::new(3).unwrap();
        let mut turn = Histogram::<u64>::new(3).unwrap();
        let (mut one_shot, mut threaded) = (turn.clone(), turn.clone());
        for client in clients {
            for (o, t, thread) in client.await.unwrap() {
                overhead.record(o.as_nanos() as u64).unwrap();
                turn.record(t.as_nanos() as u64).unwrap();
                match thread {
                    pb::Thread::Unspecified => &mut one_shot,
                    _ => &mut threaded,
                }
                .record(t.as_nanos() as u64)
                .unwrap();
            }
        }
        let elapsed = started.elapsed();
        report("client: proposed→verdict", &overhead);
        report("whole turn (2 LLM calls)", &turn);
        if thread.is_none() {
            report("  of which one-shot", &one_shot);
            report("  of which in a new thread", &threaded);
        }
        let cpu = cpu_seconds() - cpu_before;
        println!(
            "{:.1} turns/s with {concurrency} client(s), {turns} turns; CPU per turn {:.2} ms \
             (this process and its executors; {:.0} % of one core)",
            turns as f64 / elapsed.as_secs_f64(),
            cpu * 1000.0 / turns as f64,
            cpu * 100.0 / elapsed.as_secs_f64()
        );
        let _ = &mut client;
    });
    drop(threads);
    // The planner's own measure of each step's checks, from its turn log.
    let mut checks = Histogram::<u64>::new(3).unwrap();
    let mut policy = Histogram::<u64>::new(3).unwrap();
    let mut vaglio = Histogram::<u64>::new(3).unwrap();
    // The day files only (the chain's HEAD, ROOTS, DAYS and LOCK sit beside them).
    for entry in std::fs::read_dir(data.path().join("turns")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for line in text.lines() {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            for step in record["steps"].as_array().unwrap() {
                checks
                    .record(step["checks_us"].as_u64().unwrap() * 1000)
                    .unwrap();
                policy
                    .record(step["policy_us"].as_u64().unwrap() * 1000)
                    .unwrap();
                vaglio
                    .record(step["vaglio_us"].as_u64().unwrap() * 1000)
                    .unwrap();
            }
        }
    }
    report("control plane per tool call", &checks);
    report("  of which policy", &policy);
    report("  of which vaglio", &vaglio);
}
