//! `metnos memory list|search|forget`: what Metnos remembers for a person (what the model
//! saved with `memory_save`), each entry with when and where its words came from.

use std::process::ExitCode;

use clap::Subcommand;
use metnos_kit::time::{from_timestamp, rfc3339};
use metnos_kit::{Config, ServiceName};
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;

use crate::admin::{connect, failed, say};

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// The newest entries, with how many there are and how many came from the world.
    List {
        /// Whose, as <channel>:<sender> (e.g. telegram:42); yours on the terminal when
        /// left out.
        #[arg(long)]
        person: Option<String>,
        /// How many (at most 50).
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// The entries holding words of QUERY, best first.
    Search {
        query: String,
        #[arg(long)]
        person: Option<String>,
        #[arg(long, default_value_t = 10)]
        limit: u32,
    },
    /// Forget one entry, by its id (as `list` and `search` show it).
    Forget {
        id: String,
        #[arg(long)]
        person: Option<String>,
    },
}

pub async fn memory(config: &Config, command: MemoryCommand) -> ExitCode {
    let person = match &command {
        MemoryCommand::List { person, .. }
        | MemoryCommand::Search { person, .. }
        | MemoryCommand::Forget { person, .. } => crate::telos_cli::person_of(person.as_deref()),
    };
    let person = match person {
        Ok(person) => person.to_proto(),
        Err(code) => return code,
    };
    let (channel, url) = match connect(config, ServiceName::Planner) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let mut client = PlannerServiceClient::new(channel);
    let answered = match command {
        MemoryCommand::List { limit, .. } => {
            let request = pb::ListMemoriesRequest {
                principal: Some(person),
                limit,
            };
            client.list_memories(request).await.map(|r| {
                let r = r.into_inner();
                say(&format!(
                    "{} entries ({} from the world)",
                    r.total, r.from_the_world
                ));
                r.entries.iter().for_each(show);
            })
        }
        MemoryCommand::Search { query, limit, .. } => {
            let request = pb::SearchMemoriesRequest {
                principal: Some(person),
                query,
                limit,
            };
            client.search_memories(request).await.map(|r| {
                let r = r.into_inner();
                if r.entries.is_empty() {
                    say("nothing found");
                }
                r.entries.iter().for_each(show);
            })
        }
        MemoryCommand::Forget { id, .. } => {
            let request = pb::ForgetMemoryRequest {
                principal: Some(person),
                id: id.clone(),
            };
            client
                .forget_memory(request)
                .await
                .map(|_| say(&format!("forgot {id}")))
        }
    };
    match answered {
        Ok(()) => ExitCode::SUCCESS,
        Err(status) => failed(ServiceName::Planner, &url, &status),
    }
}

/// One entry: its id, when it was saved, its words, and where they came from.
fn show(entry: &pb::MemoryEntry) {
    let saved = entry
        .saved_at
        .as_ref()
        .and_then(from_timestamp)
        .map(rfc3339)
        .unwrap_or_default();
    let from = if entry.sources.is_empty() {
        "your words".to_owned()
    } else {
        format!("from {}", entry.sources.join(", "))
    };
    say(&format!(
        "{}  {saved}  «{}»  ({from})",
        entry.id, entry.text
    ));
}
