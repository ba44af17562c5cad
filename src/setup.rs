//! What `metnos up` sets up by itself on the first run, and keeps up to date on later ones:
//! the installation's certificates, the owner's signing key, the built-in executors
//! installed, signed and trusted. None of it is a decision the person needs to make.
//!
//! - The key lives in the configuration folder (`~/.config/metnos/keys/owner.key`, 0600),
//!   one of Metnos's own paths: no executor may read it, the shell's box hides it, the guard
//!   refuses a call naming it. No running service holds it.
//! - It is trusted through the trust file (`executors.trust_file`), read beside
//!   `[executors.trusted_keys]`; the config is never edited.
//! - The built-ins go in the catalog only when it holds no executor yet; a catalog the
//!   person filled by hand is never touched. What Metnos installed is recorded
//!   (`<catalog>/.metnos-builtins.toml`), and only those folders — each while its manifest is still the one
//!   Metnos wrote — are re-signed when `metnos-exec` changes (an upgrade).

use std::path::{Path, PathBuf};

use metnos_executors::BUILTIN_PROGRAM;
use metnos_executors::install::{
    BuiltinsRecord, InstallError, SyncRequest, Synced, catalog_is_empty, installer_identity,
    sync_builtins,
};
use metnos_executors::signing::{self, KeyError, Trust};
use metnos_kit::Config;
use metnos_kit::tls::{self, TlsError};

/// What the stack cannot start without, or a file Metnos must not overwrite.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Install(#[from] InstallError),
    /// The running program, whose identity marks an upgrade, cannot be read.
    #[error("{}: {source}", exe.display())]
    Installer {
        exe: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("executors: {0}")]
    Trust(KeyError),
}

/// The owner's signer name, as the trust file names the key `metnos up` makes.
pub const OWNER_SIGNER: &str = "owner";

/// Where a signing key named `name` is kept by default: the configuration folder (no
/// running service needs a private key; they hold public keys only), else the data
/// directory.
pub fn default_key_path(config: &Config, name: &str) -> PathBuf {
    let base = if config.config_dir.as_os_str().is_empty() {
        &config.data_dir
    } else {
        &config.config_dir
    };
    base.join(metnos_kit::datadir::KEYS_DIR)
        .join(format!("{name}.key"))
}

/// The running `metnos` and the `metnos-exec` beside it (where `make release` and
/// `make install` put both); `None` when the running program cannot be found (no `/proc`):
/// then nothing is installed, rather than a `metnos-exec` from the current folder.
pub fn this_installation() -> Option<(PathBuf, PathBuf)> {
    let exe = std::env::current_exe().ok()?;
    let program = exe.with_file_name(BUILTIN_PROGRAM);
    Some((exe, program))
}

/// What was set up, one sentence each, for the person to read once. Empty on a run that
/// had nothing to do.
#[derive(Debug, Default)]
pub struct Notes(pub Vec<String>);

impl Notes {
    pub fn say(&mut self, note: impl Into<String>) {
        self.0.push(note.into());
    }
}

/// Sets up what is missing, in order: certificates, then the executors (key, trust,
/// built-ins) of `installation` ([`this_installation`]). An error is something the stack
/// cannot start without, or a file Metnos must not overwrite; a missing `metnos-exec` is
/// only a note (the stack runs, without tools).
pub fn first_run(
    config: &Config,
    installation: Option<(PathBuf, PathBuf)>,
) -> Result<Notes, SetupError> {
    let mut notes = Notes::default();
    if config.tls.ca_file.as_os_str().is_empty() {
        let created = tls::init(&config.tls.dir, false)?;
        if created.ca {
            notes.say(format!(
                "created the installation's CA and certificates in {}",
                config.tls.dir.display()
            ));
        }
    }
    executors(config, installation, &mut notes)?;
    Ok(notes)
}

