//! The catalog: every executor folder under the catalog directory, loaded and checked
//! one by one. A folder that fails a check is refused with its reason (logged) and the
//! others load; a missing or empty directory is an empty catalog.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use metnos_core::capability::Capability;
use serde_json::Value;

use crate::digest::{DigestCache, DigestError};
use crate::manifest::Manifest;
use crate::scope::{PathScope, ScopeError, check_url};
use crate::signing::{self, Trust};

/// The manifest file of an executor folder.
pub const MANIFEST_FILE: &str = "manifest.toml";
/// A file whose presence keeps an executor folder out of the catalog (`metnos mcp disable`).
pub const DISABLED_FILE: &str = "disabled";

/// A loaded, verified executor.
#[derive(Debug)]
pub struct Executor {
    pub manifest: Manifest,
    /// Its folder.
    pub dir: PathBuf,
    /// The program, resolved.
    pub program: PathBuf,
    /// The trusted signer (as config names it).
    pub signer: String,
    pub capabilities: Vec<Capability>,
    validator: jsonschema::Validator,
}

/// An executor folder the loader refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub dir: PathBuf,
    /// The manifest's name, when it got that far.
    pub name: Option<String>,
    pub reason: String,
}

/// The executors that passed every check, and those that did not.
#[derive(Debug, Default)]
pub struct Catalog {
    dir: PathBuf,
    executors: BTreeMap<String, Arc<Executor>>,
    refused: Vec<Refusal>,
    digests: DigestCache,
}

/// Why a proposed call cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("no executor named `{0}` in the catalog")]
    Unknown(String),
    #[error("the catalog is empty")]
    EmptyCatalog,
    #[error("arguments of {executor} do not match its schema: {problems}")]
    Schema { executor: String, problems: String },
    #[error("{0}")]
    Scope(#[from] ScopeError),
}

/// Where to look for a program named without a path: the executor's folder, then the
/// folder of the running binary (where `metnos-exec` is installed beside `metnos`).
pub(crate) fn resolve_program(program: &str, dir: &Path) -> PathBuf {
    let path = Path::new(program);
    if path.is_absolute() {
        return path.to_owned();
    }
    if program.contains('/') {
        return dir.join(path);
    }
    let local = dir.join(path);
    if local.exists() {
        return local;
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join(path)))
        .filter(|p| p.exists())
        .unwrap_or(local)
}

const KNOWN_DRAFTS: &[&str] = &[
    "http://json-schema.org/draft-04/schema#",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-07/schema#",
    "https://json-schema.org/draft/2019-09/schema",
    "https://json-schema.org/draft/2020-12/schema",
];

/// Why an args schema is not a valid JSON Schema (what the schema holds is masked).
#[derive(Debug, thiserror::Error)]
enum SchemaError {
    #[error("its $schema is not a JSON Schema draft this loader knows")]
    UnknownDraft,
    #[error("{message} (at {at})")]
    Invalid { message: String, at: String },
    #[error("{0}")]
    Compile(String),
}

/// A validator for the args schema, or why it is not a valid JSON Schema.
fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, SchemaError> {
    if let Some(draft) = schema.get("$schema") {
        let known = draft.as_str().is_some_and(|d| {
            KNOWN_DRAFTS.contains(&d.trim_end_matches('#')) || KNOWN_DRAFTS.contains(&d)
        });
        if !known {
            return Err(SchemaError::UnknownDraft);
        }
    }
    if let Err(e) = jsonschema::meta::validate(schema) {
        return Err(SchemaError::Invalid {
            message: e.masked().to_string(),
            at: e.instance_path().to_string(),
        });
    }
    jsonschema::validator_for(schema).map_err(|e| SchemaError::Compile(e.masked().to_string()))
}

