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

mod common;

use std::path::PathBuf;

use common::Fixture;
use metnos_executors::Runner;
use metnos_executors::mcp::admit;
use metnos_executors::mcp::pool::{self, Launch};
use serde_json::json;

/// The time server as the owner admits it: its program's digest, its virtual environment
/// readable.
fn time_launch() -> Launch {
    let program = PathBuf::from(std::env::var("METNOS_TEST_MCP_TIME").expect(
        "METNOS_TEST_MCP_TIME is not set: run the tests with `make test`, which installs mcp-server-time",
    ));
    let read = admit::default_read(&program);
    Launch {
        server: "time".into(),
        program_sha256: metnos_executors::digest::sha256_file(&program).unwrap(),
        program,
        args: vec!["--local-timezone=Europe/Rome".into()],
        read,
    }
}

fn mcp_runner(f: &Fixture) -> Runner {
    Runner {
        mcp_dir: f.root.path().join("mcp"),
        ..f.runner()
    }
}

/// Admits every tool `launch`'s server lists, as proposed, and signs the catalog.
async fn admit_all(f: &Fixture, runner: &Runner, launch: &Launch) -> Vec<String> {
    let catalog = f.load();
    let connection = pool::connect(runner, &catalog, launch).await.unwrap();
    let mut names = Vec::new();
    for tool in &connection.tools {
        let manifest = admit::manifest_for(launch, tool, &admit::propose(tool)).unwrap();
        admit::write(&f.catalog_dir(), &manifest).unwrap();
        names.push(manifest.name);
    }
    f.sign();
    names
}

#[tokio::test]
async fn an_admitted_tool_of_a_real_server_runs_in_the_box_through_the_runner() {
    let f = Fixture::with_builtins();
    let runner = mcp_runner(&f);
    let launch = time_launch();
    let names = admit_all(&f, &runner, &launch).await;
    assert!(
        names.contains(&"time__get_current_time".to_owned()),
        "{names:?}"
    );
    let catalog = f.load();
    assert!(catalog.refused().is_empty(), "{:?}", catalog.refused());
    let now = catalog.get("time__get_current_time").unwrap();
    assert_eq!(now.manifest.capabilities, ["time:read"]);

    let seen = runner
        .check_and_run(
            &catalog,
            "time__get_current_time",
            &json!({"timezone": "Asia/Tokyo"}),
        )
        .await;
    assert!(seen.ok, "{seen:?}");
    let text = seen.content.unwrap();
    assert!(text.as_str().unwrap().contains("Asia/Tokyo"), "{text}");
    let meta = seen.metadata.unwrap();
    assert_eq!(meta["mcp_server"], "time");
    // One process serves the next call too.
    let states = runner.mcp.states().await;
    assert_eq!(states.len(), 1);
    assert!(states[0].connected);
    assert!(states[0].disabled.is_empty(), "{states:?}");
    let again = runner
        .check_and_run(
            &catalog,
            "time__get_current_time",
            &json!({"timezone": "UTC"}),
        )
        .await;
    assert!(again.ok, "{again:?}");

    // The pinned schema is checked before the server sees anything.
    let bad = runner
        .check_and_run(&catalog, "time__get_current_time", &json!({"timezone": 5}))
        .await;
    assert!(!bad.ok);
    assert!(bad.error.unwrap().contains("do not match its schema"));
}
