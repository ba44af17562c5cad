//! `shell_exec`: one program from the configured allow-list, run without a shell, in the
//! workspace, inside a box ([`sandbox`]): its own user, PID, network, IPC and mount namespaces,
//! CPU, memory, file-size and process limits, no capabilities, no-new-privileges, a fresh
//! empty home, and a Landlock ruleset that lets it write only in the workspace and read
//! only the workspace and the system's program and library folders (plus what the person
//! added in `executors.shell_readable`), never Metnos's own files or credential stores. Without namespaces or Landlock the call is
//! refused unless `executors.allow_unsandboxed` is set. git, find and sort keep their
//! everyday use; their forms that run other programs are refused first ([`rules`],
//! [`gitconfig`]). Every observation's metadata says what held (`sandbox`).
//!
//! Layout: [`rules`] and [`gitconfig`] decide on the exact argv and the repository git would
//! read (pure, but for reading that repository's files); [`sandbox`] builds the box and
//! runs the command; this file turns a call into a plan and an outcome into an observation.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{meta, required, string_arg};
use crate::observation::{ExecContext, Observation};
use crate::scope::{normalize, resolve};

pub mod gitconfig;
pub mod rules;
pub mod sandbox;

pub use sandbox::{BOX_ARG, init_main};

/// The executor's name.
pub const NAME: &str = "shell_exec";
/// Its program, apart from the other built-ins (its box's init is the same program).
pub const PROGRAM: &str = "metnos-shell";

const PROGRAM_DIRS: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin"];
const OPERATORS: &[&str] = &[
    ";", "&&", "||", "|", "&", ">", ">>", "<", "<<", "2>", "2>&1", "&>",
];

/// A box built before its command is known, and the home it lends the command (removed
/// with it).
#[derive(Debug)]
pub struct Ready {
    workspace: PathBuf,
    home: tempfile::TempDir,
    sandbox: sandbox::Prepared,
}

/// Builds the box of `context` (its workspace, a fresh home, the namespaces, the init
/// confined and waiting): what `metnos-shell` does before it reads its call, so that with
/// the runner's prestart the box is ready when the call comes.
pub fn prepare(context: &ExecContext) -> Result<Ready, (String, Map<String, Value>)> {
    let workspace = workspace(context)?;
    let home = fresh_home()?;
    let sandbox = sandbox::prepare(plan_for(context, &workspace, home.path()));
    Ok(Ready {
        workspace,
        home,
        sandbox,
    })
}

/// `{"probe": true}` (outside the manifest's schema, so only the runner's own check can send
/// it) builds the box without running anything and reports what holds on this host.
pub fn run(args: &Value, context: &ExecContext) -> Observation {
    run_in(prepare(context), args, context)
}

/// Runs the call `args` in a box [`prepare`] built (or says why there is none).
pub fn run_in(
    ready: Result<Ready, (String, Map<String, Value>)>,
    args: &Value,
    context: &ExecContext,
) -> Observation {
    let result = ready.and_then(|ready| {
        if args.get("probe") == Some(&Value::Bool(true)) {
            Ok(probe(ready, context))
        } else {
            execute(args, context, ready)
        }
    });
    match result {
        Ok(observation) => observation,
        Err((error, details)) => Observation::failure_with(error, details),
    }
}

/// `metnos-shell`'s `main`: the box first, then the call.
pub fn program_main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(BOX_ARG) {
        return init_main();
    }
    if std::env::args().nth(1).as_deref() == Some(sandbox::serve::SERVE_ARG) {
        return sandbox::serve::serve_main();
    }
    let name = std::env::args().nth(1).unwrap_or_default();
    let context = crate::program::read_context();
    let ready = match &context {
        Ok(context) if name == NAME => Some(prepare(context)),
        _ => None,
    };
    let observation = match (crate::program::read_args(), context, ready) {
        (Ok(None), _, _) => return ExitCode::SUCCESS,
        (Err(error), _, _) | (_, Err(error), _) => Observation::failure(error.to_string()),
        (Ok(Some(args)), Ok(context), Some(ready)) => run_in(ready, &args, &context),
        (Ok(Some(_)), Ok(_), None) => super::elsewhere(PROGRAM, &name),
    };
    crate::program::write(&observation)
}

/// `metnos-shell`'s one executor, by name.
pub fn run_named(name: &str, args: &Value, context: &ExecContext) -> Observation {
    if name == NAME {
        run(args, context)
    } else {
        super::elsewhere(PROGRAM, name)
    }
}

