//! `metnos up` as a person runs it: five services on loopback, `metnos status`, reflection
//! for stock tools, contracts that refuse to fake results, and a clean Ctrl-C.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{Sandbox, Up, grpcurl};
use metnos_kit::tls::Identity;
use metnos_proto::planner::v1::RunTurnRequest;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
use metnos_proto::vaglio::v1::GetTelosRequest;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;

const SERVICES: [(&str, &str); 5] = [
    ("policy", "metnos.policy.v1.PolicyService"),
    ("vaglio", "metnos.vaglio.v1.VaglioService"),
    ("approval", "metnos.approval.v1.ApprovalService"),
    ("planner", "metnos.planner.v1.PlannerService"),
    ("gateway", "metnos.gateway.v1.GatewayService"),
];

#[tokio::test]
async fn up_then_status_shows_five_serving_services_and_ctrl_c_stops_cleanly() {
    let sandbox = Sandbox::new();
    let up = sandbox.up().await;
    let names: Vec<&str> = up.addrs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["policy", "vaglio", "approval", "planner", "gateway"]
    );
    for (_, addr) in &up.addrs {
        assert!(addr.ip().is_loopback(), "{addr} is not loopback");
    }
    let ports: BTreeSet<u16> = up.addrs.iter().map(|(_, a)| a.port()).collect();
    assert_eq!(
        ports.len(),
        5,
        "each service on its own port: {:?}",
        up.addrs
    );

    let (code, stdout, stderr) = sandbox.run(&["status"]).await;
    assert_eq!(code, 0, "status failed: {stdout}{stderr}");
    for (name, _) in SERVICES {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row for {name}: {stdout}"));
        assert!(row.contains(&up.url(name)), "{row}");
        assert!(
            row.trim_end().ends_with("SERVING") && !row.contains("NOT_SERVING"),
            "{row}"
        );
    }

    let (code, stdout, _) = sandbox.run(&["status", "--json"]).await;
    assert_eq!(code, 0);
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let services: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| SERVICES.iter().any(|(name, _)| r["service"] == *name))
        .collect();
    assert_eq!(services.len(), 5, "{stdout}");
    assert!(
        services.iter().all(|r| r["status"] == "SERVING"),
        "{stdout}"
    );
    // Then the LLM (none configured: the seeds' Ollama, not running here) and the sandbox.
    let names: Vec<&str> = rows[5..]
        .iter()
        .map(|r| r["service"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["llm:fast", "sandbox"], "{stdout}");
    assert_eq!(rows[5]["status"], "NOT_READY", "{stdout}");
    assert_eq!(rows[5]["address"], "http://127.0.0.1:11434", "{stdout}");
    assert!(
        rows[5]["detail"].as_str().unwrap().contains("ollama serve"),
        "{stdout}"
    );

    let run_file = sandbox.data_dir().join("metnos-up.json");
    assert!(
        run_file.is_file(),
        "metnos up leaves a run file for other commands"
    );
    for name in ["policy", "vaglio", "approval", "planner", "gateway"] {
        assert!(
            sandbox.data_dir().join(format!("{name}.db")).is_file(),
            "{name}.db missing"
        );
    }

    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "metnos up did not stop cleanly: {stderr}");
    assert!(!run_file.exists(), "the run file outlived metnos up");

    let (code, stdout, _) = sandbox.run(&["status"]).await;
    assert_eq!(code, 1, "status must fail when nothing runs: {stdout}");
    assert_eq!(stdout.matches("NOT_SERVING").count(), 5, "{stdout}");
}

#[tokio::test]
async fn a_ctrl_c_the_moment_the_stack_says_it_is_up_stops_it_cleanly() {
    // A signal sent as soon as the first address line arrives (the others still being
    // written) must find the handler in place: before, the default action killed the
    // process, leaving its run file behind.
    use tokio::io::AsyncBufReadExt;
    let sandbox = Sandbox::new();
    for attempt in 0..10 {
        let mut child = sandbox
            .metnos()
            .arg("up")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let first = tokio::time::timeout(common::START_LIMIT, lines.next_line())
            .await
            .expect("an address line in time")
            .unwrap();
        assert!(
            first.is_some(),
            "attempt {attempt}: metnos up printed nothing"
        );
        let pid = rustix::process::Pid::from_raw(child.id().unwrap() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
        let output = tokio::time::timeout(common::START_LIMIT, child.wait_with_output())
            .await
            .expect("metnos up stopped in time")
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "attempt {attempt}: {:?} {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            !sandbox.data_dir().join("metnos-up.json").exists(),
            "attempt {attempt}: the run file was left behind"
        );
    }
}

