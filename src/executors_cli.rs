//! `metnos executors …`: keys, signatures, the catalog, and running one executor by hand
//! (through the same checks the planner uses) to debug it without an LLM.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use metnos_executors::Catalog;
use metnos_executors::install::{
    BuiltinsRecord, SyncRequest, install_builtins, installer_identity, sign_dir, sync_builtins,
};
use metnos_executors::signing::{self, Trust};
use metnos_kit::Config;
use metnos_kit::launch::EXIT_CONFIG;
use serde_json::{Value, json};

use crate::admin::print_line;

#[derive(Debug, Subcommand)]
pub enum ExecutorsCommand {
    /// Creates a signing key (PKCS#8 PEM, readable by you only) and prints its public key
    /// for [executors.trusted_keys].
    Keygen {
        /// The signer's name, as config will list it.
        #[arg(long, default_value = "owner")]
        name: String,
        /// Where to write the key (default: <data_dir>/keys/<name>.key).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Records each program's sha256 in its manifest and signs the manifest.
    Sign {
        /// A catalog folder, or one executor's folder.
        dir: PathBuf,
        /// The private key (from `metnos executors keygen`).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// The signer's name (default: the key file's name without extension).
        #[arg(long)]
        signer: Option<String>,
        /// Do not record the digest: refuse unless the recorded one already matches.
        #[arg(long)]
        keep_digest: bool,
    },
    /// Checks every executor under DIR as the catalog loader does; exit 1 if any is refused.
    Verify {
        /// A catalog folder, or one executor's folder (default: the configured catalog).
        dir: Option<PathBuf>,
    },
    /// The configured catalog, one JSON line per executor: name, capabilities, signer, status.
    List,
    /// Runs one executor through the planner's checks (digest, schema, scope hints) and
    /// prints its observation; exit 1 when it is not ok.
    Run {
        /// The executor's name, e.g. fs_read.
        name: String,
        /// Its arguments, a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
    },
    /// Whether `shell_exec`'s sandbox can be built on this host and what it holds
    /// (namespaces, Landlock and its ABI, limits), as one JSON line; exit 1 when it cannot.
    Sandbox,
    /// Writes the built-in executors' manifests into DIR (default: the configured
    /// catalog), pointing at the installed metnos-exec; sign them next.
    Install {
        dir: Option<PathBuf>,
        /// The metnos-exec program (default: the one beside this `metnos`).
        #[arg(long, value_name = "FILE")]
        program: Option<PathBuf>,
    },
}

fn trust(config: &Config) -> Result<Trust, ExitCode> {
    Trust::load(&config.executors.trusted_keys, &config.executors.trust_file).map_err(|e| {
        eprintln!("metnos: executors: {e}");
        ExitCode::from(EXIT_CONFIG)
    })
}

fn report(catalog: &Catalog) -> bool {
    for executor in catalog.executors() {
        print_line(&json!({
            "name": executor.name(),
            "capabilities": executor.manifest.capabilities,
            "signer": executor.signer,
            "status": "ok",
        }));
    }
    for refusal in catalog.refused() {
        print_line(&json!({
            "name": refusal.name,
            "capabilities": Value::Null,
            "signer": Value::Null,
            "status": "refused",
            "reason": refusal.reason,
            "dir": refusal.dir.display().to_string(),
        }));
    }
    if catalog.is_empty() && catalog.refused().is_empty() {
        eprintln!(
            "metnos: no executors in {} (`metnos executors install` puts the built-ins there)",
            catalog.dir().display()
        );
    }
    catalog.refused().is_empty()
}

/// The planner's runner, for one run: nothing is started ahead for a next call.
fn one_shot_runner(config: &Config) -> metnos_executors::Runner {
    metnos_executors::Runner {
        prestart: false,
        ..metnos_planner::runner_from_config(config)
    }
}

/// `metnos executors install` on a catalog `metnos up` manages: a forced sync.
fn resign_builtins(
    dir: &Path,
    program: &Path,
    record: &BuiltinsRecord,
    installation: Option<(PathBuf, PathBuf)>,
) -> ExitCode {
    let installer = installation
        .and_then(|(exe, _)| installer_identity(&exe).ok())
        .unwrap_or_else(|| record.installer.clone());
    let synced = match sync_builtins(&SyncRequest {
        catalog: dir,
        program,
        signer: &record.signer,
        key_file: &record.key_file,
        installer: &installer,
        force: true,
    }) {
        Ok(synced) => synced,
        Err(e) => {
            eprintln!("metnos: {e}");
            return ExitCode::FAILURE;
        }
    };
    for name in synced.installed.iter().chain(&synced.updated) {
        print_line(
            &json!({"installed": dir.join(name).display().to_string(), "signer": record.signer}),
        );
    }
    let mut notes = crate::setup::Notes::default();
    crate::setup::say_synced(&mut notes, &synced, dir, program, &record.signer);
    if !synced.changed() {
        notes.say(format!(
            "the built-ins in {} are up to date and signed as `{}`",
            dir.display(),
            record.signer
        ));
    }
    for note in notes.0 {
        eprintln!("metnos: {note}");
    }
    ExitCode::SUCCESS
}

pub async fn executors(config: &Config, command: ExecutorsCommand) -> ExitCode {
    match command {
        ExecutorsCommand::Keygen { name, out } => {
            if !metnos_executors::manifest::valid_name(&name.replace('-', "_")) {
                eprintln!(
                    "metnos: signer name `{name}` should be a simple word (letters, digits, _ or -)"
                );
                return ExitCode::FAILURE;
            }
            let path = out.unwrap_or_else(|| crate::setup::default_key_path(config, &name));
            let key = match signing::generate() {
                Ok(key) => key,
                Err(e) => {
                    eprintln!("metnos: {e}");
                    return ExitCode::FAILURE;
                }
            };
            if let Err(e) = signing::write_key(&path, &key) {
                eprintln!("metnos: {e}");
                return ExitCode::FAILURE;
            }
            let public = signing::public_key_text(&key.verifying_key());
            print_line(
                &json!({"signer": name, "public_key": public, "key_file": path.display().to_string()}),
            );
            eprintln!(
                "metnos: add to your config to trust it:\n[executors.trusted_keys]\n{name} = \"{public}\""
            );
        }
        ExecutorsCommand::Sign {
            dir,
            key,
            signer,
            keep_digest,
        } => {
            let signing_key = match signing::read_key(&key) {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("metnos: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let signer = signer.unwrap_or_else(|| {
                key.file_stem()
                    .map_or_else(|| "owner".to_owned(), |s| s.to_string_lossy().into_owned())
            });
            match sign_dir(&dir, &signing_key, &signer, keep_digest) {
                Ok(signed) => {
                    for s in signed {
                        print_line(&json!({
                            "name": s.name,
                            "signer": signer,
                            "program_sha256": s.program_sha256,
                            "dir": s.dir.display().to_string(),
                        }));
                    }
                }
                Err(e) => {
                    eprintln!("metnos: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        ExecutorsCommand::Verify { dir } => {
            let trust = match trust(config) {
                Ok(t) => t,
                Err(code) => return code,
            };
            let dir = dir.unwrap_or_else(|| config.executors.catalog_dir.clone());
            if !dir.is_dir() {
                eprintln!("metnos: {} is not a folder", dir.display());
                return ExitCode::FAILURE;
            }
            if !report(&Catalog::load(&dir, &trust)) {
                return ExitCode::FAILURE;
            }
        }
        ExecutorsCommand::List => {
            let trust = match trust(config) {
                Ok(t) => t,
                Err(code) => return code,
            };
            report(&Catalog::load(&config.executors.catalog_dir, &trust));
        }
        ExecutorsCommand::Run { name, args } => {
            let args: Value = match serde_json::from_str(&args) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) => {
                    eprintln!("metnos: --args must be a JSON object");
                    return ExitCode::FAILURE;
                }
                Err(e) => {
                    eprintln!("metnos: --args is not JSON: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let trust = match trust(config) {
                Ok(t) => t,
                Err(code) => return code,
            };
            let catalog = Catalog::load(&config.executors.catalog_dir, &trust);
            let observation = one_shot_runner(config)
                .check_and_run(&catalog, &name, &args)
                .await;
            print_line(&serde_json::to_value(&observation).unwrap_or(Value::Null));
            if !observation.ok {
                return ExitCode::FAILURE;
            }
        }
        ExecutorsCommand::Sandbox => {
            let trust = match trust(config) {
                Ok(t) => t,
                Err(code) => return code,
            };
            let catalog = Catalog::load(&config.executors.catalog_dir, &trust);
            let observation = one_shot_runner(config).check_shell_sandbox(&catalog).await;
            let meta = observation.metadata.clone().unwrap_or_default();
            let available = meta.get("available").and_then(Value::as_bool) == Some(true);
            print_line(&json!({
                "available": available,
                "allow_unsandboxed": config.executors.allow_unsandboxed,
                "sandbox": meta.get("sandbox").cloned().unwrap_or(Value::Null),
                "error": observation.error,
            }));
            if !available {
                return ExitCode::FAILURE;
            }
        }
        ExecutorsCommand::Install { dir, program } => {
            let dir = dir.unwrap_or_else(|| config.executors.catalog_dir.clone());
            let installation = crate::setup::this_installation();
            let Some(program) = program.or_else(|| installation.as_ref().map(|(_, p)| p.clone()))
            else {
                eprintln!("metnos: cannot tell where this program is installed; pass --program");
                return ExitCode::FAILURE;
            };
            if !Path::new(&program).is_file() {
                eprintln!(
                    "metnos: {} not found (build it, or pass --program)",
                    program.display()
                );
                return ExitCode::FAILURE;
            }
            match BuiltinsRecord::read(&dir) {
                // A catalog `metnos up` set up: its built-ins rewritten and re-signed with
                // the key it made, on the person's word that the programs are theirs.
                Ok(Some(record)) => return resign_builtins(&dir, &program, &record, installation),
                Ok(None) => {}
                Err(e) => {
                    eprintln!("metnos: {e}");
                    return ExitCode::FAILURE;
                }
            }
            match install_builtins(&dir, &program) {
                Ok(dirs) => {
                    for d in dirs {
                        print_line(&json!({"installed": d.display().to_string()}));
                    }
                    eprintln!(
                        "metnos: now sign them: metnos executors sign {} --key <your key>",
                        dir.display()
                    );
                }
                Err(e) => {
                    eprintln!("metnos: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    ExitCode::SUCCESS
}
