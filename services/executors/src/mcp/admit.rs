//! Admission of an MCP server's tools: what Metnos proposes for each (a capability of the
//! closed registry and the argument that is its target, read from the schema's argument
//! names — never from the server's hints, which it may lie in), and the manifest it writes
//! for each tool the owner enabled, pinning the definition shown to them. `metnos mcp add`
//! and `metnos mcp review` sign what this writes.

use std::path::{Path, PathBuf};

use metnos_core::capability::{Capability, TargetKind};
use serde_json::Value;

use super::pool::Launch;
use super::{ToolDefinition, model_name};
use crate::catalog::MANIFEST_FILE;
use crate::manifest::{Manifest, McpPin, Scope};

/// What the owner chose for one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub capability: String,
    pub target_arg: Option<String>,
}

const PATH_ARGS: &[&str] = &[
    "path",
    "file",
    "filename",
    "file_path",
    "filepath",
    "directory",
    "dir",
    "folder",
    "source",
    "destination",
];
const URL_ARGS: &[&str] = &["url", "uri", "href", "link", "endpoint"];
const MAIL_ARGS: &[&str] = &["to", "recipient", "recipients", "email"];
const WRITE_WORDS: &[&str] = &[
    "write", "create", "edit", "delete", "remove", "move", "rename", "update", "set", "put",
    "append", "save", "mkdir",
];

/// The argument names of `schema`'s top level, sorted.
fn arg_names(schema: &Value) -> Vec<String> {
    let mut names: Vec<String> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// What Metnos proposes for `tool`: a path argument is a file read (a write when the tool's
/// name or its hints say it changes something — hints only ever make it stricter), a URL argument a network call, a recipient a mail
/// sent — each asked per target —, anything else a program run, asked every time until
/// the owner says otherwise (a name is the server's to choose: it never lowers what is
/// asked). The annotations are shown to the owner and never used here.
pub fn propose(tool: &ToolDefinition) -> Choice {
    let names = arg_names(&tool.input_schema);
    let find = |wanted: &[&str]| {
        names
            .iter()
            .find(|n| wanted.contains(&n.to_ascii_lowercase().as_str()))
            .cloned()
    };
    let lower = tool.name.to_ascii_lowercase();
    // The server's own hints may only make the proposal stricter: a tool that says it
    // changes or destroys something writes; one that says it only reads is not believed.
    let hint = |key: &str| {
        tool.annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .and_then(Value::as_bool)
    };
    let says_it_writes =
        hint("readOnlyHint") == Some(false) || hint("destructiveHint") == Some(true);
    let writes = says_it_writes
        || lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| WRITE_WORDS.contains(&w));
    let (capability, target_arg) = if let Some(arg) = find(PATH_ARGS) {
        (if writes { "fs:write" } else { "fs:read" }, Some(arg))
    } else if let Some(arg) = find(URL_ARGS) {
        ("network:http", Some(arg))
    } else if let Some(arg) = find(MAIL_ARGS) {
        ("mail:send", Some(arg))
    } else {
        ("code:exec", None)
    };
    Choice {
        capability: capability.to_owned(),
        target_arg,
    }
}

/// The folders a server started by `program` needs to read, beyond the system's: the
/// installation `program` is part of (the folder above its `bin`, or the `node_modules`
/// an npm package lies in), and for a script the installation of its interpreter (a
/// virtual environment's Python lives elsewhere).
/// Proposed to the owner, who sees and may change them.
pub fn default_read(program: &Path) -> Vec<PathBuf> {
    let system = |p: &Path| {
        crate::builtin::shell_exec::sandbox::SYSTEM_READABLE
            .iter()
            .any(|root| p.starts_with(root))
    };
    let prefix = |p: &Path| -> Option<PathBuf> {
        // A package of npm's: its whole `node_modules` (its dependencies are beside it).
        if let Some(modules) = p
            .ancestors()
            .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
            .last()
        {
            return Some(modules.to_owned());
        }
        let dir = p.parent()?;
        let top = if dir.file_name().is_some_and(|n| n == "bin") {
            dir.parent()?
        } else {
            dir
        };
        Some(top.to_owned())
    };
    let mut found: Vec<PathBuf> = Vec::new();
    let mut add = |p: &Path| {
        if !system(p)
            && let Some(top) = prefix(p)
            && top != Path::new("/")
            && !found.iter().any(|f| top.starts_with(f))
        {
            found.retain(|f| !f.starts_with(&top));
            found.push(top);
        }
    };
    add(program);
    let real = program
        .canonicalize()
        .unwrap_or_else(|_| program.to_owned());
    add(&real);
    if let Some(interpreter) = shebang(&real) {
        add(&interpreter);
        if let Ok(resolved) = interpreter.canonicalize() {
            add(&resolved);
        }
    }
    found
}

