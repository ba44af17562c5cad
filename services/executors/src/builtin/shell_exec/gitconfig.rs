//! Git inside the shell: the configuration a repository in the workspace may not hold, and
//! the environment every command runs with.
//!
//! The environment shuts out the system and global configuration (the per-run home is
//! empty anyway) and overrides, with the precedence of `git -c`, every fixed key that runs a
//! program (`core.fsmonitor`, `core.hooksPath`, `core.pager`, `core.sshCommand`, the editors,
//! the signing programs) and every transport that runs one (`ext::`, `fd::`, local and ssh
//! transports; only https is allowed, and the sandbox has no network anyway). What the
//! environment cannot override is a key with a name of the repository's choosing — an
//! alias, a filter or diff driver, a URL rewrite, an include — so a repository whose
//! configuration holds one (files anyone with `fs_write` may have planted) is refused.

use std::path::Path;

/// `GIT_CONFIG_COUNT` overrides: above the repository's own configuration.
const OVERRIDES: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.sshCommand", "false"),
    ("core.editor", ":"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.program", "false"),
    ("sequence.editor", ":"),
    ("safe.bareRepository", "explicit"),
    // A repository inside the workspace's repository (a submodule added in place) has a
    // configuration of its own the pre-check does not read: git does not go into it.
    ("diff.ignoreSubmodules", "all"),
    ("submodule.recurse", "false"),
    ("status.submoduleSummary", "false"),
    ("diff.submodule", "short"),
    ("fetch.recurseSubmodules", "false"),
    ("protocol.allow", "never"),
    ("protocol.https.allow", "always"),
    ("protocol.http.allow", "never"),
    ("protocol.ssh.allow", "never"),
    ("protocol.git.allow", "never"),
    ("protocol.file.allow", "never"),
    ("protocol.ext.allow", "never"),
    ("protocol.fd.allow", "never"),
];

/// The environment git runs with (set for every command: a program may run git itself).
/// `workspace`'s parent is a ceiling: git never takes a repository above the workspace.
pub fn environment(workspace: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_ATTR_NOSYSTEM", "1"),
        ("GIT_PROTOCOL_FROM_USER", "0"),
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_PAGER", "cat"),
        ("GIT_EDITOR", ":"),
        ("GIT_SEQUENCE_EDITOR", ":"),
        ("GIT_ASKPASS", ""),
        ("GIT_SSH_COMMAND", "false"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    if let Some(parent) = workspace.parent() {
        env.push((
            "GIT_CEILING_DIRECTORIES".to_owned(),
            parent.display().to_string(),
        ));
    }
    env.push(("GIT_CONFIG_COUNT".to_owned(), OVERRIDES.len().to_string()));
    for (i, (key, value)) in OVERRIDES.iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{i}"), (*key).to_owned()));
        env.push((format!("GIT_CONFIG_VALUE_{i}"), (*value).to_owned()));
    }
    env
}

/// Sections whose every key names a program, a rewrite or another file to read.
const REFUSED_SECTIONS: &[&str] = &[
    "alias",
    "include",
    "includeif",
    "url",
    "filter",
    "credential",
    "protocol",
    "browser",
    "man",
    "web",
];

/// Keys (their last part, wherever they appear) that name a program to run.
const REFUSED_KEYS: &[&str] = &[
    "textconv",
    "command",
    "cmd",
    "driver",
    "clean",
    "smudge",
    "process",
    "helper",
    "insteadof",
    "pushinsteadof",
    "uploadpack",
    "receivepack",
    "external",
    "program",
    "defaultkeycommand",
    "alternaterefscommand",
    "gitproxy",
    "difffilter",
    "vcs",
    "tunnel",
    "packobjectshook",
];

