//! A server's tools, listed through the `rmcp` SDK over stdio: the server is the command
//! the caller builds (the box around it is the caller's: admission starts it boxed), the
//! listing bounded in time, the child stopped after.

use std::time::Duration;

use super::ToolDefinition;
use super::connection::Connection;

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
    let connection = Connection::start(command, timeout, 16 * 1024 * 1024).await?;
    let tools = connection.tools.clone();
    connection.close();
    Ok(tools)
}
