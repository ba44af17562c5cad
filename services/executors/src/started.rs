//! What the person's start-up files run or load by path, beyond `.`/`source` lines and
//! git's includes ([`crate::scope::sourced_files`], [`crate::scope::git_included_files`]):
//! a write there runs code later as much as a write to `~/.bashrc` does (issue 38).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

use crate::scope::{GIT_CONFIGS, SHELL_STARTUP, normalize, walk_at_most};

/// Start-up files beyond the shell's and git's: what an X session, tmux, an editor, ssh,
/// a window manager, npm, pip, Python's prompt or direnv run or read at start.
const START_FILES: &[&str] = &[
    ".bash_logout",
    ".zlogout",
    ".xinitrc",
    ".xsession",
    ".tmux.conf",
    ".config/tmux/tmux.conf",
    ".vimrc",
    ".config/nvim/init.vim",
    ".config/nvim/init.lua",
    ".ssh/config",
    ".config/i3/config",
    ".config/sway/config",
    ".config/hypr/hyprland.conf",
    ".config/openbox/autostart",
    ".config/labwc/autostart",
    ".npmrc",
    ".config/pip/pip.conf",
    ".pip/pip.conf",
    ".pythonrc",
    ".pythonrc.py",
    ".config/direnv/direnvrc",
    ".envrc",
    ".gdbinit",
    ".lldbinit",
    ".emacs",
    ".emacs.d/init.el",
    ".emacs.d/early-init.el",
    ".config/emacs/init.el",
    ".Rprofile",
    ".psqlrc",
    ".muttrc",
    ".config/mutt/muttrc",
    ".mailcap",
    ".config/kitty/kitty.conf",
    ".config/sxhkd/sxhkdrc",
    ".config/polybar/config.ini",
    ".config/waybar/config",
];

/// Folders whose every file (and the files of their folders: unit drop-ins, launchers in
/// sub-menus) runs at login or start-up.
const START_FOLDERS: &[&str] = &[
    ".config/systemd/user",
    ".local/share/systemd/user",
    ".config/containers/systemd",
    ".config/autostart",
    ".config/autostart-scripts",
    ".config/plasma-workspace/env",
    ".config/environment.d",
    ".config/fish/conf.d",
    ".config/fish/functions",
    ".local/share/applications",
];

/// The most files of each of [`START_FOLDERS`] (or a sourced glob's folder) read.
const FOLDER_FILES: usize = 128;

/// The most files, and about the most bytes, read in all (start-up files, then what they
/// name, in turn): the walk runs at each write no other rule decided.
const STARTED_FILES: usize = 768;
const STARTED_BYTES: u64 = 8 << 20;

/// The most paths taken from one file, and variables remembered in all.
const NAMED_PER_FILE: usize = 256;
const VARIABLES: usize = 64;

/// Endings of files that hold what a person reads, never what runs: named in a start-up
/// file (`alias todo='vim ~/notes/todo.md'`, a launcher's icon) they stay the person's.
const DOCUMENT_ENDINGS: &[&str] = &[
    "md", "txt", "pdf", "png", "jpg", "jpeg", "gif", "svg", "ico", "xpm", "webp", "csv", "tsv",
    "log", "org", "odt", "ods", "odp", "doc", "docx", "xls", "xlsx", "ppt", "pptx", "mp3", "mp4",
    "mkv", "wav", "ogg", "flac", "epub",
];

/// Variables (and unit and launcher keys) naming files or folders an interpreter loads
/// from or a program starts in: a module there shadows any other (`PYTHONPATH=$HOME/pylib`
/// makes `~/pylib/requests.py` run at every `import requests`); a relative `ExecStart`
/// runs from `WorkingDirectory`.
static LOAD_PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\b(?:[A-Z][A-Z0-9_]*(?:PATH|_HOME|_DIR|_DIRS|_CUSTOM|_ROOT|LIB|_ENV|STARTUP|USERBASE|_PRELOAD)|ENV|ZDOTDIR|fpath|rtp|runtimepath|packpath|WorkingDirectory|Path)(?:\+?=\(?|\s+)(.*)",
    )
    .expect("the load-path pattern is valid")
});

