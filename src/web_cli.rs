//! `metnos web login`: a one-time link to the owner's spectator page (the gateway's
//! `CreateWebLogin`, asked with the owner's certificate: only the owner signs in).

use std::process::ExitCode;

use clap::Subcommand;
use metnos_kit::{Config, ServiceName};
use metnos_proto::gateway::v1::CreateWebLoginRequest;
use metnos_proto::gateway::v1::gateway_service_client::GatewayServiceClient;

#[derive(Debug, Subcommand)]
pub enum WebCommand {
    /// Print a one-time sign-in link to the web page (it works once, for a few minutes).
    Login,
}

pub async fn web(config: &Config, command: WebCommand) -> ExitCode {
    match command {
        WebCommand::Login => login(config).await,
    }
}

async fn login(config: &Config) -> ExitCode {
    let (channel, url) = match crate::admin::connect(config, ServiceName::Gateway) {
        Ok(found) => found,
        Err(code) => return code,
    };
    match GatewayServiceClient::new(channel)
        .create_web_login(CreateWebLoginRequest {})
        .await
    {
        Ok(answer) => {
            let answer = answer.into_inner();
            let minutes = answer
                .expires_at
                .as_ref()
                .and_then(metnos_kit::time::from_timestamp)
                .map_or(0, |at| (at - metnos_kit::time::now_ms()).max(0) / 60_000);
            // The link alone on stdout (for a script or a browser); the rest on stderr.
            println!("{}", answer.url);
            eprintln!(
                "Open it in your browser within {minutes} minute(s); it works once. Anyone with it can sign in until then."
            );
            ExitCode::SUCCESS
        }
        Err(status) if status.code() == tonic::Code::FailedPrecondition => {
            eprintln!("metnos: {}", crate::admin::terminal(status.message()));
            ExitCode::FAILURE
        }
        Err(status) => crate::admin::failed(ServiceName::Gateway, &url, &status),
    }
}