type Failure = (String, Map<String, Value>);

fn fail(error: impl std::fmt::Display) -> Failure {
    (error.to_string(), Map::new())
}

fn find_program(name: &str) -> Option<PathBuf> {
    PROGRAM_DIRS
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

/// The program (resolved) and its arguments, when the command is one allowed program.
fn parse_command(command: &str, context: &ExecContext) -> Result<(PathBuf, Vec<String>), Failure> {
    let words =
        shell_words::split(command).map_err(|_| fail("the command has an unclosed quote"))?;
    let Some((program, args)) = words.split_first() else {
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
    Ok((path, args.to_vec()))
}

/// The workspace, made (0700: it may live in the data directory) and resolved.
fn workspace(context: &ExecContext) -> Result<PathBuf, Failure> {
    let workspace = &context.shell.workspace;
    if workspace.as_os_str().is_empty() || !workspace.is_absolute() {
        return Err(fail("no workspace is configured (executors.workspace)"));
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(workspace)
        .map_err(|e| fail(format!("cannot create the workspace: {e}")))?;
    resolve(workspace).map_err(|e| fail(format!("cannot resolve the workspace: {e}")))
}

/// The folder the command runs in: `cwd` inside the workspace, or the workspace.
fn working_dir(args: &Value, workspace: &Path) -> Result<PathBuf, Failure> {
    let Some(dir) = string_arg(args, "cwd")
        .map_err(fail)?
        .filter(|d| !d.is_empty())
    else {
        return Ok(workspace.to_path_buf());
    };
    let joined = if Path::new(dir).is_absolute() {
        PathBuf::from(dir)
    } else {
        workspace.join(dir)
    };
    let real = resolve(&normalize(&joined)).map_err(|e| fail(format!("cwd `{dir}`: {e}")))?;
    if !real.starts_with(workspace) {
        return Err(fail(format!(
            "cwd `{dir}` is outside the workspace {}",
            workspace.display()
        )));
    }
    if !real.is_dir() {
        return Err(fail(format!("cwd `{dir}` is not a folder")));
    }
    Ok(real)
}

/// The per-run home: a fresh empty folder (0700), removed with the value.
fn fresh_home() -> Result<tempfile::TempDir, Failure> {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix("metnos-shell-home-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(|e| fail(format!("cannot create the command's home: {e}")))
}

/// The plan of a run: the box's every setting but the command.
fn plan_for(context: &ExecContext, workspace: &Path, home: &Path) -> sandbox::Plan {
    let shell = &context.shell;
    let mut env = vec![
        ("PATH".to_owned(), PROGRAM_DIRS.join(":")),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ("HOME".to_owned(), home.display().to_string()),
        ("TMPDIR".to_owned(), home.display().to_string()),
    ];
    env.extend(gitconfig::environment(workspace));
    sandbox::Plan {
        env,
        workspace: workspace.to_path_buf(),
        home: home.to_path_buf(),
        readable: shell.readable.clone(),
        // Metnos's own files, and where credential stores usually are: what the guard
        // refuses by name, the box refuses by path (`grep -r` over the home names neither).
        hidden: hidden_paths(context),
        limits: sandbox::Limits {
            cpu_seconds: shell.cpu_seconds,
            memory_mb: shell.memory_mb,
            file_size_mb: shell.file_size_mb,
            processes: shell.processes,
        },
        allow_unsandboxed: shell.allow_unsandboxed,
        namespaces: false,
        outer_uid: outer_uid(),
        serve: None,
    }
}

/// What the box hides, by real path. Most usual places do not exist on a given machine:
/// those keep their lexical path (nothing to grant there), and only the ones that exist
/// are resolved (a `~/.ssh` that is a link hides what it points to).
pub(crate) fn hidden_paths(context: &ExecContext) -> Vec<PathBuf> {
    context
        .forbidden
        .iter()
        .cloned()
        .chain(metnos_core::forbidden::usual_places(&context.user_home))
        .map(|path| {
            let lexical = normalize(&path);
            if std::fs::symlink_metadata(&lexical).is_ok() {
                resolve(&lexical).unwrap_or(lexical)
            } else {
                lexical
            }
        })
        .collect()
}

pub(crate) fn outer_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn execute(args: &Value, context: &ExecContext, ready: Ready) -> Result<Observation, Failure> {
    let command = required(args, "command").map_err(fail)?;
    let (path, mut argv) = parse_command(command, context)?;
    let program = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let workspace = ready.workspace.clone();
    let cwd = working_dir(args, &workspace)?;
    let cleared = rules::check(&program, &argv, &workspace, &cwd).map_err(fail)?;
    if super::chosen_workspace_in_home(context) {
        // A file with several names may be a dotfile under another (a hard link).
        let links = std::cell::OnceCell::new();
        let runs_later = |real: &Path| {
            super::runs_code_later_rule_with(real, real, context, &links).or_else(|| {
                std::fs::symlink_metadata(real)
                    .is_ok_and(|m| m.is_file() && std::os::unix::fs::MetadataExt::nlink(&m) > 1)
                    .then_some(metnos_core::forbidden::HOME_HIDDEN)
            })
        };
        rules::check_chosen_workspace(&program, &argv, &workspace, &cwd, &runs_later)
            .map_err(fail)?;
    }
    if let Some(dir) = &cleared.git_dir {
        if let Some(why) = gitconfig::refused_repository(dir, &workspace) {
            return Err(fail(gitconfig::refusal_message(&why)));
        }
        // No pager, whatever the repository says (there is no terminal anyway).
        argv.insert(0, "--no-pager".to_owned());
    }

    let shell = &context.shell;
    let mut details = meta([
        ("program", json!(path.display().to_string())),
        ("cwd", json!(cwd.display().to_string())),
        ("cpu_seconds", json!(shell.cpu_seconds)),
        ("memory_mb", json!(shell.memory_mb)),
        ("file_size_mb", json!(shell.file_size_mb)),
    ]);
    let run = sandbox::Run {
        program: path,
        args: argv,
        cwd,
    };
    let cap = usize::try_from(context.max_output_bytes / 2)
        .unwrap_or(usize::MAX)
        .max(1);
    // Leave the runner a second to report: its own timeout kills everything anyway.
    let budget = Duration::from_secs(context.timeout_seconds.saturating_sub(1).max(1));
    let outcome = ready.sandbox.run(Some(&run), budget, cap);
    drop(ready.home);

    details.insert("sandbox".into(), json!(outcome.protections));
    details.insert(
        "stderr".into(),
        json!(String::from_utf8_lossy(&outcome.stderr)),
    );
    details.insert("truncated".into(), json!(outcome.stdout_truncated));
    let stdout = String::from_utf8_lossy(&outcome.stdout).into_owned();
    let why = match outcome.end {
        sandbox::End::Exited(0) => {
            details.insert("exit_code".into(), json!(0));
            return Ok(Observation::success(stdout, details));
        }
        sandbox::End::Exited(code) => {
            details.insert("exit_code".into(), json!(code));
            format!("`{program}` exited with status {code}")
        }
        sandbox::End::Signalled(signal) => {
            details.insert("exit_code".into(), Value::Null);
            format!("`{program}` was killed by signal {signal}; a resource limit may have been hit")
        }
        sandbox::End::TimedOut => {
            return Err((
                format!(
                    "`{program}` did not finish within {} s and was killed with every process it started",
                    budget.as_secs()
                ),
                details,
            ));
        }
        sandbox::End::Refused(why) | sandbox::End::Failed(why) => return Err((why, details)),
        sandbox::End::Checked => {
            return Err(("the sandbox ran no command".to_owned(), details));
        }
    };
    Ok(Observation {
        content: Some(Value::String(stdout)),
        ..Observation::failure_with(why, details)
    })
}

/// Builds the box without a command: what `metnos executors sandbox` and the planner's
/// start-up report. `ok` when the box is a sandbox (or running without one is allowed).
fn probe(ready: Ready, context: &ExecContext) -> Observation {
    let outcome = ready.sandbox.run(None, Duration::from_secs(10), 1);
    drop(ready.home);
    let missing = outcome.protections.missing();
    let mut details = meta([
        ("sandbox", json!(outcome.protections)),
        ("available", json!(missing.is_none())),
        ("allow_unsandboxed", json!(context.shell.allow_unsandboxed)),
    ]);
    match outcome.end {
        sandbox::End::Checked => {
            let content = match &missing {
                None => "the shell's sandbox is available".to_owned(),
                Some(why) => format!("no sandbox ({why}); commands run without one"),
            };
            Observation::success(content, details)
        }
        sandbox::End::Refused(why) | sandbox::End::Failed(why) => {
            if let Some(missing) = missing {
                details.insert("missing".into(), json!(missing));
            }
            Observation::failure_with(why, details)
        }
        other => Observation::failure_with(format!("unexpected end: {other:?}"), details),
    }
}
