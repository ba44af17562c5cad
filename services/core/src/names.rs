//! Names every service spells alike: the planner's own tools (which reach approval cards
//! and the catalog's reserved names) and the kinds of proposal Metnos makes on its own
//! (which the telos engine, the digest and the cards tell apart).

/// An executor's name: a lower-case ASCII letter, then lower-case letters, digits and `_`,
/// at most 64 bytes.
pub fn valid_tool_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= 64
        && bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// A name the mnestome keeps (an executor's, an output field's, an argument's, a wished
/// tool's): ASCII letters, digits, `_`, `-`, `.`, `*`, 1 to 64 bytes. A model's free text
/// or a name copied from a page with other characters is not one.
pub fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'*'))
}

/// The command that writes the owner's TELOS.md (`--person <channel>:<sender>` for anyone
/// else's), which the telos engine's once-only question names.
pub const TELOS_EDIT: &str = "metnos telos edit";

/// The standing-order tools the planner offers the model (issue 22).
pub mod tools {
    pub const SCHEDULE_CREATE: &str = "schedule_create";
    pub const SCHEDULE_LIST: &str = "schedule_list";
    pub const SCHEDULE_PAUSE: &str = "schedule_pause";
    pub const SCHEDULE_RESUME: &str = "schedule_resume";
    pub const SCHEDULE_DELETE: &str = "schedule_delete";
    /// Every one of them: no executor of the catalog may take these names.
    pub const SCHEDULE: [&str; 5] = [
        SCHEDULE_CREATE,
        SCHEDULE_LIST,
        SCHEDULE_PAUSE,
        SCHEDULE_RESUME,
        SCHEDULE_DELETE,
    ];
    /// Large observations read back a page at a time.
    pub const SCRATCHPAD_READ: &str = "scratchpad_read";
    /// The person's long-term memory (issue 40).
    pub const MEMORY_SAVE: &str = "memory_save";
    pub const MEMORY_SEARCH: &str = "memory_search";
    pub const MEMORY_FORGET: &str = "memory_forget";
}

/// The kinds of what Metnos proposes on its own.
pub mod proposals {
    /// A grant offered after the same approval was given again and again.
    pub const GRANT_OFFER: &str = "grant_offer";
    /// Unused grants offered for revocation.
    pub const GRANT_REVOKE: &str = "grant_revoke";
    /// A chain of existing executors offered as a named shortcut for a recurring wish
    /// (issue 46).
    pub const SHORTCUT_OFFER: &str = "shortcut_offer";
    /// A standing order's result.
    pub const STANDING_ORDER: &str = "standing_order";
}

/// The executors Metnos ships (in `metnos-exec`, `metnos-web`, `metnos-shell`), which the
/// planner, the vaglio and approval's cards know by what they do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    FsRead,
    FsList,
    FsWrite,
    ParseLocal,
    WebFetch,
    ShellExec,
    TimeNow,
}

impl Builtin {
    /// Every one of them.
    pub const ALL: [Builtin; 7] = [
        Builtin::FsRead,
        Builtin::FsList,
        Builtin::FsWrite,
        Builtin::ParseLocal,
        Builtin::WebFetch,
        Builtin::ShellExec,
        Builtin::TimeNow,
    ];

    /// Its name in the catalog.
    pub const fn name(self) -> &'static str {
        match self {
            Builtin::FsRead => "fs_read",
            Builtin::FsList => "fs_list",
            Builtin::FsWrite => "fs_write",
            Builtin::ParseLocal => "parse_local",
            Builtin::WebFetch => "web_fetch",
            Builtin::ShellExec => "shell_exec",
            Builtin::TimeNow => "time_now",
        }
    }

    /// The built-in named `name` (exactly), if it is one.
    pub fn of(name: &str) -> Option<Builtin> {
        Builtin::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Whether it reads the local file its target names (`fs_read`, `fs_list`,
    /// `parse_local` given a path).
    pub fn reads_files(self) -> bool {
        matches!(
            self,
            Builtin::FsRead | Builtin::FsList | Builtin::ParseLocal
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_builtin_is_found_by_its_exact_name_only() {
        for builtin in Builtin::ALL {
            assert_eq!(Builtin::of(builtin.name()), Some(builtin));
            assert_eq!(Builtin::of(&builtin.name().to_uppercase()), None);
            assert_eq!(Builtin::of(&format!("{} ", builtin.name())), None);
        }
        assert_eq!(Builtin::of("fs_delete"), None);
        let readers: Vec<&str> = Builtin::ALL
            .into_iter()
            .filter(|b| b.reads_files())
            .map(Builtin::name)
            .collect();
        assert_eq!(readers, ["fs_read", "fs_list", "parse_local"]);
    }
}
