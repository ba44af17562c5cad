//! The argument rules of the programs that can run other programs by their arguments: git,
//! find and sort stay usable for ordinary work, their code-running forms are refused before
//! anything is spawned (pure: arguments and paths in, a refusal naming the form out).
//!
//! GNU getopt and git's parse-options accept any unambiguous prefix of a long option
//! (`--upload-p` is `--upload-pack`), so a long option is refused when it is a prefix of a
//! refused one; short options may be bundled (`-rxo`), so every letter of a bundle counts.

use std::path::{Path, PathBuf};

use crate::scope::{normalize, resolve};

/// What an accepted command needs later: for git, the folder it will work in (its `-C`
/// options applied), whose repository's configuration is checked before the spawn.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cleared {
    pub git_dir: Option<PathBuf>,
}

/// Why a command's arguments are refused, naming the form and the rule: the text is the
/// observation's error, which the planner and the person read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "{program}: working inside a repository's .git folder is refused (rule write.git_internals)"
    )]
    InsideGitDir { program: String },
    /// `arg`: its first 120 characters.
    #[error(
        "{program}: `{arg}` names a repository's own files (.git): a command may not write there (rule write.git_internals)"
    )]
    NamesGitInternals { program: String, arg: String },
    #[error(
        "{program}: working inside {} of the workspace you chose is refused: files made there run code later (rule {rule})",
        cwd.display()
    )]
    ChosenCwd {
        program: String,
        cwd: PathBuf,
        rule: &'static str,
    },
    /// `arg`: its first 120 characters.
    #[error(
        "{program}: `{arg}` names a file in the workspace you chose that runs code later ({reason}); a command does not write there (a file write naming the path asks you first; rule {rule})"
    )]
    ChosenRunsLater {
        program: String,
        arg: String,
        reason: &'static str,
        rule: &'static str,
    },
    #[error(
        "git: `-C {target}` is a hidden folder of the workspace you chose, where files run code later (rule {rule})"
    )]
    ChosenHiddenDir { target: String, rule: &'static str },
    #[error(
        "git {command}: {why} in the workspace you chose, where a file it leaves (.envrc, a hook, a script, the repository's configuration) runs code at your next command; run it yourself (rule {rule})"
    )]
    ChosenGit {
        command: String,
        why: &'static str,
        rule: &'static str,
    },
    #[error("git: the `{0}` transport runs a command of its own and is refused")]
    Transport(&'static str),
    #[error("git: `-C` needs a folder")]
    NoFolder,
    #[error(
        "git: `-c` sets configuration, which can run programs (aliases, hooks, filters); it is refused"
    )]
    SetsConfig,
    #[error(
        "git: the option `{0}` before the command is refused (only -C inside the workspace, --no-pager and the pathspec flags are accepted)"
    )]
    GlobalOption(String),
    /// The command: its first 64 characters.
    #[error(
        "git: `{0}` is not one of the git commands shell_exec runs (aliases and commands that run other programs are refused)"
    )]
    GitCommand(String),
    #[error("git {command}: `{long}` {why}; it is refused")]
    GitLong {
        command: String,
        long: &'static str,
        why: &'static str,
    },
    #[error("git {command}: `-{letter}` ({why}) is refused")]
    GitShort {
        command: String,
        letter: char,
        why: &'static str,
    },
    #[error("git bisect run: runs the command it is given; it is refused")]
    BisectRun,
    #[error("git submodule foreach: runs the command it is given; it is refused")]
    SubmoduleForeach,
    /// The subcommand: its first 32 characters.
    #[error(
        "git submodule {0}: goes into nested repositories, whose configuration is not checked; it is refused"
    )]
    Submodule(String),
    #[error("git -C `{target}`: {why}")]
    FolderUnresolved { target: String, why: String },
    #[error("git: `-C {target}` is outside the workspace {}", workspace.display())]
    FolderOutside { target: String, workspace: PathBuf },
    #[error("find: `{name}` {why}; it is refused")]
    Find {
        name: &'static str,
        why: &'static str,
    },
    #[error("sort: `--output` writes a file; it is refused")]
    SortOutput,
    #[error("sort: `--compress-program` runs a program; it is refused")]
    SortCompress,
    #[error("sort: `-o` (--output) writes a file; it is refused")]
    SortShortOutput,
}

/// The first `n` characters of `text`.
fn first(text: &str, n: usize) -> String {
    text.chars().take(n).collect()
}

