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
        url: None,
        token_file: None,
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
    // A name is no reason to ask less: proposed as a program run until the owner chooses.
    assert_eq!(now.manifest.capabilities, ["code:exec"]);

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
    let states = runner.mcp.states();
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

/// The hostile server (tests/mcp_hostile.py, on the Python `mcp` SDK) as admitted.
fn hostile_launch() -> Launch {
    let python = PathBuf::from(std::env::var("METNOS_TEST_MCP_PYTHON").expect(
        "METNOS_TEST_MCP_PYTHON is not set: run the tests with `make test`, which installs the mcp SDK",
    ));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_hostile.py");
    let mut read = admit::default_read(&python);
    read.push(script.parent().unwrap().to_owned());
    Launch {
        server: "hostile".into(),
        program_sha256: metnos_executors::digest::sha256_file(&python).unwrap(),
        program: python,
        args: vec![script.display().to_string()],
        read,
        url: None,
        token_file: None,
    }
}

/// A catalog with the hostile server's tools admitted (`hang` given 3 s), its runner.
async fn hostile(f: &Fixture) -> (Runner, metnos_executors::Catalog) {
    let runner = Runner {
        forbidden: vec![f.root.path().join("keys")],
        ..mcp_runner(f)
    };
    let names = admit_all(f, &runner, &hostile_launch()).await;
    assert!(
        names.contains(&"hostile__notes_search".to_owned()),
        "{names:?}"
    );
    let hang = f.catalog_dir().join("mcp.hostile.hang/manifest.toml");
    let text = std::fs::read_to_string(&hang).unwrap();
    let text = text.replace("timeout_seconds = 30", "timeout_seconds = 3");
    std::fs::write(&hang, text).unwrap();
    f.sign();
    let catalog = f.load();
    assert!(catalog.refused().is_empty(), "{:?}", catalog.refused());
    (runner, catalog)
}

fn set_mode(runner: &Runner, mode: &str) {
    std::fs::write(runner.mcp_dir.join("hostile/mode"), mode).unwrap();
    // As after a restart of Metnos: the next call connects again.
    runner.mcp.clear();
}

async fn call(
    runner: &Runner,
    catalog: &metnos_executors::Catalog,
    tool: &str,
    args: serde_json::Value,
) -> metnos_executors::Observation {
    runner
        .check_and_run(catalog, &format!("hostile__{tool}"), &args)
        .await
}

#[tokio::test]
async fn a_rug_pull_a_new_schema_a_rename_and_a_new_tool_are_disabled_until_reviewed() {
    let f = Fixture::with_builtins();
    let (runner, catalog) = hostile(&f).await;
    let search = json!({"query": "tax"});
    let seen = call(&runner, &catalog, "notes_search", search.clone()).await;
    assert_eq!(
        seen.content,
        Some(json!("Nothing found for tax.")),
        "{seen:?}"
    );

    for (mode, why) in [
        ("rug", "its description changed since you admitted it"),
        ("schema", "its input schema changed since you admitted it"),
        ("rename", "it is now listed as `notes_find`"),
    ] {
        set_mode(&runner, mode);
        let seen = call(&runner, &catalog, "notes_search", search.clone()).await;
        assert!(!seen.ok, "{mode}: {seen:?}");
        let error = seen.error.unwrap();
        assert!(error.contains(why), "{mode}: {error}");
        assert!(error.contains("metnos mcp review hostile"), "{error}");
        assert!(runner.mcp.is_disabled("hostile", "notes_search"));
        // The server's other tools, unchanged, still run.
        assert!(call(&runner, &catalog, "inject", json!({})).await.ok);
    }
    set_mode(&runner, "extra");
    assert!(
        call(&runner, &catalog, "notes_search", search.clone())
            .await
            .ok
    );
    let states = runner.mcp.states();
    assert!(states[0].disabled.is_empty(), "{states:?}");
    assert_eq!(states[0].not_admitted, ["backup"]);
    assert!(!runner.mcp.is_disabled("hostile", "notes_search"));

    // Told by the server itself that its tools changed: listed and reviewed before the next call.
    set_mode(&runner, "");
    assert_eq!(
        call(&runner, &catalog, "poke", json!({})).await.content,
        Some(json!("poked"))
    );
    let seen = call(&runner, &catalog, "notes_search", search).await;
    assert!(!seen.ok, "{seen:?}");
    assert!(seen.error.unwrap().contains("its description changed"));
}

