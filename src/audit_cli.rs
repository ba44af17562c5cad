//! `metnos audit verify [--since DATE]`: walks the hash-chained records (the turn log and the
//! verdict log, [`metnos_kit::chain`]; the approval decisions' journal, through the running
//! approval service) and names the first record edited, removed or reordered; exit 1 on any
//! break, or when a log cannot be read. Not running, the approval service's journal is said
//! to be unchecked.

use std::process::ExitCode;

use clap::Subcommand;
use metnos_kit::datadir::{TURNS_DIR, VERDICTS_DIR};
use metnos_kit::{Config, ServiceName};
use metnos_proto::approval::v1::VerifyDecisionsRequest;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk the chained logs; report the first break (exit 1), or that they are intact.
    Verify {
        /// Only the days from this one on (YYYY-MM-DD; the verdict log from its month).
        #[arg(long)]
        since: Option<String>,
    },
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
                    "{name} ({}): intact — {} file(s), {} record(s)",
                    dir.display(),
                    report.files,
                    report.lines
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
    // The approval decisions: in the approval service's store, walked there (whole).
    let (channel, url) = match crate::admin::connect(config, ServiceName::Approval) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let mut approvals = ApprovalServiceClient::new(channel);
    match approvals
        .verify_decisions(VerifyDecisionsRequest::default())
        .await
    {
        Ok(answer) => {
            let answer = answer.into_inner();
            if answer.broken.is_empty() {
                println!(
                    "approval decisions ({url}): intact — {} record(s)",
                    answer.records
                );
            } else {
                intact = false;
                println!("approval decisions ({url}): BROKEN — {}", answer.broken);
            }
        }
        Err(status) if status.code() == tonic::Code::Unavailable => {
            eprintln!(
                "metnos: approval decisions not checked: the approval service at {url} is not running (`metnos up`)"
            );
        }
        Err(status) => {
            intact = false;
            crate::admin::failed(ServiceName::Approval, &url, &status);
        }
    }
    if intact {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
