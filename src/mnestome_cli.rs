//! `metnos mnestome list|show|forget` (issue 46): which executor's output Metnos has piped
//! into which executor's argument, how often it went well, and the tools the model asked
//! for that do not exist. Names only: the mnestome keeps no values.

use std::process::ExitCode;

use clap::Subcommand;
use metnos_kit::time::{from_timestamp, rfc3339};
use metnos_kit::{Config, ServiceName};
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;

use crate::admin::{connect, failed, say};

#[derive(Debug, Subcommand)]
pub enum MnestomeCommand {
    /// The strongest passages, the most asked-for missing tools, the shortcuts kept.
    List {
        /// How many of each (at most 500).
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// The passages, wishes and shortcuts naming EXECUTOR.
    Show {
        executor: String,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Forget every passage, wish and shortcut naming EXECUTOR.
    Forget { executor: String },
}

pub async fn mnestome(config: &Config, command: MnestomeCommand) -> ExitCode {
    let (channel, url) = match connect(config, ServiceName::Planner) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let mut client = PlannerServiceClient::new(channel);
    let answered = match command {
        MnestomeCommand::List { limit } => listed(&mut client, limit, String::new()).await,
        MnestomeCommand::Show { executor, limit } => listed(&mut client, limit, executor).await,
        MnestomeCommand::Forget { executor } => {
            let request = pb::ForgetPassagesRequest {
                executor: executor.clone(),
            };
            client.forget_passages(request).await.map(|r| {
                let n = r.into_inner().forgotten;
                say(&format!(
                    "forgot {n} passage(s), wish(es) and shortcut(s) naming {executor}"
                ));
            })
        }
    };
    match answered {
        Ok(()) => ExitCode::SUCCESS,
        Err(status) => failed(ServiceName::Planner, &url, &status),
    }
}

async fn listed(
    client: &mut PlannerServiceClient<metnos_kit::client::TracedChannel>,
    limit: u32,
    executor: String,
) -> Result<(), tonic::Status> {
    let request = pb::ListPassagesRequest { limit, executor };
    let r = client.list_passages(request).await?.into_inner();
    say(&format!("{} passage(s)", r.total));
    for p in &r.passages {
        say(&format!(
            "{}.{} → {}({})  weight {:.2}  {} of {} went well  last {}",
            p.from_executor,
            p.from_field,
            p.to_executor,
            p.to_arg,
            p.weight,
            p.successes,
            p.uses,
            when(p.last_used.as_ref())
        ));
    }
    if !r.wishes.is_empty() {
        say("asked for, not there:");
    }
    for w in &r.wishes {
        say(&format!(
            "{} from {}({})  asked {} time(s)  weight {:.2}  last {}",
            w.wanted,
            w.from_executor,
            w.arg_names.join(", "),
            w.uses,
            w.weight,
            when(w.last_used.as_ref())
        ));
    }
    if !r.shortcuts.is_empty() {
        say("shortcuts kept:");
    }
    for s in &r.shortcuts {
        let steps: Vec<&str> = std::iter::once(s.from_executor.as_str())
            .chain(s.chain.iter().map(String::as_str))
            .collect();
        say(&format!(
            "{}: {}  kept {}",
            s.name,
            steps.join(" → "),
            when(s.kept_at.as_ref())
        ));
    }
    Ok(())
}

fn when(at: Option<&prost_types::Timestamp>) -> String {
    at.and_then(from_timestamp).map(rfc3339).unwrap_or_default()
}