/// Why a configuration file's text is refused, if it is: a pure, deliberately coarse
/// reading. Every line that could open a section is taken as one and every key is judged by
/// its own name too, so a continued value (`\` at the end of a line) cannot hide a section
/// or a key from this reading that git would see.
pub fn refused_config(text: &str) -> Option<String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.contains('\0') {
        return Some("it holds a NUL byte".to_owned());
    }
    for line in text.lines() {
        let mut line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            // The header ends at the first `]` outside a quoted subsection (`[x "a]b"]`).
            let end = header_end(header).unwrap_or(header.len());
            let (inside, after) = (&header[..end], header.get(end + 1..).unwrap_or(""));
            // git reads more than one header on a line (`[x][core]worktree = …`): this
            // reading does not, so such a line is refused rather than misread.
            if after.trim_start().starts_with('[') {
                return Some("it has more than one section header on a line".to_owned());
            }
            let section: String = inside
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
                .to_ascii_lowercase();
            if REFUSED_SECTIONS.contains(&section.as_str()) {
                return Some(format!("it has a `[{section}]` section"));
            }
            line = after.trim();
            if line.is_empty() {
                continue;
            }
        }
        let key: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect::<String>()
            .to_ascii_lowercase();
        if REFUSED_KEYS.contains(&key.as_str()) {
            return Some(format!("it sets `{key}`, which names a program to run"));
        }
        // `submodule.<name>.ignore` outranks the environment's `diff.ignoreSubmodules`:
        // git would go into a nested repository, whose own configuration runs there.
        if key == "ignore" {
            return Some("it sets `ignore`, which lets git go into a nested repository".to_owned());
        }
        // `core.worktree` moves git's work tree where the check does not look (however
        // the value is spelled: quoted, escaped, commented).
        if key == "worktree" {
            return Some(
                "it sets `worktree`, which moves git's work tree where the check does not look"
                    .to_owned(),
            );
        }
        let value = line.split_once('=').map_or("", |(_, v)| v);
        let value = value.trim().trim_start_matches('"').trim_start();
        if value.starts_with('!') {
            return Some(format!("`{key}` runs a shell command (`!…`)"));
        }
        let lower = value.to_ascii_lowercase();
        if lower.contains("ext::") || lower.contains("fd::") {
            return Some(format!("`{key}` names a transport that runs a command"));
        }
    }
    None
}