/// A variable set to a path (`export DOTFILES=$HOME/dotfiles`, fish's `set -gx X ~/x`).
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[\s;&|])(?:set\s+(?:-\w+\s+)*([A-Za-z_]\w*)\s+|([A-Za-z_]\w*)=)(\S+)")
        .expect("the assignment pattern is valid")
});

/// A `.`/`source` of a variable (`. "$f"`, `source $f`).
static SOURCES_VARIABLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?:^|[;&|({!\s])(?:\.|source)[ \t]+["']?\$"#)
        .expect("the sourced-variable pattern is valid")
});

/// A loop over words (`for f in ~/dotfiles/bash/*; do`, zsh's `for f (~/x/*.zsh)`).
static FOR_LOOP: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bfor\s+\w+\s*(?:in\s|\()").expect("the loop pattern is valid"));

/// A line that reads or runs what follows as code: a `.`/`source` (of a shell, vim, tmux,
/// ssh's `Include`, direnv, gdb, R), or an interpreter given a file (`python3 ~/x.txt`).
static READS_AS_CODE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?:^|[;&|({!\s=])(?:\.|source|so|source-file|source_env|source_up|Include|include|runtime|luafile|load|bash|sh|zsh|dash|fish|python[0-9.]*|perl|ruby|node|Rscript|lua|php|exec)[ \t(]+[^;&|]*$",
    )
    .expect("the reads-as-code pattern is valid")
});

/// How many lines from a loop's start are looked at for a `.` of its variable.
const LOOP_LINES: usize = 24;

/// The files and folders of `home` that what runs at start-up runs or loads by path, and
/// the start-up files themselves where they really are:
/// - every path a start-up file names but a folder or a document (`bash ~/scripts/up.sh`,
///   `python3 ~/tools/sync`, `%h/backup/run`, `EnvironmentFile=%h/app/env`, there or not
///   yet), read in turn as a start-up file itself;
/// - the folders a load path or a working folder names (`PYTHONPATH=$HOME/pylib`);
/// - the folder of a glob a loop or a `.` sources (`for f in ~/dotfiles/bash/*; do . "$f"`),
///   its files read in turn.
///
/// Paths are read after quotes are taken out and the variables the files set to a path
/// are put in (`DOTFILES=$HOME/dotfiles` … `. "$DOTFILES/aliases"`). (`sourced` and
/// `included`: what the shell's start-up files source and git includes, read too.)
pub fn by_path(home: &Path, sourced: &[PathBuf], included: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(words) = path_words(home) else {
        return Vec::new();
    };
    let starts = SHELL_STARTUP
        .iter()
        .chain(GIT_CONFIGS)
        .chain(START_FILES)
        .map(|name| home.join(name))
        .chain(sourced.iter().cloned())
        .chain(included.iter().cloned())
        .chain(
            START_FOLDERS
                .iter()
                .flat_map(|folder| folder_files(&home.join(folder))),
        );
    let variables = RefCell::new(Vec::new());
    let places = Places {
        words,
        home,
        known: RefCell::new(std::collections::HashMap::new()),
    };
    let walked = walk_at_most(starts, (STARTED_FILES, STARTED_BYTES), |_, text| {
        named_in(text, &places, &mut variables.borrow_mut())
    });
    let mut found = walked.found;
    found.extend(walked.read);
    found
}

