//! MCP servers' tools listed through the `rmcp` SDK (issue 43, first step): a real server
//! from PyPI (`mcp-server-time`, installed by the README's test command), pinned as the
//! owner would admit it; a server that never answers, or a program that is not there,
//! is a clear error within the time given.

use std::time::Duration;

use metnos_executors::mcp::client::{ClientError, list_tools};
use metnos_executors::mcp::{Finding, Pin, review};

fn time_server() -> tokio::process::Command {
    let program = std::env::var("METNOS_TEST_MCP_TIME").expect(
        "METNOS_TEST_MCP_TIME is not set: run the tests with `make test`, which installs mcp-server-time",
    );
    let mut command = tokio::process::Command::new(program);
    command.arg("--local-timezone=Europe/Rome");
    command
}

#[tokio::test]
async fn a_real_server_s_tools_are_listed_and_pin_as_admitted() {
    let tools = list_tools(time_server(), Duration::from_secs(60))
        .await
        .unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"get_current_time"), "{names:?}");
    assert!(names.contains(&"convert_time"), "{names:?}");
    let now = tools.iter().find(|t| t.name == "get_current_time").unwrap();
    assert!(!now.description.is_empty());
    assert_eq!(now.input_schema["type"], "object");
    assert!(
        now.input_schema["properties"]["timezone"].is_object(),
        "{:?}",
        now.input_schema
    );

    // Admitted as listed, a second listing reviews as unchanged, tool by tool.
    let pins: Vec<Pin<'_>> = tools
        .iter()
        .map(|t| Pin {
            tool: &t.name,
            description: &t.description,
            input_schema: &t.input_schema,
        })
        .collect();
    let again = list_tools(time_server(), Duration::from_secs(60))
        .await
        .unwrap();
    let findings = review(&pins, &again);
    assert_eq!(findings.len(), tools.len());
    assert!(
        findings.iter().all(|f| matches!(f, Finding::Unchanged(_))),
        "{findings:?}"
    );
    assert_eq!(tools[0].sha256(), again[0].sha256());
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_and_a_missing_one_does_not_start() {
    let mut silent = tokio::process::Command::new("sleep");
    silent.arg("30");
    let started = std::time::Instant::now();
    let err = list_tools(silent, Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Timeout(_)), "{err}");
    assert_eq!(err.to_string(), "the MCP server did not answer within 2 s");
    // A hang guard, not a timing assertion: the child was not waited for.
    assert!(started.elapsed() < Duration::from_secs(25));

    let missing = tokio::process::Command::new("/nonexistent/mcp-server");
    let err = list_tools(missing, Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Start(_)), "{err}");

    // A program that exits at once is no server.
    let gone = tokio::process::Command::new("true");
    let err = list_tools(gone, Duration::from_secs(10)).await.unwrap_err();
    assert!(
        matches!(err, ClientError::Handshake(_) | ClientError::List(_)),
        "{err}"
    );
}
