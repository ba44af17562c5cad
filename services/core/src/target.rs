//! Targets: the concrete thing a call acts on, and the patterns grants hold, parsed per
//! the capability's target kind (policy matches them; approval checks a territory's).
//!
//! - path_glob: `~` is the user's home (`runtime.user_home`, DESIGN.md §6); the concrete
//!   path is normalised lexically (`.`, `..`, repeated slashes) before matching, so
//!   `~/Documents/invoices-2026/../../.ssh/id_rsa` cannot match a grant on
//!   `~/Documents/invoices-2026/*`. Globs use `globset` with `*` not crossing `/`
//!   (`**` does).
//! - host: the host of a URL (or a bare host), against an exact host or a `*.example.com`
//!   wildcard (which matches subdomains, not `example.com` itself).
//! - exact: equality.
//!
//! Each pattern also has a lookup key, so the store fetches only the grants that could
//! match: the directory of a glob's literal prefix, the host or wildcard, the exact value.

use std::path::Path;

use globset::{GlobBuilder, GlobMatcher};

use crate::capability::TargetKind;
use crate::path::{Tilde, expand_tilde, home_text, normalize};

/// Longest target accepted, in bytes.
pub const MAX_TARGET_LEN: usize = 4096;

/// A target or pattern that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("target is empty")]
    Empty,
    #[error("target is longer than {MAX_TARGET_LEN} bytes")]
    TooLong,
    #[error("target contains a control character")]
    ControlCharacter,
    #[error("path `{0}` must be absolute or start with ~/")]
    NotAbsolute(String),
    #[error("path `{0}`: only ~ (the user's home) is supported, not ~user")]
    OtherUsersHome(String),
    #[error("glob `{glob}` is malformed: {message}")]
    MalformedGlob { glob: String, message: String },
    #[error("glob `{0}` must not contain `..` segments")]
    DotDotInGlob(String),
    #[error("`{0}` is not a URL or host name")]
    BadHost(String),
    #[error("this capability has no target")]
    NoTargetKind,
    #[error(
        "`{0}` would grant everything in / or in a home folder; name a folder inside (`~/Documents/*`)"
    )]
    TooBroad(String),
    #[error(
        "`{0}` is a public suffix: a grant would cover every site under it; name a site (`*.example.com`)"
    )]
    PublicSuffix(String),
}

fn check_text(raw: &str) -> Result<(), TargetError> {
    if raw.is_empty() {
        return Err(TargetError::Empty);
    }
    if raw.len() > MAX_TARGET_LEN {
        return Err(TargetError::TooLong);
    }
    if raw.chars().any(char::is_control) {
        return Err(TargetError::ControlCharacter);
    }
    Ok(())
}

/// `~` and `~/…` become the user's home; `~user` is refused.
fn expand_home(raw: &str, home: &Path) -> Result<String, TargetError> {
    match expand_tilde(raw, &home_text(home)) {
        Tilde::Home(path) => Ok(path),
        Tilde::OtherUser { .. } => Err(TargetError::OtherUsersHome(crate::limits::shown(raw))),
        Tilde::None => Ok(raw.to_owned()),
    }
}

/// `raw` with `~` expanded; it must then be absolute.
fn absolute(raw: &str, home: &Path) -> Result<String, TargetError> {
    let expanded = expand_home(raw, home)?;
    if !expanded.starts_with('/') {
        return Err(TargetError::NotAbsolute(crate::limits::shown(raw)));
    }
    Ok(expanded)
}

/// The concrete target of a call, normalised for matching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An absolute, normalised path.
    Path(String),
    /// A lower-case host name (or bracketed IPv6 address).
    Host(String),
    Exact(String),
}

impl Target {
    /// Parses the target of a call to a capability of `kind`.
    pub fn parse(kind: TargetKind, raw: &str, home: &Path) -> Result<Target, TargetError> {
        check_text(raw)?;
        match kind {
            TargetKind::PathGlob => Ok(Target::Path(normalize(&absolute(raw, home)?))),
            TargetKind::Host => Ok(Target::Host(host_of(raw)?)),
            TargetKind::Exact => Ok(Target::Exact(raw.to_owned())),
            TargetKind::None => Err(TargetError::NoTargetKind),
        }
    }

