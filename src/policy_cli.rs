//! `metnos policy …` and `metnos grants …`: the policy service from the terminal, one JSON
//! object per line (jq-friendly), as the seed's CLI (policy.md ch. 7).

use std::process::ExitCode;

use clap::Subcommand;
use metnos_core::level::AutonomyLevel;
use metnos_kit::time::{from_timestamp, parse_rfc3339, rfc3339, to_timestamp};
use metnos_kit::{Config, ServiceName};
use metnos_proto::common::v1::Principal;
use metnos_proto::policy::v1 as pb;
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;
use serde_json::{Value, json};

use crate::admin::{connect, failed, print_line};

const SERVICE: ServiceName = ServiceName::Policy;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// One line per capability of the registry, with its attributes.
    Registry,
    /// One line per autonomy level, with the outcome of each capability.
    Table,
    /// The effective outcome of a capability at a level; with --channel, --sender and
    /// --target, grants are consulted too.
    Check {
        /// ReadOnly, Supervised or Full.
        level: String,
        /// A capability of the registry, e.g. fs:write.
        capability: String,
        #[arg(long)]
        channel: Option<String>,
        #[arg(long)]
        sender: Option<String>,
        #[arg(long)]
        target: Option<String>,
    },
    /// What-if: the policy questions of past turns (the turn log) asked again at another
    /// level with the grants active now, and what would have changed.
    Replay {
        /// ReadOnly, Supervised or Full.
        #[arg(long)]
        level: String,
        /// How far back: N days (`7d`) or a date (YYYY-MM-DD).
        #[arg(long, default_value = "7d")]
        since: String,
        /// One JSON object instead of lines.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum GrantsCommand {
    /// Lists grants, newest first; active ones unless --all.
    List {
        #[arg(long)]
        channel: Option<String>,
        #[arg(long)]
        sender: Option<String>,
        /// Also revoked and expired grants.
        #[arg(long)]
        all: bool,
    },
    /// Records a grant by hand (normally approvals record them).
    Add {
        #[arg(long)]
        channel: String,
        #[arg(long)]
        sender: String,
        /// A grantable capability, e.g. fs:write.
        capability: String,
        /// A glob, a host (or *.domain) or an exact value, per the capability.
        target: String,
        /// When it stops counting (RFC 3339, e.g. 2027-01-01T00:00:00Z).
        #[arg(long, value_name = "TIME")]
        expires: Option<String>,
        /// Who is recording it (kept with the grant).
        #[arg(long, default_value = metnos_core::principal::TERMINAL)]
        by: String,
    },
    /// Revokes a grant by id; prints whether this call revoked it.
    Revoke { id: i64 },
    /// Revokes the grants not used for N days and prints each one it revoked.
    Prune {
        #[arg(long, value_name = "N")]
        unused_days: u32,
    },
}

fn outcome_name(value: i32) -> &'static str {
    match pb::Outcome::try_from(value) {
        Ok(pb::Outcome::Allowed) => "allowed",
        Ok(pb::Outcome::ApprovalRequired) => "approval_required",
        Ok(pb::Outcome::Denied) => "denied",
        _ => "unspecified",
    }
}

fn level_name(value: i32) -> &'static str {
    AutonomyLevel::from_wire(value).map_or("unspecified", AutonomyLevel::as_str)
}

fn time_json(ts: Option<&prost_types::Timestamp>) -> Value {
    ts.and_then(from_timestamp)
        .map_or(Value::Null, |ms| Value::String(rfc3339(ms)))
}

fn grant_json(grant: &pb::Grant) -> Value {
    let principal = grant.principal.clone().unwrap_or_default();
    json!({
        "id": grant.id,
        "channel": principal.channel,
        "sender_id": principal.sender_id,
        "capability": grant.capability,
        "target": grant.target,
        "granted_at": time_json(grant.granted_at.as_ref()),
        "expires_at": time_json(grant.expires_at.as_ref()),
        "granted_by": grant.granted_by,
        "revoked_at": time_json(grant.revoked_at.as_ref()),
        "last_used_at": time_json(grant.last_used_at.as_ref()),
    })
}

fn principal(
    channel: Option<String>,
    sender: Option<String>,
) -> Result<Option<Principal>, ExitCode> {
    match (channel, sender) {
        (Some(channel), Some(sender_id)) => Ok(Some(Principal { channel, sender_id })),
        (None, None) => Ok(None),
        _ => {
            eprintln!("metnos: --channel and --sender go together");
            Err(ExitCode::from(2))
        }
    }
}

