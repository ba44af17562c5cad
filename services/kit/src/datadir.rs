//! The data directory's layout and modes: what Metnos writes there is its owner's alone.
//!
//! The stores hold conversations and file contents, the turn and verdict logs what was
//! asked and done, `keys/` the executors' signing key, and the run file where the stack
//! listens. So the folder is 0700 and every file Metnos writes in it 0600, whatever the
//! umask; [`secure`] tightens, at every start, an installation an older version (or a
//! careless copy) left open to other users.
//!
//! Only what Metnos names is tightened: a data directory pointed at `$HOME` must not have
//! everything in it chmod-ed, and the executors' workspace and catalog hold the person's
//! own files with the modes the person chose (the 0700 folder already shields them).

use std::collections::BTreeSet;
use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::Config;
use crate::config::{SERVICES, StoreSpec};

/// The mode of every folder Metnos creates.
pub const DIR_MODE: u32 = 0o700;
/// The mode of every file Metnos writes in the data directory.
pub const FILE_MODE: u32 = 0o600;

/// `metnos up`'s run file: its pid and where each service listens.
pub const RUN_FILE: &str = "metnos-up.json";
/// The planner's daily turn logs.
pub const TURNS_DIR: &str = "turns";
/// The vaglio's monthly verdict logs.
pub const VERDICTS_DIR: &str = "vaglio";
/// The executors' signing keys.
pub const KEYS_DIR: &str = "keys";
/// `metnos up`'s daily log files.
pub const LOGS_DIR: &str = "logs";
/// `metnos chat`'s line history.
pub const CHAT_HISTORY: &str = "chat_history";
/// The digests of the catalog's programs as the planner's last start hashed them.
pub const PROGRAM_DIGESTS: &str = "program-digests.json";

/// Creates `dir` and its missing parents 0700; a folder that exists keeps its mode.
/// Removes the regular files `<stem>.jsonl` directly in `dir` whose stem `expired` says
/// so (a day's or a month's log past its retention); returns their stems, sorted. A
/// missing `dir` has nothing to remove; other names, folders and links are left alone.
pub fn prune_dated(dir: &Path, expired: impl Fn(&str) -> bool) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
            continue;
        };
        if entry.file_type()?.is_file() && expired(stem) {
            std::fs::remove_file(entry.path())?;
            removed.push(stem.to_owned());
        }
    }
    removed.sort();
    Ok(removed)
}

pub fn create_dir_all(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Options that create a file 0600 (an existing file keeps its mode).
pub fn file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE);
    options
}

