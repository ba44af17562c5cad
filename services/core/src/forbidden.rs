//! The forbidden core: paths no tool call may read, and paths no tool call may write,
//! whatever the autonomy level, the grants or the judge say. One table, used twice: by the
//! vaglio's guard on every spelling of an argument's text, and by every path executor on
//! the real path it is about to open (symbolic links resolved), so a link or another
//! spelling that fools the first still meets the second.
//!
//! The rules are ASCII regular expressions matched on bytes of an absolute, normalised path
//! (or of a value the guard spells as one). Every rule needs a `/` or a `.` to match: a
//! plain word (letters, digits, `_`, `-`, spaces) breaks none, which lets the guard skip
//! most values at once ([`RULE_WORDS`] lists the words a match needs).
//!
//! Metnos's own files (data directory, certificates, keys, catalog, config) are not here:
//! they depend on the installation, and each side gets them from the effective config.

use std::sync::{LazyLock, Mutex, OnceLock, PoisonError};

use regex_automata::dfa::{Automaton, dense};
use regex_automata::hybrid;
use regex_automata::{Input, MatchKind, PatternSet};

/// What a call does to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    /// Writes, and anything that may write (a shell command).
    Write,
}

mod ahead;
mod rules;
pub use rules::{PATH_RULES, WRITE_RULES};

/// The words a rule needs to match, and nothing shorter: a value holding none of them in
/// any spelling breaks no rule.
pub const RULE_WORDS: &[&str] = &[
    "ssh",
    "etc",
    "root",
    "boot",
    "sys",
    "proc",
    "dev",
    "aws",
    "credentials",
    "gnupg",
    "kube",
    "docker",
    "netrc",
    "git-credentials",
    "pgpass",
    "hosts.y",
    "npmrc",
    "pypirc",
    "password-store",
    "keyrings",
    "krb5cc",
    "tmux",
    "X11",
    "ICE",
    "gpg",
    "xauth",
    "serverauth",
    "Xauthority",
    "run/user",
    "mozilla",
    "chrom",
    "Brave",
    "edge",
    "snap",
    "bash",
    "profile",
    "zsh",
    "zlogin",
    "kshrc",
    "inputrc",
    "xsession",
    "xinitrc",
    "fish",
    "autostart",
    "systemd",
    "cron",
    "local/bin",
    "environment",
    "git",
];

static PATHS: LazyLock<RuleSet> =
    LazyLock::new(|| RuleSet::with_prebuilt(PATH_RULES, &PATHS_AHEAD.bytes));
static WRITES: LazyLock<RuleSet> =
    LazyLock::new(|| RuleSet::with_prebuilt(WRITE_RULES, &WRITES_AHEAD.bytes));

/// The first rule `text` breaks for `access`: for a write, the path rules and then the
/// write rules.
pub fn first_match(text: &str, access: Access) -> Option<&'static str> {
    PATHS.first_match(text).or_else(|| match access {
        Access::Write => WRITES.first_match(text),
        Access::Read => None,
    })
}

/// Why a write to `path` could run code later though no rule above names it: a hidden
/// name under the person's home (`~/.gitconfig`, `~/.config/git/config`, `~/.vimrc`,
/// `~/.bashrc.d/x`, `~/.local/share/applications/x.desktop`: programs read their settings,
/// hooks and start-up files from such places), or a folder of programs the person runs by
/// name (`~/bin`, `~/go/bin`, and every folder in `program_dirs`, the person's PATH).
/// The deny-list above cannot name every program's start-up file; this turns it around:
/// such a write happens only when the person's own message names the path, after a card.
/// `path`, `home` and `program_dirs` are absolute and normalised (resolved where the
/// caller can). `None` for `home` itself and for paths outside it and the PATH.
pub fn runs_code_later(
    path: &std::path::Path,
    home: &std::path::Path,
    program_dirs: &[std::path::PathBuf],
) -> Option<&'static str> {
    let on_path = |dir: &std::path::Path| {
        !dir.as_os_str().is_empty()
            && dir.is_absolute()
            && dir != std::path::Path::new("/")
            && path.starts_with(dir)
    };
    if program_dirs.iter().any(|dir| on_path(dir)) {
        return Some(PROGRAM_FOLDER);
    }
    if interpreter_startup(path) {
        return Some(INTERPRETER_STARTUP);
    }
    if home.as_os_str().is_empty() {
        return None;
    }
    let below = path.strip_prefix(home).ok()?;
    if hidden_below(below) {
        return Some(HOME_HIDDEN);
    }
    if python_in_home(below) {
        return Some(INTERPRETER_STARTUP);
    }
    // `~/bin`, `~/go/bin`, `~/miniconda3/bin`, `~/flutter/bin`: a folder of programs
    // wherever it is in the home, on the service's PATH or not.
    let parts: Vec<_> = below.components().collect();
    parts
        .iter()
        .take(parts.len().saturating_sub(1))
        .any(|part| part.as_os_str() == "bin")
        .then_some(PROGRAM_FOLDER)
}

