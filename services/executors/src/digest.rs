//! Program digests: sha256 of a file, and the check before every spawn.
//!
//! Hashing a 10-20 MB binary costs several milliseconds, more than a whole spawn. The
//! check before each spawn therefore opens the program, reads its identity from the open
//! file (device, inode, size, modification and change times) and hashes again only when
//! that identity differs from the one last hashed. Any write, rename over, `touch` or
//! `chmod` changes the change time (ctime), which the kernel sets and user space cannot;
//! an entry hashed less than [`RACY_SECONDS`] after the file's ctime is not trusted (a
//! write in the same clock tick would leave the ctime as it was). The open file is what
//! gets executed (`/proc/self/fd/N`), so a program renamed into place after the check is
//! not the one run.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How recent a file change may be before a cached digest of it is not trusted.
pub const RACY_SECONDS: i64 = 2;
/// The version of the digests' record ([`DigestCache::restore`]).
const RECORD_VERSION: u32 = 1;
/// The largest record read: a catalog's programs are a few dozen lines.
const RECORD_MAX_BYTES: u64 = 1 << 20;

/// sha256 of everything `reader` yields, lower-case hex.
pub fn sha256_reader(mut reader: impl Read) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// sha256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// sha256 of a file, lower-case hex.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    sha256_reader(File::open(path)?)
}

/// Why a program may not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    #[error("cannot open the program {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("the program {0} is not a regular file")]
    NotAFile(PathBuf),
    #[error("the program {path} does not match its signed digest (changed since signing)")]
    Mismatch { path: PathBuf },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

#[cfg(unix)]
fn identity(meta: &std::fs::Metadata) -> Identity {
    use std::os::unix::fs::MetadataExt;
    Identity {
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.size(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ctime: (meta.ctime(), meta.ctime_nsec()),
    }
}

#[cfg(not(unix))]
fn identity(meta: &std::fs::Metadata) -> Identity {
    let time = |t: std::io::Result<std::time::SystemTime>| {
        t.ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or((0, 0), |d| {
                (d.as_secs() as i64, i64::from(d.subsec_nanos()))
            })
    };
    Identity {
        dev: 0,
        ino: 0,
        size: meta.len(),
        mtime: time(meta.modified()),
        ctime: time(meta.modified()),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Verified {
    identity: Identity,
    /// Unix seconds when it was hashed.
    at: i64,
}

impl Verified {
    /// Whether a file that has `identity` now is the one hashed: same identity, and
    /// hashed at least [`RACY_SECONDS`] after its last change.
    fn still(&self, identity: &Identity) -> bool {
        self.identity == *identity && identity.ctime.0 + RACY_SECONDS <= self.at
    }
}

/// One program's digest in the record a start leaves for the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    path: PathBuf,
    sha256: String,
    identity: Identity,
    hashed_at: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    version: u32,
    /// The boot of the machine that wrote it.
    boot: String,
    programs: Vec<Entry>,
}

/// The digests verified so far, by program path.
#[derive(Debug, Default)]
pub struct DigestCache {
    verified: Mutex<HashMap<PathBuf, (String, Verified)>>,
    /// What [`DigestCache::restore`] read, to write the record again only when it changed.
    restored: Mutex<Vec<Entry>>,
}

fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl DigestCache {
    /// Hashes the programs at `paths` side by side, one thread per core at most, largest
    /// first, so that the checks that follow find them hashed: a catalog's programs are
    /// tens of megabytes, hashed at every start. What is recorded is a fact about a file
    /// (this identity has this digest), not trust: [`DigestCache::open_verified`] still
    /// compares it with the digest a manifest signs. A path that cannot be read is left
    /// for that check to report.
    pub fn warm(&self, paths: &[PathBuf]) {
        let mut sized: Vec<(u64, &Path)> = paths
            .iter()
            .filter_map(|p| {
                let meta = std::fs::metadata(p).ok()?;
                meta.is_file().then_some((meta.len(), p.as_path()))
            })
            .collect();
        sized.sort_by_key(|&(size, _)| std::cmp::Reverse(size));
        let threads = std::thread::available_parallelism()
            .map_or(1, std::num::NonZero::get)
            .min(sized.len());
        let next = std::sync::atomic::AtomicUsize::new(0);
        let work = || {
            while let Some((_, path)) =
                sized.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
            {
                self.record(path);
            }
        };
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(work);
            }
            work();
        });
    }

    /// Hashes the file at `path` and records its digest under its identity, unless the
    /// digest known for it is still good.
    fn record(&self, path: &Path) {
        let Ok(mut file) = File::open(path) else {
            return;
        };
        let Ok(meta) = file.metadata() else { return };
        if !meta.is_file() {
            return;
        }
        let identity = identity(&meta);
        if self
            .verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .is_some_and(|(_, seen)| seen.still(&identity))
        {
            return;
        }
        let at = now_seconds();
        if let Ok(digest) = sha256_reader(&mut file) {
            self.verified
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(path.to_owned(), (digest, Verified { identity, at }));
        }
    }

    /// Opens `path` and checks that it is the program whose digest is `expected`; the
    /// open file is returned so that exactly it is executed.
    pub fn open_verified(&self, path: &Path, expected: &str) -> Result<File, DigestError> {
        let open_error = |e: std::io::Error| DigestError::Open {
            path: path.to_owned(),
            message: e.to_string(),
        };
        let mut file = File::open(path).map_err(open_error)?;
        let meta = file.metadata().map_err(open_error)?;
        if !meta.is_file() {
            return Err(DigestError::NotAFile(path.to_owned()));
        }
        let identity = identity(&meta);
        {
            let verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((digest, seen)) = verified.get(path)
                && digest == expected
                && seen.still(&identity)
            {
                return Ok(file);
            }
        }
        let at = now_seconds();
        let actual = sha256_reader(&mut file).map_err(open_error)?;
        if actual != expected {
            return Err(DigestError::Mismatch {
                path: path.to_owned(),
            });
        }
        self.verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_owned(), (actual, Verified { identity, at }));
        Ok(file)
    }
}

