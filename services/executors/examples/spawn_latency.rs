//! Spawn-to-observation latency of `time_now`, `fs_read` (a small file) and `shell_exec`
//! (`echo hi` in its full sandbox: namespaces, limits, Landlock, a fresh home), through the
//! runner with the digest check, as the planner runs them; beside them, a bare spawn of
//! `/bin/echo hi` (fork, exec, wait: no runner, no sandbox). Also the cost of hashing the
//! program cold (what a changed or never-seen program costs once).
//!
//! Each executor twice: started at the call (`executors.prestart = false`), and started
//! ahead (`prestart = true`: the call hands its input to a process, and `shell_exec`'s box,
//! started when the previous run ended). Started ahead, calls come `--pause-ms` apart (as a
//! turn's calls do, an LLM call between them), so the next process is ready; the pause is
//! not timed.
//!
//! cargo build --release -p metnos-executors --bins
//! cargo run --release -p metnos-executors --example spawn_latency -- --runs 2000

mod bench;

use bench::report;
use std::path::PathBuf;
use std::time::Instant;

use metnos_executors::{Catalog, Runner, ShellSettings};
use serde_json::json;

fn main() {
    let mut runs = 2000u64;
    let mut pause_ms = 20u64;
    let mut program: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).expect("--runs N"),
            "--program" => program = args.next().map(PathBuf::from),
            "--pause-ms" => {
                pause_ms = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--pause-ms N")
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let program = program.unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap();
        exe.parent().unwrap().parent().unwrap().join("metnos-exec")
    });
    assert!(
        program.is_file(),
        "{} is not built (cargo build --release -p metnos-executors --bins)",
        program.display()
    );
    let size = std::fs::metadata(&program).unwrap().len();

    let root = tempfile::tempdir().unwrap();
    let catalog_dir = root.path().join("catalog");
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("note.txt"), "buy milk\n".repeat(20)).unwrap();
    let (_, trust) = bench::signed_builtins(&catalog_dir, &program);
    let catalog = Catalog::load(&catalog_dir, &trust);
    assert!(catalog.refused().is_empty(), "{:?}", catalog.refused());
    let runner = Runner {
        user_home: home.clone(),
        shell: ShellSettings {
            allow: vec!["echo".to_owned()],
            workspace: root.path().join("workspace"),
            cpu_seconds: 10,
            memory_mb: 1024,
            file_size_mb: 64,
            processes: 64,
            allow_unsandboxed: false,
            readable: Vec::new(),
        },
        ..Runner::default()
    };
    let probe = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(runner.check_shell_sandbox(&catalog));
    println!(
        "shell sandbox: {}",
        probe
            .metadata
            .as_ref()
            .and_then(|m| m.get("sandbox"))
            .map(|s| s.to_string())
            .unwrap_or_else(|| format!("{probe:?}"))
    );

    let cold = {
        let started = Instant::now();
        let n = 20;
        for _ in 0..n {
            metnos_executors::digest::sha256_file(&program).unwrap();
        }
        started.elapsed() / n
    };
    println!(
        "program {} ({:.1} MB): cold sha256 {:.2} ms (paid once per program change)",
        program.display(),
        size as f64 / 1e6,
        cold.as_secs_f64() * 1e3
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut bare = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    for i in 0..runs + 20 {
        let started = Instant::now();
        let out = std::process::Command::new("/bin/echo")
            .arg("hi")
            .output()
            .unwrap();
        if i >= 20 {
            bare.record(started.elapsed().as_micros() as u64).unwrap();
        }
        assert!(out.status.success());
    }
    report("bare spawn of /bin/echo", &bare);
    for prestart in [false, true] {
        let runner = Runner {
            prestart,
            ..runner.clone()
        };
        for (name, args) in [
            ("time_now", json!({"timezone": "Europe/Rome"})),
            ("fs_read", json!({"path": "~/note.txt"})),
            ("shell_exec", json!({"command": "echo hi"})),
        ] {
            let mut histogram = hdrhistogram::Histogram::<u64>::new(3).unwrap();
            runtime.block_on(async {
                // Warm-up, and the digest cache past its racy window.
                for _ in 0..20 {
                    assert!(runner.check_and_run(&catalog, name, &args).await.ok);
                }
                for _ in 0..runs {
                    if prestart {
                        tokio::time::sleep(std::time::Duration::from_millis(pause_ms)).await;
                    }
                    let started = Instant::now();
                    let observation = runner.check_and_run(&catalog, name, &args).await;
                    histogram
                        .record(started.elapsed().as_micros() as u64)
                        .unwrap();
                    assert!(observation.ok, "{observation:?}");
                }
            });
            let how = if prestart {
                format!(", started ahead ({pause_ms} ms between calls)")
            } else {
                String::new()
            };
            report(&format!("{name}{how}"), &histogram);
        }
    }
}
