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
) -> Result<(), ExitCode> {
    let installer = installation
        .and_then(|(exe, _)| installer_identity(&exe).ok())
        .unwrap_or_else(|| record.installer.clone());
    let synced = sync_builtins(&SyncRequest {
        catalog: dir,
        program,
        signer: &record.signer,
        key_file: &record.key_file,
        installer: &installer,
        force: true,
    })
    .map_err(failure)?;
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
    Ok(())
}

pub async fn executors(config: &Config, command: ExecutorsCommand) -> ExitCode {
    let done = match command {
        ExecutorsCommand::Keygen { name, out } => keygen(config, &name, out),
        ExecutorsCommand::Sign {
            dir,
            key,
            signer,
            keep_digest,
        } => sign(&dir, &key, signer, keep_digest),
        ExecutorsCommand::Verify { dir } => verify(config, dir),
        ExecutorsCommand::List => list(config),
        ExecutorsCommand::Run { name, args } => run(config, &name, &args).await,
        ExecutorsCommand::Sandbox => sandbox(config).await,
        ExecutorsCommand::Install { dir, program } => install(config, dir, program),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// Prints `e` as the command's failure.
fn failure(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("metnos: {e}");
    ExitCode::FAILURE
}

/// `metnos executors keygen`.
fn keygen(config: &Config, name: &str, out: Option<PathBuf>) -> Result<(), ExitCode> {
    if !metnos_executors::manifest::valid_name(&name.replace('-', "_")) {
        eprintln!("metnos: signer name `{name}` should be a simple word (letters, digits, _ or -)");
        return Err(ExitCode::FAILURE);
    }
    let path = out.unwrap_or_else(|| crate::setup::default_key_path(config, name));
    let key = signing::generate().map_err(failure)?;
    signing::write_key(&path, &key).map_err(failure)?;
    let public = signing::public_key_text(&key.verifying_key());
    print_line(
        &json!({"signer": name, "public_key": public, "key_file": path.display().to_string()}),
    );
    eprintln!(
        "metnos: add to your config to trust it:\n[executors.trusted_keys]\n{name} = \"{public}\""
    );
    Ok(())
}

/// `metnos executors sign`.
fn sign(dir: &Path, key: &Path, signer: Option<String>, keep_digest: bool) -> Result<(), ExitCode> {
    let signing_key = signing::read_key(key).map_err(failure)?;
    let signer = signer.unwrap_or_else(|| {
        key.file_stem()
            .map_or_else(|| "owner".to_owned(), |s| s.to_string_lossy().into_owned())
    });
    let signed = sign_dir(dir, &signing_key, &signer, keep_digest).map_err(failure)?;
    for s in signed {
        print_line(&json!({
            "name": s.name,
            "signer": signer,
            "program_sha256": s.program_sha256,
            "dir": s.dir.display().to_string(),
        }));
    }
    Ok(())
}

/// `metnos executors verify`.
fn verify(config: &Config, dir: Option<PathBuf>) -> Result<(), ExitCode> {
    let trust = trust(config)?;
    let dir = dir.unwrap_or_else(|| config.executors.catalog_dir.clone());
    if !dir.is_dir() {
        eprintln!("metnos: {} is not a folder", dir.display());
        return Err(ExitCode::FAILURE);
    }
    if !report(&Catalog::load(&dir, &trust)) {
        return Err(ExitCode::FAILURE);
    }
    Ok(())
}

/// `metnos executors list`.
fn list(config: &Config) -> Result<(), ExitCode> {
    let trust = trust(config)?;
    report(&Catalog::load(&config.executors.catalog_dir, &trust));
    Ok(())
}

/// `metnos executors run`.
async fn run(config: &Config, name: &str, args: &str) -> Result<(), ExitCode> {
    let args: Value = match serde_json::from_str(args) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            eprintln!("metnos: --args must be a JSON object");
            return Err(ExitCode::FAILURE);
        }
        Err(e) => {
            eprintln!("metnos: --args is not JSON: {e}");
            return Err(ExitCode::FAILURE);
        }
    };
    let trust = trust(config)?;
    let catalog = Catalog::load(&config.executors.catalog_dir, &trust);
    let observation = one_shot_runner(config)
        .check_and_run(&catalog, name, &args)
        .await;
    print_line(&serde_json::to_value(&observation).unwrap_or(Value::Null));
    if !observation.ok {
        return Err(ExitCode::FAILURE);
    }
    Ok(())
}

/// `metnos executors sandbox`.
async fn sandbox(config: &Config) -> Result<(), ExitCode> {
    let trust = trust(config)?;
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
        return Err(ExitCode::FAILURE);
    }
    Ok(())
}

/// `metnos executors install`.
fn install(
    config: &Config,
    dir: Option<PathBuf>,
    program: Option<PathBuf>,
) -> Result<(), ExitCode> {
    let dir = dir.unwrap_or_else(|| config.executors.catalog_dir.clone());
    let installation = crate::setup::this_installation();
    let Some(program) = program.or_else(|| installation.as_ref().map(|(_, p)| p.clone())) else {
        eprintln!("metnos: cannot tell where this program is installed; pass --program");
        return Err(ExitCode::FAILURE);
    };
    if !Path::new(&program).is_file() {
        eprintln!(
            "metnos: {} not found (build it, or pass --program)",
            program.display()
        );
        return Err(ExitCode::FAILURE);
    }
    // A catalog `metnos up` set up: its built-ins rewritten and re-signed with the key it
    // made, on the person's word that the programs are theirs.
    if let Some(record) = BuiltinsRecord::read(&dir).map_err(failure)? {
        return resign_builtins(&dir, &program, &record, installation);
    }
    let dirs = install_builtins(&dir, &program).map_err(failure)?;
    for d in dirs {
        print_line(&json!({"installed": d.display().to_string()}));
    }
    eprintln!(
        "metnos: now sign them: metnos executors sign {} --key <your key>",
        dir.display()
    );
    Ok(())
}