/// The record a start leaves for the next (issue 45): hashing a catalog's programs, tens of
/// megabytes, was most of the planner's start. An entry holds what the in-process cache
/// holds, a file's identity and the digest it had then, and is used under the same rule:
/// any change to the file (a write, a rename over, `touch`, `chmod`) changes its ctime,
/// which only the kernel sets, and the file is hashed again. A record holds for the boot
/// that wrote it: after a restart of the machine (when a disk may have been edited
/// offline, or the clock set back) every program is hashed once more. The record lives in
/// the data directory (0700, the file 0600), which the executors never reach; its
/// entries only spare a hash, and a program still has to match the digest its signed
/// manifest names.
impl DigestCache {
    /// Takes in the digests recorded in `file` for `programs` (an entry for any other
    /// path, or dated after now, is left out); returns how many. A missing record, or one
    /// from another boot, is none; an unreadable, oversized or foreign one is an error,
    /// and nothing is taken in (every program is hashed, as without a record).
    pub fn restore(&self, file: &Path, programs: &[PathBuf]) -> Result<usize, String> {
        let record = match read_record(file) {
            Ok(Some(record)) => record,
            Ok(None) => return Ok(0),
            Err(e) => return Err(format!("{}: {e}", file.display())),
        };
        if boot_id().is_none_or(|boot| record.boot != boot) {
            return Ok(0);
        }
        let now = now_seconds();
        let usable: Vec<Entry> = record
            .programs
            .into_iter()
            .filter(|entry| entry.hashed_at <= now && programs.contains(&entry.path))
            .collect();
        let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        for entry in &usable {
            verified.entry(entry.path.clone()).or_insert_with(|| {
                let seen = Verified {
                    identity: entry.identity,
                    at: entry.hashed_at,
                };
                (entry.sha256.clone(), seen)
            });
        }
        let count = usable.len();
        *self.restored.lock().unwrap_or_else(|e| e.into_inner()) = usable;
        Ok(count)
    }