/// [`runs_code_later`] for a path that may lie in the shell's `workspace`, Metnos's own
/// place for files (under its hidden data directory by default), which the shell's box
/// writes whole anyway: there hidden names are ordinary (a repository's `.gitignore`), the
/// named rules (`.git/`) and the PATH still count. Config refuses a workspace that holds
/// the home or a folder on the PATH.
pub fn runs_code_later_beside(
    path: &std::path::Path,
    home: &std::path::Path,
    program_dirs: &[std::path::PathBuf],
    workspace: &std::path::Path,
) -> Option<&'static str> {
    if workspace.as_os_str().len() > 1 && path.starts_with(workspace) {
        runs_code_later(path, std::path::Path::new(""), program_dirs)
    } else {
        runs_code_later(path, home, program_dirs)
    }
}

/// What an interpreter or the shell loads of its own accord: Python's standard library and
/// site folders
/// (`.pth` files run their `import` lines), `sitecustomize.py`/`usercustomize.py`, conda's
/// activation scripts — wherever they are (a virtual environment, a conda install) — and
/// what decides where its code comes from: a venv's `pyvenv.cfg` (`home =` names the
/// standard library it loads), `pip.conf` (the index the next `pip install` runs from);
/// `readline.py` and `rlcompleter.py`, which Python's prompt imports from the folder it
/// opens in; a `__pycache__` folder (its bytecode is loaded for the source beside it); a
/// `node_modules` folder (Node looks for a module in every folder above the
/// program), `perl5` (local::lib), and the completion and plugin folders bash, zsh and fish
/// load from beside a folder of programs (`share/bash-completion`, `site-functions`,
/// `vendor_conf.d`).
fn interpreter_startup(path: &std::path::Path) -> bool {
    let named = |part: &std::ffi::OsStr| {
        matches!(
            part.to_str(),
            Some(
                "site-packages"
                    | "dist-packages"
                    | "activate.d"
                    | "deactivate.d"
                    | "node_modules"
                    | "__pycache__"
                    | "perl5"
                    | "bash-completion"
                    | "site-functions"
                    | "vendor_conf.d"
                    | "vendor_functions.d"
                    | "vendor_completions.d"
            )
        )
    };
    let file = path
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or_default();
    let parts: Vec<&std::ffi::OsStr> = path.components().map(|c| c.as_os_str()).collect();
    // An installed Python's standard library (`~/miniconda3/lib/python3.12/encodings/`):
    // every start of that Python imports from it.
    let standard_library = parts.windows(2).any(|pair| {
        matches!(pair[0].to_str(), Some("lib" | "lib64"))
            && pair[1].to_str().is_some_and(|name| {
                name.strip_prefix("python").is_some_and(|v| {
                    !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.')
                })
            })
    });
    // R's per-user package library (`~/R/x86_64-pc-linux-gnu-library/4.3/`): `library()`
    // runs each package's loader from there.
    let r_library = parts.windows(2).any(|pair| {
        pair[0] == "R"
            && pair[1]
                .to_str()
                .is_some_and(|name| name.ends_with("-library"))
    });
    standard_library
        || r_library
        || parts.iter().any(|part| named(part))
        || file.ends_with(".pth")
        || matches!(file, "pyvenv.cfg" | "pip.conf")
        || python_module(file).is_some_and(|module| {
            matches!(
                module,
                "sitecustomize" | "usercustomize" | "readline" | "rlcompleter"
            )
        })
}

/// The module a file name is to Python's import system, whatever form it takes: source
/// (`x.py`), bytecode without its source (`x.pyc`: Python loads it as it is), an extension
/// (`x.so`, `x.cpython-310-x86_64-linux-gnu.so`, `x.abi3.so`).
fn python_module(file: &str) -> Option<&str> {
    let (module, suffix) = file.split_once('.')?;
    let extension = suffix.ends_with(".so") || suffix == "so";
    (matches!(suffix, "py" | "pyc" | "pyo" | "pyw") || extension).then_some(module)
}

