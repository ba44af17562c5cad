//! Running an executor: the digest checked again, the program spawned in its own process
//! group with a scrubbed environment, args JSON on stdin, exactly one JSON observation
//! read from stdout within the output cap and the timeout. Whatever goes wrong becomes an
//! `{ok: false, error}` naming it; the process group is killed when the run ends, so no
//! grandchild outlives it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::catalog::{Catalog, Executor};
use crate::observation::{CONTEXT_VAR, ExecContext, Observation, ShellSettings};
use crate::program::PRESTARTED_VAR;

/// The executor whose sandbox [`Runner::check_shell_sandbox`] checks.
pub const SHELL_EXEC: &str = "shell_exec";

/// How much of the child's stderr an error quotes (its end).
pub const STDERR_TAIL_BYTES: usize = 2048;

/// The only variables a child inherits, whatever the parent holds.
const SAFE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What every run is told besides the manifest: whom Metnos acts for, the local hosts
/// network executors may reach, and the sandbox of `shell_exec`.
#[derive(Debug, Clone, Default)]
pub struct Runner {
    pub user_home: PathBuf,
    pub local_hosts: Vec<String>,
    pub shell: ShellSettings,
    /// Metnos's own files, off limits to every executor (see [`ExecContext::forbidden`]).
    pub forbidden: Vec<PathBuf>,
    /// The person's PATH (see [`ExecContext::program_dirs`]).
    pub program_dirs: Vec<PathBuf>,
    /// Start each executor's next process as soon as one run ends (`executors.prestart`),
    /// so the next call finds it started (and `shell_exec`'s box built) and waiting for its
    /// input. Each process still serves exactly one call.
    pub prestart: bool,
    /// The processes started ahead, one per executor (shared by the runner's clones).
    pub waiting: Prestarted,
    /// Where each MCP server gets its own folder (`<data_dir>/mcp`).
    pub mcp_dir: PathBuf,
    /// The MCP servers started so far (shared by the runner's clones).
    pub mcp: crate::mcp::pool::Pool,
    /// The person's mail accounts and calendars, told to the mail program only.
    pub accounts: Arc<metnos_core::accounts::Accounts>,
}

/// Executor processes started ahead of their call, one per executor, each kept with what
/// it was started for: a call takes one only if its executor (manifest, program, signer)
/// and context are exactly those.
#[derive(Debug, Clone, Default)]
pub struct Prestarted(Arc<Mutex<HashMap<String, Waiting>>>);

#[derive(Debug)]
struct Waiting {
    key: String,
    child: tokio::process::Child,
}

impl Prestarted {
    /// How many processes wait.
    pub fn len(&self) -> usize {
        self.0.lock().map_or(0, |map| map.len())
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends every waiting process: each reads the end of its input and exits without
    /// running anything (what a runner whose catalog changed does).
    pub fn clear(&self) {
        if let Ok(mut map) = self.0.lock() {
            map.clear();
        }
    }

    fn take(&self, name: &str, key: &str) -> Option<tokio::process::Child> {
        let mut map = self.0.lock().ok()?;
        let waiting = map.remove(name)?;
        // Started for another manifest or context: let it end (its input closes).
        (waiting.key == key).then_some(waiting.child)
    }

    fn put(&self, name: &str, key: String, child: tokio::process::Child) {
        if let Ok(mut map) = self.0.lock() {
            // A concurrent run's process may be there already: that one stays.
            map.entry(name.to_owned()).or_insert(Waiting { key, child });
        }
    }
}

/// Reads at most `cap` bytes; `true` when there was more.
async fn read_capped(mut reader: impl AsyncRead + Unpin, cap: usize) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buffer = [0u8; 8192];
    let mut over = false;
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.len() + n > cap {
                    out.extend_from_slice(&buffer[..cap - out.len()]);
                    over = true;
                    break;
                }
                out.extend_from_slice(&buffer[..n]);
            }
        }
    }
    (out, over)
}

/// Keeps the last `keep` bytes of everything read.
async fn read_tail(mut reader: impl AsyncRead + Unpin, keep: usize) -> Vec<u8> {
    let mut tail = Vec::new();
    let mut buffer = [0u8; 8192];
    while let Ok(n) = reader.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&buffer[..n]);
        if tail.len() > keep {
            tail.drain(..tail.len() - keep);
        }
    }
    tail
}