#[tokio::test]
async fn status_raises_no_sandbox_alarm_where_the_sandbox_can_be_built() {
    let mut sandbox = Sandbox::new();
    sandbox.with_builtins();
    // Where the sandbox can be built (this machine), the planner's row says nothing more.
    let up = sandbox.up().await;
    // The planner reports the sandbox in its health once it has built one.
    let sandbox_health = planner_sandbox(&up, |h| h.is_serving()).await;
    assert!(sandbox_health.is_serving(), "{sandbox_health:?}");
    let row = status_row(&sandbox, "planner").await;
    assert_eq!(row["status"], "SERVING", "{row}");
    assert!(row["detail"].is_null(), "{row}");
    let row = status_row(&sandbox, "sandbox").await;
    assert_eq!(row["status"], "SERVING", "{row}");
    assert!(row["detail"].is_null(), "{row}");
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
}

#[tokio::test]
async fn status_says_so_where_the_sandbox_cannot_be_built() {
    let mut sandbox = Sandbox::new();
    sandbox.with_builtins();
    // A host that allows no new user namespace: `metnos up` runs in a user namespace of its
    // own whose limit of user namespaces is 0 (what a container's seccomp profile or a
    // distribution's sysctl does to shell_exec's box).
    let mut command = sandbox.command(Path::new("unshare"));
    command.args([
        "--user",
        "--map-root-user",
        "sh",
        "-c",
        "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"",
        env!("CARGO_BIN_EXE_metnos"),
        "up",
    ]);
    let up = sandbox.up_with(command).await;
    let sandbox_health = planner_sandbox(&up, |h| {
        matches!(h, metnos_kit::client::Health::NotServing(_))
    })
    .await;
    assert!(
        matches!(&sandbox_health, metnos_kit::client::Health::NotServing(why) if why == "NOT_SERVING"),
        "{sandbox_health:?}"
    );
    // The planner still serves; the sandbox's row says what is missing and where to look.
    let row = status_row(&sandbox, "planner").await;
    assert_eq!(row["status"], "SERVING", "{row}");
    let row = status_row(&sandbox, "sandbox").await;
    assert_eq!(row["status"], "NOT_SERVING", "{row}");
    let detail = row["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("sandbox cannot be built") && detail.contains("metnos executors sandbox"),
        "{row}"
    );
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    // And the log said why at start-up: shell_exec refuses every command.
    assert!(
        stderr.contains("shell_exec refuses every command"),
        "{stderr}"
    );
}

/// The planner's sandbox health once `settled` holds (it is known only after the
/// planner's first check), or the last answer after 10 s.
async fn planner_sandbox(
    up: &Up,
    settled: impl Fn(&metnos_kit::client::Health) -> bool,
) -> metnos_kit::client::Health {
    let mut health = metnos_kit::client::Health::Unreachable(String::new());
    for _ in 0..100 {
        health = metnos_kit::client::probe(
            up.channel("planner"),
            metnos_planner::SANDBOX_HEALTH,
            std::time::Duration::from_secs(2),
        )
        .await;
        if settled(&health) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    health
}

async fn status_row(sandbox: &Sandbox, name: &str) -> serde_json::Value {
    let (_, stdout, _) = sandbox.run(&["status", "--json"]).await;
    stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|row| row["service"] == name)
        .unwrap_or_else(|| panic!("no {name} row: {stdout}"))
}

#[tokio::test]
async fn a_second_up_on_the_same_data_directory_is_refused() {
    let sandbox = Sandbox::new();
    let up = sandbox.up().await;
    let (code, _, stderr) = sandbox.run(&["up"]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("already running as pid"), "{stderr}");
    assert_eq!(up.interrupt().await.0, 0);
}

