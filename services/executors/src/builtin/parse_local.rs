//! `parse_local`: JSON, CSV or HTML (a file or a string) turned into plain text.

use serde_json::{Value, json};

use super::{BuiltinError, count_arg, meta, scoped_path, string_arg};
use crate::observation::{ExecContext, Observation};

/// The largest input read.
pub const MAX_INPUT_BYTES: u64 = 8 * 1024 * 1024;
const DEFAULT_MAX_ROWS: u64 = 500;

pub fn run(args: &Value, context: &ExecContext) -> Observation {
    match parse(args, context) {
        Ok(observation) => observation,
        Err(error) => Observation::failure(error.to_string()),
    }
}

fn format_of(
    format: Option<&str>,
    path: Option<&str>,
    input: &str,
) -> Result<&'static str, BuiltinError> {
    if let Some(format) = format {
        return match format.to_ascii_lowercase().as_str() {
            "json" => Ok("json"),
            "csv" => Ok("csv"),
            "html" | "htm" => Ok("html"),
            other => Err(format!(
                "format `{}` is not one of json, csv, html",
                other.chars().take(32).collect::<String>()
            )
            .into()),
        };
    }
    if let Some(ext) = path
        .and_then(|p| std::path::Path::new(p).extension())
        .and_then(|e| e.to_str())
    {
        match ext.to_ascii_lowercase().as_str() {
            "json" => return Ok("json"),
            "csv" | "tsv" => return Ok("csv"),
            "html" | "htm" | "xhtml" => return Ok("html"),
            _ => {}
        }
    }
    let start = input.trim_start();
    if start.starts_with('{') || start.starts_with('[') {
        Ok("json")
    } else if start.starts_with('<') {
        Ok("html")
    } else if start
        .lines()
        .next()
        .is_some_and(|l| l.contains(',') || l.contains('\t'))
    {
        Ok("csv")
    } else {
        Err("cannot tell the format; say format = json, csv or html".into())
    }
}

fn parse(args: &Value, context: &ExecContext) -> Result<Observation, BuiltinError> {
    let path = string_arg(args, "path")?;
    let text = string_arg(args, "text")?;
    let (input, source) = match (path, text) {
        (Some(_), Some(_)) => return Err("give path or text, not both".into()),
        (None, None) => return Err("give path (a file) or text (the data itself)".into()),
        (None, Some(text)) => (text.to_owned(), "text".to_owned()),
        (Some(p), None) => {
            let real = scoped_path(p, context, metnos_core::forbidden::Access::Read)?;
            let (file, opened) =
                crate::open::open_file_to_read(&real, p, &super::linked_files_place(context))?;
            if opened.size > MAX_INPUT_BYTES {
                return Err(format!(
                    "{p} is {} bytes; parse_local reads at most {MAX_INPUT_BYTES}",
                    opened.size
                )
                .into());
            }
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_INPUT_BYTES), &mut bytes)
                .map_err(|e| format!("cannot read {p}: {e}"))?;
            let (text, _) = super::decode_text(&bytes, false)
                .ok_or_else(|| format!("{p} is a binary file, not JSON, CSV or HTML"))?;
            (text, real.display().to_string())
        }
    };
    let format = format_of(string_arg(args, "format")?, path, &input)?;
    let max_rows = count_arg(args, "max_rows")?
        .unwrap_or(DEFAULT_MAX_ROWS)
        .max(1);
    let (content, mut details) = match format {
        "json" => {
            let value: Value =
                serde_json::from_str(&input).map_err(|e| format!("not valid JSON: {e}"))?;
            let text = serde_json::to_string_pretty(&value).unwrap_or_default();
            (text, serde_json::Map::new())
        }
        "csv" => csv_text(&input, max_rows, path.is_some_and(|p| p.ends_with(".tsv")))?,
        _ => {
            let text = html2text::from_read(input.as_bytes(), 100)
                .map_err(|e| format!("cannot read the HTML: {e}"))?;
            (text, serde_json::Map::new())
        }
    };
    details.extend(meta([
        ("format", json!(format)),
        ("source", json!(source)),
        ("input_bytes", json!(input.len())),
    ]));
    Ok(Observation::success(content, details))
}

fn csv_text(
    input: &str,
    max_rows: u64,
    tabs: bool,
) -> Result<(String, serde_json::Map<String, Value>), BuiltinError> {
    let delimiter =
        if tabs || (!input.lines().next().unwrap_or("").contains(',') && input.contains('\t')) {
            b'\t'
        } else {
            b','
        };
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .flexible(false)
        .from_reader(input.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| format!("malformed CSV: {e}"))?
        .clone();
    let mut out = headers.iter().collect::<Vec<_>>().join(" | ");
    out.push('\n');
    let mut rows = 0u64;
    let mut truncated = false;
    for record in reader.records() {
        let record = record.map_err(|e| match e.kind() {
            csv::ErrorKind::UnequalLengths {
                pos,
                expected_len,
                len,
            } => format!(
                "malformed CSV: line {} has {len} fields, the header has {expected_len}",
                pos.as_ref().map_or(0, csv::Position::line)
            ),
            _ => format!("malformed CSV: {e}"),
        })?;
        if rows >= max_rows {
            truncated = true;
            continue;
        }
        out.push_str(&record.iter().collect::<Vec<_>>().join(" | "));
        out.push('\n');
        rows += 1;
    }
    let columns = headers.len();
    Ok((
        out,
        meta([
            ("rows", json!(rows)),
            ("columns", json!(columns)),
            ("truncated", json!(truncated)),
        ]),
    ))
}