pub async fn policy(config: &Config, command: PolicyCommand) -> ExitCode {
    let (channel, url) = match connect(config, SERVICE) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let mut client = PolicyServiceClient::new(channel);
    match command {
        PolicyCommand::Registry => {
            let response = match client
                .list_capabilities(pb::ListCapabilitiesRequest {})
                .await
            {
                Ok(r) => r.into_inner(),
                Err(status) => return failed(SERVICE, &url, &status),
            };
            for c in response.capabilities {
                print_line(&json!({
                    "name": c.name,
                    "critical": c.critical,
                    "default_approval": c.default_approval().as_str_name().trim_start_matches("DEFAULT_APPROVAL_").to_lowercase(),
                    "target_kind": c.target_kind().as_str_name().trim_start_matches("TARGET_KIND_").to_lowercase(),
                    "reads_only": c.reads_only,
                    "description": c.description,
                }));
            }
        }
        PolicyCommand::Table => {
            let response = match client.get_table(pb::GetTableRequest {}).await {
                Ok(r) => r.into_inner(),
                Err(status) => return failed(SERVICE, &url, &status),
            };
            for row in response.rows {
                let mut line = serde_json::Map::new();
                line.insert("level".into(), json!(level_name(row.level)));
                for cell in row.cells {
                    line.insert(cell.capability, json!(outcome_name(cell.outcome)));
                }
                print_line(&Value::Object(line));
            }
        }
        PolicyCommand::Check {
            level,
            capability,
            channel,
            sender,
            target,
        } => {
            let level = match AutonomyLevel::parse(&level) {
                Ok(level) => level,
                Err(e) => {
                    eprintln!("metnos: {e}");
                    return ExitCode::from(2);
                }
            };
            let principal = match principal(channel, sender) {
                Ok(p) => p,
                Err(code) => return code,
            };
            let request = pb::CheckRequest {
                level: level.to_wire(),
                capability: capability.clone(),
                principal,
                target: target.unwrap_or_default(),
            };
            let response = match client.check(request).await {
                Ok(r) => r.into_inner(),
                Err(status) => return failed(SERVICE, &url, &status),
            };
            print_line(&json!({
                "level": level.as_str(),
                "capability": capability,
                "outcome": outcome_name(response.outcome),
                "table_outcome": outcome_name(response.table_outcome),
                "decided_by": match pb::Decider::try_from(response.decided_by) {
                    Ok(pb::Decider::Grant) => "grant",
                    _ => "table",
                },
                "grant_id": response.grant_id,
                "reason": response.reason,
            }));
        }
        PolicyCommand::Replay { level, since, json } => {
            let level = match AutonomyLevel::parse(&level) {
                Ok(level) => level,
                Err(e) => {
                    eprintln!("metnos: {e}");
                    return ExitCode::from(2);
                }
            };
            let today = jiff::Timestamp::now()
                .to_zoned(jiff::tz::TimeZone::UTC)
                .date();
            let since = match crate::replay_cli::since_day(&since, today) {
                Ok(day) => day,
                Err(e) => {
                    eprintln!("metnos: {e}");
                    return ExitCode::from(2);
                }
            };
            // The grants active now, everyone's (a step names its grant by id).
            let request = pb::ListGrantsRequest::default();
            let active = match client.list_grants(request).await {
                Ok(r) => r.into_inner().grants.iter().map(|g| g.id).collect(),
                Err(status) => return failed(SERVICE, &url, &status),
            };
            return crate::replay_cli::replay(config, level, &since, &active, json);
        }
    }
    ExitCode::SUCCESS
}

pub async fn grants(config: &Config, command: GrantsCommand) -> ExitCode {
    let (channel, url) = match connect(config, SERVICE) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let mut client = PolicyServiceClient::new(channel);
    match command {
        GrantsCommand::List {
            channel,
            sender,
            all,
        } => {
            let request = pb::ListGrantsRequest {
                channel: channel.unwrap_or_default(),
                sender_id: sender.unwrap_or_default(),
                include_inactive: all,
            };
            match client.list_grants(request).await {
                Ok(r) => r
                    .into_inner()
                    .grants
                    .iter()
                    .for_each(|g| print_line(&grant_json(g))),
                Err(status) => return failed(SERVICE, &url, &status),
            }
        }
        GrantsCommand::Add {
            channel,
            sender,
            capability,
            target,
            expires,
            by,
        } => {
            let expires_at = match expires.as_deref().map(parse_rfc3339).transpose() {
                Ok(ms) => ms.map(to_timestamp),
                Err(e) => {
                    eprintln!("metnos: --expires: {e}");
                    return ExitCode::from(2);
                }
            };
            let request = pb::RecordGrantRequest {
                principal: Some(Principal {
                    channel,
                    sender_id: sender,
                }),
                capability,
                target,
                expires_at,
                granted_by: by,
                ..Default::default()
            };
            match client.record_grant(request).await {
                Ok(r) => print_line(&grant_json(&r.into_inner().grant.unwrap_or_default())),
                Err(status) => return failed(SERVICE, &url, &status),
            }
        }
        GrantsCommand::Revoke { id } => {
            match client
                .revoke_grant(pb::RevokeGrantRequest {
                    grant_id: id,
                    principal: None,
                })
                .await
            {
                Ok(r) => print_line(&json!({ "id": id, "revoked": r.into_inner().revoked })),
                Err(status) => return failed(SERVICE, &url, &status),
            }
        }
        GrantsCommand::Prune { unused_days } => {
            match client
                .prune_grants(pb::PruneGrantsRequest { unused_days })
                .await
            {
                Ok(r) => {
                    let revoked = r.into_inner().revoked;
                    revoked.iter().for_each(|g| print_line(&grant_json(g)));
                    eprintln!(
                        "metnos: revoked {} grant(s) unused for {unused_days} day(s)",
                        revoked.len()
                    );
                }
                Err(status) => return failed(SERVICE, &url, &status),
            }
        }
    }
    ExitCode::SUCCESS
}
