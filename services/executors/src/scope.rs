//! Scope hints enforced: a path must resolve (symlinks followed) inside one of its roots,
//! a URL's host must match one of its patterns. Used by the runner before a spawn and by
//! the built-ins again right before they touch a path.

use std::path::{Path, PathBuf};

use metnos_core::path::{self, Tilde};

/// Why a target is out of scope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("path `{0}` must be absolute or start with ~")]
    Relative(String),
    #[error("path `{path}` is outside the allowed roots ({roots})")]
    Outside { path: String, roots: String },
    #[error(
        "path `{path}` leads through a symbolic link to {resolved}, outside the allowed roots ({roots})"
    )]
    SymlinkEscape {
        path: String,
        resolved: String,
        roots: String,
    },
    #[error("`{0}` is not an http(s) URL")]
    Url(String),
    #[error("host `{host}` is not among the allowed hosts ({allowed})")]
    Host { host: String, allowed: String },
    #[error(
        "path `{0}` is Metnos's own data (its stores, logs or certificates): no executor may touch it"
    )]
    Forbidden(String),
    #[error(
        "path `{path}` is protected (rule {rule}{resolved}): no tool call may {access} it, whatever the level or grants"
    )]
    Protected {
        path: String,
        rule: &'static str,
        /// ", as <real path>" when a link led there.
        resolved: String,
        access: &'static str,
    },
    #[error(
        "path `{path}`{resolved} is {what}: it is written only when your own message names it, and then after you approve its card (rule {rule})"
    )]
    RunsCodeLater {
        path: String,
        rule: &'static str,
        /// " (through a link, to <real path>)" when a link led there.
        resolved: String,
        what: &'static str,
    },
    #[error(
        "path `{path}` cannot be resolved ({reason}); a path whose target cannot be known (a dangling symbolic link, say) is refused"
    )]
    Unresolvable { path: String, reason: String },
}

/// Whether `path` lies in one of Metnos's own folders (`forbidden`), outside the shell's
/// `workspace` (which is Metnos's too, but the shell's to use). The workspace is carved out
/// of a forbidden folder only when it lies strictly inside it: a workspace that holds
/// Metnos's folders (the home, say) opens none of them.
pub fn is_forbidden(path: &Path, forbidden: &[PathBuf], workspace: &Path) -> bool {
    let carved_out = |root: &PathBuf| {
        workspace.as_os_str().len() > 1
            && workspace != root.as_path()
            && workspace.starts_with(root)
            && path.starts_with(workspace)
    };
    forbidden
        .iter()
        .any(|root| path.starts_with(root) && !carved_out(root))
}

/// `forbidden` as real paths (symlinks resolved), so a check on a resolved path meets
/// them; those that do not exist are kept as written.
pub fn real_roots(forbidden: &[PathBuf]) -> Vec<PathBuf> {
    forbidden
        .iter()
        .map(|p| resolve(&normalize(p)).unwrap_or_else(|_| normalize(p)))
        .collect()
}

/// `~` and `~/x` under `home`; other text (`~user` too) as a path.
pub fn expand_home(text: &str, home: &Path) -> PathBuf {
    match path::expand_tilde(text, &path::home_text(home)) {
        Tilde::Home(expanded) => PathBuf::from(expanded),
        Tilde::OtherUser { .. } | Tilde::None => PathBuf::from(text),
    }
}

/// Lexical normalisation: `.` and repeated separators go, `..` climbs (not above `/`).
pub fn normalize(path: &Path) -> PathBuf {
    PathBuf::from(path::normalize(&path.to_string_lossy()))
}

