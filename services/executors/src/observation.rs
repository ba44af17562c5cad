//! What an executor answers, and what it is told besides its arguments.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The one JSON object an executor writes on stdout.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Observation {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Observation {
    pub fn success(content: impl Into<Value>, metadata: Map<String, Value>) -> Observation {
        Observation {
            ok: true,
            content: Some(content.into()),
            metadata: Some(metadata),
            error: None,
        }
    }

    pub fn failure(error: impl Into<String>) -> Observation {
        Observation {
            ok: false,
            error: Some(error.into()),
            ..Observation::default()
        }
    }

    /// A failure that still reports what is known (e.g. a sandbox's status).
    pub fn failure_with(error: impl Into<String>, metadata: Map<String, Value>) -> Observation {
        Observation {
            metadata: Some(metadata),
            ..Observation::failure(error)
        }
    }
}

/// The environment variable carrying [`ExecContext`] to the child.
pub const CONTEXT_VAR: &str = "METNOS_EXECUTOR_CONTEXT";

/// What a child executor is told besides its arguments: whom it acts for, its scope,
/// and (for `shell_exec`) its sandbox. Never a secret.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ExecContext {
    pub executor: String,
    pub user_home: PathBuf,
    pub scope_paths: Vec<String>,
    pub scope_hosts: Vec<String>,
    /// Hosts on this machine or the home network that network executors may reach
    /// (config `executors.local_hosts`); other non-public addresses are refused.
    pub local_hosts: Vec<String>,
    pub max_output_bytes: u64,
    pub timeout_seconds: u64,
    pub shell: ShellSettings,
    /// Metnos's own files (its data directory, its certificates), which no executor may
    /// read or write, whatever a scope says — except the shell's workspace inside them.
    pub forbidden: Vec<PathBuf>,
    /// The folders of programs the person runs by name (their PATH): a write there, like
    /// one to a hidden name under the home, runs code later
    /// ([`metnos_core::forbidden::runs_code_later`]).
    pub program_dirs: Vec<PathBuf>,
    /// The resolved paths of that kind this one call may write: the person's message named
    /// each and the person approved its card. Set by the planner, never by a caller.
    pub named_writes: Vec<PathBuf>,
    /// The person's mail accounts and calendars: given only to the mail program's
    /// executors (`metnos-mail`), empty for every other. Names the password files, never
    /// a password.
    pub accounts: metnos_core::accounts::Accounts,
}

impl Default for ExecContext {
    /// What a built-in assumes when run by hand, without a runner: the manifests'
    /// default cap and timeout, no scope.
    fn default() -> Self {
        ExecContext {
            executor: String::new(),
            user_home: PathBuf::new(),
            scope_paths: Vec::new(),
            scope_hosts: Vec::new(),
            local_hosts: Vec::new(),
            max_output_bytes: 1024 * 1024,
            timeout_seconds: 30,
            shell: ShellSettings::default(),
            forbidden: Vec::new(),
            program_dirs: Vec::new(),
            named_writes: Vec::new(),
            accounts: Default::default(),
        }
    }
}

/// The sandbox of `shell_exec` (config `[executors]`). A limit of 0 is no limit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct ShellSettings {
    pub allow: Vec<String>,
    pub workspace: PathBuf,
    pub cpu_seconds: u64,
    pub memory_mb: u64,
    pub file_size_mb: u64,
    /// Processes a command may have at once (itself included).
    pub processes: u64,
    /// Run commands even where the sandbox cannot be built (no namespaces, no Landlock).
    pub allow_unsandboxed: bool,
    /// Folders commands may read besides the system's program and library folders.
    pub readable: Vec<PathBuf>,
}
