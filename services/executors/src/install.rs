//! Putting executors in a catalog and signing them: what `metnos executors install` and
//! `metnos executors sign` do.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;

use crate::catalog::{MANIFEST_FILE, executor_dirs};
use crate::digest::sha256_file;
use crate::manifest::Manifest;
use crate::signing::{self, SIGNATURE_FILE};

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Manifest { path: PathBuf, message: String },
    #[error("no executor folders under {0}")]
    Empty(PathBuf),
}

fn io(path: &Path, e: impl std::fmt::Display) -> InstallError {
    InstallError::Io {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

/// Writes the built-in manifests into `catalog/<name>/manifest.toml`, their program set
/// to `program` (the installed `metnos-exec`) or, for `shell_exec`, the `metnos-shell`
/// beside it. Existing folders are replaced; the result
/// still needs signing.
pub fn install_builtins(catalog: &Path, program: &Path) -> Result<Vec<PathBuf>, InstallError> {
    let program = program.canonicalize().map_err(|e| io(program, e))?;
    let mut written = Vec::new();
    for (name, text) in crate::builtin::MANIFESTS {
        let dir = catalog.join(name);
        let (doc, _) = builtin_manifest(&dir, text, &program)?;
        // A first install may create the data directory itself: private, like the rest.
        create_private_dir(&dir)?;
        let path = dir.join(MANIFEST_FILE);
        real_folder(&dir)?;
        replace_file(&path, doc.to_string().as_bytes()).map_err(|e| io(&path, e))?;
        let _ = std::fs::remove_file(dir.join(SIGNATURE_FILE));
        written.push(dir);
    }
    Ok(written)
}

fn create_private_dir(dir: &Path) -> Result<(), InstallError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io(dir, e))
}

/// The built-in manifest `text` for the catalog folder `dir`, its program set to the one
/// beside `program` (the canonical `metnos-exec`) that it names, and that program's path.
fn builtin_manifest(
    dir: &Path,
    text: &str,
    program: &Path,
) -> Result<(toml_edit::DocumentMut, PathBuf), InstallError> {
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| InstallError::Manifest {
        path: dir.join(MANIFEST_FILE),
        message: format!("built-in manifest does not parse: {e}"),
    })?;
    // Each built-in's program lies beside `metnos-exec` (shell_exec has its own).
    let named = doc["program"].as_str().unwrap_or(crate::BUILTIN_PROGRAM);
    let own = program.with_file_name(named);
    if !own.is_file() {
        return Err(InstallError::Manifest {
            path: dir.join(MANIFEST_FILE),
            message: format!(
                "its program {} is not beside {} (build every binary of metnos-executors)",
                own.display(),
                program.display()
            ),
        });
    }
    changeable_by_owner_only(&own).map_err(|e| InstallError::Manifest {
        path: dir.join(MANIFEST_FILE),
        message: e.to_string(),
    })?;
    doc["program"] = toml_edit::value(own.display().to_string());
    Ok((doc, own))
}

/// Why a program is not signed: someone but its owner may change it, or it cannot be
/// looked at.
#[derive(Debug, thiserror::Error)]
enum NotOwnersOnly {
    #[error("{}: {source}", path.display())]
    Stat {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} may be changed by another user than its owner (mode {mode:o}, uid {uid}); Metnos signs only programs no one else can change",
        path.display()
    )]
    Open { path: PathBuf, mode: u32, uid: u32 },
}

/// Refuses a program (or its folder) that someone but its owner — this user or root —
/// may change: signing it would vouch for whatever they put there.
fn changeable_by_owner_only(program: &Path) -> Result<(), NotOwnersOnly> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    for path in [Some(program), program.parent()].into_iter().flatten() {
        let meta = std::fs::metadata(path).map_err(|source| NotOwnersOnly::Stat {
            path: path.to_owned(),
            source,
        })?;
        let mode = meta.mode();
        // A sticky folder (/tmp) lets others add files, not replace this one.
        let open = mode & 0o022 != 0 && !(meta.is_dir() && mode & 0o1000 != 0);
        if open || (meta.uid() != me && meta.uid() != 0) {
            return Err(NotOwnersOnly::Open {
                path: path.to_owned(),
                mode: mode & 0o7777,
                uid: meta.uid(),
            });
        }
    }
    Ok(())
}