fn executors(
    config: &Config,
    installation: Option<(PathBuf, PathBuf)>,
    notes: &mut Notes,
) -> Result<(), SetupError> {
    let catalog = &config.executors.catalog_dir;
    let record = BuiltinsRecord::read(catalog)?;
    let first = record.is_none();
    if first && !catalog_is_empty(catalog)? {
        // Filled by hand (or by another tool): the person's, not ours.
        return Ok(());
    }
    let Some((exe, program)) = installation else {
        notes.say("the built-in executors were not set up: this program cannot tell where it is installed (is /proc mounted?)");
        return Ok(());
    };
    let program = program.as_path();
    if !program.is_file() {
        notes.say(if first {
            format!(
                "the built-in executors are not installed: {} is not there (`make release` builds it beside metnos); without them Metnos has no tools",
                program.display()
            )
        } else {
            format!(
                "the built-in executors were not checked for an upgrade: {} is not there",
                program.display()
            )
        });
        return Ok(());
    }
    let (signer, key_file) = match &record {
        Some(record) => (record.signer.clone(), record.key_file.clone()),
        None => owner_key(config, notes)?,
    };
    let installer = installer_identity(&exe).map_err(|source| SetupError::Installer {
        exe: exe.clone(),
        source,
    })?;
    let synced = sync_builtins(&SyncRequest {
        catalog,
        program,
        signer: &signer,
        key_file: &key_file,
        installer: &installer,
        force: false,
    })?;
    say_synced(notes, &synced, catalog, program, &signer);
    Ok(())
}

/// What a sync did, in the person's words; what it left alone only when it did something
/// or when a program changed outside an upgrade (which must not pass unnoticed).
pub fn say_synced(
    notes: &mut Notes,
    synced: &Synced,
    catalog: &Path,
    program: &Path,
    signer: &str,
) {
    let list = |names: &[String]| names.join(", ");
    if !synced.installed.is_empty() {
        notes.say(format!(
            "installed the built-in executors {} in {} and signed them as `{signer}`",
            list(&synced.installed),
            catalog.display()
        ));
    }
    if !synced.updated.is_empty() {
        notes.say(format!(
            "{} changed since the built-ins were signed: re-signed {} (only what Metnos installed itself)",
            program.display(),
            list(&synced.updated)
        ));
    }
    for (name, why) in &synced.kept {
        if synced.changed() || why.contains("no upgrade") {
            notes.say(format!("left {name} as it is: {why}"));
        }
    }
}

/// The owner's key — the one at the default path, made now if there is none — and the
/// name it is trusted under, adding it to the trust file when no one trusts it yet.
fn owner_key(config: &Config, notes: &mut Notes) -> Result<(String, PathBuf), SetupError> {
    let key_file = default_key_path(config, OWNER_SIGNER);
    let key = if key_file.exists() {
        signing::read_key(&key_file)?
    } else {
        let key = signing::generate()?;
        signing::write_key(&key_file, &key)?;
        notes.say(format!(
            "made the owner's signing key {} (readable by you only; no executor can reach it)",
            key_file.display()
        ));
        key
    };
    let trust_file = &config.executors.trust_file;
    let trust =
        Trust::load(&config.executors.trusted_keys, trust_file).map_err(SetupError::Trust)?;
    let public = key.verifying_key();
    if let Some(name) = trust.signer_of(&public) {
        return Ok((name.to_owned(), key_file));
    }
    // `owner` may already name someone else's key in the config: never replace a trusted
    // key, take the next free name.
    let name = std::iter::once(OWNER_SIGNER.to_owned())
        .chain((2..).map(|n| format!("{OWNER_SIGNER}{n}")))
        .find(|name| !trust.names(name))
        .unwrap_or_else(|| OWNER_SIGNER.to_owned());
    signing::trust_in_file(trust_file, &name, &public)?;
    notes.say(format!(
        "trusted it as `{name}` in {} (read beside [executors.trusted_keys]; the config is unchanged)",
        trust_file.display()
    ));
    Ok((name, key_file))
}

#[cfg(test)]
mod tests {
    // The whole flow runs against real binaries in tests/first_run.rs.
    use super::*;

    #[test]
    fn the_key_goes_in_the_configuration_folder_else_the_data_directory() {
        let mut config = Config {
            data_dir: "/d".into(),
            config_dir: "/c".into(),
            ..Config::default()
        };
        assert_eq!(
            default_key_path(&config, "owner"),
            Path::new("/c/keys/owner.key")
        );
        config.config_dir = PathBuf::new();
        assert_eq!(
            default_key_path(&config, "owner"),
            Path::new("/d/keys/owner.key")
        );
    }
}