    /// Writes the digests known for `programs` to `file` (0600, replaced whole) when
    /// they differ from what [`DigestCache::restore`] took in; returns whether it wrote.
    /// Without this boot's id nothing is written (a record could not be told apart).
    pub fn persist(&self, file: &Path, programs: &[PathBuf]) -> std::io::Result<bool> {
        let Some(boot) = boot_id() else {
            return Ok(false);
        };
        let mut entries: Vec<Entry> = {
            let verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
            programs
                .iter()
                // A path JSON cannot hold is hashed at every start, as before.
                .filter(|path| path.to_str().is_some())
                .filter_map(|path| {
                    let (sha256, seen) = verified.get(path)?;
                    Some(Entry {
                        path: path.clone(),
                        sha256: sha256.clone(),
                        identity: seen.identity,
                        hashed_at: seen.at,
                    })
                })
                .collect()
        };
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        entries.dedup_by(|a, b| a.path == b.path);
        if *self.restored.lock().unwrap_or_else(|e| e.into_inner()) == entries {
            return Ok(false);
        }
        let record = Record {
            version: RECORD_VERSION,
            boot,
            programs: entries,
        };
        let text = serde_json::to_vec_pretty(&record).map_err(std::io::Error::other)?;
        write_private(file, &text)?;
        Ok(true)
    }
}

/// This boot of the machine (Linux's random id, new at every boot).
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_owned())
}

fn read_record(file: &Path) -> std::io::Result<Option<Record>> {
    use rustix::fs::{Mode, OFlags};
    // Neither through a link nor blocked on a FIFO: only a regular file is read.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let opened = match rustix::fs::open(file, flags, Mode::empty()) {
        Ok(fd) => File::from(fd),
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if !opened.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = Vec::new();
    opened.take(RECORD_MAX_BYTES + 1).read_to_end(&mut text)?;
    if text.len() as u64 > RECORD_MAX_BYTES {
        return Err(std::io::Error::other(format!(
            "longer than {RECORD_MAX_BYTES} bytes"
        )));
    }
    let record: Record = serde_json::from_slice(&text).map_err(std::io::Error::other)?;
    if record.version != RECORD_VERSION {
        return Err(std::io::Error::other(format!(
            "version {} where {RECORD_VERSION} is read",
            record.version
        )));
    }
    Ok(Some(record))
}

