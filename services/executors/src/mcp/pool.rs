//! The MCP servers of a runner: one process per server, started in the shell's box on the
//! first call of one of its tools, kept while the runner lives, started again after a crash
//! (after 1, 2, 4 … 60 s), killed when the runner is dropped (`metnos up` exits). At every
//! connection and after every `notifications/tools/list_changed` the server's tools are
//! listed and reviewed against the signed pins of the catalog: a tool whose definition
//! changed, was renamed or is new is disabled — never called, never offered — until the
//! owner reviews it (`metnos mcp review`).

use std::collections::HashMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::ClientError;
use super::connection::Connection;
use super::{Finding, Pin, review};
use crate::builtin::shell_exec::{self, sandbox};
use crate::catalog::{Catalog, Executor};
use crate::observation::{ExecContext, Observation};
use crate::runner::{Runner, SHELL_EXEC};

/// How long a server may take to start in its box, complete its handshake and list its tools.
pub const START_WITHIN: Duration = Duration::from_secs(30);
/// The longest wait before a crashed server is started again.
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// The programs a boxed server finds by name.
const SERVER_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How a server is started, as its tools' signed manifests say (all of them alike).
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub server: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub program_sha256: String,
    /// Folders it may read besides the system's.
    pub read: Vec<PathBuf>,
    /// A server reached over streamable HTTP instead (no program, no box), and the file
    /// holding its bearer token.
    pub url: Option<String>,
    pub token_file: Option<PathBuf>,
}

/// A pinned tool, owned.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedPin {
    pub tool: String,
    pub description: String,
    pub input_schema: Value,
}

impl Launch {
    /// The launch and the pins of `server`'s tools in `catalog`; refused when its
    /// manifests disagree on how to start it.
    pub fn of(catalog: &Catalog, server: &str) -> Result<(Launch, Vec<OwnedPin>), String> {
        let mut launch: Option<Launch> = None;
        let mut pins = Vec::new();
        for executor in catalog.executors() {
            let m = &executor.manifest;
            let Some(pin) = m.mcp.as_ref().filter(|p| p.server == server) else {
                continue;
            };
            let this = Launch {
                server: server.to_owned(),
                program: executor.program.clone(),
                args: m.program_args.clone(),
                program_sha256: m.program_sha256.clone(),
                read: pin.read.iter().map(PathBuf::from).collect(),
                url: pin.url.clone(),
                token_file: pin.token_file.as_ref().map(PathBuf::from),
            };
            match &launch {
                Some(first) if *first != this => {
                    return Err(format!(
                        "the manifests of MCP server `{server}` disagree on how to start it (program, arguments or folders); run `metnos mcp review {server}`"
                    ));
                }
                Some(_) => {}
                None => launch = Some(this),
            }
            pins.push(OwnedPin {
                tool: pin.tool.clone(),
                description: m.description.clone(),
                input_schema: m.args.clone(),
            });
        }
        launch
            .map(|l| (l, pins))
            .ok_or_else(|| format!("no tool of MCP server `{server}` is in the catalog"))
    }
}

/// The findings of `listed` against `pins`.
pub fn review_owned(pins: &[OwnedPin], listed: &[super::ToolDefinition]) -> Vec<Finding> {
    let pins: Vec<Pin<'_>> = pins
        .iter()
        .map(|p| Pin {
            tool: &p.tool,
            description: &p.description,
            input_schema: &p.input_schema,
        })
        .collect();
    review(&pins, listed)
}

