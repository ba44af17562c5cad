//! The policy service over gRPC: the real server on 127.0.0.1:0, the generated client.

use std::num::NonZero;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use metnos_kit::Config;
use metnos_kit::client::{self, Health, TracedChannel};
use metnos_kit::testing::TestStore;
use metnos_kit::time::{now_ms, to_timestamp};
use metnos_kit::tls::{Identity, Tls};
use metnos_proto::common::v1::{AutonomyLevel, Principal};
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;
use metnos_proto::policy::v1::{
    CheckRequest, CheckResponse, Decider, GetTableRequest, ListCapabilitiesRequest,
    ListGrantsRequest, Outcome, PruneGrantsRequest, RecordGrantRequest, RevokeGrantRequest,
};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

type Client = PolicyServiceClient<TracedChannel>;

/// A policy server on port 0, stopped on drop.
/// The default store: SQLite in the server's own data directory, which lives as long as
/// the server (a `TestStore::sqlite()` dropped at once took its directory with it, and a
/// connection the pool opened later failed with "unable to open database file").
const SQLITE_IN_DATA_DIR: &str = "";

struct Server {
    url: String,
    /// The owner's certificate: what the CLI presents.
    owner: Tls,
    /// The vaglio's: its LLM judge asks about llm:online.
    vaglio: Tls,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    _data: tempfile::TempDir,
}

