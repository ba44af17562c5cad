//! Tracing proof: two services export over OTLP/gRPC to an in-process collector, and a
//! call that crosses from one to the other is one trace with the right parent/child
//! links and service names.
//!
//! The crossing call is real: at start-up the planner checks the health of its
//! dependencies (`dependency.check`), calling the policy service through a traced channel.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::otlp::{Collector, Received, start_collector};
use metnos_kit::client::{self, Health};
use metnos_kit::server::bind_std;
use metnos_kit::telemetry::Telemetry;
use metnos_kit::{Config, ServiceName};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

/// The three spans of one dependency check of policy by the planner, if all arrived.
fn crossing_trace(spans: &[Received]) -> Option<(Received, Received, Received)> {
    let checks = spans.iter().filter(|r| {
        r.span.name == "dependency.check" && r.attr("dependency").as_deref() == Some("policy")
    });
    for check in checks {
        let Some(client) = spans.iter().find(|r| {
            r.span.parent_span_id == check.span.span_id && r.span.kind == SpanKind::Client as i32
        }) else {
            continue;
        };
        let Some(server) = spans.iter().find(|r| {
            r.span.parent_span_id == client.span.span_id && r.span.kind == SpanKind::Server as i32
        }) else {
            continue;
        };
        return Some((check.clone(), client.clone(), server.clone()));
    }
    None
}