/// The box a server runs in: its own folder (`folder`, also its home), what it may read,
/// Metnos's own files and the credential stores hidden, the shell's process and file-size
/// limits. No CPU-time limit (a server lives long) and no address-space limit (runtimes
/// such as V8 reserve far more than they use).
/// The folders a server of `launch` may read, resolved: each must be a folder, and none may
/// be `/`, the person's home or a folder above it, or a folder holding what the box hides
/// (credential stores, Metnos's own files): those would open them.
pub fn readable(runner: &Runner, launch: &Launch) -> Result<Vec<PathBuf>, String> {
    let context = ExecContext {
        user_home: runner.user_home.clone(),
        forbidden: runner.forbidden.clone(),
        ..ExecContext::default()
    };
    let hidden = shell_exec::hidden_paths(&context);
    let home = runner
        .user_home
        .canonicalize()
        .unwrap_or_else(|_| runner.user_home.clone());
    launch
        .read
        .iter()
        .map(|dir| {
            let real = dir
                .canonicalize()
                .map_err(|e| format!("the folder {} it may read: {e}", dir.display()))?;
            if !real.is_dir() {
                return Err(format!("{} (which it may read) is not a folder", dir.display()));
            }
            let opens = real == Path::new("/")
                || home.starts_with(&real)
                || hidden.iter().any(|h| h.starts_with(&real));
            if opens {
                return Err(format!(
                    "{} is too wide for a server to read: it holds your home, credential stores or Metnos's own files (--read a narrower folder)",
                    real.display()
                ));
            }
            Ok(real)
        })
        .collect()
}

pub fn plan(runner: &Runner, launch: &Launch, folder: &Path) -> sandbox::Plan {
    // Its folder is its home: one path granted, which the server cannot replace (its
    // parent is not its to write). A home beneath it would be a second grant, made by path
    // at the next start, and the server could have made that path a link to `/`.
    let home = folder.to_owned();
    let context = ExecContext {
        user_home: runner.user_home.clone(),
        forbidden: runner.forbidden.clone(),
        ..ExecContext::default()
    };
    sandbox::Plan {
        env: vec![
            ("PATH".to_owned(), SERVER_PATH.to_owned()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
            ("HOME".to_owned(), home.display().to_string()),
            ("TMPDIR".to_owned(), home.display().to_string()),
        ],
        workspace: folder.to_owned(),
        home,
        readable: launch.read.clone(),
        hidden: shell_exec::hidden_paths(&context),
        limits: sandbox::Limits {
            cpu_seconds: 0,
            memory_mb: 0,
            file_size_mb: runner.shell.file_size_mb,
            processes: runner.shell.processes,
        },
        allow_unsandboxed: runner.shell.allow_unsandboxed,
        namespaces: false,
        outer_uid: shell_exec::outer_uid(),
        serve: Some(sandbox::Run {
            program: launch.program.clone(),
            args: launch.args.clone(),
            cwd: folder.to_owned(),
        }),
    }
}

/// The server's own folder under `dir`, made (0700) with its home.
/// The server's own folder under `dir`, made (0700): a real folder, never a link (the box
/// grants it whole).
pub fn server_folder(dir: &Path, server: &str) -> std::io::Result<PathBuf> {
    let folder = dir.join(server);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&folder)?;
    if !std::fs::symlink_metadata(&folder)?.file_type().is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a folder (a link?)",
            folder.display()
        )));
    }
    let real = folder.canonicalize()?;
    if !real.starts_with(dir.canonicalize()?) {
        return Err(std::io::Error::other(format!(
            "{} leads outside {}",
            folder.display(),
            dir.display()
        )));
    }
    Ok(real)
}

/// Starts `launch` in the box through `metnos-shell` (`box_program`, the path that executes
/// the verified file) and connects.
pub async fn start_boxed(
    box_program: &Path,
    plan: &sandbox::Plan,
    max_message: usize,
) -> Result<Connection, ClientError> {
    let text = serde_json::to_string(plan).map_err(|e| ClientError::Handshake(e.to_string()))?;
    let mut command = tokio::process::Command::new(box_program);
    command
        .arg(sandbox::serve::SERVE_ARG)
        .env_clear()
        .env(sandbox::serve::SERVE_VAR, text)
        .current_dir("/");
    Connection::start(command, START_WITHIN, max_message).await
}