/// Where a section header's `]` is in `header` (the text after its `[`): the first one
/// outside double quotes, a `\` escaping the next character inside them.
fn header_end(header: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in header.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ']' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

/// Sequencer to-do lists (`git rebase --continue` and friends run their `exec` lines).
fn refused_todo(text: &str) -> bool {
    text.lines().any(|line| {
        let first = line.split_whitespace().next().unwrap_or("");
        first.eq_ignore_ascii_case("exec") || first.eq_ignore_ascii_case("x")
    })
}

/// The largest file the check reads (a configuration, a pointer, a to-do list).
const MAX_READ: u64 = 1 << 20;

/// The most configuration files read below one git folder (submodules, worktrees).
const MAX_FILES: usize = 256;

/// Checks the repositories git would use working in `start`: every `.git` from `start` up
/// to the workspace (a `gitdir:` file and a `commondir` followed), each one's configuration
/// (its submodules' and worktrees' too) and its pending to-do lists. `None` when nothing
/// is refused.
pub fn refused_repository(start: &Path, workspace: &Path) -> Option<String> {
    let mut git_dirs = Vec::new();
    let mut work_trees = Vec::new();
    for dir in start.ancestors() {
        let dot_git = dir.join(".git");
        if std::fs::symlink_metadata(&dot_git).is_ok() {
            work_trees.push(dir.to_path_buf());
        }
        if dot_git.is_dir() {
            // A `.git` that is a link to a folder elsewhere is a pointer like `gitdir:`.
            match within(&dot_git, workspace) {
                Ok(git_dir) => git_dirs.push(git_dir),
                Err(()) => return Some(leaves(&dot_git, "link")),
            }
        } else if let Some(text) = match read_inside(&dot_git, workspace) {
            Ok(text) => text,
            Err(why) => return Some(why.to_string()),
        } && let Some(target) = text.trim().strip_prefix("gitdir:")
        {
            match within(&dir.join(target.trim()), workspace) {
                Ok(git_dir) => git_dirs.push(git_dir),
                Err(()) => return Some(leaves(&dot_git, "gitdir")),
            }
        }
        if dir == workspace || !dir.starts_with(workspace) {
            break;
        }
    }
    // A repository nested in a work tree (a submodule added in place) is one git may go
    // into from the outer one (`submodule.<name>.ignore`): its own configuration counts.
    for top in &work_trees {
        match work_tree_repositories(top, workspace) {
            Ok(nested) => git_dirs.extend(nested),
            Err(why) => return Some(why.to_string()),
        }
    }
    let mut seen = Vec::new();
    while let Some(git_dir) = git_dirs.pop() {
        if seen.contains(&git_dir) {
            continue;
        }
        if seen.len() >= MAX_REPOSITORIES {
            return Some(format!(
                "more than {MAX_REPOSITORIES} repositories are reachable from here: git runs only where the check can read each one"
            ));
        }
        let common = match read_inside(&git_dir.join("commondir"), workspace) {
            Ok(common) => common,
            Err(why) => return Some(why.to_string()),
        };
        if let Some(common) = common {
            match within(&git_dir.join(common.trim()), workspace) {
                Ok(common) => git_dirs.push(common),
                Err(()) => return Some(leaves(&git_dir.join("commondir"), "commondir")),
            }
        }
        if let Some(why) = refused_git_dir(&git_dir, workspace) {
            return Some(why);
        }
        seen.push(git_dir);
    }
    None
}

/// Why the check cannot read a repository git may go into, so git is not run: what it
/// names is never read, nor said.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    /// A pointer that leaves the workspace, as [`leaves`] says it.
    #[error("{0}")]
    Leaves(String),
    #[error("git is not run with the repository's {}: {why}", modules.display())]
    Modules {
        modules: std::path::PathBuf,
        why: String,
    },
    #[error(
        "{} holds more than {MAX_TREE_ENTRIES} files: git runs only where the check can read every repository it may go into",
        .0.display()
    )]
    TooManyFiles(std::path::PathBuf),
    #[error("{shown}: {source}")]
    Open {
        shown: String,
        source: crate::open::OpenError,
    },
    #[error("{shown}: {source}")]
    Read {
        shown: String,
        source: std::io::Error,
    },
    #[error(
        "{shown} is larger than {MAX_READ} bytes: git runs only with files the check reads whole"
    )]
    TooLarge { shown: String },
}

/// The repositories git may go into from the work tree `top`: its `.gitmodules` checked
/// (an `ignore` there lets git in), the git folders nested in it.
fn work_tree_repositories(
    top: &Path,
    workspace: &Path,
) -> Result<Vec<std::path::PathBuf>, Unreadable> {
    let modules = top.join(".gitmodules");
    if let Some(text) = read_inside(&modules, workspace)?
        && let Some(why) = refused_config(&text)
    {
        return Err(Unreadable::Modules { modules, why });
    }
    nested_git(top, workspace)
}

/// The most repositories (nested, worktrees, common folders) one check reads.
const MAX_REPOSITORIES: usize = 64;

/// The most entries of a work tree read looking for nested repositories: git is refused
/// in a larger one (`git add -u` goes into a nested repository whatever the environment
/// says, so one the walk did not reach would run unread).
const MAX_TREE_ENTRIES: usize = 50_000;

