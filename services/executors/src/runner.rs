//! Running an executor: the digest checked again, the program spawned in its own process
//! group with a scrubbed environment, args JSON on stdin, exactly one JSON observation
//! read from stdout within the output cap and the timeout. Whatever goes wrong becomes an
//! `{ok: false, error}` naming it; the process group is killed when the run ends, so no
//! grandchild outlives it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::catalog::{Catalog, Executor};
use crate::observation::{CONTEXT_VAR, ExecContext, Observation, ShellSettings};

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

fn kill_group(pid: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        // ESRCH (already gone) is the usual answer and is fine.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Parses stdout as exactly one observation.
fn parse_observation(stdout: &[u8]) -> Result<Observation, String> {
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
        _ => return Err(format!("non-JSON output: {}", head())),
    };
    if values.next().is_some() {
        return Err(
            "more than one JSON value on stdout (an executor writes exactly one observation)"
                .into(),
        );
    }
    let ok = value.get("ok").and_then(Value::as_bool);
    if ok.is_none() {
        return Err("the output is JSON but not an observation (no boolean `ok`)".into());
    }
    serde_json::from_value::<Observation>(value)
        .map_err(|e| format!("the output is not a well-formed observation: {e}"))
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
        let mut observation = self.spawn_and_observe(catalog, executor, args).await;
        let m = &executor.manifest;
        let protections = serde_json::json!({
            "program": "signed; exactly the verified file is executed",
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

    async fn spawn_and_observe(
        &self,
        catalog: &Catalog,
        executor: &Executor,
        args: &Value,
    ) -> Observation {
        let m = &executor.manifest;
        let program = match executor.open_program(catalog) {
            Ok(file) => file,
            Err(e) => {
                tracing::error!(executor = %m.name, error = %e, "executor not run");
                return Observation::failure(format!("{} not run: {e}", m.name));
            }
        };
        // The child opens its program through /proc/self/fd/N; an interpreter reading a
        // script does so after exec, so the descriptor must survive it.
        #[cfg(target_os = "linux")]
        if let Err(e) = rustix::io::fcntl_setfd(&program, rustix::io::FdFlags::empty()) {
            return Observation::failure(format!("{} not run: {e}", m.name));
        }
        let context = match serde_json::to_string(&self.context(executor)) {
            Ok(text) => text,
            Err(e) => return Observation::failure(format!("cannot encode the context: {e}")),
        };
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
            .kill_on_drop(true);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => return Observation::failure(format!("{} could not start: {e}", m.name)),
        };
        drop(program);
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
                .starts_with("non-JSON output: `hello`")
        );
        assert!(parse_observation(b"").unwrap_err().contains("nothing"));
        assert!(
            parse_observation(br#"{"ok": true} {"ok": true}"#)
                .unwrap_err()
                .contains("more than one")
        );
        assert!(
            parse_observation(br#"{"content": 1}"#)
                .unwrap_err()
                .contains("no boolean `ok`")
        );
        assert!(parse_observation(br#"{"ok": true, "error": 5}"#).is_err());
    }
}