/// The interpreter a script's first line names (through `/usr/bin/env`, found in the
/// system's program folders).
fn shebang(script: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = std::str::from_utf8(head.get(..n)?).ok()?.lines().next()?;
    let mut words = line.strip_prefix("#!")?.split_whitespace();
    let first = PathBuf::from(words.next()?);
    if first.file_name().is_some_and(|n| n == "env") {
        let name = words.find(|w| !w.starts_with('-'))?;
        return ["/usr/local/bin", "/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file());
    }
    Some(first)
}

/// Why a tool cannot be admitted as chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    #[error("`{0}` is not a capability of the registry")]
    Capability(String),
    #[error("{capability} has a target: name the argument that holds it (`{tool}` takes: {args})")]
    NoTarget {
        tool: String,
        capability: String,
        args: String,
    },
    #[error("`{arg}` is not an argument of `{tool}` (it takes: {args})")]
    UnknownArg {
        tool: String,
        arg: String,
        args: String,
    },
    #[error("`{0}` has no description: the model could not tell what it does")]
    NoDescription(String),
    #[error("`{0}` makes a name longer than a tool's name may be")]
    Name(String),
    #[error("the manifest of `{tool}` is not valid: {why}")]
    Manifest { tool: String, why: String },
}

/// The manifest of `tool` of `launch`'s server as `choice` says, unsigned (its program's
/// digest and signature are the signing's to record).
pub fn manifest_for(
    launch: &Launch,
    tool: &ToolDefinition,
    choice: &Choice,
) -> Result<Manifest, AdmitError> {
    let capability = Capability::parse(&choice.capability)
        .map_err(|_| AdmitError::Capability(choice.capability.clone()))?;
    let args = arg_names(&tool.input_schema);
    let listed = || {
        if args.is_empty() {
            "nothing".to_owned()
        } else {
            args.join(", ")
        }
    };
    // A capability asked about every time needs no target for its grants: a tool of it
    // may have none (the card shows its arguments).
    let spec = capability.spec();
    let needs_target = spec.target_kind != TargetKind::None
        && spec.default_approval != metnos_core::capability::DefaultApproval::Always;
    match &choice.target_arg {
        None if needs_target => {
            return Err(AdmitError::NoTarget {
                tool: tool.name.clone(),
                capability: choice.capability.clone(),
                args: listed(),
            });
        }
        Some(arg) if !args.contains(arg) => {
            return Err(AdmitError::UnknownArg {
                tool: tool.name.clone(),
                arg: arg.clone(),
                args: listed(),
            });
        }
        _ => {}
    }
    if tool.description.trim().is_empty() {
        return Err(AdmitError::NoDescription(tool.name.clone()));
    }
    let name = model_name(&launch.server, &tool.name)
        .ok_or_else(|| AdmitError::Name(tool.name.clone()))?;
    let affinity = tool
        .name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.len() > 2)
        .map(str::to_ascii_lowercase)
        .chain(std::iter::once(launch.server.clone()))
        .collect();
    let manifest = Manifest {
        name,
        description: tool.description.clone(),
        affinity,
        capabilities: vec![choice.capability.clone()],
        target_arg: if spec.target_kind == TargetKind::None {
            None
        } else {
            choice.target_arg.clone()
        },
        critical: capability.spec().critical,
        timeout_seconds: 30,
        max_output_bytes: 1024 * 1024,
        program: if launch.url.is_some() {
            String::new()
        } else {
            launch.program.display().to_string()
        },
        program_args: launch.args.clone(),
        program_sha256: String::new(),
        scope: Scope::default(),
        args: tool.input_schema.clone(),
        mcp: Some(McpPin {
            server: launch.server.clone(),
            tool: tool.name.clone(),
            definition_sha256: tool.sha256(),
            read: launch
                .read
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            url: launch.url.clone(),
            token_file: launch.token_file.as_ref().map(|p| p.display().to_string()),
        }),
    };
    let text = manifest_text(&manifest).map_err(|why| AdmitError::Manifest {
        tool: tool.name.clone(),
        why,
    })?;
    Manifest::parse(&text).map_err(|e| AdmitError::Manifest {
        tool: tool.name.clone(),
        why: e.to_string(),
    })
}

/// The manifest's TOML: `args` as a table, or as its JSON in a string when TOML cannot
/// hold it (a `null` in the schema).
pub fn manifest_text(manifest: &Manifest) -> Result<String, String> {
    if let Ok(text) = toml::to_string(manifest) {
        return Ok(text);
    }
    let mut as_string = manifest.clone();
    as_string.args = Value::String(manifest.args.to_string());
    toml::to_string(&as_string).map_err(|e| e.to_string())
}

