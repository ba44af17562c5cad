//! `metnos audit verify` (issue 23): the turn log and the verdict log a running stack wrote
//! are hash-chained; an untouched store verifies, and an edited line, a removed line and a
//! swapped pair in either are each named (exit 1).

mod common;

use common::Sandbox;
use metnos_llm::fake::{FakeLlm, Reply};
use serde_json::json;

/// The one dated file of `dir`, its lines.
fn the_file(dir: &std::path::Path) -> (std::path::PathBuf, Vec<String>) {
    let files = metnos_kit::chain::files(dir).unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    let path = dir.join(&files[0]);
    let lines = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    (path, lines)
}

fn write(path: &std::path::Path, lines: &[String]) {
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[tokio::test]
async fn audit_verify_passes_an_untouched_store_and_names_each_kind_of_tampering() {
    let started_on = metnos_kit::time::rfc3339(metnos_kit::time::now_ms())[..10].to_owned();
    let llm = FakeLlm::start().await;
    let mut sandbox = Sandbox::new();
    sandbox.with_fake_llm(llm.url()).with_builtins();
    let up = sandbox.up().await;
    for _ in 0..3 {
        llm.push(Reply::ToolCalls(vec![(
            "time_now".to_owned(),
            json!({"timezone": "UTC"}),
        )]));
        llm.push(Reply::Text("noon".into()));
        let (status, _, stderr) = sandbox
            .run(&["ask", "--language", "en", "what time is it?"])
            .await;
        assert_eq!(status, 0, "{stderr}");
    }
    // One write approved on its card: the approval decisions' journal holds it.
    std::fs::create_dir_all(sandbox.dir.path().join("notes")).unwrap();
    llm.push(Reply::ToolCalls(vec![(
        "fs_write".to_owned(),
        json!({"path": "~/notes/a.txt", "content": "a"}),
    )]));
    llm.push(Reply::Text("written".into()));
    ask(&sandbox, "write a to ~/notes/a.txt", b"y\n").await;
    // A grant recorded and one revoked: two records of the grant store's changes.
    let (status, added, stderr) = sandbox
        .run(&[
            "grants",
            "add",
            "--channel",
            "telegram",
            "--sender",
            "42",
            "fs:write",
            "~/inv/*",
        ])
        .await;
    assert_eq!(status, 0, "{stderr}");
    let id = serde_json::from_str::<serde_json::Value>(added.trim()).unwrap()["id"]
        .as_i64()
        .unwrap()
        .to_string();
    let (status, _, stderr) = sandbox.run(&["grants", "revoke", &id]).await;
    assert_eq!(status, 0, "{stderr}");
    let (status, out, stderr) = sandbox.run(&["audit", "verify"]).await;
    assert_eq!(status, 0, "{out}{stderr}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line: {out}"))
            .to_owned()
    };
    assert!(
        line("approval decisions").ends_with("intact — 1 record(s)"),
        "{out}"
    );
    // Each chain written on today with something before its record: today's daily root,
    // the chain as the day's second record found it.
    let today = metnos_kit::time::rfc3339(metnos_kit::time::now_ms())[..10].to_owned();
    // (A run across midnight has a newer root: then only that there is one.)
    let root = if today == started_on {
        format!("; daily root {today}: seq 1, sha256 ")
    } else {
        "; daily root ".to_owned()
    };
    // A file log's root names the file holding its record too.
    let in_file = if today == started_on {
        format!("; daily root {today}: seq 1 in {today}.jsonl, sha256 ")
    } else {
        "; daily root ".to_owned()
    };
    for (name, count, root) in [
        ("grant changes", "intact — 2 record(s)", &root),
        ("turn log", "intact — 1 file(s), 4 record(s)", &in_file),
    ] {
        let line = line(name);
        assert!(line.contains(&format!("{count}{root}")), "{out}");
    }
    assert!(line("verdict log").contains("intact — 1 file(s)"), "{out}");
    // Records stay keys-only: the chain adds its two fields, no values.
    let (_, turns) = the_file(&sandbox.data_dir().join("turns"));
    let first: serde_json::Value = serde_json::from_str(&turns[0]).unwrap();
    assert_eq!(first["seq"], 1);
    assert_eq!(first["prev"], "genesis");
    assert!(
        !turns[0].contains("UTC"),
        "an argument value in the log: {}",
        turns[0]
    );

    for folder in ["turns", "vaglio"] {
        let dir = sandbox.data_dir().join(folder);
        let (path, lines) = the_file(&dir);
        assert!(lines.len() >= 3, "{folder}: {lines:?}");
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let verify = async || {
            let (status, out, _) = sandbox.run(&["audit", "verify"]).await;
            (status, out)
        };
        // Edited: the line after it no longer links to it.
        let mut edited = lines.clone();
        edited[0] = edited[0].replacen("\"seq\":1", "\"seq\":1,\"x\":0", 1);
        write(&path, &edited);
        let (status, out) = verify().await;
        assert_eq!(status, 1, "{out}");
        assert!(
            out.contains(&format!(
                "BROKEN — {name}, line 2: {name}, line 1 was edited"
            )),
            "{folder}: {out}"
        );
        // Removed.
        let mut removed = lines.clone();
        removed.remove(1);
        write(&path, &removed);
        let (status, out) = verify().await;
        assert_eq!(status, 1, "{out}");
        assert!(
            out.contains(&format!(
                "{name}, line 2: 1 record(s) before it were removed"
            )),
            "{folder}: {out}"
        );
        // Swapped.
        let mut swapped = lines.clone();
        swapped.swap(1, 2);
        write(&path, &swapped);
        let (status, out) = verify().await;
        assert_eq!(status, 1, "{out}");
        assert!(
            out.contains(&format!("{name}, line 2: records were reordered")),
            "{folder}: {out}"
        );
        // Issue 38: the whole log deleted, or emptied, while HEAD and the daily roots
        // still name it, read intact.
        std::fs::remove_file(&path).unwrap();
        let (status, out) = verify().await;
        assert_eq!(status, 1, "{folder}: {out}");
        assert!(out.contains("no record is left"), "{folder}: {out}");
        std::fs::write(&path, "").unwrap();
        let (status, out) = verify().await;
        assert_eq!(status, 1, "{folder}: {out}");
        assert!(out.contains("no record is left"), "{folder}: {out}");
        // Lines from before the chain prove nothing: NOT CHECKED (exit 3) unless accepted.
        let mut older = vec![r#"{"turn_id":"from-an-older-version"}"#.to_owned()];
        older.extend(lines.iter().cloned());
        write(&path, &older);
        let (status, out) = verify().await;
        assert_eq!(status, 3, "{folder}: {out}");
        assert!(
            out.contains("NOT CHECKED — 1 record(s) at its start were written before the chain"),
            "{folder}: {out}"
        );
        let (status, out, _) = sandbox.run(&["audit", "verify", "--allow-unchained"]).await;
        assert_eq!(status, 0, "{folder}: {out}");
        assert!(out.contains("accepted unchecked"), "{folder}: {out}");
        // Put back: intact again.
        write(&path, &lines);
        let (status, out) = verify().await;
        assert_eq!(status, 0, "{folder}: {out}");
    }
    // Issue 41: records answered but never written (the disk refused them) leave a gap
    // record. The chain is intact, and the gap is reported: no pass (exit 3).
    let verdicts = sandbox.data_dir().join("vaglio");
    let (path, _) = the_file(&verdicts);
    let mut gap = metnos_kit::chain::Gap::default();
    gap.add(
        2,
        "No space left on device (os error 28)",
        metnos_kit::time::now_ms(),
    );
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    metnos_kit::chain::append(&verdicts, &name, &[gap.record().unwrap()]).unwrap();
    let (status, out, _) = sandbox.run(&["audit", "verify"]).await;
    assert_eq!(status, 3, "{out}");
    assert!(
        out.contains("verdict log")
            && out.contains(
                "GAPS — the chain is intact, but 2 record(s) were answered and never written"
            ),
        "{out}"
    );
    // The approval decisions' journal, edited in its store: named too.
    let db = sandbox.data_dir().join("approval.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    sqlx::query("UPDATE decisions SET line = replace(line, '\"approved\"', '\"rejected\"')")
        .execute(&pool)
        .await
        .unwrap();
    let (status, out, _) = sandbox.run(&["audit", "verify"]).await;
    assert_eq!(status, 1, "{out}");
    assert!(
        out.contains("BROKEN — decisions, line 1: the head names another last record"),
        "{out}"
    );
    sqlx::query("DELETE FROM decisions")
        .execute(&pool)
        .await
        .unwrap();
    let (status, out, _) = sandbox.run(&["audit", "verify"]).await;
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("no record is left"), "{out}");

    let (status, _, stderr) = sandbox
        .run(&["audit", "verify", "--since", "yesterday"])
        .await;
    assert_eq!(status, 2);
    assert!(stderr.contains("YYYY-MM-DD"), "{stderr}");
    // The services stopped: their journals are not checked, and that is no pass (exit 3).
    up.interrupt().await;
    let (status, out, _) = sandbox.run(&["audit", "verify"]).await;
    assert_eq!(status, 3, "{out}");
    assert!(
        out.contains("grant changes") && out.contains("NOT CHECKED"),
        "{out}"
    );
}

