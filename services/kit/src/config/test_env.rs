//! The config's unit tests run [`Config::load`] in figment's [`Jail`]: a clean environment
//! and a temporary working directory of their own.

use figment::Jail;

use super::{Config, ConfigSource};

/// Runs `f` with a clean environment (HOME=/home/u plus `vars`) in a temp directory.
#[allow(clippy::result_large_err)] // figment's Jail API fixes the error type
pub(super) fn with_env(vars: &[(&str, &str)], f: impl FnOnce(&mut Jail) -> Result<(), String>) {
    Jail::expect_with(|jail| {
        jail.clear_env();
        jail.set_env("HOME", "/home/u");
        for (k, v) in vars {
            jail.set_env(k, v);
        }
        f(jail).map_err(figment::Error::from)
    });
}

/// Loads the config as a service would, without a `--config` flag.
pub(super) fn load() -> Result<Config, String> {
    Config::load(&ConfigSource::default()).map_err(|e| e.to_string())
}

/// The one-line error of a config that must be refused.
pub(super) fn load_err() -> String {
    match load() {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e,
    }
}

/// Writes `metnos.toml` in the jail's working directory.
pub(super) fn write_file(jail: &mut Jail, text: &str) -> Result<(), String> {
    jail.create_file("metnos.toml", text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}
