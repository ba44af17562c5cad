//! `fs_read`: a text file, whole or its head or tail.

use std::io::{Read, Seek, SeekFrom};

use serde_json::{Value, json};

use super::{BuiltinError, count_arg, decode_text, meta, required, scoped_path};
use crate::observation::{ExecContext, Observation};

/// What is returned when the call names no limit.
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024;

pub fn run(args: &Value, context: &ExecContext) -> Observation {
    match read(args, context) {
        Ok(observation) => observation,
        Err(error) => Observation::failure(error.to_string()),
    }
}

fn read(args: &Value, context: &ExecContext) -> Result<Observation, BuiltinError> {
    let text = required(args, "path")?;
    let head = count_arg(args, "head_bytes")?;
    let tail = count_arg(args, "tail_bytes")?;
    if head.is_some() && tail.is_some() {
        return Err("give head_bytes or tail_bytes, not both".into());
    }
    // Half the output cap leaves room for the JSON around the text.
    let ceiling = (context.max_output_bytes / 2).max(1);
    let max = count_arg(args, "max_bytes")?
        .unwrap_or(DEFAULT_MAX_BYTES)
        .min(ceiling);
    let path = scoped_path(text, context, metnos_core::forbidden::Access::Read)?;
    // The checked path, opened with no link on the way: what is read is what was judged.
    let (mut file, opened) =
        crate::open::open_file_to_read(&path, text, &super::linked_files_place(context)).map_err(
            |e| match e {
                crate::open::OpenError::Directory(_) => format!("{e} (fs_list lists it)"),
                e => e.to_string(),
            },
        )?;
    let size = opened.size;
    let (start, wanted, what) = match (head, tail) {
        (Some(n), _) => (0, n.min(max), "head"),
        (_, Some(n)) => {
            let n = n.min(max);
            (size.saturating_sub(n), n, "tail")
        }
        _ => (0, max, "whole"),
    };
    file.seek(SeekFrom::Start(start))
        .map_err(|e| format!("cannot read {text}: {e}"))?;
    let mut bytes = Vec::with_capacity(usize::try_from(wanted.min(size)).unwrap_or(0));
    file.take(wanted)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {text}: {e}"))?;
    let mut skipped = 0;
    if what == "tail" {
        // Do not start inside a UTF-8 character.
        while skipped < 3 && bytes.get(skipped).is_some_and(|b| b & 0xC0 == 0x80) {
            skipped += 1;
        }
    }
    let cut = (start + bytes.len() as u64) < size;
    let Some((content, encoding)) = decode_text(&bytes[skipped..], cut) else {
        return Err(
            format!("{text} is a binary file ({size} bytes); fs_read returns text only").into(),
        );
    };
    let returned = bytes.len() - skipped;
    let truncated = (returned as u64) < size && what == "whole";
    Ok(Observation::success(
        content,
        meta([
            ("path", json!(path.display().to_string())),
            ("size", json!(size)),
            ("bytes_returned", json!(returned)),
            ("encoding", json!(encoding)),
            ("part", json!(what)),
            ("truncated", json!(truncated)),
        ]),
    ))
}
