//! `metnos policy …` and `metnos grants …` against a running stack, as a person uses them:
//! JSON lines on stdout, one-line errors on stderr, exit codes that scripts can trust.

mod common;

use common::Sandbox;
use serde_json::Value;

fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[tokio::test]
async fn registry_table_and_check_print_json_lines() {
    let sandbox = Sandbox::new();
    let up = sandbox.up().await;

    let (code, stdout, stderr) = sandbox.run(&["policy", "registry"]).await;
    assert_eq!(code, 0, "{stderr}");
    let registry = lines(&stdout);
    assert_eq!(registry.len(), 14);
    assert_eq!(registry[1]["name"], "fs:write");
    assert_eq!(registry[1]["critical"], true);
    assert_eq!(registry[1]["default_approval"], "per_target");
    assert_eq!(registry[1]["target_kind"], "path_glob");

    let (code, stdout, _) = sandbox.run(&["policy", "table"]).await;
    assert_eq!(code, 0);
    let table = lines(&stdout);
    assert_eq!(table.len(), 3);
    assert_eq!(table[0]["level"], "ReadOnly");
    assert_eq!(table[0]["fs:write"], "denied");
    assert_eq!(table[1]["fs:write"], "approval_required");
    assert_eq!(table[2]["code:exec"], "approval_required");
    assert_eq!(
        table[2].as_object().unwrap().len(),
        15,
        "level + 14 capabilities"
    );

    let (code, stdout, _) = sandbox.run(&["policy", "check", "full", "mail:send"]).await;
    assert_eq!(code, 0);
    let check = &lines(&stdout)[0];
    assert_eq!(check["outcome"], "approval_required");
    assert_eq!(check["decided_by"], "table");
    assert!(
        check["reason"]
            .as_str()
            .unwrap()
            .contains("asked every time")
    );
    up.interrupt().await;
}

#[tokio::test]
async fn grants_are_added_consulted_listed_revoked_and_pruned() {
    let sandbox = Sandbox::new();
    let up = sandbox.up().await;
    let who = ["--channel", "telegram", "--sender", "roberto"];

    let mut add = vec!["grants", "add"];
    add.extend(who);
    add.extend(["fs:write", "~/Documents/invoices-2026/*"]);
    let (code, stdout, stderr) = sandbox.run(&add).await;
    assert_eq!(code, 0, "{stderr}");
    let grant = &lines(&stdout)[0];
    let id = grant["id"].as_i64().unwrap();
    assert_eq!(grant["target"], "~/Documents/invoices-2026/*");
    assert_eq!(grant["granted_by"], "cli");

    let mut check = vec!["policy", "check", "Supervised", "fs:write"];
    check.extend(who);
    check.extend(["--target", "~/Documents/invoices-2026/04-Acme.pdf"]);
    let (code, stdout, _) = sandbox.run(&check).await;
    assert_eq!(code, 0);
    let decision = &lines(&stdout)[0];
    assert_eq!(decision["outcome"], "allowed");
    assert_eq!(decision["decided_by"], "grant");
    assert_eq!(decision["grant_id"], id);

    let (_, stdout, _) = sandbox
        .run(&["grants", "list", "--channel", "telegram"])
        .await;
    let listed = lines(&stdout);
    assert_eq!(listed.len(), 1);
    assert!(
        listed[0]["last_used_at"].is_string(),
        "the check's use is listed"
    );
    let (_, stdout, _) = sandbox.run(&["grants", "list", "--channel", "cli"]).await;
    assert!(stdout.is_empty(), "{stdout}");

    let (code, _, stderr) = sandbox
        .run(&["grants", "prune", "--unused-days", "1"])
        .await;
    assert_eq!(code, 0);
    assert!(stderr.contains("revoked 0 grant(s)"), "{stderr}");

    let id_text = id.to_string();
    let (code, stdout, _) = sandbox.run(&["grants", "revoke", &id_text]).await;
    assert_eq!(code, 0);
    assert_eq!(lines(&stdout)[0]["revoked"], true);
    let (_, stdout, _) = sandbox.run(&["grants", "revoke", &id_text]).await;
    assert_eq!(
        lines(&stdout)[0]["revoked"],
        false,
        "a second revoke is a no-op"
    );

    let (_, stdout, _) = sandbox.run(&["grants", "list"]).await;
    assert!(stdout.is_empty(), "revoked grants are hidden: {stdout}");
    let (_, stdout, _) = sandbox.run(&["grants", "list", "--all"]).await;
    assert!(lines(&stdout)[0]["revoked_at"].is_string());

    let (_, stdout, _) = sandbox.run(&check).await;
    assert_eq!(lines(&stdout)[0]["outcome"], "approval_required");
    up.interrupt().await;
}

#[tokio::test]
async fn mistakes_get_one_line_and_a_failing_exit_code() {
    let sandbox = Sandbox::new();
    let up = sandbox.up().await;
    let cases: [(&[&str], i32, &str); 5] = [
        (
            &["policy", "check", "admin", "fs:read"],
            2,
            "unknown autonomy level `admin`",
        ),
        (
            &["policy", "check", "full", "fs:delete"],
            1,
            "unknown capability `fs:delete`",
        ),
        (
            &[
                "grants",
                "add",
                "--channel",
                "t",
                "--sender",
                "r",
                "code:exec",
                "apt",
            ],
            1,
            "never granted",
        ),
        (&["grants", "prune", "--unused-days", "0"], 1, "at least 1"),
        (
            &["policy", "check", "full", "fs:read", "--channel", "t"],
            2,
            "go together",
        ),
    ];
    for (args, expected_code, expected) in cases {
        let (code, stdout, stderr) = sandbox.run(args).await;
        assert_eq!(code, expected_code, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    up.interrupt().await;

    // Nothing running: one line that says so.
    let (code, _, stderr) = sandbox.run(&["grants", "list"]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("the policy service at http://"), "{stderr}");
    assert!(stderr.contains("is `metnos up` running?"), "{stderr}");
}