/// Loads one executor folder.
fn load_one(
    dir: &Path,
    trust: &Trust,
    digests: &DigestCache,
) -> Result<Executor, (Option<String>, String)> {
    let text = std::fs::read_to_string(dir.join(MANIFEST_FILE))
        .map_err(|e| (None, format!("cannot read {MANIFEST_FILE}: {e}")))?;
    let manifest =
        Manifest::parse(&text).map_err(|e| (None, format!("malformed manifest: {e}")))?;
    let name = Some(manifest.name.clone());
    let fail = |reason: String| (name.clone(), reason);
    let capabilities = manifest
        .capabilities
        .iter()
        .map(|c| Capability::parse(c))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    let validator = compile_schema(&manifest.args)
        .map_err(|e| fail(format!("args is not a valid JSON Schema: {e}")))?;
    let signature = signing::read_signature(dir).map_err(|e| fail(e.to_string()))?;
    let signer = signing::verify(&manifest, &signature, trust).map_err(|e| fail(e.to_string()))?;
    if manifest.reached_over_http() {
        // An MCP server reached over HTTP: no program here to check.
        return Ok(Executor {
            manifest,
            dir: dir.to_owned(),
            program: PathBuf::new(),
            signer,
            capabilities,
            validator,
        });
    }
    if manifest.program_sha256.is_empty() {
        return Err(fail(
            "no program_sha256 (sign it with `metnos executors sign`)".into(),
        ));
    }
    let program = resolve_program(&manifest.program, dir);
    // Through the catalog's digest cache: the built-ins share one program, hashed once
    // here and not again before its first spawn.
    digests
        .open_verified(&program, &manifest.program_sha256)
        .map_err(|e| {
            fail(match e {
                DigestError::Open { message, .. } => {
                    format!("cannot read the program {}: {message}", program.display())
                }
                DigestError::Mismatch { .. } => format!(
                    "the program {} does not match its signed digest (changed after signing)",
                    program.display()
                ),
                other => other.to_string(),
            })
        })?;
    Ok(Executor {
        manifest,
        dir: dir.to_owned(),
        program,
        signer,
        capabilities,
        validator,
    })
}

/// The programs the manifests in `dirs` name, each once: what the catalog will hash. Only
/// a manifest that parses and whose signature a trusted key made names one, as when each
/// folder is loaded: a folder anyone dropped in does not get a path of its choosing opened
/// (a FIFO would hang the start).
fn programs_named(dirs: &[PathBuf], trust: &Trust) -> Vec<PathBuf> {
    let mut programs: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|dir| {
            let text = std::fs::read_to_string(dir.join(MANIFEST_FILE)).ok()?;
            let manifest = Manifest::parse(&text).ok()?;
            let signature = signing::read_signature(dir).ok()?;
            signing::verify(&manifest, &signature, trust).ok()?;
            (!manifest.reached_over_http() && !manifest.program.is_empty())
                .then(|| resolve_program(&manifest.program, dir))
        })
        .collect();
    programs.sort();
    programs.dedup();
    programs
}