fn stderr_note(tail: &[u8]) -> String {
    let text = String::from_utf8_lossy(tail);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!("; stderr: {text}")
    }
}

/// Kills a run's process group when dropped.
struct KillGroupOnDrop(Option<u32>);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

pub(crate) fn kill_group(pid: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        // ESRCH (already gone) is the usual answer and is fine.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Why an executor's stdout is not one observation.
#[derive(Debug, thiserror::Error)]
enum OutputError {
    /// What it wrote instead: `nothing`, or its first bytes quoted.
    #[error("non-JSON output: {0}")]
    NotJson(String),
    #[error("more than one JSON value on stdout (an executor writes exactly one observation)")]
    SeveralValues,
    #[error("the output is JSON but not an observation (no boolean `ok`)")]
    NoOk,
    #[error("the output is not a well-formed observation: {0}")]
    Malformed(serde_json::Error),
}

/// Why an executor's process was not started.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("{name} not run: {source}")]
    Program {
        name: String,
        source: crate::digest::DigestError,
    },
    #[cfg(target_os = "linux")]
    #[error("{name} not run: {source}")]
    Descriptor {
        name: String,
        source: rustix::io::Errno,
    },
    #[error("{name} could not start: {source}")]
    Spawn {
        name: String,
        source: std::io::Error,
    },
}

/// Parses stdout as exactly one observation.
fn parse_observation(stdout: &[u8]) -> Result<Observation, OutputError> {
    let head = || {
        let text = String::from_utf8_lossy(&stdout[..stdout.len().min(200)]).into_owned();
        if text.trim().is_empty() {
            "nothing".to_owned()
        } else {
            format!("`{}`", text.trim())
        }
    };
    let mut values = serde_json::Deserializer::from_slice(stdout).into_iter::<Value>();
    let value = match values.next() {
        Some(Ok(value)) => value,
        _ => return Err(OutputError::NotJson(head())),
    };
    if values.next().is_some() {
        return Err(OutputError::SeveralValues);
    }
    let ok = value.get("ok").and_then(Value::as_bool);
    if ok.is_none() {
        return Err(OutputError::NoOk);
    }
    serde_json::from_value::<Observation>(value).map_err(OutputError::Malformed)
}

impl Runner {
    /// The context a child of `executor` is given.
    pub fn context(&self, executor: &Executor) -> ExecContext {
        let m = &executor.manifest;
        ExecContext {
            executor: m.name.clone(),
            user_home: self.user_home.clone(),
            scope_paths: m.scope.paths.clone(),
            scope_hosts: m.scope.hosts.clone(),
            local_hosts: self.local_hosts.clone(),
            max_output_bytes: m.max_output_bytes,
            timeout_seconds: m.timeout_seconds,
            shell: self.shell.clone(),
            forbidden: self.forbidden.clone(),
            program_dirs: self.program_dirs.clone(),
            named_writes: Vec::new(),
            accounts: if crate::builtin::is_mail_program(executor) {
                (*self.accounts).clone()
            } else {
                Default::default()
            },
        }
    }

    /// Checks (schema, scope) and runs `name` with `args`: what `metnos executors run`
    /// and the planner do.
    pub async fn check_and_run(&self, catalog: &Catalog, name: &str, args: &Value) -> Observation {
        match catalog.check_call(name, args, &self.user_home) {
            Ok(executor) => self.run(catalog, executor, args).await,
            Err(e) => Observation::failure(e.to_string()),
        }
    }

    /// Builds `shell_exec`'s sandbox on this host without running a command (through the
    /// catalog's verified program, as a call would) and reports what holds: `ok` when the
    /// sandbox is available or running without it is allowed, `metadata.sandbox` the
    /// protections, `metadata.available` whether it is a sandbox at all.
    pub async fn check_shell_sandbox(&self, catalog: &Catalog) -> Observation {
        let Some(executor) = catalog.get(SHELL_EXEC) else {
            return Observation::failure(format!(
                "no `{SHELL_EXEC}` in the catalog {}",
                catalog.dir().display()
            ));
        };
        // Outside the manifest's schema on purpose: no LLM call can ask for it.
        self.run(catalog, executor, &serde_json::json!({"probe": true}))
            .await
    }

