//! Reading a secret from the file the configuration names: the person's own plain file
//! that nobody else may read, opened without following a link and checked on the opened
//! file itself (a swap between the check and the read changes nothing).

use std::io::Read;
use std::path::Path;

/// The most bytes of a secret file read.
const MAX_SECRET_BYTES: u64 = 64 * 1024;

/// The first line of `file` (`what` names it in errors: "the password file"), without its
/// line ending. Refused: a link, not a plain file, someone else's, readable or writable by
/// others, or an empty first line. The secret never appears in an error.
pub fn first_line(file: &Path, what: &str) -> Result<String, String> {
    use rustix::fs::{Mode, OFlags};
    let shown = file.display();
    let fd = rustix::fs::open(
        file,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP => format!("{what} {shown} is a link: name the file itself"),
        rustix::io::Errno::NOENT => format!("{what} {shown} does not exist"),
        e => format!("{what} {shown}: {e}"),
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| format!("{what} {shown}: {e}"))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(format!("{what} {shown} is not a plain file"));
    }
    if stat.st_uid != rustix::process::geteuid().as_raw() {
        return Err(format!("{what} {shown} is not yours"));
    }
    if stat.st_mode & 0o077 != 0 {
        return Err(format!(
            "{what} {shown} may be read by others (mode {:o}): chmod 600 it",
            stat.st_mode & 0o777
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_SECRET_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{what} {shown}: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{what} {shown} is not UTF-8 text"))?;
    let line = text.lines().next().unwrap_or_default();
    if line.is_empty() {
        return Err(format!("{what} {shown} has nothing on its first line"));
    }
    Ok(line.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_a_private_plain_file_of_ones_own_is_read_and_its_secret_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret pass\nignored\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = first_line(&file, "the password file").unwrap_err();
        assert!(error.contains("chmod 600"), "{error}");
        assert!(!error.contains("s3cret"), "{error}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            first_line(&file, "the password file").unwrap(),
            "s3cret pass"
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let error = first_line(&link, "the password file").unwrap_err();
        assert!(error.contains("is a link"), "{error}");
        let error = first_line(dir.path(), "the password file").unwrap_err();
        assert!(error.contains("not a plain file"), "{error}");
        std::fs::write(&file, "\nlater\n").unwrap();
        let error = first_line(&file, "the password file").unwrap_err();
        assert!(error.contains("nothing on its first line"), "{error}");
    }
}