/// The executor folders under `dir` (or `dir` itself when it holds a manifest).
pub fn executor_dirs(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    if dir.join(MANIFEST_FILE).is_file() {
        return Ok(vec![dir.to_owned()]);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    Ok(dirs)
}

impl Catalog {
    /// Loads every executor folder under `dir`, refusing (and logging) the bad ones.
    pub fn load(dir: &Path, trust: &Trust) -> Catalog {
        Catalog::load_with_record(dir, trust, None)
    }

    /// [`Catalog::load`], hashing again only the programs changed since the digests
    /// recorded in `record` by the last start ([`DigestCache::restore`]), and leaving the
    /// record for the next.
    pub fn load_with_record(dir: &Path, trust: &Trust, record: Option<&Path>) -> Catalog {
        let mut catalog = Catalog {
            dir: dir.to_owned(),
            ..Catalog::default()
        };
        let dirs = match executor_dirs(dir) {
            Ok(dirs) => dirs,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "executor catalog not readable; it is empty");
                return catalog;
            }
        };
        let dirs: Vec<PathBuf> = dirs
            .into_iter()
            .filter(|folder| {
                let disabled = folder.join(DISABLED_FILE).exists();
                if disabled {
                    tracing::info!(dir = %folder.display(), "executor disabled by the owner; not loaded");
                }
                !disabled
            })
            .collect();
        let programs = programs_named(&dirs, trust);
        if let Some(record) = record
            && let Err(e) = catalog.digests.restore(record, &programs)
        {
            tracing::warn!(error = %e, "the programs' digests recorded at the last start are not read; every program is hashed");
        }
        catalog.digests.warm(&programs);
        for folder in dirs {
            match load_one(&folder, trust, &catalog.digests) {
                Ok(executor) => {
                    let name = executor.manifest.name.clone();
                    if catalog.executors.contains_key(&name) {
                        catalog.refuse(
                            folder,
                            Some(name),
                            "another folder already holds an executor of this name".into(),
                        );
                        continue;
                    }
                    catalog.executors.insert(name, Arc::new(executor));
                }
                Err((name, reason)) => catalog.refuse(folder, name, reason),
            }
        }
        if let Some(record) = record
            && let Err(e) = catalog.digests.persist(record, &programs)
        {
            tracing::warn!(file = %record.display(), error = %e, "the programs' digests are not recorded for the next start");
        }
        if trust.is_empty() && !catalog.refused.is_empty() {
            tracing::warn!(
                "no trusted executor keys are configured ([executors.trusted_keys] or executors.trust_file)"
            );
        }
        tracing::info!(
            dir = %dir.display(),
            loaded = catalog.executors.len(),
            refused = catalog.refused.len(),
            "executor catalog loaded"
        );
        catalog
    }

    fn refuse(&mut self, dir: PathBuf, name: Option<String>, reason: String) {
        tracing::warn!(
            dir = %dir.display(),
            executor = name.as_deref().unwrap_or("?"),
            %reason,
            "executor refused"
        );
        self.refused.push(Refusal { dir, name, reason });
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn is_empty(&self) -> bool {
        self.executors.is_empty()
    }

    pub fn len(&self) -> usize {
        self.executors.len()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Executor>> {
        self.executors.get(name)
    }

    pub fn executors(&self) -> impl Iterator<Item = &Arc<Executor>> {
        self.executors.values()
    }

    pub fn refused(&self) -> &[Refusal] {
        &self.refused
    }

    pub(crate) fn digests(&self) -> &DigestCache {
        &self.digests
    }

    /// The checks a call passes before it may run: the executor exists, the args match
    /// its schema, and the target is inside its scope hints.
    pub fn check_call(
        &self,
        name: &str,
        args: &Value,
        user_home: &Path,
    ) -> Result<&Arc<Executor>, CallError> {
        if self.executors.is_empty() {
            return Err(CallError::EmptyCatalog);
        }
        let executor = self
            .executors
            .get(name)
            .ok_or_else(|| CallError::Unknown(name.chars().take(64).collect()))?;
        executor.check_args(args, user_home)?;
        Ok(executor)
    }
}

impl Executor {
    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// Schema validation and scope hints for `args`.
    pub fn check_args(&self, args: &Value, user_home: &Path) -> Result<(), CallError> {
        let problems: Vec<String> = self
            .validator
            .iter_errors(args)
            .take(5)
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_owned() } else { at };
                format!("{at}: {}", e.masked())
            })
            .collect();
        if !problems.is_empty() {
            return Err(CallError::Schema {
                executor: self.manifest.name.clone(),
                problems: problems.join("; "),
            });
        }
        let Some(target) = self
            .manifest
            .target_arg
            .as_deref()
            .and_then(|key| args.get(key))
            .and_then(Value::as_str)
        else {
            return Ok(());
        };
        let scope = &self.manifest.scope;
        if !scope.paths.is_empty() {
            PathScope::new(&scope.paths, user_home).check(target, user_home)?;
        }
        if !scope.hosts.is_empty() {
            check_url(target, &scope.hosts)?;
        }
        Ok(())
    }

    /// Opens the program after checking its digest again.
    pub fn open_program(&self, catalog: &Catalog) -> Result<std::fs::File, DigestError> {
        catalog
            .digests()
            .open_verified(&self.program, &self.manifest.program_sha256)
    }
}
