//! `metnos vaglio judge …` and `metnos vaglio log …`: the vaglio from the terminal, one
//! JSON object per line.

use std::process::ExitCode;

use clap::Subcommand;
use metnos_kit::time::{from_timestamp, rfc3339};
use metnos_kit::{Config, ServiceName};
use metnos_proto::vaglio::v1 as pb;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;
use serde_json::{Value, json};

use crate::admin::{connect, failed, print_line};

const SERVICE: ServiceName = ServiceName::Vaglio;

#[derive(Debug, Subcommand)]
pub enum VaglioCommand {
    /// Judges one proposed call and prints the verdict.
    Judge {
        /// What the person asked.
        #[arg(long)]
        intent: String,
        /// The executor the call would run, e.g. fs_read.
        #[arg(long)]
        executor: String,
        /// Its arguments, a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// The capability the executor declares, e.g. code:exec.
        #[arg(long, default_value = "")]
        capability: String,
    },
    /// Reads the verdict log of a month (keys only, never values).
    Log {
        /// YYYY-MM; this month when left out.
        #[arg(long)]
        month: Option<String>,
        /// Only refused calls.
        #[arg(long)]
        blocked: bool,
    },
}

fn verdict_json(v: &pb::Verdict) -> Value {
    json!({
        "approved": v.approved,
        "reason": v.reason,
        "score": (v.score * 1000.0).round() / 1000.0,
        "blocked_by": match v.blocked_by() {
            pb::BlockedBy::Guard => json!("guard"),
            pb::BlockedBy::Judge => json!("judge"),
            _ => Value::Null,
        },
        "judge_kind": v.judge_kind,
        "rule_id": if v.rule_id.is_empty() { Value::Null } else { json!(v.rule_id) },
        "arg_key": if v.arg_key.is_empty() { Value::Null } else { json!(v.arg_key) },
        "ts": v.ts.as_ref().and_then(from_timestamp).map(rfc3339),
    })
}

pub async fn vaglio(config: &Config, command: VaglioCommand) -> ExitCode {
    let (channel, url) = match connect(config, SERVICE) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let mut client = VaglioServiceClient::new(channel);
    match command {
        VaglioCommand::Judge {
            intent,
            executor,
            args,
            capability,
        } => {
            let request = pb::JudgeRequest {
                intent,
                executor,
                args_json: args,
                context: Some(pb::JudgeContext {
                    capability,
                    ..Default::default()
                }),
            };
            match client.judge(request).await {
                Ok(r) => print_line(&verdict_json(&r.into_inner().verdict.unwrap_or_default())),
                Err(status) => return failed(SERVICE, &url, &status),
            }
        }
        VaglioCommand::Log { month, blocked } => {
            let request = pb::ListVerdictsRequest {
                month: month.unwrap_or_default(),
                blocked_only: blocked,
                limit: 0,
            };
            match client.list_verdicts(request).await {
                Ok(r) => {
                    let r = r.into_inner();
                    for record in r.records {
                        let mut line = verdict_json(&record.verdict.unwrap_or_default());
                        line["intent"] = json!(record.intent);
                        line["executor"] = json!(record.executor);
                        line["args_keys"] = json!(record.args_keys);
                        line["context_keys"] = json!(record.context_keys);
                        print_line(&line);
                    }
                    if r.log_write_failures > 0 {
                        eprintln!(
                            "metnos: {} verdict log line(s) could not be written",
                            r.log_write_failures
                        );
                    }
                }
                Err(status) => return failed(SERVICE, &url, &status),
            }
        }
    }
    ExitCode::SUCCESS
}