/// Checks `args` of `program` (its name, as allowed); `cwd` is where it runs, inside the
/// resolved `workspace`.
pub fn check(
    program: &str,
    args: &[String],
    workspace: &Path,
    cwd: &Path,
) -> Result<Cleared, Refusal> {
    let cleared = match program {
        "git" => git(args, workspace, cwd).map(|dir| Cleared { git_dir: Some(dir) }),
        "find" => find(args).map(|()| Cleared::default()),
        "sort" => sort(args).map(|()| Cleared::default()),
        _ => Ok(Cleared::default()),
    }?;
    // A repository's own files (hooks, config, the index) steer the next git command, the
    // person's own outside the box among them: no program but git itself writes there, and
    // git only through its commands, never through a file named in its arguments.
    if !READERS.contains(&program) {
        let cwd_inside = cwd.strip_prefix(workspace).is_ok_and(|below| {
            below
                .components()
                .any(|c| is_git_dir(&c.as_os_str().to_string_lossy()))
        });
        if cwd_inside {
            return Err(Refusal::InsideGitDir {
                program: program.to_owned(),
            });
        }
        if let Some(arg) = args
            .iter()
            .find(|a| names_git_internals(a) || leads_into_git(a, cwd))
        {
            return Err(Refusal::NamesGitInternals {
                program: program.to_owned(),
                arg: first(arg, 120),
            });
        }
    }
    Ok(cleared)
}

/// In a workspace the person chose in her home (`~/projects`), rather than Metnos's own
/// folder, a file the box writes is one of hers, and one that runs code later (a hidden
/// name such as `.envrc` or `.husky/pre-commit`, a `bin` folder, a venv's `site-packages`,
/// an executable script: `runs_later` says, as `fs_write` would) runs it at her next `cd`,
/// `git commit` or `python`, outside any box. There a program that may write what its
/// arguments name (all but the readers, and `find` and `sort`, whose writing forms are
/// refused anyway) names no such path, as written or through a link; git runs only its
/// commands that write nothing but the repository's objects, index and refs
/// ([`CHOSEN_GIT`]: a checkout could bring a `.envrc` no argument names), and no option of
/// its names such a file. The person writes one with `fs_write`, naming it.
pub fn check_chosen_workspace(
    program: &str,
    args: &[String],
    workspace: &Path,
    cwd: &Path,
    runs_later: &dyn Fn(&Path) -> Option<&'static str>,
) -> Result<(), Refusal> {
    if READERS.contains(&program) || matches!(program, "find" | "sort") {
        return Ok(());
    }
    let hidden = metnos_core::forbidden::HOME_HIDDEN;
    // A folder where what is made runs code later (a hidden one, a `bin`, `site-packages`,
    // `activate.d`): a file an option makes there (`-m.pth`) runs too.
    if let Some(rule) = hidden_below(cwd, workspace)
        .then_some(hidden)
        .or_else(|| runs_later(&cwd.join("x")))
    {
        return Err(Refusal::ChosenCwd {
            program: program.to_owned(),
            cwd: cwd.to_owned(),
            rule,
        });
    }
    // Git's commands that run here write only inside `.git` (and name the person's hidden
    // files as pathspecs: `git add .gitignore`), but for a file an output option names.
    let written: Vec<&str> = if program == "git" {
        chosen_git(args, workspace, cwd, hidden)?;
        git_option_values(args)
    } else {
        args.iter().map(String::as_str).collect()
    };
    for arg in written {
        let lexical = arg
            .split(['/', '=', ':', ','])
            .any(|part| hidden_part(part.trim()))
            .then_some(hidden);
        // Every value, options' too: a file may be named `-m.pth` or `-a/../run.sh`.
        let rule = lexical.or_else(|| {
            all_values(arg).find_map(|v| {
                let real = real_path(v, cwd);
                if !real.starts_with(workspace) {
                    return None;
                }
                runs_later(&real).or_else(|| hidden_below(&real, workspace).then_some(hidden))
            })
        });
        if let Some(rule) = rule {
            return Err(Refusal::ChosenRunsLater {
                program: program.to_owned(),
                arg: first(arg, 120),
                reason: metnos_core::forbidden::runs_code_later_reason(rule),
                rule,
            });
        }
    }
    Ok(())
}

/// The git commands that run in a workspace the person chose: they read, or write only the
/// repository's objects, index and refs. Every command that writes work-tree files
/// (`checkout`, `reset`, `merge`, `merge-file`, `bisect`, `stash`, …) or files of its own
/// naming (`format-patch`, `archive`) is refused there, and `--output` of any.
const CHOSEN_GIT: &[&str] = &[
    "add",
    "annotate",
    "blame",
    "branch",
    "cat-file",
    "check-attr",
    "check-ignore",
    "check-mailmap",
    "check-ref-format",
    "cherry",
    "column",
    "commit",
    "config",
    "count-objects",
    "describe",
    "diff",
    "diff-files",
    "diff-index",
    "diff-tree",
    "for-each-ref",
    "fsck",
    "grep",
    "init",
    "log",
    "ls-files",
    "ls-remote",
    "ls-tree",
    "merge-base",
    "name-rev",
    "range-diff",
    "remote",
    "rev-list",
    "rev-parse",
    "shortlog",
    "show",
    "show-branch",
    "show-ref",
    "status",
    "stripspace",
    "tag",
    "var",
    "verify-commit",
    "verify-tag",
    "version",
    "whatchanged",
];

