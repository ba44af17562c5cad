//! The vaglio's memory under a flood of huge intents (issue 18, F6): the real
//! `metnos-vaglio` binary in its own process, C clients each sending Judge calls with an
//! intent of B bytes for S seconds; the server's resident memory is sampled every 100 ms
//! from /proc and its peak (VmHWM) reported at the end. Then the server is killed (-9) and
//! the verdict log's lines counted against the verdicts answered (issue 41: every one).
//!
//! cargo build --release -p metnos-vaglio --bins --examples
//! target/release/examples/vaglio_flood [--clients 8] [--intent-bytes 3145728] [--seconds 30]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use metnos_kit::tls::{Identity, Tls};
use metnos_proto::vaglio::v1::JudgeRequest;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;

fn flag(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

/// A field of /proc/<pid>/status in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The verdict lines of a log folder (gap records left out).
fn logged_lines(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
        .map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("\"approved\""))
                .count() as u64
        })
        .sum()
}

fn main() {
    let clients = flag("--clients", 8);
    let intent_bytes = flag("--intent-bytes", 3 * 1024 * 1024);
    let seconds = flag("--seconds", 30) as u64;
    let data = tempfile::tempdir().unwrap();
    let config = metnos_kit::testing::config(data.path());
    let planner = Tls::load(&config, Identity::Planner).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let binary = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("metnos-vaglio");
    let mut server = Command::new(&binary)
        .env("METNOS_DATA_DIR", data.path())
        .env("METNOS_TLS__DIR", &config.tls.dir)
        .env("METNOS_VAGLIO__LISTEN", format!("127.0.0.1:{port}"))
        .env("METNOS_TELEMETRY__LOG", "error")
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (build it with --bins)", binary.display()));
    let pid = server.id();
    let url = format!("http://127.0.0.1:{port}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (calls, refused, peak_sampled) = runtime.block_on(async {
        let channel = metnos_kit::client::channel(&planner, Identity::Vaglio, &url).unwrap();
        let request = JudgeRequest {
            intent: "x".repeat(intent_bytes),
            executor: "fs_read".into(),
            args_json: r#"{"path":"/tmp/x"}"#.into(),
            context: None,
        };
        for _ in 0..500 {
            let mut probe = VaglioServiceClient::new(channel.clone());
            let small = JudgeRequest {
                intent: "read".into(),
                ..request.clone()
            };
            if probe.judge(small).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let idle = status_kib(pid, "VmRSS:");
        println!("idle RSS {:.1} MiB", idle as f64 / 1024.0);
        let until = Instant::now() + Duration::from_secs(seconds);
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let mut client = VaglioServiceClient::new(channel.clone());
                let request = request.clone();
                tokio::spawn(async move {
                    let (mut calls, mut refused) = (0u64, 0u64);
                    while Instant::now() < until {
                        calls += 1;
                        if client.judge(request.clone()).await.is_err() {
                            refused += 1;
                        }
                    }
                    (calls, refused)
                })
            })
            .collect();
        let mut peak = 0;
        while Instant::now() < until {
            peak = peak.max(status_kib(pid, "VmRSS:"));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (mut calls, mut refused) = (0, 0);
        for task in tasks {
            let (c, r) = task.await.unwrap();
            calls += c;
            refused += r;
        }
        (calls, refused, peak)
    });
    let hwm = status_kib(pid, "VmHWM:");
    let _ = server.kill();
    let _ = server.wait();
    // The probe's one verdict answered, and every call not refused.
    let answered = calls - refused + 1;
    let logged = logged_lines(&data.path().join(metnos_kit::datadir::VERDICTS_DIR));
    println!(
        "{clients} clients x {intent_bytes} B intents for {seconds} s: {calls} calls ({refused} refused), \
         {:.0} verdicts/s; RSS peak sampled {:.1} MiB, VmHWM {:.1} MiB; \
         verdicts answered {answered}, logged {logged} ({} missing)",
        calls as f64 / seconds as f64,
        peak_sampled as f64 / 1024.0,
        hwm as f64 / 1024.0,
        answered.saturating_sub(logged)
    );
}
