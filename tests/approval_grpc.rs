//! The approval service over gRPC, with a real policy service beside it for territory
//! grants: servers on 127.0.0.1:0, generated clients.

use std::num::NonZero;
use std::sync::Arc;
use std::time::Duration;

use metnos_kit::ServiceName;
use metnos_kit::client::TracedChannel;
use metnos_kit::clock::ManualClock;
use metnos_kit::testing::{TestServer, TestStore, config};
use metnos_kit::tls::Identity;
use metnos_proto::approval::v1 as pb;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::common::v1::{AutonomyLevel, Language, Principal};
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;
use metnos_proto::policy::v1::{CheckRequest, Outcome};

type Raw = ApprovalServiceClient<TracedChannel>;

/// The approval service as its real callers reach it: the planner asks, waits and
/// withdraws; the gateway decides for the Telegram people these tests use; the owner lists
/// and previews. Each call goes out with that caller's certificate.
#[derive(Clone)]
struct Client {
    planner: Raw,
    gateway: Raw,
    owner: Raw,
}

type Reply<T> = Result<tonic::Response<T>, tonic::Status>;

impl Client {
    fn new(server: &TestServer) -> Client {
        Client {
            planner: Raw::new(server.channel_as(Identity::Planner)),
            gateway: Raw::new(server.channel_as(Identity::Gateway)),
            owner: Raw::new(server.channel_as(Identity::Owner)),
        }
    }

    async fn create_pending(
        &mut self,
        r: pb::CreatePendingRequest,
    ) -> Reply<pb::CreatePendingResponse> {
        self.planner.create_pending(r).await
    }

    async fn get_pending(&mut self, r: pb::GetPendingRequest) -> Reply<pb::GetPendingResponse> {
        self.planner.get_pending(r).await
    }

    async fn resolve(&mut self, r: pb::ResolveRequest) -> Reply<pb::ResolveResponse> {
        self.gateway.resolve(r).await
    }

    async fn cancel(&mut self, r: pb::CancelRequest) -> Reply<pb::CancelResponse> {
        self.planner.cancel(r).await
    }

    async fn list_pending(&mut self, r: pb::ListPendingRequest) -> Reply<pb::ListPendingResponse> {
        self.owner.list_pending(r).await
    }

    async fn cleanup_expired(
        &mut self,
        r: pb::CleanupExpiredRequest,
    ) -> Reply<pb::CleanupExpiredResponse> {
        self.owner.cleanup_expired(r).await
    }

    async fn render_card(&mut self, r: pb::RenderCardRequest) -> Reply<pb::RenderCardResponse> {
        self.owner.render_card(r).await
    }

