//! Putting executors in a catalog and signing them: what `metnos executors install` and
//! `metnos executors sign` do.

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
/// to `program` (the installed `metnos-exec`). Existing folders are replaced; the result
/// still needs signing.
pub fn install_builtins(catalog: &Path, program: &Path) -> Result<Vec<PathBuf>, InstallError> {
    let program = program.canonicalize().map_err(|e| io(program, e))?;
    let mut written = Vec::new();
    for (name, text) in crate::builtin::MANIFESTS {
        let dir = catalog.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| InstallError::Manifest {
            path: dir.join(MANIFEST_FILE),
            message: format!("built-in manifest does not parse: {e}"),
        })?;
        doc["program"] = toml_edit::value(program.display().to_string());
        let path = dir.join(MANIFEST_FILE);
        std::fs::write(&path, doc.to_string()).map_err(|e| io(&path, e))?;
        let _ = std::fs::remove_file(dir.join(SIGNATURE_FILE));
        written.push(dir);
    }
    Ok(written)
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
        std::fs::write(&sig_path, sig_text).map_err(|e| io(&sig_path, e))?;
        signed.push(Signed {
            dir: folder,
            name: manifest.name,
            program_sha256: digest,
        });
    }
    Ok(signed)
}
