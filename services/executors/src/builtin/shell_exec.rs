//! `shell_exec`: one program from the configured allow-list, run without a shell, in the
//! workspace, under CPU, memory and file-size limits, and on Linux inside a Landlock
//! ruleset that lets it write only in the workspace and read nothing of Metnos's own data
//! and certificates (reported when the kernel has none).

use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::{meta, required, string_arg};
use crate::observation::{ExecContext, Observation};
use crate::scope::{normalize, resolve};

const PROGRAM_DIRS: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin"];
const OPERATORS: &[&str] = &[
    ";", "&&", "||", "|", "&", ">", ">>", "<", "<<", "2>", "2>&1", "&>",
];

pub fn run(args: &Value, context: &ExecContext) -> Observation {
    match execute(args, context) {
        Ok(observation) => observation,
        Err((error, details)) => Observation::failure_with(error, details),
    }
}

type Failure = (String, Map<String, Value>);

fn fail(error: impl Into<String>) -> Failure {
    (error.into(), Map::new())
}

fn find_program(name: &str) -> Option<PathBuf> {
    PROGRAM_DIRS
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

fn execute(args: &Value, context: &ExecContext) -> Result<Observation, Failure> {
    let command = required(args, "command").map_err(fail)?;
    let words =
        shell_words::split(command).map_err(|_| fail("the command has an unclosed quote"))?;
    let Some(program) = words.first() else {
        return Err(fail("the command is empty"));
    };
    if let Some(op) = words.iter().find(|w| OPERATORS.contains(&w.as_str())) {
        return Err(fail(format!(
            "`{op}`: pipes, lists and redirections are not supported (no shell runs the command); one program per call"
        )));
    }
    if words.iter().any(|w| w.contains("$(") || w.contains('`')) {
        return Err(fail(
            "command substitution is not supported (no shell runs the command)",
        ));
    }
    let shell = &context.shell;
    if program.contains('/') || !shell.allow.iter().any(|a| a == program) {
        return Err(fail(format!(
            "`{}` is not an allowed program (allowed: {})",
            program.chars().take(64).collect::<String>(),
            shell.allow.join(", ")
        )));
    }
    let path = find_program(program)
        .ok_or_else(|| fail(format!("`{program}` is allowed but not installed")))?;

    if shell.workspace.as_os_str().is_empty() || !shell.workspace.is_absolute() {
        return Err(fail("no workspace is configured (executors.workspace)"));
    }
    // The workspace lives in the data directory, which this may create: 0700.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&shell.workspace)
        .map_err(|e| fail(format!("cannot create the workspace: {e}")))?;
    let workspace = resolve(&shell.workspace)
        .map_err(|e| fail(format!("cannot resolve the workspace: {e}")))?;
    let cwd = match string_arg(args, "cwd").map_err(fail)? {
        None | Some("") => workspace.clone(),
        Some(dir) => {
            let joined = if Path::new(dir).is_absolute() {
                PathBuf::from(dir)
            } else {
                workspace.join(dir)
            };
            let real =
                resolve(&normalize(&joined)).map_err(|e| fail(format!("cwd `{dir}`: {e}")))?;
            if !real.starts_with(&workspace) {
                return Err(fail(format!(
                    "cwd `{dir}` is outside the workspace {}",
                    workspace.display()
                )));
            }
            if !real.is_dir() {
                return Err(fail(format!("cwd `{dir}` is not a folder")));
            }
            real
        }
    };

    let mut details = meta([
        ("program", json!(path.display().to_string())),
        ("cwd", json!(cwd.display().to_string())),
        ("cpu_seconds", json!(shell.cpu_seconds)),
        ("memory_mb", json!(shell.memory_mb)),
        ("file_size_mb", json!(shell.file_size_mb)),
    ]);
    limit_resources(context)
        .map_err(|e| (format!("cannot set resource limits: {e}"), details.clone()))?;
    let hidden = crate::scope::real_roots(&context.forbidden);
    let sandbox = confine(&workspace, &hidden);
    details.insert("landlock".into(), json!(sandbox));

    let mut child = Command::new(&path)
        .args(&words[1..])
        .current_dir(&cwd)
        .env_clear()
        .env("PATH", PROGRAM_DIRS.join(":"))
        .env("LANG", "C.UTF-8")
        .env("HOME", &workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| (format!("`{program}` could not start: {e}"), details.clone()))?;
    let cap = usize::try_from(context.max_output_bytes / 2)
        .unwrap_or(usize::MAX)
        .max(1);
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out_reader = std::thread::spawn(move || read_capped(stdout, cap));
    let err_reader = std::thread::spawn(move || read_capped(stderr, 4096));
    // Leave the runner a second to report: its own timeout kills everything anyway.
    let budget = Duration::from_secs(context.timeout_seconds.saturating_sub(1).max(1));
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() >= budget => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err((format!("waiting for `{program}` failed: {e}"), details)),
        }
    };
    let (stdout, out_truncated) = out_reader.join().unwrap_or_default();
    let (stderr, _) = err_reader.join().unwrap_or_default();
    details.insert("stderr".into(), json!(String::from_utf8_lossy(&stderr)));
    details.insert("truncated".into(), json!(out_truncated));
    let Some(status) = status else {
        return Err((
            format!(
                "`{program}` did not finish within {} s and was killed",
                budget.as_secs()
            ),
            details,
        ));
    };
    details.insert("exit_code".into(), json!(status.code()));
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    if status.success() {
        return Ok(Observation::success(stdout, details));
    }
    let why = match status.code() {
        Some(code) => format!("`{program}` exited with status {code}"),
        None => format!(
            "`{program}` was killed by a signal ({status}); a resource limit may have been hit"
        ),
    };
    Ok(Observation {
        content: Some(Value::String(stdout)),
        ..Observation::failure_with(why, details)
    })
}