/// Runs `metnos ask <query>` answering the card prompts with `input`.
async fn ask(sandbox: &Sandbox, query: &str, input: &[u8]) {
    let output = sandbox
        .run_with_input(&["ask", "--language", "en", query], input)
        .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Issue 23's what-if: the logged policy questions of past turns asked again at another
/// level, with the grants active now — a write that needed approval at Supervised would
/// have been allowed at Full and denied at ReadOnly; a write a grant allowed needs
/// approval again once that grant is revoked.
#[tokio::test]
async fn policy_replay_says_what_another_level_or_the_grants_now_would_have_changed() {
    let llm = FakeLlm::start().await;
    let mut sandbox = Sandbox::new();
    sandbox
        .with_fake_llm(llm.url())
        .with_builtins()
        .set("METNOS_TURNS__CLI_LEVEL", "Supervised");
    let _up = sandbox.up().await;
    for folder in ["notes", "granted"] {
        std::fs::create_dir_all(sandbox.dir.path().join(folder)).unwrap();
    }
    let write = |path: &str| {
        llm.push(Reply::ToolCalls(vec![(
            "fs_write".to_owned(),
            json!({"path": path, "content": "x"}),
        )]));
        llm.push(Reply::Text("written".into()));
    };
    // A write approved on its card, a clock read, then a write a grant allows.
    write("~/notes/a.txt");
    ask(&sandbox, "write a", b"y\n").await;
    llm.push(Reply::ToolCalls(vec![(
        "time_now".to_owned(),
        json!({"timezone": "UTC"}),
    )]));
    llm.push(Reply::Text("noon".into()));
    ask(&sandbox, "what time is it?", b"").await;
    let (_, turns) = the_file(&sandbox.data_dir().join("turns"));
    let first: serde_json::Value = serde_json::from_str(&turns[0]).unwrap();
    let me = first["principal"]["sender_id"].as_str().unwrap().to_owned();
    let (status, added, stderr) = sandbox
        .run(&[
            "grants",
            "add",
            "--channel",
            "cli",
            "--sender",
            &me,
            "fs:write",
            "~/granted/*",
        ])
        .await;
    assert_eq!(status, 0, "{stderr}");
    let grant = serde_json::from_str::<serde_json::Value>(added.trim()).unwrap()["id"]
        .as_i64()
        .unwrap();
    write("~/granted/b.txt");
    ask(&sandbox, "write b", b"").await;

    let replay = async |level: &str| {
        let (status, out, stderr) = sandbox
            .run(&["policy", "replay", "--level", level, "--json"])
            .await;
        assert_eq!(status, 0, "{stderr}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    let full = replay("Full").await;
    assert_eq!(full["turns"], 3, "{full}");
    assert_eq!(full["questions"], 3, "{full}");
    assert_eq!(
        full["changes"],
        json!([{"from": "approval_required", "to": "allowed", "count": 1, "capabilities": {"fs:write": 1}}]),
        "{full}"
    );
    let read_only = replay("ReadOnly").await;
    assert_eq!(read_only["unchanged"], 1, "the clock: {read_only}");
    let changes = read_only["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{read_only}");
    assert!(
        changes
            .iter()
            .all(|c| c["to"] == "denied" && c["count"] == 1),
        "{read_only}"
    );
    // Nothing changes at the level they ran at, while the grant holds; revoked, the write
    // it allowed would have needed approval.
    assert_eq!(replay("Supervised").await["unchanged"], 3);
    let (status, _, stderr) = sandbox.run(&["grants", "revoke", &grant.to_string()]).await;
    assert_eq!(status, 0, "{stderr}");
    let now = replay("Supervised").await;
    assert_eq!(
        now["changes"],
        json!([{"from": "allowed", "to": "approval_required", "count": 1, "capabilities": {"fs:write": 1}}]),
        "{now}"
    );
    // The same in words.
    let (status, out, _) = sandbox
        .run(&["policy", "replay", "--level", "Full", "--since", "1d"])
        .await;
    assert_eq!(status, 0);
    assert!(
        out.contains("1 call(s) that needed approval would have been allowed (fs:write 1)"),
        "{out}"
    );
    let (status, _, stderr) = sandbox
        .run(&[
            "policy",
            "replay",
            "--level",
            "Full",
            "--since",
            "last week",
        ])
        .await;
    assert_eq!(status, 2);
    assert!(stderr.contains("--since"), "{stderr}");
}