/// The git folders of the repositories nested in the work tree `top` (its own `.git` left
/// out): a `.git` folder, or the folder a `.git` file's `gitdir:` names.
fn nested_git(top: &Path, workspace: &Path) -> Result<Vec<std::path::PathBuf>, Unreadable> {
    let mut found = Vec::new();
    let mut walk = walkdir::WalkDir::new(top).into_iter();
    let mut read = 0;
    while let Some(entry) = walk.next() {
        let Ok(entry) = entry else { continue };
        read += 1;
        if read > MAX_TREE_ENTRIES {
            return Err(Unreadable::TooManyFiles(top.to_owned()));
        }
        if entry.depth() == 0 || entry.file_name() != ".git" {
            continue;
        }
        if entry.file_type().is_dir() {
            walk.skip_current_dir();
        }
        if entry.depth() == 1 {
            continue; // the work tree's own
        }
        let path = entry.path();
        if entry.file_type().is_dir() || entry.file_type().is_symlink() {
            found.push(
                within(path, workspace).map_err(|()| Unreadable::Leaves(leaves(path, "link")))?,
            );
        } else if let Some(text) = read_inside(path, workspace)?
            && let Some(target) = text.trim().strip_prefix("gitdir:")
        {
            let parent = path.parent().unwrap_or(top);
            found.push(
                within(&parent.join(target.trim()), workspace)
                    .map_err(|()| Unreadable::Leaves(leaves(path, "gitdir")))?,
            );
        }
    }
    Ok(found)
}

/// `path` (lexically folded, links followed as far as it exists) when it lies inside the
/// `workspace` and breaks no read rule of the forbidden core: the check reads only what
/// the box would let git read. A pointer out of it (`gitdir: /home/u/.ssh`, spelled
/// however) is refused, and nothing there is read.
fn within(path: &Path, workspace: &Path) -> Result<std::path::PathBuf, ()> {
    let lexical = crate::scope::normalize(path);
    // As the kernel goes: links first, then `..` (`lnk/../x` is beside the link's target);
    // what does not exist yet, as far as it does.
    let real = crate::scope::physical(path);
    let readable = |p: &Path| {
        metnos_core::forbidden::first_match(
            &p.to_string_lossy(),
            metnos_core::forbidden::Access::Read,
        )
        .is_none()
    };
    if real.starts_with(workspace) && lexical.starts_with(workspace) && readable(&real) {
        Ok(real)
    } else {
        Err(())
    }
}