#[tokio::test]
async fn what_a_hostile_server_answers_or_asks_is_bounded_and_refused() {
    let f = Fixture::with_builtins();
    let (runner, catalog) = hostile(&f).await;
    // Its words come back as they are (the planner fences and labels them).
    let seen = call(&runner, &catalog, "inject", json!({})).await;
    assert!(seen.ok);
    assert!(
        seen.content
            .unwrap()
            .as_str()
            .unwrap()
            .contains("IMPORTANT SYSTEM INSTRUCTION")
    );
    // Asked for the person's model: refused, with why.
    let seen = call(&runner, &catalog, "sample", json!({})).await;
    let text = seen.content.unwrap().as_str().unwrap().to_owned();
    assert!(text.starts_with("sampling refused"), "{text}");
    assert!(text.contains("Metnos refuses sampling"), "{text}");
    // A flood of notifications does not stop the answer.
    let seen = call(&runner, &catalog, "flood", json!({})).await;
    assert_eq!(seen.content, Some(json!("flooded")), "{seen:?}");
    // A call that never ends times out and is cancelled; the server goes on.
    let seen = call(&runner, &catalog, "hang", json!({})).await;
    assert_eq!(
        seen.error.as_deref(),
        Some("`hang` did not answer within 3 s; the server was told to cancel the call")
    );
    assert!(call(&runner, &catalog, "inject", json!({})).await.ok);
    // 20 MB is over the cap: the server is stopped at once rather than waited for.
    let seen = call(&runner, &catalog, "blob", json!({})).await;
    let error = seen.error.unwrap();
    assert!(
        error.contains("the server sent a message of more than 2162688 bytes for `blob`"),
        "{error}"
    );
    // Stopped, it is started again only after a wait; so after a crash.
    let seen = call(&runner, &catalog, "inject", json!({})).await;
    let error = seen.error.unwrap();
    assert!(
        error.contains("the server ended") && error.contains("started again in"),
        "{error}"
    );
    assert!(!runner.mcp.states()[0].connected);
}

#[tokio::test]
async fn a_crashed_server_is_started_again_after_a_wait() {
    let f = Fixture::with_builtins();
    let (runner, catalog) = hostile(&f).await;
    let seen = call(&runner, &catalog, "crash", json!({})).await;
    assert!(!seen.ok, "{seen:?}");
    let seen = call(&runner, &catalog, "inject", json!({})).await;
    let error = seen.error.unwrap();
    assert!(
        error.contains("the server ended") && error.contains("started again in 2 s"),
        "{error}"
    );
    assert!(!runner.mcp.states()[0].connected);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(call(&runner, &catalog, "inject", json!({})).await.ok);
}

#[tokio::test]
async fn a_server_cannot_read_keys_write_outside_its_folder_or_open_a_socket() {
    let f = Fixture::with_builtins();
    let (runner, catalog) = hostile(&f).await;
    let home = f.home();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "PRIVATE").unwrap();
    let keys = f.root.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("owner.key"), "SIGNING KEY").unwrap();
    let outside = f.root.path().join("outside.txt");
    let seen = call(
        &runner,
        &catalog,
        "escape",
        json!({"home": home, "outside": outside, "secret": keys.join("owner.key")}),
    )
    .await;
    let text = seen.content.unwrap().as_str().unwrap().to_owned();
    for refused in [
        "read_ssh",
        "read_metnos_key",
        "write_outside",
        "tcp",
        "unix",
    ] {
        assert!(
            text.contains(&format!("{refused}=refused")),
            "{refused}: {text}"
        );
    }
    assert!(text.contains("write_own=allowed"), "{text}");
    assert!(!outside.exists());
    assert_eq!(
        std::fs::read_to_string(runner.mcp_dir.join("hostile/own.txt")).unwrap(),
        "mine"
    );
    // It cannot make its next start's home a way out: its folder is its only grant, and it
    // cannot replace that folder.
    let relinked = call(&runner, &catalog, "relink_home", json!({})).await;
    let said = relinked.content.unwrap().as_str().unwrap().to_owned();
    assert!(
        said.contains("remove=refused") && said.contains("link_parent=refused"),
        "{said}"
    );
    runner.mcp.clear();
    let seen = call(
        &runner,
        &catalog,
        "escape",
        json!({"home": home, "outside": outside, "secret": keys.join("owner.key")}),
    )
    .await;
    let text = seen.content.unwrap().as_str().unwrap().to_owned();
    for refused in [
        "read_ssh",
        "read_metnos_key",
        "write_outside",
        "tcp",
        "unix",
    ] {
        assert!(
            text.contains(&format!("{refused}=refused")),
            "after relinking, {refused}: {text}"
        );
    }
}

