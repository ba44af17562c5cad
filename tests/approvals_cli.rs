//! `metnos approvals list|show` against a running stack.

mod common;

use common::Sandbox;
use metnos_kit::tls::Identity;
use metnos_proto::approval::v1 as pb;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::common::v1::{Language, Principal};
use serde_json::Value;

fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn pending_requests_are_listed_and_shown_with_their_card() {
    let sandbox = Sandbox::new();
    let up = sandbox.up().await;
    // The test asks as the planner would, and decides as the gateway would for roberto.
    let mut client = ApprovalServiceClient::new(up.channel_as("approval", Identity::Planner));
    let mut gateway = ApprovalServiceClient::new(up.channel_as("approval", Identity::Gateway));
    let roberto = Some(Principal {
        channel: "telegram".into(),
        sender_id: "roberto".into(),
    });
    let created = client
        .create_pending(pb::CreatePendingRequest {
            requester: roberto.clone(),
            request: Some(pb::ApprovalRequest {
                action_verb: "scarichi".into(),
                target_summary: "rapporto.pdf da drive.google.com -> ~/downloads/ (~2.4 MB)".into(),
                capability_class: "fs_write:~/downloads/**".into(),
                reversibility: pb::Reversibility::Reversible as i32,
                territory_concession: pb::TerritoryConcession::None as i32,
                language: Language::Italian as i32,
                ..Default::default()
            }),
            capability: "fs:write".into(),
            target: "~/downloads/rapporto.pdf".into(),
            executor: "fs_write".into(),
            args_json: "{}".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let token = created.approval.unwrap().token;

    let (code, stdout, stderr) = sandbox.run(&["approvals", "list"]).await;
    assert_eq!(code, 0, "{stderr}");
    let listed = lines(&stdout);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["token"], token.as_str());
    assert_eq!(listed[0]["status"], "pending");
    assert_eq!(listed[0]["sender_id"], "roberto");

    let (code, stdout, _) = sandbox.run(&["approvals", "show", &token]).await;
    assert_eq!(code, 0);
    let shown = &lines(&stdout)[0];
    // The card is the service's reading of the call, not the caller's "scarichi".
    assert_eq!(shown["card"][0], "Vuoi che crei un file?");
    assert_eq!(
        shown["card"][1],
        "~/downloads/rapporto.pdf — nuovo file, 0 B: vuoto"
    );
    assert_eq!(
        shown["card"][2],
        "reversible | classe: fs_write:~/downloads/**"
    );
    assert_eq!(shown["call_sha256"].as_str().unwrap().len(), 64);

    gateway
        .resolve(pb::ResolveRequest {
            token: token.clone(),
            decision: pb::Decision::Reject as i32,
            decider: roberto,
            ..Default::default()
        })
        .await
        .unwrap();
    let (_, stdout, _) = sandbox.run(&["approvals", "list"]).await;
    assert!(
        stdout.is_empty(),
        "a rejected request is no longer pending: {stdout}"
    );
    let (_, stdout, _) = sandbox.run(&["approvals", "list", "--all"]).await;
    let all = lines(&stdout);
    assert_eq!(all[0]["status"], "rejected");
    assert_eq!(all[0]["decided_by"], "telegram/roberto");

    let (code, stdout, stderr) = sandbox.run(&["approvals", "show", "not-a-token"]).await;
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(stderr.contains("malformed"), "{stderr}");
    let (code, _, stderr) = sandbox.run(&["approvals", "show", &"f".repeat(32)]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("unknown token"), "{stderr}");
    up.interrupt().await;
}
