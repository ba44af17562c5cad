//! `[executors]`: the executor catalog, who may sign it, the sandbox of `shell_exec`, and
//! the local hosts network executors may reach.

use std::collections::BTreeMap;
use std::num::NonZero;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The executor catalog, who may sign it, and the sandbox of `shell_exec`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorsConfig {
    /// A directory with one folder per executor (`manifest.toml` + `manifest.sig`).
    /// Empty: `<data_dir>/executors`.
    pub catalog_dir: PathBuf,
    /// Signers whose signatures are trusted: name → ed25519 public key (base64, as
    /// `metnos executors keygen` prints it).
    pub trusted_keys: BTreeMap<String, String>,
    /// More trusted signers, in a file `metnos up` writes when it makes the owner's key on
    /// the first run (same `name = "key"` lines; owner-writable only). Empty:
    /// `<config folder>/trusted_keys.toml` (`~/.config/metnos`), else
    /// `<data_dir>/trusted_keys.toml`.
    pub trust_file: PathBuf,
    /// Programs `shell_exec` may run (by name, looked up in /usr/local/bin, /usr/bin, /bin).
    pub shell_allow: Vec<String>,
    /// Where `shell_exec` runs and the only place it may write. Empty:
    /// `<data_dir>/workspace`.
    pub workspace: PathBuf,
    /// Resource limits of a `shell_exec` command: CPU seconds, address space, file size,
    /// processes at once.
    pub shell_cpu_seconds: NonZero<u64>,
    pub shell_memory_mb: NonZero<u64>,
    pub shell_file_size_mb: NonZero<u64>,
    pub shell_processes: NonZero<u64>,
    /// Folders `shell_exec` commands may read besides the workspace and the system's
    /// program and library folders (`~/projects`). Metnos's own files and where credential
    /// stores usually are stay unreadable inside them.
    pub shell_readable: Vec<PathBuf>,
    /// Run `shell_exec` commands even where its sandbox cannot be built (no user, PID,
    /// network and IPC namespaces, or no Landlock). Off: such a host refuses every command.
    pub allow_unsandboxed: bool,
    /// Start each executor's next process as soon as a run ends, so a call finds it
    /// started (and `shell_exec`'s box built) and only hands it its input. Each process
    /// still serves one call; off: every call starts its process (a few ms more each).
    pub prestart: bool,
    /// Hosts on this machine or the home network (`nas.lan`, `*.lan`, `192.168.1.10`)
    /// that network executors may reach. Every other loopback, private, link-local or
    /// special-purpose address is refused, whatever an executor's scope says.
    pub local_hosts: Vec<String>,
}

impl Default for ExecutorsConfig {
    fn default() -> Self {
        ExecutorsConfig {
            catalog_dir: PathBuf::new(),
            trusted_keys: BTreeMap::new(),
            trust_file: PathBuf::new(),
            shell_allow: [
                "ls", "cat", "head", "tail", "wc", "grep", "find", "du", "df", "date", "echo",
                "sort", "uniq", "git",
            ]
            .map(str::to_owned)
            .to_vec(),
            workspace: PathBuf::new(),
            shell_cpu_seconds: const { NonZero::new(10).unwrap() },
            shell_memory_mb: const { NonZero::new(1024).unwrap() },
            shell_file_size_mb: const { NonZero::new(64).unwrap() },
            shell_processes: const { NonZero::new(64).unwrap() },
            shell_readable: Vec::new(),
            allow_unsandboxed: false,
            prestart: true,
            local_hosts: Vec::new(),
        }
    }
}
