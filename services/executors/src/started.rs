//! What the person's start-up files run or load by path, beyond `.`/`source` lines and
//! git's includes ([`crate::scope::sourced_files`], [`crate::scope::git_included_files`]):
//! a write there runs code later as much as a write to `~/.bashrc` does (issue 38).

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

use crate::scope::{GIT_CONFIGS, SHELL_STARTUP, normalize, resolve, walk_at_most};

/// Folders whose every file runs at login or start-up: user units, autostart and menu
/// launchers, the session's environment, fish's snippets.
const START_FOLDERS: &[&str] = &[
    ".config/systemd/user",
    ".config/autostart",
    ".config/environment.d",
    ".config/fish/conf.d",
    ".local/share/applications",
];

/// The most files of each of [`START_FOLDERS`] read.
const FOLDER_FILES: usize = 64;

/// The most files read in all (start-up files, then the scripts they name, in turn).
const STARTED_FILES: usize = 256;

/// The endings of a file that is a program to some interpreter.
const SCRIPT_ENDINGS: &[&str] = &[
    "sh", "bash", "zsh", "ksh", "fish", "py", "pyw", "pl", "pm", "rb", "js", "mjs", "cjs", "ts",
    "lua", "vim", "el", "php", "tcl", "awk", "ps1", "so", "jar",
];

/// Variables naming files or folders an interpreter loads from (a module there shadows any
/// other: `PYTHONPATH=$HOME/pylib` makes `~/pylib/requests.py` run at every `import
/// requests`), or a file a shell runs first.
static LOAD_PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\b(?:PYTHONPATH|PYTHONSTARTUP|PYTHONUSERBASE|NODE_PATH|PERL5LIB|PERLLIB|RUBYLIB|BASH_ENV|ENV|ZDOTDIR|LD_PRELOAD|LD_LIBRARY_PATH|GIT_EXEC_PATH|GIT_TEMPLATE_DIR|LUA_PATH|LUA_CPATH|R_LIBS_USER|JULIA_LOAD_PATH|GEM_HOME|GEM_PATH|GUILE_LOAD_PATH)(?:=|\s+)(\S+)",
    )
    .expect("the load-path pattern is valid")
});

/// A `.`/`source` of a variable (`for f in ~/dotfiles/*; do . "$f"; done`): the globs of
/// that file are folders whose every file is sourced.
static SOURCES_VARIABLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?m)(?:^|[;&|({!]|\bthen|\bdo|\belse)\s*(?:\.|source)[ \t]+["']?\$"#)
        .expect("the sourced-variable pattern is valid")
});

/// A line of a loop or a source (`for f in ~/dotfiles/*; do`, `. ~/x/*.inc`).
static LOOP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[;&|({!\s])(?:for|source|\.)\s").expect("the loop pattern is valid")
});

/// The files and folders of `home` that what runs at start-up runs or loads by path: a
/// script an alias, a git alias or command setting, a user unit's `Exec*=` or a launcher's
/// `Exec=` names (`bash ~/scripts/up.sh`, `%h/tools/sync.py`, and what that names in turn),
/// the folder of a glob of sourced files (`for f in ~/dotfiles/bash/*; do . "$f"`), the
/// files and folders a load path names (`PYTHONPATH=$HOME/pylib`). A named file counts
/// when it is a script — its name ends like one, or it begins with `#!` — so `vim
/// ~/notes/todo.md` does not make a note code.
/// (`sourced` and `included`: what the shell's start-up files source and git includes,
/// read as start-up files too.)
pub fn by_path(home: &Path, sourced: &[PathBuf], included: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(words) = path_words(home) else {
        return Vec::new();
    };
    let starts = SHELL_STARTUP
        .iter()
        .chain(GIT_CONFIGS)
        .map(|name| home.join(name))
        .chain(sourced.iter().cloned())
        .chain(included.iter().cloned())
        .chain(
            START_FOLDERS
                .iter()
                .flat_map(|folder| folder_files(&home.join(folder))),
        );
    walk_at_most(starts, STARTED_FILES, |_, text| {
        let globs_sourced = SOURCES_VARIABLE.is_match(text);
        let mut named = Vec::new();
        for load in LOAD_PATH.captures_iter(text) {
            named.extend(words_in(&words, &load[1], home).map(|(path, _)| (path, false)));
        }
        for line in text.lines() {
            // A glob on a loop's or a source's line, in a file sourcing a variable.
            let looped = globs_sourced && LOOP.is_match(line);
            for (path, glob) in words_in(&words, line, home) {
                if let Some(glob) = glob {
                    if looped || script_name(&glob) {
                        named.push((path, false));
                    }
                } else if script(&path) {
                    named.push((path, true));
                }
            }
        }
        named
    })
}

