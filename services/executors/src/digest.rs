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

use sha2::{Digest, Sha256};

/// How recent a file change may be before a cached digest of it is not trusted.
pub const RACY_SECONDS: i64 = 2;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

#[derive(Debug, Clone, Copy)]
struct Verified {
    identity: Identity,
    /// Unix seconds when it was hashed.
    at: i64,
}

/// The digests verified so far, by program path.
#[derive(Debug, Default)]
pub struct DigestCache {
    verified: Mutex<HashMap<PathBuf, (String, Verified)>>,
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

    /// Hashes the file at `path` and records its digest under its identity.
    fn record(&self, path: &Path) {
        let Ok(mut file) = File::open(path) else {
            return;
        };
        let Ok(meta) = file.metadata() else { return };
        if !meta.is_file() {
            return;
        }
        let identity = identity(&meta);
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
                && seen.identity == identity
                && identity.ctime.0 + RACY_SECONDS <= seen.at
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
}
