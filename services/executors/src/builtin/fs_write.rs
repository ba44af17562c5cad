//! `fs_write`: create, overwrite or append to a text file; creation and overwriting are
//! atomic (a temporary file in the same folder, then a link or a rename).

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

use super::{meta, required, scoped_path, string_arg};
use crate::observation::{ExecContext, Observation};

pub fn run(args: &Value, context: &ExecContext) -> Observation {
    match write(args, context) {
        Ok(observation) => observation,
        Err(error) => Observation::failure(error),
    }
}

fn temp_in(dir: &Path, content: &[u8]) -> std::io::Result<tempfile::NamedTempFile> {
    let mut temp = tempfile::Builder::new()
        .prefix(".metnos-write-")
        .tempfile_in(dir)?;
    temp.write_all(content)?;
    temp.as_file().sync_all()?;
    Ok(temp)
}

fn write(args: &Value, context: &ExecContext) -> Result<Observation, String> {
    let text = required(args, "path")?;
    let content = required(args, "content")?;
    let mode = string_arg(args, "mode")?.unwrap_or("create");
    if !matches!(mode, "create" | "overwrite" | "append") {
        return Err(format!(
            "mode `{}` is not one of create, overwrite, append",
            mode.chars().take(32).collect::<String>()
        ));
    }
    let path = scoped_path(text, context)?;
    if path.is_dir() {
        return Err(format!("{text} is a directory"));
    }
    let parent = path
        .parent()
        .ok_or_else(|| format!("{text} has no parent folder"))?;
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("cannot create the folder of {text}: {e}"))?;
    let existed = path.exists();
    match mode {
        "create" => {
            if existed {
                return Err(format!(
                    "{text} already exists (mode overwrite or append changes it)"
                ));
            }
            let temp = temp_in(parent, content.as_bytes())
                .map_err(|e| format!("cannot write {text}: {e}"))?;
            // A hard link does not replace: if someone created the file meanwhile, this fails.
            std::fs::hard_link(temp.path(), &path).map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => format!("{text} already exists"),
                _ => format!("cannot write {text}: {e}"),
            })?;
        }
        "overwrite" => {
            let temp = temp_in(parent, content.as_bytes())
                .map_err(|e| format!("cannot write {text}: {e}"))?;
            if let Ok(old) = std::fs::metadata(&path) {
                let _ = std::fs::set_permissions(temp.path(), old.permissions());
            }
            temp.persist(&path)
                .map_err(|e| format!("cannot write {text}: {}", e.error))?;
        }
        _ => {
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .map_err(|e| format!("cannot append to {text}: {e}"))?;
            file.write_all(content.as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| format!("cannot append to {text}: {e}"))?;
        }
    }
    Ok(Observation::success(
        format!("{} bytes written to {}", content.len(), path.display()),
        meta([
            ("path", json!(path.display().to_string())),
            ("bytes_written", json!(content.len())),
            ("mode", json!(mode)),
            ("created", json!(!existed)),
        ]),
    ))
}