/// A server from npm as the owner admits it (`env`: its variable naming the program).
fn npm_launch(server: &str, env: &str, args: Vec<String>, extra_read: Vec<PathBuf>) -> Launch {
    let program = PathBuf::from(std::env::var(env).unwrap_or_else(|_| {
        panic!("{env} is not set: run the tests with `make test`, which installs it from npm")
    }));
    let mut read = admit::default_read(&program);
    read.extend(extra_read);
    Launch {
        server: server.into(),
        program_sha256: metnos_executors::digest::sha256_file(&program).unwrap(),
        program,
        args,
        read,
        url: None,
        token_file: None,
    }
}

#[tokio::test]
async fn the_reference_everything_server_runs_boxed_with_text_only_and_no_secrets() {
    let f = Fixture::with_builtins();
    let runner = mcp_runner(&f);
    let launch = npm_launch(
        "everything",
        "METNOS_TEST_MCP_EVERYTHING",
        Vec::new(),
        Vec::new(),
    );
    let names = admit_all(&f, &runner, &launch).await;
    for tool in [
        "everything__echo",
        "everything__get_tiny_image",
        "everything__get_env",
    ] {
        assert!(names.contains(&tool.to_owned()), "{tool}: {names:?}");
    }
    let catalog = f.load();
    let echo = runner
        .check_and_run(&catalog, "everything__echo", &json!({"message": "ciao"}))
        .await;
    assert!(echo.ok, "{echo:?}");
    assert!(echo.content.unwrap().as_str().unwrap().contains("ciao"));
    // An image is left out, with a note saying so.
    let image = runner
        .check_and_run(&catalog, "everything__get_tiny_image", &json!({}))
        .await;
    let left_out = image.metadata.unwrap()["left_out"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(left_out.starts_with("an image left out"), "{left_out}");
    // The server's environment is the box's: nothing of Metnos's or the person's.
    let env = runner
        .check_and_run(&catalog, "everything__get_env", &json!({}))
        .await;
    let text = env.content.unwrap().as_str().unwrap().to_owned();
    assert!(text.contains("\"HOME\""), "{text}");
    assert!(
        !text.contains("METNOS_") && !text.contains("CARGO"),
        "{text}"
    );
}

#[tokio::test]
async fn the_reference_filesystem_server_reads_its_root_and_nothing_of_the_person_s_keys() {
    let f = Fixture::with_builtins();
    let runner = mcp_runner(&f);
    let root = f.root.path().join("shared-notes");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("todo.txt"), "buy milk\n").unwrap();
    let home = f.home();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "PRIVATE").unwrap();
    // A server may not be given the whole home to read: that would open the keys.
    let wide = npm_launch(
        "files",
        "METNOS_TEST_MCP_FILESYSTEM",
        vec![home.display().to_string()],
        vec![home.clone()],
    );
    let err = pool::connect(&runner, &f.load(), &wide).await.unwrap_err();
    assert!(err.contains("too wide for a server to read"), "{err}");
    let launch = npm_launch(
        "files",
        "METNOS_TEST_MCP_FILESYSTEM",
        vec![root.display().to_string()],
        vec![root.clone()],
    );
    let names = admit_all(&f, &runner, &launch).await;
    assert!(
        names.contains(&"files__read_text_file".to_owned()),
        "{names:?}"
    );
    let catalog = f.load();
    let read = catalog.get("files__read_text_file").unwrap();
    assert_eq!(read.manifest.capabilities, ["fs:read"]);
    assert_eq!(read.manifest.target_arg.as_deref(), Some("path"));
    let seen = runner
        .check_and_run(
            &catalog,
            "files__read_text_file",
            &json!({"path": root.join("todo.txt")}),
        )
        .await;
    assert!(seen.ok, "{seen:?}");
    assert_eq!(seen.content, Some(json!("buy milk\n")));
    let keys = runner
        .check_and_run(
            &catalog,
            "files__read_text_file",
            &json!({"path": home.join(".ssh/id_rsa")}),
        )
        .await;
    assert!(!keys.ok, "{keys:?}");
    assert!(!format!("{keys:?}").contains("PRIVATE"));
}