/// The folder of `server`'s `tool` in the catalog `dir`: `mcp.<server>.<tool>`, the tool's
/// name as the model sees it after the server's.
pub fn tool_folder(dir: &Path, manifest: &Manifest) -> PathBuf {
    let pin = manifest.mcp.as_ref();
    let server = pin.map_or("", |p| p.server.as_str());
    let tool = manifest
        .name
        .strip_prefix(&format!("{server}__"))
        .unwrap_or(&manifest.name);
    dir.join(format!("mcp.{server}.{tool}"))
}

/// Writes `manifest` into its folder under the catalog `dir` (made 0700; an older signature
/// there removed: it covered another manifest). Returns the folder.
pub fn write(dir: &Path, manifest: &Manifest) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let folder = tool_folder(dir, manifest);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&folder)?;
    let text = manifest_text(manifest).map_err(std::io::Error::other)?;
    let _ = std::fs::remove_file(folder.join(crate::signing::SIGNATURE_FILE));
    std::fs::write(folder.join(MANIFEST_FILE), text)?;
    Ok(folder)
}

/// The catalog folders of `server`'s tools under `dir` (by their folder's name).
pub fn server_folders(dir: &Path, server: &str) -> Vec<PathBuf> {
    let prefix = format!("mcp.{server}.");
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, schema: Value) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: format!("{name} does things."),
            input_schema: schema,
            annotations: Some(json!({"readOnlyHint": true})),
        }
    }

    fn launch() -> Launch {
        Launch {
            server: "notes".into(),
            program: "/opt/notes/bin/notes-mcp".into(),
            args: vec!["--stdio".into()],
            program_sha256: String::new(),
            read: vec!["/opt/notes".into()],
            url: None,
            token_file: None,
        }
    }

    #[test]
    fn proposals_come_from_the_arguments_and_never_from_the_hints() {
        let path = json!({"type": "object", "properties": {"path": {"type": "string"}}});
        // readOnlyHint says read-only; the name says it writes: a write is proposed.
        assert_eq!(
            propose(&tool("write_file", path.clone())),
            Choice {
                capability: "fs:write".into(),
                target_arg: Some("path".into())
            }
        );
        assert_eq!(
            propose(&tool("read_file", path.clone())).capability,
            "fs:read"
        );
        // A hint that it changes things is believed (it only asks more).
        let mut tidy = tool("tidy_notes", path);
        tidy.annotations = Some(json!({"readOnlyHint": false, "destructiveHint": true}));
        assert_eq!(propose(&tidy).capability, "fs:write");
        let url = json!({"type": "object", "properties": {"url": {"type": "string"}}});
        assert_eq!(propose(&tool("fetch", url)).capability, "network:http");
        // A name says nothing Metnos trusts: a clock tool is asked about until the owner
        // chooses time:read.
        let tz = json!({"type": "object", "properties": {"timezone": {"type": "string"}}});
        assert_eq!(
            propose(&tool("get_current_time", tz)).capability,
            "code:exec"
        );
        let other = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        assert_eq!(propose(&tool("do_magic", other)).capability, "code:exec");
    }

    #[test]
    fn a_manifest_pins_the_definition_and_refuses_a_bad_choice() {
        let schema = json!({"type": "object", "properties": {"path": {"type": "string"},
            "limit": {"type": ["integer", "null"], "default": null}}});
        let t = tool("Read-File", schema.clone());
        let choice = propose(&t);
        let m = manifest_for(&launch(), &t, &choice).unwrap();
        assert_eq!(m.name, "notes__read_file");
        assert_eq!(m.target_arg.as_deref(), Some("path"));
        let pin = m.mcp.as_ref().unwrap();
        assert_eq!(pin.definition_sha256, t.sha256());
        assert_eq!(pin.read, ["/opt/notes"]);
        // The schema's null survives the TOML (as JSON in a string).
        let text = manifest_text(&m).unwrap();
        assert_eq!(Manifest::parse(&text).unwrap().args, schema);
        assert_eq!(
            tool_folder(Path::new("/c"), &m),
            Path::new("/c/mcp.notes.read_file")
        );

        let no_target = Choice {
            capability: "fs:read".into(),
            target_arg: None,
        };
        let err = manifest_for(&launch(), &t, &no_target).unwrap_err();
        assert_eq!(
            err.to_string(),
            "fs:read has a target: name the argument that holds it (`Read-File` takes: limit, path)"
        );
        let wrong = Choice {
            capability: "fs:read".into(),
            target_arg: Some("file".into()),
        };
        assert!(matches!(
            manifest_for(&launch(), &t, &wrong),
            Err(AdmitError::UnknownArg { .. })
        ));
        let unknown = Choice {
            capability: "root:all".into(),
            target_arg: None,
        };
        assert_eq!(
            manifest_for(&launch(), &t, &unknown)
                .unwrap_err()
                .to_string(),
            "`root:all` is not a capability of the registry"
        );
    }
}