/// The record, in a catalog, of the built-ins Metnos installed and signed itself: only
/// these does it ever rewrite or re-sign.
pub const RECORD_FILE: &str = ".metnos-builtins.toml";

/// [`RECORD_FILE`]'s content.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuiltinsRecord {
    /// The signer name the built-ins are signed as, and its private key.
    pub signer: String,
    pub key_file: PathBuf,
    /// Which `metnos` last installed them ([`SyncRequest::installer`]): a program that
    /// changed while this did not is no upgrade, and is not re-signed.
    #[serde(default)]
    pub installer: String,
    /// Each program's identity ([`installer_identity`]) when last synced: while neither
    /// they nor the installer changed, a start reads and hashes nothing.
    #[serde(default)]
    pub programs: BTreeMap<PathBuf, String>,
    /// Each built-in installed: the sha256 of the `manifest.toml` Metnos wrote. A folder
    /// whose manifest no longer has it was changed by someone else and is left alone.
    pub executors: BTreeMap<String, String>,
}

impl BuiltinsRecord {
    /// The record in `catalog`, if Metnos installed the built-ins there.
    pub fn read(catalog: &Path) -> Result<Option<BuiltinsRecord>, InstallError> {
        let path = catalog.join(RECORD_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text)
                .map(Some)
                .map_err(|e: toml::de::Error| InstallError::Manifest {
                    path,
                    message: e.message().to_owned(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path, e)),
        }
    }

    /// Writes the record into `catalog` (atomically, 0600).
    pub fn write(&self, catalog: &Path) -> Result<(), InstallError> {
        let path = catalog.join(RECORD_FILE);
        let text = format!(
            "# Written by `metnos up`: the built-in executors it installed and signed itself, and\n\
             # the sha256 of each manifest it wrote. Only these does it re-sign after an upgrade.\n{}",
            toml::to_string(self).map_err(|e| io(&path, e))?
        );
        real_folder(catalog)?;
        replace_file(&path, text.as_bytes()).map_err(|e| io(&path, e))
    }
}

/// Whether `catalog` holds no executor yet: absent, or without a single folder.
pub fn catalog_is_empty(catalog: &Path) -> Result<bool, InstallError> {
    match executor_dirs(catalog) {
        Ok(dirs) => Ok(dirs.is_empty()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(io(catalog, e)),
    }
}

/// What [`sync_builtins`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Synced {
    /// Built-ins written for the first time (a first run, or new in this version).
    pub installed: Vec<String>,
    /// Built-ins Metnos had installed, rewritten and re-signed: their program changed
    /// (an upgrade), moved, or their manifest is new in this version.
    pub updated: Vec<String>,
    /// Folders left as they are, each with why: a built-in's folder someone else wrote
    /// or changed.
    pub kept: Vec<(String, String)>,
}

impl Synced {
    pub fn changed(&self) -> bool {
        !self.installed.is_empty() || !self.updated.is_empty()
    }
}

/// What [`sync_builtins`] is asked to do.
#[derive(Debug, Clone, Copy)]
pub struct SyncRequest<'a> {
    pub catalog: &'a Path,
    /// The `metnos-exec` beside the running `metnos`.
    pub program: &'a Path,
    /// Signer name and key file of a first install (a later one uses the record's).
    pub signer: &'a str,
    pub key_file: &'a Path,
    /// The running `metnos`'s identity ([`installer_identity`]). A built-in whose program
    /// changed is re-signed only when this differs from the record's: an upgrade replaces
    /// `metnos` with its programs, while a program swapped on its own (by anything that
    /// could write it) is reported, not vouched for.
    pub installer: &'a str,
    /// Re-sign what changed even when `metnos` did not (`metnos executors install`, the
    /// person's own word after building a program).
    pub force: bool,
}