/// Why a call found no server to make it.
fn not_started(server: &str, why: &str) -> Observation {
    Observation::failure(format!("MCP server `{server}` is not available: {why}"))
}

/// One server's standing.
#[derive(Debug, Default)]
struct Slot {
    connection: Option<Connection>,
    /// The launch and pins it was started for.
    started_for: Option<(Launch, Vec<OwnedPin>)>,
    findings: Vec<Finding>,
    crashes: u32,
    retry_at: Option<Instant>,
    last_error: Option<String>,
}

impl Slot {
    /// A start failed, or the server ended: the next start waits 2, 4 … 60 s.
    fn failed(&mut self, why: String) {
        self.crashes += 1;
        let wait = Duration::from_secs(1 << self.crashes.min(6)).min(BACKOFF_MAX);
        self.retry_at = Some(Instant::now() + wait);
        self.last_error = Some(why);
    }

    fn ended(&mut self, connection: Connection) {
        let why = format!("the server ended{}", tail_note(&connection));
        connection.close();
        self.failed(why);
    }
}

/// What `metnos doctor` and the planner say of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerState {
    pub server: String,
    pub connected: bool,
    pub enabled: Vec<String>,
    /// Admitted tools not offered, each with why.
    pub disabled: Vec<(String, String)>,
    /// Tools the server lists that the owner did not admit (new, or skipped).
    pub not_admitted: Vec<String>,
    pub last_error: Option<String>,
}