/// The real path of `path`, symlinks resolved, even when its last parts do not exist
/// yet (a file about to be written): the longest existing ancestor is resolved and the
/// rest appended.
/// Whether `real` is a file with an execute bit: changing it changes a program.
pub fn executable(real: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(real)
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Where the home's hidden tree leads when it holds links (`~/.bashrc → ~/dotfiles/bashrc`,
/// `~/.config/nvim → ~/dotfiles/nvim`, `~/.config/systemd/user/x.service →
/// ~/projects/x/x.service`, a plugin under `~/.local/share/nvim/site/pack/*/start/`, a
/// launcher in `~/.local/share/applications`): files there are read at login or start-up
/// as much as the hidden names are, so a write to them runs code later too. Breadth first
/// from the hidden entries of `~` (so its own links and `~/.config`'s always count),
/// [`DOTFILE_DEPTH`] folders deep, at most [`DOTFILE_ENTRIES`] entries of the hidden tree; caches,
/// toolchains and Metnos's own folders (`own`: a model may fill its workspace) are not
/// walked. A link to what does not exist yet counts where it leads.
pub fn dotfile_targets(home: &Path, own: &[PathBuf]) -> Vec<PathBuf> {
    let mut targets = Vec::new();
    let mut budget = DOTFILE_ENTRIES;
    let mut folders: std::collections::VecDeque<(PathBuf, usize)> =
        [(home.to_path_buf(), 0)].into();
    'walk: while let Some((dir, depth)) = folders.pop_front() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if depth == 0 && !name.as_encoded_bytes().starts_with(b".") {
                continue;
            }
            // A skipped folder is not walked, but one that is a link counts where it
            // leads (`~/.cargo → ~/dev/cargo`: its `config.toml` runs at every build).
            let skipped = depth == 0 && DOTFILE_SKIPPED.contains(&name.to_string_lossy().as_ref());
            if skipped && !entry.file_type().is_ok_and(|kind| kind.is_symlink()) {
                continue;
            }
            let path = entry.path();
            if own.iter().any(|dir| path.starts_with(dir)) {
                continue;
            }
            if budget == 0 {
                // The links deeper than the budget reaches are not known; what the start-up
                // files name always is (below).
                break 'walk;
            }
            budget -= 1;
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_symlink() {
                // Dangling or not, where the kernel would take a write through it.
                let real = physical(&path);
                if real != home && !home.starts_with(&real) {
                    targets.push(real);
                }
            } else if kind.is_dir() && depth < DOTFILE_DEPTH {
                folders.push_back((path, depth + 1));
            }
        }
    }
    let sourced = sourced_files(home);
    let included = git_included_files(home);
    let started = crate::started::by_path(home, &sourced, &included);
    targets.extend(
        sourced
            .into_iter()
            .chain(included)
            .chain(started)
            .filter(|file| file != home && !home.starts_with(file)),
    );
    targets
}

/// The shell start-up files whose `.` and `source` lines [`sourced_files`] follows.
/// In the order a login shell reads them (what sets a variable before what uses it).
pub(crate) const SHELL_STARTUP: &[&str] = &[
    ".zshenv",
    ".profile",
    ".bash_profile",
    ".bash_login",
    ".zprofile",
    ".bashrc",
    ".bash_aliases",
    ".zshrc",
    ".zlogin",
    ".kshrc",
    ".xprofile",
    ".xsessionrc",
    ".config/fish/config.fish",
];

/// The most files [`sourced_files`] reads.
const SOURCED_FILES: usize = 64;

/// The most bytes of each file [`sourced_files`] reads.
const SOURCED_BYTES: u64 = 1 << 20;

/// The files the shell's start-up files source by path (`. ~/google-cloud-sdk/path.bash.inc`,
/// `source "$HOME/git-prompt.sh"`), and what those source in turn: they run at every new
/// shell as much as `~/.bashrc` does. A path is taken when it is whole text (`~`, `$HOME`
/// and `${HOME}` expanded, quotes removed, relative to the home); one built from other
/// variables or a command's output cannot be known and is not followed.
pub fn sourced_files(home: &Path) -> Vec<PathBuf> {
    static SOURCE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r#"(?m)(?:^|[;&|({!]|\bthen|\bdo|\belse)\s*(?:\.|source)[ \t]+("[^"\n]*"|'[^'\n]*'|[^\s;&|)]+)"#,
        )
        .expect("the source-line pattern is valid")
    });
    let starts = SHELL_STARTUP.iter().map(|name| home.join(name));
    walk_included(starts, |_, text| {
        SOURCE
            .captures_iter(text)
            .filter_map(|named| sourced_path(&named[1], home))
            .map(|path| (resolve(&path).unwrap_or(path), true))
            .collect()
    })
}