    /// Runs an executor whose args were checked. Every observation says, in
    /// `metadata.protections`, what held around the run (the executor's own, such as
    /// shell_exec's `metadata.sandbox`, come beside it).
    pub async fn run(&self, catalog: &Catalog, executor: &Executor, args: &Value) -> Observation {
        self.run_naming(catalog, executor, args, &[]).await
    }

    /// [`Runner::run`], letting this call write `named_writes` (resolved paths that run
    /// code later, which the person's message named and the person approved).
    pub async fn run_naming(
        &self,
        catalog: &Catalog,
        executor: &Executor,
        args: &Value,
        named_writes: &[PathBuf],
    ) -> Observation {
        let m = &executor.manifest;
        if m.mcp.is_some() {
            let mut observation = self.mcp.call(self, catalog, executor, args).await;
            let protections = serde_json::json!({
                "server": if m.reached_over_http() {
                    "reached over HTTP at its manifest's origin only, no redirect followed"
                } else {
                    "one process per server, in shell_exec's box, its program checked against its signed digest"
                },
                "definition": "pinned; a changed tool is disabled until reviewed",
                "timeout_seconds": m.timeout_seconds,
                "output_cap_bytes": m.max_output_bytes,
            });
            observation
                .metadata
                .get_or_insert_with(Default::default)
                .entry("protections")
                .or_insert(protections);
            return observation;
        }
        let (mut observation, ahead) = self
            .spawn_and_observe(catalog, executor, args, named_writes)
            .await;
        let protections = serde_json::json!({
            "program": "signed; exactly the verified file is executed",
            "started": if ahead { "ahead of the call, for this call only" } else { "at the call" },
            "environment": "cleared: PATH, LANG, HOME and the call's context only",
            "process_group": "killed when the run ends",
            "timeout_seconds": m.timeout_seconds,
            "output_cap_bytes": m.max_output_bytes,
        });
        observation
            .metadata
            .get_or_insert_with(Default::default)
            .entry("protections")
            .or_insert(protections);
        observation
    }

    /// Starts a process of `executor`, waiting for its input: from the verified file, in its
    /// own process group, with a scrubbed environment.
    fn start(
        &self,
        catalog: &Catalog,
        executor: &Executor,
        context: &str,
    ) -> Result<tokio::process::Child, StartError> {
        let (program, mut command) = self.command(catalog, executor, context, false)?;
        let child = command.spawn().map_err(|source| StartError::Spawn {
            name: executor.manifest.name.clone(),
            source,
        })?;
        drop(program);
        Ok(child)
    }

