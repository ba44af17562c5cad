//! Matching a grant's pattern against a call's target, per target kind (the patterns and
//! targets themselves are `metnos_core::target`'s): compiled globs are cached.

use std::sync::Arc;

use globset::GlobMatcher;
use metnos_core::capability::TargetKind;
use metnos_core::target::{Target, compile_glob, hidden_by_wildcard};

/// Compiled globs, reused across checks: compiling one costs tens of microseconds.
#[derive(Debug)]
pub struct Matcher {
    globs: quick_cache::sync::Cache<String, Arc<GlobMatcher>>,
}

impl Default for Matcher {
    fn default() -> Self {
        Matcher {
            globs: quick_cache::sync::Cache::new(10_000),
        }
    }
}

impl Matcher {
    /// Whether a stored pattern (`kind`, normalised `text`) matches `target`.
    pub fn matches(&self, kind: TargetKind, text: &str, target: &Target) -> bool {
        match (kind, target) {
            (TargetKind::PathGlob, Target::Path(path)) => {
                let glob = self
                    .globs
                    .get_or_insert_with(text, || compile_glob(text).map(Arc::new).map_err(|_| ()));
                glob.is_ok_and(|g| g.is_match(path)) && !hidden_by_wildcard(text, path)
            }
            (TargetKind::Host, Target::Host(host)) => match text.strip_prefix("*.") {
                Some(domain) => host
                    .strip_suffix(domain)
                    .is_some_and(|sub| sub.ends_with('.') && sub.len() > 1),
                None => host == text,
            },
            (TargetKind::Exact, Target::Exact(value)) => value == text,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use metnos_core::target::Pattern;

    use super::*;

    const HOME: &str = "/home/roberto";

    fn home() -> &'static Path {
        Path::new(HOME)
    }

    fn matches(kind: TargetKind, pattern: &str, target: &str) -> bool {
        let pattern = Pattern::parse(kind, pattern, home()).unwrap();
        let target = Target::parse(kind, target, home()).unwrap();
        let m = Matcher::default();
        let found = m.matches(kind, &pattern.text, &target);
        // Whatever matches must be found by its key.
        if found {
            assert!(
                target.candidate_keys().contains(&pattern.key),
                "key {} not among {:?}",
                pattern.key,
                target.candidate_keys()
            );
        }
        found
    }

    #[test]
    fn the_seed_example_grant_covers_a_file_in_its_folder() {
        assert!(matches(
            TargetKind::PathGlob,
            "~/Documents/invoices-2026/*",
            "~/Documents/invoices-2026/04-Acme.pdf"
        ));
        assert!(matches(
            TargetKind::PathGlob,
            "~/Documents/invoices-2026/*",
            "/home/roberto/Documents/invoices-2026/04-Acme.pdf"
        ));
    }

    #[test]
    fn dot_dot_cannot_escape_a_grant() {
        assert!(!matches(
            TargetKind::PathGlob,
            "~/Documents/invoices-2026/*",
            "~/Documents/invoices-2026/../../.ssh/id_rsa"
        ));
        assert!(!matches(
            TargetKind::PathGlob,
            "~/Documents/**",
            "~/Documents/../.ssh/id_rsa"
        ));
        // …while a harmless `..` that stays inside still matches.
        assert!(matches(
            TargetKind::PathGlob,
            "~/Documents/invoices-2026/*",
            "~/Documents/x/../invoices-2026/./05.pdf"
        ));
        assert!(matches(
            TargetKind::PathGlob,
            "~/Documents/invoices-2026/*",
            "//home//roberto/Documents///invoices-2026/06.pdf"
        ));
    }

    #[test]
    fn a_single_star_stays_in_its_folder_and_a_double_star_does_not() {
        assert!(!matches(
            TargetKind::PathGlob,
            "~/Documents/*",
            "~/Documents/a/b.pdf"
        ));
        assert!(matches(
            TargetKind::PathGlob,
            "~/Documents/**",
            "~/Documents/a/b.pdf"
        ));
        assert!(matches(TargetKind::PathGlob, "~/notes.txt", "~/notes.txt"));
        assert!(!matches(
            TargetKind::PathGlob,
            "~/notes.txt",
            "~/notes.txt.bak"
        ));
        assert!(matches(TargetKind::PathGlob, "~/Doc*/x.md", "~/Docs/x.md"));
        assert!(matches(
            TargetKind::PathGlob,
            "/srv/{a,b}/*.log",
            "/srv/b/today.log"
        ));
    }

    #[test]
    fn hosts_match_exactly_or_by_subdomain_wildcard_on_the_host_only() {
        assert!(matches(
            TargetKind::Host,
            "example.com",
            "https://example.com/path?q=1"
        ));
        assert!(matches(TargetKind::Host, "example.com", "EXAMPLE.com:8443"));
        assert!(!matches(
            TargetKind::Host,
            "example.com",
            "https://api.example.com/"
        ));
        assert!(matches(
            TargetKind::Host,
            "*.example.com",
            "https://api.example.com/"
        ));
        assert!(matches(
            TargetKind::Host,
            "*.example.com",
            "a.b.example.com"
        ));
        assert!(!matches(TargetKind::Host, "*.example.com", "example.com"));
        assert!(!matches(
            TargetKind::Host,
            "*.example.com",
            "badexample.com"
        ));
        // The host is what counts, not a look-alike in the path or user info.
        assert!(!matches(
            TargetKind::Host,
            "example.com",
            "https://evil.net/example.com"
        ));
        assert!(!matches(
            TargetKind::Host,
            "example.com",
            "https://example.com@evil.net/"
        ));
        assert!(matches(
            TargetKind::Host,
            "https://Example.com/",
            "example.com."
        ));
    }

    #[test]
    fn exact_targets_compare_for_equality() {
        assert!(matches(
            TargetKind::Exact,
            "inbox@example.com",
            "inbox@example.com"
        ));
        assert!(!matches(
            TargetKind::Exact,
            "inbox@example.com",
            "Inbox@example.com"
        ));
    }
}
