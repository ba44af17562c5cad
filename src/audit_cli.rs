//! `metnos audit verify [--since DATE]`: walks the hash-chained records (the turn log and the
//! verdict log, [`metnos_kit::chain`]) and names the first record edited, removed or
//! reordered; exit 1 on any break, or when a log cannot be read.

use std::process::ExitCode;

use clap::Subcommand;
use metnos_kit::Config;
use metnos_kit::datadir::{TURNS_DIR, VERDICTS_DIR};

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk the chained logs; report the first break (exit 1), or that they are intact.
    Verify {
        /// Only the days from this one on (YYYY-MM-DD; the verdict log from its month).
        #[arg(long)]
        since: Option<String>,
    },
}

pub fn audit(config: &Config, command: AuditCommand) -> ExitCode {
    match command {
        AuditCommand::Verify { since } => verify(config, since.as_deref()),
    }
}

fn verify(config: &Config, since: Option<&str>) -> ExitCode {
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
    if intact {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