/// What one start-up file's `text` names ([`by_path`]): (path, whether to read it in
/// turn). `variables` are the path variables set so far, and those this file sets. A
/// binary file (an AppImage a launcher runs) names nothing.
fn named_in(
    text: &str,
    places: &Places<'_>,
    variables: &mut Vec<(String, String)>,
) -> Vec<(PathBuf, bool)> {
    let words = &places.words;
    if text.starts_with("\u{7f}ELF") || text.contains('\0') {
        return Vec::new();
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut named = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut add = |named: &mut Vec<(PathBuf, bool)>, path: PathBuf, follow: bool| {
        if seen.insert(path.clone()) {
            named.push((path, follow));
        }
    };
    for (n, line) in lines.iter().enumerate() {
        if named.len() >= NAMED_PER_FILE {
            break;
        }
        let mut line = expanded(line, variables);
        if line.contains(['"', '\'']) {
            line = line.replace(['"', '\''], "");
        }
        // A line naming no path under the home names nothing (the cheap test first).
        if !words.is_match(&line) {
            continue;
        }
        let sets = line.contains('=') || line.contains("set ");
        if sets {
            remember(&line, words, variables);
            for load in LOAD_PATH.captures_iter(&line) {
                for word in places.words_in(&load[1]) {
                    add(&mut named, word.path, false);
                }
            }
        }
        // A glob is sourced by a loop whose body sources its variable, or read as code.
        let looped = line.contains("for")
            && FOR_LOOP.is_match(&line)
            && loop_body(&lines[n..(n + LOOP_LINES).min(lines.len())])
                .iter()
                .any(|l| SOURCES_VARIABLE.is_match(l));
        for word in places.words_in(&line) {
            // Asked only of a glob or a document (the regular expression is the costly part).
            let at = word.at;
            let as_code = || READS_AS_CODE.is_match(&line[..at]);
            match word {
                Word { glob: true, .. } if looped || as_code() => {
                    for file in folder_files(&word.path) {
                        add(&mut named, file, true);
                    }
                    add(&mut named, word.path, false);
                }
                // Cut by a variable not known or a command's output: the folder before it.
                Word { cut: true, .. } => add(&mut named, word.path, false),
                Word { glob: false, .. } if runs(&word, as_code) => {
                    add(&mut named, word.path, true);
                }
                _ => {}
            }
        }
    }
    named
}

/// The lines of the loop `lines` begins with: its own line when it ends there (`…; do …;
/// done`), else to the later of two ends, erring toward a longer body: where `do` and
/// `done` (and `{` `}`) balance, and the first `done` or `}` beginning a line indented no
/// more than the loop's (a nested loop's or a `done=…` word does not end it); at most the
/// lines given.
fn loop_body<'a, 'b>(lines: &'b [&'a str]) -> &'b [&'a str] {
    static CLOSES: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^(?:done(?:$|[\s;&|)>#])|\})").expect("the loop-end pattern is valid")
    });
    static ONE_LINE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\bdo\b.*[;&\s]done\s*(?:$|[;&|>#])").expect("the one-line pattern is valid")
    });
    // Columns, a tab to the next multiple of eight.
    let indent = |line: &str| {
        line.chars()
            .take_while(|c| c.is_whitespace())
            .fold(
                0,
                |col, c| if c == '\t' { col / 8 * 8 + 8 } else { col + 1 },
            )
    };
    let Some(first) = lines.first() else {
        return lines;
    };
    if ONE_LINE.is_match(first) && depth(first) <= 0 {
        return &lines[..1];
    }
    let by_indent = lines
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, l)| indent(l) <= indent(first) && CLOSES.is_match(l.trim_start()))
        .map_or(lines.len(), |(at, _)| at + 1);
    let mut open = 0;
    let by_depth = lines
        .iter()
        .position(|l| {
            open += depth(l);
            open <= 0
        })
        .map_or(lines.len(), |at| at + 1);
    &lines[..by_indent.max(by_depth).max(1)]
}

