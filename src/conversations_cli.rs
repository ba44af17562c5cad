//! `metnos conversations forget`: erases a person's conversations with Metnos (their
//! threads and every exchange in them) for good, after a confirmation; the planner's
//! turn log records that it happened and how much, never the words.

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
        /// Without asking (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

pub async fn conversations(config: &Config, command: ConversationsCommand) -> ExitCode {
    match command {
        ConversationsCommand::Forget { person, yes } => {
            forget(config, person.as_deref(), yes).await
        }
    }
}

async fn forget(config: &Config, person: Option<&str>, yes: bool) -> ExitCode {
    let person = match crate::telos_cli::person_of(person) {
        Ok(person) => person,
        Err(code) => return code,
    };
    if !yes {
        if !std::io::stdin().is_terminal() {
            eprintln!("metnos: erasing conversations asks first; without a terminal, add --yes");
            return ExitCode::from(2);
        }
        let question = format!("Erase every conversation of {person} for good?");
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
    };
    match PlannerServiceClient::new(channel)
        .forget_conversations(request)
        .await
    {
        Ok(answer) => {
            let exchanges = answer.into_inner().exchanges;
            say(&format!(
                "erased {exchanges} exchange(s) of {person}'s conversations"
            ));
            ExitCode::SUCCESS
        }
        Err(status) => failed(ServiceName::Planner, &url, &status),
    }
}