impl Server {
    async fn start(store_value: String, connect_timeout: u64) -> Server {
        let data = tempfile::tempdir().unwrap();
        let mut config = Config {
            data_dir: data.path().to_path_buf(),
            ..Config::default()
        };
        config.runtime.user_home = PathBuf::from("/home/roberto");
        config.policy.store = store_value;
        config.server.store_connect_timeout_seconds = NonZero::new(connect_timeout).unwrap();
        config.server.shutdown_grace_seconds = 1;
        config.tls.dir = data.path().join("pki");
        metnos_kit::tls::init(&config.tls.dir, false).unwrap();
        let owner = Tls::load(&config, Identity::Owner).unwrap();
        let vaglio = Tls::load(&config, Identity::Vaglio).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = Box::pin(async move {
                let _ = stopped.await;
            });
            metnos_policy::serve(config, listener, shutdown)
                .await
                .unwrap();
        });
        let server = Server {
            url,
            owner,
            vaglio,
            stop: Some(stop),
            task: Some(task),
            _data: data,
        };
        assert!(server.wait_health(true).await, "policy never served");
        server
    }

    fn channel(&self) -> TracedChannel {
        client::channel(&self.owner, Identity::Policy, &self.url).unwrap()
    }

    fn client(&self) -> Client {
        PolicyServiceClient::new(self.channel())
    }

    async fn health(&self) -> Health {
        let channel = self.channel();
        client::probe(
            channel,
            "metnos.policy.v1.PolicyService",
            Duration::from_secs(1),
        )
        .await
    }

    /// Waits (bounded) for health to be SERVING (`true`) or not.
    async fn wait_health(&self, serving: bool) -> bool {
        for _ in 0..400 {
            if self.health().await.is_serving() == serving {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn roberto() -> Option<Principal> {
    Some(Principal {
        channel: "telegram".to_owned(),
        sender_id: "roberto".to_owned(),
    })
}

async fn check(
    client: &mut Client,
    level: AutonomyLevel,
    cap: &str,
    target: &str,
) -> CheckResponse {
    client
        .check(CheckRequest {
            level: level as i32,
            capability: cap.to_owned(),
            principal: roberto(),
            target: target.to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
}

async fn record(client: &mut Client, cap: &str, target: &str) -> Result<i64, tonic::Status> {
    client
        .record_grant(RecordGrantRequest {
            principal: roberto(),
            capability: cap.to_owned(),
            target: target.to_owned(),
            expires_at: None,
            granted_by: "test".to_owned(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().grant.unwrap().id)
}

#[tokio::test]
async fn the_vaglio_may_ask_only_about_an_online_judge() {
    let server = Server::start(SQLITE_IN_DATA_DIR.to_owned(), 5).await;
    let mut vaglio = PolicyServiceClient::new(
        client::channel(&server.vaglio, Identity::Policy, &server.url).unwrap(),
    );
    let request = |capability: &str, target: &str| CheckRequest {
        level: AutonomyLevel::ReadOnly as i32,
        capability: capability.to_owned(),
        principal: roberto(),
        target: target.to_owned(),
    };
    let answer = vaglio
        .check(request("llm:online", "api.anthropic.com"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        answer.outcome,
        Outcome::Denied as i32,
        "never online at ReadOnly"
    );
    // Anything else is not its to ask: someone's file grants stay theirs.
    let refused = vaglio
        .check(request("fs:read", "~/secret.txt"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    assert!(
        refused.message().contains("only about llm:online"),
        "{refused:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_registry_and_the_table_are_served() {
    let server = Server::start(SQLITE_IN_DATA_DIR.into(), 5).await;
    let mut client = server.client();
    let capabilities = client
        .list_capabilities(ListCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    let names: Vec<&str> = capabilities.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), 14);
    assert_eq!(names[0], "fs:read");
    assert!(
        capabilities
            .iter()
            .find(|c| c.name == "mail:send")
            .unwrap()
            .critical
    );

    let rows = client
        .get_table(GetTableRequest {})
        .await
        .unwrap()
        .into_inner()
        .rows;
    assert_eq!(rows.len(), 3);
    let cell = |level: AutonomyLevel, cap: &str| {
        let row = rows.iter().find(|r| r.level == level as i32).unwrap();
        row.cells
            .iter()
            .find(|c| c.capability == cap)
            .unwrap()
            .outcome
    };
    assert_eq!(
        cell(AutonomyLevel::ReadOnly, "fs:write"),
        Outcome::Denied as i32
    );
    assert_eq!(
        cell(AutonomyLevel::Supervised, "fs:write"),
        Outcome::ApprovalRequired as i32
    );
    assert_eq!(
        cell(AutonomyLevel::Full, "code:exec"),
        Outcome::ApprovalRequired as i32
    );
    server.stop().await;
}

#[tokio::test]
async fn a_grant_is_recorded_once_per_idempotency_key_even_after_a_revoke() {
    let postgres = TestStore::postgres().await;
    for store in [SQLITE_IN_DATA_DIR.to_owned(), postgres.config_value()] {
        let server = Server::start(store, 5).await;
        let mut client = server.client();
        let keyed = |target: &str, key: &str| RecordGrantRequest {
            principal: roberto(),
            capability: "fs:write".to_owned(),
            target: target.to_owned(),
            granted_by: "approval:t1".to_owned(),
            idempotency_key: key.to_owned(),
            ..Default::default()
        };
        // Two replicas' retries of one approval, at once and again later.
        let (mut c1, mut c2) = (client.clone(), client.clone());
        let (a, b) = tokio::join!(
            c1.record_grant(keyed("~/docs/*", "approval:t1")),
            c2.record_grant(keyed("~/docs/*", "approval:t1")),
        );
        let a = a.unwrap().into_inner().grant.unwrap().id;
        let b = b.unwrap().into_inner().grant.unwrap().id;
        assert_eq!(a, b, "the same grant for the same key");
        assert!(
            client
                .revoke_grant(RevokeGrantRequest {
                    grant_id: a,
                    principal: None
                })
                .await
                .unwrap()
                .into_inner()
                .revoked
        );
        // A retry after the revoke returns the revoked grant: no twin keeps the access.
        let again = client
            .record_grant(keyed("~/docs/*", "approval:t1"))
            .await
            .unwrap()
            .into_inner()
            .grant
            .unwrap();
        assert_eq!(again.id, a);
        assert!(again.revoked_at.is_some());
        let target = "~/docs/x.txt";
        let check = check(&mut client, AutonomyLevel::Supervised, "fs:write", target).await;
        assert_eq!(check.outcome, Outcome::ApprovalRequired as i32);
        let all = ListGrantsRequest {
            include_inactive: true,
            ..Default::default()
        };
        let grants = client.list_grants(all).await.unwrap().into_inner().grants;
        assert_eq!(grants.len(), 1, "{grants:?}");

        // The key names one grant: reused for another target, refused.
        let reused = client
            .record_grant(keyed("~/other/*", "approval:t1"))
            .await
            .unwrap_err();
        assert_eq!(reused.code(), tonic::Code::AlreadyExists, "{reused:?}");
        let long = client
            .record_grant(keyed("~/docs/*", &"k".repeat(129)))
            .await
            .unwrap_err();
        assert_eq!(long.code(), tonic::Code::InvalidArgument);
        assert!(long.message().contains("128 bytes"), "{long:?}");
        // Without a key, each call is a grant of its own (the CLI's `grants add`).
        let one = client.record_grant(keyed("~/docs/*", "")).await.unwrap();
        let two = client.record_grant(keyed("~/docs/*", "")).await.unwrap();
        assert_ne!(
            one.into_inner().grant.unwrap().id,
            two.into_inner().grant.unwrap().id
        );
        server.stop().await;
    }
}

#[tokio::test]
async fn a_grant_lifts_approval_and_the_response_names_it() {
    let server = Server::start(SQLITE_IN_DATA_DIR.into(), 5).await;
    let mut client = server.client();
    let target = "~/Documents/invoices-2026/04-Acme.pdf";
    let before = check(&mut client, AutonomyLevel::Supervised, "fs:write", target).await;
    assert_eq!(before.outcome, Outcome::ApprovalRequired as i32);
    assert_eq!(before.decided_by, Decider::Table as i32);
    assert_eq!(before.grant_id, None);

    let id = record(&mut client, "fs:write", "~/Documents/invoices-2026/*")
        .await
        .unwrap();
    let after = check(&mut client, AutonomyLevel::Supervised, "fs:write", target).await;
    assert_eq!(after.outcome, Outcome::Allowed as i32);
    assert_eq!(after.table_outcome, Outcome::ApprovalRequired as i32);
    assert_eq!(after.decided_by, Decider::Grant as i32);
    assert_eq!(after.grant_id, Some(id));
    assert!(
        after.reason.contains(&format!("grant {id}")),
        "{}",
        after.reason
    );

    // A target longer than an error may quote is judged whole: `..` past the 64th
    // character still leave the granted folder.
    let sneaky = format!(
        "/home/roberto/Documents/invoices-2026/{}../../.ssh/id_rsa",
        "./".repeat(13)
    );
    let outside = check(&mut client, AutonomyLevel::Supervised, "fs:write", &sneaky).await;
    assert_eq!(
        outside.outcome,
        Outcome::ApprovalRequired as i32,
        "{outside:?}"
    );
    assert_eq!(outside.grant_id, None);

    // ReadOnly: denied whatever the grant says.
    let denied = check(&mut client, AutonomyLevel::ReadOnly, "fs:write", target).await;
    assert_eq!(denied.outcome, Outcome::Denied as i32);
    assert_eq!(denied.grant_id, None);

    // The use shows in the listing.
    let grants = client
        .list_grants(ListGrantsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .grants;
    assert_eq!(grants.len(), 1);
    assert!(
        grants[0].last_used_at.is_some(),
        "the deciding check was not recorded"
    );

    let revoked = client
        .revoke_grant(RevokeGrantRequest {
            grant_id: id,
            principal: None,
        })
        .await
        .unwrap()
        .into_inner()
        .revoked;
    assert!(revoked);
    let again = check(&mut client, AutonomyLevel::Supervised, "fs:write", target).await;
    assert_eq!(again.outcome, Outcome::ApprovalRequired as i32);
    server.stop().await;
}

#[tokio::test]
async fn grants_that_would_over_reach_are_refused_and_a_wildcard_skips_hidden_files() {
    let server = Server::start(SQLITE_IN_DATA_DIR.into(), 5).await;
    let mut client = server.client();
    // Everything, a whole home, a public suffix: refused with what to do instead.
    for (cap, target, says) in [
        ("fs:write", "/**", "name a folder inside"),
        ("fs:write", "/*", "name a folder inside"),
        ("fs:write", "~/*", "name a folder inside"),
        ("fs:read", "~/**", "name a folder inside"),
        ("network:http", "*.com", "public suffix"),
        ("network:http", "*.co.uk", "public suffix"),
    ] {
        let status = record(&mut client, cap, target).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{target}");
        assert!(
            status.message().contains(says),
            "{target}: {}",
            status.message()
        );
    }
    // What was granted (the folder) does not reach its hidden files.
    record(&mut client, "fs:write", "~/Documents/*")
        .await
        .unwrap();
    let plain = check(
        &mut client,
        AutonomyLevel::Supervised,
        "fs:write",
        "~/Documents/a.txt",
    )
    .await;
    assert_eq!(plain.outcome, Outcome::Allowed as i32);
    for hidden in ["~/Documents/.env", "~/Documents/.bashrc"] {
        let asked = check(&mut client, AutonomyLevel::Supervised, "fs:write", hidden).await;
        assert_eq!(asked.outcome, Outcome::ApprovalRequired as i32, "{hidden}");
        assert_eq!(asked.grant_id, None, "{hidden}");
    }
    server.stop().await;
}

#[tokio::test]
async fn bad_input_is_invalid_argument_with_a_message_that_says_what() {
    let server = Server::start(SQLITE_IN_DATA_DIR.into(), 5).await;
    let mut client = server.client();
    let check_err = |level: AutonomyLevel, cap: &str, target: &str| {
        let mut client = client.clone();
        let request = CheckRequest {
            level: level as i32,
            capability: cap.to_owned(),
            principal: roberto(),
            target: target.to_owned(),
        };
        async move { client.check(request).await.unwrap_err() }
    };
    let cases = [
        (
            check_err(AutonomyLevel::Unspecified, "fs:read", "").await,
            "autonomy level is unspecified",
        ),
        (
            check_err(AutonomyLevel::Full, "fs:delete", "").await,
            "unknown capability `fs:delete`",
        ),
        (
            check_err(AutonomyLevel::Full, "fs:read", "relative/path").await,
            "must be absolute",
        ),
        (
            check_err(AutonomyLevel::Full, "network:http", "http://").await,
            "not a URL or host",
        ),
    ];
    for (status, expected) in cases {
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains(expected),
            "{:?} lacks {expected}",
            status.message()
        );
    }

    let record_err = |cap: &str, target: &str, expires: Option<i64>| {
        let mut client = client.clone();
        let request = RecordGrantRequest {
            principal: roberto(),
            capability: cap.to_owned(),
            target: target.to_owned(),
            expires_at: expires.map(to_timestamp),
            granted_by: String::new(),
            ..Default::default()
        };
        async move { client.record_grant(request).await.unwrap_err() }
    };
    let cases = [
        (record_err("fs:write", "", None).await, "target is empty"),
        (record_err("fs:write", "~/a/[oops", None).await, "malformed"),
        (record_err("code:exec", "apt", None).await, "never granted"),
        (
            record_err("llm:online", "*.com", None).await,
            "public suffix",
        ),
        (
            record_err("fs:write", "~/a/*", Some(now_ms() - 1000)).await,
            "not in the future",
        ),
        (
            record_err("fs:wrote", "~/a/*", None).await,
            "the registry has: fs:read",
        ),
    ];
    for (status, expected) in cases {
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains(expected),
            "{:?} lacks {expected}",
            status.message()
        );
    }

    let status = client
        .record_grant(RecordGrantRequest {
            principal: None,
            capability: "fs:read".to_owned(),
            target: "~/x".to_owned(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let status = client
        .revoke_grant(RevokeGrantRequest {
            grant_id: 0,
            principal: None,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let status = client
        .prune_grants(PruneGrantsRequest { unused_days: 0 })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    // None of that left a grant behind.
    let all = ListGrantsRequest {
        include_inactive: true,
        ..Default::default()
    };
    assert!(
        client
            .list_grants(all)
            .await
            .unwrap()
            .into_inner()
            .grants
            .is_empty()
    );
    server.stop().await;
}

/// A TCP relay in front of PostgreSQL that can be cut and restored, to take the store
/// away from a running service.
struct Relay {
    addr: std::net::SocketAddr,
    open: Arc<AtomicBool>,
    links: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Relay {
    async fn start(upstream: std::net::SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let links: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let open = Arc::clone(&open);
            let links = Arc::clone(&links);
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if !open.load(Ordering::SeqCst) {
                        continue; // dropped: the client sees the connection close
                    }
                    let link = tokio::spawn(async move {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    links.lock().unwrap().push(link);
                }
            })
        };
        Relay {
            addr,
            open,
            links,
            accept,
        }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

#[tokio::test]
async fn an_unreachable_store_answers_unavailable_and_health_follows_it() {
    let store = TestStore::postgres().await;
    let TestStore::Postgres { url } = &store else {
        unreachable!()
    };
    // postgres://user@127.0.0.1:PORT/db → the relay in between.
    let (head, tail) = url.rsplit_once('@').unwrap();
    let (host_port, database) = tail.split_once('/').unwrap();
    let upstream: std::net::SocketAddr = host_port.parse().unwrap();
    let relay = Relay::start(upstream).await;
    let relayed = format!("{head}@{}/{database}", relay.addr);

    let server = Server::start(relayed, 2).await;
    let mut client = server.client();
    record(&mut client, "fs:read", "~/notes/*").await.unwrap();

    relay.cut();
    let status = client
        .check(CheckRequest {
            level: AutonomyLevel::Supervised as i32,
            capability: "fs:read".to_owned(),
            principal: roberto(),
            target: "~/notes/a.txt".to_owned(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("grant store is unreachable"),
        "{status:?}"
    );
    assert!(
        !status.message().contains("postgres://"),
        "the URL leaked: {status:?}"
    );
    assert!(
        server.wait_health(false).await,
        "health stayed SERVING with the store gone"
    );

    // The table alone still answers without the store.
    let table_only = check(&mut client, AutonomyLevel::Full, "fs:read", "~/notes/a.txt").await;
    assert_eq!(table_only.outcome, Outcome::Allowed as i32);
    let denied = check(
        &mut client,
        AutonomyLevel::ReadOnly,
        "fs:write",
        "~/notes/a.txt",
    )
    .await;
    assert_eq!(denied.outcome, Outcome::Denied as i32);

    relay.restore();
    assert!(
        server.wait_health(true).await,
        "health did not come back with the store"
    );
    let back = check(
        &mut client,
        AutonomyLevel::Supervised,
        "fs:read",
        "~/notes/a.txt",
    )
    .await;
    assert_eq!(back.outcome, Outcome::Allowed as i32);
    server.stop().await;
}

#[tokio::test]
async fn the_postgres_backend_serves_the_same_contract() {
    let server = Server::start(TestStore::postgres().await.config_value(), 5).await;
    let mut client = server.client();
    let id = record(&mut client, "network:http", "*.example.com")
        .await
        .unwrap();
    let d = check(
        &mut client,
        AutonomyLevel::Supervised,
        "network:http",
        "https://api.example.com/x",
    )
    .await;
    assert_eq!(d.grant_id, Some(id));
    let pruned = client
        .prune_grants(PruneGrantsRequest { unused_days: 1 })
        .await
        .unwrap()
        .into_inner()
        .revoked;
    assert!(pruned.is_empty(), "a grant used just now is not pruned");
    server.stop().await;
}
