//! The telos key (seed telos.md ch. 2): 32 bytes of its own under the data directory,
//! 0600, that signs every TELOS.md with HMAC-SHA256 for whose file it is.

use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Why the telos key cannot be used (every proposal is rejected until it can).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the telos key {0} is not a regular file")]
    NotAFile(String),
    #[error("the telos key {path} may be read by others (mode {mode:o}); chmod 600 it")]
    Readable { path: String, mode: u32 },
    #[error("the telos key {path} cannot be read: {source}")]
    Unreadable {
        path: String,
        source: std::io::Error,
    },
    #[error("the telos key {0} is not 64 hex digits")]
    NotHex(String),
    #[error("the folder of the telos key {path} cannot be made: {source}")]
    NoFolder {
        path: String,
        source: std::io::Error,
    },
    #[error("the telos key {path} cannot be made: {source}")]
    Unmade {
        path: String,
        source: std::io::Error,
    },
}

type HmacSha256 = Hmac<Sha256>;

/// The telos key: 32 bytes, separate from every other key, and the scope it signs for —
/// whose file it is (`owner`, or the person's escaped `<channel>_<sender>`): the scope is part of what is signed,
/// so one person's signed file copied into another's folder does not verify there.
#[derive(Clone)]
pub struct TelosKey {
    bytes: [u8; 32],
    scope: String,
}

impl std::fmt::Debug for TelosKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TelosKey(…)")
    }
}

impl TelosKey {
    pub fn from_bytes(bytes: [u8; 32]) -> TelosKey {
        TelosKey {
            bytes,
            scope: String::new(),
        }
    }

    /// The same key, signing for `scope` (whose file: `owner` or `<channel>_<sender>`).
    pub fn scoped(&self, scope: &str) -> TelosKey {
        TelosKey {
            bytes: self.bytes,
            scope: scope.to_owned(),
        }
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes a key of any length.
        let mut mac = HmacSha256::new_from_slice(&self.bytes).unwrap_or_else(|_| unreachable!());
        mac.update(b"metnos-telos-v1\n");
        mac.update(self.scope.as_bytes());
        mac.update(b"\n");
        mac
    }

    /// The hex signature of `canonical`.
    pub fn sign(&self, canonical: &str) -> String {
        let mut mac = self.mac();
        mac.update(canonical.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Whether `signature` (hex) signs `canonical`; compared in constant time.
    pub fn verifies(&self, canonical: &str, signature: &str) -> bool {
        let Ok(bytes) = hex::decode(signature) else {
            return false;
        };
        let mut mac = self.mac();
        mac.update(canonical.as_bytes());
        mac.verify_slice(&bytes).is_ok()
    }

    /// Loads the key at `path`, making it (0600, in a 0700 folder) when there is none.
    /// Refused when group or others may read it, or when it is a symbolic link.
    pub fn load_or_create(path: &Path) -> Result<TelosKey, KeyError> {
        let shown = || path.display().to_string();
        use std::os::unix::fs::PermissionsExt;
        match std::fs::symlink_metadata(path) {
            Ok(meta) => {
                if meta.file_type().is_symlink() || !meta.is_file() {
                    return Err(KeyError::NotAFile(shown()));
                }
                if meta.permissions().mode() & 0o077 != 0 {
                    return Err(KeyError::Readable {
                        path: shown(),
                        mode: meta.permissions().mode() & 0o777,
                    });
                }
                let text =
                    std::fs::read_to_string(path).map_err(|source| KeyError::Unreadable {
                        path: shown(),
                        source,
                    })?;
                let bytes = hex::decode(text.trim())
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
                    .ok_or_else(|| KeyError::NotHex(shown()))?;
                Ok(TelosKey::from_bytes(bytes))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut bytes = [0u8; 32];
                metnos_kit::random::fill(&mut bytes);
                if let Some(dir) = path.parent() {
                    metnos_kit::datadir::create_dir_all(dir).map_err(|source| {
                        KeyError::NoFolder {
                            path: shown(),
                            source,
                        }
                    })?;
                }
                // Written whole beside it, then linked into place: of two processes making it
                // at once one key wins, and nobody ever reads a half-written one.
                let partial =
                    path.with_extension(format!("partial-{}", metnos_kit::random::hex(4)));
                let written = metnos_kit::datadir::file_options()
                    .write(true)
                    .create_new(true)
                    .open(&partial)
                    .and_then(|mut file| {
                        use std::io::Write;
                        file.write_all(hex::encode(bytes).as_bytes())?;
                        file.sync_all()
                    })
                    .and_then(|()| std::fs::hard_link(&partial, path));
                let _ = std::fs::remove_file(&partial);
                match written {
                    Ok(()) => {
                        tracing::info!(path = %path.display(), "telos key made");
                        Ok(TelosKey::from_bytes(bytes))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        TelosKey::load_or_create(path)
                    }
                    Err(source) => Err(KeyError::Unmade {
                        path: shown(),
                        source,
                    }),
                }
            }
            Err(source) => Err(KeyError::Unreadable {
                path: shown(),
                source,
            }),
        }
    }
}

/// Where the telos key lives: `<data_dir>/keys/telos.key`.
pub fn key_path(data_dir: &Path) -> PathBuf {
    data_dir
        .join(metnos_kit::datadir::KEYS_DIR)
        .join("telos.key")
}