/// What `line` opens less what it closes: `do` and `{` open, `done` and `}` close (a
/// comment, and a `done=` assignment, left out).
fn depth(line: &str) -> i32 {
    let code = line.split('#').next().unwrap_or_default();
    let mut depth = 0;
    let mut rest = code;
    while let Some(at) =
        rest.find(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '{' || c == '}')
    {
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix('{') {
            depth += 1;
            rest = after;
            continue;
        }
        if let Some(after) = rest.strip_prefix('}') {
            depth -= 1;
            rest = after;
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        match (&rest[..end], rest[end..].starts_with('=')) {
            ("do", false) => depth += 1,
            ("done", false) => depth -= 1,
            _ => {}
        }
        rest = &rest[end..];
    }
    depth
}

/// Whether a path a start-up file names counts: anything but a folder there or a document
/// (a document too when the line reads it as code: `source ~/notes/abbrev.txt`).
fn runs(word: &Word, as_code: impl Fn() -> bool) -> bool {
    let document = word.path.extension().is_some_and(|e| {
        DOCUMENT_ENDINGS.contains(&e.to_string_lossy().to_ascii_lowercase().as_str())
    });
    !word.folder && (!document || as_code())
}

/// `line` with the path variables set so far put in (`$DOTFILES/x`, `${DOTFILES}/x`).
fn expanded(line: &str, variables: &[(String, String)]) -> String {
    if !line.contains('$') {
        return line.to_owned();
    }
    // `${NAME:-word}` (and `:=`, `-`, `=`): the known value, else the word.
    static DEFAULTED: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\$\{([A-Za-z_]\w*):?[-=]([^}]*)\}").expect("the default pattern is valid")
    });
    let mut line = DEFAULTED
        .replace_all(line, |c: &regex::Captures<'_>| {
            variables
                .iter()
                .find(|(name, _)| name == &c[1])
                .map_or_else(|| c[2].to_owned(), |(_, value)| value.clone())
        })
        .into_owned();
    for (name, value) in variables {
        line = line.replace(&format!("${{{name}}}"), value);
        let mut out = String::with_capacity(line.len());
        let mut rest = line.as_str();
        let spelled = format!("${name}");
        while let Some(at) = rest.find(&spelled) {
            let after = &rest[at + spelled.len()..];
            out.push_str(&rest[..at]);
            if after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                out.push_str(&spelled);
            } else {
                out.push_str(value);
            }
            rest = after;
        }
        out.push_str(rest);
        line = out;
    }
    line
}

/// Remembers the variables `line` sets to a path under the home (its whole value).
fn remember(line: &str, words: &Regex, variables: &mut Vec<(String, String)>) {
    for set in ASSIGNMENT.captures_iter(line) {
        let name = set.get(1).or(set.get(2)).map_or("", |m| m.as_str());
        let value = &set[3];
        let whole = words
            .find(value)
            .is_some_and(|w| w.start() == 0 && w.end() == value.len());
        if name.is_empty() || !whole || variables.len() >= VARIABLES {
            continue;
        }
        variables.retain(|(known, _)| known != name);
        variables.push((name.to_owned(), value.trim_end_matches('/').to_owned()));
    }
}

/// The pattern of a path under `home` as start-up files write it: `~/…`, `$HOME/…`,
/// `${HOME}/…`, `%h/…` (systemd) or the home's own absolute path.
fn path_words(home: &Path) -> Result<Regex, regex::Error> {
    let home = regex::escape(&home.to_string_lossy());
    Regex::new(&format!(
        r#"(?:~|\$HOME|\$\{{HOME\}}|%h|{home})/[^\s'"`;&|<>(){{}}:=,$\\]*"#
    ))
}

/// A path a start-up file names.
struct Word {
    /// Where it is, as the kernel takes it (a link followed, a dangling one too).
    path: PathBuf,
    /// Where it begins in the line.
    at: usize,
    /// It held a glob: `path` is the folder before it.
    glob: bool,
    /// A variable not known or a command's output follows it: `path` is the folder before.
    cut: bool,
    /// `path` is a folder there.
    folder: bool,
}

/// How paths under a home are found in start-up files, each resolved once (a script of
/// forty lines names the same few paths again and again).
struct Places<'a> {
    words: Regex,
    home: &'a Path,
    /// A path as written below the home → where it is, and whether a folder is there.
    known: RefCell<std::collections::HashMap<String, (PathBuf, bool)>>,
}