fn read_capped(reader: Option<impl Read>, cap: usize) -> (Vec<u8>, bool) {
    let Some(mut reader) = reader else {
        return (Vec::new(), false);
    };
    let mut out = Vec::new();
    let mut buffer = [0u8; 8192];
    let mut over = false;
    while let Ok(n) = reader.read(&mut buffer) {
        if n == 0 {
            break;
        }
        let room = cap.saturating_sub(out.len());
        out.extend_from_slice(&buffer[..n.min(room)]);
        over |= n > room;
    }
    (out, over)
}

/// CPU, address space and file size limits on this process, inherited by the command.
fn limit_resources(context: &ExecContext) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, setrlimit};
        let shell = &context.shell;
        let mb = |n: u64| n.saturating_mul(1024 * 1024);
        for (resource, soft, hard) in [
            (
                Resource::Cpu,
                shell.cpu_seconds,
                shell.cpu_seconds.saturating_add(1),
            ),
            (Resource::As, mb(shell.memory_mb), mb(shell.memory_mb)),
            (
                Resource::Fsize,
                mb(shell.file_size_mb),
                mb(shell.file_size_mb),
            ),
        ] {
            if soft == 0 {
                continue;
            }
            setrlimit(
                resource,
                Rlimit {
                    current: Some(soft),
                    maximum: Some(hard),
                },
            )?;
        }
    }
    #[cfg(not(unix))]
    let _ = context;
    Ok(())
}

/// Everything to grant reading so that all is readable except what lies beneath `hidden`:
/// `/` when nothing is hidden, else, along the path from `/` to each hidden folder, every
/// other entry of each folder on the way. (Landlock only grants, so what is not granted is
/// refused; the folders on the way cannot be listed themselves.) A hidden folder inside
/// another (the certificates in the data directory) is hidden with it: the outer one is
/// never on the way, so none of its entries is granted.
pub fn readable_roots(hidden: &[PathBuf]) -> Vec<PathBuf> {
    use std::collections::BTreeSet;
    let hidden: Vec<&Path> = hidden
        .iter()
        .map(PathBuf::as_path)
        .filter(|h| {
            !hidden
                .iter()
                .any(|other| h.starts_with(other) && h != other)
        })
        .collect();
    if hidden.is_empty() {
        return vec![PathBuf::from("/")];
    }
    let on_the_way: BTreeSet<&Path> = hidden.iter().flat_map(|h| h.ancestors().skip(1)).collect();
    let mut roots = Vec::new();
    for dir in &on_the_way {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if !on_the_way.contains(path.as_path()) && !hidden.contains(&path.as_path()) {
                roots.push(path);
            }
        }
    }
    roots
}

/// Confines this process and its children: writes only in `workspace` (and `/dev/null`),
/// reading and executing everywhere but beneath `hidden` (Metnos's own data and
/// certificates; the workspace stays the shell's even when it lies inside them). Returns
/// what the kernel enforced.
#[cfg(target_os = "linux")]
fn confine(workspace: &Path, hidden: &[PathBuf]) -> String {
    use landlock::{
        ABI, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
        path_beneath_rules,
    };
    let abi = ABI::V5;
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let result = Ruleset::default()
        .handle_access(all)
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(readable_roots(hidden), read)))
        .and_then(|r| r.add_rules(path_beneath_rules([workspace], all)))
        .and_then(|r| r.add_rules(path_beneath_rules(["/dev/null"], all)))
        .and_then(|r| r.restrict_self());
    match result {
        Ok(status) => match status.ruleset {
            RulesetStatus::FullyEnforced => "enforced".to_owned(),
            RulesetStatus::PartiallyEnforced => {
                "partially enforced (older Landlock ABI)".to_owned()
            }
            RulesetStatus::NotEnforced => "not enforced: this kernel has no Landlock".to_owned(),
        },
        Err(e) => format!("not enforced: {e}"),
    }
}

#[cfg(not(target_os = "linux"))]
fn confine(_workspace: &Path, _hidden: &[PathBuf]) -> String {
    "not available on this operating system".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hidden_folder_inside_another_hides_nothing_less() {
        // Production hides the data directory and the certificates' folder inside it.
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("metnos");
        let pki = data.join("pki");
        for dir in [data.join("keys"), data.join("workspace"), pki.clone()] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(data.join("planner.db"), "").unwrap();
        std::fs::write(root.path().join("notes.txt"), "").unwrap();
        for hidden in [
            vec![data.clone(), pki.clone()],
            vec![pki.clone(), data.clone()],
        ] {
            let roots = readable_roots(&hidden);
            let granted_inside: Vec<_> = roots.iter().filter(|r| r.starts_with(&data)).collect();
            assert!(
                granted_inside.is_empty(),
                "{hidden:?} grants {granted_inside:?}"
            );
            assert!(roots.contains(&root.path().join("notes.txt")), "{roots:?}");
        }
        // The certificates alone: the rest of the data directory stays readable.
        let roots = readable_roots(std::slice::from_ref(&pki));
        assert!(roots.contains(&data.join("keys")), "{roots:?}");
        assert!(!roots.iter().any(|r| r.starts_with(&pki)), "{roots:?}");
    }
}