fn free_loopback_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_from_planner_to_policy_is_one_trace_across_both_services() {
    // The collector.
    let (collector, collector_url, server) = start_collector().await;

    // Two services exporting to it, each on its own runtime and under its own name.
    let data = tempfile::tempdir().unwrap();
    let mut config = Config {
        data_dir: data.path().to_path_buf(),
        ..Config::default()
    };
    config.runtime.user_home = data.path().to_path_buf();
    config.tls.dir = data.path().join("pki");
    metnos_kit::tls::init(&config.tls.dir, false).unwrap();
    config.telemetry.log = "warn".to_owned();
    config.telemetry.otlp_endpoint = Some(collector_url);
    let policy_listener = bind_std(ServiceName::Policy, "127.0.0.1:0".parse().unwrap()).unwrap();
    let planner_listener = bind_std(ServiceName::Planner, "127.0.0.1:0".parse().unwrap()).unwrap();
    config.policy.url = format!("http://{}", policy_listener.local_addr().unwrap());
    config.planner.url = format!("http://{}", planner_listener.local_addr().unwrap());
    // The planner's other dependencies are not running here.
    config.vaglio.url = free_loopback_url();
    config.approval.url = free_loopback_url();

    let policy_telemetry = Telemetry::new("metnos-policy", &config.telemetry).unwrap();
    let planner_telemetry = Telemetry::new("metnos-planner", &config.telemetry).unwrap();
    assert!(policy_telemetry.exporting() && planner_telemetry.exporting());

    let policy = metnos::up::spawn(
        ServiceName::Policy,
        config.clone(),
        policy_listener,
        &policy_telemetry,
    )
    .unwrap();
    let owner = metnos_kit::tls::Tls::load(&config, metnos_kit::tls::Identity::Owner).unwrap();
    let channel = client::channel(
        &owner,
        metnos_kit::tls::Identity::Policy,
        &config.policy.url,
    )
    .unwrap();
    let mut ready = false;
    for _ in 0..500 {
        let health = client::probe(
            channel.clone(),
            ServiceName::Policy.grpc_name(),
            Duration::from_secs(1),
        )
        .await;
        if health == Health::Serving {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ready, "policy never served");

    let planner = metnos::up::spawn(
        ServiceName::Planner,
        config.clone(),
        planner_listener,
        &planner_telemetry,
    )
    .unwrap();

    // Wait for the three spans of the planner's check of policy to arrive.
    let mut found = None;
    for _ in 0..300 {
        planner_telemetry.flush().await;
        policy_telemetry.flush().await;
        found = crossing_trace(&collector.spans.lock().unwrap());
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let received: Vec<String> = collector
        .spans
        .lock()
        .unwrap()
        .iter()
        .map(|r| format!("{}:{}", r.service, r.span.name))
        .collect();
    let (check, client_span, server_span) =
        found.unwrap_or_else(|| panic!("no planner→policy trace among {received:?}"));

    // One trace, three services' worth of links.
    assert_eq!(check.span.trace_id, client_span.span.trace_id);
    assert_eq!(client_span.span.trace_id, server_span.span.trace_id);
    assert!(
        check.span.parent_span_id.is_empty(),
        "the check starts the trace"
    );
    assert_eq!(client_span.span.parent_span_id, check.span.span_id);
    assert_eq!(server_span.span.parent_span_id, client_span.span.span_id);

    // Service names come from each service's own resource.
    assert_eq!(check.service, "metnos-planner");
    assert_eq!(client_span.service, "metnos-planner");
    assert_eq!(server_span.service, "metnos-policy");

    // Names and RPC attributes, never payloads.
    assert_eq!(server_span.span.name, "grpc.health.v1.Health/Check");
    assert_eq!(client_span.span.name, "grpc.health.v1.Health/Check");
    let attrs: BTreeMap<&str, Option<String>> = ["rpc.system", "rpc.service", "rpc.method"]
        .into_iter()
        .map(|k| (k, server_span.attr(k)))
        .collect();
    assert_eq!(attrs["rpc.system"].as_deref(), Some("grpc"));
    assert_eq!(
        attrs["rpc.service"].as_deref(),
        Some("grpc.health.v1.Health")
    );
    assert_eq!(attrs["rpc.method"].as_deref(), Some("Check"));
    assert_eq!(
        server_span.attr("rpc.grpc.status_code").as_deref(),
        Some("IntValue(0)")
    );

    planner.stop().await.unwrap();
    policy.stop().await.unwrap();
    planner_telemetry.shutdown().await;
    policy_telemetry.shutdown().await;
    server.abort();
}

fn exporting_config(collector_url: String) -> metnos_kit::config::TelemetryConfig {
    metnos_kit::config::TelemetryConfig {
        log: "warn".to_owned(),
        otlp_endpoint: Some(collector_url),
        ..Default::default()
    }
}

fn emit_span(telemetry: &Telemetry, name: &'static str) {
    tracing::dispatcher::with_default(telemetry.dispatch(), || {
        let span = tracing::info_span!("unit.of.work", job = name);
        let _entered = span.enter();
    });
}

fn names(collector: &Collector) -> Vec<Option<String>> {
    collector
        .spans
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.attr("job"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_telemetry_down_exports_the_spans_still_pending() {
    let (collector, url, server) = start_collector().await;
    let telemetry = Telemetry::new("metnos-test", &exporting_config(url)).unwrap();
    emit_span(&telemetry, "pending-at-shutdown");
    // The batch exporter waits seconds before sending; shutdown must not lose the span.
    telemetry.shutdown().await;
    assert_eq!(names(&collector), [Some("pending-at-shutdown".to_owned())]);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_telemetry_also_flushes() {
    let (collector, url, server) = start_collector().await;
    let telemetry = Telemetry::new("metnos-test", &exporting_config(url)).unwrap();
    emit_span(&telemetry, "pending-at-drop");
    tokio::task::spawn_blocking(move || drop(telemetry))
        .await
        .unwrap();
    assert_eq!(names(&collector), [Some("pending-at-drop".to_owned())]);
    server.abort();
}

mod metrics {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use metnos_kit::telemetry::Telemetry;
    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
        MetricsService, MetricsServiceServer,
    };
    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsServiceRequest, ExportMetricsServiceResponse,
    };
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
    use tokio::net::TcpListener;
    use tokio_stream::wrappers::TcpListenerStream;

    /// (service name, metric name, summed value) of everything received.
    #[derive(Debug, Clone, Default)]
    struct Collector(Arc<Mutex<Vec<(String, String, i64)>>>);

    #[tonic::async_trait]
    impl MetricsService for Collector {
        async fn export(
            &self,
            request: tonic::Request<ExportMetricsServiceRequest>,
        ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
            let mut seen = self.0.lock().unwrap();
            for resource in request.into_inner().resource_metrics {
                let service = resource
                    .resource
                    .as_ref()
                    .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                    .and_then(|kv| kv.value.as_ref())
                    .map(|v| format!("{:?}", v.value))
                    .unwrap_or_default();
                for scope in resource.scope_metrics {
                    for metric in scope.metrics {
                        let total = match &metric.data {
                            Some(Data::Sum(sum)) => sum
                                .data_points
                                .iter()
                                .map(|p| match p.value {
                                    Some(Number::AsInt(v)) => v,
                                    Some(Number::AsDouble(v)) => v as i64,
                                    None => 0,
                                })
                                .sum(),
                            _ => 0,
                        };
                        seen.push((service.clone(), metric.name.clone(), total));
                    }
                }
            }
            Ok(tonic::Response::new(ExportMetricsServiceResponse {
                partial_success: None,
            }))
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn verdict_log_lines_that_cannot_be_written_are_counted_and_exported() {
        let collector = Collector::default();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(MetricsServiceServer::new(collector.clone()))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        let config = metnos_kit::config::TelemetryConfig {
            log: "error".to_owned(),
            otlp_endpoint: Some(url),
            ..Default::default()
        };
        let telemetry = Telemetry::new("metnos-vaglio", &config).unwrap();
        telemetry.install_global_meters();

        // The log's folder cannot exist: a plain file is in the way.
        let scratch = tempfile::tempdir().unwrap();
        std::fs::write(scratch.path().join("blocked"), "a file").unwrap();
        let log = metnos_vaglio::log::VerdictLog::start(scratch.path().join("blocked/vaglio"));
        for _ in 0..3 {
            log.append(metnos_vaglio::log::Record {
                approved: true,
                reason: "approved: score 0.70".into(),
                ts: 1.7e9,
                judge_kind: "rule-based-v1".into(),
                score: 0.7,
                blocked_by: None,
                intent: "x".into(),
                executor: "fs_read".into(),
                args_keys: vec!["path".into()],
                context_keys: vec![],
                rule_id: None,
                arg_key: None,
            })
            .await
            .expect("a line the disk refuses does not fail its verdict");
        }
        log.flush().await;
        assert_eq!(log.failures(), 3, "every lost line is counted");

        let mut exported = None;
        for _ in 0..100 {
            telemetry.flush().await;
            exported = collector
                .0
                .lock()
                .unwrap()
                .iter()
                .rev()
                .find(|(_, name, _)| name == "metnos.vaglio.log_write_failures")
                .cloned();
            if exported.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (service, _, total) = exported.expect("the failures counter was not exported");
        assert_eq!(total, 3);
        assert!(service.contains("metnos-vaglio"), "{service}");
        telemetry.shutdown().await;
        server.abort();
    }
}

/// Turns under `metnos up` (this debug build) with spans exported: every service's spans
/// reach the collector under its own name, and no thread panics. (SQLite's worker threads
/// drop the last reference to a service's span; when a span's parent was then closed
/// through the process's global subscriber, which did not know it, the thread panicked
/// with "tried to drop a ref to Id(…), but no such span exists!" and its connection died.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_under_metnos_up_export_every_service_s_spans_and_no_thread_panics() {
    use metnos_llm::fake::{FakeLlm, Reply};
    let (collector, url, server) = start_collector().await;
    let fake = FakeLlm::start().await;
    let mut sandbox = common::Sandbox::new();
    sandbox
        .with_fake_llm(fake.url())
        .set("OTEL_EXPORTER_OTLP_ENDPOINT", &url)
        .set("METNOS_TELEMETRY__LOG", "info");
    sandbox.owner_first_steps().await;
    // Verbose: each service's lines on stderr, where owning them matters.
    let up = sandbox.up_verbose().await;
    for turn in 0..8 {
        fake.push(Reply::ToolCalls(vec![(
            "time_now".to_owned(),
            serde_json::json!({"timezone": "UTC"}),
        )]));
        fake.push(Reply::Text(format!("answer {turn}")));
        let (code, stdout, stderr) = sandbox
            .run(&["ask", "what time is it", "--language", "en"])
            .await;
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.contains(&format!("answer {turn}")), "{stdout}");
        let (code, _, stderr) = sandbox.run(&["grants", "list"]).await;
        assert_eq!(code, 0, "{stderr}");
    }
    let (code, stderr) = up.interrupt().await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !stderr.contains("panicked"),
        "a thread of metnos up panicked:\n{stderr}"
    );
    // One subscriber, six owners: each line is logged once, by whoever owns it.
    for line in [
        "metnos is up; Ctrl-C stops it",
        "serving service=policy",
        "verdict approved=true",
    ] {
        let count = stderr.matches(line).count();
        let expected = if line.starts_with("verdict") { 8 } else { 1 };
        assert_eq!(count, expected, "{line:?} logged {count} times:\n{stderr}");
    }
    let services: std::collections::BTreeSet<String> = collector
        .spans
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.service.clone())
        .collect();
    for service in [
        "metnos-policy",
        "metnos-vaglio",
        "metnos-planner",
        "metnos-gateway",
    ] {
        assert!(
            services.contains(service),
            "no span of {service} among {services:?}"
        );
    }
    // Issue 41: each span carries the service that emitted it. The planner's client calls
    // were started by the first service's tracer and exported as metnos-policy.
    let spans = collector.spans.lock().unwrap().clone();
    for (rpc, server) in [
        ("metnos.policy.v1.PolicyService/Check", "metnos-policy"),
        ("metnos.vaglio.v1.VaglioService/Judge", "metnos-vaglio"),
    ] {
        let of = |kind: &str| -> std::collections::BTreeSet<String> {
            spans
                .iter()
                .filter(|r| r.span.name == rpc && r.attr("otel.kind").is_none())
                .filter(|r| kind_name(r.span.kind) == kind)
                .map(|r| r.service.clone())
                .collect()
        };
        assert_eq!(of("client"), ["metnos-planner".to_owned()].into(), "{rpc}");
        assert_eq!(of("server"), [server.to_owned()].into(), "{rpc}");
    }
    server.abort();
}

/// A span kind's name in the OTLP enum.
fn kind_name(kind: i32) -> &'static str {
    match kind {
        2 => "server",
        3 => "client",
        _ => "other",
    }
}