/// A file's identity as the kernel keeps it: device, inode, size and change time. Any
/// rewrite, copy over, rename into place or `touch` changes it (user space cannot set a
/// change time), and it costs no hashing.
pub fn installer_identity(path: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    Ok(format!(
        "{}:{}:{}:{}.{:09}",
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.ctime(),
        meta.ctime_nsec()
    ))
}

/// Installs the built-ins of `program` (the `metnos-exec` beside this `metnos`) in
/// `catalog` and signs them with `key_file` as `signer`, or brings those it installed
/// before up to date. Without a record (a first run) every built-in whose folder is absent
/// is installed; with one, a recorded built-in is rewritten and re-signed only while its
/// manifest is still the one Metnos wrote and only after an upgrade (or when forced), a
/// folder the person removed stays removed, and nothing else in the catalog is read or
/// signed. Only real folders are written in (never through a symbolic link), each file
/// replaced by a rename. The key is read only when something must be signed.
pub fn sync_builtins(request: &SyncRequest<'_>) -> Result<Synced, InstallError> {
    let catalog = request.catalog;
    let program = request
        .program
        .canonicalize()
        .map_err(|e| io(request.program, e))?;
    let previous = BuiltinsRecord::read(catalog)?;
    let mut record = previous.clone().unwrap_or(BuiltinsRecord {
        signer: request.signer.to_owned(),
        key_file: request.key_file.to_owned(),
        installer: request.installer.to_owned(),
        programs: BTreeMap::new(),
        executors: BTreeMap::new(),
    });
    let upgraded = record.installer != request.installer;
    let may_write = request.force || previous.is_none() || upgraded;
    let programs = builtin_programs(&program);
    if previous.is_some() && !request.force && !upgraded && record.programs == programs {
        return Ok(Synced::default());
    }
    let mut pass = SyncPass {
        catalog,
        program: &program,
        had_record: previous.is_some(),
        may_write,
        key: None,
        digests: HashMap::new(),
        synced: Synced::default(),
    };
    for (name, text) in crate::builtin::MANIFESTS {
        pass.sync_one(name, text, &mut record)?;
    }
    let synced = pass.synced;
    // The programs' identities are recorded only once they are signed as they are: a
    // program swapped outside an upgrade keeps being reported at every start.
    let all_signed = !synced
        .kept
        .iter()
        .any(|(_, why)| why.contains("no upgrade"));
    if all_signed && record.programs != programs {
        record.programs = programs;
        if previous.is_some() && !synced.changed() {
            record.write(catalog)?;
        }
    }
    if synced.changed() || previous.is_none() || (upgraded && may_write) {
        record.installer = request.installer.to_owned();
        create_private_dir(catalog)?;
        record.write(catalog)?;
    }
    Ok(synced)
}

/// The programs the built-ins run, as they are now: each one's path beside `program` and
/// its identity.
fn builtin_programs(program: &Path) -> BTreeMap<PathBuf, String> {
    let mut programs = BTreeMap::new();
    for (_, text) in crate::builtin::MANIFESTS {
        let named = text
            .parse::<toml_edit::DocumentMut>()
            .ok()
            .and_then(|doc| doc["program"].as_str().map(str::to_owned))
            .unwrap_or_else(|| crate::BUILTIN_PROGRAM.to_owned());
        let own = program.with_file_name(named);
        let identity = installer_identity(&own).unwrap_or_default();
        programs.insert(own, identity);
    }
    programs
}

/// One pass of [`sync_builtins`] over the built-ins: what it carries from one to the next
/// (the key, read on first need; each program's digest, computed once) and what it did.
struct SyncPass<'a> {
    catalog: &'a Path,
    program: &'a Path,
    had_record: bool,
    may_write: bool,
    key: Option<SigningKey>,
    digests: HashMap<PathBuf, String>,
    synced: Synced,
}

