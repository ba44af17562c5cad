//! Paths as tool arguments write them: `~` is the home of the person Metnos acts for
//! (`runtime.user_home`, DESIGN.md §6), never the HOME of a service process; `.`, `..` and
//! repeated slashes fold lexically. The vaglio's guard, policy's target matching and the
//! executors all read a path through these two functions, so they agree on what it names.

/// What a leading `~` of a path means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tilde<'a> {
    /// `~` or `~/…`: the path under `home`, expanded.
    Home(String),
    /// `~user` or `~user/…`: another user's home, `rest` starting with `/` or empty.
    OtherUser { user: &'a str, rest: &'a str },
    /// No leading `~`.
    None,
}

/// Reads a leading `~` of `text`; `home` is written without a trailing slash.
pub fn expand_tilde<'a>(text: &'a str, home: &str) -> Tilde<'a> {
    let Some(rest) = text.strip_prefix('~') else {
        return Tilde::None;
    };
    if rest.is_empty() && home.is_empty() {
        // The home is `/` itself.
        return Tilde::Home("/".to_owned());
    }
    if rest.is_empty() || rest.starts_with('/') {
        return Tilde::Home(format!("{home}{rest}"));
    }
    let (user, rest) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    Tilde::OtherUser { user, rest }
}

/// `home` as [`expand_tilde`] wants it: text, no trailing slash.
pub fn home_text(home: &std::path::Path) -> String {
    home.to_string_lossy().trim_end_matches('/').to_owned()
}

/// The `/`-separated segments of a path (a byte loop: on paths this short, the
/// memchr-based splitter and string comparisons cost more than the work).
#[expect(
    clippy::manual_pattern_char_comparison,
    reason = "a closure keeps the splitter a plain loop; a char pattern calls memchr per segment"
)]
fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.split(|c: char| c == '/')
}

/// Lexical normalisation to an absolute path: repeated slashes and `.` go, `..` removes
/// the previous segment (never above `/`), no trailing slash (except `/` itself).
pub fn normalize(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 1);
    for segment in segments(path) {
        match segment.as_bytes() {
            [] | [b'.'] => {}
            [b'.', b'.'] => {
                let cut = out.bytes().rposition(|b| b == b'/').unwrap_or(0);
                out.truncate(cut);
            }
            _ => {
                out.push('/');
                out.push_str(segment);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Whether [`normalize`] would change the absolute path `path`: a `//`, a `.` or `..`
/// segment, or a trailing slash.
pub fn has_foldable_segment(path: &str) -> bool {
    path.len() > 1
        && segments(path)
            .skip(1)
            .any(|segment| matches!(segment.as_bytes(), [] | [b'.'] | [b'.', b'.']))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn normalisation_never_climbs_above_root() {
        assert_eq!(normalize("/../../etc/./passwd"), "/etc/passwd");
        assert_eq!(normalize("/a/b/../../.."), "/");
        assert_eq!(normalize("//a//b/"), "/a/b");
        assert_eq!(normalize("/"), "/");
    }

    #[test]
    fn the_tilde_is_the_persons_home_and_other_users_are_named() {
        let home = "/home/roberto";
        assert_eq!(expand_tilde("~", home), Tilde::Home(home.to_owned()));
        assert_eq!(
            expand_tilde("~/notes.txt", home),
            Tilde::Home("/home/roberto/notes.txt".to_owned())
        );
        assert_eq!(
            expand_tilde("~alice/.ssh", home),
            Tilde::OtherUser {
                user: "alice",
                rest: "/.ssh"
            }
        );
        assert_eq!(
            expand_tilde("~root", home),
            Tilde::OtherUser {
                user: "root",
                rest: ""
            }
        );
        assert_eq!(expand_tilde("/etc/~x", home), Tilde::None);
        assert_eq!(home_text(std::path::Path::new("/home/roberto/")), home);
        let root = home_text(std::path::Path::new("/"));
        assert_eq!(expand_tilde("~", &root), Tilde::Home("/".to_owned()));
        assert_eq!(expand_tilde("~/x", &root), Tilde::Home("/x".to_owned()));
    }

    proptest! {
        /// Normalising twice changes nothing, and what needs no folding is kept as is.
        #[test]
        fn normalisation_is_idempotent(path in "(/(\\.|\\.\\.|[a-z]{1,3}|)){0,8}/?") {
            let once = normalize(&path);
            prop_assert_eq!(normalize(&once), once.clone());
            prop_assert!(!has_foldable_segment(&once));
            if path.starts_with('/') && !has_foldable_segment(&path) {
                prop_assert_eq!(once, path);
            }
        }
    }
}
