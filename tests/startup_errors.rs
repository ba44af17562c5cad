//! What a person sees when the stack cannot start: one line naming the problem and a
//! non-zero exit, quickly, never a panic or a hang.

mod common;

use common::{Sandbox, free_port, sibling_binary, signal};
use metnos_kit::tls::Identity;
use metnos_proto::vaglio::v1 as pb;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;

/// The last line of stderr (logs may come before it) and that it is the only error line.
fn error_line(stderr: &str) -> &str {
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    stderr.lines().last().unwrap_or_default()
}

#[tokio::test]
async fn a_bad_config_value_exits_2_naming_the_key_before_anything_binds() {
    let mut sandbox = Sandbox::new();
    sandbox.set("METNOS_POLICY__LISTEN", "127.0.0.1:notaport");
    let (code, stdout, stderr) = sandbox.run(&["up"]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty(), "nothing may start: {stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let line = error_line(&stderr);
    assert!(line.contains("`policy.listen`"), "{line}");
    assert!(line.contains("METNOS_POLICY__LISTEN"), "{line}");
    assert!(
        !sandbox.data_dir().exists(),
        "nothing may be created on a bad config"
    );
}

#[tokio::test]
async fn a_bad_value_in_the_config_file_names_the_key_and_the_file() {
    let sandbox = Sandbox::new();
    let file = sandbox.dir.path().join("metnos.toml");
    std::fs::write(&file, "[server]\nstore_connect_timeout_seconds = -3\n").unwrap();
    let (code, _, stderr) = sandbox
        .run(&["--config", file.to_str().unwrap(), "status"])
        .await;
    assert_eq!(code, 2, "{stderr}");
    let line = error_line(&stderr);
    assert!(
        line.contains("`server.store_connect_timeout_seconds`"),
        "{line}"
    );
    assert!(line.contains("metnos.toml"), "{line}");
}

#[tokio::test]
async fn two_services_configured_on_one_port_are_refused_before_binding() {
    let mut sandbox = Sandbox::new();
    sandbox.set("METNOS_POLICY__LISTEN", "127.0.0.1:45999");
    sandbox.set("METNOS_GATEWAY__LISTEN", "127.0.0.1:45999");
    let (code, _, stderr) = sandbox.run(&["up"]).await;
    assert_eq!(code, 2, "{stderr}");
    let line = error_line(&stderr);
    assert!(
        line.contains("`gateway.listen`") && line.contains("policy.listen"),
        "{line}"
    );
}

#[tokio::test]
async fn a_port_in_use_exits_1_naming_the_service_and_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let mut sandbox = Sandbox::new();
    sandbox.set("METNOS_APPROVAL__LISTEN", &addr.to_string());
    let (code, stdout, stderr) = sandbox.run(&["up"]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty(), "no service may report serving: {stdout}");
    let line = error_line(&stderr);
    assert!(
        line.contains(&format!("approval: cannot listen on {addr}")),
        "{line}"
    );
    assert!(
        line.to_lowercase().contains("address already in use"),
        "{line}"
    );
    // Port 0 gave a port from the kernel's range for outgoing connections: the error says
    // what may hold it and how to reserve it.
    assert!(
        line.contains(&format!(
            "(port {} is in this machine's range for outgoing connections",
            addr.port()
        )) && line.contains("net.ipv4.ip_local_reserved_ports"),
        "{line}"
    );
}