impl Places<'_> {
    /// The paths under the home `text` names.
    fn words_in<'t>(&'t self, text: &'t str) -> impl Iterator<Item = Word> + 't {
        self.words.find_iter(text).filter_map(move |found| {
            let word = found.as_str();
            let (_, rest) = word.split_once('/')?;
            let rest = if word.starts_with('/') {
                // The home's absolute path: what follows it.
                word.strip_prefix(self.home.to_str()?)?
                    .trim_start_matches('/')
            } else {
                rest
            };
            let cut = text[found.end()..].starts_with(['$', '`']);
            let (path, glob) = match rest.find(['*', '?', '[']) {
                Some(at) => (
                    rest[..at].rsplit_once('/').map_or("", |(folder, _)| folder),
                    true,
                ),
                None if cut => (
                    rest.rsplit_once('/').map_or("", |(folder, _)| folder),
                    false,
                ),
                None => (rest, false),
            };
            if path.is_empty() {
                return None;
            }
            let (path, folder) = self.placed(path);
            Some(Word {
                path,
                at: found.start(),
                glob,
                cut,
                folder,
            })
        })
    }

    /// Where `below` (written below the home) is, as the kernel takes it, and whether a
    /// folder is there.
    fn placed(&self, below: &str) -> (PathBuf, bool) {
        if let Some(known) = self.known.borrow().get(below) {
            return known.clone();
        }
        let path = crate::scope::physical(&normalize(&self.home.join(below)));
        let folder = path.is_dir();
        let mut known = self.known.borrow_mut();
        if known.len() < 4096 {
            known.insert(below.to_owned(), (path.clone(), folder));
        }
        (path, folder)
    }
}

