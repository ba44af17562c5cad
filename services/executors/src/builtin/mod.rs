//! The built-in executors, in four programs (`metnos-exec`, `metnos-web`, `metnos-shell`,
//! `metnos-mail`;
//! the first argument names the executor), each with its manifest under `services/executors/manifests/`.
//!
//! Every built-in resolves symlinks before touching a path and refuses one that leads out
//! of its scope hints.

use serde_json::{Map, Value};

use metnos_core::forbidden::{self, Access};

use crate::observation::{ExecContext, Observation};
use crate::scope::PathScope;

pub mod fs_list;
pub mod fs_read;
pub mod fs_write;
pub mod mail;
pub mod parse_local;
pub mod shell_exec;
pub mod time_now;
pub mod web_fetch;
pub mod zone;

/// The built-ins' names and manifests (their `program` is the one `program_of` names).
pub const MANIFESTS: &[(&str, &str)] = &[
    ("fs_read", include_str!("../../manifests/fs_read.toml")),
    ("fs_write", include_str!("../../manifests/fs_write.toml")),
    ("fs_list", include_str!("../../manifests/fs_list.toml")),
    ("web_fetch", include_str!("../../manifests/web_fetch.toml")),
    ("time_now", include_str!("../../manifests/time_now.toml")),
    (
        "parse_local",
        include_str!("../../manifests/parse_local.toml"),
    ),
    (
        "shell_exec",
        include_str!("../../manifests/shell_exec.toml"),
    ),
    (
        "mail_search",
        include_str!("../../manifests/mail_search.toml"),
    ),
    ("mail_read", include_str!("../../manifests/mail_read.toml")),
    ("mail_send", include_str!("../../manifests/mail_send.toml")),
    (
        "calendar_list",
        include_str!("../../manifests/calendar_list.toml"),
    ),
    (
        "calendar_add",
        include_str!("../../manifests/calendar_add.toml"),
    ),
];

/// The program of the everyday built-ins: files and the clock.
pub const EXEC_PROGRAM: &str = crate::BUILTIN_PROGRAM;
/// The program of the built-ins that read documents from the world: web pages, and local
/// files parsed as HTML or CSV (the HTTP client and the parsers load only here).
pub const WEB_PROGRAM: &str = "metnos-web";
/// The program of the mail and calendar built-ins: the only one that is told the person's
/// accounts and reads their passwords (IMAP, SMTP, MIME and iCalendar load only here).
pub const MAIL_PROGRAM: &str = "metnos-mail";

/// The program that holds the built-in `name`: each program loads only what its own
/// executors need, so a run starts a small program.
pub fn program_of(name: &str) -> Option<&'static str> {
    match name {
        "fs_read" | "fs_write" | "fs_list" | "time_now" => Some(EXEC_PROGRAM),
        "web_fetch" | "parse_local" => Some(WEB_PROGRAM),
        "mail_search" | "mail_read" | "mail_send" | "calendar_list" | "calendar_add" => {
            Some(MAIL_PROGRAM)
        }
        shell_exec::NAME => Some(shell_exec::PROGRAM),
        _ => None,
    }
}

/// Runs the built-in `name`, whichever program holds it.
pub fn run(name: &str, args: &Value, context: &ExecContext) -> Observation {
    match program_of(name) {
        Some(EXEC_PROGRAM) => run_exec(name, args, context),
        Some(WEB_PROGRAM) => run_web(name, args, context),
        Some(MAIL_PROGRAM) => mail::run(name, args, context),
        Some(_) => shell_exec::run_named(name, args, context),
        None => elsewhere(EXEC_PROGRAM, name),
    }
}

/// `metnos-exec`'s executors.
pub fn run_exec(name: &str, args: &Value, context: &ExecContext) -> Observation {
    match name {
        "fs_read" => fs_read::run(args, context),
        "fs_write" => fs_write::run(args, context),
        "fs_list" => fs_list::run(args, context),
        "time_now" => time_now::run(args, context),
        other => elsewhere(EXEC_PROGRAM, other),
    }
}

/// `metnos-web`'s executors.
pub fn run_web(name: &str, args: &Value, context: &ExecContext) -> Observation {
    match name {
        "web_fetch" => web_fetch::run(args, context),
        "parse_local" => parse_local::run(args, context),
        other => elsewhere(WEB_PROGRAM, other),
    }
}

/// Whether the built-in `name` can do anything with `accounts`: a mail built-in needs a
/// mail account, a calendar one a calendar (without one it is not offered to the model).
pub fn usable_with(name: &str, accounts: &metnos_core::accounts::Accounts) -> bool {
    match name {
        "mail_search" | "mail_read" | "mail_send" => !accounts.mail.is_empty(),
        "calendar_list" | "calendar_add" => !accounts.calendar.is_empty(),
        _ => true,
    }
}

