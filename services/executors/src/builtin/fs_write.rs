//! `fs_write`: create, overwrite or append to a text file; creation and overwriting are
//! atomic (a temporary file in the same folder, then a link or a rename), and every step
//! works in the checked folder opened with no symbolic link on the way.

use std::io::Write;
use std::os::fd::OwnedFd;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use serde_json::{Value, json};

use super::{BuiltinError, meta, required, scoped_path, string_arg};
use crate::observation::{ExecContext, Observation};

pub fn run(args: &Value, context: &ExecContext) -> Observation {
    match write(args, context) {
        Ok(observation) => observation,
        Err(error) => Observation::failure(error.to_string()),
    }
}

/// A new file in `dir` holding `content` (0600 until renamed into place): its name.
fn temp_in(dir: &OwnedFd, content: &[u8]) -> std::io::Result<String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    for attempt in 0..16 {
        let name = format!(".metnos-write-{}-{nanos}-{attempt}", std::process::id());
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rfs::openat(dir, name.as_str(), flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => {
                let mut file = std::fs::File::from(fd);
                let written = file.write_all(content).and_then(|()| file.sync_all());
                if let Err(e) = written {
                    let _ = rfs::unlinkat(dir, name.as_str(), AtFlags::empty());
                    return Err(e);
                }
                return Ok(name);
            }
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(std::io::Error::other("no free temporary name"))
}

fn write(args: &Value, context: &ExecContext) -> Result<Observation, BuiltinError> {
    let text = required(args, "path")?;
    let content = required(args, "content")?;
    let mode = string_arg(args, "mode")?.unwrap_or("create");
    if !matches!(mode, "create" | "overwrite" | "append") {
        return Err(format!(
            "mode `{}` is not one of create, overwrite, append",
            mode.chars().take(32).collect::<String>()
        )
        .into());
    }
    let path = scoped_path(text, context, metnos_core::forbidden::Access::Write)?;
    let lexical = crate::scope::normalize(&crate::scope::expand_home(text, &context.user_home));
    let code_later = super::runs_code_later_rule(&lexical, &path, context).is_some();
    if code_later && let Some(c) = crate::later::odd_line_end(content) {
        return Err(format!(
            "{text} runs code later, and the content holds U+{:04X}: a line's end to some programs and a letter to others (a card cannot show which lines run); use \\n line ends and no control character but a tab",
            u32::from(c)
        ).into());
    }
    let parent = path
        .parent()
        .ok_or_else(|| format!("{text} has no parent folder"))?;
    let name = path
        .file_name()
        .ok_or_else(|| format!("{text} names no file"))?;
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("cannot create the folder of {text}: {e}"))?;
    // Every step from here works in the checked folder, opened with no link on the way:
    // a folder swapped for a link since the check makes this fail, not write elsewhere.
    let dir = crate::open::open_dir(parent)
        .map_err(|e| format!("cannot open the folder of {text}: {e}"))?;
    let existing =
        crate::open::entry_kind(&dir, name).map_err(|e| format!("cannot write {text}: {e}"))?;
    match existing {
        Some(FileType::Directory) => return Err(format!("{text} is a directory").into()),
        Some(FileType::Symlink) => {
            return Err(format!(
                "{text} is a symbolic link; fs_write does not write through links"
            )
            .into());
        }
        Some(FileType::RegularFile) | None => {}
        Some(_) => return Err(format!("{text} is not a regular file").into()),
    }
    let existed = existing.is_some();
    let mut new_line = false;
    match mode {
        "create" => {
            if existed {
                return Err(
                    format!("{text} already exists (mode overwrite or append changes it)").into(),
                );
            }
            let temp = temp_in(&dir, content.as_bytes())
                .map_err(|e| format!("cannot write {text}: {e}"))?;
            // A hard link does not replace: if anything took the name meanwhile (a link
            // too), this fails.
            let linked = rfs::linkat(&dir, temp.as_str(), &dir, name, AtFlags::empty());
            let _ = rfs::unlinkat(&dir, temp.as_str(), AtFlags::empty());
            linked.map_err(|e| match e {
                Errno::EXIST => format!("{text} already exists"),
                _ => format!("cannot write {text}: {e}"),
            })?;
        }
        "overwrite" => {
            let temp = temp_in(&dir, content.as_bytes())
                .map_err(|e| format!("cannot write {text}: {e}"))?;
            // The file keeps its mode; the rename replaces the name (a link put there
            // meanwhile is replaced, never followed).
            if let Ok(old) = rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                && FileType::from_raw_mode(old.st_mode) == FileType::RegularFile
                && let Ok(fd) = rfs::openat(
                    &dir,
                    temp.as_str(),
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            {
                let _ = rfs::fchmod(&fd, Mode::from_raw_mode(old.st_mode & 0o7777));
            }
            rfs::renameat(&dir, temp.as_str(), &dir, name).map_err(|e| {
                let _ = rfs::unlinkat(&dir, temp.as_str(), AtFlags::empty());
                format!("cannot write {text}: {e}")
            })?;
        }
        _ => new_line = append(&dir, name, text, &path, content, context, code_later)?,
    }
    Ok(Observation::success(
        format!("{} bytes written to {}", content.len(), path.display()),
        meta([
            ("path", json!(path.display().to_string())),
            ("bytes_written", json!(content.len())),
            ("mode", json!(mode)),
            ("created", json!(!existed)),
            ("new_line_added", json!(new_line)),
        ]),
    ))
}

/// Appends `content` to `name` in `dir`, on a line of its own: a file whose last byte is
/// not a new line gets one first, so what a card showed as appended lines never joins the
/// file's last line (`export PATH=~/bin` and `:~/evil`). To a file that runs code later
/// (`code_later`), not after a line continued by a `\` (the first line appended would run
/// as its tail). Whether it added a new line.
fn append(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    text: &str,
    path: &std::path::Path,
    content: &str,
    context: &ExecContext,
    code_later: bool,
) -> Result<bool, BuiltinError> {
    // Non-blocking: a FIFO swapped in since the check fails to open (no reader) or is
    // refused below, never a wait for a reader. Read and write: its last byte is read.
    let flags = OFlags::RDWR
        | OFlags::APPEND
        | OFlags::CREATE
        | OFlags::NOFOLLOW
        | OFlags::NOCTTY
        | OFlags::NONBLOCK
        | OFlags::CLOEXEC;
    let fd = rfs::openat(dir, name, flags, Mode::from_raw_mode(0o644)).map_err(|e| {
        if e == Errno::LOOP {
            format!("{text} is a symbolic link; fs_write does not write through links")
        } else {
            format!("cannot append to {text}: {e}")
        }
    })?;
    let opened = crate::open::describe(&fd).map_err(|e| format!("cannot append to {text}: {e}"))?;
    if opened.kind != FileType::RegularFile {
        return Err(format!("{text} is not a regular file").into());
    }
    if opened.links > 1 && !crate::open::in_workspace(path, &super::linked_files_place(context)) {
        return Err(crate::open::hard_link_refusal(text, opened.links).into());
    }
    // The file's last bytes: whether it ends a line, and whether that line goes on (git
    // reads a CR LF as a LF).
    let mut end = [0u8; 3];
    let from = opened.size.saturating_sub(3);
    let read = rustix::io::pread(&fd, &mut end, from)
        .map_err(|e| format!("cannot append to {text}: {e}"))?;
    let end = &end[..read];
    let continued: [&[u8]; 4] = [b"\\", b"\\\n", b"\\\r\n", b"\\\r"];
    if code_later && continued.iter().any(|e| end.ends_with(e)) {
        return Err(format!(
            "{text}'s last line ends with `\\`, which continues it: the first line appended would run as its tail; end that line first"
        ).into());
    }
    let new_line = !end.is_empty() && !content.is_empty() && !end.ends_with(b"\n");
    // One write: the new line and the content land together (O_APPEND, at the end).
    let mut bytes = Vec::with_capacity(content.len() + 1);
    if new_line {
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(content.as_bytes());
    let mut file = std::fs::File::from(fd);
    file.write_all(&bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot append to {text}: {e}"))?;
    Ok(new_line)
}
