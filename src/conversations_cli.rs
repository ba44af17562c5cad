//! `metnos conversations forget`: erases a person's conversations with Metnos (their
//! threads and every exchange in them; with `--memory` what Metnos remembers for them too)
//! for good, after a confirmation; the planner's turn log records that it happened and how
//! much, never the words.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Subcommand;
use metnos_kit::{Config, ServiceName};
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;

use crate::admin::{connect, failed, say};

#[derive(Debug, Subcommand)]
pub enum ConversationsCommand {
    /// Erase every conversation of a person (all their threads on their channel), for
    /// good; asks first.
    Forget {
        /// Whose, as <channel>:<sender> (e.g. telegram:42); yours on the terminal when
        /// left out.
        #[arg(long)]
        person: Option<String>,
        /// What Metnos remembers for them (memory_save) too.
        #[arg(long)]
        memory: bool,
        /// Without asking (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

pub async fn conversations(config: &Config, command: ConversationsCommand) -> ExitCode {
    match command {
        ConversationsCommand::Forget {
            person,
            memory,
            yes,
        } => forget(config, person.as_deref(), memory, yes).await,
    }
}

async fn forget(config: &Config, person: Option<&str>, memory: bool, yes: bool) -> ExitCode {
    let person = match crate::telos_cli::person_of(person) {
        Ok(person) => person,
        Err(code) => return code,
    };
    if !yes {
        if !std::io::stdin().is_terminal() {
            eprintln!("metnos: erasing conversations asks first; without a terminal, add --yes");
            return ExitCode::from(2);
        }
        let question = if memory {
            format!(
                "Erase every conversation of {person}, and what Metnos remembers for them, for good?"
            )
        } else {
            format!("Erase every conversation of {person} for good?")
        };
        if !crate::telos_cli::ask(&question) {
            eprintln!("nothing was erased");
            return ExitCode::FAILURE;
        }
    }
    let (channel, url) = match connect(config, ServiceName::Planner) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let request = pb::ForgetConversationsRequest {
        principal: Some(person.to_proto()),
        memory,
    };
    match PlannerServiceClient::new(channel)
        .forget_conversations(request)
        .await
    {
        Ok(answer) => {
            let answer = answer.into_inner();
            let exchanges = answer.exchanges;
            say(&format!(
                "erased {exchanges} exchange(s) of {person}'s conversations"
            ));
            if memory {
                say(&format!("erased {} remembered entries", answer.memories));
            }
            ExitCode::SUCCESS
        }
        Err(status) => failed(ServiceName::Planner, &url, &status),
    }
}