/// Git in a workspace the person chose: only [`CHOSEN_GIT`]'s commands, run in no hidden
/// folder (`-C` from `cwd`), no file written by an option (`--output`), no configuration
/// written (`config` only reads, `remote` only lists), no `--template` (its hooks land in
/// `.git/hooks`).
fn chosen_git(
    args: &[String],
    workspace: &Path,
    cwd: &Path,
    rule: &'static str,
) -> Result<(), Refusal> {
    let mut rest = args;
    let mut dir = cwd.to_path_buf();
    while let Some((first, tail)) = rest.split_first() {
        match first.as_str() {
            "-C" => {
                if let Some(target) = tail.first() {
                    dir = real_path(target, &dir);
                    if hidden_below(&dir, workspace) {
                        return Err(Refusal::ChosenHiddenDir {
                            target: target.clone(),
                            rule,
                        });
                    }
                }
                rest = tail.get(1..).unwrap_or_default();
            }
            flag if flag.starts_with('-') => rest = tail,
            _ => break,
        }
    }
    let Some((command, options)) = rest.split_first() else {
        return Ok(());
    };
    let refused = |why: &'static str| {
        Err(Refusal::ChosenGit {
            command: command.clone(),
            why,
            rule,
        })
    };
    if !CHOSEN_GIT.contains(&command.as_str()) {
        return refused("may write files of the work tree");
    }
    if options
        .iter()
        .any(|o| abbreviates(o, "--output") || abbreviates(o, "--output-directory"))
    {
        return refused("`--output` writes a file of git's naming");
    }
    if options.iter().any(|o| abbreviates(o, "--template")) {
        return refused("`--template` copies hooks into the repository");
    }
    // A read action first: after a key, `-l` is a value (`config --add core.hooksPath -l`).
    let first = options.first().map(String::as_str);
    let reads = match command.as_str() {
        "config" => matches!(
            first,
            Some("--get" | "--get-all" | "--get-regexp" | "--list" | "-l" | "get" | "list")
        ),
        "remote" => matches!(
            options
                .iter()
                .find(|a| !a.starts_with('-'))
                .map(String::as_str),
            None | Some("show" | "get-url")
        ),
        _ => true,
    };
    if reads {
        Ok(())
    } else {
        refused("writes the repository's configuration")
    }
}

/// Git's options and the values of its output options (`--output x`, `-o x`, `-ox`).
fn git_option_values(args: &[String]) -> Vec<&str> {
    let mut values = Vec::new();
    let mut takes_value = false;
    for arg in args {
        if arg == "--" {
            break;
        }
        if takes_value || arg.starts_with('-') {
            values.push(arg.as_str());
        }
        if let Some(attached) = arg.strip_prefix("-o").filter(|v| !v.is_empty()) {
            values.push(attached);
        }
        takes_value = arg == "-o"
            || ["--output", "--output-directory"]
                .iter()
                .any(|name| abbreviates(arg, name) && !arg.contains('='));
    }
    values
}

/// Whether a path part is a hidden name (`.envrc`), not `.`, `..` or a range (`..main`).
fn hidden_part(part: &str) -> bool {
    part.starts_with('.') && !part.starts_with("..") && part != "."
}

/// Whether `path` lies below `workspace` through a hidden name (other than `.git`, which
/// has its own rule).
fn hidden_below(path: &Path, workspace: &Path) -> bool {
    path.strip_prefix(workspace).is_ok_and(|below| {
        below.components().any(|c| {
            let part = c.as_os_str().to_string_lossy();
            hidden_part(&part) && !is_git_dir(&part)
        })
    })
}

/// The values of an argument that may be paths: the whole (a name may begin with `-`), and
/// what follows `=` or `:`.
fn all_values(arg: &str) -> impl Iterator<Item = &str> {
    [
        Some(arg),
        arg.rsplit_once('=').map(|(_, v)| v),
        arg.rsplit_once(':').map(|(_, v)| v),
    ]
    .into_iter()
    .flatten()
    .filter(|v| !v.is_empty())
}

/// `value` taken as a path from `cwd` as the kernel will ([`crate::scope::physical`]).
fn real_path(value: &str, cwd: &Path) -> PathBuf {
    crate::scope::physical(&cwd.join(value))
}

/// The programs that only read the files their arguments name (and `echo`, `date`, `df`,
/// which name none): they may name a repository's own files.
const READERS: &[&str] = &[
    "ls", "cat", "head", "tail", "wc", "grep", "du", "df", "date", "echo",
];

/// Whether a path part is a repository's git folder (`.git`, however cased: a
/// case-insensitive file system takes `.GIT` for it).
fn is_git_dir(part: &str) -> bool {
    part.eq_ignore_ascii_case(".git")
}

/// Whether an argument names a path through a `.git` folder, as a value of its own or
/// after `=` or `:` (`--output=.git/hooks/x`, `of=repo/.git/config`).
fn names_git_internals(arg: &str) -> bool {
    arg.split(['/', '=', ':', ','])
        .any(|part| is_git_dir(part.trim()))
}

