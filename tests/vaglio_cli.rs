//! `metnos vaglio judge|log` against a running stack: verdicts over gRPC, the log read
//! back with keys only.

mod common;

use common::Sandbox;
use serde_json::Value;

fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn verdicts_are_printed_and_the_log_keeps_keys_only() {
    let sandbox = Sandbox::new();
    let up = sandbox.up().await;
    async fn judge(
        sandbox: &Sandbox,
        intent: &str,
        executor: &str,
        args: &str,
    ) -> (i32, String, String) {
        sandbox
            .run(&[
                "vaglio",
                "judge",
                "--intent",
                intent,
                "--executor",
                executor,
                "--args",
                args,
            ])
            .await
    }

    let (code, stdout, stderr) = judge(
        &sandbox,
        "read the key",
        "fs_read",
        r#"{"path":"~/.ssh/id_rsa"}"#,
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let blocked = &lines(&stdout)[0];
    assert_eq!(blocked["approved"], false);
    assert_eq!(blocked["blocked_by"], "guard");
    assert_eq!(blocked["rule_id"], "path.ssh");
    assert_eq!(blocked["arg_key"], "path");
    assert_eq!(blocked["score"], 0.0);

    let (_, stdout, _) = judge(
        &sandbox,
        "read my notes",
        "fs_read",
        r#"{"path":"/tmp/n.txt"}"#,
    )
    .await;
    let approved = &lines(&stdout)[0];
    assert_eq!(approved["approved"], true);
    assert_eq!(
        approved["reason"],
        "approved: score 0.80 (intent matches executor)"
    );
    assert_eq!(approved["judge_kind"], "rule-based-v1");

    let (code, stdout, _) = sandbox.run(&["vaglio", "log"]).await;
    assert_eq!(code, 0);
    let log = lines(&stdout);
    assert_eq!(log.len(), 2);
    let (code, stdout, _) = sandbox.run(&["vaglio", "log", "--blocked"]).await;
    assert_eq!(code, 0);
    let refused = lines(&stdout);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["intent"], "read the key");
    assert_eq!(refused[0]["args_keys"], serde_json::json!(["path"]));
    assert!(
        !stdout.contains("id_rsa"),
        "a value reached the log: {stdout}"
    );

    let (code, _, stderr) = sandbox.run(&["vaglio", "log", "--month", "2026-13"]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("not in YYYY-MM form"), "{stderr}");
    let (code, _, stderr) = judge(&sandbox, "x", "fs_read", "[1,2]").await;
    assert_eq!(code, 1);
    assert!(
        stderr.contains("args_json is not a JSON object"),
        "{stderr}"
    );
    up.interrupt().await;
}

#[tokio::test]
async fn a_verdict_log_that_cannot_be_written_shows_in_health_and_status_but_verdicts_go_on() {
    let sandbox = Sandbox::new();
    // A plain file where the log's folder should be.
    std::fs::create_dir_all(sandbox.data_dir()).unwrap();
    std::fs::write(sandbox.data_dir().join("vaglio"), "in the way").unwrap();
    let up = sandbox.up().await;
    let (code, stdout, stderr) = sandbox
        .run(&[
            "vaglio",
            "judge",
            "--intent",
            "read",
            "--executor",
            "fs_read",
            "--args",
            r#"{"path":"/tmp/x"}"#,
        ])
        .await;
    assert_eq!(code, 0, "the verdict does not depend on the log: {stderr}");
    assert_eq!(lines(&stdout)[0]["approved"], true);

    let mut row = String::new();
    for _ in 0..100 {
        let (code, stdout, _) = sandbox.run(&["status"]).await;
        assert_eq!(code, 0, "the vaglio still serves: {stdout}");
        row = stdout
            .lines()
            .find(|l| l.starts_with("vaglio "))
            .unwrap()
            .to_owned();
        if row.contains("verdict log") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        row.contains("SERVING (verdict log lines are not being written)"),
        "{row}"
    );
    up.interrupt().await;
}
