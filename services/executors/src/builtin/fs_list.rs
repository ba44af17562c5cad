//! `fs_list`: the entries of a folder, optionally filtered by a glob and recursive, up
//! to a cap. Symbolic links are listed, never followed.

use serde_json::{Value, json};

use super::{BuiltinError, count_arg, meta, required, scoped_path, string_arg};
use crate::observation::{ExecContext, Observation};

pub const DEFAULT_MAX_ENTRIES: u64 = 200;
pub const MAX_ENTRIES: u64 = 5000;

pub fn run(args: &Value, context: &ExecContext) -> Observation {
    match list(args, context) {
        Ok(observation) => observation,
        Err(error) => Observation::failure(error.to_string()),
    }
}

fn list(args: &Value, context: &ExecContext) -> Result<Observation, BuiltinError> {
    let text = required(args, "path")?;
    let recursive = match args.get("recursive") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("`recursive` must be true or false".into()),
    };
    let max = count_arg(args, "max_entries")?
        .unwrap_or(DEFAULT_MAX_ENTRIES)
        .clamp(1, MAX_ENTRIES);
    let glob = match string_arg(args, "glob")? {
        Some(pattern) => Some(
            globset::GlobBuilder::new(pattern)
                .literal_separator(false)
                .build()
                .map_err(|e| format!("glob `{pattern}` is not valid: {e}"))?
                .compile_matcher(),
        ),
        None => None,
    };
    let root = scoped_path(text, context, metnos_core::forbidden::Access::Read)?;
    let meta_data = std::fs::metadata(&root).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("no such folder: {text}"),
        _ => format!("cannot list {text}: {e}"),
    })?;
    if !meta_data.is_dir() {
        return Err(format!("{text} is a file, not a folder (fs_read reads it)").into());
    }
    // Metnos's own folders are not listed (their names and sizes are its business), nor
    // walked into.
    let forbidden = crate::scope::real_roots(&context.forbidden);
    let workspace = super::workspace(context);
    let walker = walkdir::WalkDir::new(&root)
        .min_depth(1)
        .max_depth(if recursive { 64 } else { 1 })
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            !crate::scope::is_forbidden(e.path(), &forbidden, &workspace)
                && metnos_core::forbidden::first_match(
                    &e.path().to_string_lossy(),
                    metnos_core::forbidden::Access::Read,
                )
                .is_none()
        });
    let mut entries = Vec::new();
    let mut truncated = false;
    let mut unreadable = 0u64;
    for entry in walker {
        let entry = match entry {
            Ok(entry) => entry,
            Err(_) => {
                unreadable += 1;
                continue;
            }
        };
        let relative = entry
            .path()
            .strip_prefix(&root)
            .unwrap_or(entry.path())
            .to_string_lossy()
            .into_owned();
        if glob
            .as_ref()
            .is_some_and(|g| !g.is_match(&relative) && !g.is_match(entry.file_name()))
        {
            continue;
        }
        if entries.len() as u64 >= max {
            truncated = true;
            break;
        }
        let file_type = entry.file_type();
        let kind = if file_type.is_symlink() {
            "symlink"
        } else if file_type.is_dir() {
            "dir"
        } else {
            "file"
        };
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        entries.push(json!({"name": relative, "kind": kind, "size": size}));
    }
    let count = entries.len();
    Ok(Observation::success(
        Value::Array(entries),
        meta([
            ("path", json!(root.display().to_string())),
            ("count", json!(count)),
            ("truncated", json!(truncated)),
            ("unreadable", json!(unreadable)),
        ]),
    ))
}
