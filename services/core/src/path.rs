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

/// The `/`-separated segments of a path, as `str::split('/')` gives them (a byte loop: on
/// paths this short, a memchr call per segment, or a closure that decodes every char,
/// costs more than the work; `/` is ASCII, so every cut is at a char boundary).
fn segments(path: &str) -> impl Iterator<Item = &str> {
    let bytes = path.as_bytes();
    let mut start = Some(0);
    std::iter::from_fn(move || {
        let from = start?;
        let end = bytes[from..]
            .iter()
            .position(|&b| b == b'/')
            .map(|at| from + at);
        start = end.map(|end| end + 1);
        path.get(from..end.unwrap_or(bytes.len()))
    })
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

/// The path a path through the kernel's process view names, when it names one:
/// `/proc/<self|thread-self|pid>/root/rest` is `/rest` (a process's root is the machine's
/// here), `/proc/<self|thread-self>/cwd/rest` is `rest` from `cwd`, nested forms followed
/// to the end; normalised. `None` for every other path (`/proc/self/fd/3` names nothing
/// one can know from its text). `..` after `root` or `cwd` climbs from the folder named,
/// as the kernel does, so the rest is folded only once the prefix is gone.
pub fn through_proc(path: &str, cwd: &str) -> Option<String> {
    let mut current = path.to_owned();
    let mut followed = false;
    // Each step removes a `/proc/x/link` prefix, so the text shrinks: no endless loop.
    while let Some((process, link, rest)) = proc_link(&current) {
        let own = matches!(process, "self" | "thread-self");
        let pid = process.bytes().all(|b| b.is_ascii_digit());
        current = match link {
            "root" if own || pid => format!("/{rest}"),
            "cwd" if own && cwd.starts_with('/') => format!("{cwd}/{rest}"),
            _ => break,
        };
        followed = true;
    }
    followed.then(|| normalize(&current))
}

/// `(process, link, rest)` of an absolute `/proc/<process>/<link>[/rest]` (empty and `.`
/// segments skipped in the prefix, `rest` as written).
fn proc_link(path: &str) -> Option<(&str, &str, &str)> {
    if !path.starts_with('/') {
        return None;
    }
    let mut prefix: [&str; 3] = [""; 3];
    let mut found = 0;
    let mut start = 0;
    for segment in segments(path) {
        let end = start + segment.len();
        if !(segment.is_empty() || segment == ".") {
            prefix[found] = segment;
            found += 1;
            if found == 3 {
                return (prefix[0] == "proc").then(|| (prefix[1], prefix[2], &path[end..]));
            }
        }
        start = end + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn segments_cut_as_split_does(path in "[/a.é]{0,12}") {
            let ours: Vec<&str> = segments(&path).collect();
            let split: Vec<&str> = path.split('/').collect();
            prop_assert_eq!(ours, split);
        }
    }

    #[test]
    fn a_path_through_proc_names_the_path_behind_it() {
        let cwd = "/home/ada/.local/share/metnos/workspace";
        for (path, named) in [
            ("/proc/self/root/etc/shadow", Some("/etc/shadow")),
            (
                "/proc/thread-self/root/home/ada/.ssh/id_rsa",
                Some("/home/ada/.ssh/id_rsa"),
            ),
            ("/proc/1/root/etc/shadow", Some("/etc/shadow")),
            ("//proc/./self/root//etc/./shadow", Some("/etc/shadow")),
            (
                "/proc/self/root/proc/self/root/root/.bashrc",
                Some("/root/.bashrc"),
            ),
            ("/proc/self/root/../../etc/passwd", Some("/etc/passwd")),
            ("/proc/self/root", Some("/")),
            (
                "/proc/self/cwd/../keys/owner.key",
                Some("/home/ada/.local/share/metnos/keys/owner.key"),
            ),
            ("/proc/self/cwd", Some(cwd)),
            // Nothing one can tell from the text: left to the rules on /proc itself.
            ("/proc/42/cwd/x", None),
            ("/proc/self/fd/3", None),
            ("/proc/self/rootfs/x", None),
            ("/proc/cpuinfo", None),
            ("/etc/shadow", None),
            ("proc/self/root/etc/shadow", None),
        ] {
            assert_eq!(through_proc(path, cwd).as_deref(), named, "{path}");
        }
    }

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
