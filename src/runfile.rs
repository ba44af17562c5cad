//! The run file `metnos up` leaves in the data directory: its pid and the address each
//! service actually bound (ports may be 0 in the config). Every other command reads it to
//! find the running stack; without one (services run separately), the config's URLs hold.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use metnos_kit::config::SERVICES;
use metnos_kit::{Config, ServiceName};
use serde::{Deserialize, Serialize};

/// What `metnos up` wrote.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunFile {
    pub pid: u32,
    /// Service short name → URL.
    pub services: BTreeMap<String, String>,
}

impl RunFile {
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(metnos_kit::datadir::RUN_FILE)
    }

    /// Writes atomically (temp file + rename), so a reader never sees half a file, and
    /// 0600: where the stack listens is the owner's business.
    pub fn write(&self, data_dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        metnos_kit::datadir::write_file(&Self::path(data_dir), text.as_bytes())
    }

    /// The run file of a live `metnos up`, if any (a stale one, whose process is gone, is
    /// ignored).
    pub fn read_live(data_dir: &Path) -> Option<RunFile> {
        let text = std::fs::read_to_string(Self::path(data_dir)).ok()?;
        let run: RunFile = serde_json::from_str(&text).ok()?;
        process_alive(run.pid).then_some(run)
    }

    pub fn remove(data_dir: &Path) {
        let _ = std::fs::remove_file(Self::path(data_dir));
    }
}

/// Whether `pid` is a running `metnos` (a pid reused by another program after a crash
/// does not count).
#[cfg(target_os = "linux")]
fn process_alive(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(Path::new("/proc").join(pid.to_string()).join("cmdline"))
    else {
        return false;
    };
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    let argv0 = String::from_utf8_lossy(argv0);
    Path::new(argv0.as_ref())
        .file_name()
        .is_some_and(|name| name == "metnos")
}

#[cfg(not(target_os = "linux"))]
fn process_alive(_pid: u32) -> bool {
    true
}

/// Where each service is reached: from a live run file, else from the config.
pub fn service_urls(config: &Config) -> BTreeMap<ServiceName, String> {
    let live = RunFile::read_live(&config.data_dir);
    SERVICES
        .into_iter()
        .map(|service| {
            let from_run = live
                .as_ref()
                .and_then(|run| run.services.get(service.as_str()).cloned());
            (
                service,
                from_run.unwrap_or_else(|| config.service_url(service)),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_file_round_trips_and_a_dead_or_foreign_pid_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = RunFile {
            pid: std::process::id(),
            services: BTreeMap::from([("policy".to_owned(), "http://127.0.0.1:1".to_owned())]),
        };
        run.write(dir.path()).unwrap();
        // This test binary is not `metnos`: like a pid reused by another program.
        assert_eq!(RunFile::read_live(dir.path()), None);
        run.pid = u32::MAX;
        run.write(dir.path()).unwrap();
        assert_eq!(RunFile::read_live(dir.path()), None);
        RunFile::remove(dir.path());
        assert!(!RunFile::path(dir.path()).exists());
    }
}
