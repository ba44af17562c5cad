//! The scratchpad (seed agent_runtime.md ch. 8): an observation over the threshold is
//! stored whole; the LLM sees its head and tail and reads more with `scratchpad_read`
//! (a byte range, a line range, or the lines holding a substring).

use metnos_executors::Observation;
use metnos_kit::time::now_ms;
use metnos_llm::ToolDef;
use serde_json::{Value, json};

use crate::store::{ScratchEntry, Store};

/// The builtin's tool name.
pub const TOOL: &str = metnos_core::names::tools::SCRATCHPAD_READ;
const HEAD: usize = 500;
const TAIL: usize = 500;
/// The most one `scratchpad_read` returns.
pub const MAX_READ: usize = 4000;

pub fn tool_def() -> ToolDef {
    ToolDef {
        name: TOOL.to_owned(),
        description: "Read more of a large observation stored in the scratchpad: a byte range \
                      (offset, length; the answer's metadata gives next_offset until the end), a \
                      line range (line_start, line_end, 1-based), or the lines containing a \
                      substring (search)."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "required": ["id"],
            "properties": {
                "id": {"type": "string", "description": "The scratchpad_id"},
                "offset": {"type": "integer", "minimum": 0},
                "length": {"type": "integer", "minimum": 1, "maximum": MAX_READ},
                "line_start": {"type": "integer", "minimum": 1},
                "line_end": {"type": "integer", "minimum": 1},
                "search": {"type": "string", "minLength": 1}
            }
        }),
    }
}

/// The first 500 and last 500 characters, with what was left out in between.
pub fn summary(text: &str) -> String {
    let count = text.chars().count();
    if count <= HEAD + TAIL {
        return text.to_owned();
    }
    let head: String = text.chars().take(HEAD).collect();
    let tail: String = text.chars().skip(count - TAIL).collect();
    format!(
        "{head}\n\n[... {} characters omitted ...]\n\n{tail}",
        count - HEAD - TAIL
    )
}

fn text_of(observation: &Observation) -> (String, &'static str) {
    match &observation.content {
        Some(Value::String(text)) => (text.clone(), "text"),
        Some(other) => (
            serde_json::to_string_pretty(other).unwrap_or_default(),
            "json",
        ),
        None => (observation.error.clone().unwrap_or_default(), "text"),
    }
}

/// Stores a large observation; the synthetic observation the LLM sees instead.
pub async fn store(
    store: &Store,
    turn_id: &str,
    step: u32,
    observation: &Observation,
    size: u64,
) -> Result<Value, sqlx::Error> {
    let id = metnos_kit::random::hex(8);
    let (content, kind) = text_of(observation);
    let entry = ScratchEntry {
        id: id.clone(),
        turn_id: turn_id.to_owned(),
        step,
        kind: kind.to_owned(),
        content: content.clone(),
        observation: serde_json::to_string(observation).unwrap_or_default(),
        size_bytes: size,
    };
    store.put_scratch(&entry, now_ms()).await?;
    Ok(json!({
        "ok": observation.ok,
        "scratchpad_id": id,
        "size_bytes": size,
        "kind": kind,
        "summary": summary(&content),
        "metadata": observation.metadata.clone().unwrap_or_default(),
    }))
}

/// `scratchpad_read`.
pub async fn read(store: &Store, turn_id: &str, args: &Value) -> Observation {
    let Some(id) = args.get("id").and_then(Value::as_str) else {
        return Observation::failure("`id` (the scratchpad_id) is required");
    };
    let entry = match store.get_scratch(turn_id, id).await {
        Ok(Some(entry)) => entry,
        Ok(None) => {
            return Observation::failure(format!(
                "no scratchpad entry `{}` in this turn",
                id.chars().take(40).collect::<String>()
            ));
        }
        Err(e) => return Observation::failure(format!("the scratchpad is unavailable: {e}")),
    };
    let text = entry.content;
    let number = |key: &str| args.get(key).and_then(Value::as_u64);
    let mut meta = serde_json::Map::new();
    meta.insert("id".into(), json!(id));
    meta.insert("size_bytes".into(), json!(text.len()));
    if let Some(needle) = args.get("search").and_then(Value::as_str) {
        let lower = needle.to_lowercase();
        let hits: Vec<String> = text
            .lines()
            .enumerate()
            .filter(|(_, line)| line.to_lowercase().contains(&lower))
            .map(|(i, line)| format!("{}: {line}", i + 1))
            .take(50)
            .collect();
        meta.insert("matches".into(), json!(hits.len()));
        let mut out = hits.join("\n");
        truncate_chars(&mut out, MAX_READ);
        return Observation::success(out, meta);
    }
    if number("line_start").is_some() || number("line_end").is_some() {
        let start = number("line_start").unwrap_or(1).max(1) as usize;
        let end = number("line_end")
            .map_or(start + 100, |e| e as usize)
            .max(start);
        let mut out: String = text
            .lines()
            .skip(start - 1)
            .take(end - start + 1)
            .collect::<Vec<_>>()
            .join("\n");
        truncate_chars(&mut out, MAX_READ);
        meta.insert("lines".into(), json!([start, end]));
        meta.insert("total_lines".into(), json!(text.lines().count()));
        return Observation::success(out, meta);
    }
    let offset = number("offset").unwrap_or(0) as usize;
    let length = (number("length").unwrap_or(MAX_READ as u64) as usize).min(MAX_READ);
    // Byte offsets, moved to the nearest character boundaries.
    let mut start = offset.min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (start + length).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    meta.insert("offset".into(), json!(start));
    meta.insert("length".into(), json!(end - start));
    // Where the next page starts, until the end.
    if end < text.len() {
        meta.insert("next_offset".into(), json!(end));
    }
    Observation::success(text[start..end].to_owned(), meta)
}

fn truncate_chars(text: &mut String, max: usize) {
    if let Some((cut, _)) = text.char_indices().nth(max) {
        text.truncate(cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_keeps_head_and_tail_and_counts_the_rest() {
        let text = format!(
            "{}{}{}",
            "a".repeat(500),
            "b".repeat(13_144),
            "c".repeat(500)
        );
        let s = summary(&text);
        assert!(s.starts_with(&"a".repeat(500)));
        assert!(s.ends_with(&"c".repeat(500)));
        assert!(s.contains("[... 13144 characters omitted ...]"));
        assert_eq!(summary("short"), "short");
    }
}
