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
        write_with_mode(&path, doc.to_string().as_bytes(), 0o600).map_err(|e| io(&path, e))?;
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
    doc["program"] = toml_edit::value(own.display().to_string());
    Ok((doc, own))
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
        let partial = catalog.join(format!("{RECORD_FILE}.partial"));
        write_with_mode(&partial, text.as_bytes(), 0o600)
            .and_then(|()| std::fs::rename(&partial, &path))
            .map_err(|e| io(&path, e))
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

/// Installs the built-ins of `program` (the `metnos-exec` beside this `metnos`) in
/// `catalog` and signs them with `key_file` as `signer`, or brings those it installed
/// before up to date. Without a record (a first run) every built-in whose folder is absent
/// is installed; with one, a recorded built-in is rewritten and re-signed only while its
/// manifest is still the one Metnos wrote, a folder the person removed stays removed, and
/// nothing else in the catalog is read or signed. The key is read only when something
/// must be signed.
pub fn sync_builtins(
    catalog: &Path,
    program: &Path,
    signer: &str,
    key_file: &Path,
) -> Result<Synced, InstallError> {
    let program = program.canonicalize().map_err(|e| io(program, e))?;
    let previous = BuiltinsRecord::read(catalog)?;
    let mut record = previous.clone().unwrap_or(BuiltinsRecord {
        signer: signer.to_owned(),
        key_file: key_file.to_owned(),
        executors: BTreeMap::new(),
    });
    let mut key: Option<SigningKey> = None;
    let mut digests: HashMap<PathBuf, String> = HashMap::new();
    let mut synced = Synced::default();
    for (name, text) in crate::builtin::MANIFESTS {
        let name = (*name).to_owned();
        let dir = catalog.join(&name);
        let path = dir.join(MANIFEST_FILE);
        let current = match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(&path, e)),
        };
        let recorded = record.executors.get(&name).cloned();
        let fresh = match (&current, &recorded) {
            // Installed before, then removed by the person: stays removed.
            (None, Some(_)) if previous.is_some() => continue,
            (None, _) if dir.exists() => {
                synced
                    .kept
                    .push((name, "a folder without a manifest is there".to_owned()));
                continue;
            }
            (None, _) => true,
            (Some(bytes), Some(hash)) if crate::digest::sha256_hex(bytes) == *hash => false,
            (Some(_), Some(_)) => {
                synced.kept.push((
                    name,
                    "changed since Metnos installed it; sign it yourself".to_owned(),
                ));
                continue;
            }
            (Some(_), None) => {
                synced
                    .kept
                    .push((name, "not installed by Metnos".to_owned()));
                continue;
            }
        };
        let (mut doc, own) = builtin_manifest(&dir, text, &program)?;
        let digest = match digests.get(&own) {
            Some(digest) => digest.clone(),
            None => {
                let digest = sha256_file(&own).map_err(|e| io(&own, e))?;
                digests.insert(own.clone(), digest.clone());
                digest
            }
        };
        doc["program_sha256"] = toml_edit::value(digest);
        let manifest_text = doc.to_string();
        let unchanged = current.as_deref() == Some(manifest_text.as_bytes())
            && dir.join(SIGNATURE_FILE).is_file();
        if unchanged {
            continue;
        }
        let manifest = Manifest::parse(&manifest_text).map_err(|e| InstallError::Manifest {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let key = match &key {
            Some(key) => key,
            None => key.insert(signing::read_key(&record.key_file).map_err(|e| {
                InstallError::Manifest {
                    path: path.clone(),
                    message: format!("cannot sign it: {e}"),
                }
            })?),
        };
        let signature = signing::sign(&manifest, key, &record.signer);
        let sig_path = dir.join(SIGNATURE_FILE);
        let sig_text = toml::to_string(&signature).map_err(|e| io(&sig_path, e))?;
        create_private_dir(&dir)?;
        write_with_mode(&path, manifest_text.as_bytes(), 0o600).map_err(|e| io(&path, e))?;
        write_with_mode(&sig_path, sig_text.as_bytes(), 0o600).map_err(|e| io(&sig_path, e))?;
        record.executors.insert(
            name.clone(),
            crate::digest::sha256_hex(manifest_text.as_bytes()),
        );
        if fresh {
            synced.installed.push(name);
        } else {
            synced.updated.push(name);
        }
    }
    if synced.changed() || previous.is_none() {
        create_private_dir(catalog)?;
        record.write(catalog)?;
    }
    Ok(synced)
}

/// Writes `bytes` to `path`, which ends up with `mode` whatever mode it had.
fn write_with_mode(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.write_all(bytes)
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
        // The built-ins share one program: hash it once.
        let digest = match hashed.get(&program) {
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