/// Why a finding keeps a tool off.
pub fn why_disabled(finding: &Finding) -> Option<(String, String)> {
    Some(match finding {
        Finding::Unchanged(_) => return None,
        Finding::Changed { tool, what } => (
            tool.clone(),
            format!(
                "its {} changed since you admitted it",
                what.iter()
                    .map(|c| match c {
                        super::Change::Description => "description",
                        super::Change::Schema => "input schema",
                    })
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        ),
        Finding::Renamed { from, to } => (from.clone(), format!("it is now listed as `{to}`")),
        Finding::New(tool) => (tool.clone(), "new: not admitted".to_owned()),
        Finding::Duplicate(tool) => (tool.clone(), "listed more than once".to_owned()),
        Finding::Removed(tool) => (tool.clone(), "no longer listed by the server".to_owned()),
    })
}

/// The servers of a runner (its clones share them).
#[derive(Debug, Clone, Default)]
pub struct Pool {
    slots: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>>,
    /// Each server's standing as its last start, listing or call left it: read without
    /// waiting for a call in progress.
    shown: Arc<Mutex<HashMap<String, ServerState>>>,
}

impl Slot {
    fn state(&self, server: &str) -> ServerState {
        ServerState {
            server: server.to_owned(),
            connected: self.connection.as_ref().is_some_and(|c| !c.is_closed()),
            enabled: self
                .findings
                .iter()
                .filter_map(|f| f.enabled().map(str::to_owned))
                .collect(),
            disabled: self
                .findings
                .iter()
                .filter(|f| !matches!(f, Finding::New(_)))
                .filter_map(why_disabled)
                .collect(),
            not_admitted: self
                .findings
                .iter()
                .filter_map(|f| match f {
                    Finding::New(tool) => Some(tool.clone()),
                    _ => None,
                })
                .collect(),
            last_error: self.last_error.clone(),
        }
    }
}

impl Pool {
    fn slot(&self, server: &str) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut map = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(server.to_owned()).or_default().clone()
    }

    fn publish(&self, server: &str, slot: &Slot) {
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        shown.insert(server.to_owned(), slot.state(server));
    }

    /// Stops every server.
    pub fn clear(&self) {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.shown.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Whether the last listing of `server` found `tool` changed, renamed or gone (it is
    /// not offered).
    pub fn is_disabled(&self, server: &str, tool: &str) -> bool {
        let shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        shown
            .get(server)
            .is_some_and(|s| s.disabled.iter().any(|(t, _)| t == tool))
    }

    /// What is known of every server started so far.
    pub fn states(&self) -> Vec<ServerState> {
        let shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        let mut states: Vec<ServerState> = shown.values().cloned().collect();
        states.sort_by(|a, b| a.server.cmp(&b.server));
        states
    }

    /// Runs the MCP tool `executor` with `args` (checked against its pinned schema).
    pub async fn call(
        &self,
        runner: &Runner,
        catalog: &Catalog,
        executor: &Executor,
        args: &Value,
    ) -> Observation {
        let Some(pin) = executor.manifest.mcp.as_ref() else {
            return Observation::failure(format!("{} is not an MCP tool", executor.name()));
        };
        let slot = self.slot(&pin.server);
        let mut slot = slot.lock().await;
        let ready = self.ready(&mut slot, runner, catalog, &pin.server).await;
        self.publish(&pin.server, &slot);
        if let Err(why) = ready {
            return not_started(&pin.server, &why);
        }
        let Some(connection) = slot.connection.as_ref() else {
            return not_started(&pin.server, "not connected");
        };
        if let Some((tool, why)) = slot
            .findings
            .iter()
            .filter_map(why_disabled)
            .find(|(tool, _)| *tool == pin.tool)
        {
            return Observation::failure(format!(
                "`{tool}` of MCP server `{}` is disabled: {why}; it stays off until you run `metnos mcp review {}`",
                pin.server, pin.server
            ));
        }
        let m = &executor.manifest;
        let cap = usize::try_from(m.max_output_bytes).unwrap_or(usize::MAX);
        let timeout = Duration::from_secs(m.timeout_seconds);
        let mut observation = connection.call(&pin.tool, args, timeout, cap).await;
        let metadata = observation.metadata.get_or_insert_with(Default::default);
        metadata.insert("mcp_server".to_owned(), Value::from(pin.server.clone()));
        metadata.insert("mcp_tool".to_owned(), Value::from(pin.tool.clone()));
        if connection.is_closed()
            && let Some(ended) = slot.connection.take()
        {
            slot.ended(ended);
        }
        self.publish(&pin.server, &slot);
        observation
    }

    /// Makes sure the server is connected for the catalog's current pins, and its review
    /// is current (listed again when the server said its tools changed).
    async fn ready(
        &self,
        slot: &mut Slot,
        runner: &Runner,
        catalog: &Catalog,
        server: &str,
    ) -> Result<(), String> {
        let wanted = Launch::of(catalog, server)?;
        let stale = slot.started_for.as_ref() != Some(&wanted)
            || slot.connection.as_ref().is_none_or(Connection::is_closed);
        if stale {
            if let Some(old) = slot.connection.take() {
                if old.is_closed() {
                    slot.ended(old);
                } else {
                    old.close();
                }
            }
            if let Some(at) = slot.retry_at.filter(|at| *at > Instant::now()) {
                let left = at
                    .saturating_duration_since(Instant::now())
                    .as_secs_f64()
                    .ceil();
                return Err(format!(
                    "{}; it is started again in {left} s",
                    slot.last_error.as_deref().unwrap_or("it failed")
                ));
            }
            let connection = match connect(runner, catalog, &wanted.0).await {
                Ok(connection) => connection,
                Err(why) => {
                    slot.failed(why.clone());
                    return Err(why);
                }
            };
            slot.findings = review_owned(&wanted.1, &connection.tools);
            log_findings(server, &slot.findings);
            slot.connection = Some(connection);
            slot.started_for = Some(wanted);
            slot.retry_at = None;
            slot.last_error = None;
            return Ok(());
        }
        let Some(connection) = slot.connection.as_mut() else {
            return Err("not connected".to_owned());
        };
        if connection.take_list_changed() {
            // Told its tools changed and not listing them: nothing of it is called until
            // a new connection lists and reviews them.
            if let Err(e) = connection.relist(START_WITHIN).await {
                let why = format!("its tools changed and it did not list them: {e}");
                if let Some(ended) = slot.connection.take() {
                    ended.close();
                }
                slot.failed(why.clone());
                return Err(why);
            }
            slot.findings = review_owned(&wanted.1, &connection.tools);
            log_findings(server, &slot.findings);
        }
        slot.crashes = 0;
        Ok(())
    }
}

fn tail_note(connection: &Connection) -> String {
    let tail = connection.stderr.tail();
    let last: Vec<&str> = tail
        .lines()
        .filter(|l| !l.starts_with(sandbox::serve::READY_PREFIX))
        .rev()
        .take(3)
        .collect();
    if last.is_empty() {
        String::new()
    } else {
        format!(
            " ({})",
            last.into_iter().rev().collect::<Vec<_>>().join(" / ")
        )
    }
}

fn log_findings(server: &str, findings: &[Finding]) {
    for (tool, why) in findings.iter().filter_map(why_disabled) {
        tracing::warn!(server, tool, %why, "MCP tool disabled until reviewed");
    }
}

/// The most bytes one message of `server` may have: twice its tools' largest output cap
/// (JSON escapes text) and room for the rest, at most the SDK's own 16 MiB.
pub fn max_message(catalog: &Catalog, server: &str) -> usize {
    let cap = catalog
        .executors()
        .filter(|e| e.manifest.mcp.as_ref().is_some_and(|p| p.server == server))
        .map(|e| e.manifest.max_output_bytes)
        .max()
        .unwrap_or(crate::manifest::MAX_OUTPUT_BYTES);
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    cap.saturating_mul(2)
        .saturating_add(64 * 1024)
        .min(16 * 1024 * 1024)
}

/// The bearer token in `file`: refused when others may read the file.
fn read_token(file: &Path) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = file.display();
    let meta =
        std::fs::symlink_metadata(file).map_err(|e| format!("the token file {shown}: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!(
            "the token file {shown} is not a plain file (a link?)"
        ));
    }
    use std::os::unix::fs::MetadataExt;
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(format!("the token file {shown} is not yours"));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "the token file {shown} is readable by others: chmod 600 it"
        ));
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("the token file {shown}: {e}"))?;
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err(format!("the token file {shown} holds no single token"));
    }
    Ok(token.to_owned())
}