    /// The card `request` renders to for `capability` (a render that must succeed).
    async fn card(&mut self, request: pb::ApprovalRequest, capability: &str) -> pb::Card {
        self.render_card(pb::RenderCardRequest {
            request: Some(request),
            capability: capability.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .card
        .unwrap()
    }

    async fn wait_decision(
        &mut self,
        r: pb::WaitDecisionRequest,
    ) -> Reply<tonic::Streaming<pb::WaitDecisionResponse>> {
        self.planner.wait_decision(r).await
    }
}

struct Stack {
    approval: TestServer,
    policy: Option<TestServer>,
    _data: tempfile::TempDir,
}

async fn start_policy(
    data: &std::path::Path,
    listener: Option<tokio::net::TcpListener>,
) -> TestServer {
    let mut cfg = config(data);
    cfg.policy.store = format!("sqlite:{}", data.join("policy.db").display());
    TestServer::start(&cfg.clone(), ServiceName::Policy, listener, move |l, s| {
        metnos_policy::serve(cfg, l, s)
    })
    .await
}

/// Approval (on `store`, sweeping every second) with policy at `policy_addr`, whether or
/// not anything listens there yet.
async fn approval_with_policy_at(
    store: &TestStore,
    data: &std::path::Path,
    policy_addr: std::net::SocketAddr,
) -> TestServer {
    let mut cfg = config(data);
    cfg.approval.store = store.config_value();
    cfg.policy.url = format!("http://{policy_addr}");
    cfg.approval.sweep_interval_seconds = NonZero::new(1).unwrap();
    TestServer::start(&cfg.clone(), ServiceName::Approval, None, move |l, s| {
        metnos_approval::serve(cfg, l, s)
    })
    .await
}

/// Approval (on `store`) with a policy service, or with none listening at its URL.
async fn stack(store: &TestStore, with_policy: bool, clock: Option<ManualClock>) -> Stack {
    let data = tempfile::tempdir().unwrap();
    let (policy, policy_url) = if with_policy {
        let server = start_policy(data.path(), None).await;
        let url = server.url.clone();
        (Some(server), url)
    } else {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        (None, format!("http://{}", probe.local_addr().unwrap()))
    };
    let mut cfg = config(data.path());
    cfg.approval.store = store.config_value();
    cfg.policy.url = policy_url;
    cfg.approval.sweep_interval_seconds = NonZero::new(1).unwrap();
    let approval = TestServer::start(
        &cfg.clone(),
        ServiceName::Approval,
        None,
        move |l, s| async move {
            match clock {
                Some(clock) => metnos_approval::serve_with_clock(cfg, l, s, Arc::new(clock)).await,
                None => metnos_approval::serve(cfg, l, s).await,
            }
        },
    )
    .await;
    Stack {
        approval,
        policy,
        _data: data,
    }
}

fn roberto() -> Option<Principal> {
    Some(Principal {
        channel: "telegram".into(),
        sender_id: "roberto".into(),
    })
}

fn create(territory: pb::TerritoryConcession) -> pb::CreatePendingRequest {
    pb::CreatePendingRequest {
        requester: roberto(),
        request: Some(pb::ApprovalRequest {
            action_verb: "download".into(),
            target_summary: "report.pdf from drive.google.com -> ~/downloads/ (~2.4 MB)".into(),
            capability_class: "fs_write:~/downloads/**".into(),
            reversibility: pb::Reversibility::Reversible as i32,
            territory_concession: territory as i32,
            recurrence_count: 0,
            token: String::new(),
            extra_json: String::new(),
            language: Language::English as i32,
        }),
        capability: "fs:write".into(),
        target: "~/downloads/report.pdf".into(),
        executor: "fs_write".into(),
        args_json: r#"{"path":"~/downloads/report.pdf","content":"x"}"#.into(),
        ttl_seconds: 0,
        territory_target: "~/downloads/**".into(),
        level: metnos_proto::common::v1::AutonomyLevel::Supervised as i32,
    }
}

async fn resolve(
    client: &mut Client,
    token: &str,
    decision: pb::Decision,
) -> Result<pb::PendingApproval, tonic::Status> {
    resolve_with(client, token, decision, pb::TerritoryConcession::None).await
}

/// Resolves, choosing a territory as the card's buttons do.
async fn resolve_with(
    client: &mut Client,
    token: &str,
    decision: pb::Decision,
    territory: pb::TerritoryConcession,
) -> Result<pb::PendingApproval, tonic::Status> {
    client
        .resolve(pb::ResolveRequest {
            token: token.into(),
            decision: decision as i32,
            decider: roberto(),
            territory: territory as i32,
            edited_pattern: String::new(),
            edited_schedule: String::new(),
        })
        .await
        .map(|r| r.into_inner().approval.unwrap())
}

async fn policy_outcome(policy: &TestServer, target: &str) -> (i32, Option<i64>) {
    let mut client = PolicyServiceClient::new(policy.channel_as(Identity::Planner));
    let r = client
        .check(CheckRequest {
            level: AutonomyLevel::Supervised as i32,
            capability: "fs:write".into(),
            principal: roberto(),
            target: target.into(),
        })
        .await
        .unwrap()
        .into_inner();
    (r.outcome, r.grant_id)
}

#[tokio::test]
async fn approving_a_session_concession_records_an_expiring_grant_in_policy() {
    let store = TestStore::sqlite();
    let stack = stack(&store, true, None).await;
    let policy = stack.policy.as_ref().unwrap();
    let mut client = Client::new(&stack.approval);
    let other_file = "~/downloads/later.pdf";
    assert_eq!(
        policy_outcome(policy, other_file).await.0,
        Outcome::ApprovalRequired as i32
    );

    // The caller asks for nothing (and a pattern of its own is ignored): the card offers
    // the folder, the person chooses the session.
    let created = client
        .create_pending(create(pb::TerritoryConcession::None))
        .await
        .unwrap()
        .into_inner();
    let card = created.card.unwrap();
    assert_eq!(card.buttons.len(), 2, "{:?}", card.buttons);
    assert_eq!(card.buttons[1].buttons[1].text, "Always for ~/downloads/*");
    let pending = created.approval.unwrap();
    assert_eq!(pending.territory_pattern, "~/downloads/*");
    let token = pending.token;
    let approved = resolve_with(
        &mut client,
        &token,
        pb::Decision::Approve,
        pb::TerritoryConcession::Session,
    )
    .await
    .unwrap();
    assert_eq!(approved.status, pb::ApprovalStatus::Approved as i32);
    assert_eq!(
        approved.request.as_ref().unwrap().territory_concession,
        pb::TerritoryConcession::Session as i32
    );
    let grant_id = approved.grant_id.expect("the concession recorded a grant");
    // The decision names the exact call it approves: the same call, however its JSON is
    // spelled, and no other.
    let same = metnos_core::call::call_sha256(
        "fs_write",
        r#"{ "content": "x", "path": "~/downloads/report.pdf" }"#,
    )
    .unwrap();
    let swapped = metnos_core::call::call_sha256(
        "fs_write",
        r#"{"path":"~/.ssh/authorized_keys","content":"x"}"#,
    )
    .unwrap();
    assert_eq!(approved.call_sha256, same);
    assert_ne!(approved.call_sha256, swapped);

    let (outcome, decided_by) = policy_outcome(policy, other_file).await;
    assert_eq!(outcome, Outcome::Allowed as i32);
    assert_eq!(decided_by, Some(grant_id));
    let grants = PolicyServiceClient::new(policy.channel())
        .list_grants(metnos_proto::policy::v1::ListGrantsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .grants;
    let grant = grants.iter().find(|g| g.id == grant_id).unwrap();
    assert_eq!(grant.target, "~/downloads/*");
    assert_eq!(grant.granted_by, format!("approval:{token}"));
    let lasts = grant.expires_at.unwrap().seconds - grant.granted_at.unwrap().seconds;
    assert!(
        (8 * 3600 - 5..=8 * 3600 + 5).contains(&lasts),
        "a session lasts 8 h, got {lasts} s"
    );
}

#[tokio::test]
async fn rejections_and_plain_approvals_grant_nothing() {
    let store = TestStore::sqlite();
    let stack = stack(&store, true, None).await;
    let policy = stack.policy.as_ref().unwrap();
    let mut client = Client::new(&stack.approval);
    let token = |r: pb::CreatePendingResponse| r.approval.unwrap().token;
    let rejected = token(
        client
            .create_pending(create(pb::TerritoryConcession::Permanent))
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(
        resolve(&mut client, &rejected, pb::Decision::Reject)
            .await
            .unwrap()
            .grant_id,
        None
    );
    let plain = token(
        client
            .create_pending(create(pb::TerritoryConcession::None))
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(
        resolve(&mut client, &plain, pb::Decision::Approve)
            .await
            .unwrap()
            .grant_id,
        None
    );
    assert_eq!(
        policy_outcome(policy, "~/downloads/x.pdf").await.0,
        Outcome::ApprovalRequired as i32
    );
}

#[tokio::test]
async fn a_grant_that_policy_could_not_take_is_recorded_once_policy_is_back() {
    let store = TestStore::sqlite();
    // Reserve the port policy will listen on, with nothing serving it yet.
    let policy_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let policy_addr = policy_listener.local_addr().unwrap();
    drop(policy_listener);
    let data = tempfile::tempdir().unwrap();
    let approval = approval_with_policy_at(&store, data.path(), policy_addr).await;
    let mut client = Client::new(&approval);
    let created = client
        .create_pending(create(pb::TerritoryConcession::Permanent))
        .await
        .unwrap()
        .into_inner();
    let token = created.approval.unwrap().token;
    let approved = resolve_with(
        &mut client,
        &token,
        pb::Decision::Approve,
        pb::TerritoryConcession::Permanent,
    )
    .await
    .unwrap();
    assert_eq!(
        approved.status,
        pb::ApprovalStatus::Approved as i32,
        "the decision stands"
    );
    assert_eq!(approved.grant_id, None, "policy is down: no grant yet");

    let listener = tokio::net::TcpListener::bind(policy_addr).await.unwrap();
    let policy = start_policy(data.path(), Some(listener)).await;
    let grant_id = grant_within_10s(&mut client, &token)
        .await
        .expect("the sweeper recorded the grant once policy was back");
    assert_eq!(
        policy_outcome(&policy, "~/downloads/y.pdf").await.1,
        Some(grant_id)
    );
}

/// A new request's token.
async fn new_token(client: &mut Client, territory: pb::TerritoryConcession) -> String {
    client
        .create_pending(create(territory))
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap()
        .token
}

/// A stream of the request's states.
async fn wait(
    client: &mut Client,
    token: impl Into<String>,
) -> tonic::Streaming<pb::WaitDecisionResponse> {
    client
        .wait_decision(pb::WaitDecisionRequest {
            token: token.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

async fn next(stream: &mut tonic::Streaming<pb::WaitDecisionResponse>) -> pb::PendingApproval {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("no event within 10 s")
        .unwrap()
        .expect("the stream ended early")
        .approval
        .unwrap()
}

#[tokio::test]
async fn a_waiter_hears_the_decision_as_it_is_written_and_the_stream_ends() {
    let store = TestStore::sqlite();
    let stack = stack(&store, false, None).await;
    let mut client = Client::new(&stack.approval);
    let token = new_token(&mut client, pb::TerritoryConcession::None).await;
    let mut stream = wait(&mut client, token.clone()).await;
    assert_eq!(
        next(&mut stream).await.status,
        pb::ApprovalStatus::Pending as i32
    );
    resolve(&mut client, &token, pb::Decision::Reject)
        .await
        .unwrap();
    assert_eq!(
        next(&mut stream).await.status,
        pb::ApprovalStatus::Rejected as i32
    );
    assert!(
        stream.message().await.unwrap().is_none(),
        "a terminal state ends the stream"
    );

    // Waiting on a decided request: its state, then the end.
    let mut again = wait(&mut client, token).await;
    assert_eq!(
        next(&mut again).await.status,
        pb::ApprovalStatus::Rejected as i32
    );
    assert!(again.message().await.unwrap().is_none());
}

#[tokio::test]
async fn a_waiter_on_one_replica_hears_a_decision_taken_on_another() {
    let store = TestStore::postgres().await;
    let a = stack(&store, false, None).await;
    let b = stack(&store, false, None).await;
    let mut on_a = Client::new(&a.approval);
    let mut on_b = Client::new(&b.approval);
    let token = new_token(&mut on_a, pb::TerritoryConcession::None).await;
    let mut stream = wait(&mut on_a, token.clone()).await;
    assert_eq!(
        next(&mut stream).await.status,
        pb::ApprovalStatus::Pending as i32
    );
    resolve(&mut on_b, &token, pb::Decision::Approve)
        .await
        .unwrap();
    assert_eq!(
        next(&mut stream).await.status,
        pb::ApprovalStatus::Approved as i32
    );
}

#[tokio::test]
async fn the_timer_sweeps_expired_requests_and_waiters_hear_it() {
    let store = TestStore::sqlite();
    let clock = ManualClock::new();
    let stack = stack(&store, false, Some(clock.clone())).await;
    let mut client = Client::new(&stack.approval);
    let unwatched = new_token(&mut client, pb::TerritoryConcession::None).await;
    let watched = new_token(&mut client, pb::TerritoryConcession::None).await;
    let mut stream = wait(&mut client, watched.clone()).await;
    assert_eq!(
        next(&mut stream).await.status,
        pb::ApprovalStatus::Pending as i32
    );
    clock.advance(601_000);

    // Nobody asks about `unwatched`: only the service's own timer (1 s here) expires it.
    let mut status = pb::ApprovalStatus::Pending as i32;
    for _ in 0..100 {
        let p = client
            .get_pending(pb::GetPendingRequest {
                token: unwatched.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        status = p.approval.unwrap().status;
        if status != pb::ApprovalStatus::Pending as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        status,
        pb::ApprovalStatus::Expired as i32,
        "the sweeper did not expire it"
    );
    assert_eq!(
        next(&mut stream).await.status,
        pb::ApprovalStatus::Expired as i32
    );
    let err = resolve(&mut client, &watched, pb::Decision::Approve)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        client
            .cleanup_expired(pb::CleanupExpiredRequest {})
            .await
            .unwrap()
            .into_inner()
            .expired,
        0,
        "nothing left to expire"
    );
}

#[tokio::test]
async fn errors_map_to_the_contract_codes() {
    let store = TestStore::sqlite();
    let stack = stack(&store, false, None).await;
    let mut client = Client::new(&stack.approval);
    let token = new_token(&mut client, pb::TerritoryConcession::None).await;

    let anna = Some(Principal {
        channel: "telegram".into(),
        sender_id: "anna".into(),
    });
    let status = client
        .resolve(pb::ResolveRequest {
            token: token.clone(),
            decision: pb::Decision::Approve as i32,
            decider: anna,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
    let status = resolve(
        &mut client,
        "ffffffffffffffffffffffffffffffff",
        pb::Decision::Approve,
    )
    .await
    .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    let status = resolve(&mut client, "<script>", pb::Decision::Approve)
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("malformed"), "{status:?}");
    let status = resolve(&mut client, &token, pb::Decision::Unspecified)
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    resolve(&mut client, &token, pb::Decision::Approve)
        .await
        .unwrap();
    let status = resolve(&mut client, &token, pb::Decision::Approve)
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert!(status.message().contains("already approved"), "{status:?}");

    let mut bad = create(pb::TerritoryConcession::None);
    bad.request.as_mut().unwrap().reversibility = pb::Reversibility::Unspecified as i32;
    let status = client.create_pending(bad).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("reversibility"), "{status:?}");
    let mut bad = create(pb::TerritoryConcession::None);
    bad.request.as_mut().unwrap().target_summary = "x".repeat(2000);
    let status = client.create_pending(bad).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("longer than 1024"), "{status:?}");

    // A preview: code:exec is never granted, so no territory marker.
    let mut preview = create(pb::TerritoryConcession::Permanent).request.unwrap();
    preview.language = Language::Italian as i32;
    let card = client.card(preview.clone(), "code:exec").await;
    assert!(!card.lines[2].contains("territorio"), "{:?}", card.lines);
    let card = client.card(preview, "fs:write").await;
    assert!(
        card.lines[2].ends_with("[territorio: permanente]"),
        "{:?}",
        card.lines
    );

    // Twenty-first review of issue 38: a stored request re-rendered (the web page's list,
    // `metnos approvals show`) lost its invisible-characters warning and its reason line.
    let mut hidden = create(pb::TerritoryConcession::None);
    hidden.target = "~/todo\u{200B}.md".into();
    hidden.args_json = r#"{"path":"~/todo\u200b.md","content":"x"}"#.into();
    let created = client.create_pending(hidden).await.unwrap().into_inner();
    let sent = created.card.unwrap();
    assert!(
        sent.lines
            .iter()
            .any(|l| l.contains("invisible characters")),
        "{:?}",
        sent.lines
    );
    let stored = created.approval.unwrap().request.unwrap();
    let again = client.card(stored.clone(), "fs:write").await;
    assert_eq!(again.lines, sent.lines);
    // A caller's copy saying otherwise changes nothing of a stored request's card.
    let mut forged = stored;
    forged.target_summary = "~/harmless.txt".into();
    forged.extra_json = String::new();
    let again = client.card(forged, "fs:write").await;
    assert_eq!(again.lines, sent.lines);
}

/// A capability outside the registry is refused where the request arrives, naming it, and
/// nothing is stored or carded.
#[tokio::test]
async fn an_unknown_capability_is_refused_at_the_edge_and_nothing_is_stored() {
    let store = TestStore::sqlite();
    let stack = stack(&store, false, None).await;
    let mut client = Client::new(&stack.approval);
    for spelled in ["fs:delete", "FS:WRITE", "fs:write "] {
        let mut bad = create(pb::TerritoryConcession::Session);
        bad.capability = spelled.into();
        let status = client.create_pending(bad).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{spelled}");
        assert!(
            status.message().contains("unknown capability"),
            "{spelled}: {status:?}"
        );
        let preview = create(pb::TerritoryConcession::Session).request;
        let status = client
            .render_card(pb::RenderCardRequest {
                request: preview,
                capability: spelled.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{spelled}");
    }
    let listed = client
        .list_pending(pb::ListPendingRequest {
            include_resolved: true,
            limit: 0,
            requester: None,
        })
        .await
        .unwrap()
        .into_inner()
        .approvals;
    assert!(listed.is_empty(), "{listed:?}");
}

/// Issue 38: a path or URL longer than 160 characters was shown as its head and tail; the
/// part in the middle (a folder, a query's payload) was never seen.
#[tokio::test]
async fn a_long_path_or_url_is_carded_whole_and_one_too_long_to_show_is_refused() {
    let store = TestStore::sqlite();
    let stack = stack(&store, false, None).await;
    let mut client = Client::new(&stack.approval);
    let card_of = |executor: &str, target: &str, args: serde_json::Value| {
        let mut request = create(pb::TerritoryConcession::None);
        request.executor = executor.into();
        request.target = target.into();
        request.territory_target = String::new();
        request.args_json = args.to_string();
        if executor == "web_fetch" {
            request.capability = "network:http".into();
        }
        request
    };
    let folder = format!(
        "~/{}/the-hidden-folder/{}",
        "a".repeat(150),
        "b".repeat(150)
    );
    let path = format!("{folder}/report.txt");
    let write = card_of(
        "fs_write",
        &path,
        serde_json::json!({"path": path, "content": "x"}),
    );
    let created = client.create_pending(write).await.unwrap().into_inner();
    let summary = created.card.unwrap().lines[1].clone();
    assert!(summary.starts_with(&path), "{summary}");
    assert!(!summary.contains('…'), "{summary}");
    let url = format!(
        "https://weather.example.com/today?city=rome&{}&d=c2VjcmV0&{}",
        "pad=1&".repeat(40),
        "pad=2&".repeat(40)
    );
    let fetch = card_of("web_fetch", &url, serde_json::json!({"url": url}));
    let created = client.create_pending(fetch).await.unwrap().into_inner();
    let summary = created.card.unwrap().lines[1].clone();
    assert!(
        summary.contains("&d=c2VjcmV0&"),
        "the query's middle: {summary}"
    );
    assert!(!summary.contains('…'), "{summary}");
    // A credential shows by its length, unless the turn read private data: then whole.
    let mut fetch = card_of(
        "web_fetch",
        "https://api.example.com/v1",
        serde_json::json!({"url": "https://api.example.com/v1", "headers": {"Authorization": "Bearer bmV0IDQsMjEw"}}),
    );
    let created = client
        .create_pending(fetch.clone())
        .await
        .unwrap()
        .into_inner();
    let summary = created.card.unwrap().lines[1].clone();
    assert!(summary.contains("Authorization: ***(19)"), "{summary}");
    assert!(!summary.contains("bmV0IDQsMjEw"), "{summary}");
    fetch.request.as_mut().unwrap().extra_json = r#"{"read_private":["file:~/salary.txt"]}"#.into();
    let created = client.create_pending(fetch).await.unwrap().into_inner();
    let summary = created.card.unwrap().lines[1].clone();
    assert!(
        summary.contains("credentials sent «Authorization: Bearer bmV0IDQsMjEw»"),
        "{summary}"
    );
    // Longer than a card shows: refused, saying so, never cut.
    let huge = format!("~/{}/x.txt", "c".repeat(1300));
    let refused = client
        .create_pending(card_of(
            "fs_write",
            &huge,
            serde_json::json!({"path": huge, "content": "x"}),
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused
            .message()
            .contains("cannot be shown whole on a card"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn the_proposer_cancels_and_the_approval_keeps_the_reason() {
    let store = TestStore::postgres().await;
    let stack = stack(&store, false, None).await;
    let mut client = Client::new(&stack.approval);
    let token = new_token(&mut client, pb::TerritoryConcession::None).await;
    let cancelled = client
        .cancel(pb::CancelRequest {
            token: token.clone(),
            reason: "the turn was stopped".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    assert_eq!(cancelled.status, pb::ApprovalStatus::Cancelled as i32);
    assert_eq!(cancelled.cancel_reason, "the turn was stopped");
    let listed = client
        .list_pending(pb::ListPendingRequest {
            include_resolved: true,
            limit: 0,
            requester: None,
        })
        .await
        .unwrap()
        .into_inner()
        .approvals;
    assert_eq!(listed.len(), 1);
    assert!(
        client
            .list_pending(pb::ListPendingRequest::default())
            .await
            .unwrap()
            .into_inner()
            .approvals
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concessions_on_two_replicas_with_policy_restarting_make_two_hundred_grants() {
    let store = TestStore::postgres().await;
    let data = tempfile::tempdir().unwrap();
    let policy_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let policy_addr = policy_listener.local_addr().unwrap();
    let policy = start_policy(data.path(), Some(policy_listener)).await;
    let mut cfg = config(data.path());
    cfg.approval.store = store.config_value();
    cfg.policy.url = format!("http://{policy_addr}");
    cfg.approval.sweep_interval_seconds = NonZero::new(1).unwrap();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let cfg2 = cfg.clone();
        replicas.push(
            TestServer::start(&cfg, ServiceName::Approval, None, move |l, s| {
                metnos_approval::serve(cfg2, l, s)
            })
            .await,
        );
    }
    let clients: Vec<Client> = replicas.iter().map(Client::new).collect();
    let mut tokens = Vec::new();
    for i in 0..200 {
        let mut client = clients[i % 2].clone();
        tokens.push(new_token(&mut client, pb::TerritoryConcession::Permanent).await);
    }
    // Approved on either replica, 40 at a time; policy stops after the first 80 and is
    // back 60 approvals later: both replicas' retry sweeps then find the same rows.
    let mut policy = Some(policy);
    for (batch, chunk) in tokens.chunks(40).enumerate() {
        if batch == 2 {
            policy.take().unwrap().stop().await;
        }
        if batch == 4 {
            let listener = tokio::net::TcpListener::bind(policy_addr).await.unwrap();
            policy = Some(start_policy(data.path(), Some(listener)).await);
        }
        let mut approvals = tokio::task::JoinSet::new();
        for (i, token) in chunk.iter().enumerate() {
            let mut client = clients[i % 2].clone();
            let token = token.clone();
            approvals.spawn(async move {
                resolve_with(
                    &mut client,
                    &token,
                    pb::Decision::Approve,
                    pb::TerritoryConcession::Permanent,
                )
                .await
                .unwrap()
            });
        }
        while let Some(approved) = approvals.join_next().await {
            assert_eq!(
                approved.unwrap().status,
                pb::ApprovalStatus::Approved as i32
            );
        }
    }
    let policy = policy.unwrap();
    // Every approval names its grant once the sweeps caught up.
    let mut client = clients[0].clone();
    let mut named = Vec::new();
    for _ in 0..300 {
        named.clear();
        for token in &tokens {
            let p = client
                .get_pending(pb::GetPendingRequest {
                    token: token.clone(),
                })
                .await
                .unwrap()
                .into_inner()
                .approval
                .unwrap();
            if let Some(id) = p.grant_id {
                named.push((token.clone(), id));
            }
        }
        if named.len() == tokens.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(named.len(), 200, "approvals whose grant was recorded");
    let grants = PolicyServiceClient::new(policy.channel())
        .list_grants(metnos_proto::policy::v1::ListGrantsRequest {
            include_inactive: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .grants;
    assert_eq!(grants.len(), 200, "one grant per approval, no twins");
    for (token, id) in &named {
        let grant = grants
            .iter()
            .find(|g| g.id == *id)
            .expect("the named grant");
        assert_eq!(grant.granted_by, format!("approval:{token}"));
    }
}

/// How the programmable policy answers RecordGrant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Records {
    /// Never answers.
    Hangs,
    /// Refuses with this code.
    Refuses(tonic::Code),
    /// Records grant 77.
    Grants,
}

/// A policy service over real mutual TLS (the policy's certificate) whose RecordGrant does
/// what a test says, counting the calls per idempotency key.
#[derive(Debug, Clone)]
struct ProgrammablePolicy {
    records: Arc<std::sync::Mutex<Records>>,
    calls: Arc<std::sync::Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl metnos_proto::policy::v1::policy_service_server::PolicyService for ProgrammablePolicy {
    async fn list_capabilities(
        &self,
        _: tonic::Request<metnos_proto::policy::v1::ListCapabilitiesRequest>,
    ) -> Reply<metnos_proto::policy::v1::ListCapabilitiesResponse> {
        Err(tonic::Status::unimplemented("not in this fake"))
    }
    async fn get_table(
        &self,
        _: tonic::Request<metnos_proto::policy::v1::GetTableRequest>,
    ) -> Reply<metnos_proto::policy::v1::GetTableResponse> {
        Err(tonic::Status::unimplemented("not in this fake"))
    }
    async fn check(
        &self,
        _: tonic::Request<CheckRequest>,
    ) -> Reply<metnos_proto::policy::v1::CheckResponse> {
        Err(tonic::Status::unimplemented("not in this fake"))
    }
    async fn record_grant(
        &self,
        request: tonic::Request<metnos_proto::policy::v1::RecordGrantRequest>,
    ) -> Reply<metnos_proto::policy::v1::RecordGrantResponse> {
        self.calls
            .lock()
            .unwrap()
            .push(request.into_inner().idempotency_key);
        let records = *self.records.lock().unwrap();
        match records {
            Records::Hangs => {
                std::future::pending::<()>().await;
                unreachable!()
            }
            Records::Refuses(code) => Err(tonic::Status::new(code, "refused by the fake")),
            Records::Grants => Ok(tonic::Response::new(
                metnos_proto::policy::v1::RecordGrantResponse {
                    grant: Some(metnos_proto::policy::v1::Grant {
                        id: 77,
                        ..Default::default()
                    }),
                },
            )),
        }
    }
    async fn list_grants(
        &self,
        _: tonic::Request<metnos_proto::policy::v1::ListGrantsRequest>,
    ) -> Reply<metnos_proto::policy::v1::ListGrantsResponse> {
        Err(tonic::Status::unimplemented("not in this fake"))
    }
    async fn revoke_grant(
        &self,
        _: tonic::Request<metnos_proto::policy::v1::RevokeGrantRequest>,
    ) -> Reply<metnos_proto::policy::v1::RevokeGrantResponse> {
        Err(tonic::Status::unimplemented("not in this fake"))
    }
    async fn prune_grants(
        &self,
        _: tonic::Request<metnos_proto::policy::v1::PruneGrantsRequest>,
    ) -> Reply<metnos_proto::policy::v1::PruneGrantsResponse> {
        Err(tonic::Status::unimplemented("not in this fake"))
    }
    async fn verify_grant_changes(
        &self,
        _: tonic::Request<metnos_proto::policy::v1::VerifyGrantChangesRequest>,
    ) -> Reply<metnos_proto::policy::v1::VerifyGrantChangesResponse> {
        Err(tonic::Status::unimplemented("not in this fake"))
    }
}

/// Approval (SQLite, sweeping every second) with the programmable policy.
async fn with_programmable_policy(
    records: Records,
) -> (TestServer, ProgrammablePolicy, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let mut cfg = config(data.path());
    let policy = ProgrammablePolicy {
        records: Arc::new(std::sync::Mutex::new(records)),
        calls: Arc::default(),
    };
    let tls = metnos_kit::tls::Tls::load(&cfg, Identity::Policy).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    cfg.policy.url = format!("http://{}", listener.local_addr().unwrap());
    let server = tonic::transport::Server::builder()
        .tls_config(tls.server())
        .unwrap()
        .add_service(
            metnos_proto::policy::v1::policy_service_server::PolicyServiceServer::new(
                policy.clone(),
            ),
        )
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
    tokio::spawn(server);
    cfg.approval.sweep_interval_seconds = NonZero::new(1).unwrap();
    let approval = TestServer::start(&cfg.clone(), ServiceName::Approval, None, move |l, s| {
        metnos_approval::serve(cfg, l, s)
    })
    .await;
    (approval, policy, data)
}

/// The grant an approval noted, waiting up to 10 s for the sweeper to note one.
async fn grant_within_10s(client: &mut Client, token: &str) -> Option<i64> {
    for _ in 0..100 {
        if let Some(id) = grant_of(client, token).await {
            return Some(id);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

async fn grant_of(client: &mut Client, token: &str) -> Option<i64> {
    client
        .get_pending(pb::GetPendingRequest {
            token: token.to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap()
        .grant_id
}

#[tokio::test]
async fn a_policy_that_never_answers_does_not_hold_the_decision_and_is_asked_again() {
    let (approval, policy, _data) = with_programmable_policy(Records::Hangs).await;
    let mut client = Client::new(&approval);
    let token = new_token(&mut client, pb::TerritoryConcession::Permanent).await;
    // Resolve returns (policy is given 10 s), the decision standing without a grant.
    let approved = tokio::time::timeout(
        Duration::from_secs(60),
        resolve_with(
            &mut client,
            &token,
            pb::Decision::Approve,
            pb::TerritoryConcession::Permanent,
        ),
    )
    .await
    .expect("a hung policy held the decision")
    .unwrap();
    assert_eq!(approved.status, pb::ApprovalStatus::Approved as i32);
    assert_eq!(approved.grant_id, None);
    // Once policy answers, the next sweep (every second) records it: the claim was given
    // back (a claim left to expire would hold it for 30 s).
    *policy.records.lock().unwrap() = Records::Grants;
    let mut granted = None;
    for _ in 0..50 {
        granted = grant_of(&mut client, &token).await;
        if granted.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(granted, Some(77));
    let key = format!("approval:{token}");
    assert!(policy.calls.lock().unwrap().iter().all(|k| *k == key));
}

#[tokio::test]
async fn a_grant_policy_refuses_for_good_is_not_asked_again_and_blocks_no_other() {
    let (approval, policy, _data) =
        with_programmable_policy(Records::Refuses(tonic::Code::InvalidArgument)).await;
    let mut client = Client::new(&approval);
    let refused = new_token(&mut client, pb::TerritoryConcession::Permanent).await;
    let approved = resolve_with(
        &mut client,
        &refused,
        pb::Decision::Approve,
        pb::TerritoryConcession::Permanent,
    )
    .await
    .unwrap();
    assert_eq!(approved.status, pb::ApprovalStatus::Approved as i32);
    assert_eq!(approved.grant_id, None);
    // Policy answers again; another approval is recorded, the refused one never re-asked.
    *policy.records.lock().unwrap() = Records::Grants;
    let other = new_token(&mut client, pb::TerritoryConcession::Permanent).await;
    let approved = resolve_with(
        &mut client,
        &other,
        pb::Decision::Approve,
        pb::TerritoryConcession::Permanent,
    )
    .await
    .unwrap();
    assert_eq!(approved.grant_id, Some(77));
    // Three sweeps later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(grant_of(&mut client, &refused).await, None);
    let calls = policy.calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        [format!("approval:{refused}"), format!("approval:{other}")],
        "the refused grant was asked once"
    );
}

/// Issue 22's unused-grants proposal: a revocation offer (executor `grant_revoke`) names
/// grants by id; the card is written from policy's records, only the requester's own
/// active grants may be named, and Accept (a plain approval) revokes exactly those — also
/// when policy was down at the click (the sweeper revokes them once it is back).
#[tokio::test]
async fn a_revocation_offer_names_only_the_persons_active_grants_and_accept_revokes_them() {
    use metnos_proto::policy::v1 as policy_pb;
    let store = TestStore::sqlite();
    let data = tempfile::tempdir().unwrap();
    let policy_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let policy_addr = policy_listener.local_addr().unwrap();
    let policy = start_policy(data.path(), Some(policy_listener)).await;
    let approval = approval_with_policy_at(&store, data.path(), policy_addr).await;
    let mut client = Client::new(&approval);
    let mut owner = PolicyServiceClient::new(policy.channel_as(Identity::Owner));
    let eve = Some(Principal {
        channel: "telegram".into(),
        sender_id: "eve".into(),
    });
    let mut grant = async |who: &Option<Principal>, capability: &str, target: &str| {
        owner
            .record_grant(policy_pb::RecordGrantRequest {
                principal: who.clone(),
                capability: capability.into(),
                target: target.into(),
                expires_at: None,
                granted_by: "test".into(),
                idempotency_key: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .grant
            .unwrap()
            .id
    };
    let old = grant(&roberto(), "fs:write", "~/old/*").await;
    let site = grant(&roberto(), "network:http", "example.org").await;
    let gone = grant(&roberto(), "fs:write", "~/gone/*").await;
    let eves = grant(&eve, "fs:write", "~/eve/*").await;
    let mut owner = PolicyServiceClient::new(policy.channel_as(Identity::Owner));
    owner
        .revoke_grant(policy_pb::RevokeGrantRequest {
            grant_id: gone,
            principal: None,
        })
        .await
        .unwrap();
    let offer = |ids: Vec<i64>, capability: &str| pb::CreatePendingRequest {
        requester: roberto(),
        request: Some(pb::ApprovalRequest {
            action_verb: "grant_revoke".into(),
            target_summary: "grants".into(),
            capability_class: "grant_revoke".into(),
            reversibility: pb::Reversibility::Reversible as i32,
            extra_json: r#"{"proposal_id":"sg-1"}"#.into(),
            language: Language::English as i32,
            ..Default::default()
        }),
        capability: capability.into(),
        target: "whatever the caller says".into(),
        executor: "grant_revoke".into(),
        args_json: serde_json::json!({ "grants": ids }).to_string(),
        ttl_seconds: 0,
        territory_target: String::new(),
        level: 0,
    };
    // Someone else's grant, a revoked one, an unknown one, a capability, none, twice, too many.
    for (ids, capability) in [
        (vec![old, eves], ""),
        (vec![old, gone], ""),
        (vec![old, 999_999], ""),
        (vec![old], "fs:write"),
        (vec![], ""),
        (vec![old, old], ""),
        ((1..=5).collect(), ""),
    ] {
        let refused = client.create_pending(offer(ids.clone(), capability)).await;
        let status = refused.expect_err("a forged revocation offer is refused");
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{ids:?}: {status:?}"
        );
        assert!(status.message().contains("revocation offer"), "{status:?}");
    }
    // Nothing but its proposal id rides along (no reason line or marks of the caller's).
    let mut marked = offer(vec![site, old], "");
    marked.request.as_mut().unwrap().extra_json =
        r#"{"proposal_id":"sg-1","tainted_sink":[{"arg":"x","sources":["web"]}]}"#.into();
    let refused = client.create_pending(marked).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    // Four grants with long patterns: each is on the card, none cut away.
    let mut long = Vec::new();
    for i in 0..4 {
        long.push(
            grant(
                &roberto(),
                "fs:write",
                &format!("~/{}-{i}/*", "a-rather-long-folder-name".repeat(3)),
            )
            .await,
        );
    }
    let card = client
        .create_pending(offer(long, ""))
        .await
        .unwrap()
        .into_inner()
        .card
        .unwrap();
    let text = card.lines.join("\n");
    assert!(text.contains("revoke 4 grants you no longer use"), "{text}");
    assert_eq!(text.matches("(never used, 0 days)").count(), 4, "{text}");
    for i in 0..4 {
        assert!(text.contains(&format!("-{i}/*")), "grant {i}: {text}");
    }
    let created = client
        .create_pending(offer(vec![site, old], ""))
        .await
        .unwrap()
        .into_inner();
    let pending = created.approval.unwrap();
    assert_eq!(pending.executor, "grant_revoke");
    let card = created.card.unwrap();
    let text = card.lines.join("\n");
    assert!(text.contains("revoke 2 grants you no longer use"), "{text}");
    assert!(
        text.contains("network:http example.org (never used, 0 days)")
            && text.contains("fs:write")
            && text.contains("old/*"),
        "{text}"
    );
    assert!(
        !text.contains("whatever the caller says") && !text.contains("~/eve"),
        "{text}"
    );
    let buttons: Vec<&str> = card.buttons[0]
        .buttons
        .iter()
        .map(|b| b.data.as_str())
        .collect();
    let token = pending.token.clone();
    assert_eq!(
        buttons,
        [
            format!("approve:{token}"),
            format!("reject:{token}"),
            format!("never:{token}")
        ]
    );
    // Roberto writes under ~/old/ after the offer was made: that grant is no longer unused.
    assert_eq!(
        policy_outcome(&policy, "~/old/x.txt").await,
        (Outcome::Allowed as i32, Some(old)),
    );
    // Policy is down when roberto accepts: the decision stands, the sweeper revokes later.
    policy.stop().await;
    let approved = resolve(&mut client, &token, pb::Decision::Approve)
        .await
        .unwrap();
    assert_eq!(approved.status, pb::ApprovalStatus::Approved as i32);
    let listener = tokio::net::TcpListener::bind(policy_addr).await.unwrap();
    let policy = start_policy(data.path(), Some(listener)).await;
    assert!(
        grant_within_10s(&mut client, &token).await.is_some(),
        "the sweeper revoked them once policy was back"
    );
    let mut owner = PolicyServiceClient::new(policy.channel_as(Identity::Owner));
    let active: Vec<i64> = owner
        .list_grants(policy_pb::ListGrantsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .grants
        .iter()
        .map(|g| g.id)
        .collect();
    assert!(
        active.contains(&eves) && !active.contains(&site),
        "roberto's unused named grant revoked, eve's kept: {active:?}"
    );
    assert!(
        active.contains(&old),
        "the grant used since the offer is kept: {active:?}"
    );
    assert_eq!(
        active.len(),
        6,
        "eve's, the used one and the four on the card not accepted: {active:?}"
    );
    assert_eq!(
        policy_outcome(&policy, "~/old/x.txt").await.0,
        Outcome::Allowed as i32,
        "a write there still needs no card"
    );
}

/// Issue 46's shortcut offer (executor `shortcut_offer`): its card says the wish, how often
/// and the chain, from its arguments alone; arguments that are not a wish, a first executor
/// and one to three executor names, a capability or target, a caller's words beside its
/// proposal id, are refused. Accept is a plain approval (what the planner keeps is what
/// its hash binds).
#[tokio::test]
async fn a_shortcut_offer_is_carded_from_its_names_and_a_forged_one_is_refused() {
    let store = TestStore::sqlite();
    let s = stack(&store, false, None).await;
    let mut client = Client::new(&s.approval);
    let offer = |args: serde_json::Value| pb::CreatePendingRequest {
        requester: roberto(),
        request: Some(pb::ApprovalRequest {
            action_verb: "shortcut_offer".into(),
            target_summary: "whatever the caller says".into(),
            capability_class: "shortcut_offer".into(),
            reversibility: pb::Reversibility::Reversible as i32,
            extra_json: r#"{"proposal_id":"sc-1"}"#.into(),
            language: Language::English as i32,
            ..Default::default()
        }),
        capability: String::new(),
        target: String::new(),
        executor: "shortcut_offer".into(),
        args_json: args.to_string(),
        ttl_seconds: 0,
        territory_target: String::new(),
        level: 0,
    };
    let good = serde_json::json!({"wanted": "table_extract", "from": "web_fetch", "chain": ["parse_local", "fs_write"], "uses": 3});
    let mut forged = vec![
        offer(
            serde_json::json!({"wanted": "table extract", "from": "web_fetch", "chain": ["parse_local"], "uses": 3}),
        ),
        offer(
            serde_json::json!({"wanted": "x", "from": "Web_Fetch", "chain": ["parse_local"], "uses": 3}),
        ),
        offer(serde_json::json!({"wanted": "x", "from": "web_fetch", "chain": [], "uses": 3})),
        offer(
            serde_json::json!({"wanted": "x", "from": "web_fetch", "chain": ["a", "b", "c", "d"], "uses": 3}),
        ),
        offer(
            serde_json::json!({"wanted": "x", "from": "web_fetch", "chain": ["rm -rf ~"], "uses": 3}),
        ),
        offer(
            serde_json::json!({"wanted": "x", "from": "web_fetch", "chain": ["a"], "uses": 3, "note": "click me"}),
        ),
        offer(serde_json::json!({"wanted": "x", "from": "web_fetch", "chain": ["a"]})),
        // Fewer uses than an offer needs, or a count beyond reason.
        offer(serde_json::json!({"wanted": "x", "from": "web_fetch", "chain": ["a"], "uses": 0})),
        offer(
            serde_json::json!({"wanted": "x", "from": "web_fetch", "chain": ["a"], "uses": u64::MAX}),
        ),
    ];
    let mut with_capability = offer(good.clone());
    with_capability.capability = "fs:write".into();
    let mut with_target = offer(good.clone());
    with_target.target = "~/x".into();
    let mut marked = offer(good.clone());
    marked.request.as_mut().unwrap().extra_json =
        r#"{"proposal_id":"sc-1","reason":"trust me"}"#.into();
    forged.extend([with_capability, with_target, marked]);
    for request in forged {
        let args = request.args_json.clone();
        let status = client.create_pending(request).await.unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{args}: {status:?}"
        );
        assert!(status.message().contains("shortcut offer"), "{status:?}");
    }
    let created = client
        .create_pending(offer(good))
        .await
        .unwrap()
        .into_inner();
    let pending = created.approval.unwrap();
    let card = created.card.unwrap();
    let text = card.lines.join("\n");
    assert!(
        text.contains("keep a shortcut for `table_extract`"),
        "{text}"
    );
    assert!(
        text.contains(
            "table_extract was asked for 3 times; web_fetch → parse_local → fs_write does it"
        ),
        "{text}"
    );
    assert!(!text.contains("whatever the caller says"), "{text}");
    let token = pending.token.clone();
    let buttons: Vec<&str> = card.buttons[0]
        .buttons
        .iter()
        .map(|b| b.data.as_str())
        .collect();
    assert_eq!(
        buttons,
        [
            format!("approve:{token}"),
            format!("reject:{token}"),
            format!("never:{token}")
        ]
    );
    let approved = resolve(&mut client, &token, pb::Decision::Approve)
        .await
        .unwrap();
    assert_eq!(approved.status, pb::ApprovalStatus::Approved as i32);
    assert_eq!(approved.grant_id, None, "nothing is granted");
}

/// The owner's spectator page lists everyone's requests under its own identity and never
/// learns a token: each shows as the decisions journal's name for it (16 hex digits of its
/// token's sha256). The gateway lists only its own people's (issue 38: a web bug must not
/// carry the gateway's rights, nor the gateway the page's).
#[tokio::test]
async fn the_spectator_sees_every_request_but_no_token() {
    let store = TestStore::sqlite();
    let stack = stack(&store, false, None).await;
    let mut client = Client::new(&stack.approval);
    let mut page = Raw::new(stack.approval.channel_as(Identity::Web));
    let telegram = new_token(&mut client, pb::TerritoryConcession::None).await;
    let local_person = || {
        Some(Principal {
            channel: "cli".into(),
            sender_id: "alice".into(),
        })
    };
    let mut local = create(pb::TerritoryConcession::None);
    local.requester = local_person();
    let cli = client
        .create_pending(local)
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap()
        .token;
    let everyone = page
        .list_pending(pb::ListPendingRequest::default())
        .await
        .unwrap()
        .into_inner()
        .approvals;
    let mut shown: Vec<(&str, &str)> = everyone
        .iter()
        .map(|p| {
            (
                p.requester.as_ref().unwrap().channel.as_str(),
                p.token.as_str(),
            )
        })
        .collect();
    shown.sort();
    let name = |token: &str| metnos_kit::chain::hash(token)[..16].to_owned();
    let (cli_name, telegram_name) = (name(&cli), name(&telegram));
    assert_eq!(
        shown,
        [
            ("cli", cli_name.as_str()),
            ("telegram", telegram_name.as_str())
        ]
    );
    for token in [&cli, &telegram] {
        assert!(
            !format!("{everyone:?}").contains(token.as_str()),
            "a token in another field: {everyone:?}"
        );
    }
    // The gateway for everyone: refused; the page answers no card.
    let refused = client
        .gateway
        .list_pending(pb::ListPendingRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    let refused = page
        .resolve(pb::ResolveRequest {
            token: telegram.clone(),
            decision: pb::Decision::Approve as i32,
            decider: Some(Principal {
                channel: "telegram".into(),
                sender_id: "42".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    // Asking for the cli person by name is still refused.
    let refused = client
        .gateway
        .list_pending(pb::ListPendingRequest {
            requester: local_person(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
}