/// Whether `below` (a path under the home) is a module Python imports from the home, the
/// folder a terminal opens in (Python puts the folder it starts in first on its path):
/// `~/pip.py` runs at `python3 -m pip`, `~/venv/__main__.py` at `python3 -m venv`.
fn python_in_home(below: &std::path::Path) -> bool {
    let parts: Vec<&std::ffi::OsStr> = below.components().map(|c| c.as_os_str()).collect();
    match parts.as_slice() {
        [file] => file.to_str().and_then(python_module).is_some(),
        [_, file] => file
            .to_str()
            .and_then(python_module)
            .is_some_and(|module| matches!(module, "__init__" | "__main__")),
        _ => false,
    }
}

/// Whether a relative path has a hidden (dot) name.
fn hidden_below(below: &std::path::Path) -> bool {
    below.components().any(|part| {
        let name = part.as_os_str().as_encoded_bytes();
        name.first() == Some(&b'.') && name != b"." && name != b".."
    })
}

/// [`runs_code_later`]'s rule for a hidden name under the home.
pub const HOME_HIDDEN: &str = "write.home_hidden";
/// [`runs_code_later`]'s rule for a folder of programs (the PATH, `~/bin`).
pub const PROGRAM_FOLDER: &str = "write.program_folder";
/// [`runs_code_later`]'s rule for what an interpreter runs at every start.
pub const INTERPRETER_STARTUP: &str = "write.interpreter_startup";
/// The rule for a folder git takes for a repository (a bare one, or `HEAD`, `objects` and
/// `refs` planted side by side): its config, hooks and `HEAD` steer the person's next git
/// command there. The path executors and the planner see the folder; a path alone cannot.
pub const GIT_REPOSITORY: &str = "write.git_repository";
/// The rule for an executable file the write would change (the path executors and the
/// planner see its mode; a path alone cannot say).
pub const EXECUTABLE: &str = "write.executable";

/// What [`runs_code_later`]'s rule means, for a person: one clause.
pub fn runs_code_later_reason(rule: &str) -> &'static str {
    if rule == PROGRAM_FOLDER {
        "a folder of programs you run by name (on your PATH, or a bin folder)"
    } else if rule == INTERPRETER_STARTUP {
        "a file an interpreter or the shell loads of its own accord (Python's standard library and site folders, .pth files, conda's activation scripts, a Python module in your home, node_modules, completion folders)"
    } else if rule == GIT_REPOSITORY {
        "a git repository's own files (its config, hooks and HEAD steer your next git command there)"
    } else if rule == EXECUTABLE {
        "an executable file (a program or script that runs when started)"
    } else {
        "a hidden file or folder of your home, where programs read settings, hooks and start-up files"
    }
}

/// Where the read rules' files and folders usually are, for a sandbox that must hide them
/// by path rather than judge a text: in `home`, then on the system. (A file the rules name
/// elsewhere is still refused by the guard and the file executors.)
pub fn usual_places(home: &std::path::Path) -> Vec<std::path::PathBuf> {
    const IN_HOME: &[&str] = &[
        ".ssh",
        ".gnupg",
        ".aws",
        ".kube",
        ".docker",
        ".netrc",
        ".git-credentials",
        ".pgpass",
        ".config/gh",
        ".npmrc",
        ".pypirc",
        ".Xauthority",
        ".password-store",
        ".local/share/keyrings",
        ".mozilla/firefox",
        ".config/google-chrome",
        ".config/chromium",
        ".config/BraveSoftware",
        ".config/microsoft-edge",
        "snap/firefox",
        "snap/chromium",
    ];
    // The system's secrets: never readable, even where a sandboxed root maps to the
    // machine's root (owner bits then apply without capabilities).
    const SYSTEM: &[&str] = &[
        "/root",
        "/etc/shadow",
        "/etc/shadow-",
        "/etc/gshadow",
        "/etc/gshadow-",
        "/etc/sudoers",
        "/etc/sudoers.d",
        "/etc/ssh",
        "/etc/ssl/private",
        "/etc/security/opasswd",
        "/etc/krb5.keytab",
        "/etc/NetworkManager/system-connections",
        "/etc/wireguard",
        "/etc/ipsec.secrets",
        "/etc/ppp",
        "/etc/letsencrypt",
        "/etc/credstore",
        "/etc/credstore.encrypted",
        "/boot",
    ];
    IN_HOME
        .iter()
        .map(|p| home.join(p))
        .chain(SYSTEM.iter().map(std::path::PathBuf::from))
        .collect()
}