/// Reaches `launch`'s server: over HTTP at its URL, or started in the box through the
/// catalog's verified `metnos-shell` (shell_exec's program) after checking the server's
/// own program against its digest.
pub async fn connect(
    runner: &Runner,
    catalog: &Catalog,
    launch: &Launch,
) -> Result<Connection, String> {
    if let Some(url) = &launch.url {
        let url = super::http::check_url(url).map_err(|e| e.to_string())?;
        let token = launch.token_file.as_deref().map(read_token).transpose()?;
        let max = max_message(catalog, &launch.server);
        return Connection::start_http(&url, token, START_WITHIN, max)
            .await
            .map_err(|e| e.to_string());
    }
    let shell = catalog.get(SHELL_EXEC).ok_or_else(|| {
        "MCP servers run in shell_exec's box, and no shell_exec is in the catalog (metnos executors install)".to_owned()
    })?;
    let box_file = shell.open_program(catalog).map_err(|e| e.to_string())?;
    catalog
        .digests()
        .open_verified(&launch.program, &launch.program_sha256)
        .map_err(|e| format!("the server's program: {e}"))?;
    let folder = server_folder(&runner.mcp_dir, &launch.server)
        .map_err(|e| format!("cannot make the server's folder: {e}"))?;
    let checked = Launch {
        read: readable(runner, launch)?,
        ..launch.clone()
    };
    let plan = plan(runner, &checked, &folder);
    let path = crate::runner::verified_exec_path(&box_file).map_err(|e| e.to_string())?;
    let started = start_boxed(&path, &plan, max_message(catalog, &launch.server)).await;
    drop(box_file);
    started.map_err(|e| e.to_string())
}
