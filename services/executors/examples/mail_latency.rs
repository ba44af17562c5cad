//! The mail and calendar built-ins' cost on the real test servers (issue 44): `mail_search`
//! over a 10,000-message folder (Dovecot, implicit TLS, login, EXAMINE, UID SEARCH, headers
//! of the newest 20) and `calendar_list` over a year of events (Radicale over TLS: a REPORT
//! with a time range, 4 weekly series and 300 single events, recurrences expanded), each
//! a whole call through the runner: a fresh `metnos-mail` process, its TLS and its login.
//!
//! cargo build --release -p metnos-executors --bins
//! METNOS_TEST_DOVECOT=/usr/sbin/dovecot METNOS_TEST_MAIL_PYTHON=target/test-tools/mail-venv/bin/python3 \
//!   cargo run --release -p metnos-executors --example mail_latency -- --runs 200 [--messages N]
//! (BENCH_ALL_SEEN=1: every message read, in the maildir's cur/).

mod bench;
#[path = "../tests/mail/servers.rs"]
mod servers;

use std::sync::Arc;
use std::time::Instant;

use bench::report;
use metnos_core::accounts::Accounts;
use metnos_executors::{Catalog, Runner};
use serde_json::json;

async fn time(runner: &Runner, catalog: &Catalog, runs: u64, name: &str, args: serde_json::Value) {
    let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    let executor = args["executor"].as_str().unwrap().to_owned();
    let args = args["args"].clone();
    for i in 0..runs + 5 {
        let started = Instant::now();
        let observation = runner.check_and_run(catalog, &executor, &args).await;
        assert!(observation.ok, "{name}: {observation:?}");
        if i >= 5 {
            h.record(started.elapsed().as_micros() as u64).unwrap();
        }
    }
    report(name, &h);
}

/// Four weekly series, each its own calendar object (CalDAV keeps one UID per object).
fn weekly_series() -> Vec<(String, String)> {
    [("MO", 9), ("TU", 14), ("WE", 9), ("FR", 17)]
        .iter()
        .enumerate()
        .map(|(n, (day, hour))| {
            (
                format!("weekly-{n}"),
                format!(
                    "BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//bench//EN\nBEGIN:VEVENT\nUID:weekly-{n}\nDTSTAMP:20260101T000000Z\nDTSTART;TZID=Europe/Rome:20260105T{hour:02}0000\nDTEND;TZID=Europe/Rome:20260105T{hour:02}3000\nRRULE:FREQ=WEEKLY;BYDAY={day}\nSUMMARY:Weekly {day}\nEND:VEVENT\nEND:VCALENDAR\n"
                ),
            )
        })
        .collect()
}

fn main() {
    let mut runs = 200u64;
    let mut messages = 10_000usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).expect("--runs N"),
            "--messages" => {
                messages = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--messages N")
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let exe = std::env::current_exe().unwrap();
    let program = exe.parent().unwrap().parent().unwrap().join("metnos-exec");
    assert!(
        program.is_file(),
        "build the binaries first (cargo build --release -p metnos-executors --bins)"
    );
    let root = tempfile::tempdir().unwrap();
    let catalog_dir = root.path().join("catalog");
    std::fs::create_dir_all(root.path().join("home")).unwrap();
    let (_, trust) = bench::signed_builtins(&catalog_dir, &program);
    let catalog = Catalog::load(&catalog_dir, &trust);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mail = servers::Mail::start().await;
        let started = Instant::now();
        for n in 1..=messages {
            let from = format!("sender{}@example.net", n % 97);
            mail.deliver_quietly(
                n,
                &format!("From: {from}\nTo: me@example.org\nSubject: Message {n}\nDate: Mon, 2 Mar 2026 08:00:00 +0100\n\nBody of message {n}.\n"),
                // A third unread, left in the maildir's new/ (EXAMINE cannot move them).
                n % 3 != 0 || std::env::var_os("BENCH_ALL_SEEN").is_some(),
            );
        }
        mail.give_maildir_now();
        println!("{messages} messages delivered in {:.1} s", started.elapsed().as_secs_f64());
        let dav = servers::Dav::start().await;
        for (name, ics) in weekly_series() {
            dav.put(&name, &ics).await;
        }
        for n in 0..300 {
            let day = 1 + n % 28;
            let month = 1 + n % 12;
            dav.put(
                &format!("single-{n}"),
                &format!("BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//bench//EN\nBEGIN:VEVENT\nUID:single-{n}\nDTSTAMP:20260101T000000Z\nDTSTART:2026{month:02}{day:02}T{:02}0000Z\nDTEND:2026{month:02}{day:02}T{:02}3000Z\nSUMMARY:Event {n}\nEND:VEVENT\nEND:VCALENDAR\n", 8 + n % 10, 8 + n % 10),
            )
            .await;
        }
        let mut accounts = Accounts::default();
        accounts.mail.insert("home".into(), mail.account());
        accounts.calendar.insert("work".into(), dav.source());
        let runner = Runner {
            user_home: root.path().join("home"),
            accounts: Arc::new(accounts),
            prestart: true,
            ..Runner::default()
        };
        // The first search indexes the folder (Dovecot's own cost, once).
        let first = Instant::now();
        let found = runner
            .check_and_run(&catalog, "mail_search", &json!({"account": "home"}))
            .await;
        assert!(found.ok, "{found:?}");
        println!("first mail_search (Dovecot indexes the folder): {:.1} ms", first.elapsed().as_secs_f64() * 1e3);
        time(&runner, &catalog, runs, &format!("mail_search newest 20 of {messages}"), json!({"executor": "mail_search", "args": {"account": "home"}})).await;
        time(&runner, &catalog, runs, &format!("mail_search from+unseen of {messages}"), json!({"executor": "mail_search", "args": {"account": "home", "query": {"from": "sender7@", "unseen": true}}})).await;
        time(&runner, &catalog, runs, "calendar_list a year (4 weekly series, 300 single events)", json!({"executor": "calendar_list", "args": {"source": "work", "from": "2026-01-01", "to": "2027-01-01"}})).await;
    });
}
