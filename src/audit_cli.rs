//! `metnos audit verify [--since DATE]`: walks the hash-chained records (the turn log and the
//! verdict log, [`metnos_kit::chain`]; the grant store's changes and the approval decisions'
//! journals, through the running policy and approval services) and names the first record edited, removed or reordered; exit 1 on any
//! break, or when a log cannot be read; exit 3 when nothing is broken but a journal could not
//! be checked (its service is not running: stopping one must not pass for intact), when a
//! log starts with records written before the chain began (unless `--allow-unchained`), or
//! when a log's gap records say records were answered but never written (issue 41).

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
        /// Accept the records written before the chain began (an older version's log):
        /// without it they are reported NOT CHECKED and the exit is 3.
        #[arg(long)]
        allow_unchained: bool,
    },
}

/// Whether the retention may have removed a log's file (its stem, or a day).
type Expired = dyn Fn(&str) -> bool;

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
            crate::admin::say(&format!(
                "{name} ({url}): intact — {records} record(s){}",
                day_root(&day)
            ));
            Found::Intact
        }
        Ok((_, broken, _)) => {
            crate::admin::say(&format!("{name} ({url}): BROKEN — {broken}"));
            Found::Broken
        }
        Err(status) if status.code() == tonic::Code::Unavailable => {
            crate::admin::say(&format!(
                "{name} ({url}): NOT CHECKED — the {service} service is not running (`metnos up`)"
            ));
            Found::Unchecked
        }
        Err(status) => {
            crate::admin::failed(service, url, &status);
            Found::Broken
        }
    }
}

/// Says what a file log's walk found: broken; gaps (records answered and never written) or
/// records from before the chain (unless accepted), not wholly checked; else intact.
fn said_log(
    name: &str,
    dir: &std::path::Path,
    report: metnos_kit::chain::Report,
    allow_unchained: bool,
) -> Found {
    let dir = dir.display();
    let root = day_root(&report.newest_day());
    match report.broken {
        Some(broken) => {
            crate::admin::say(&format!("{name} ({dir}): BROKEN — {broken}"));
            Found::Broken
        }
        None if report.not_logged > 0 => {
            crate::admin::say(&format!(
                "{name} ({dir}): GAPS — the chain is intact, but {} record(s) were answered and never written (the disk refused them; the first gap record is at {}){root}",
                report.not_logged,
                report.first_gap.as_deref().unwrap_or("?"),
            ));
            Found::Unchecked
        }
        None if report.unchained > 0 && !allow_unchained => {
            crate::admin::say(&format!(
                "{name} ({dir}): NOT CHECKED — {} record(s) at its start were written before the chain began and prove nothing (`--allow-unchained` accepts them); the {} after them are intact{root}",
                report.unchained, report.lines,
            ));
            Found::Unchecked
        }
        None => {
            let accepted = if report.unchained > 0 {
                format!(
                    "; {} from before the chain, accepted unchecked",
                    report.unchained
                )
            } else {
                String::new()
            };
            crate::admin::say(&format!(
                "{name} ({dir}): intact — {} file(s), {} record(s){accepted}{root}",
                report.files, report.lines,
            ));
            Found::Intact
        }
    }
}

pub async fn audit(config: &Config, command: AuditCommand) -> ExitCode {
    match command {
        AuditCommand::Verify {
            since,
            allow_unchained,
        } => verify(config, since.as_deref(), allow_unchained).await,
    }
}

async fn verify(config: &Config, since: Option<&str>, allow_unchained: bool) -> ExitCode {
    if let Some(since) = since
        && !(since.len() == 10 && since.parse::<jiff::civil::Date>().is_ok())
    {
        eprintln!(
            "metnos: --since `{}` is not a date in YYYY-MM-DD form",
            since.chars().take(32).collect::<String>()
        );
        return ExitCode::from(2);
    }
    // What the retention may have removed by now is no erasure.
    let now = metnos_kit::time::now_ms();
    let (keep_days, keep_months) = (
        config.scheduler.turn_log_days.get(),
        config.vaglio.log_retention_months.get(),
    );
    let turns_expired = move |day: &str| metnos_planner::turnlog::expired(day, keep_days, now);
    let verdicts_expired = move |month: &str| {
        jiff::Timestamp::from_millisecond(now)
            .is_ok_and(|now| metnos_vaglio::log::expired(month, keep_months, now))
    };
    let logs: [(&str, &str, Option<&str>, &Expired); 2] = [
        ("turn log", TURNS_DIR, since, &turns_expired),
        (
            "verdict log",
            VERDICTS_DIR,
            since.map(|s| &s[..7]),
            &verdicts_expired,
        ),
    ];
    let mut found = Vec::new();
    for (name, folder, since, expired) in logs {
        let dir = config.data_dir.join(folder);
        match metnos_kit::chain::verify(&dir, since, expired) {
            Ok(report) => found.push(said_log(name, &dir, report, allow_unchained)),
            Err(e) => {
                found.push(Found::Broken);
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
    found.push(said("grant changes", ServiceName::Policy, &url, answer));
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
    if found.contains(&Found::Broken) {
        ExitCode::FAILURE
    } else if found.contains(&Found::Unchecked) {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}