    /// Starts the next process of `executor` in the background and keeps it for the next
    /// call: this run's caller does not wait for it.
    fn start_ahead(&self, catalog: &Catalog, executor: &Executor, context: &str, key: String) {
        let name = executor.manifest.name.clone();
        let (program, mut command) = match self.command(catalog, executor, context, true) {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(executor = %name, %error, "not started ahead");
                return;
            }
        };
        let waiting = self.waiting.clone();
        tokio::task::spawn_blocking(move || {
            match command.spawn() {
                Ok(child) => waiting.put(&name, key, child),
                Err(error) => tracing::warn!(executor = %name, %error, "not started ahead"),
            }
            drop(program);
        });
    }

    /// The command that starts `executor` from its verified program (kept open: the
    /// command executes it through its descriptor). `prestarted` marks one started ahead.
    fn command(
        &self,
        catalog: &Catalog,
        executor: &Executor,
        context: &str,
        prestarted: bool,
    ) -> Result<(std::fs::File, tokio::process::Command), StartError> {
        let m = &executor.manifest;
        let program = executor.open_program(catalog).map_err(|source| {
            tracing::error!(executor = %m.name, error = %source, "executor not run");
            StartError::Program {
                name: m.name.clone(),
                source,
            }
        })?;
        // The child opens its program through /proc/self/fd/N; an interpreter reading a
        // script does so after exec, so the descriptor must survive it.
        #[cfg(target_os = "linux")]
        rustix::io::fcntl_setfd(&program, rustix::io::FdFlags::empty()).map_err(|source| {
            StartError::Descriptor {
                name: m.name.clone(),
                source,
            }
        })?;
        let mut command = tokio::process::Command::new(exec_path(&program, &executor.program));
        command
            .arg0(&m.name)
            .args(&m.program_args)
            .env_clear()
            .env("PATH", SAFE_PATH)
            .env("LANG", "C.UTF-8")
            .env("HOME", &self.user_home)
            .env(CONTEXT_VAR, context)
            .current_dir(if self.user_home.is_dir() {
                self.user_home.as_path()
            } else {
                Path::new("/")
            })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            // One waiting ahead ends by reading the end of its input (its files tidied);
            // one in a run is killed with its group whatever happens.
            .kill_on_drop(!prestarted);
        if prestarted {
            command.env(PRESTARTED_VAR, "1");
        }
        Ok((program, command))
    }

    /// What a process waiting for `executor` must have been started for.
    fn prestart_key(executor: &Executor, context: &str) -> String {
        let m = &executor.manifest;
        format!(
            "{}\0{}\0{}\0{}\0{:?}\0{context}",
            m.name,
            executor.program.display(),
            m.program_sha256,
            executor.signer,
            m.program_args
        )
    }

    async fn spawn_and_observe(
        &self,
        catalog: &Catalog,
        executor: &Executor,
        args: &Value,
        named_writes: &[PathBuf],
    ) -> (Observation, bool) {
        let m = &executor.manifest;
        let mut context = self.context(executor);
        context.named_writes = named_writes.to_vec();
        let context = match serde_json::to_string(&context) {
            Ok(text) => text,
            Err(e) => {
                let error = format!("cannot encode the context: {e}");
                return (Observation::failure(error), false);
            }
        };
        let key = Self::prestart_key(executor, &context);
        let waiting = if self.prestart {
            self.waiting.take(&m.name, &key)
        } else {
            None
        };
        let ahead = waiting.is_some();
        let child = match waiting {
            Some(child) => Ok(child),
            None => self.start(catalog, executor, &context),
        };
        let mut child = match child {
            Ok(child) => child,
            Err(error) => return (Observation::failure(error.to_string()), false),
        };
        let observation = self.observe(&mut child, executor, args).await;
        if self.prestart {
            // The next call's process, started once this one is done, for the executor's
            // own context: a write this call was allowed is not the next call's.
            let base = serde_json::to_string(&self.context(executor)).unwrap_or_default();
            let key = Self::prestart_key(executor, &base);
            self.start_ahead(catalog, executor, &base, key);
        }
        (observation, ahead)
    }

    /// Gives a started process its call and reads its one observation.
    async fn observe(
        &self,
        child: &mut tokio::process::Child,
        executor: &Executor,
        args: &Value,
    ) -> Observation {
        let m = &executor.manifest;
        // However this ends (a cancelled turn drops this future), nothing of the run stays.
        let _group = KillGroupOnDrop(child.id());
        let pid = child.id();
        let input = serde_json::to_vec(args).unwrap_or_default();
        let mut stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let cap = usize::try_from(m.max_output_bytes).unwrap_or(usize::MAX);
        let work = async {
            let write = async {
                if let Some(mut stdin) = stdin.take() {
                    // A child that does not read its input is its own business.
                    let _ = stdin.write_all(&input).await;
                    let _ = stdin.shutdown().await;
                }
            };
            let read_out = async {
                match stdout {
                    Some(out) => read_capped(out, cap).await,
                    None => (Vec::new(), false),
                }
            };
            let read_err = async {
                match stderr {
                    Some(err) => read_tail(err, STDERR_TAIL_BYTES).await,
                    None => Vec::new(),
                }
            };
            let ((), (out, over), err) = tokio::join!(write, read_out, read_err);
            (out, over, err)
        };
        let timeout = Duration::from_secs(m.timeout_seconds);
        let outcome = tokio::time::timeout(timeout, async {
            let (out, over, err) = work.await;
            if over {
                // Stop it now rather than wait for it to finish writing into nothing.
                kill_group(pid);
            }
            let status = child.wait().await;
            (out, over, err, status)
        })
        .await;
        // Whatever happened, nothing of this run is left behind.
        kill_group(pid);
        let (out, over, err, status) = match outcome {
            Ok(result) => result,
            Err(_) => {
                let _ = child.kill().await;
                tracing::warn!(executor = %m.name, seconds = m.timeout_seconds, "executor timed out");
                return Observation::failure(format!(
                    "{} timed out after {} s and was killed with its process group",
                    m.name, m.timeout_seconds
                ));
            }
        };
        if over {
            return Observation::failure(format!(
                "{} wrote more than its output cap of {} bytes; output dropped{}",
                m.name,
                m.max_output_bytes,
                stderr_note(&err)
            ));
        }
        let status_text = match &status {
            Ok(s) => s.to_string(),
            Err(e) => format!("unknown ({e})"),
        };
        let success = status.as_ref().is_ok_and(|s| s.success());
        match parse_observation(&out) {
            Ok(observation) if success || !observation.ok => observation,
            Ok(_) => Observation::failure(format!(
                "{} reported ok but {status_text}{}",
                m.name,
                stderr_note(&err)
            )),
            Err(why) if success => {
                Observation::failure(format!("{}: {why}{}", m.name, stderr_note(&err)))
            }
            Err(why) => Observation::failure(format!(
                "{} crashed ({status_text}): {why}{}",
                m.name,
                stderr_note(&err)
            )),
        }
    }
}

