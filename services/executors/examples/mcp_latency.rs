//! An MCP tool call's cost (issue 43): `mcp-server-time`'s `get_current_time` through the
//! runner (schema check, the server's pins, the pool, rmcp over stdio, the box), warm, beside
//! the same call on a bare connection to the same server started outside the box (the
//! server's own time and the protocol's), and beside the built-in `time_now`; and a
//! server's cold start in the box (spawn, box, Python's start, handshake, listing).
//!
//! cargo build --release -p metnos-executors --bins
//! cargo run --release -p metnos-executors --example mcp_latency -- \
//!     --server target/test-tools/mcp-venv/bin/mcp-server-time --runs 2000

mod bench;

use bench::report;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use metnos_executors::install::sign_dir;
use metnos_executors::mcp::admit;
use metnos_executors::mcp::connection::Connection;
use metnos_executors::mcp::pool::{self, Launch};
use metnos_executors::{Catalog, Runner, ShellSettings};
use serde_json::json;

fn histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::<u64>::new(3).unwrap()
}

/// `runs` calls of `call` (after 50 not timed), each timed.
async fn time<F, Fut>(runs: u64, name: &str, mut call: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut h = histogram();
    for i in 0..runs + 50 {
        let started = Instant::now();
        assert!(call().await, "{name} failed");
        if i >= 50 {
            h.record(started.elapsed().as_micros() as u64).unwrap();
        }
    }
    report(name, &h);
}

fn main() {
    let mut runs = 2000u64;
    let mut server: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).expect("--runs N"),
            "--server" => server = args.next().map(PathBuf::from),
            other => panic!("unknown argument {other}"),
        }
    }
    let server = std::path::absolute(server.expect("--server PATH (mcp-server-time)")).unwrap();
    let exe = std::env::current_exe().unwrap();
    let program = exe.parent().unwrap().parent().unwrap().join("metnos-exec");
    assert!(
        program.is_file(),
        "build the binaries first (cargo build --release -p metnos-executors --bins)"
    );

    let root = tempfile::tempdir().unwrap();
    let catalog_dir = root.path().join("catalog");
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (key, trust) = bench::signed_builtins(&catalog_dir, &program);
    let runner = Runner {
        user_home: home,
        mcp_dir: root.path().join("mcp"),
        shell: ShellSettings {
            workspace: root.path().join("workspace"),
            file_size_mb: 64,
            processes: 64,
            ..ShellSettings::default()
        },
        ..Runner::default()
    };
    let launch = Launch {
        server: "time".into(),
        program_sha256: metnos_executors::digest::sha256_file(&server).unwrap(),
        read: admit::default_read(&server),
        program: server.clone(),
        args: vec!["--local-timezone=Europe/Rome".into()],
        url: None,
        token_file: None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let catalog = Catalog::load(&catalog_dir, &trust);
        // Cold starts in the box.
        let mut cold = histogram();
        let mut tools = Vec::new();
        for _ in 0..10 {
            let started = Instant::now();
            let connection = pool::connect(&runner, &catalog, &launch).await.unwrap();
            cold.record(started.elapsed().as_micros() as u64).unwrap();
            tools = connection.tools.clone();
            connection.close();
        }
        report(
            "cold start in the box (spawn, box, handshake, tools/list)",
            &cold,
        );
        for tool in &tools {
            let manifest = admit::manifest_for(&launch, tool, &admit::propose(tool)).unwrap();
            admit::write(&catalog_dir, &manifest).unwrap();
        }
        sign_dir(&catalog_dir, &key, "bench", false).unwrap();
        let catalog = Catalog::load(&catalog_dir, &trust);
        assert!(catalog.refused().is_empty(), "{:?}", catalog.refused());

        let args = json!({"timezone": "Asia/Tokyo"});
        time(
            runs,
            "MCP get_current_time through the runner (boxed, warm)",
            || async {
                runner
                    .check_and_run(&catalog, "time__get_current_time", &args)
                    .await
                    .ok
            },
        )
        .await;
        let mut bare = tokio::process::Command::new(&server);
        bare.arg("--local-timezone=Europe/Rome");
        let direct = Connection::start(bare, Duration::from_secs(30), 1 << 20)
            .await
            .unwrap();
        time(
            runs,
            "the same call on a bare connection (no box, no runner)",
            || async {
                direct
                    .call("get_current_time", &args, Duration::from_secs(30), 1 << 20)
                    .await
                    .ok
            },
        )
        .await;
        time(runs, "built-in time_now through the runner", || async {
            runner.check_and_run(&catalog, "time_now", &args).await.ok
        })
        .await;
    });
}
