//! Putting executors in a catalog and signing them: what `metnos executors install` and
//! `metnos executors sign` do.

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
        // A first install may create the data directory itself: private, like the rest.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| io(&dir, e))?;
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
        let path = dir.join(MANIFEST_FILE);
        write_with_mode(&path, doc.to_string().as_bytes(), 0o600).map_err(|e| io(&path, e))?;
        let _ = std::fs::remove_file(dir.join(SIGNATURE_FILE));
        written.push(dir);
    }
    Ok(written)
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