/// The files and folders named from `starts` and, in turn, from each named file `names`
/// says to follow: `names` gives, of a file's real path and text, what it names (resolved)
/// and whether to read it in turn. At most [`SOURCED_FILES`] files read, [`SOURCED_BYTES`]
/// each; each once (a loop of includes ends).
pub(crate) fn walk_included(
    starts: impl Iterator<Item = PathBuf>,
    names: impl FnMut(&Path, &str) -> Vec<(PathBuf, bool)>,
) -> Vec<PathBuf> {
    walk_at_most(starts, (SOURCED_FILES, u64::MAX), names).found
}

/// What [`walk_at_most`] found: the paths named, and the files read (their real paths).
pub(crate) struct Walked {
    pub found: Vec<PathBuf>,
    pub read: Vec<PathBuf>,
}

/// [`walk_included`], reading at most `max_files` files and about `max_bytes` bytes.
pub(crate) fn walk_at_most(
    starts: impl Iterator<Item = PathBuf>,
    (max_files, max_bytes): (usize, u64),
    mut names: impl FnMut(&Path, &str) -> Vec<(PathBuf, bool)>,
) -> Walked {
    let mut bytes = 0u64;
    let mut queue: std::collections::VecDeque<PathBuf> = starts.collect();
    let mut tried = std::collections::HashSet::new();
    let mut read = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    while let Some(file) = queue.pop_front() {
        if tried.len() >= max_files || bytes >= max_bytes {
            break;
        }
        let Ok(real) = file.canonicalize() else {
            continue;
        };
        if !tried.insert(real.clone()) {
            continue;
        }
        let Some(text) = read_startup_file(&real) else {
            continue;
        };
        bytes += text.len() as u64;
        read.push(real.clone());
        for (path, follow) in names(&real, &text) {
            if seen.insert(path.clone()) {
                found.push(path.clone());
                if follow {
                    queue.push_back(path);
                }
            }
        }
    }
    Walked { found, read }
}

/// The git configuration files of the home whose includes [`git_included_files`] follows.
pub(crate) const GIT_CONFIGS: &[&str] = &[".gitconfig", ".config/git/config"];

/// The files the person's git configuration includes (`[include] path = ~/dotfiles/gitconfig`,
/// `[includeIf "gitdir:~/work/"] path = …`), and what those include in turn: git reads them
/// as its own configuration at every command, outside any box; and the folders it names for
/// templates and hooks (`init.templateDir`, `core.hooksPath`). `~` expanded, a relative
/// path taken from the including file's folder, quotes removed; at most [`SOURCED_FILES`]
/// files read, [`SOURCED_BYTES`] each.
pub fn git_included_files(home: &Path) -> Vec<PathBuf> {
    let starts = GIT_CONFIGS.iter().map(|name| home.join(name));
    walk_included(starts, |real, text| {
        let folder = real.parent().unwrap_or(home);
        include_paths(text)
            .into_iter()
            .map(|(included, value)| {
                let path = match value.strip_prefix("~/") {
                    Some(rest) => home.join(rest),
                    None => folder.join(&value),
                };
                let path = normalize(&path);
                (resolve(&path).unwrap_or(path), included)
            })
            .collect()
    })
}

/// The paths a git configuration names for git to read or run: its `include` and
/// `includeIf` sections' `path` (`true`: a file read as configuration, followed in turn),
/// `init.templateDir` (copied into every new repository's `.git`, its `config` and hooks
/// with it) and `core.hooksPath` (the hooks every repository runs). Read coarsely: a header
/// and a key on one line too; quotes and a trailing comment removed.
fn include_paths(text: &str) -> Vec<(bool, String)> {
    let mut section = String::new();
    let mut paths = Vec::new();
    for line in text.lines() {
        let mut line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let (inside, after) = header.split_once(']').unwrap_or((header, ""));
            section = inside
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
                .to_ascii_lowercase();
            line = after.trim();
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().to_ascii_lowercase();
        let included = matches!(section.as_str(), "include" | "includeif") && key == "path";
        let folder = (section == "init" && key == "templatedir")
            || (section == "core" && key == "hookspath");
        if !included && !folder {
            continue;
        }
        let value = value.trim();
        let value = match value.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next().unwrap_or_default(),
            None => value.split(['#', ';']).next().unwrap_or_default().trim(),
        };
        if !value.is_empty() {
            paths.push((included, value.to_owned()));
        }
    }
    paths
}