/// The path that executes exactly `file` (opened and verified), its descriptor kept open
/// across the exec.
pub(crate) fn verified_exec_path(file: &std::fs::File) -> Result<PathBuf, std::io::Error> {
    #[cfg(target_os = "linux")]
    rustix::io::fcntl_setfd(file, rustix::io::FdFlags::empty())?;
    Ok(exec_path(file, Path::new("")))
}

/// The path that executes exactly the open, verified file: `/proc/self/fd/N` on Linux
/// (the descriptor is inherited, so a script's interpreter can open it too), else the
/// path.
fn exec_path(file: &std::fs::File, path: &Path) -> PathBuf {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let _ = path;
        PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        path.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_process_started_ahead_serves_only_the_executor_and_context_it_was_started_for() {
        let pool = Prestarted::default();
        let start = || {
            tokio::process::Command::new("/bin/cat")
                .stdin(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .unwrap()
        };
        pool.put("fs_read", "key-a".into(), start());
        // Another executor's call finds nothing; the waiting one stays.
        assert!(pool.take("fs_write", "key-a").is_none());
        assert_eq!(pool.len(), 1);
        // The same executor with another manifest or context: not served, and let go.
        assert!(pool.take("fs_read", "key-b").is_none());
        assert!(pool.is_empty());
        pool.put("fs_read", "key-a".into(), start());
        // A second process for the same executor does not replace the first.
        let first = pool.0.lock().unwrap()["fs_read"].child.id();
        pool.put("fs_read", "key-a".into(), start());
        let taken = pool.take("fs_read", "key-a").expect("the waiting process");
        assert_eq!(taken.id(), first);
        // Each serves one call: taken once, it is gone.
        assert!(pool.take("fs_read", "key-a").is_none());
    }

    #[test]
    fn only_one_well_formed_observation_is_accepted() {
        assert_eq!(
            parse_observation(br#"{"ok": true, "content": "x"}"#)
                .unwrap()
                .content,
            Some(Value::from("x"))
        );
        assert!(
            parse_observation(b"hello")
                .unwrap_err()
                .to_string()
                .starts_with("non-JSON output: `hello`")
        );
        assert!(
            parse_observation(b"")
                .unwrap_err()
                .to_string()
                .contains("nothing")
        );
        assert!(
            parse_observation(br#"{"ok": true} {"ok": true}"#)
                .unwrap_err()
                .to_string()
                .contains("more than one")
        );
        assert!(
            parse_observation(br#"{"content": 1}"#)
                .unwrap_err()
                .to_string()
                .contains("no boolean `ok`")
        );
        assert!(parse_observation(br#"{"ok": true, "error": 5}"#).is_err());
    }
}
