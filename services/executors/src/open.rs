//! Opening exactly what a path check approved.
//!
//! A check on a path and an open of the same path are two lookups: between them a folder
//! on the way can be swapped for a symbolic link (a racing process in the workspace needs
//! only `rename`), and the open then lands wherever the link points. So the built-ins check
//! the *resolved* path ([`crate::builtin::scoped_path`], which has no links in it) and open
//! it refusing every link on the way: `openat2` with `RESOLVE_NO_SYMLINKS` and
//! `RESOLVE_NO_MAGICLINKS` (Linux 5.6), or, where the kernel lacks it, one component at a
//! time with `O_NOFOLLOW`. A swapped folder makes the open fail; it never reaches past it.
//! The descriptor is then checked for what it is (its path, its type, its links) before a
//! byte is read or written.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Opens the absolute, link-free path `real` with `flags`, failing if any component of it
/// (the last one too) is a symbolic link now.
pub fn open_beneath_no_links(real: &Path, flags: OFlags, mode: Mode) -> std::io::Result<OwnedFd> {
    let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    match rfs::openat2(
        rfs::CWD,
        real,
        flags,
        mode,
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Err(Errno::NOSYS) => walk(real, flags, mode),
        other => other.map_err(link_error),
    }
}

/// The same, a component at a time (kernels without `openat2`).
fn walk(real: &Path, flags: OFlags, mode: Mode) -> std::io::Result<OwnedFd> {
    let mut parts = real.components().peekable();
    if parts.next() != Some(Component::RootDir) {
        return Err(std::io::Error::other("not an absolute path"));
    }
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = rfs::openat(rfs::CWD, "/", dir_flags, Mode::empty())?;
    while let Some(part) = parts.next() {
        let Component::Normal(name) = part else {
            return Err(std::io::Error::other("the path is not normalised"));
        };
        if parts.peek().is_none() {
            return rfs::openat(&dir, name, flags, mode).map_err(link_error);
        }
        dir = match rfs::openat(&dir, name, dir_flags, Mode::empty()) {
            Ok(next) => next,
            // O_DIRECTORY|O_NOFOLLOW on a link says "not a directory": say what it is.
            Err(Errno::NOTDIR)
                if rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink) =>
            {
                return Err(link_error(Errno::LOOP));
            }
            Err(e) => return Err(link_error(e)),
        };
    }
    // `/` itself.
    Ok(rfs::openat(rfs::CWD, "/", flags, mode)?)
}

/// `ELOOP` from a refused link, said as what it is.
fn link_error(errno: Errno) -> std::io::Error {
    if errno == Errno::LOOP {
        std::io::Error::other(
            "a symbolic link is on the way (it appeared after the path was checked, or is the file itself)",
        )
    } else {
        errno.into()
    }
}

/// What an opened descriptor is.
#[derive(Debug, Clone, Copy)]
pub struct Opened {
    pub kind: FileType,
    pub links: u64,
    pub size: u64,
    pub mode: u32,
    /// The owner's user id.
    pub uid: u32,
}

pub fn describe(fd: &OwnedFd) -> std::io::Result<Opened> {
    let stat = rfs::fstat(fd)?;
    Ok(Opened {
        kind: FileType::from_raw_mode(stat.st_mode),
        links: stat.st_nlink,
        size: u64::try_from(stat.st_size).unwrap_or(0),
        mode: stat.st_mode & 0o7777,
        uid: stat.st_uid,
    })
}

/// The shared temp folders, where every program on the machine leaves files.
const SHARED_TEMP: &[&str] = &["/tmp", "/var/tmp", "/dev/shm"];

/// Why a file was not opened to be read; `shown` is the path as the call wrote it.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("no such file: {0}")]
    NotFound(String),
    #[error("cannot open {shown}: {source}")]
    Open {
        shown: String,
        source: std::io::Error,
    },
    #[error("cannot read {shown}: {source}")]
    Read {
        shown: String,
        source: std::io::Error,
    },
    #[error("{0} is a directory, not a file")]
    Directory(String),
    #[error("{0} is not a regular file")]
    NotRegular(String),
    /// See [`hard_link_refusal`].
    #[error(
        "{shown} has {links} names (hard links); outside the workspace a file with more than one name is refused, since another of its names may be a protected file"
    )]
    HardLinks { shown: String, links: u64 },
    #[error("{0} belongs to another user; in the shared temp folder only files you made are read")]
    OtherUsers(String),
}

/// Why a file with more than one name is refused outside the workspace: one of its other
/// names may be a file the checks protect (a hard link to `~/.ssh/id_rsa` reads as the
/// key, and no path check sees the other name).
pub fn hard_link_refusal(shown: &str, links: u64) -> String {
    OpenError::HardLinks {
        shown: shown.to_owned(),
        links,
    }
    .to_string()
}