/// A file the check reads, as git in the box could: inside the workspace (links followed
/// only that far), a regular file (a FIFO never blocks the check), at most 1 MiB. `Ok(None)`:
/// there is none; `Err`: the refusal (what it names is never read, nor said).
fn read_inside(path: &Path, workspace: &Path) -> Result<Option<String>, Unreadable> {
    use std::io::Read;
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    let real = within(path, workspace).map_err(|()| Unreadable::Leaves(leaves(path, "link")))?;
    let shown = path.display().to_string();
    let (file, _) = match crate::open::open_file_to_read(&real, &shown, workspace) {
        Ok(opened) => opened,
        Err(source) => return Err(Unreadable::Open { shown, source }),
    };
    let mut bytes = Vec::new();
    if let Err(source) = file.take(MAX_READ + 1).read_to_end(&mut bytes) {
        return Err(Unreadable::Read { shown, source });
    }
    // git reads the whole file: one the check could not read whole is refused, never
    // judged by its first part (a filter written past the first MiB).
    if bytes.len() as u64 > MAX_READ {
        return Err(Unreadable::TooLarge { shown });
    }
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// The refusal of a pointer (`what`, in the file `at`) that leaves the workspace: what it
/// names is never read, nor said.
fn leaves(at: &Path, what: &str) -> String {
    format!(
        "{}: its `{what}` points outside the workspace, where git may not read",
        at.display()
    )
}

fn refused_git_dir(git_dir: &Path, workspace: &Path) -> Option<String> {
    for todo in ["rebase-merge/git-rebase-todo", "sequencer/todo"] {
        let path = git_dir.join(todo);
        let text = match read_inside(&path, workspace) {
            Ok(text) => text,
            Err(why) => return Some(why.to_string()),
        };
        if text.is_some_and(|text| refused_todo(&text)) {
            return Some(format!(
                "{} holds `exec` lines, which run commands",
                path.display()
            ));
        }
    }
    let files = walkdir::WalkDir::new(git_dir)
        .max_depth(8)
        .into_iter()
        .filter_entry(|e| e.file_name() != "objects")
        .filter_map(Result::ok)
        // A link named `config` is read where it leads, as git would (if that is inside).
        .filter(|e| e.file_type().is_file() || e.file_type().is_symlink())
        .filter(|e| matches!(e.file_name().to_str(), Some("config" | "config.worktree")))
        .map(|e| e.into_path());
    for (read, file) in files.enumerate() {
        // More than the check reads is refused, never skipped.
        if read >= MAX_FILES {
            return Some(format!(
                "{} holds more than {MAX_FILES} configuration files: git runs only where the check reads each one",
                git_dir.display()
            ));
        }
        let why = match read_inside(&file, workspace) {
            Err(why) => return Some(why.to_string()),
            Ok(None) => continue,
            Ok(Some(text)) if text.contains('\u{FFFD}') => Some("it is not UTF-8".to_owned()),
            Ok(Some(text)) => refused_config(&text),
        };
        if let Some(why) = why {
            return Some(format!("{}: {why}", file.display()));
        }
    }
    None
}

/// The repository refusal as the observation's error.
pub fn refusal_message(why: &str) -> String {
    format!(
        "git is refused here: the repository's configuration could run a program ({why}); remove that setting and try again"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ordinary_repository_configuration_passes() {
        let text = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n\tpager = less\n\teditor = vim\n[remote \"origin\"]\n\turl = https://example.com/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n[user]\n\tname = A Person\n\temail = a@example.com\n[submodule \"lib\"]\n\tactive = true\n\turl = https://example.com/lib.git\n";
        assert_eq!(refused_config(text), None);
    }

    #[test]
    fn code_running_configuration_is_refused_however_spelled() {
        for (text, named) in [
            ("[alias]\n\tx = !sh e.sh\n", "[alias]"),
            ("[Alias]\nx = log\n", "[alias]"),
            ("[ alias ]\n", "[alias]"),
            ("[alias \"x\"]\n", "[alias]"),
            ("[alias.x]\n", "[alias]"),
            (
                "[core] x = 1\n[includeIf \"gitdir:/\"]\npath = /w/x\n",
                "[includeif]",
            ),
            ("[include]\n\tpath = ../evil.cfg\n", "[include]"),
            (
                "[url \"ext::sh -c x\"]\n\tinsteadOf = https://x/\n",
                "[url]",
            ),
            ("[filter \"x\"]\n\tsmudge = sh e.sh\n", "[filter]"),
            ("[diff \"x\"]\n\ttextconv = sh e.sh\n", "`textconv`"),
            ("[diff]\n\texternal = sh\n", "`external`"),
            ("[merge \"x\"]\n\tdriver = sh %A\n", "`driver`"),
            ("[remote \"o\"]\n\tuploadpack = sh e.sh\n", "`uploadpack`"),
            ("[remote \"o\"]\n\tvcs = evil\n", "`vcs`"),
            ("[remote \"o\"]\n\turl = ext::sh -c x\n", "transport"),
            ("[hook \"x\"]\n\tcommand = sh e.sh\n", "`command`"),
            ("[submodule \"x\"]\n\tupdate = !sh e.sh\n", "`update`"),
            ("[submodule \"x\"]\n\tupdate = \"!sh e.sh\"\n", "`update`"),
            ("[protocol \"ext\"]\n\tallow = always\n", "[protocol]"),
            ("[credential]\n\thelper = !sh\n", "[credential]"),
            (
                "[gpg \"ssh\"]\n\tdefaultKeyCommand = sh\n",
                "`defaultkeycommand`",
            ),
            ("[core]\n\tgitProxy = sh\n", "`gitproxy`"),
            // A continued value does not hide a key from this reading.
            (
                "[diff \"x\"]\n\ty = a\\\n[core]\n\ttextconv = sh\n",
                "`textconv`",
            ),
            ("[core]\n\ty = a\\\n[alias]\n", "[alias]"),
            ("\u{feff}[alias]\n", "[alias]"),
            ("[core]\0\n", "NUL"),
        ] {
            let why = refused_config(text).unwrap_or_else(|| panic!("passed: {text:?}"));
            assert!(why.contains(named), "{text:?}: {why}");
        }
    }

    #[test]
    fn todo_lists_with_exec_lines_are_refused() {
        assert!(refused_todo("pick abc one\nexec sh e.sh\n"));
        assert!(refused_todo("pick abc one\n  x sh e.sh\n"));
        assert!(!refused_todo(
            "pick abc one\n# exec in a comment\nsquash def two\n"
        ));
    }

    /// Eighth and ninth reviews of issue 38: a filter planted in a repository nested in the
    /// work tree ran at the outer `git status` (with `submodule.<name>.ignore = none`).
    #[test]
    fn a_nested_repositorys_configuration_is_checked_and_ignore_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join("outer/.git")).unwrap();
        std::fs::create_dir_all(ws.join("outer/deep/sub/.git")).unwrap();
        std::fs::write(ws.join("outer/.git/config"), "[core]\n\tbare = false\n").unwrap();
        std::fs::write(ws.join("outer/deep/sub/.git/config"), "[core]\n").unwrap();
        assert_eq!(refused_repository(&ws.join("outer"), &ws), None);
        std::fs::write(
            ws.join("outer/deep/sub/.git/config"),
            "[filter \"x\"]\n\tclean = sh -c evil\n",
        )
        .unwrap();
        let why = refused_repository(&ws.join("outer"), &ws).unwrap();
        assert!(why.contains("filter"), "{why}");
        std::fs::write(ws.join("outer/deep/sub/.git/config"), "[core]\n").unwrap();
        std::fs::write(
            ws.join("outer/.gitmodules"),
            "[submodule \"sub\"]\n\tpath = deep/sub\n\tignore = none\n",
        )
        .unwrap();
        let why = refused_repository(&ws.join("outer"), &ws).unwrap();
        assert!(why.contains("`ignore`"), "{why}");
        assert!(refused_config("[submodule \"s\"]\n\tignore = none\n").is_some());
        // Eleventh review: a repository whose `core.worktree` is elsewhere in the workspace
        // works where the check does not look: refused, however spelled.
        std::fs::create_dir_all(ws.join("tree/sub/.git")).unwrap();
        std::fs::write(
            ws.join("tree/sub/.git/config"),
            "[filter \"x\"]\n\tclean = sh run.sh\n",
        )
        .unwrap();
        std::fs::create_dir_all(ws.join("other/.git")).unwrap();
        std::fs::write(
            ws.join("other/.git/config"),
            "[core]\n\tworktree = ../../tree\n",
        )
        .unwrap();
        let why = refused_repository(&ws.join("other"), &ws).unwrap();
        assert!(why.contains("`worktree`"), "{why}");
        // Twelfth and thirteenth reviews: however it is spelled, behind another header.
        for spelled in [
            "[x][core]worktree = ../../tree\n",
            "[x \"a]b\"][core]worktree = ../../tree\n",
            "[a] [include] path = ../inc.cfg\n",
            "[core]\n\tworktree = ../../tree # c\n",
            "[core] WorkTree = \"../\"tree\n",
            "[core \"x\"]\n\tworktree = ../../tree\n",
        ] {
            std::fs::write(ws.join("other/.git/config"), spelled).unwrap();
            let why = refused_repository(&ws.join("other"), &ws).unwrap();
            assert!(
                why.contains("`worktree`") || why.contains("more than one section header"),
                "{spelled}: {why}"
            );
        }
        std::fs::remove_dir_all(ws.join("other")).unwrap();
        std::fs::remove_dir_all(ws.join("tree")).unwrap();
        // Fourteenth review: a configuration longer than the check reads is refused, not
        // judged by its first MiB.
        std::fs::remove_file(ws.join("outer/.gitmodules")).unwrap();
        let mut padded = "[pad]\n".to_owned();
        padded.push_str(&format!("\tv = {}\n", "a".repeat(1 << 20)));
        padded.push_str("[filter \"x\"]\n\tclean = sh -c evil\n");
        std::fs::write(ws.join("outer/.git/config"), padded).unwrap();
        let why = refused_repository(&ws.join("outer"), &ws).unwrap();
        assert!(why.contains("larger than"), "{why}");
        std::fs::write(ws.join("outer/.git/config"), "[core]\n").unwrap();
        // Tenth review: a work tree too large to walk whole is refused, not half read.
        std::fs::create_dir_all(ws.join("outer/bulk")).unwrap();
        for i in 0..=MAX_TREE_ENTRIES {
            std::fs::write(ws.join(format!("outer/bulk/f{i}")), "").unwrap();
        }
        let why = refused_repository(&ws.join("outer"), &ws).unwrap();
        assert!(why.contains("more than 50000 files"), "{why}");
    }

    /// Issue 38, break 5: a `.git` file's `gitdir:` was followed anywhere (planted with
    /// `git log --output=…/.git`, `.ssh` spelled `%x2essh`) and what was read in `~/.ssh`
    /// reported.
    #[test]
    fn a_pointer_that_leaves_the_workspace_is_refused_and_nothing_there_is_read() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        let ssh = root.path().join("home/.ssh");
        std::fs::create_dir_all(ws.join("q")).unwrap();
        std::fs::create_dir_all(&ssh).unwrap();
        std::fs::write(ssh.join("config"), "Host x\n  ProxyCommand secret-proxy\n").unwrap();
        for pointer in [
            format!("gitdir: {}", ssh.display()),
            "gitdir: ../../home/.ssh".to_owned(),
            format!("gitdir: {}/../home/.ssh", ws.display()),
        ] {
            std::fs::write(ws.join("q/.git"), &pointer).unwrap();
            let why = refused_repository(&ws.join("q"), &ws).unwrap();
            assert!(
                why.contains("points outside the workspace"),
                "{pointer}: {why}"
            );
            assert!(
                !why.contains("ProxyCommand") && !why.contains(".ssh"),
                "{why}"
            );
        }
        // A `.git` that is itself a link out of the workspace.
        std::fs::remove_file(ws.join("q/.git")).unwrap();
        std::os::unix::fs::symlink(&ssh, ws.join("q/.git")).unwrap();
        let why = refused_repository(&ws.join("q"), &ws).unwrap();
        assert!(why.contains("points outside the workspace"), "{why}");
        std::fs::remove_file(ws.join("q/.git")).unwrap();
        // The check's own reads: a `commondir` or a to-do list that is a link out, or a
        // FIFO, is refused without reading it (no hang, no one-bit oracle).
        std::fs::create_dir_all(ws.join("r/.git/rebase-merge")).unwrap();
        std::fs::write(ws.join("r/.git/config"), "[core]\n").unwrap();
        std::os::unix::fs::symlink(
            ssh.join("config"),
            ws.join("r/.git/rebase-merge/git-rebase-todo"),
        )
        .unwrap();
        let why = refused_repository(&ws.join("r"), &ws).unwrap();
        assert!(why.contains("points outside the workspace"), "{why}");
        std::fs::remove_file(ws.join("r/.git/rebase-merge/git-rebase-todo")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            ws.join("r/.git/commondir"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let why = refused_repository(&ws.join("r"), &ws).unwrap();
        assert!(why.contains("not a regular file"), "{why}");
        std::fs::remove_file(ws.join("r/.git/commondir")).unwrap();
        // A config that is a link inside the workspace is read where it leads.
        std::fs::write(ws.join("evil.cfg"), "[alias]\n\tx = !sh\n").unwrap();
        std::fs::remove_file(ws.join("r/.git/config")).unwrap();
        std::os::unix::fs::symlink(ws.join("evil.cfg"), ws.join("r/.git/config")).unwrap();
        let why = refused_repository(&ws.join("r"), &ws).unwrap();
        assert!(why.contains("[alias]"), "{why}");
        // A link inside the workspace to the outside is the same pointer.
        std::os::unix::fs::symlink(&ssh, ws.join("inner")).unwrap();
        std::fs::write(ws.join("q/.git"), "gitdir: ../inner").unwrap();
        let why = refused_repository(&ws.join("q"), &ws).unwrap();
        assert!(why.contains("points outside the workspace"), "{why}");
        // A commondir out of it too.
        std::fs::create_dir_all(ws.join("wt")).unwrap();
        std::fs::write(ws.join("q/.git"), "gitdir: ../wt").unwrap();
        std::fs::write(ws.join("wt/commondir"), ssh.display().to_string()).unwrap();
        let why = refused_repository(&ws.join("q"), &ws).unwrap();
        assert!(why.contains("`commondir` points outside"), "{why}");
    }

    #[test]
    fn repositories_are_found_through_gitdir_files_and_commondir() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        let elsewhere = ws.join("elsewhere.git");
        let repo = ws.join("repo");
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        assert_eq!(refused_repository(&repo.join("src"), &ws), None);

        std::fs::write(
            repo.join(".git"),
            format!("gitdir: {}\n", elsewhere.display()),
        )
        .unwrap();
        std::fs::write(elsewhere.join("config"), "[alias]\n\tx = !sh\n").unwrap();
        let why = refused_repository(&repo.join("src"), &ws).unwrap();
        assert!(why.contains("[alias]"), "{why}");

        // A worktree's git folder sends git to the main one's configuration.
        std::fs::write(elsewhere.join("config"), "").unwrap();
        let main = ws.join("main.git");
        std::fs::create_dir_all(main.join("modules/lib")).unwrap();
        std::fs::write(elsewhere.join("commondir"), main.display().to_string()).unwrap();
        std::fs::write(
            main.join("modules/lib/config"),
            "[filter \"x\"]\nclean = sh\n",
        )
        .unwrap();
        let why = refused_repository(&repo, &ws).unwrap();
        assert!(why.contains("[filter]"), "{why}");

        // Nothing above the workspace is looked at.
        std::fs::write(main.join("modules/lib/config"), "").unwrap();
        std::fs::create_dir_all(root.path().join(".git")).unwrap();
        std::fs::write(root.path().join(".git/config"), "[alias]\n").unwrap();
        assert_eq!(refused_repository(&repo, &ws), None);
    }

    #[test]
    fn the_environment_overrides_what_runs_programs() {
        let env = environment(Path::new("/data/workspace"));
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("GIT_CONFIG_GLOBAL"), Some("/dev/null"));
        assert_eq!(get("GIT_CEILING_DIRECTORIES"), Some("/data"));
        let count: usize = get("GIT_CONFIG_COUNT").unwrap().parse().unwrap();
        let keys: Vec<&str> = (0..count)
            .map(|i| get(&format!("GIT_CONFIG_KEY_{i}")).unwrap())
            .collect();
        for key in [
            "core.fsmonitor",
            "core.hooksPath",
            "protocol.ext.allow",
            "protocol.allow",
            // A repository nested in the workspace's keeps a configuration the pre-check
            // does not read (a filter there ran at the outer `git status`).
            "diff.ignoreSubmodules",
            "submodule.recurse",
        ] {
            assert!(keys.contains(&key), "{key}");
        }
    }
}