/// Whether an argument, taken as a path from `cwd` (whole, or after `=` or `:`), leads
/// into a `.git` folder once the links on its way are followed (`g/config` with `g` a
/// link to `.git`).
fn leads_into_git(arg: &str, cwd: &Path) -> bool {
    // Every value, an option's too: a link may be named `-g`.
    all_values(arg).any(|value| {
        real_path(value, cwd)
            .components()
            .any(|c| is_git_dir(&c.as_os_str().to_string_lossy()))
    })
}

/// Whether `arg` is `--name` or `--name=…` for an unambiguous prefix of `refused` (at
/// least one letter after the dashes).
fn abbreviates(arg: &str, refused: &str) -> bool {
    let name = arg.split_once('=').map_or(arg, |(name, _)| name);
    name.len() > 2 && name.starts_with("--") && refused.starts_with(name)
}

/// The short options bundled in `arg` (`-rxo` → `rxo`); none for `-`, `--…` and words.
fn short_bundle(arg: &str) -> &str {
    match arg.strip_prefix('-') {
        Some(rest) if !rest.starts_with('-') => rest,
        _ => "",
    }
}

/// Transports that run a command given in the URL (`ext::sh -c …`) or speak over a file
/// descriptor of ours (`fd::`).
fn names_a_command_transport(arg: &str) -> Option<&'static str> {
    let lower = arg.to_ascii_lowercase();
    ["ext::", "fd::"]
        .into_iter()
        .find(|transport| lower.contains(transport))
}

/// The git commands shell_exec runs: everyday work on a repository. Aliases, and commands
/// whose purpose is running other programs (`difftool`, `mergetool`, `filter-branch`,
/// `send-email`, `instaweb`, …), are not among them.
const GIT_COMMANDS: &[&str] = &[
    "add",
    "am",
    "annotate",
    "apply",
    "archive",
    "bisect",
    "blame",
    "branch",
    "bundle",
    "cat-file",
    "check-attr",
    "check-ignore",
    "check-mailmap",
    "check-ref-format",
    "checkout",
    "cherry",
    "cherry-pick",
    "clean",
    "clone",
    "column",
    "commit",
    "commit-tree",
    "config",
    "count-objects",
    "describe",
    "diff",
    "diff-files",
    "diff-index",
    "diff-tree",
    "fetch",
    "for-each-ref",
    "format-patch",
    "fsck",
    "gc",
    "grep",
    "hash-object",
    "init",
    "log",
    "ls-files",
    "ls-remote",
    "ls-tree",
    "merge",
    "merge-base",
    "merge-file",
    "merge-tree",
    "mktag",
    "mktree",
    "mv",
    "name-rev",
    "notes",
    "prune",
    "pull",
    "push",
    "range-diff",
    "read-tree",
    "rebase",
    "reflog",
    "remote",
    "repack",
    "replace",
    "reset",
    "restore",
    "rev-list",
    "rev-parse",
    "revert",
    "rm",
    "shortlog",
    "show",
    "show-branch",
    "show-ref",
    "sparse-checkout",
    "stash",
    "status",
    "stripspace",
    "submodule",
    "switch",
    "symbolic-ref",
    "tag",
    "update-index",
    "update-ref",
    "var",
    "verify-commit",
    "verify-pack",
    "verify-tag",
    "version",
    "whatchanged",
    "worktree",
    "write-tree",
];

/// Git's options before the command that shell_exec accepts (besides `-C <dir>`); every
/// other one is refused, `-c`, `--config-env`, `--exec-path`, `--git-dir` and
/// `--work-tree` first of all.
const GIT_GLOBAL_FLAGS: &[&str] = &[
    "--no-pager",
    "-P",
    "--no-replace-objects",
    "--no-lazy-fetch",
    "--no-optional-locks",
    "--no-advice",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--version",
    "-v",
];

/// Long options of any git command that run a program they are given.
const GIT_REFUSED_LONG: &[(&str, &str)] = &[
    ("--upload-pack", "runs the program it names"),
    ("--receive-pack", "runs the program it names"),
    ("--exec", "runs the program it names"),
    ("--config", "sets configuration, which can run programs"),
    ("--open-files-in-pager", "runs the program it names"),
    // A repository's own files under a name that is not `.git` (the person's git outside
    // the box would obey them, and no check knows the folder for what it is).
    (
        "--separate-git-dir",
        "keeps a repository's own files (hooks, config) in a folder not named .git",
    ),
    (
        "--bare",
        "makes a repository whose own files (hooks, config) are not under a .git folder",
    ),
    (
        "--mirror",
        "makes a bare repository, whose own files are not under a .git folder",
    ),
    // A repository nested in the workspace's keeps a configuration of its own (a filter
    // planted there after the check read it): git does not go into one.
    // A template's `config` and hooks are copied into the new repository as they are.
    (
        "--template",
        "copies a folder's files into the repository's own (its configuration, its hooks)",
    ),
    (
        "--recurse-submodules",
        "goes into nested repositories, whose configuration is not checked",
    ),
    (
        "--ignore-submodules",
        "decides whether git goes into nested repositories, whose configuration is not checked",
    ),
    (
        "--submodule",
        "goes into nested repositories, whose configuration is not checked",
    ),
];

