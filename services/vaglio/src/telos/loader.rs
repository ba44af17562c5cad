//! Whose TELOS.md holds a person's telos, and the one in force: where people's files live
//! ([`Files`]), reading and checking them ([`Loader`]), and the version each person is
//! following.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use metnos_core::Principal;
use metnos_kit::clock::Clock;

use super::TelosError;
use super::file::{self, FileError, KeyError, TelosFile, TelosKey};
use super::store::TelosStore;

/// A person's telos in force.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub file: Arc<TelosFile>,
    pub path: PathBuf,
}

/// A person's TELOS.md as found on disk: none, one that does not hold, or one in force.
#[derive(Debug, Clone)]
pub enum Found {
    None,
    Bad(FileError, PathBuf),
    Good(Loaded),
}

/// Where people's files live.
#[derive(Debug, Clone)]
pub struct Files {
    /// `<data_dir>/telos`.
    pub root: PathBuf,
    /// `~/.config/metnos/TELOS.md`, the owner's.
    pub owner_file: PathBuf,
    /// Besides every `cli` sender, who the owner is.
    pub owner_principals: Vec<String>,
    pub key_file: PathBuf,
}

/// A path component for `text`: ASCII letters, digits and `-` kept, every other byte
/// `%XX` (so `..`, `/` and NUL never reach the file system).
fn component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        // `_` joins channel and sender: escaped inside either, so no two people share a
        // folder (`a_b` + `c` and `a` + `b_c`).
        if b.is_ascii_alphanumeric() || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Files {
    /// From the config: `<data_dir>/telos`, `<config_dir>/TELOS.md`, `<data_dir>/keys/telos.key`.
    pub fn from_config(config: &metnos_kit::Config) -> Files {
        Files {
            root: config.data_dir.join("telos"),
            owner_file: config.config_dir.join(file::FILE_NAME),
            owner_principals: config.telos.owner_principals.clone(),
            key_file: file::key_path(&config.data_dir),
        }
    }

    /// `<data_dir>/telos/<channel>_<sender>/TELOS.md`.
    pub fn person_file(&self, person: &Principal) -> PathBuf {
        self.root.join(scope_of(person)).join(file::FILE_NAME)
    }

    /// Whether `person` is the owner (every `cli` sender, and the listed principals).
    pub fn is_owner(&self, person: &Principal) -> bool {
        person.is_terminal() || self.owner_principals.contains(&person.to_string())
    }

    /// The file that holds `person`'s telos — their own, else (for the owner) the owner's —
    /// and the scope it is signed for ([`scope_of`], or `owner`).
    pub fn file_of(&self, person: &Principal) -> Option<(PathBuf, String)> {
        let own = self.person_file(person);
        if own.exists() {
            return Some((own, scope_of(person)));
        }
        (self.is_owner(person) && self.owner_file.exists())
            .then(|| (self.owner_file.clone(), OWNER_SCOPE.to_owned()))
    }
}

/// The scope a person's own file is signed for, and its folder's name:
/// `<channel>_<sender>`, each escaped, so no two people share one (`owner` is none of them:
/// it has no `_`).
pub fn scope_of(person: &Principal) -> String {
    format!(
        "{}_{}",
        component(person.channel()),
        component(person.sender_id())
    )
}

/// The scope the owner's file is signed for.
pub const OWNER_SCOPE: &str = "owner";

/// A file's identity on disk, to re-read it only when it changed.
type Stamp = (u64, u64, i64, i64, u64);

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.size()))
}

/// A file as last parsed.
type Parsed = Result<Arc<TelosFile>, FileError>;

/// Whether `file` says what the version `in_force` (kept in `.audit/`) said: the same signed
/// text saved again (another editor's line ends, trailing blanks).
fn same_text(path: &Path, in_force: &str, file: &TelosFile) -> bool {
    file::same_signed_text(&file::audit_dir(path).join(format!("{in_force}.md")), file)
}