/// The regular files of `folder` and of its folders, at most [`FOLDER_FILES`], in name
/// order.
fn folder_files(folder: &Path) -> Vec<PathBuf> {
    let listed = |dir: &Path| -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
        paths.sort();
        paths
    };
    let mut files = Vec::new();
    for path in listed(folder) {
        if files.len() >= FOLDER_FILES {
            break;
        }
        if path.is_dir() {
            files.extend(listed(&path).into_iter().filter(|p| p.is_file()));
        } else if path.is_file() {
            files.push(path);
        }
    }
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

    /// Twenty-sixth and twenty-seventh reviews of issue 38: a script an alias, a git alias
    /// or a user unit runs, the folder a loop sources, a load path's folder, a file named
    /// through a variable or in quotes, a unit's drop-in and working folder, what an X
    /// session starts were ordinary files: a write there ran at the next shell, `git x`,
    /// login or `import`, with no card.
    #[test]
    fn what_start_up_files_run_or_load_by_path_runs_code_later() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        let h = home.display();
        write(
            &home.join(".bashrc"),
            "alias up='bash ~/scripts/up.sh'\nalias todo='vim ~/notes/todo.md'\n\
             alias sync='python3 ~/tools/sync'\n\
             for f in ~/dotfiles/bash/*; do\n  . \"$f\"\ndone\n\
             export PYTHONPATH=$HOME/pylib:$PYTHONPATH\nalias pdfs='ls ~/Downloads/*.pdf'\n\
             export DOTFILES=\"$HOME/dotfiles\"\nsource \"$DOTFILES/aliases\"\n\
             . \"$HOME\"/dotfiles/quoted.sh\n\
             for t in ~/Documents/*.txt; do wc \"$t\"; done\nalias cl='rm -f ~/Downloads/*.sh'\n\
             for g in ~/dotfiles/sh/*; do\n  for x in a b; do :; done\n  done=$((done+1)) # done\n  . \"$g\"\ndone\n\
             for z in ~/dotfiles/braced/*; {\n  [[ -r $z ]] || continue\n  source $z\n}\n\
             for h in ~/dotfiles/flat/*; do\nfor o in a b; do\n:\ndone\n. \"$h\"\ndone\n",
        );
        write(
            &home.join("dotfiles/bash/more"),
            "alias up2='bash ~/scripts/up2'\n",
        );
        write(&home.join("notes/todo.md"), "# my list\n");
        write(
            &home.join(".gitconfig"),
            "[alias]\n\tx = !sh ~/scripts/x.sh\n",
        );
        write(
            &home.join(".config/systemd/user/sync.service"),
            "[Service]\nExecStart=/usr/bin/python3 %h/tools/sync.py\nWorkingDirectory=%h/app\n",
        );
        write(
            &home.join(".config/systemd/user/sync.service.d/override.conf"),
            "[Service]\nExecStartPre=/usr/bin/python3 %h/tools/pre.py\n",
        );
        write(
            &home.join(".config/autostart/start.desktop"),
            &format!("[Desktop Entry]\nExec={h}/tools/start\nIcon={h}/Pictures/icon.png\n"),
        );
        write(&home.join(".xinitrc"), "sh ~/scripts/x11 &\nexec i3\n");
        write(
            &home.join("tools/start"),
            "#!/bin/sh\nexec ~/tools/helper.py\n",
        );
        write(&home.join("tools/sync.py"), "import os\n");
        std::fs::create_dir_all(home.join("app")).unwrap();
        write(&home.join("projects/s/s.service"), "[Service]\n");
        std::os::unix::fs::symlink(
            home.join("projects/s/s.service"),
            home.join(".config/systemd/user/s.service"),
        )
        .unwrap();
        // Twenty-eighth review: folders code is loaded from, more start-up files, a
        // variable set in an earlier file or with a default, a word cut by a variable, a
        // document read as code, zsh's short loop, ssh's Include, a dangling link.
        write(
            &home.join(".zshenv"),
            "export ZDOT=$HOME/zdot\nexport XDG_CONFIG_HOME=$HOME/cfg\n",
        );
        write(
            &home.join(".zshrc"),
            "ZSH_CUSTOM=$HOME/dotfiles/omz\nfpath=(~/dotfiles/zfunc $fpath)\n\
             source $ZDOT/aliases.zsh\nsource ${DF:-$HOME/df}/env.sh\n\
             source ~/dotfiles/hosts/$HOST.zsh\nfor f (~/dotfiles/zsh/*.zsh) source $f\n\
             alias p='cd ~/projects'\nalias up3='bash ~/scripts/up3'\n",
        );
        write(
            &home.join(".vimrc"),
            "set rtp+=~/src/myplugin\nsource ~/notes/abbrev.txt\n",
        );
        write(
            &home.join(".gdbinit"),
            &format!("source {h}/pwndbg/gdbinit.py\n"),
        );
        write(&home.join(".ssh/config"), "Include ~/dotfiles/ssh/*.conf\n");
        write(
            &home.join("dotfiles/ssh/a.conf"),
            "Host x\n  ProxyCommand sh ~/bin2/proxy\n",
        );
        std::fs::create_dir_all(home.join("projects")).unwrap();
        std::fs::create_dir_all(home.join("scripts")).unwrap();
        std::os::unix::fs::symlink(home.join("other/up3.sh"), home.join("scripts/up3")).unwrap();
        let found = by_path(&home, &[], &[]);
        for counted in [
            "dotfiles/omz",
            "dotfiles/zfunc",
            "cfg",
            "zdot/aliases.zsh",
            "df/env.sh",
            "dotfiles/hosts",
            "dotfiles/zsh",
            "dotfiles/sh",
            "dotfiles/braced",
            "dotfiles/flat",
            "src/myplugin",
            "notes/abbrev.txt",
            "pwndbg/gdbinit.py",
            "dotfiles/ssh",
            "bin2/proxy",
            "other/up3.sh",
            "scripts/up.sh",
            "scripts/x.sh",
            "tools/sync",
            "dotfiles/bash",
            "scripts/up2",
            "dotfiles/aliases",
            "dotfiles/quoted.sh",
            "pylib",
            "tools/sync.py",
            "tools/pre.py",
            "app",
            "tools/start",
            "tools/helper.py",
            "scripts/x11",
            "projects/s/s.service",
        ] {
            assert!(found.contains(&home.join(counted)), "{counted}: {found:?}");
        }
        for ordinary in [
            "notes/todo.md",
            "Downloads",
            "Documents",
            "Pictures/icon.png",
            "notes",
            "projects",
        ] {
            assert!(
                !found.contains(&home.join(ordinary)),
                "{ordinary}: {found:?}"
            );
        }
    }

    /// A FIFO a start-up file names is not waited on when it is read in turn.
    #[test]
    fn a_fifo_named_in_a_start_up_file_is_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            home.join("pipe"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        write(&home.join(".bashrc"), "alias p='cat ~/pipe'\n");
        // Named, it counts; read in turn, it is not waited on (the walk ends).
        assert!(by_path(&home, &[], &[]).contains(&home.join("pipe")));
    }
}