/// Short options that run a program, per git command (`clone -u` is `--upload-pack`,
/// `rebase -x` is `--exec`, `grep -O` opens a pager).
fn git_refused_short(command: &str) -> &'static [(char, &'static str)] {
    match command {
        "clone" => &[
            ('u', "--upload-pack: runs the program it names"),
            ('c', "--config: sets configuration, which can run programs"),
        ],
        "ls-remote" => &[('u', "--upload-pack: runs the program it names")],
        "rebase" => &[('x', "--exec: runs the command it is given")],
        "grep" => &[('O', "--open-files-in-pager: runs the program it names")],
        _ => &[],
    }
}

fn git(args: &[String], workspace: &Path, cwd: &Path) -> Result<PathBuf, Refusal> {
    if let Some(transport) = args.iter().find_map(|a| names_a_command_transport(a)) {
        return Err(Refusal::Transport(transport));
    }
    let mut dir = cwd.to_path_buf();
    let mut rest = args;
    while let Some((first, tail)) = rest.split_first() {
        if !first.starts_with('-') {
            break;
        }
        match first.as_str() {
            "-C" => {
                let Some((target, tail)) = tail.split_first() else {
                    return Err(Refusal::NoFolder);
                };
                dir = inside_workspace(&dir, target, workspace)?;
                rest = tail;
                continue;
            }
            "-c" => {
                return Err(Refusal::SetsConfig);
            }
            flag if GIT_GLOBAL_FLAGS.contains(&flag) => {}
            other => {
                let name = other.split_once('=').map_or(other, |(name, _)| name);
                return Err(Refusal::GlobalOption(name.to_owned()));
            }
        }
        rest = tail;
    }
    let Some((command, options)) = rest.split_first() else {
        return Ok(dir);
    };
    if !GIT_COMMANDS.contains(&command.as_str()) {
        return Err(Refusal::GitCommand(first(command, 64)));
    }
    for arg in options {
        if let Some((long, why)) = GIT_REFUSED_LONG.iter().find(|(n, _)| abbreviates(arg, n)) {
            return Err(Refusal::GitLong {
                command: command.clone(),
                long,
                why,
            });
        }
        let bundle = short_bundle(arg);
        if let Some((letter, why)) = git_refused_short(command)
            .iter()
            .find(|(letter, _)| bundle.contains(*letter))
        {
            return Err(Refusal::GitShort {
                command: command.clone(),
                letter: *letter,
                why,
            });
        }
    }
    let first_word = options.iter().find(|a| !a.starts_with('-'));
    match (command.as_str(), first_word.map(String::as_str)) {
        ("bisect", Some("run")) => Err(Refusal::BisectRun),
        ("submodule", Some("foreach")) => Err(Refusal::SubmoduleForeach),
        // Only listing: the others check out, fetch or run in the nested repositories.
        ("submodule", Some(sub)) if sub != "status" => Err(Refusal::Submodule(first(sub, 32))),
        _ => Ok(dir),
    }
}

/// `target` (relative to `dir`) resolved, when it lies inside `workspace`.
fn inside_workspace(dir: &Path, target: &str, workspace: &Path) -> Result<PathBuf, Refusal> {
    let joined = dir.join(target);
    let real = resolve(&normalize(&joined)).map_err(|e| Refusal::FolderUnresolved {
        target: target.to_owned(),
        why: e.to_string(),
    })?;
    if !real.starts_with(workspace) {
        return Err(Refusal::FolderOutside {
            target: target.to_owned(),
            workspace: workspace.to_owned(),
        });
    }
    Ok(real)
}

/// find's actions that run a program, delete or write files.
const FIND_REFUSED: &[(&str, &str)] = &[
    ("-exec", "runs a program"),
    ("-execdir", "runs a program"),
    ("-ok", "runs a program"),
    ("-okdir", "runs a program"),
    ("-delete", "deletes files"),
    ("-fprint", "writes a file"),
    ("-fprint0", "writes a file"),
    ("-fprintf", "writes a file"),
    ("-fls", "writes a file"),
];

fn find(args: &[String]) -> Result<(), Refusal> {
    match args
        .iter()
        .find_map(|a| FIND_REFUSED.iter().find(|(name, _)| a == name))
    {
        Some(&(name, why)) => Err(Refusal::Find { name, why }),
        None => Ok(()),
    }
}

/// sort's short options whose value may follow in the same bundle (`-k2`, `-t,`).
const SORT_VALUED: &[char] = &['k', 't', 'S', 'T', 'y'];