/// Whether the time `a` is after `b` (both RFC 3339; false when either does not parse).
fn later(a: &str, b: &str) -> bool {
    match (a.parse::<jiff::Timestamp>(), b.parse::<jiff::Timestamp>()) {
        (Ok(a), Ok(b)) => a > b,
        _ => false,
    }
}

/// Finds a person's TELOS.md, keeps it parsed until it changes, and follows the version in
/// force (a new one discards the removed telos's fitness, once, and says so in the audit).
#[derive(Debug)]
pub struct Loader {
    store: TelosStore,
    files: Files,
    key: Result<TelosKey, KeyError>,
    clock: Arc<dyn Clock>,
    cache: Mutex<HashMap<(String, PathBuf), (Stamp, Parsed)>>,
}

/// A version that replaced another, as the audit tells it.
#[derive(Debug, Clone, Copy)]
struct Change<'a> {
    person: &'a str,
    from: &'a str,
    removed: &'a [String],
    added: &'a [String],
}

impl Loader {
    /// Loads the signing key from `files` (a key that cannot be used rejects every
    /// proposal, and says so once here).
    pub fn new(store: TelosStore, files: Files, clock: Arc<dyn Clock>) -> Loader {
        let key = TelosKey::load_or_create(&files.key_file);
        if let Err(e) = &key {
            tracing::error!(error = %e, "the telos key cannot be used: every proposal is rejected");
        }
        Loader {
            store,
            files,
            key,
            clock,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn files(&self) -> &Files {
        &self.files
    }

    /// `person`'s TELOS.md: read, parsed and its signature checked (cached until the file
    /// changes). A new version seen here discards the removed telos's fitness, once.
    pub async fn load(&self, person: &Principal) -> Result<Found, TelosError> {
        let Some((path, scope)) = self.files.file_of(person) else {
            return Ok(Found::None);
        };
        let Some(now_stamp) = stamp(&path) else {
            return Ok(Found::None);
        };
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(person.to_string(), path.clone()))
            .filter(|(s, _)| *s == now_stamp)
            .map(|(_, parsed)| parsed.clone());
        let parsed = match cached {
            Some(parsed) => parsed,
            None => {
                let parsed = match (&self.key, std::fs::read(&path)) {
                    (Err(e), _) => Err(FileError::SignatureInvalid(e.to_string())),
                    (_, Err(e)) => Err(FileError::Unreadable(e.to_string())),
                    (Ok(key), Ok(bytes)) => match String::from_utf8(bytes) {
                        Ok(text) => file::parse_signed(&text, &key.scoped(&scope)).map(Arc::new),
                        Err(_) => Err(FileError::Malformed {
                            line: 1,
                            message: "the file is not UTF-8".to_owned(),
                        }),
                    },
                };
                let mut parsed = parsed;
                if let Ok(file) = &parsed {
                    if let Err(refused) = self.seen(person, &path, &scope, file).await? {
                        parsed = Err(refused);
                    } else {
                        for warning in &file.warnings {
                            tracing::warn!(person = %person, %warning, "TELOS.md");
                        }
                    }
                }
                self.cache.lock().unwrap_or_else(|e| e.into_inner()).insert(
                    (person.to_string(), path.clone()),
                    (now_stamp, parsed.clone()),
                );
                parsed
            }
        };
        Ok(match parsed {
            Ok(file) => Found::Good(Loaded { file, path }),
            Err(e) => Found::Bad(e, path),
        })
    }

    /// A version in force for the first time: the telos it removed lose their fitness, and
    /// the audit says so, with the diff.
    /// `Ok(Err(_))`: the file is signed but does not follow the version in force (an older
    /// version put back, or a chain cut off): it is refused like an unsigned one.
    async fn seen(
        &self,
        person: &Principal,
        path: &Path,
        scope: &str,
        file: &TelosFile,
    ) -> Result<Result<(), FileError>, TelosError> {
        let key = person.to_string();
        // A control character is in no principal, so this row is no person's.
        let file_row = format!("\u{1}file:{scope}");
        if let Some(refused) = self.put_back(person, path, scope, file, &file_row).await? {
            return Ok(Err(refused));
        }
        let ids: Vec<String> = file.telos.iter().map(|t| t.id.clone()).collect();
        self.store
            .seen_version(&file_row, &file.version, &file.front.written_at, &ids)
            .await?;
        let Some((old_version, old_ids)) = self
            .store
            .seen_version(&key, &file.version, &file.front.written_at, &ids)
            .await?
        else {
            return Ok(Ok(()));
        };
        let removed: Vec<String> = old_ids
            .iter()
            .filter(|id| !ids.contains(id))
            .cloned()
            .collect();
        let added: Vec<String> = ids
            .iter()
            .filter(|id| !old_ids.contains(id))
            .cloned()
            .collect();
        if !removed.is_empty() {
            self.store.discard_fitness(&key, &removed).await?;
        }
        let change = Change {
            person: &key,
            from: &old_version,
            removed: &removed,
            added: &added,
        };
        self.audit(path, file, &change);
        tracing::info!(person = %person, removed = ?removed, added = ?added, version = %file.version, "new TELOS.md in force");
        Ok(Ok(()))
    }

    /// A signed file older than the version in force, put back: the refusal it gets.
    async fn put_back(
        &self,
        person: &Principal,
        path: &Path,
        scope: &str,
        file: &TelosFile,
        file_row: &str,
    ) -> Result<Option<FileError>, TelosError> {
        let key = person.to_string();
        // Only the key's holder signs, and a signature names whose file it is, so a replay
        // is the one attack left: a version signed before the one in force. A new version
        // follows it, or was written after it. Checked for the file (one owner file serves
        // several people) and for the person (who may move from one file to another).
        for row in [file_row, key.as_str()] {
            if let Some((in_force, in_force_at)) = self.store.version_of(row).await?
                && !in_force.is_empty()
                && in_force != file.version
                && let Ok(signing_key) = &self.key
                && !file::follows(path, file, &in_force, &signing_key.scoped(scope))
                && !later(&file.front.written_at, &in_force_at)
                && !same_text(path, &in_force, file)
            {
                tracing::warn!(person = %person, in_force = %in_force, found = %file.version, "TELOS.md does not follow the version in force");
                return Ok(Some(FileError::SignatureInvalid(format!(
                    "this TELOS.md was signed before the version in force ({in_force}) and does not follow it: an older version was put back; run `metnos telos edit` to review and sign it"
                ))));
            }
        }
        Ok(None)
    }

    /// Appends the change to the audit's `changes.jsonl` beside `path`, with the diff.
    fn audit(&self, path: &Path, file: &TelosFile, change: &Change<'_>) {
        let Change {
            person,
            from: old_version,
            removed,
            added,
        } = *change;
        let audit = path
            .parent()
            .unwrap_or(Path::new("."))
            .join(file::AUDIT_DIR);
        let old_text =
            std::fs::read_to_string(audit.join(format!("{old_version}.md"))).unwrap_or_default();
        let new_text = std::fs::read_to_string(path).unwrap_or_default();
        let diff = similar::TextDiff::from_lines(&old_text, &new_text)
            .unified_diff()
            .header(old_version, &file.version)
            .to_string();
        let line = serde_json::json!({
            "at": metnos_kit::time::rfc3339(self.clock.now_ms()),
            "person": person,
            "from": old_version,
            "to": file.version,
            "removed": removed,
            "added": added,
            "fitness_discarded": removed,
            "diff": diff,
        });
        let written = metnos_kit::datadir::create_dir_all(&audit).and_then(|()| {
            use std::io::Write as _;
            let mut f = metnos_kit::datadir::file_options()
                .create(true)
                .append(true)
                .open(audit.join("changes.jsonl"))?;
            writeln!(f, "{line}")
        });
        if let Err(e) = written {
            tracing::warn!(error = %e, "the telos audit line could not be written");
        }
    }
}