/// A start-up file's text: a regular file (a FIFO is not waited on), its first
/// [`SOURCED_BYTES`].
pub(crate) fn read_startup_file(real: &Path) -> Option<String> {
    use rustix::fs::{FileType, Mode, OFlags};
    use std::io::Read;
    let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::open(real, flags, Mode::empty()).ok()?;
    let stat = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return None;
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(SOURCED_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The file a `.`/`source` word names: quotes removed, `~`, `$HOME` and `${HOME}` at its
/// start expanded, relative to the home; `None` when other variables, a command's output
/// or a wildcard make it unknowable.
fn sourced_path(word: &str, home: &Path) -> Option<PathBuf> {
    let word = word
        .strip_prefix('"')
        .and_then(|w| w.strip_suffix('"'))
        .or_else(|| word.strip_prefix('\'').and_then(|w| w.strip_suffix('\'')))
        .unwrap_or(word);
    let rest = ["~/", "$HOME/", "${HOME}/"]
        .iter()
        .find_map(|start| word.strip_prefix(start));
    if word.is_empty()
        || rest
            .unwrap_or(word)
            .contains(['$', '`', '*', '?', '[', '~'])
    {
        return None;
    }
    Some(normalize(&home.join(rest.unwrap_or(word))))
}

/// How many folders below `~` [`dotfile_targets`] reads (`~/.local/share/nvim/site/pack/
/// <name>/start/<plugin>` is seven).
const DOTFILE_DEPTH: usize = 8;

/// The most entries of the home's hidden tree [`dotfile_targets`] reads.
const DOTFILE_ENTRIES: usize = 20_000;

/// Hidden folders of the home that hold caches, toolchains and data rather than what runs
/// at start-up: their links are not followed there (they are refused as hidden anyway).
const DOTFILE_SKIPPED: &[&str] = &[
    ".cache",
    ".vscode",
    ".vscode-server",
    ".conda",
    ".dotnet",
    ".nuget",
    ".cargo",
    ".rustup",
    ".npm",
    ".nvm",
    ".pyenv",
    ".m2",
    ".gradle",
    ".git",
    ".var",
    ".mozilla",
    ".thunderbird",
    ".steam",
    ".wine",
    ".docker",
    ".minikube",
];

/// `path` as the kernel will take it: links followed where they are
/// (`lnk/../x` is beside the link's target, not beside `lnk`), dangling ones too (writing
/// one makes its target), the part that does not exist yet as written.
pub fn physical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut path = path.to_path_buf();
    for _ in 0..40 {
        let parts: Vec<Component<'_>> = path.components().collect();
        let (i, base) = (1..=parts.len())
            .rev()
            .find_map(|i| {
                let prefix: PathBuf = parts[..i].iter().collect();
                std::fs::canonicalize(&prefix).ok().map(|real| (i, real))
            })
            .unwrap_or((0, PathBuf::new()));
        let rest: PathBuf = parts[i..].iter().collect();
        if let Some(next) = parts.get(i)
            && let Ok(target) = std::fs::read_link(base.join(next))
        {
            let after: PathBuf = parts[i + 1..].iter().collect();
            path = base.join(target).join(after);
            continue;
        }
        return if rest.as_os_str().is_empty() {
            base
        } else {
            normalize(&base.join(rest))
        };
    }
    normalize(&path)
}

pub fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let mut existing = path.to_owned();
    let mut rest = Vec::new();
    loop {
        match existing.canonicalize() {
            Ok(real) => {
                let mut out = real;
                for part in rest.iter().rev() {
                    out.push(part);
                }
                return Ok(out);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A dangling symlink is as good as a link: refuse to guess where it goes.
                if existing.symlink_metadata().is_ok() {
                    return Err(e);
                }
                let Some(name) = existing.file_name().map(ToOwned::to_owned) else {
                    return Err(e);
                };
                rest.push(name);
                if !existing.pop() {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Path roots, `~` expanded and resolved (roots that do not exist are dropped).
#[derive(Debug, Clone, Default)]
pub struct PathScope {
    /// Whether the manifest declared roots at all (declared roots that do not exist
    /// leave nothing allowed, not everything).
    declared: bool,
    roots: Vec<PathBuf>,
    shown: String,
}

impl PathScope {
    pub fn new(declared: &[String], home: &Path) -> PathScope {
        let roots: Vec<PathBuf> = declared
            .iter()
            .filter_map(|r| resolve(&normalize(&expand_home(r, home))).ok())
            .collect();
        let shown = roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let shown = if shown.is_empty() {
            format!("{} (none exists)", declared.join(", "))
        } else {
            shown
        };
        PathScope {
            declared: !declared.is_empty(),
            roots,
            shown,
        }
    }

    /// Whether no root was declared (such a scope restricts nothing).
    pub fn is_unrestricted(&self) -> bool {
        !self.declared
    }

    fn inside(&self, path: &Path) -> bool {
        self.roots.iter().any(|root| path.starts_with(root))
    }

    /// The real path `text` names, if it is inside the roots both as written and with
    /// symlinks resolved.
    pub fn check(&self, text: &str, home: &Path) -> Result<PathBuf, ScopeError> {
        let expanded = expand_home(text, home);
        if !expanded.is_absolute() {
            return Err(ScopeError::Relative(text.to_owned()));
        }
        let lexical = normalize(&expanded);
        // Never the lexical path in its place: a dangling link would be judged by its own
        // name and then followed by whoever opens it.
        let real = resolve(&lexical).map_err(|e| ScopeError::Unresolvable {
            path: text.to_owned(),
            reason: e.to_string(),
        })?;
        if !self.declared {
            return Ok(real);
        }
        if !self.inside(&real) {
            let escaped = lexical != real && self.inside(&lexical);
            return Err(if escaped {
                ScopeError::SymlinkEscape {
                    path: text.to_owned(),
                    resolved: real.display().to_string(),
                    roots: self.shown.clone(),
                }
            } else {
                ScopeError::Outside {
                    path: text.to_owned(),
                    roots: self.shown.clone(),
                }
            });
        }
        Ok(real)
    }
}

/// Whether `host` matches one of `patterns` (`*`, `*.domain`, exact; case-insensitive).
pub fn host_allowed(host: &str, patterns: &[String]) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    patterns.iter().any(|pattern| {
        let pattern = pattern.to_ascii_lowercase();
        if pattern == "*" {
            return true;
        }
        match pattern.strip_prefix("*.") {
            Some(domain) => host.ends_with(&format!(".{domain}")),
            None => host == pattern,
        }
    })
}

/// Checks a URL's scheme and host against `patterns` (empty: any host).
pub fn check_url(text: &str, patterns: &[String]) -> Result<url::Url, ScopeError> {
    let url = url::Url::parse(text).map_err(|_| ScopeError::Url(text.to_owned()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ScopeError::Url(text.to_owned()));
    }
    let host = url
        .host_str()
        .ok_or_else(|| ScopeError::Url(text.to_owned()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    if !patterns.is_empty() && !host_allowed(&host, patterns) {
        return Err(ScopeError::Host {
            host,
            allowed: patterns.join(", "),
        });
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sixteenth review of issue 38: what the person's git configuration includes is her
    /// git configuration (a `core.fsmonitor` there runs at her next `git status`).
    #[test]
    fn files_the_git_configuration_includes_count() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(home.join("dotfiles")).unwrap();
        std::fs::create_dir_all(home.join(".config/git")).unwrap();
        std::fs::write(
            home.join(".gitconfig"),
            "[user]\n\tname = Ada\n[include]\n\tpath = ~/dotfiles/gitconfig ; shared\n\
             [includeIf \"gitdir:~/work/\"]\n\tpath = \"work/gitconfig-work\"\n\
             [submodule \"x\"]\n\tpath = lib\n[init]\n\ttemplateDir = ~/git-templates\n\
             [core] hooksPath = hooks\n",
        )
        .unwrap();
        std::fs::write(
            home.join("dotfiles/gitconfig"),
            "[include] path = more.inc\n",
        )
        .unwrap();
        std::fs::write(home.join(".config/git/config"), "[INCLUDE]\nPath=~/x.inc\n").unwrap();
        let found = git_included_files(&home);
        for expected in [
            "dotfiles/gitconfig",
            "work/gitconfig-work",
            "dotfiles/more.inc",
            "x.inc",
            "git-templates",
            "hooks",
        ] {
            assert!(
                found.contains(&home.join(expected)),
                "{expected}: {found:?}"
            );
        }
        assert_eq!(found.len(), 6, "{found:?}");
        assert!(dotfile_targets(&home, &[]).contains(&home.join("dotfiles/gitconfig")));
    }

    /// Fifteenth review of issue 38: what `~/.bashrc` sources by path runs at every new
    /// shell (the Google Cloud SDK's `path.bash.inc`), and what that sources in turn.
    #[test]
    fn files_the_shell_start_up_files_source_by_path_count() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(home.join("google-cloud-sdk")).unwrap();
        std::fs::create_dir_all(home.join("tools")).unwrap();
        std::fs::write(
            home.join(".bashrc"),
            format!(
                "alias ll='ls -l'\n\
                 if [ -f '{h}/google-cloud-sdk/path.bash.inc' ]; then . '{h}/google-cloud-sdk/path.bash.inc'; fi\n\
                 [ -r ~/tools/prompt.sh ] && source ~/tools/prompt.sh\n\
                 source \"$HOME/tools/env.sh\"\n\
                 . \"$NVM_DIR/nvm.sh\"\n\
                 for f in ~/.bashrc.d/*; do . \"$f\"; done\n\
                 echo ./not-sourced.sh\n",
                h = home.display()
            ),
        )
        .unwrap();
        std::fs::write(home.join("tools/env.sh"), ". tools/deeper.sh\n").unwrap();
        let found = sourced_files(&home);
        for expected in [
            "google-cloud-sdk/path.bash.inc",
            "tools/prompt.sh",
            "tools/env.sh",
            "tools/deeper.sh",
        ] {
            assert!(
                found.contains(&home.join(expected)),
                "{expected}: {found:?}"
            );
        }
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(dotfile_targets(&home, &[]).contains(&home.join("google-cloud-sdk/path.bash.inc")));
        // A FIFO where a start-up file was is not waited on.
        let fifo = home.join(".zshrc");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert_eq!(sourced_files(&home).len(), 4);
    }

    /// Eighth and ninth reviews of issue 38: one budget walked depth first let a full
    /// `~/.local` (Metnos's own workspace is there, and a model may fill it), or the
    /// home's own files, hide `~/.config`'s links; a dangling link counted nowhere.
    #[test]
    fn the_homes_own_links_count_however_full_the_rest_is() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        let workspace = home.join(".local/share/metnos/workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        for i in 0..(DOTFILE_ENTRIES + 10) {
            std::fs::write(workspace.join(format!("f{i}")), "").unwrap();
        }
        std::fs::create_dir_all(home.join("dotfiles/nvim")).unwrap();
        std::fs::create_dir_all(home.join(".config/systemd/user")).unwrap();
        std::os::unix::fs::symlink(home.join("dotfiles/nvim"), home.join(".config/nvim")).unwrap();
        std::fs::write(home.join("dotfiles/x.service"), "").unwrap();
        std::os::unix::fs::symlink(
            home.join("dotfiles/x.service"),
            home.join(".config/systemd/user/x.service"),
        )
        .unwrap();
        for i in 0..(DOTFILE_ENTRIES + 10) {
            std::fs::write(home.join(format!("g{i}")), "").unwrap();
        }
        std::fs::create_dir_all(home.join(".local/share/nvim/site/pack/p/start")).unwrap();
        std::os::unix::fs::symlink(
            home.join("plugins/evil"),
            home.join(".local/share/nvim/site/pack/p/start/evil"),
        )
        .unwrap();
        let targets = dotfile_targets(&home, &[home.join(".local/share/metnos")]);
        assert!(
            targets.contains(&home.join("plugins/evil")),
            "dangling: {targets:?}"
        );
        assert!(targets.contains(&home.join("dotfiles/nvim")), "{targets:?}");
        assert!(
            targets.contains(&home.join("dotfiles/x.service")),
            "{targets:?}"
        );
    }

    /// Twenty-sixth review of issue 38: a hidden tree past the walk's budget (an editor's
    /// extensions) dropped what the start-up files source and git includes.
    #[test]
    fn what_start_up_files_name_counts_however_full_the_hidden_tree_is() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        let big = home.join(".local/share/big");
        std::fs::create_dir_all(&big).unwrap();
        for i in 0..(DOTFILE_ENTRIES + 10) {
            std::fs::write(big.join(format!("f{i}")), "").unwrap();
        }
        std::fs::write(
            home.join(".bashrc"),
            "source ~/google-cloud-sdk/path.bash.inc\n",
        )
        .unwrap();
        std::fs::write(
            home.join(".gitconfig"),
            "[include]\n\tpath = ~/dotfiles/gitconfig\n",
        )
        .unwrap();
        // A skipped folder that is a link counts where it leads.
        std::fs::create_dir_all(home.join("dev/cargo")).unwrap();
        std::os::unix::fs::symlink(home.join("dev/cargo"), home.join(".cargo")).unwrap();
        let targets = dotfile_targets(&home, &[]);
        for named in [
            "google-cloud-sdk/path.bash.inc",
            "dotfiles/gitconfig",
            "dev/cargo",
        ] {
            assert!(targets.contains(&home.join(named)), "{named}: {targets:?}");
        }
    }

    #[test]
    fn paths_inside_pass_and_symlinks_out_are_named_as_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let home = dir.path().to_owned();
        let scope = PathScope::new(&["~/root".to_owned()], &home);

        let real_root = root.canonicalize().unwrap();
        assert_eq!(
            scope.check("~/root/new/file.txt", &home).unwrap(),
            real_root.join("new/file.txt")
        );
        assert!(matches!(
            scope.check("~/root/link/secret", &home),
            Err(ScopeError::SymlinkEscape { .. })
        ));
        assert!(matches!(
            scope.check("~/root/../outside/secret", &home),
            Err(ScopeError::Outside { .. })
        ));
        assert!(matches!(
            scope.check("notes.txt", &home),
            Err(ScopeError::Relative(_))
        ));
    }

    #[test]
    fn hosts_match_exactly_by_domain_or_any() {
        let allowed = ["example.com".to_owned(), "*.wiki.org".to_owned()];
        assert!(check_url("https://example.com/x", &allowed).is_ok());
        assert!(check_url("https://EXAMPLE.com./x", &allowed).is_ok());
        assert!(check_url("https://it.wiki.org/x", &allowed).is_ok());
        assert!(check_url("https://wiki.org.evil.net/x", &allowed).is_err());
        assert!(check_url("https://evil-example.com/", &allowed).is_err());
        assert!(matches!(
            check_url("file:///etc/passwd", &[]),
            Err(ScopeError::Url(_))
        ));
        assert!(check_url("http://[::1]:8080/", &["::1".to_owned()]).is_ok());
    }

    #[test]
    fn the_workspace_is_carved_out_of_metnos_s_data_only_when_it_lies_inside() {
        let data = PathBuf::from("/home/ada/.local/share/metnos");
        let pki = data.join("pki");
        let forbidden = [data.clone(), pki.clone()];
        let key = pki.join("owner.key");
        // The default: <data_dir>/workspace is the shell's, the rest of the data is not.
        let workspace = data.join("workspace");
        assert!(!is_forbidden(
            &workspace.join("notes.txt"),
            &forbidden,
            &workspace
        ));
        assert!(is_forbidden(&key, &forbidden, &workspace));
        assert!(is_forbidden(
            &data.join("keys/owner.key"),
            &forbidden,
            &workspace
        ));
        // A workspace that holds the data directory (the home) opens none of it.
        let home = PathBuf::from("/home/ada");
        assert!(is_forbidden(&key, &forbidden, &home));
        assert!(is_forbidden(&data.join("planner.db"), &forbidden, &home));
        assert!(!is_forbidden(&home.join("notes.txt"), &forbidden, &home));
        // Nor does a workspace that is the data directory itself.
        assert!(is_forbidden(&key, &forbidden, &data));
    }
}