/// The pattern of a path under `home` as start-up files write it: `~/…`, `$HOME/…`,
/// `${HOME}/…`, `%h/…` (systemd) or the home's own absolute path.
fn path_words(home: &Path) -> Result<Regex, regex::Error> {
    let home = regex::escape(&home.to_string_lossy());
    Regex::new(&format!(
        r#"(?:~|\$HOME|\$\{{HOME\}}|%h|{home})/[^\s'"`;&|<>(){{}}:=,$\\]*"#
    ))
}

/// The paths `words` finds in `text`, resolved, each with the glob it was when it held one
/// (then the path is the folder before the glob).
fn words_in<'a>(
    words: &'a Regex,
    text: &'a str,
    home: &'a Path,
) -> impl Iterator<Item = (PathBuf, Option<String>)> + 'a {
    words.find_iter(text).filter_map(move |word| {
        let word = word.as_str();
        let (_, rest) = word.split_once('/')?;
        let rest = if word.starts_with('/') {
            // The home's absolute path: what follows it.
            word.strip_prefix(home.to_str()?)?.trim_start_matches('/')
        } else {
            rest
        };
        let (path, glob) = match rest.find(['*', '?', '[']) {
            Some(at) => {
                let folder = rest[..at].rsplit_once('/').map_or("", |(folder, _)| folder);
                (folder, Some(rest.to_owned()))
            }
            None => (rest, None),
        };
        if path.is_empty() {
            return None;
        }
        let path = normalize(&home.join(path));
        Some((resolve(&path).unwrap_or(path), glob))
    })
}

/// Whether `name` ends like a script's name.
fn script_name(name: &str) -> bool {
    name.rsplit_once('.')
        .is_some_and(|(_, ending)| SCRIPT_ENDINGS.contains(&ending.to_ascii_lowercase().as_str()))
}

/// Whether `path` is a script: named like one (there or not yet), or a file beginning `#!`.
fn script(path: &Path) -> bool {
    if path
        .file_name()
        .is_some_and(|n| script_name(&n.to_string_lossy()))
    {
        return true;
    }
    // Not waiting on a FIFO: opened non-blocking, read only when a regular file.
    use rustix::fs::{FileType, Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::open(path, flags, Mode::empty()) else {
        return false;
    };
    let regular = rustix::fs::fstat(&fd)
        .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile);
    let mut start = [0u8; 2];
    regular && rustix::io::pread(&fd, &mut start, 0).is_ok_and(|n| n == 2) && &start == b"#!"
}

/// The regular files of `folder`, at most [`FOLDER_FILES`], in name order.
fn folder_files(folder: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .take(FOLDER_FILES * 4)
        .collect();
    files.sort();
    files.truncate(FOLDER_FILES);
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Twenty-sixth review of issue 38: a script an alias, a git alias or a user unit runs,
    /// the folder a loop sources, a load path's folder were ordinary files: a write there
    /// ran at the next shell, `git x`, login or `import`, with no card.
    #[test]
    fn what_start_up_files_run_or_load_by_path_runs_code_later() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        let h = home.display();
        write(
            &home.join(".bashrc"),
            "alias up='bash ~/scripts/up.sh'\nalias todo='vim ~/notes/todo.md'\n\
             for f in ~/dotfiles/bash/*; do . \"$f\"; done\n\
             export PYTHONPATH=$HOME/pylib:$PYTHONPATH\nalias pdfs='ls ~/Downloads/*.pdf'\n",
        );
        write(&home.join("notes/todo.md"), "# my list\n");
        write(
            &home.join(".gitconfig"),
            "[alias]\n\tx = !sh ~/scripts/x.sh\n",
        );
        write(
            &home.join(".config/systemd/user/sync.service"),
            "[Service]\nExecStart=/usr/bin/python3 %h/tools/sync.py\n",
        );
        write(
            &home.join(".config/autostart/start.desktop"),
            &format!("[Desktop Entry]\nExec={h}/tools/start\nIcon={h}/Pictures/icon.png\n"),
        );
        write(
            &home.join("tools/start"),
            "#!/bin/sh\nexec ~/tools/helper.py\n",
        );
        write(&home.join("tools/sync.py"), "import os\n");
        let found = by_path(&home, &[], &[]);
        for counted in [
            "scripts/up.sh",
            "scripts/x.sh",
            "dotfiles/bash",
            "pylib",
            "tools/sync.py",
            "tools/start",
            "tools/helper.py",
        ] {
            assert!(found.contains(&home.join(counted)), "{counted}: {found:?}");
        }
        for ordinary in ["notes/todo.md", "Downloads", "Pictures/icon.png", "notes"] {
            assert!(
                !found.contains(&home.join(ordinary)),
                "{ordinary}: {found:?}"
            );
        }
    }

    /// A FIFO named like a file a start-up file runs is not waited on.
    #[test]
    fn a_fifo_named_in_a_start_up_file_is_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &home.join("pipe"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        write(&home.join(".bashrc"), "alias p='cat ~/pipe'\n");
        assert!(!by_path(&home, &[], &[]).contains(&home.join("pipe")));
    }
}