/// Whether `executor` is a mail built-in run by the mail program: only such a call is
/// told the person's accounts.
pub fn is_mail_program(executor: &crate::Executor) -> bool {
    let m = &executor.manifest;
    program_of(&m.name) == Some(MAIL_PROGRAM)
        && std::path::Path::new(&m.program)
            .file_name()
            .is_some_and(|f| f == MAIL_PROGRAM)
}

/// The observation of a program asked for an executor it does not hold: a catalog
/// installed before the built-ins were split names the old program.
pub(crate) fn elsewhere(program: &str, name: &str) -> Observation {
    match program_of(name) {
        Some(own) => Observation::failure(format!(
            "`{name}` runs in {own}, not {program}: install the built-ins again (`metnos executors install`) and sign them"
        )),
        None => Observation::failure(format!(
            "{program} has no executor `{}`",
            name.chars().take(64).collect::<String>()
        )),
    }
}

/// Why a built-in refused a call or could not do it: the text becomes the observation's
/// error, which the planner and the person read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BuiltinError {
    #[error("`{0}` must be a string")]
    NotString(String),
    #[error("`{0}` is required")]
    Required(String),
    #[error("`{0}` must be a non-negative integer")]
    NotCount(String),
    #[error(transparent)]
    Scope(#[from] crate::scope::ScopeError),
    #[error(transparent)]
    Open(#[from] crate::open::OpenError),
    #[error(
        "path `{path}` leads through a link in the shell's workspace to {}, outside it: links there are not followed out of it",
        real.display()
    )]
    LinkOutOfWorkspace {
        path: String,
        real: std::path::PathBuf,
    },
    /// A refusal or failure of one executor's own, in its words.
    #[error("{0}")]
    Refused(String),
}

impl From<String> for BuiltinError {
    fn from(message: String) -> BuiltinError {
        BuiltinError::Refused(message)
    }
}

impl From<&str> for BuiltinError {
    fn from(message: &str) -> BuiltinError {
        BuiltinError::Refused(message.to_owned())
    }
}

/// A string argument.
pub(crate) fn string_arg<'a>(args: &'a Value, key: &str) -> Result<Option<&'a str>, BuiltinError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(BuiltinError::NotString(key.to_owned())),
    }
}

/// A required string argument.
pub(crate) fn required<'a>(args: &'a Value, key: &str) -> Result<&'a str, BuiltinError> {
    string_arg(args, key)?.ok_or_else(|| BuiltinError::Required(key.to_owned()))
}

/// A non-negative integer argument.
pub(crate) fn count_arg(args: &Value, key: &str) -> Result<Option<u64>, BuiltinError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| BuiltinError::NotCount(key.to_owned())),
    }
}

/// The real path of a path argument, inside the executor's scope, outside Metnos's own
/// files and outside the forbidden core for `access` (each checked on the path as written
/// and as resolved: a link does not lead around them).
pub(crate) fn scoped_path(
    text: &str,
    context: &ExecContext,
    access: Access,
) -> Result<std::path::PathBuf, BuiltinError> {
    let real =
        PathScope::new(&context.scope_paths, &context.user_home).check(text, &context.user_home)?;
    let lexical = crate::scope::normalize(&crate::scope::expand_home(text, &context.user_home));
    for (path, via_link) in [(&lexical, false), (&real, true)] {
        if let Some(rule) = forbidden::first_match(&path.to_string_lossy(), access) {
            let resolved = if via_link && *path != lexical {
                format!(", as {}", path.display())
            } else {
                String::new()
            };
            return Err(crate::scope::ScopeError::Protected {
                path: text.to_owned(),
                rule,
                resolved,
                access: match access {
                    Access::Read => "read",
                    Access::Write => "write",
                },
            }
            .into());
        }
    }
    let forbidden = crate::scope::real_roots(&context.forbidden);
    let workspace = workspace(context);
    // The shell's box can make links in its workspace (git checks them out): one that
    // leads out of the workspace is never followed, so a path shown as the workspace's
    // never touches a file elsewhere.
    let in_ws = |p: &std::path::Path| crate::open::in_workspace(p, &workspace);
    if (in_ws(&lexical) || crate::open::in_workspace(&lexical, &context.shell.workspace))
        && !in_ws(&real)
    {
        return Err(BuiltinError::LinkOutOfWorkspace {
            path: text.to_owned(),
            real,
        });
    }
    if crate::scope::is_forbidden(&real, &forbidden, &workspace)
        || crate::scope::is_forbidden(&lexical, &context.forbidden, &context.shell.workspace)
    {
        return Err(crate::scope::ScopeError::Forbidden(text.to_owned()).into());
    }
    if access == Access::Write {
        runs_code_later(text, &lexical, &real, context)?;
    }
    Ok(real)
}