/// Makes the fully determinised automata ready now, for a service that judges many
/// values: the forbidden core's two are loaded from the bytes the build wrote (well under
/// a millisecond; determinising the path rules costs tens). A short-lived process (an
/// executor judging one path) skips this and its checks use the lazily built engine,
/// whose setup costs microseconds.
pub fn warm_up() {
    PATHS.build_ahead();
    WRITES.build_ahead();
}

/// A slice aligned as the automaton's `u32` transitions need, for the bytes included
/// from a build script (here and in the vaglio's, for its shell rules).
#[derive(Debug)]
#[repr(C, align(4))]
pub struct Aligned<B: ?Sized> {
    pub bytes: B,
}

static PATHS_AHEAD: &Aligned<[u8]> = &Aligned {
    bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/paths.dfa")),
};
static WRITES_AHEAD: &Aligned<[u8]> = &Aligned {
    bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/writes.dfa")),
};

/// A set of rules with two engines: a lazily determinised DFA, ready at once (a fraction
/// of a millisecond to set up), and on [`RuleSet::build_ahead`] a fully built one (the
/// engine behind `regex::RegexSet`, built ahead instead of lazily): a search is then one
/// pass over the bytes, with no cache to lock and no literal prefilter to set up, which on
/// the short values a guard sees cost more than the match itself. Building it costs tens
/// of milliseconds, far more than a one-shot process's whole check, so the forbidden
/// core's are built with the program (`build.rs`) and only loaded.
pub struct RuleSet {
    rules: &'static [(&'static str, &'static str)],
    lazy: hybrid::dfa::DFA,
    cache: Mutex<hybrid::dfa::Cache>,
    ahead: OnceLock<Ahead>,
    /// The fully built automaton's bytes, when the build made them.
    prebuilt: Option<&'static [u8]>,
}

/// The fully built automaton: loaded from the build's bytes, or built here.
enum Ahead {
    Loaded(dense::DFA<&'static [u32]>),
    Built(dense::DFA<Vec<u32>>),
}

impl RuleSet {
    pub fn new(rules: &'static [(&'static str, &'static str)]) -> RuleSet {
        let patterns: Vec<&str> = rules.iter().map(|(_, p)| *p).collect();
        let lazy = hybrid::dfa::DFA::builder()
            .configure(hybrid::dfa::Config::new().match_kind(MatchKind::All))
            .syntax(ahead::syntax())
            .build_many(&patterns)
            .expect("valid forbidden-path rules");
        let cache = Mutex::new(lazy.create_cache());
        RuleSet {
            rules,
            lazy,
            cache,
            ahead: OnceLock::new(),
            prebuilt: None,
        }
    }

    /// As [`RuleSet::new`], with the fully built automaton's bytes as a build script wrote
    /// them from the same `rules` with [`ahead::builder`] (`src/forbidden/ahead.rs`,
    /// which such a script includes).
    pub fn with_prebuilt(
        rules: &'static [(&'static str, &'static str)],
        bytes: &'static [u8],
    ) -> RuleSet {
        RuleSet {
            prebuilt: Some(bytes),
            ..RuleSet::new(rules)
        }
    }

    /// Makes the full DFA ready now (loaded, or else built); later searches use it. Bytes
    /// that do not load (a build for another byte order) are set aside and the automaton
    /// is built instead: slower to start, the same answers.
    pub fn build_ahead(&self) {
        self.ahead.get_or_init(|| {
            if let Some(bytes) = self.prebuilt
                && let Ok((dfa, _)) = dense::DFA::from_bytes(bytes)
                && dfa.pattern_len() == self.rules.len()
            {
                return Ahead::Loaded(dfa);
            }
            let patterns: Vec<&str> = self.rules.iter().map(|(_, p)| *p).collect();
            Ahead::Built(
                ahead::builder()
                    .build_many(&patterns)
                    .expect("valid forbidden-path rules"),
            )
        });
    }

    /// Whether the full automaton came from a build script's bytes.
    pub fn loaded_ahead(&self) -> bool {
        matches!(self.ahead.get(), Some(Ahead::Loaded(_)))
    }