/// Opens `real` to read a regular file, refusing links on the way, a file with other names
/// outside `workspace`, and anything that is not a regular file.
pub fn open_file_to_read(
    real: &Path,
    shown: &str,
    workspace: &Path,
) -> Result<(File, Opened), OpenError> {
    // Non-blocking: a FIFO put where a file was expected opens at once (and is refused
    // below) instead of waiting for a writer forever; a regular file ignores the flag.
    let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK;
    let shown_owned = || shown.to_owned();
    let fd = open_beneath_no_links(real, flags, Mode::empty()).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => OpenError::NotFound(shown_owned()),
        _ => OpenError::Open {
            shown: shown_owned(),
            source: e,
        },
    })?;
    let opened = describe(&fd).map_err(|source| OpenError::Read {
        shown: shown_owned(),
        source,
    })?;
    match opened.kind {
        FileType::RegularFile => {}
        FileType::Directory => return Err(OpenError::Directory(shown_owned())),
        _ => return Err(OpenError::NotRegular(shown_owned())),
    }
    if opened.links > 1 && !in_workspace(real, workspace) {
        return Err(OpenError::HardLinks {
            shown: shown_owned(),
            links: opened.links,
        });
    }
    // The temp folder holds other programs' and other users' files (ticket caches,
    // sockets, scratch copies): only what this user made there is read.
    if SHARED_TEMP.iter().any(|t| real.starts_with(t))
        && opened.uid != rustix::process::geteuid().as_raw()
    {
        return Err(OpenError::OtherUsers(shown_owned()));
    }
    Ok((File::from(fd), opened))
}

/// Whether `path` lies in the shell's workspace (where the sandbox keeps links to files
/// outside from being made).
pub fn in_workspace(path: &Path, workspace: &Path) -> bool {
    workspace.as_os_str().len() > 1 && path.starts_with(workspace)
}

/// Opens the folder `real` (link-free) for `*at` calls on its entries.
pub fn open_dir(real: &Path) -> std::io::Result<OwnedFd> {
    open_beneath_no_links(real, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
}

/// The entry `name` of `dir` as it is now, without following a link.
pub fn entry_kind(dir: &OwnedFd, name: &std::ffi::OsStr) -> std::io::Result<Option<FileType>> {
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(FileType::from_raw_mode(stat.st_mode))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_link_anywhere_on_the_way_is_refused_and_a_real_path_opens() {
        let root = tempfile::tempdir().unwrap();
        let real = root.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("dir")).unwrap();
        std::fs::write(real.join("dir/file"), "inside").unwrap();
        std::os::unix::fs::symlink(real.join("dir"), real.join("link")).unwrap();
        std::os::unix::fs::symlink(real.join("dir/file"), real.join("file-link")).unwrap();

        let fd =
            open_beneath_no_links(&real.join("dir/file"), OFlags::RDONLY, Mode::empty()).unwrap();
        let mut text = String::new();
        File::from(fd).read_to_string(&mut text).unwrap();
        assert_eq!(text, "inside");
        for through in ["link/file", "file-link"] {
            let e = open_beneath_no_links(&real.join(through), OFlags::RDONLY, Mode::empty())
                .unwrap_err();
            assert!(e.to_string().contains("symbolic link"), "{through}: {e}");
        }
        // The fallback walk says the same.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        assert!(walk(&real.join("dir/file"), flags, Mode::empty()).is_ok());
        for through in ["link/file", "file-link"] {
            let e = walk(&real.join(through), flags, Mode::empty()).unwrap_err();
            assert!(e.to_string().contains("symbolic link"), "{through}: {e}");
        }
    }

    #[test]
    fn a_file_with_two_names_is_refused_outside_the_workspace_only() {
        let root = tempfile::tempdir().unwrap();
        let real = root.path().canonicalize().unwrap();
        let workspace = real.join("workspace");
        std::fs::create_dir(&workspace).unwrap();
        std::fs::write(real.join("secret"), "key").unwrap();
        std::fs::hard_link(real.join("secret"), real.join("report.txt")).unwrap();
        let e = open_file_to_read(&real.join("report.txt"), "report.txt", &workspace)
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 names"), "{e}");
        std::fs::write(workspace.join("a"), "mine").unwrap();
        std::fs::hard_link(workspace.join("a"), workspace.join("b")).unwrap();
        assert!(open_file_to_read(&workspace.join("b"), "b", &workspace).is_ok());
        let e = open_file_to_read(&workspace, "workspace", &workspace)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a directory"), "{e}");
    }
}