fn sort(args: &[String]) -> Result<(), Refusal> {
    for arg in args {
        if abbreviates(arg, "--output") {
            return Err(Refusal::SortOutput);
        }
        if abbreviates(arg, "--compress-program") {
            return Err(Refusal::SortCompress);
        }
        for letter in short_bundle(arg).chars() {
            if letter == 'o' {
                return Err(Refusal::SortShortOutput);
            }
            if SORT_VALUED.contains(&letter) {
                break;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace the person chose runs fewer git commands than Metnos's own, never others.
    #[test]
    fn the_chosen_workspace_s_git_commands_are_among_the_shell_s() {
        for command in CHOSEN_GIT {
            assert!(GIT_COMMANDS.contains(command), "{command}");
        }
        assert!(CHOSEN_GIT.len() < GIT_COMMANDS.len());
    }

    fn words(text: &str) -> Vec<String> {
        shell_words::split(text).unwrap()
    }

    fn git_check(text: &str, workspace: &Path) -> Result<Cleared, String> {
        check("git", &words(text), workspace, workspace).map_err(|e| e.to_string())
    }

    #[test]
    fn everyday_git_passes() {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path().canonicalize().unwrap();
        std::fs::create_dir(ws.join("repo")).unwrap();
        for ok in [
            "status",
            "log --oneline -5",
            "diff --stat HEAD~1",
            "add -u",
            "commit -m 'a message'",
            "--no-pager log -p",
            "-C repo status",
            "ls-files --exclude-standard -o",
            "diff --exit-code",
            "grep -n TODO",
            "cherry-pick -x abc123",
            "commit -c HEAD",
            "fetch -u origin",
            "rebase -i HEAD~2",
            "clone https://example.com/r.git",
            "--version",
            "",
        ] {
            assert!(git_check(ok, &ws).is_ok(), "{ok}: {:?}", git_check(ok, &ws));
        }
        assert_eq!(
            git_check("-C repo status", &ws).unwrap().git_dir,
            Some(ws.join("repo"))
        );
    }

    #[test]
    fn git_code_running_forms_are_refused_and_named() {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path().canonicalize().unwrap();
        for (refused, named) in [
            ("-c alias.x='!sh e.sh' x", "`-c`"),
            ("-c core.fsmonitor=x status", "`-c`"),
            ("--config-env=core.pager=X log", "`--config-env`"),
            ("--exec-path=/tmp status", "`--exec-path`"),
            ("--git-dir=/elsewhere/.git status", "`--git-dir`"),
            ("--work-tree=/ status", "`--work-tree`"),
            ("-C / status", "outside the workspace"),
            ("-C .. status", "outside the workspace"),
            ("x", "`x` is not one of the git commands"),
            ("difftool --extcmd=sh", "`difftool`"),
            ("filter-branch --tree-filter 'sh e.sh'", "`filter-branch`"),
            ("ls-remote 'ext::sh -c touch% p'", "`ext::`"),
            ("fetch EXT::sh", "`ext::`"),
            ("clone fd::3 repo", "`fd::`"),
            ("fetch --upload-pack='sh e.sh' origin", "`--upload-pack`"),
            ("fetch --upload-p=sh origin", "`--upload-pack`"),
            ("clone -u 'sh e.sh' https://x/r", "`-u`"),
            ("clone -qu sh https://x/r", "`-u`"),
            ("clone -c core.hooksPath=. https://x/r", "`-c`"),
            (
                "clone --config=filter.x.smudge=sh https://x/r",
                "`--config`",
            ),
            ("push --receive-pack=sh origin", "`--receive-pack`"),
            ("archive --exec=sh --remote=x HEAD", "`--exec`"),
            ("rebase --exec 'sh e.sh' HEAD~1", "`--exec`"),
            ("rebase -x 'sh e.sh' HEAD~1", "`-x`"),
            ("rebase -ix sh HEAD~1", "`-x`"),
            ("grep -O TODO", "`-O`"),
            (
                "grep --open-files-in-pager=sh TODO",
                "`--open-files-in-pager`",
            ),
            ("bisect run sh e.sh", "git bisect run"),
            ("submodule foreach sh e.sh", "git submodule foreach"),
        ] {
            let error = git_check(refused, &ws).expect_err(refused);
            assert!(error.contains(named), "{refused}: {error}");
        }
    }

    #[test]
    fn find_actions_that_run_or_write_are_refused() {
        for ok in [
            "find . -name '*.md'",
            "find . -type f -newer x -print0",
            "find . -maxdepth 2 -printf '%p\\n'",
            "find . -name -exec.txt",
        ] {
            let w = words(ok);
            assert!(find(&w[1..]).is_ok(), "{ok}");
        }
        for (refused, named) in [
            ("find . -exec sh -c 'id' +", "`-exec`"),
            ("find . -execdir python3 x.py ;", "`-execdir`"),
            ("find . -ok rm {} ;", "`-ok`"),
            ("find . -okdir rm {} ;", "`-okdir`"),
            ("find . -delete", "`-delete`"),
            ("find . -fprint /tmp/x", "`-fprint`"),
            ("find . -fprintf /tmp/x %p", "`-fprintf`"),
            ("find . -fls /tmp/x", "`-fls`"),
        ] {
            let w = words(refused);
            let error = find(&w[1..]).expect_err(refused).to_string();
            assert!(error.contains(named), "{refused}: {error}");
        }
    }

    #[test]
    fn a_write_into_a_repositorys_git_folder_is_refused_for_every_writing_program() {
        let ws = Path::new("/w");
        for (program, command) in [
            ("git", "git log --output=.git/hooks/post-checkout"),
            ("git", "git log --output=repo/.git/hooks/pre-commit -1"),
            ("git", "git diff --output .git/config"),
            ("git", "git format-patch -o .GIT/hooks HEAD~1"),
            ("git", "git -C repo/.git log"),
            ("touch", "touch .git/hooks/pre-commit"),
            ("dd", "dd if=/dev/zero of=repo/.git/config count=0"),
            ("uniq", "uniq notes.txt .git/info/attributes"),
        ] {
            let args = words(command)[1..].to_vec();
            let refused = check(program, &args, ws, ws).unwrap_err().to_string();
            assert!(
                refused.contains("write.git_internals"),
                "{command}: {refused}"
            );
        }
        // Working inside it is refused too; reading it is not.
        let inside = Path::new("/w/repo/.git");
        assert!(check("touch", &words("hooks/x"), ws, inside).is_err());
        assert!(check("cat", &words(".git/config"), ws, ws).is_ok());
        assert!(check("ls", &words("repo/.git/hooks"), ws, ws).is_ok());
        // A name that only starts like it is another file.
        assert!(check("touch", &words(".gitignore .github/x"), ws, ws).is_ok());
    }

    #[test]
    fn a_repository_whose_own_files_are_not_under_dot_git_is_not_made() {
        let ws = Path::new("/w");
        for command in [
            "init --separate-git-dir=../gd site",
            "init --bare b.git",
            "clone --bare https://example.com/r.git b",
            "clone --mirror https://example.com/r.git m",
            "init --separate-git-di=x",
        ] {
            let refused = check("git", &words(command), ws, ws)
                .unwrap_err()
                .to_string();
            assert!(refused.contains("is refused"), "{command}: {refused}");
        }
    }

    /// Eighth review of issue 38: `git diff --ignore-submodules=none --submodule=diff` ran a
    /// filter planted in a nested repository after the pre-check had read it.
    #[test]
    fn git_does_not_go_into_nested_repositories() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = resolve(dir.path()).unwrap();
        for refused in [
            "diff --ignore-submodules=none --submodule=diff",
            "diff --submod=diff",
            "status --ignore-submodules=none",
            "checkout --recurse-submodules main",
            "submodule update --init",
        ] {
            let why = git_check(refused, &workspace).expect_err(refused);
            assert!(why.contains("nested repositories"), "{refused}: {why}");
        }
        assert!(git_check("submodule status", &workspace).is_ok());
        // Thirteenth review: a template's config is copied as it is, in any workspace.
        let why = git_check("init --templ=tpl b", &workspace).unwrap_err();
        assert!(why.contains("--template"), "{why}");
    }

    /// Seventh review of issue 38: a link named `-g` led into `.git` past the check.
    #[test]
    fn a_link_named_like_an_option_is_followed_too() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = resolve(dir.path()).unwrap();
        std::fs::create_dir_all(workspace.join(".git")).unwrap();
        std::os::unix::fs::symlink(".git", workspace.join("-g")).unwrap();
        let why = check(
            "uniq",
            &words("-- notes.txt -g/config"),
            &workspace,
            &workspace,
        )
        .unwrap_err()
        .to_string();
        assert!(why.contains("write.git_internals"), "{why}");
    }

    #[test]
    fn a_link_to_a_git_folder_is_the_git_folder() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join("repo/.git/hooks")).unwrap();
        std::os::unix::fs::symlink(ws.join("repo/.git"), ws.join("g")).unwrap();
        for command in [
            "uniq notes g/config",
            "touch g/hooks/pre-commit",
            "dd of=g/config",
        ] {
            let refused = check(
                command.split(' ').next().unwrap(),
                &words(command)[1..],
                &ws,
                &ws,
            )
            .unwrap_err()
            .to_string();
            assert!(
                refused.contains("write.git_internals"),
                "{command}: {refused}"
            );
        }
        assert!(check("touch", &words("notes.txt g2/x"), &ws, &ws).is_ok());
    }

    #[test]
    fn sort_output_and_compression_are_refused() {
        for ok in [
            "sort -r notes.txt",
            "sort -k2 -t, data.csv",
            "sort -rko data.csv",
            "sort -t o data.csv",
            "sort --reverse --unique a b",
            "sort --check x",
        ] {
            let w = words(ok);
            assert!(sort(&w[1..]).is_ok(), "{ok}");
        }
        for refused in [
            "sort -o out.txt in.txt",
            "sort -ro out.txt in.txt",
            "sort -roout.txt in.txt",
            "sort --output=out.txt in.txt",
            "sort --out out.txt in.txt",
            "sort --compress-program=sh in.txt",
            "sort --compress=sh in.txt",
        ] {
            let w = words(refused);
            assert!(sort(&w[1..]).is_err(), "{refused}");
        }
    }

    #[test]
    fn other_programs_are_left_to_the_sandbox() {
        let ws = Path::new("/w");
        assert_eq!(
            check("ls", &words("-la -exec"), ws, ws),
            Ok(Cleared::default())
        );
    }

    fn chosen(text: &str, workspace: &Path) -> Result<(), String> {
        let words = words(text);
        let (program, args) = words.split_first().unwrap();
        let runs_later = |real: &Path| {
            let name = real.file_name()?.to_string_lossy();
            (real
                .components()
                .any(|c| c.as_os_str() == "bin" || c.as_os_str() == "site-packages")
                || name.ends_with(".pth"))
            .then_some(metnos_core::forbidden::PROGRAM_FOLDER)
        };
        check_chosen_workspace(program, args, workspace, workspace, &runs_later)
            .map_err(|e| e.to_string())
    }

    /// Issue 38: in a workspace the person chose in her home, the box's files are hers,
    /// and a hidden one runs code at her next `cd` or `git status`.
    #[test]
    fn in_a_chosen_workspace_nothing_writes_a_hidden_file() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = resolve(dir.path()).unwrap();
        std::fs::create_dir_all(workspace.join(".vscode")).unwrap();
        std::os::unix::fs::symlink(workspace.join(".vscode"), workspace.join("vs")).unwrap();
        for refused in [
            "uniq notes.txt .envrc",
            "uniq notes.txt sub/.config/x",
            "uniq notes.txt vs/tasks.json",
            "tee --output-error=warn .envrc",
            "git checkout -b other",
            "git -C . switch main",
            "git reset --hard",
            "git apply change.diff",
            "git stash pop",
            "git merge-file .husky/pre-commit base.txt other.txt",
            "git bisect start c2 HEAD",
            "git bundle create b.bundle HEAD",
            "git update-index --add --cacheinfo 100644,abc,.cargo/config.toml",
            "uniq p.txt venv/bin/activate",
            "uniq p.txt venv/lib/python3.12/site-packages/zz.pth",
            "git config core.fsmonitor x",
            "git config --add core.hooksPath hooks",
            "git remote add origin https://evil.example/x",
            "git remote set-url origin https://evil.example/x",
            "git init --templ=tpl",
            "git diff --output=.envrc",
            "git diff --output .envrc",
            "git archive -o.envrc HEAD",
            "git format-patch -o .vscode HEAD~1",
            "git format-patch --suffix .pth -1",
            "git -C sub/.husky log -1 --output=pre-commit",
            "git -C . log -1 --outp=deploy.sh",
            "git show --output=x.txt",
            "git config --add core.hooksPath -l",
            "git config --unset core.bare -l",
        ] {
            let why = chosen(refused, &workspace).expect_err(refused);
            assert!(why.contains("rule write."), "{refused}: {why}");
        }
        for accepted in [
            "uniq notes.txt sorted.txt",
            "cat .envrc",
            "sort .envrc",
            "find .vscode -name '*.json'",
            "grep -r x .vscode",
            "git status",
            "git log --oneline ..main",
            "git add .gitignore",
            "git commit -m x",
            "git config --get user.name",
            "git config get user.name",
            "git config --list",
            "git remote -v",
            "git remote show origin",
            "git grep -o pattern",
            "git init",
        ] {
            assert_eq!(chosen(accepted, &workspace), Ok(()), "{accepted}");
        }
        // Fifth review: a value that begins with `-` is a path too; `..` after a link is
        // beside the link's target; a chain of dangling links is followed.
        std::fs::create_dir_all(workspace.join("tools/bin/sub")).unwrap();
        std::os::unix::fs::symlink(workspace.join("tools/bin/sub"), workspace.join("lnk")).unwrap();
        std::os::unix::fs::symlink("b", workspace.join("a")).unwrap();
        std::os::unix::fs::symlink(".husky/pre-commit", workspace.join("b")).unwrap();
        for refused in [
            "uniq -- notes.txt -a/../venv/bin/activate",
            "uniq -- notes.txt -m.pth",
            "uniq notes.txt lnk/../x",
            "uniq notes.txt a",
        ] {
            let why = chosen(refused, &workspace).expect_err(refused);
            assert!(why.contains("rule write."), "{refused}: {why}");
        }
        let packages = workspace.join("venv/lib/python3.12/site-packages");
        std::fs::create_dir_all(&packages).unwrap();
        let runs_later = |real: &Path| {
            real.components()
                .any(|c| c.as_os_str() == "site-packages")
                .then_some(metnos_core::forbidden::INTERPRETER_STARTUP)
        };
        let why = check_chosen_workspace(
            "uniq",
            &words("a -m.pth"),
            &workspace,
            &packages,
            &runs_later,
        )
        .unwrap_err()
        .to_string();
        assert!(why.contains("write.interpreter_startup"), "{why}");
        // Working inside a hidden folder is writing there.
        let inside = workspace.join(".vscode");
        let why = check_chosen_workspace("uniq", &words("a b"), &workspace, &inside, &|_| None)
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("working inside") && why.contains("write.home_hidden"),
            "{why}"
        );
    }
}
