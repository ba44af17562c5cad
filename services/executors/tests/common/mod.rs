//! A catalog in a temporary folder, signed with a fresh key, and a runner acting for a
//! temporary home.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use metnos_executors::install::{install_builtins, sign_dir};
use metnos_executors::signing::{self, Trust};
use metnos_executors::{Catalog, Observation, Runner, ShellSettings};
use serde_json::Value;

pub const EXEC: &str = env!("CARGO_BIN_EXE_metnos-exec");
/// `shell_exec`'s program (its box's init too).
pub const SHELL: &str = env!("CARGO_BIN_EXE_metnos-shell");
/// `web_fetch` and `parse_local`'s program.
pub const WEB: &str = env!("CARGO_BIN_EXE_metnos-web");
/// The mail and calendar built-ins' program.
pub const MAIL: &str = env!("CARGO_BIN_EXE_metnos-mail");

pub struct Fixture {
    pub root: tempfile::TempDir,
    pub key: SigningKey,
    pub trust: Trust,
}

impl Fixture {
    pub fn new() -> Fixture {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("catalog")).unwrap();
        std::fs::create_dir_all(root.path().join("home")).unwrap();
        let key = signing::generate().unwrap();
        let mut keys = BTreeMap::new();
        keys.insert(
            "owner".to_owned(),
            signing::public_key_text(&key.verifying_key()),
        );
        let trust = Trust::from_config(&keys).unwrap();
        Fixture { root, key, trust }
    }

    /// With the built-ins installed and signed.
    pub fn with_builtins() -> Fixture {
        let fixture = Fixture::new();
        install_builtins(&fixture.catalog_dir(), Path::new(EXEC)).unwrap();
        fixture.sign();
        fixture
    }

    pub fn catalog_dir(&self) -> PathBuf {
        self.root.path().join("catalog")
    }

    pub fn home(&self) -> PathBuf {
        self.root.path().join("home").canonicalize().unwrap()
    }

    pub fn workspace(&self) -> PathBuf {
        self.root.path().join("workspace")
    }

    pub fn sign(&self) {
        sign_dir(&self.catalog_dir(), &self.key, "owner", false).unwrap();
    }

    pub fn load(&self) -> Catalog {
        Catalog::load(&self.catalog_dir(), &self.trust)
    }

    pub fn runner(&self) -> Runner {
        Runner {
            forbidden: Vec::new(),
            user_home: self.home(),
            // The tests' HTTP servers listen on loopback.
            local_hosts: vec!["127.0.0.1".into()],
            shell: ShellSettings {
                allow: ["echo", "ls", "touch", "cat", "dd", "sleep"]
                    .map(str::to_owned)
                    .to_vec(),
                workspace: self.workspace(),
                cpu_seconds: 5,
                memory_mb: 512,
                file_size_mb: 1,
                processes: 64,
                allow_unsandboxed: false,
                readable: Vec::new(),
            },
            ..Runner::default()
        }
    }

    /// An executor `name` whose program is the shell script `body`.
    pub fn script_executor(&self, name: &str, body: &str, extra: &str) -> PathBuf {
        let dir = self.catalog_dir().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let program = dir.join("run.sh");
        std::fs::write(&program, format!("#!/bin/sh\n{body}\n")).unwrap();
        make_executable(&program);
        std::fs::write(
            dir.join("manifest.toml"),
            format!(
                r#"name = "{name}"
description = "test executor {name}"
capabilities = ["time:read"]
program = "run.sh"
{extra}
[args]
type = "object"
"#
            ),
        )
        .unwrap();
        dir
    }

    pub async fn run(&self, catalog: &Catalog, name: &str, args: Value) -> Observation {
        self.runner().check_and_run(catalog, name, &args).await
    }
}

pub fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

pub fn error(observation: &Observation) -> &str {
    assert!(!observation.ok, "expected a failure, got {observation:?}");
    observation.error.as_deref().unwrap_or("")
}

pub fn content_text(observation: &Observation) -> &str {
    assert!(observation.ok, "expected success, got {observation:?}");
    observation
        .content
        .as_ref()
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub fn meta<'a>(observation: &'a Observation, key: &str) -> &'a Value {
    observation
        .metadata
        .as_ref()
        .and_then(|m| m.get(key))
        .unwrap_or(&Value::Null)
}