    /// The lookup keys of every pattern that could match this target.
    pub fn candidate_keys(&self) -> Vec<String> {
        match self {
            Target::Path(path) => {
                // Every ancestor directory, with its trailing slash: "/", "/a/", "/a/b/".
                let mut keys = vec!["/".to_owned()];
                let mut prefix = String::from("/");
                let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
                for segment in segments.iter().take(segments.len().saturating_sub(1)) {
                    prefix.push_str(segment);
                    prefix.push('/');
                    keys.push(prefix.clone());
                }
                keys
            }
            Target::Host(host) => {
                let mut keys = vec![host.clone()];
                let mut rest = host.as_str();
                while let Some((_, parent)) = rest.split_once('.') {
                    keys.push(format!("*.{parent}"));
                    rest = parent;
                }
                keys
            }
            Target::Exact(value) => vec![value.clone()],
        }
    }
}

/// The host of a URL (`https://Example.com:8443/x`) or of a bare host (`example.com`,
/// `example.com:8080`), lower case, without a trailing dot.
fn host_of(raw: &str) -> Result<String, TargetError> {
    let with_scheme = if raw.contains("://") {
        raw.to_owned()
    } else {
        format!("http://{raw}")
    };
    let url = url::Url::parse(&with_scheme)
        .map_err(|_| TargetError::BadHost(crate::limits::shown(raw)))?;
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| TargetError::BadHost(crate::limits::shown(raw)))?;
    Ok(host.trim_end_matches('.').to_ascii_lowercase())
}

/// What a grant holds, parsed: its normalised pattern text and its lookup key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub kind: TargetKind,
    /// Normalised: globs with `~` expanded, hosts lower case.
    pub text: String,
    pub key: String,
}

impl Pattern {
    /// Parses a grant's target for a capability of `kind`.
    pub fn parse(kind: TargetKind, raw: &str, home: &Path) -> Result<Pattern, TargetError> {
        check_text(raw)?;
        match kind {
            TargetKind::PathGlob => {
                let expanded = absolute(raw, home)?;
                if expanded.split('/').any(|s| s == "..") {
                    return Err(TargetError::DotDotInGlob(crate::limits::shown(raw)));
                }
                let text = collapse_slashes(&expanded);
                compile_glob(&text).map_err(|message| TargetError::MalformedGlob {
                    glob: crate::limits::shown(raw),
                    message,
                })?;
                if too_broad(&text, &home_text(home)) {
                    return Err(TargetError::TooBroad(crate::limits::shown(raw)));
                }
                let key = glob_key(&text);
                Ok(Pattern { kind, text, key })
            }
            TargetKind::Host => {
                let (wildcard, rest) = match raw.strip_prefix("*.") {
                    Some(rest) => (true, rest),
                    None => (false, raw),
                };
                if rest.contains('*') {
                    return Err(TargetError::BadHost(crate::limits::shown(raw)));
                }
                let host = host_of(rest)?;
                if is_public_suffix(&host) {
                    return Err(TargetError::PublicSuffix(crate::limits::shown(raw)));
                }
                let text = if wildcard { format!("*.{host}") } else { host };
                Ok(Pattern {
                    kind,
                    key: text.clone(),
                    text,
                })
            }
            TargetKind::Exact => Ok(Pattern {
                kind,
                text: raw.to_owned(),
                key: raw.to_owned(),
            }),
            TargetKind::None => Err(TargetError::NoTargetKind),
        }
    }
}

/// Whether a grant's glob reaches everything in `/`, in a home folder or in a folder
/// holding homes: `/`, `/*`, `/**`, `/*/x`, `~/*`, `~/**`, `/home/**`. A glob naming part of
/// a name there (`~/Doc*/x`, `~/*.pdf`) is not: a person may grant that knowingly, and `*`
/// never matches a leading dot ([`hidden_by_wildcard`]).
fn too_broad(glob: &str, home: &str) -> bool {
    if glob == "/" {
        return true;
    }
    let segments: Vec<&str> = glob.split('/').filter(|s| !s.is_empty()).collect();
    let Some(first_wild) = segments
        .iter()
        .position(|s| s.contains(['*', '?', '[', '{']))
    else {
        return false;
    };
    let folder = format!("/{}", segments[..first_wild].join("/"));
    let home_or_above = folder == "/"
        || (!home.is_empty() && (home == folder || home.starts_with(&format!("{folder}/"))));
    home_or_above && !names_part_of_a_name(segments[first_wild])
}

