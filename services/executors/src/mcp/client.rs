//! A server's tools, listed through the `rmcp` SDK over stdio: the server is the command
//! the caller builds (the box around it is the caller's: admission starts it boxed), the
//! listing bounded in time, the child stopped after.

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;

use super::ToolDefinition;

/// Why a server's tools could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the MCP server could not be started: {0}")]
    Start(std::io::Error),
    #[error("the MCP server did not complete its handshake: {0}")]
    Handshake(String),
    #[error("the MCP server did not list its tools: {0}")]
    List(String),
    #[error("the MCP server did not answer within {} s", .0.as_secs())]
    Timeout(Duration),
    #[error("the MCP server listed a tool Metnos cannot read: {0}")]
    Tool(String),
    #[error("{error}; it said: {said}")]
    Said {
        error: Box<ClientError>,
        said: String,
    },
}

/// The tools the server `command` starts lists, within `timeout` for the whole exchange
/// (start, handshake, every page of the listing); the server is stopped after.
pub async fn list_tools(
    command: tokio::process::Command,
    timeout: Duration,
) -> Result<Vec<ToolDefinition>, ClientError> {
    let transport = TokioChildProcess::new(command).map_err(ClientError::Start)?;
    let exchange = async {
        let client = ().serve(transport).await.map_err(|e| ClientError::Handshake(e.to_string()))?;
        let listed = client
            .list_all_tools()
            .await
            .map_err(|e| ClientError::List(e.to_string()));
        let _ = client.cancel().await;
        listed
    };
    let tools = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| ClientError::Timeout(timeout))??;
    tools
        .into_iter()
        .map(|tool| {
            let value =
                serde_json::to_value(&tool).map_err(|e| ClientError::Tool(e.to_string()))?;
            serde_json::from_value(value).map_err(|e| ClientError::Tool(e.to_string()))
        })
        .collect()
}
