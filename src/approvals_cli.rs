//! `metnos approvals list [--all]` and `metnos approvals show <token>`: pending approvals
//! from the terminal, one JSON object per line.

use std::process::ExitCode;

use clap::Subcommand;
use metnos_kit::time::{from_timestamp, rfc3339};
use metnos_kit::{Config, ServiceName};
use metnos_proto::approval::v1 as pb;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use serde_json::{Value, json};

use crate::admin::{connect, failed, print_line};

const SERVICE: ServiceName = ServiceName::Approval;

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Pending requests, newest first; with --all also decided, expired and cancelled ones.
    List {
        #[arg(long)]
        all: bool,
        /// At most this many (default 50).
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// One request, with its card.
    Show { token: String },
}

fn name(text: &str, prefix: &str) -> String {
    text.trim_start_matches(prefix).to_lowercase()
}

fn time_json(ts: Option<&prost_types::Timestamp>) -> Value {
    ts.and_then(from_timestamp)
        .map_or(Value::Null, |ms| Value::String(rfc3339(ms)))
}

fn approval_json(p: &pb::PendingApproval) -> Value {
    let requester = p.requester.clone().unwrap_or_default();
    let request = p.request.clone().unwrap_or_default();
    json!({
        "token": p.token,
        "status": name(p.status().as_str_name(), "APPROVAL_STATUS_"),
        "channel": requester.channel,
        "sender_id": requester.sender_id,
        "action_verb": request.action_verb,
        "target_summary": request.target_summary,
        "capability_class": request.capability_class,
        "capability": p.capability,
        "target": p.target,
        "reversibility": name(request.reversibility().as_str_name(), "REVERSIBILITY_"),
        "territory": name(request.territory_concession().as_str_name(), "TERRITORY_CONCESSION_"),
        "recurrence_count": request.recurrence_count,
        "call_sha256": p.call_sha256,
        "created_at": time_json(p.created_at.as_ref()),
        "expires_at": time_json(p.expires_at.as_ref()),
        "decision_at": time_json(p.decision_at.as_ref()),
        "decided_by": p.decided_by.as_ref().map(|d| format!("{}/{}", d.channel, d.sender_id)),
        "cancel_reason": if p.cancel_reason.is_empty() { Value::Null } else { json!(p.cancel_reason) },
        "grant_id": p.grant_id,
    })
}

pub async fn approvals(config: &Config, command: ApprovalsCommand) -> ExitCode {
    let (channel, url) = match connect(config, SERVICE) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let mut client = ApprovalServiceClient::new(channel);
    match command {
        ApprovalsCommand::List { all, limit } => {
            let request = pb::ListPendingRequest {
                include_resolved: all,
                limit,
                requester: None,
            };
            match client.list_pending(request).await {
                Ok(r) => r
                    .into_inner()
                    .approvals
                    .iter()
                    .for_each(|p| print_line(&approval_json(p))),
                Err(status) => return failed(SERVICE, &url, &status),
            }
        }
        ApprovalsCommand::Show { token } => {
            let approval = match client.get_pending(pb::GetPendingRequest { token }).await {
                Ok(r) => r.into_inner().approval.unwrap_or_default(),
                Err(status) => return failed(SERVICE, &url, &status),
            };
            let mut line = approval_json(&approval);
            // The card as the person sees it now (its recurrence form included).
            if let Some(request) = approval.request.clone() {
                let render = pb::RenderCardRequest {
                    request: Some(request),
                    capability: approval.capability.clone(),
                };
                match client.render_card(render).await {
                    Ok(r) => {
                        let card = r.into_inner().card.unwrap_or_default();
                        line["card"] = json!(card.lines);
                    }
                    Err(status) => return failed(SERVICE, &url, &status),
                }
            }
            print_line(&line);
        }
    }
    ExitCode::SUCCESS
}