/// Writes `bytes` to `file` through a private temporary beside it (a fresh name, so two
/// planners sharing a data directory never write into each other's), renamed over.
fn write_private(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut temporary = tempfile::Builder::new()
        .prefix(".program-digests.")
        .tempfile_in(dir)?;
    temporary.write_all(bytes)?;
    temporary.persist(file).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_sha256_in_hex() {
        assert_eq!(
            sha256_reader(&b"abc"[..]).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_changed_program_is_refused_even_after_it_was_verified() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prog");
        std::fs::write(&path, b"version one").unwrap();
        let digest = sha256_file(&path).unwrap();
        let cache = DigestCache::default();
        cache.open_verified(&path, &digest).unwrap();
        cache.open_verified(&path, &digest).unwrap();
        // Same size, written at once: a cache keyed on size alone would miss it.
        std::fs::write(&path, b"version two").unwrap();
        assert_eq!(
            cache.open_verified(&path, &digest).unwrap_err(),
            DigestError::Mismatch { path: path.clone() }
        );
        // Renamed over.
        let other = dir.path().join("other");
        std::fs::write(&other, b"version one").unwrap();
        std::fs::rename(&other, &path).unwrap();
        cache.open_verified(&path, &digest).unwrap();
        assert!(matches!(
            cache.open_verified(dir.path(), &digest),
            Err(DigestError::NotAFile(_))
        ));
    }

    #[test]
    fn programs_hashed_ahead_are_still_checked_against_the_signed_digest() {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (dir.path().join("one"), dir.path().join("two"));
        std::fs::write(&one, b"program one").unwrap();
        std::fs::write(&two, b"program two, longer").unwrap();
        let missing = dir.path().join("missing");
        let cache = DigestCache::default();
        cache.warm(&[
            one.clone(),
            two.clone(),
            missing.clone(),
            dir.path().to_owned(),
        ]);
        cache
            .open_verified(&one, &sha256_hex(b"program one"))
            .unwrap();
        cache
            .open_verified(&two, &sha256_hex(b"program two, longer"))
            .unwrap();
        // Hashed ahead is a fact about the file, not trust: another signed digest fails.
        assert_eq!(
            cache
                .open_verified(&one, &sha256_hex(b"program two, longer"))
                .unwrap_err(),
            DigestError::Mismatch { path: one.clone() }
        );
        // And a change after the warm-up is seen.
        std::fs::write(&one, b"program 1!!").unwrap();
        assert_eq!(
            cache
                .open_verified(&one, &sha256_hex(b"program one"))
                .unwrap_err(),
            DigestError::Mismatch { path: one.clone() }
        );
        // What could not be read is reported by the check, as before.
        assert!(matches!(
            cache.open_verified(&missing, "x"),
            Err(DigestError::Open { .. })
        ));
        assert!(matches!(
            cache.open_verified(dir.path(), "x"),
            Err(DigestError::NotAFile(_))
        ));
    }

    /// Waits until files changed now are older than the racy window, so that a digest
    /// taken after it is trusted (as for any program installed more than 2 s before).
    fn settle() {
        std::thread::sleep(std::time::Duration::from_millis(2_100 + 1_000));
    }

    /// A program `content` written, settled, hashed and recorded: its folder, its path and
    /// the record's path.
    fn recorded(content: &[u8]) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let (prog, record) = (dir.path().join("prog"), dir.path().join("digests.json"));
        std::fs::write(&prog, content).unwrap();
        settle();
        let cache = DigestCache::default();
        cache.warm(std::slice::from_ref(&prog));
        assert!(cache.persist(&record, std::slice::from_ref(&prog)).unwrap());
        (dir, prog, record)
    }

    #[test]
    fn a_recorded_digest_spares_the_hash_until_the_program_changes() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, prog, record) = recorded(b"version one");
        let one = sha256_hex(b"version one");
        let mode = std::fs::metadata(&record).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        let next = DigestCache::default();
        assert_eq!(
            next.restore(&record, std::slice::from_ref(&prog)).unwrap(),
            1
        );
        next.open_verified(&prog, &one).unwrap();
        // Nothing changed, so nothing to write again.
        assert!(!next.persist(&record, std::slice::from_ref(&prog)).unwrap());
        // The record is what is used, not a new hash: one that says another digest for
        // the unchanged file is believed (which is why it lives in the private folder).
        let text = std::fs::read_to_string(&record).unwrap();
        std::fs::write(&record, text.replace(&one, &sha256_hex(b"recorded"))).unwrap();
        let believing = DigestCache::default();
        believing
            .restore(&record, std::slice::from_ref(&prog))
            .unwrap();
        believing
            .open_verified(&prog, &sha256_hex(b"recorded"))
            .unwrap();

        // Same size, written in place: the ctime moves and the file is hashed again.
        std::fs::write(&prog, b"version two").unwrap();
        assert_eq!(
            next.open_verified(&prog, &one).unwrap_err(),
            DigestError::Mismatch { path: prog.clone() }
        );
        // Renamed over by another file of the same length.
        let next = DigestCache::default();
        next.restore(&record, std::slice::from_ref(&prog)).unwrap();
        let other = dir.path().join("other");
        std::fs::write(&other, b"version 1!!").unwrap();
        std::fs::rename(&other, &prog).unwrap();
        assert_eq!(
            next.open_verified(&prog, &one).unwrap_err(),
            DigestError::Mismatch { path: prog.clone() }
        );
        // Hashing ahead after a restore sees the change too, and records the new digest.
        next.warm(std::slice::from_ref(&prog));
        assert!(next.persist(&record, std::slice::from_ref(&prog)).unwrap());
        let text = std::fs::read_to_string(&record).unwrap();
        assert!(text.contains(&sha256_hex(b"version 1!!")), "{text}");
    }

    #[test]
    fn a_recorded_digest_is_a_fact_about_a_file_not_trust() {
        let (dir, prog, record) = recorded(b"the program");
        let next = DigestCache::default();
        next.restore(&record, std::slice::from_ref(&prog)).unwrap();
        // A manifest signing another digest is refused, record or not.
        assert_eq!(
            next.open_verified(&prog, &sha256_hex(b"another program"))
                .unwrap_err(),
            DigestError::Mismatch { path: prog.clone() }
        );
        // A record naming a program it never hashed (another path) vouches for nothing.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, b"the program").unwrap();
        next.open_verified(&elsewhere, &sha256_hex(b"the program"))
            .unwrap();
    }

    #[test]
    fn a_damaged_or_foreign_record_is_named_and_every_program_is_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let (prog, record) = (dir.path().join("prog"), dir.path().join("digests.json"));
        std::fs::write(&prog, b"the program").unwrap();
        let cache = DigestCache::default();
        assert_eq!(
            cache.restore(&record, std::slice::from_ref(&prog)).unwrap(),
            0,
            "no record yet"
        );

        std::fs::write(&record, b"{\"version\": 1, \"programs\": [").unwrap();
        let error = cache
            .restore(&record, std::slice::from_ref(&prog))
            .unwrap_err();
        assert!(error.contains("digests.json"), "{error}");
        std::fs::write(&record, br#"{"version": 7, "boot": "b", "programs": []}"#).unwrap();
        assert!(
            cache
                .restore(&record, std::slice::from_ref(&prog))
                .unwrap_err()
                .contains("version 7")
        );
        std::fs::write(&record, vec![b' '; RECORD_MAX_BYTES as usize + 10]).unwrap();
        assert!(
            cache
                .restore(&record, std::slice::from_ref(&prog))
                .unwrap_err()
                .contains("longer than")
        );
        // A link or a FIFO at its place is refused at once, never followed or waited on.
        std::fs::remove_file(&record).unwrap();
        std::os::unix::fs::symlink(&prog, &record).unwrap();
        assert!(cache.restore(&record, std::slice::from_ref(&prog)).is_err());
        std::fs::remove_file(&record).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &record,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let error = cache
            .restore(&record, std::slice::from_ref(&prog))
            .unwrap_err();
        assert!(error.contains("not a regular file"), "{error}");
        // Without a record the program is hashed and checked as before.
        cache
            .open_verified(&prog, &sha256_hex(b"the program"))
            .unwrap();
        assert!(cache.open_verified(&prog, &sha256_hex(b"other")).is_err());
    }

    #[test]
    fn a_record_holds_for_its_boot_its_programs_and_its_past() {
        let (dir, prog, record) = recorded(b"the program");
        let edited = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut json: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
            edit(&mut json);
            let other = dir.path().join("edited.json");
            std::fs::write(&other, serde_json::to_vec(&json).unwrap()).unwrap();
            DigestCache::default()
                .restore(&other, std::slice::from_ref(&prog))
                .unwrap()
        };
        assert_eq!(edited(&|_| {}), 1);
        // Written before the machine last started: a disk may have been edited offline.
        assert_eq!(
            edited(&|j| j["boot"] = serde_json::json!("another-boot")),
            0
        );
        // Dated after now: no clock of this boot wrote it.
        assert_eq!(
            edited(&|j| j["programs"][0]["hashed_at"] = serde_json::json!(now_seconds() + 3600)),
            0
        );
        // A path the catalog does not name is not taken in.
        assert_eq!(
            edited(&|j| j["programs"][0]["path"] = serde_json::json!("/usr/bin/other")),
            0
        );
    }
}
