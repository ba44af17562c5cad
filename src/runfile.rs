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
    /// When that process started (`/proc/<pid>/stat` field 22, clock ticks since boot) and
    /// the boot it started in (`/proc/sys/kernel/random/boot_id`): a pid names the owner
    /// only with both (0 and empty in files written before they were kept).
    #[serde(default)]
    pub started: u64,
    #[serde(default)]
    pub boot: String,
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
        process_alive(&run).then_some(run)
    }

    /// This process's pid, start time and boot, for the run file it writes.
    pub fn this_process(services: BTreeMap<String, String>) -> RunFile {
        let pid = std::process::id();
        RunFile {
            pid,
            started: start_time(pid).unwrap_or(0),
            boot: boot_id(),
            services,
        }
    }

    pub fn remove(data_dir: &Path) {
        let _ = std::fs::remove_file(Self::path(data_dir));
    }
}

/// When `pid` started: field 22 of `/proc/<pid>/stat`, read after the command name (which
/// is in parentheses and may hold spaces or parentheses itself).
#[cfg(target_os = "linux")]
fn start_time(pid: u32) -> Option<u64> {
    let stat =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields 3, 4, … follow the name: field 22 is the 20th of them.
    after_name.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(not(target_os = "linux"))]
fn start_time(_pid: u32) -> Option<u64> {
    None
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .unwrap_or_default()
}

/// Whether the run file's owner still runs: never this very process (in a container
/// `metnos up` is pid 1 at every start, and a run file left by a killed one names pid 1
/// too), and the pid's start time and boot must be the recorded ones (a pid reused by
/// another program, or by this program after a restart, does not count). A file written
/// before start times were kept falls back to the program's name.
#[cfg(target_os = "linux")]
fn process_alive(run: &RunFile) -> bool {
    if run.pid == std::process::id() {
        return false;
    }
    if run.started != 0 {
        return start_time(run.pid) == Some(run.started)
            && (run.boot.is_empty() || run.boot == boot_id());
    }
    let Ok(cmdline) = std::fs::read(Path::new("/proc").join(run.pid.to_string()).join("cmdline"))
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
fn process_alive(run: &RunFile) -> bool {
    run.pid != std::process::id()
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
        let services = BTreeMap::from([("policy".to_owned(), "http://127.0.0.1:1".to_owned())]);
        // Written by this very process: never taken as a live owner (pid 1 in a container).
        let mine = RunFile::this_process(services.clone());
        assert!(mine.started > 0 && !mine.boot.is_empty(), "{mine:?}");
        mine.write(dir.path()).unwrap();
        assert_eq!(RunFile::read_live(dir.path()), None);
        // Another live process with its recorded start time is the owner…
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = other.id();
        let mut run = RunFile {
            pid,
            started: start_time(pid).unwrap(),
            boot: boot_id(),
            services,
        };
        run.write(dir.path()).unwrap();
        assert_eq!(RunFile::read_live(dir.path()), Some(run.clone()));
        // … but not with another start time (the pid reused after a crash), nor once gone.
        run.started += 1;
        run.write(dir.path()).unwrap();
        assert_eq!(RunFile::read_live(dir.path()), None);
        run.started -= 1;
        run.boot = "another-boot".to_owned();
        run.write(dir.path()).unwrap();
        assert_eq!(RunFile::read_live(dir.path()), None);
        other.kill().unwrap();
        other.wait().unwrap();
        run.boot = boot_id();
        run.write(dir.path()).unwrap();
        assert_eq!(RunFile::read_live(dir.path()), None);
        // A file from before start times: by name (this test binary is not `metnos`).
        run.pid = std::process::id() + 1;
        run.started = 0;
        run.write(dir.path()).unwrap();
        assert_eq!(RunFile::read_live(dir.path()), None);
        RunFile::remove(dir.path());
        assert!(!RunFile::path(dir.path()).exists());
    }

    #[test]
    fn the_start_time_is_read_past_a_name_with_spaces_and_parentheses() {
        // Field 22 of a stat line whose command name holds ") (".
        let line =
            "42 (we ird) (x) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let after = &line[line.rfind(')').unwrap() + 1..];
        assert_eq!(after.split_whitespace().nth(19), Some("987654"));
        assert!(start_time(std::process::id()).is_some());
    }
}