#[tokio::test]
async fn the_reference_fetch_server_has_no_network_in_its_box() {
    let f = Fixture::with_builtins();
    let runner = mcp_runner(&f);
    let program = PathBuf::from(std::env::var("METNOS_TEST_MCP_FETCH").expect(
        "METNOS_TEST_MCP_FETCH is not set: run the tests with `make test`, which installs mcp-server-fetch",
    ));
    let launch = Launch {
        server: "fetch".into(),
        program_sha256: metnos_executors::digest::sha256_file(&program).unwrap(),
        read: admit::default_read(&program),
        program,
        args: Vec::new(),
        url: None,
        token_file: None,
    };
    let names = admit_all(&f, &runner, &launch).await;
    assert_eq!(names, ["fetch__fetch"]);
    let catalog = f.load();
    assert_eq!(
        catalog.get("fetch__fetch").unwrap().manifest.capabilities,
        ["network:http"]
    );
    // A page on this machine: the box has no network to reach it with.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/page", listener.local_addr().unwrap());
    let seen = runner
        .check_and_run(&catalog, "fetch__fetch", &json!({"url": url}))
        .await;
    assert!(!seen.ok, "{seen:?}");
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_err(),
        "the boxed server reached the host's loopback"
    );
}

/// The hostile server serving streamable HTTP on 127.0.0.1 (killed when dropped), and its URL.
async fn hostile_over_http() -> (tokio::process::Child, String) {
    let python = std::env::var("METNOS_TEST_MCP_PYTHON").expect("METNOS_TEST_MCP_PYTHON");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_hostile.py");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new(python)
        .arg(&script)
        .args(["--http", &port.to_string()])
        .current_dir(std::env::temp_dir())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // A hang guard while Python starts, not a timing assertion.
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

fn http_launch(url: &str, token_file: Option<PathBuf>) -> Launch {
    Launch {
        server: "remote".into(),
        program: PathBuf::new(),
        program_sha256: String::new(),
        args: Vec::new(),
        read: Vec::new(),
        url: Some(url.to_owned()),
        token_file,
    }
}

#[tokio::test]
async fn a_server_over_http_gets_its_token_and_nothing_else_does() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::with_builtins();
    let runner = mcp_runner(&f);
    let (_server, url) = hostile_over_http().await;
    let token = f.root.path().join("remote.token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let launch = http_launch(&url, Some(token.clone()));
    let names = admit_all(&f, &runner, &launch).await;
    assert!(names.contains(&"remote__whoami".to_owned()), "{names:?}");
    let catalog = f.load();
    assert!(catalog.refused().is_empty(), "{:?}", catalog.refused());
    let whoami = catalog.get("remote__whoami").unwrap();
    assert_eq!(whoami.manifest.program, "");
    assert_eq!(
        whoami.manifest.mcp.as_ref().unwrap().url.as_deref(),
        Some(url.as_str())
    );
    let seen = runner
        .check_and_run(&catalog, "remote__whoami", &json!({}))
        .await;
    assert_eq!(
        seen.content,
        Some(json!("auth=Bearer s3cret-token")),
        "{seen:?}"
    );
    // Its words are world data like a boxed server's; the token is in no observation.
    let seen = runner
        .check_and_run(&catalog, "remote__inject", &json!({}))
        .await;
    assert!(seen.ok && !format!("{seen:?}").contains("s3cret"));

    // A token file others may read is refused before anything is sent.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = pool::connect(&runner, &catalog, &launch).await.unwrap_err();
    assert!(err.contains("readable by others"), "{err}");
    assert!(!err.contains("s3cret"));
}

#[tokio::test]
async fn a_server_redirecting_elsewhere_gets_no_token_sent_there() {
    use std::io::{Read, Write};
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::with_builtins();
    let runner = mcp_runner(&f);
    // Where the redirect points: another origin on this machine, which must hear nothing.
    let elsewhere = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let target = format!("http://{}/mcp", elsewhere.local_addr().unwrap());
    let redirector = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", redirector.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in redirector.incoming().flatten() {
            let mut stream = stream;
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            let answer = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    let token = f.root.path().join("remote.token");
    std::fs::write(&token, "s3cret-token").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let catalog = f.load();
    let err = pool::connect(&runner, &catalog, &http_launch(&url, Some(token)))
        .await
        .unwrap_err();
    assert!(!err.contains("s3cret"), "{err}");
    elsewhere.set_nonblocking(true).unwrap();
    assert!(
        elsewhere.accept().is_err(),
        "the redirect was followed to another origin"
    );
    // Plain http to a host on the network is refused before any request.
    let err = pool::connect(
        &runner,
        &catalog,
        &http_launch("http://mcp.example.com/mcp", None),
    )
    .await
    .unwrap_err();
    assert!(err.contains("https"), "{err}");
}