    /// The id of the first rule (in table order) that `text` breaks. Were a search to give
    /// up (no rule has look-around the DFAs cannot handle on ASCII, and the lazy one's
    /// cache is far larger than a path needs), the value is treated as a hit on the first
    /// rule: fail closed.
    pub fn first_match(&self, text: &str) -> Option<&'static str> {
        match self.ahead.get() {
            Some(Ahead::Loaded(dfa)) => self.first_in(dfa, text),
            Some(Ahead::Built(dfa)) => self.first_in(dfa, text),
            None => self.first_lazily(text),
        }
    }

    fn first_in(&self, dfa: &impl Automaton, text: &str) -> Option<&'static str> {
        match dfa.try_search_fwd(&Input::new(text).earliest(true)) {
            Ok(None) => return None,
            Ok(Some(_)) => {}
            Err(_) => return Some(self.rules[0].0),
        }
        // Which rule: worth working out only on a hit.
        let mut which = PatternSet::new(dfa.pattern_len());
        let found = dfa.try_which_overlapping_matches(&Input::new(text), &mut which);
        self.first_of(found, &which)
    }

    /// The first rule in table order among those `which` holds; the first rule when the
    /// search gave up (fail closed).
    fn first_of(
        &self,
        found: Result<(), regex_automata::MatchError>,
        which: &PatternSet,
    ) -> Option<&'static str> {
        match found {
            Ok(()) => which.iter().next().map(|id| self.rules[id.as_usize()].0),
            Err(_) => Some(self.rules[0].0),
        }
    }

    fn first_lazily(&self, text: &str) -> Option<&'static str> {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        match self
            .lazy
            .try_search_fwd(&mut cache, &Input::new(text).earliest(true))
        {
            Ok(None) => return None,
            Ok(Some(_)) => {}
            Err(_) => return Some(self.rules[0].0),
        }
        let mut which = PatternSet::new(self.lazy.pattern_len());
        let found =
            self.lazy
                .try_which_overlapping_matches(&mut cache, &Input::new(text), &mut which);
        self.first_of(found, &which)
    }
}