/// The container case (issue 18, F1): `metnos up` is pid 1 of its pid namespace at every
/// start, so the run file a killed one leaves names pid 1 — the next one's own pid.
#[tokio::test]
async fn metnos_up_as_pid_1_starts_again_after_a_kill_9() {
    let sandbox = Sandbox::new();
    let under_pid_1 = || {
        let mut command = sandbox.command(std::path::Path::new("unshare"));
        command
            .args([
                "--user",
                "--map-root-user",
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child",
            ])
            .arg(env!("CARGO_BIN_EXE_metnos"))
            .arg("up");
        command
    };
    let mut first = sandbox.up_with(under_pid_1()).await;
    let written: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(sandbox.data_dir().join(metnos_kit::datadir::RUN_FILE)).unwrap(),
    )
    .unwrap();
    assert_eq!(written["pid"], 1, "{written}");
    // `docker kill`: SIGKILL, no clean-up; the run file stays behind.
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    // The kernel kills the rest of the namespace after its pid 1 dies, not before
    // `unshare` is reaped (docker waits for the whole container): wait until no store of
    // the first run is still held, as a restarted container would find them.
    stores_released(&sandbox.data_dir()).await;
    assert!(
        sandbox
            .data_dir()
            .join(metnos_kit::datadir::RUN_FILE)
            .exists()
    );
    // The restart (pid 1 again) starts and serves, instead of taking itself for the owner.
    // (`metnos status` from outside the namespace rightly finds no live owner: pid 1 is
    // another process here, so it is checked on the addresses the restart printed.)
    let mut second = sandbox.up_with(under_pid_1()).await;
    assert_eq!(second.addrs.len(), 5);
    for (service, addr) in &second.addrs {
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_ok(),
            "{service} at {addr} does not listen"
        );
    }
    // (unshare does not pass a Ctrl-C on: it is stopped as it was started.)
    second.child.start_kill().unwrap();
    second.child.wait().await.unwrap();
}

/// Waits (a hang guard, not a timing assertion) until every SQLite store lock in `dir` can
/// be taken: the processes that held them are gone.
async fn stores_released(dir: &std::path::Path) {
    let locks: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "lock"))
        .collect();
    for _ in 0..200 {
        let free = locks.iter().all(|lock| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(lock)
                .is_ok_and(|file| file.try_lock().is_ok())
        });
        if free {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the first run's stores are still held: {locks:?}");
}

#[tokio::test]
async fn every_service_answers_health_for_itself_and_not_for_others() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

    let sandbox = Sandbox::new();
    let up = sandbox.up().await;
    for (name, grpc_name) in SERVICES {
        let mut client = HealthClient::new(up.channel(name));
        for service in ["", grpc_name] {
            let response = client
                .check(HealthCheckRequest {
                    service: service.to_owned(),
                })
                .await
                .unwrap();
            assert_eq!(response.into_inner().status(), ServingStatus::Serving);
        }
        let other = SERVICES.iter().find(|(n, _)| *n != name).unwrap().1;
        let status = client
            .check(HealthCheckRequest {
                service: other.to_owned(),
            })
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::NotFound,
            "{name} claims {other}"
        );
    }
    up.interrupt().await;
}

async fn list_v1(channel: metnos_kit::client::TracedChannel) -> BTreeSet<String> {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let mut client = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    match response.message_response {
        Some(MessageResponse::ListServicesResponse(list)) => {
            list.service.into_iter().map(|s| s.name).collect()
        }
        other => panic!("unexpected reflection answer {other:?}"),
    }
}

async fn list_v1alpha(channel: metnos_kit::client::TracedChannel) -> BTreeSet<String> {
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;

    let mut client = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    match response.message_response {
        Some(MessageResponse::ListServicesResponse(list)) => {
            list.service.into_iter().map(|s| s.name).collect()
        }
        other => panic!("unexpected reflection answer {other:?}"),
    }
}