/// Whether a wildcard segment names part of a name (`Doc*`, `*.pdf`): at least two
/// characters outside wildcards, classes and alternatives. `*`, `**`, `?*`, `[a-z]*` and
/// `{a,*}` match (almost) any name.
fn names_part_of_a_name(segment: &str) -> bool {
    if segment.contains("**") {
        return false;
    }
    let mut literal = 0;
    let mut depth = 0i32;
    let mut escaped = false;
    for c in segment.chars() {
        match c {
            _ if escaped => {
                escaped = false;
                if depth == 0 {
                    literal += 1;
                }
            }
            '\\' => escaped = true,
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            '*' | '?' => {}
            _ if depth == 0 => literal += 1,
            _ => {}
        }
    }
    literal >= 2
}

/// Whether `host` is a public suffix the list knows (`com`, `co.uk`, `github.io`): a
/// name under which anyone may register a site. Unknown suffixes (`lan`, `home.arpa`'s
/// hosts) are the home network's, not refused here.
pub fn is_public_suffix(host: &str) -> bool {
    psl::suffix(host.as_bytes())
        .is_some_and(|suffix| suffix.is_known() && suffix.as_bytes() == host.as_bytes())
}

/// Whether `path` has a segment beginning with `.` that `glob` does not name literally:
/// a wildcard never matches a hidden file or folder (`~/Documents/*` does not cover
/// `~/Documents/.env`, `~/**` nothing under `~/.ssh`), as in a shell.
pub fn hidden_by_wildcard(glob: &str, path: &str) -> bool {
    path.split('/')
        .filter(|segment| segment.starts_with('.') && !matches!(*segment, "." | ".."))
        .any(|segment| !glob.split('/').any(|part| part == segment))
}