#[tokio::test]
async fn an_unreachable_postgres_exits_1_naming_the_store_without_its_password() {
    let mut sandbox = Sandbox::new();
    // Nothing listens on port 1: refused at once.
    sandbox.set(
        "METNOS_POLICY__STORE",
        "postgres://metnos:hunter2@127.0.0.1:1/metnos",
    );
    let (code, stdout, stderr) = sandbox.run(&["up"]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(!stderr.contains("hunter2"), "the password leaked: {stderr}");
    let line = error_line(&stderr);
    assert!(
        line.contains("policy: cannot open postgres://metnos:***@127.0.0.1:1/metnos"),
        "{line}"
    );
    assert!(line.to_lowercase().contains("refused"), "{line}");
    assert!(
        !sandbox.data_dir().join("metnos-up.json").exists(),
        "a failed start leaves no run file"
    );
}

#[tokio::test]
async fn a_postgres_that_never_answers_times_out_instead_of_hanging() {
    // A loopback socket that accepts connections but never speaks.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let mut sandbox = Sandbox::new();
    sandbox.set(
        "METNOS_GATEWAY__STORE",
        &format!("postgres://metnos@{addr}/metnos"),
    );
    sandbox.set("METNOS_SERVER__STORE_CONNECT_TIMEOUT_SECONDS", "1");
    let run = sandbox.run(&["up"]);
    let (code, _, stderr) = tokio::time::timeout(common::START_LIMIT, run)
        .await
        .expect("metnos up hung on a silent PostgreSQL");
    assert_eq!(code, 1, "{stderr}");
    let line = error_line(&stderr);
    assert!(
        line.contains("gateway: cannot connect to postgres://metnos@"),
        "{line}"
    );
    assert!(line.contains("timed out after 1 s"), "{line}");
    drop(silent);
}

#[tokio::test]
async fn a_service_binary_serves_answers_its_health_check_and_stops_on_sigterm() {
    let mut sandbox = Sandbox::new();
    let port = free_port();
    sandbox.set("METNOS_VAGLIO__LISTEN", &format!("127.0.0.1:{port}"));
    let binary = sibling_binary("metnos-vaglio");
    sandbox.pki_init().await;

    // Not running yet: the health check says so and fails.
    let output = sandbox
        .command(&binary)
        .arg("--health-check")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stdout).contains("NOT_SERVING"));

    let mut child = sandbox
        .command(&binary)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut serving = false;
    if let Some(stdout) = sandbox.wait_serving(&binary).await {
        assert!(stdout.contains("vaglio"));
        serving = true;
    }
    assert!(serving, "metnos-vaglio never reported SERVING");
    assert!(sandbox.data_dir().join("vaglio.db").is_file());

    // Without metnos up's run file, `metnos status` finds services from the config.
    let (code, stdout, _) = sandbox.run(&["status"]).await;
    assert_eq!(code, 1, "four services are down: {stdout}");
    let vaglio = stdout.lines().find(|l| l.starts_with("vaglio ")).unwrap();
    assert!(vaglio.contains(&format!("127.0.0.1:{port}")), "{vaglio}");
    assert!(vaglio.trim_end().ends_with(" SERVING"), "{vaglio}");
    assert_eq!(stdout.matches("NOT_SERVING").count(), 4, "{stdout}");

    signal(&child, "TERM").await;
    let status = tokio::time::timeout(common::START_LIMIT, child.wait())
        .await
        .expect("metnos-vaglio did not stop on SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn a_service_binary_refuses_a_bad_config_with_exit_2() {
    let mut sandbox = Sandbox::new();
    sandbox.set("METNOS_PLANNER__STORE", "mongodb://x");
    let output = sandbox
        .command(&sibling_binary("metnos-planner"))
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("metnos-planner: config key `planner.store`"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_seeds_judge_variables_reach_a_real_vaglio_process() {
    let mut sandbox = Sandbox::new();
    let port = free_port();
    sandbox.set("METNOS_VAGLIO__LISTEN", &format!("127.0.0.1:{port}"));
    // The rules score this call 0.80: approved at the default 0.30, refused at 0.99.
    sandbox.set("METNOS_JUDGE_THRESHOLD", "0.99");
    let binary = sibling_binary("metnos-vaglio");
    sandbox.pki_init().await;
    let child = sandbox.command(&binary).spawn().unwrap();
    assert!(
        sandbox.wait_serving(&binary).await.is_some(),
        "metnos-vaglio never reported SERVING"
    );

    // As the planner, which has calls judged.
    let planner = common::tls_in(&sandbox.data_dir().join("pki"), Identity::Planner);
    let url = format!("http://127.0.0.1:{port}");
    let mut client = VaglioServiceClient::new(
        metnos_kit::client::channel(&planner, Identity::Vaglio, &url).unwrap(),
    );
    let verdict = client
        .judge(pb::JudgeRequest {
            intent: "read my notes".to_owned(),
            executor: "fs_read".to_owned(),
            args_json: r#"{"path":"/tmp/n.txt"}"#.to_owned(),
            context: None,
        })
        .await
        .unwrap()
        .into_inner()
        .verdict
        .unwrap();
    assert!(!verdict.approved, "{verdict:?}");
    assert_eq!(verdict.blocked_by(), pb::BlockedBy::Judge);
    assert_eq!(
        verdict.reason,
        "judge: score 0.80 < threshold 0.99 (intent matches executor)"
    );
    drop(child); // killed
}

#[tokio::test]
async fn a_bad_seed_judge_variable_exits_2_naming_it_before_anything_binds() {
    // Held, so that a vaglio that bound before reading its config would exit 1, not 2.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    for (variable, value, message) in [
        ("METNOS_JUDGE_KIND", "bogus", "`bogus`"),
        (
            "METNOS_JUDGE_THRESHOLD",
            "1.5",
            "must be from 0 to 1, got 1.5",
        ),
    ] {
        let mut sandbox = Sandbox::new();
        sandbox.set(
            "METNOS_VAGLIO__LISTEN",
            &taken.local_addr().unwrap().to_string(),
        );
        sandbox.set(variable, value);
        let output = sandbox
            .command(&sibling_binary("metnos-vaglio"))
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        let line = error_line(&stderr);
        let key = variable
            .strip_prefix("METNOS_JUDGE_")
            .unwrap()
            .to_lowercase();
        assert!(
            line.starts_with(&format!(
                "metnos-vaglio: config key `vaglio.judge.{key}` (from {variable}): "
            )) && line.contains(message),
            "{line}"
        );
        assert!(
            !sandbox.data_dir().exists(),
            "nothing may be created on a bad config"
        );
    }
}

/// Issue 47: the seed's `METNOS_GRANTS_DB` and `METNOS_APPROVALS_DB` are not silently
/// ignored: `metnos up`, and the service that would have read each, refuse to start and
/// name the setting that replaced it, before anything is created.
#[tokio::test]
async fn the_seed_s_store_variables_are_refused_at_start_naming_the_new_settings() {
    for (variable, key, replaced_by, service) in [
        (
            "METNOS_GRANTS_DB",
            "policy.store",
            "METNOS_POLICY__STORE",
            "metnos-policy",
        ),
        (
            "METNOS_APPROVALS_DB",
            "approval.store",
            "METNOS_APPROVAL__STORE",
            "metnos-approval",
        ),
    ] {
        let mut sandbox = Sandbox::new();
        sandbox.set(variable, "/srv/seed/store.db");
        let (code, stdout, stderr) = sandbox.run(&["up"]).await;
        assert_eq!(code, 2, "{stderr}");
        assert!(stdout.is_empty(), "nothing may start: {stdout}");
        let line = error_line(&stderr);
        assert!(line.contains(&format!("`{key}`")), "{line}");
        assert!(
            line.contains(variable) && line.contains(replaced_by),
            "{line}"
        );
        assert!(!sandbox.data_dir().exists(), "nothing created");
        let output = sandbox
            .command(&sibling_binary(service))
            .output()
            .await
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{service}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(replaced_by), "{service}: {stderr}");
    }
}