impl SyncPass<'_> {
    /// Installs, rewrites or leaves the built-in `name` (manifest `text`), noting it in
    /// `record` once signed.
    fn sync_one(
        &mut self,
        name: &str,
        text: &str,
        record: &mut BuiltinsRecord,
    ) -> Result<(), InstallError> {
        let name = name.to_owned();
        let dir = self.catalog.join(&name);
        let path = dir.join(MANIFEST_FILE);
        let current = match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(&path, e)),
        };
        let recorded = record.executors.get(&name).cloned();
        let Some(fresh) = self.fresh(&name, &dir, current.as_deref(), recorded.as_deref()) else {
            return Ok(());
        };
        let (mut doc, own) = builtin_manifest(&dir, text, self.program)?;
        doc["program_sha256"] = toml_edit::value(self.digest(&own)?);
        let manifest_text = doc.to_string();
        let unchanged = current.as_deref() == Some(manifest_text.as_bytes())
            && dir.join(SIGNATURE_FILE).is_file();
        if unchanged {
            return Ok(());
        }
        if !self.may_write {
            let why = if fresh {
                "not in the catalog, and this metnos did not change (no upgrade): not installed; `metnos executors install` installs it".to_owned()
            } else {
                format!(
                    "{} changed while this metnos did not (no upgrade): not re-signed; if you built it yourself, `metnos executors install` signs it",
                    own.display()
                )
            };
            self.synced.kept.push((name, why));
            return Ok(());
        }
        self.write_signed(&dir, &path, &manifest_text, record)?;
        record.executors.insert(
            name.clone(),
            crate::digest::sha256_hex(manifest_text.as_bytes()),
        );
        if fresh {
            self.synced.installed.push(name);
        } else {
            self.synced.updated.push(name);
        }
        Ok(())
    }

    /// Whether `name` is installed afresh (`Some(true)`), rewritten (`Some(false)`) or left
    /// as it is (`None`; why, in `kept`, when the person should know).
    fn fresh(
        &mut self,
        name: &str,
        dir: &Path,
        current: Option<&[u8]>,
        recorded: Option<&str>,
    ) -> Option<bool> {
        let kept = |why: &str| (name.to_owned(), why.to_owned());
        match (current, recorded) {
            // Installed before, then removed by the person: stays removed.
            (None, Some(_)) if self.had_record => None,
            (None, _) if dir.exists() => {
                self.synced
                    .kept
                    .push(kept("a folder without a manifest is there"));
                None
            }
            (None, _) => Some(true),
            (Some(bytes), Some(hash)) if crate::digest::sha256_hex(bytes) == hash => Some(false),
            (Some(_), Some(_)) => {
                self.synced
                    .kept
                    .push(kept("changed since Metnos installed it; sign it yourself"));
                None
            }
            (Some(_), None) => {
                self.synced.kept.push(kept("not installed by Metnos"));
                None
            }
        }
    }

    /// The sha256 of the program `own`, computed once per pass.
    fn digest(&mut self, own: &Path) -> Result<String, InstallError> {
        if let Some(digest) = self.digests.get(own) {
            return Ok(digest.clone());
        }
        let digest = sha256_file(own).map_err(|e| io(own, e))?;
        self.digests.insert(own.to_owned(), digest.clone());
        Ok(digest)
    }

    /// Signs `manifest_text` with the record's key and writes it and its signature in
    /// `dir`, a real folder.
    fn write_signed(
        &mut self,
        dir: &Path,
        path: &Path,
        manifest_text: &str,
        record: &BuiltinsRecord,
    ) -> Result<(), InstallError> {
        let manifest = Manifest::parse(manifest_text).map_err(|e| InstallError::Manifest {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let key = match &self.key {
            Some(key) => key,
            None => self
                .key
                .insert(signing::read_key(&record.key_file).map_err(|e| {
                    InstallError::Manifest {
                        path: path.to_owned(),
                        message: format!("cannot sign it: {e}"),
                    }
                })?),
        };
        let signature = signing::sign(&manifest, key, &record.signer);
        let sig_path = dir.join(SIGNATURE_FILE);
        let sig_text = toml::to_string(&signature).map_err(|e| io(&sig_path, e))?;
        create_private_dir(dir)?;
        real_folder(self.catalog)?;
        real_folder(dir)?;
        replace_file(path, manifest_text.as_bytes()).map_err(|e| io(path, e))?;
        replace_file(&sig_path, sig_text.as_bytes()).map_err(|e| io(&sig_path, e))?;
        Ok(())
    }
}

/// Refuses to write in `dir` unless it is a real folder, not a symbolic link to one.
fn real_folder(dir: &Path) -> Result<(), InstallError> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| io(dir, e))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(io(
            dir,
            "not a real folder (a symbolic link?); Metnos writes its catalog only in real folders",
        ));
    }
    Ok(())
}