#[tokio::test]
async fn reflection_v1_and_v1alpha_list_exactly_each_services_own_api() {
    let sandbox = Sandbox::new();
    let up = sandbox.up().await;
    for (name, grpc_name) in SERVICES {
        let expected: BTreeSet<String> = [
            grpc_name,
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        assert_eq!(list_v1(up.channel(name)).await, expected, "{name} v1");
        assert_eq!(
            list_v1alpha(up.channel(name)).await,
            expected,
            "{name} v1alpha"
        );
    }
    up.interrupt().await;
}

/// Stock grpcurl with `identity`'s certificate (and the CA that signed the services').
async fn grpcurl_as(up: &Up, identity: Identity, args: &[&str]) -> (bool, String, String) {
    let path = |name: String| up.pki.join(name).display().to_string();
    let tls = [
        "-cacert".to_owned(),
        path("ca.crt".to_owned()),
        "-cert".to_owned(),
        path(format!("{identity}.crt")),
        "-key".to_owned(),
        path(format!("{identity}.key")),
    ];
    let output = tokio::process::Command::new(grpcurl())
        .args(tls)
        .args(args)
        .output()
        .await
        .expect("run grpcurl");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn stock_grpcurl_lists_each_api_and_every_vaglio_rpc_answers_for_real() {
    let sandbox = Sandbox::new();
    let up = sandbox.up().await;
    let mut rpcs_seen = 0;
    for (name, grpc_name) in SERVICES {
        let addr = up.addr(name).to_string();
        let (ok, stdout, stderr) = grpcurl_as(&up, Identity::Owner, &[&addr, "list"]).await;
        assert!(ok, "grpcurl list {name}: {stderr}");
        let listed: BTreeSet<&str> = stdout.lines().collect();
        assert!(listed.contains(grpc_name), "{name}: {stdout}");
        assert!(listed.contains("grpc.health.v1.Health"), "{name}: {stdout}");

        let (ok, stdout, stderr) =
            grpcurl_as(&up, Identity::Owner, &[&addr, "list", grpc_name]).await;
        assert!(ok, "grpcurl list {grpc_name}: {stderr}");
        let methods: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
        assert!(methods.len() >= 3, "{grpc_name} has too few RPCs: {stdout}");
        if name != "vaglio" {
            continue;
        }
        // The last service built (the telos engine): no RPC answers UNIMPLEMENTED any
        // more; an empty request gets a real answer or names what is missing.
        for method in methods {
            let rpc = method.rsplit('.').next().unwrap_or_default();
            let caller = metnos_vaglio::grpc::AUTHORIZATION
                .rules
                .iter()
                .find(|r| r.method == rpc)
                .map_or(Identity::Owner, |r| r.callers[0]);
            let (_, stdout, stderr) = grpcurl_as(&up, caller, &["-d", "{}", &addr, method]).await;
            assert!(
                !stderr.contains("Unimplemented"),
                "{method}: {stdout}{stderr}"
            );
            rpcs_seen += 1;
        }
    }
    assert_eq!(rpcs_seen, 10, "every RPC of the vaglio was called");

    // A built one answers for real through stock grpcurl too.
    let addr = up.addr("policy").to_string();
    let request = r#"{"level":"AUTONOMY_LEVEL_SUPERVISED","capability":"fs:write"}"#;
    let (ok, stdout, stderr) = grpcurl_as(
        &up,
        Identity::Owner,
        &["-d", request, &addr, "metnos.policy.v1.PolicyService/Check"],
    )
    .await;
    assert!(ok, "{stderr}");
    assert!(stdout.contains("OUTCOME_APPROVAL_REQUIRED"), "{stdout}");
    up.interrupt().await;
}

#[tokio::test]
async fn generated_clients_reach_unary_and_streaming_rpcs() {
    let sandbox = Sandbox::new();
    let up = sandbox.up().await;

    let mut vaglio = VaglioServiceClient::new(up.channel("vaglio"));
    // A fresh installation: nobody has declared a telos yet.
    let status = vaglio
        .get_telos(GetTelosRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert!(
        status.message().contains("metnos telos edit"),
        "{}",
        status.message()
    );

    let mut planner = PlannerServiceClient::new(up.channel("planner"));
    let status = planner
        .run_turn(RunTurnRequest {
            query: "what time is it".to_owned(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    // A streaming RPC refuses a request without a principal before streaming anything.
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "principal is missing (channel and sender_id are required)"
    );
    up.interrupt().await;
}
