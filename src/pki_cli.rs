//! `metnos pki`: the installation's CA and one certificate per identity (the five services
//! and the owner). `init` makes what is missing (`metnos up` does it too on its first run),
//! `--rotate` replaces them all; `export` writes one folder, or one Kubernetes Secret, per
//! identity, each holding only the CA certificate and that identity's certificate and key.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use base64::Engine;
use clap::Subcommand;
use metnos_kit::Config;
use metnos_kit::tls::{self, Identity};
use serde_json::json;

use crate::admin::print_line;

/// Why a `metnos pki` command failed, as the person reads it.
#[derive(Debug, thiserror::Error)]
enum PkiError {
    #[error("give --dir DIR or --k8s")]
    NoTarget,
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A file `export` ships is not there to read.
    #[error("{}: {source} (run `metnos pki init`)", path.display())]
    Missing {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Subcommand)]
pub enum PkiCommand {
    /// Creates the CA and the certificates that are missing, in tls.dir (default
    /// <data_dir>/pki); prints one JSON line per file made.
    Init {
        /// A new CA and new certificates for every identity (restart every service after).
        #[arg(long)]
        rotate: bool,
    },
    /// One identity per folder (`--dir`) or per Kubernetes Secret (`--k8s`, YAML on stdout).
    Export {
        /// Writes <DIR>/<identity>/{ca.crt,<identity>.crt,<identity>.key} (0700/0600): the
        /// tls.dir of a container that is that identity.
        #[arg(long, conflicts_with = "k8s")]
        dir: Option<PathBuf>,
        /// Prints a Secret `metnos-pki-<identity>` per identity.
        #[arg(long)]
        k8s: bool,
        /// The Secrets' namespace.
        #[arg(long, default_value = "metnos")]
        namespace: String,
    },
}

pub fn pki(config: &Config, command: PkiCommand) -> ExitCode {
    let dir = &config.tls.dir;
    let result = match command {
        PkiCommand::Init { rotate } => init(dir, rotate),
        PkiCommand::Export { dir: Some(out), .. } => export_dirs(dir, &out),
        PkiCommand::Export {
            k8s: true,
            namespace,
            ..
        } => export_k8s(dir, &namespace),
        PkiCommand::Export { .. } => Err(PkiError::NoTarget),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("metnos pki: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init(dir: &Path, rotate: bool) -> Result<(), PkiError> {
    let created = tls::init(dir, rotate)?;
    if created.ca {
        print_line(&json!({"created": "ca", "path": tls::ca_path(dir).0}));
    }
    for identity in created.identities {
        print_line(&json!({
            "created": identity.name(),
            "spiffe_id": identity.spiffe_id(),
            "path": tls::cert_path(dir, identity).0,
        }));
    }
    Ok(())
}

/// The identities whose material ships in one container's folder or Secret: the gateway's
/// holds the spectator page's too (the page runs in its process, under its own identity);
/// the page's has no folder of its own.
fn shipped(identity: Identity) -> &'static [Identity] {
    match identity {
        Identity::Gateway => &[Identity::Gateway, Identity::Web],
        Identity::Web => &[],
        Identity::Policy => &[Identity::Policy],
        Identity::Vaglio => &[Identity::Vaglio],
        Identity::Approval => &[Identity::Approval],
        Identity::Planner => &[Identity::Planner],
        Identity::Owner => &[Identity::Owner],
    }
}

/// The files of one container's folder: the CA and each shipped identity's pair.
fn files_for(dir: &Path, identity: Identity) -> Result<Vec<(String, Vec<u8>)>, PkiError> {
    let mut files = Vec::new();
    for shipped in shipped(identity) {
        for file in files_of(dir, *shipped)? {
            if !files.iter().any(|(name, _)| *name == file.0) {
                files.push(file);
            }
        }
    }
    Ok(files)
}

/// The three files of one identity: (file name, content).
fn files_of(dir: &Path, identity: Identity) -> Result<Vec<(String, Vec<u8>)>, PkiError> {
    let (crt, key) = tls::cert_path(dir, identity);
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| PkiError::Missing {
            path: path.to_owned(),
            source,
        })
    };
    Ok(vec![
        ("ca.crt".to_owned(), read(&tls::ca_path(dir).0)?),
        (format!("{}.crt", identity.name()), read(&crt)?),
        (format!("{}.key", identity.name()), read(&key)?),
    ])
}

fn export_dirs(dir: &Path, out: &Path) -> Result<(), PkiError> {
    use std::os::unix::fs::OpenOptionsExt;
    for identity in Identity::ALL {
        if shipped(identity).is_empty() {
            continue;
        }
        let folder = out.join(identity.name());
        tls::private_dir(&folder)?;
        for (name, bytes) in files_for(dir, identity)? {
            let path = folder.join(name);
            let _ = std::fs::remove_file(&path);
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(|source| PkiError::Write {
                    path: path.clone(),
                    source,
                })?;
            std::io::Write::write_all(&mut file, &bytes).map_err(|source| PkiError::Write {
                path: path.clone(),
                source,
            })?;
        }
        print_line(&json!({"exported": identity.name(), "dir": folder}));
    }
    Ok(())
}

fn export_k8s(dir: &Path, namespace: &str) -> Result<(), PkiError> {
    let base64 = base64::engine::general_purpose::STANDARD;
    for identity in Identity::ALL {
        if shipped(identity).is_empty() {
            continue;
        }
        println!("---");
        println!("apiVersion: v1");
        println!("kind: Secret");
        println!("metadata:");
        println!("  name: metnos-pki-{}", identity.name());
        println!("  namespace: {namespace}");
        println!("  labels:");
        println!("    app.kubernetes.io/part-of: metnos");
        println!("type: Opaque");
        println!("data:");
        for (name, bytes) in files_for(dir, identity)? {
            println!("  {name}: {}", base64.encode(bytes));
        }
    }
    Ok(())
}