/// Replaces `path` with `bytes`, 0600: written to a new file beside it (never through a
/// link left there), then renamed over it, so a link at `path` is replaced, not followed.
pub(crate) fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    match std::fs::remove_file(&partial) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&partial)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&partial, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
}

/// One signed executor.
#[derive(Debug, Clone)]
pub struct Signed {
    pub dir: PathBuf,
    pub name: String,
    pub program_sha256: String,
}

/// Signs every executor folder under `dir` (or `dir` itself): records the program's
/// current digest in the manifest (comments and layout kept) unless `keep_digest`, in
/// which case the recorded digest must already match; then writes `manifest.sig`.
pub fn sign_dir(
    dir: &Path,
    key: &SigningKey,
    signer: &str,
    keep_digest: bool,
) -> Result<Vec<Signed>, InstallError> {
    let dirs = executor_dirs(dir).map_err(|e| io(dir, e))?;
    let dirs: Vec<PathBuf> = dirs
        .into_iter()
        .filter(|d| d.join(MANIFEST_FILE).is_file())
        .collect();
    if dirs.is_empty() {
        return Err(InstallError::Empty(dir.to_owned()));
    }
    let mut signed = Vec::new();
    let mut hashed: std::collections::HashMap<PathBuf, String> = std::collections::HashMap::new();
    for folder in dirs {
        let path = folder.join(MANIFEST_FILE);
        let bad = |message: String| InstallError::Manifest {
            path: path.clone(),
            message,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
        let manifest = Manifest::parse(&text).map_err(|e| bad(e.to_string()))?;
        let program = crate::catalog::resolve_program(&manifest.program, &folder);
        // The built-ins share one program: hash it once. A server reached over HTTP has none.
        let digest = match hashed.get(&program) {
            _ if manifest.reached_over_http() => String::new(),
            Some(digest) => digest.clone(),
            None => {
                let digest = sha256_file(&program).map_err(|e| {
                    bad(format!(
                        "cannot read the program {}: {e}",
                        program.display()
                    ))
                })?;
                hashed.insert(program.clone(), digest.clone());
                digest
            }
        };
        if keep_digest && digest != manifest.program_sha256 {
            return Err(bad(format!(
                "the program {} does not match the recorded program_sha256",
                program.display()
            )));
        }
        let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| bad(format!("{e}")))?;
        doc["program_sha256"] = toml_edit::value(digest.clone());
        let updated = doc.to_string();
        let manifest = Manifest::parse(&updated).map_err(|e| bad(e.to_string()))?;
        if updated != text {
            std::fs::write(&path, &updated).map_err(|e| io(&path, e))?;
        }
        let signature = signing::sign(&manifest, key, signer);
        let sig_path = folder.join(SIGNATURE_FILE);
        let sig_text = toml::to_string(&signature).map_err(|e| io(&sig_path, e))?;
        // A new signature is as private as its manifest (0600 in a catalog Metnos installed,
        // whatever the person chose in a folder of their own); an existing one keeps its mode.
        let mode = std::fs::metadata(&path).map_or(0o600, |m| m.permissions().mode() & 0o777);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true).mode(mode);
        options
            .open(&sig_path)
            .and_then(|mut file| file.write_all(sig_text.as_bytes()))
            .map_err(|e| io(&sig_path, e))?;
        signed.push(Signed {
            dir: folder,
            name: manifest.name,
            program_sha256: digest,
        });
    }
    Ok(signed)
}
