//! Client-side balancing: a `balanced` channel spreads calls over every address its
//! resolver gives (two in-process replicas here), follows changes, and a `dns:///` URL
//! resolves a real name.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use metnos_kit::client;
use metnos_kit::tls::{Identity, Tls};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// The installation's certificates, in a folder that lives as long as the test.
fn pki() -> (tempfile::TempDir, metnos_kit::Config) {
    let dir = tempfile::tempdir().unwrap();
    let config = metnos_kit::testing::config(dir.path());
    (dir, config)
}

/// A health server, as the policy service, on a fresh loopback port that counts the calls
/// it answers.
async fn replica(config: &metnos_kit::Config) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let tls = Tls::load(config, Identity::Policy).unwrap();
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _keep = reporter;
        tonic::transport::Server::builder()
            .tls_config(tls.server())
            .unwrap()
            .layer(
                tower::ServiceBuilder::new().map_request(move |request: http::Request<_>| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    request
                }),
            )
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (addr, calls)
}

async fn check(channel: tonic::transport::Channel) {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_spread_over_every_replica_and_follow_changes() {
    let (_dir, config) = pki();
    let (a, calls_a) = replica(&config).await;
    let (b, calls_b) = replica(&config).await;
    let owner = Tls::load(&config, Identity::Owner).unwrap();
    let addresses = Arc::new(std::sync::Mutex::new(vec![a, b]));
    let source = Arc::clone(&addresses);
    let channel = client::balanced(
        move || {
            let now = source.lock().unwrap().clone();
            async move { Ok(now) }
        },
        Duration::from_millis(50),
        owner.client(Identity::Policy),
    );
    for _ in 0..60 {
        check(channel.clone()).await;
    }
    let (na, nb) = (
        calls_a.load(Ordering::SeqCst),
        calls_b.load(Ordering::SeqCst),
    );
    assert_eq!(na + nb, 60);
    assert!(na >= 10 && nb >= 10, "calls were not spread: {na} and {nb}");

    // B goes away from the name: after a refresh, calls go to A only.
    *addresses.lock().unwrap() = vec![a];
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = calls_b.load(Ordering::SeqCst);
    for _ in 0..20 {
        check(channel.clone()).await;
    }
    assert_eq!(
        calls_b.load(Ordering::SeqCst),
        before,
        "a removed replica still got calls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_url_resolves_a_real_name() {
    let (_dir, config) = pki();
    let (a, calls) = replica(&config).await;
    let owner = Tls::load(&config, Identity::Owner).unwrap();
    let url = format!("dns:///localhost:{}", a.port());
    let channel = client::channel(&owner, Identity::Policy, &url).unwrap();
    let mut health = HealthClient::new(channel);
    // localhost may also resolve to ::1, where nothing listens: the balancer uses what
    // answers.
    let mut answered = false;
    for _ in 0..20 {
        if health
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .is_ok()
        {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(answered);
    assert!(calls.load(Ordering::SeqCst) >= 1);
    assert!(client::channel(&owner, Identity::Policy, "dns:///no-port").is_err());
    assert!(client::dns_target("dns:///host:notaport").unwrap().is_err());
}