/// Refuses a write to a path that runs code later (a hidden name under the home, a folder
/// on the person's PATH; written or resolved) unless the planner named exactly this
/// resolved path as one the person's message named and the person approved.
fn runs_code_later(
    text: &str,
    lexical: &std::path::Path,
    real: &std::path::Path,
    context: &ExecContext,
) -> Result<(), crate::scope::ScopeError> {
    let Some(rule) = runs_code_later_rule(lexical, real, context) else {
        return Ok(());
    };
    if context.named_writes.iter().any(|named| named == real) {
        return Ok(());
    }
    Err(crate::scope::ScopeError::RunsCodeLater {
        path: text.to_owned(),
        rule,
        resolved: if real != lexical {
            format!(" (through a link, to {})", real.display())
        } else {
            String::new()
        },
        what: forbidden::runs_code_later_reason(rule),
    })
}

/// The rule a write to `lexical` (resolved: `real`) meets because the file runs code later:
/// a hidden name under the home (but in Metnos's own workspace), a folder of programs, an
/// interpreter's start-up file, an executable, where the home's hidden tree links to.
pub(crate) fn runs_code_later_rule(
    lexical: &std::path::Path,
    real: &std::path::Path,
    context: &ExecContext,
) -> Option<&'static str> {
    let links = std::cell::OnceCell::new();
    runs_code_later_rule_with(lexical, real, context, &links)
}

/// [`runs_code_later_rule`] with where the home's hidden tree links to computed once for
/// many paths (`links`, filled on first need: a command's every argument).
pub(crate) fn runs_code_later_rule_with(
    lexical: &std::path::Path,
    real: &std::path::Path,
    context: &ExecContext,
    links: &std::cell::OnceCell<Vec<std::path::PathBuf>>,
) -> Option<&'static str> {
    places(context).rule(lexical, real, links)
}

/// The places that decide whether a write runs code later, from the call's context.
fn places(context: &ExecContext) -> crate::later::Places<'_> {
    crate::later::Places {
        home: &context.user_home,
        program_dirs: &context.program_dirs,
        forbidden: &context.forbidden,
        workspace: &context.shell.workspace,
    }
}

/// Whether the shell's workspace lies in Metnos's own folders (the default, in the data
/// directory), where its hidden names are ordinary files.
fn own_workspace(context: &ExecContext) -> bool {
    places(context).own_workspace()
}

/// Where files with several names may be read and appended to: the shell's workspace when
/// it is Metnos's own (the box cannot link a file from outside into it), else nowhere (a
/// folder the person chose may hold her own hard links: `~/projects/dotfiles/bashrc` and
/// `~/.bashrc` as one file).
pub(crate) fn linked_files_place(context: &ExecContext) -> std::path::PathBuf {
    if own_workspace(context) {
        workspace(context)
    } else {
        std::path::PathBuf::new()
    }
}

/// Whether the shell's workspace is one the person chose in her home (`~/projects`), not
/// Metnos's own: a hidden file the box writes there runs code later.
pub(crate) fn chosen_workspace_in_home(context: &ExecContext) -> bool {
    let workspace = workspace(context);
    let home =
        crate::scope::resolve(&context.user_home).unwrap_or_else(|_| context.user_home.clone());
    !own_workspace(context)
        && (workspace.starts_with(&home) || workspace.starts_with(&context.user_home))
}

/// The shell's workspace, resolved (where files with several names may be read).
pub(crate) fn workspace(context: &ExecContext) -> std::path::PathBuf {
    places(context).workspace()
}

/// Metadata from pairs.
pub(crate) fn meta<const N: usize>(pairs: [(&str, Value); N]) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// Text of bytes: UTF-8 when it is, else Latin-1 (every byte a character); `None` for
/// binary data (NUL bytes in the first 8 KB). `cut` says the bytes may end inside a
/// character (a part of a longer file), which is then dropped rather than taken for
/// Latin-1.
pub(crate) fn decode_text(bytes: &[u8], cut: bool) -> Option<(String, &'static str)> {
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return None;
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => Some((text.to_owned(), "utf-8")),
        Err(e) if cut && e.error_len().is_none() => {
            // Cut inside a character at the end (a head read): keep the whole ones.
            let valid = &bytes[..e.valid_up_to()];
            Some((String::from_utf8_lossy(valid).into_owned(), "utf-8"))
        }
        Err(_) => Some((bytes.iter().map(|&b| char::from(b)).collect(), "latin-1")),
    }
}