impl std::fmt::Debug for RuleSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleSet")
            .field("rules", &self.rules.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Paths made of the words the rules look for, and a few others.
    fn rule_words_path() -> impl Strategy<Value = String> {
        let segment = prop::sample::select(vec![
            "etc",
            "ssh",
            ".ssh",
            "passwd",
            "shadow",
            "root",
            "proc",
            "self",
            "1",
            "cwd",
            "tmp",
            "krb5cc_1",
            "tmux-0",
            ".config",
            "gh",
            "hosts.yml",
            "app",
            "credentials.env",
            ".git",
            "hooks",
            ".bashrc",
            "run",
            "user",
            "1000",
            "dev",
            "sda",
            "home",
            "ada",
            ".aws",
            "credentials",
            ".local",
            "bin",
            "share",
            "keyrings",
            "",
            ".",
            "..",
            "x",
        ]);
        (any::<bool>(), prop::collection::vec(segment, 0..6)).prop_map(|(absolute, parts)| {
            let joined = parts.join("/");
            if absolute {
                format!("/{joined}")
            } else {
                joined
            }
        })
    }

    #[test]
    fn the_core_s_automata_are_loaded_from_the_build_not_built_at_start() {
        warm_up();
        assert!(
            PATHS.loaded_ahead(),
            "the path rules were determinised at start"
        );
        assert!(
            WRITES.loaded_ahead(),
            "the write rules were determinised at start"
        );
    }

    static LAZY_PATHS: LazyLock<RuleSet> = LazyLock::new(|| RuleSet::new(PATH_RULES));
    static LAZY_WRITES: LazyLock<RuleSet> = LazyLock::new(|| RuleSet::new(WRITE_RULES));

    proptest! {
        /// The automata loaded from the build and the lazy engine built here from the same
        /// tables name the same first rule for every path.
        #[test]
        fn the_loaded_automata_and_the_lazy_engine_agree(path in rule_words_path()) {
            warm_up();
            for (loaded, lazy) in [(&*PATHS, &*LAZY_PATHS), (&*WRITES, &*LAZY_WRITES)] {
                prop_assert_eq!(loaded.first_match(&path), lazy.first_match(&path), "{}", &path);
            }
        }
    }

    #[test]
    fn credential_stores_are_neither_read_nor_written() {
        for path in [
            "/home/ada/.ssh/id_rsa",
            "/home/ada/.docker/config.json",
            "/home/ada/.kube/config",
            "/home/ada/.netrc",
            "/home/ada/.git-credentials",
            "/home/ada/.pgpass",
            "/home/ada/.config/gh/hosts.yml",
            "/home/ada/.npmrc",
            "/home/ada/.pypirc",
            "/home/ada/.password-store/bank.gpg",
            "/home/ada/.local/share/keyrings/login.keyring",
            "/home/ada/.mozilla/firefox/abc.default/logins.json",
            "/home/ada/.config/google-chrome/Default/Cookies",
            "/home/ada/.config/chromium/Default/Login Data",
            "/proc/self/root/etc/shadow",
            "/proc/thread-self/cwd",
            "/etc/ssl/private/server.key",
            "/etc/wireguard/wg0.conf",
            "/etc/NetworkManager/system-connections/home.nmconnection",
            "/etc/letsencrypt/live/example.org/privkey.pem",
            "/etc/krb5.keytab",
            "/tmp/krb5cc_1000",
            "/tmp/krb5cc_1000_Xy12",
            "/var/tmp/krb5cc_0",
            "/tmp/ssh-XXXXabc/agent.1234",
            "/tmp/tmux-1000/default",
            "/tmp/.X11-unix/X0",
            "/tmp/systemd-private-abc-colord.service-x/tmp/a",
            "/tmp/gpg-abc/S.gpg-agent",
            "/run/user/1000/keyring/control",
            "/tmp/serverauth.Zq3x9kLm2A",
            "/home/ada/.Xauthority",
        ] {
            assert!(first_match(path, Access::Read).is_some(), "{path}");
            assert!(first_match(path, Access::Write).is_some(), "{path}");
            assert!(holds_a_rule_word(path), "{path}");
        }
    }

    #[test]
    fn what_runs_at_login_or_on_a_schedule_is_read_but_not_written() {
        for path in [
            "/home/ada/.bashrc",
            "/home/ada/.profile",
            "/home/ada/.bash_login",
            "/home/ada/.zshrc",
            "/home/ada/.config/autostart/evil.desktop",
            "/home/ada/.config/systemd/user/evil.service",
            "/home/ada/.local/bin/metnos-exec",
            "/home/ada/.local/bin",
            "/var/spool/cron/crontabs/ada",
            "/etc/cron.d/evil",
            "/etc/crontab",
            "/home/ada/projects/site/.git/hooks/pre-commit",
            "/home/ada/projects/site/.git/config",
            "/home/ada/projects/site/.git",
        ] {
            assert_eq!(first_match(path, Access::Read), None, "{path}");
            assert!(first_match(path, Access::Write).is_some(), "{path}");
            assert!(holds_a_rule_word(path), "{path}");
        }
    }

    #[test]
    fn every_usual_place_breaks_a_read_rule() {
        for place in usual_places(std::path::Path::new("/home/ada")) {
            let text = place.to_string_lossy();
            // A folder's rules may need a file name beneath it.
            let inside = format!("{text}/config");
            assert!(
                first_match(&text, Access::Read).is_some()
                    || first_match(&inside, Access::Read).is_some()
                    || text.ends_with(".aws")
                    || text.ends_with(".docker")
                    || text.ends_with(".config/gh"),
                "{text} is not protected by any rule"
            );
        }
    }

    #[test]
    fn ordinary_files_pass_both_ways() {
        for path in [
            "/home/ada/notes.txt",
            "/home/ada/Documents/profile-photo.png",
            "/home/ada/projects/bashrc-tips.md",
            "/home/ada/.config/nvim/init.lua",
            "/home/ada/cron-notes.txt",
            "/tmp/report.csv",
            "/etc/ssl/certs/ca-certificates.crt",
            "/etc/pppoe.conf.example",
            "/home/ada/projects/site/.gitignore",
            "/home/ada/projects/site/.github/workflows/ci.yml",
            "/home/ada/projects/site.git/README",
        ] {
            assert_eq!(first_match(path, Access::Read), None, "{path}");
            assert_eq!(first_match(path, Access::Write), None, "{path}");
        }
    }

    /// What the guard relies on to skip a value: a path that breaks a rule holds a rule
    /// word (checked on a matching example of every rule and alternative above).
    fn holds_a_rule_word(path: &str) -> bool {
        RULE_WORDS.iter().any(|w| path.contains(w))
    }

    #[test]
    fn both_engines_name_the_same_first_rule() {
        let lazy = RuleSet::new(PATH_RULES);
        let ahead = RuleSet::new(PATH_RULES);
        ahead.build_ahead();
        let lazy_writes = RuleSet::new(WRITE_RULES);
        let ahead_writes = RuleSet::new(WRITE_RULES);
        ahead_writes.build_ahead();
        for path in [
            "/home/ada/.ssh/id_rsa",
            "/etc/shadow",
            "/proc/self/root/etc/shadow",
            "/proc/1/environ",
            "/home/ada/.config/chromium/Default/Cookies",
            "/home/ada/.bashrc",
            "/home/ada/projects/site/.git/config",
            "/home/ada/notes.txt",
            "/tmp/report.csv",
            "",
        ] {
            assert_eq!(lazy.first_match(path), ahead.first_match(path), "{path}");
            assert_eq!(
                lazy_writes.first_match(path),
                ahead_writes.first_match(path),
                "{path}"
            );
            // And the automata the build made from the same tables.
            warm_up();
            assert_eq!(PATHS.first_match(path), ahead.first_match(path), "{path}");
            assert_eq!(
                WRITES.first_match(path),
                ahead_writes.first_match(path),
                "{path}"
            );
        }
    }

    #[test]
    fn a_write_that_runs_code_later_is_named_by_the_home_and_the_path() {
        use std::path::{Path, PathBuf};
        let home = Path::new("/home/ada");
        let path_dirs = vec![
            PathBuf::from("/home/ada/.cargo/bin"),
            PathBuf::from("/opt/tools/bin"),
            PathBuf::from("/usr/local/bin"),
        ];
        // The red team's list: none of these broke a rule of the table above.
        for (written, rule) in [
            ("/home/ada/.gitconfig", HOME_HIDDEN),
            ("/home/ada/.config/git/config", HOME_HIDDEN),
            ("/home/ada/.bash_aliases", HOME_HIDDEN),
            ("/home/ada/.bashrc.d/10-evil.sh", HOME_HIDDEN),
            ("/home/ada/.cargo/bin/ls", PROGRAM_FOLDER),
            ("/home/ada/bin/ls", PROGRAM_FOLDER),
            ("/home/ada/miniconda3/bin/conda", PROGRAM_FOLDER),
            ("/home/ada/go/bin/gopls", PROGRAM_FOLDER),
            ("/home/ada/.config/environment.d/10-path.conf", HOME_HIDDEN),
            ("/home/ada/.xsessionrc", HOME_HIDDEN),
            ("/home/ada/.config/plasma-workspace/env/x.sh", HOME_HIDDEN),
            ("/home/ada/.vimrc", HOME_HIDDEN),
            ("/home/ada/.tmux.conf", HOME_HIDDEN),
            ("/home/ada/.config/direnv/direnvrc", HOME_HIDDEN),
            ("/home/ada/.oh-my-zsh/custom/evil.zsh", HOME_HIDDEN),
            ("/home/ada/.local/share/applications/x.desktop", HOME_HIDDEN),
            ("/home/ada/.config/mimeapps.list", HOME_HIDDEN),
            ("/home/ada/projects/site/.envrc", HOME_HIDDEN),
            ("/opt/tools/bin/make", PROGRAM_FOLDER),
            (
                "/home/ada/miniconda3/lib/python3.12/site-packages/x.pth",
                INTERPRETER_STARTUP,
            ),
            (
                "/home/ada/venv/lib/python3.12/site-packages/evil.py",
                INTERPRETER_STARTUP,
            ),
            ("/home/ada/proj/sitecustomize.py", INTERPRETER_STARTUP),
            ("/home/ada/proj/venv/pyvenv.cfg", INTERPRETER_STARTUP),
            ("/home/ada/proj/venv/pip.conf", INTERPRETER_STARTUP),
            (
                "/home/ada/miniconda3/etc/conda/activate.d/x.sh",
                INTERPRETER_STARTUP,
            ),
            ("/srv/app/hooks.pth", INTERPRETER_STARTUP),
            ("/usr/local/bin/git", PROGRAM_FOLDER),
            // Python imports from the folder it starts in, a terminal's first: the home.
            ("/home/ada/pip.py", INTERPRETER_STARTUP),
            ("/home/ada/venv/__main__.py", INTERPRETER_STARTUP),
            ("/home/ada/json/__init__.py", INTERPRETER_STARTUP),
            ("/home/ada/projects/site/readline.py", INTERPRETER_STARTUP),
            ("/home/ada/rlcompleter.py", INTERPRETER_STARTUP),
            // Nineteenth review: bytecode without its source, and extensions, import too.
            ("/home/ada/pip.pyc", INTERPRETER_STARTUP),
            ("/home/ada/readline.pyc", INTERPRETER_STARTUP),
            ("/home/ada/projects/site/readline.pyc", INTERPRETER_STARTUP),
            ("/home/ada/json/__init__.pyc", INTERPRETER_STARTUP),
            // Twentieth review: bytecode Python takes for a module's source (an
            // unchecked-hash .pyc is loaded whatever the source says).
            (
                "/home/ada/__pycache__/notes.cpython-310.pyc",
                INTERPRETER_STARTUP,
            ),
            (
                "/home/ada/projects/site/__pycache__/app.cpython-312.pyc",
                INTERPRETER_STARTUP,
            ),
            (
                "/home/ada/readline.cpython-310-x86_64-linux-gnu.so",
                INTERPRETER_STARTUP,
            ),
            // Sixteenth review: what an installed Python, Node, Perl and the shell's
            // completion load.
            (
                "/home/ada/miniconda3/lib/python3.12/encodings/__init__.py",
                INTERPRETER_STARTUP,
            ),
            (
                "/home/ada/miniconda3/envs/x/lib/python3.11/os.py",
                INTERPRETER_STARTUP,
            ),
            (
                "/home/ada/node_modules/supports-color/index.js",
                INTERPRETER_STARTUP,
            ),
            (
                "/home/ada/perl5/lib/perl5/local/lib.pm",
                INTERPRETER_STARTUP,
            ),
            (
                "/home/ada/R/x86_64-pc-linux-gnu-library/4.3/ggplot2/R/ggplot2",
                INTERPRETER_STARTUP,
            ),
            (
                "/home/ada/go/share/bash-completion/completions/ls",
                INTERPRETER_STARTUP,
            ),
            (
                "/home/ada/share/zsh/site-functions/_ls",
                INTERPRETER_STARTUP,
            ),
        ] {
            assert_eq!(
                first_match(written, Access::Write),
                None,
                "{written} is already a named rule"
            );
            assert_eq!(
                runs_code_later(Path::new(written), home, &path_dirs),
                Some(rule),
                "{written}"
            );
        }
        for ordinary in [
            "/home/ada/notes.txt",
            "/home/ada/Documents/report.txt",
            "/home/ada/binder/x.txt",
            "/home/ada/notes/bin",
            "/home/ada/projects/bin-tools.md",
            "/home/ada/projects/x/tool.py",
            "/home/ada/projects/site/__main__.py",
            "/home/ada/notes.txt.bak",
            "/home/ada/projects/site/notes.pyc",
            "/home/ada/projects/site/lib/pythonic.md",
            "/home/ada/projects/site/lib/helpers.py",
            "/home/ada",
            "/tmp/x",
            "/opt/tools/binaries/x",
            "/srv/data/.hidden-but-not-home",
        ] {
            assert_eq!(
                runs_code_later(Path::new(ordinary), home, &path_dirs),
                None,
                "{ordinary}"
            );
        }
        // A PATH entry that is empty, relative or the root names nothing.
        let odd = vec![PathBuf::new(), PathBuf::from("bin"), PathBuf::from("/")];
        assert_eq!(runs_code_later(Path::new("/srv/x"), home, &odd), None);
        // The shell's workspace under the hidden data directory is Metnos's own place
        // (the box writes it whole): hidden names there are ordinary.
        let workspace = Path::new("/home/ada/.local/share/metnos/workspace");
        for (written, expected) in [
            ("/home/ada/.local/share/metnos/workspace/report.txt", None),
            (
                "/home/ada/.local/share/metnos/workspace/q/scratch/r.txt",
                None,
            ),
            (
                "/home/ada/.local/share/metnos/workspace/site/.gitignore",
                None,
            ),
            ("/home/ada/.local/share/metnos/x", Some(HOME_HIDDEN)),
            ("/home/ada/.gitconfig", Some(HOME_HIDDEN)),
            ("/home/ada/notes.txt", None),
        ] {
            assert_eq!(
                runs_code_later_beside(Path::new(written), home, &path_dirs, workspace),
                expected,
                "{written}"
            );
        }
    }

    #[test]
    fn every_rule_needs_a_slash_or_a_dot() {
        for (id, pattern) in PATH_RULES.iter().chain(WRITE_RULES) {
            assert!(
                pattern.contains('/') || pattern.contains(r"\."),
                "{id} could match a plain word"
            );
        }
    }
}