/// `//` and `/./` collapse; the glob text is otherwise kept (a trailing `/` included).
fn collapse_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for segment in path.split('/') {
        if segment.is_empty() || segment == "." {
            continue;
        }
        out.push('/');
        out.push_str(segment);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// The directory of a glob's literal prefix: `/home/u/Doc*/x` → `/home/u/`.
fn glob_key(glob: &str) -> String {
    let literal_end = glob.find(['*', '?', '[', '{', '\\']).unwrap_or(glob.len());
    let literal = &glob[..literal_end];
    match literal.rfind('/') {
        Some(i) => literal[..=i].to_owned(),
        None => "/".to_owned(),
    }
}

/// A grant's glob compiled the way policy matches it: `*` stays in its folder, `**` does
/// not, `\\` escapes.
pub fn compile_glob(glob: &str) -> Result<GlobMatcher, String> {
    GlobBuilder::new(glob)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| e.kind().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOME: &str = "/home/roberto";

    fn home() -> &'static Path {
        Path::new(HOME)
    }

    #[test]
    fn bad_paths_and_globs_are_refused_with_the_reason() {
        let err = |kind, raw: &str| Pattern::parse(kind, raw, home()).unwrap_err().to_string();
        assert_eq!(err(TargetKind::PathGlob, ""), "target is empty");
        assert!(err(TargetKind::PathGlob, "Documents/*").contains("must be absolute"));
        assert!(err(TargetKind::PathGlob, "~alice/x").contains("not ~user"));
        assert!(err(TargetKind::PathGlob, "~/a/[b").contains("malformed"));
        assert!(err(TargetKind::PathGlob, "~/a/{b").contains("malformed"));
        assert!(err(TargetKind::PathGlob, "~/a/../b/*").contains("`..`"));
        assert!(err(TargetKind::PathGlob, "/a\n/b").contains("control character"));
        assert!(err(TargetKind::PathGlob, &format!("/{}", "a".repeat(5000))).contains("longer"));
        let target_err = Target::parse(TargetKind::PathGlob, "relative/file", home()).unwrap_err();
        assert!(matches!(target_err, TargetError::NotAbsolute(_)));
    }

    #[test]
    fn a_long_target_is_parsed_whole_never_cut_to_what_an_error_may_quote() {
        // 64 characters of `./` padding, then the `..` that leave the folder: cut at 64, this
        // once normalised into the granted folder (an attacker's way past a grant).
        let sneaky = format!(
            "/home/roberto/Documents/invoices-2026/{}../../.ssh/id_rsa",
            "./".repeat(13)
        );
        assert!(sneaky.len() > 64);
        assert_eq!(
            Target::parse(TargetKind::PathGlob, &sneaky, home()).unwrap(),
            Target::Path("/home/roberto/.ssh/id_rsa".to_owned())
        );
        let exact = format!("calendar-{}", "x".repeat(100));
        assert_eq!(
            Target::parse(TargetKind::Exact, &exact, home()).unwrap(),
            Target::Exact(exact.clone())
        );
        let glob = format!("/srv/{}/*", "d".repeat(100));
        assert!(Pattern::parse(TargetKind::PathGlob, &glob, home()).is_ok());
    }

    #[test]
    fn grants_that_would_cover_everything_are_refused() {
        let err = |kind, raw: &str| Pattern::parse(kind, raw, home()).unwrap_err();
        for glob in [
            "/",
            "/*",
            "/**",
            "//**",
            "/*/x",
            "~/*",
            "~/**",
            "~/?*/**/*",
            "~/*?",
            "~/[a-z]*/x",
            "~/{a,*}",
            "~/x**",
            "/?*",
            "/home/*",
            "/home/**",
            "/home/roberto/**",
        ] {
            let e = err(TargetKind::PathGlob, glob);
            assert!(matches!(e, TargetError::TooBroad(_)), "{glob}: {e}");
            assert!(
                e.to_string().contains("name a folder inside"),
                "{glob}: {e}"
            );
        }
        for host in ["*.com", "*.co.uk", "com", "*.github.io", "co.uk"] {
            let e = err(TargetKind::Host, host);
            assert!(matches!(e, TargetError::PublicSuffix(_)), "{host}: {e}");
        }
        // What a person grants knowingly still parses.
        for glob in [
            "~/Documents/*",
            "~/Doc*/x",
            "~/*.pdf",
            "/tmp/*",
            "/srv/music/**",
            "~/notes.txt",
        ] {
            assert!(
                Pattern::parse(TargetKind::PathGlob, glob, home()).is_ok(),
                "{glob}"
            );
        }
        for host in [
            "*.example.com",
            "example.co.uk",
            "*.example.co.uk",
            "nas.lan",
            "*.lan",
            "user.github.io",
        ] {
            assert!(
                Pattern::parse(TargetKind::Host, host, home()).is_ok(),
                "{host}"
            );
        }
    }

    #[test]
    fn a_wildcard_never_matches_a_hidden_name() {
        assert!(hidden_by_wildcard(
            "/home/roberto/*",
            "/home/roberto/.bashrc"
        ));
        assert!(hidden_by_wildcard(
            "/home/roberto/Documents/**",
            "/home/roberto/Documents/site/.git/config"
        ));
        assert!(!hidden_by_wildcard(
            "/home/roberto/Documents/*",
            "/home/roberto/Documents/a.txt"
        ));
        // Named literally, a hidden name is the person's choice.
        assert!(!hidden_by_wildcard(
            "/home/roberto/.config/app/*",
            "/home/roberto/.config/app/x.toml"
        ));
    }

    #[test]
    fn bad_hosts_are_refused() {
        for raw in ["http://", "*.*.com", "exa mple.com", "*."] {
            assert!(
                Pattern::parse(TargetKind::Host, raw, home()).is_err(),
                "{raw}"
            );
        }
    }

    #[test]
    fn keys_are_ancestor_directories_and_parent_wildcards() {
        let path = Target::parse(TargetKind::PathGlob, "/a/b/c.txt", home()).unwrap();
        assert_eq!(path.candidate_keys(), ["/", "/a/", "/a/b/"]);
        let host = Target::parse(TargetKind::Host, "https://x.y.example.com", home()).unwrap();
        assert_eq!(
            host.candidate_keys(),
            [
                "x.y.example.com",
                "*.y.example.com",
                "*.example.com",
                "*.com"
            ]
        );
        assert_eq!(
            Pattern::parse(TargetKind::PathGlob, "~/Doc*/x", home())
                .unwrap()
                .key,
            "/home/roberto/"
        );
        assert_eq!(
            Pattern::parse(TargetKind::PathGlob, "/srv/*", home())
                .unwrap()
                .key,
            "/srv/"
        );
    }
}
