//! `metnos pair approve|list|set-level|revoke`: who may talk to Metnos, at which level.

use std::process::ExitCode;

use clap::Subcommand;
use metnos_kit::time::{from_timestamp, rfc3339};
use metnos_kit::{Config, ServiceName};
use metnos_proto::common::v1 as common;
use metnos_proto::gateway::v1 as pb;
use metnos_proto::gateway::v1::gateway_service_client::GatewayServiceClient;
use serde_json::json;

use crate::admin::{connect, failed, print_line};
use metnos_core::level::AutonomyLevel;

const SERVICE: ServiceName = ServiceName::Gateway;

#[derive(Debug, Subcommand)]
pub enum PairCommand {
    /// Pairs the person who received CODE, at a level.
    Approve {
        code: String,
        /// ReadOnly, Supervised or Full (any case).
        #[arg(long, value_name = "LEVEL")]
        level: AutonomyLevel,
    },
    /// Everyone paired, one JSON object per line.
    List,
    /// Changes a paired person's level. PERSON is channel:sender_id, e.g. telegram:12345.
    SetLevel {
        person: String,
        /// ReadOnly, Supervised or Full (any case).
        #[arg(long, value_name = "LEVEL")]
        level: AutonomyLevel,
    },
    /// Unpairs a person (channel:sender_id); nothing they send reaches Metnos afterwards.
    Revoke { person: String },
}

fn person(text: &str) -> Result<common::Principal, ExitCode> {
    match text.split_once(':') {
        Some((channel, sender)) if !channel.is_empty() && !sender.is_empty() => {
            Ok(common::Principal {
                channel: channel.to_owned(),
                sender_id: sender.to_owned(),
            })
        }
        _ => {
            eprintln!("metnos: `{text}` is not channel:sender_id (e.g. telegram:12345)");
            Err(ExitCode::FAILURE)
        }
    }
}

fn pairing_json(p: &pb::Pairing) -> serde_json::Value {
    let principal = p.principal.clone().unwrap_or_default();
    json!({
        "channel": principal.channel,
        "sender_id": principal.sender_id,
        "display_name": p.display_name,
        "level": common::AutonomyLevel::try_from(p.level).map(|l| l.as_str_name().trim_start_matches("AUTONOMY_LEVEL_").to_lowercase()).unwrap_or_default(),
        "language": if p.language == common::Language::English as i32 { "en" } else { "it" },
        "paired_at": p.paired_at.as_ref().and_then(from_timestamp).map(rfc3339),
    })
}

pub async fn pair(config: &Config, command: PairCommand) -> ExitCode {
    let (channel, url) = match connect(config, SERVICE) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let mut client = GatewayServiceClient::new(channel);
    let result = match command {
        PairCommand::Approve { code, level: l } => client
            .approve_pairing(pb::ApprovePairingRequest {
                code,
                level: l.to_wire(),
            })
            .await
            .map(|r| vec![r.into_inner().pairing.unwrap_or_default()]),
        PairCommand::List => client
            .list_pairings(pb::ListPairingsRequest {})
            .await
            .map(|r| r.into_inner().pairings),
        PairCommand::SetLevel {
            person: p,
            level: l,
        } => {
            let principal = match person(&p) {
                Ok(p) => p,
                Err(code) => return code,
            };
            client
                .set_level(pb::SetLevelRequest {
                    principal: Some(principal),
                    level: l.to_wire(),
                })
                .await
                .map(|r| vec![r.into_inner().pairing.unwrap_or_default()])
        }
        PairCommand::Revoke { person: p } => {
            let principal = match person(&p) {
                Ok(p) => p,
                Err(code) => return code,
            };
            return match client
                .revoke_pairing(pb::RevokePairingRequest {
                    principal: Some(principal),
                })
                .await
            {
                Ok(r) => {
                    print_line(&json!({"revoked": r.into_inner().revoked}));
                    ExitCode::SUCCESS
                }
                Err(status) => failed(SERVICE, &url, &status),
            };
        }
    };
    match result {
        Ok(pairings) => {
            for p in &pairings {
                print_line(&pairing_json(p));
            }
            ExitCode::SUCCESS
        }
        Err(status) => failed(SERVICE, &url, &status),
    }
}
