//! `metnos audit verify [--since DATE]`: walks the hash-chained records (the turn log and the
//! verdict log, [`metnos_kit::chain`]; the grant store's changes and the approval decisions'
//! journals, through the running policy and approval services) and names the first record edited, removed or reordered; exit 1 on any
//! break, or when a log cannot be read; exit 3 when nothing is broken but a journal could not
//! be checked (its service is not running: stopping one must not pass for intact).

use std::process::ExitCode;

use clap::Subcommand;
use metnos_kit::datadir::{TURNS_DIR, VERDICTS_DIR};
use metnos_kit::{Config, ServiceName};
use metnos_proto::approval::v1::VerifyDecisionsRequest;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::policy::v1::VerifyGrantChangesRequest;
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk the chained logs; report the first break (exit 1), or that they are intact.
    Verify {
        /// Only the days from this one on (YYYY-MM-DD; the verdict log from its month).
        #[arg(long)]
        since: Option<String>,
    },
}

/// What a walk found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    Intact,
    Broken,
    /// Its service is not running.
    Unchecked,
}

/// The newest daily root as a line's end (`; daily root 2026-11-26: seq 12, sha256 …`).
fn day_root(day: &str) -> String {
    if day.is_empty() {
        String::new()
    } else {
        format!("; daily root {day}")
    }
}

/// Says what a service's walk of its journal found.
fn said(
    name: &str,
    service: ServiceName,
    url: &str,
    answer: Result<(u64, String, String), tonic::Status>,
) -> Found {
    match answer {
        Ok((records, broken, day)) if broken.is_empty() => {
            println!(
                "{name} ({url}): intact — {records} record(s){}",
                day_root(&day)
            );
            Found::Intact
        }
        Ok((_, broken, _)) => {
            println!("{name} ({url}): BROKEN — {broken}");
            Found::Broken
        }
        Err(status) if status.code() == tonic::Code::Unavailable => {
            println!(
                "{name} ({url}): NOT CHECKED — the {service} service is not running (`metnos up`)"
            );
            Found::Unchecked
        }
        Err(status) => {
            crate::admin::failed(service, url, &status);
            Found::Broken
        }
    }
}

pub async fn audit(config: &Config, command: AuditCommand) -> ExitCode {
    match command {
        AuditCommand::Verify { since } => verify(config, since.as_deref()).await,
    }
}

async fn verify(config: &Config, since: Option<&str>) -> ExitCode {
    if let Some(since) = since
        && !(since.len() == 10 && since.parse::<jiff::civil::Date>().is_ok())
    {
        eprintln!(
            "metnos: --since `{}` is not a date in YYYY-MM-DD form",
            since.chars().take(32).collect::<String>()
        );
        return ExitCode::from(2);
    }
    let logs = [
        ("turn log", TURNS_DIR, since),
        ("verdict log", VERDICTS_DIR, since.map(|s| &s[..7])),
    ];
    let mut intact = true;
    for (name, folder, since) in logs {
        let dir = config.data_dir.join(folder);
        match metnos_kit::chain::verify(&dir, since) {
            Ok(report) => match report.broken {
                None => println!(
                    "{name} ({}): intact — {} file(s), {} record(s){}{}",
                    dir.display(),
                    report.files,
                    report.lines,
                    if report.unchained > 0 {
                        format!("; {} from before the chain, not checked", report.unchained)
                    } else {
                        String::new()
                    },
                    day_root(&report.newest_day())
                ),
                Some(broken) => {
                    intact = false;
                    println!("{name} ({}): BROKEN — {broken}", dir.display());
                }
            },
            Err(e) => {
                intact = false;
                eprintln!("metnos: the {name} cannot be read ({}): {e}", dir.display());
            }
        }
    }
    // The journals in the services' stores, walked there (whole): the grant store's changes
    // (policy) and the approval decisions.
    let (channel, url) = match crate::admin::connect(config, ServiceName::Policy) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let answer = PolicyServiceClient::new(channel)
        .verify_grant_changes(VerifyGrantChangesRequest::default())
        .await
        .map(|a| {
            let a = a.into_inner();
            (a.records, a.broken, a.newest_day_root)
        });
    let mut found = vec![said("grant changes", ServiceName::Policy, &url, answer)];
    let (channel, url) = match crate::admin::connect(config, ServiceName::Approval) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let answer = ApprovalServiceClient::new(channel)
        .verify_decisions(VerifyDecisionsRequest::default())
        .await
        .map(|a| {
            let a = a.into_inner();
            (a.records, a.broken, a.newest_day_root)
        });
    found.push(said(
        "approval decisions",
        ServiceName::Approval,
        &url,
        answer,
    ));
    if !intact || found.contains(&Found::Broken) {
        ExitCode::FAILURE
    } else if found.contains(&Found::Unchecked) {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}