/// Writes `bytes` to `path` atomically (a file beside it, then a rename), 0600 even where
/// an earlier run left that file with another mode.
pub fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // A new name each time, created exclusively: a file or a symbolic link planted at a
    // predictable name is never written through.
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(".partial-{}", crate::random::hex(6)));
    let partial = PathBuf::from(partial);
    let written = file_options()
        .write(true)
        .create_new(true)
        .open(&partial)
        .and_then(|mut file| {
            file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&partial, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

/// `mode` without any bit for group or others.
pub fn private_mode(mode: u32) -> u32 {
    mode & 0o7700
}

fn is_open(mode: u32) -> bool {
    mode & 0o077 != 0
}

/// What [`tighten`] found and did.
#[derive(Debug, Default)]
pub struct Tightened {
    /// The data directory's mode before, when it was open to others.
    pub dir_was: Option<u32>,
    /// Files and folders inside that were open to others and are now private.
    pub paths: Vec<PathBuf>,
    /// Paths that could not be made private (another owner, a read-only mount), and why.
    pub failures: Vec<(PathBuf, std::io::Error)>,
}

impl Tightened {
    pub fn is_empty(&self) -> bool {
        self.dir_was.is_none() && self.paths.is_empty() && self.failures.is_empty()
    }
}

/// What the data directory holds that Metnos wrote: the SQLite stores inside it with their
/// `-wal`, `-shm` and `.lock`, the run file, the chat history, the programs' digests, the certificates' folder
/// when it is inside, and the folders of turn logs, verdict logs and keys.
fn own_paths(config: &Config) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let data_dir = &config.data_dir;
    let mut files = vec![
        data_dir.join(RUN_FILE),
        data_dir.join(CHAT_HISTORY),
        data_dir.join(PROGRAM_DIGESTS),
    ];
    for service in SERVICES {
        if let StoreSpec::Sqlite { path } = config.store(service)
            && path.starts_with(data_dir)
        {
            for suffix in ["", "-wal", "-shm", ".lock"] {
                let mut name = path.as_os_str().to_owned();
                name.push(suffix);
                files.push(PathBuf::from(name));
            }
        }
    }
    let mut folders: Vec<PathBuf> = [TURNS_DIR, VERDICTS_DIR, KEYS_DIR, LOGS_DIR]
        .iter()
        .map(|name| data_dir.join(name))
        .collect();
    if config.tls.dir.starts_with(data_dir) && config.tls.dir != *data_dir {
        folders.push(config.tls.dir.clone());
    }
    (files, folders)
}

/// Takes group and other bits off `data_dir` and off `files`, `folders` and the regular
/// files directly in those folders. Missing paths are skipped, and symbolic links are
/// never followed: what a link points to is not Metnos's to change.
pub fn tighten(data_dir: &Path, files: &[PathBuf], folders: &[PathBuf]) -> Tightened {
    let mut done = Tightened::default();
    let Ok(meta) = std::fs::symlink_metadata(data_dir) else {
        return done;
    };
    if meta.is_dir() && is_open(meta.permissions().mode()) {
        done.dir_was = Some(meta.permissions().mode() & 0o7777);
        make_private(data_dir, meta.permissions().mode(), &mut done, false);
    }
    let mut candidates: Vec<PathBuf> = files.to_vec();
    for folder in folders {
        candidates.push(folder.clone());
        if let Ok(entries) = std::fs::read_dir(folder) {
            candidates.extend(entries.flatten().map(|e| e.path()));
        }
    }
    for path in candidates {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let kind = meta.file_type();
        if (kind.is_file() || kind.is_dir()) && is_open(meta.permissions().mode()) {
            make_private(&path, meta.permissions().mode(), &mut done, true);
        }
    }
    done
}

fn make_private(path: &Path, mode: u32, done: &mut Tightened, listed: bool) {
    let private = std::fs::Permissions::from_mode(private_mode(mode));
    match std::fs::set_permissions(path, private) {
        Ok(()) if listed => done.paths.push(path.to_owned()),
        Ok(()) => {}
        Err(e) => done.failures.push((path.to_owned(), e)),
    }
}

/// Makes what Metnos wrote in the data directory private, once per data directory per
/// process (`metnos up` starts five services on one), and says so in the log. A path that
/// cannot be changed is a warning, never a reason not to start.
pub fn secure(config: &Config) {
    static SECURED: OnceLock<Mutex<BTreeSet<PathBuf>>> = OnceLock::new();
    let first = SECURED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(config.data_dir.clone());
    if !first {
        return;
    }
    let (files, folders) = own_paths(config);
    let done = tighten(&config.data_dir, &files, &folders);
    if let Some(was) = done.dir_was {
        tracing::warn!(
            dir = %config.data_dir.display(),
            was = format_args!("{was:o}"),
            "the data directory was open to other users; it is now 0700"
        );
    }
    if !done.paths.is_empty() {
        let paths: Vec<String> = done.paths.iter().map(|p| p.display().to_string()).collect();
        tracing::warn!(
            count = paths.len(),
            paths = %paths.join(", "),
            "stores, logs or keys in the data directory were open to other users; they are now private"
        );
    }
    for (path, error) in &done.failures {
        tracing::warn!(
            path = %path.display(),
            error = %error,
            "cannot be made private to its owner; other users of this host may read it"
        );
    }
}

#[cfg(test)]
mod tests {

    /// Only regular `<stem>.jsonl` files the test says expired go; a folder or a link
    /// with such a name, and other names, stay; a missing folder is nothing to do.
    #[test]
    fn dated_logs_past_their_time_go_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for name in ["old.jsonl", "new.jsonl", "old.json", "notes.txt"] {
            std::fs::write(d.join(name), "x").unwrap();
        }
        std::fs::create_dir(d.join("old2.jsonl")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("kept"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path().join("kept"), d.join("old3.jsonl")).unwrap();
        let removed = prune_dated(d, |stem| stem.starts_with("old")).unwrap();
        assert_eq!(removed, ["old"]);
        let mut left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "new.jsonl",
                "notes.txt",
                "old.json",
                "old2.jsonl",
                "old3.jsonl"
            ]
        );
        assert!(outside.path().join("kept").exists());
        assert!(prune_dated(&d.join("none"), |_| true).unwrap().is_empty());
    }
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn private_mode_keeps_the_owner_bits_only() {
        assert_eq!(private_mode(0o755), 0o700);
        assert_eq!(private_mode(0o644), 0o600);
        assert_eq!(private_mode(0o4777), 0o4700);
        assert_eq!(private_mode(0o600), 0o600);
        assert!(is_open(0o604) && is_open(0o640) && !is_open(0o700));
    }

    #[test]
    fn new_folders_and_files_are_private_and_an_existing_folder_keeps_its_mode() {
        // The umask most machines have, so a stricter one here cannot make this pass.
        rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
        let root = tempfile::tempdir().unwrap();
        chmod(root.path(), 0o755);
        let deep = root.path().join("a/b");
        create_dir_all(&deep).unwrap();
        assert_eq!(mode(&root.path().join("a")), 0o700);
        assert_eq!(mode(&deep), 0o700);
        assert_eq!(
            mode(root.path()),
            0o755,
            "an existing folder is not changed"
        );

        let file = deep.join("f");
        std::fs::write(&file, "old").unwrap();
        chmod(&file, 0o644);
        write_file(&file, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
        assert_eq!(mode(&file), 0o600, "rewriting makes an open file private");

        let created = deep.join("g");
        file_options()
            .write(true)
            .create(true)
            .open(&created)
            .unwrap();
        assert_eq!(mode(&created), 0o600);
    }

    #[test]
    fn tightening_changes_what_metnos_wrote_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        let turns = data.join("turns");
        let workspace = data.join("workspace");
        for dir in [&turns, &workspace] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let store = data.join("planner.db");
        let log = turns.join("2026-11-24.jsonl");
        let mine = workspace.join("notes.txt");
        let other = data.join("README.person");
        let target = root.path().join("outside.txt");
        for file in [&store, &log, &mine, &other, &target] {
            std::fs::write(file, "x").unwrap();
            chmod(file, 0o644);
        }
        std::os::unix::fs::symlink(&target, turns.join("link.jsonl")).unwrap();
        for dir in [&data, &turns, &workspace] {
            chmod(dir, 0o755);
        }

        let done = tighten(
            &data,
            std::slice::from_ref(&store),
            std::slice::from_ref(&turns),
        );
        assert_eq!(done.dir_was, Some(0o755));
        assert!(done.failures.is_empty(), "{:?}", done.failures);
        assert_eq!(mode(&data), 0o700);
        for path in [&store, &turns, &log] {
            assert!(done.paths.contains(path), "{} not reported", path.display());
        }
        assert_eq!(mode(&store), 0o600);
        assert_eq!(mode(&turns), 0o700);
        assert_eq!(mode(&log), 0o600);
        assert_eq!(mode(&workspace), 0o755, "the workspace is the person's");
        assert_eq!(mode(&mine), 0o644);
        assert_eq!(
            mode(&other),
            0o644,
            "a file Metnos does not name is left alone"
        );
        assert_eq!(mode(&target), 0o644, "a link's target is never changed");

        let again = tighten(&data, &[store], &[turns]);
        assert!(
            again.is_empty(),
            "a second pass has nothing to do: {again:?}"
        );
    }

    #[test]
    fn a_missing_data_directory_is_not_created() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("not-yet");
        assert!(tighten(&data, &[data.join(RUN_FILE)], &[data.join(TURNS_DIR)]).is_empty());
        assert!(!data.exists());
    }

    #[test]
    fn a_path_that_refuses_chmod_is_reported_not_a_panic() {
        // /proc/<pid> folders refuse chmod, even to root.
        let proc_dir = PathBuf::from(format!("/proc/{}", std::process::id()));
        if !proc_dir.exists() {
            return;
        }
        let done = tighten(&proc_dir, &[], &[]);
        assert_eq!(done.failures.len(), 1, "{done:?}");
        assert_eq!(done.failures[0].0, proc_dir);
    }
}
