//! TELOS.md (seed telos.md ch. 2): a person's declared ends, Markdown with a YAML
//! front-matter, signed with HMAC-SHA256 under a key of its own and chained to the version
//! it replaced.
//!
//! ```text
//! ---
//! telos_version: 1.1
//! written_at: 2026-04-25T12:00:00+02:00
//! written_by: roberto
//! previous_hash: genesis            # or the sha256 of the version this one replaced
//! signature: <hex HMAC-SHA256>
//! ---
//! # My ultimate ends
//! ## t.tempo — Free my time from repetitive chores
//! weight: 0.22
//! activation_threshold: 0.30
//! notes: if something frees at least 30 minutes/week and I can trust it,
//! consider proposing it.
//! ```
//!
//! The front-matter is read by a YAML parser (saphyr), the sections found by a Markdown
//! parser (pulldown-cmark: a `##` inside a code block is not a section); every error names
//! the line. The signature covers the canonical file: every line but the `signature:` one,
//! `\r` and trailing blanks dropped — so a file that went through a Windows editor still
//! verifies, and any change of a word does not.
//!
//! The versions a file replaced live in `.audit/<sha256>.md` beside it; [`verify_chain`]
//! walks them back to `genesis`.

use std::path::{Path, PathBuf};

pub use super::key::{KeyError, TelosKey, key_path};

use pulldown_cmark::{Event, HeadingLevel, Parser, Tag};
use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};
use sha2::{Digest, Sha256};

/// The telos that stands against silent retreat (seed ch. 5).
pub const NON_RETREAT: &str = "t.coltivazione_strumenti";
/// The file's name.
pub const FILE_NAME: &str = "TELOS.md";
/// Where the versions a file replaced are kept, beside it.
pub const AUDIT_DIR: &str = ".audit";
/// The first version's `previous_hash`.
pub const GENESIS: &str = "genesis";
/// A TELOS.md larger than this is refused (a few lines are expected).
pub const MAX_BYTES: usize = 256 * 1024;
/// Telos per file at most.
pub const MAX_TELOS: usize = 64;

/// One declared end.
#[derive(Debug, Clone, PartialEq)]
pub struct Telos {
    /// `t.<slug>`.
    pub id: String,
    pub phrase: String,
    /// After renormalisation to a sum of 1.
    pub weight: f64,
    pub activation_threshold: f64,
    pub notes: String,
    pub is_non_retreat: bool,
    /// The heading's line.
    pub line: usize,
}

/// The front-matter's fields.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Front {
    pub telos_version: String,
    pub written_at: String,
    pub written_by: String,
    pub previous_hash: String,
    /// Hex; empty when the file is not signed.
    pub signature: String,
}

/// A parsed TELOS.md (its signature not yet checked).
#[derive(Debug, Clone, PartialEq)]
pub struct TelosFile {
    pub front: Front,
    pub telos: Vec<Telos>,
    /// E.g. the weights were renormalised.
    pub warnings: Vec<String>,
    /// sha256 of the file's bytes, hex: the version other versions chain to.
    pub version: String,
    /// The text that is signed.
    pub canonical: String,
}

/// What is wrong with a TELOS.md.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FileError {
    /// `TelosFileMalformed`.
    #[error("TELOS.md line {line}: {message}")]
    Malformed { line: usize, message: String },
    /// `TelosSignatureInvalid`.
    #[error("TELOS.md signature invalid: {0}")]
    SignatureInvalid(String),
    #[error("TELOS.md cannot be read: {0}")]
    Unreadable(String),
}

fn malformed(line: usize, message: impl Into<String>) -> FileError {
    FileError::Malformed {
        line,
        message: message.into(),
    }
}

/// Hex sha256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The 1-based line of byte `offset` in `text`.
fn line_at(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

const FRONT_KEYS: &[&str] = &[
    "telos_version",
    "written_at",
    "written_by",
    "previous_hash",
    "signature",
];

/// A front-matter scalar as text (`1.1` stays `1.1`).
fn scalar_text(node: &MarkedYaml<'_>) -> Option<String> {
    match &node.data {
        YamlData::Value(Scalar::String(s)) => Some(s.to_string()),
        YamlData::Value(Scalar::Integer(i)) => Some(i.to_string()),
        YamlData::Value(Scalar::FloatingPoint(f)) => Some(f.to_string()),
        YamlData::Value(Scalar::Boolean(b)) => Some(b.to_string()),
        _ => None,
    }
}

/// Parses `text`. `Err` names the line of the first problem.
pub fn parse(text: &str) -> Result<TelosFile, FileError> {
    if text.len() > MAX_BYTES {
        return Err(malformed(
            1,
            format!("the file is larger than {} KiB", MAX_BYTES / 1024),
        ));
    }
    if let Some(at) = text
        .as_bytes()
        .windows(2)
        .position(|w| w[0] == b'\r' && w[1] != b'\n')
        .or_else(|| text.ends_with('\r').then(|| text.len() - 1))
    {
        return Err(malformed(
            line_at(text, at),
            "a carriage return that does not end a line",
        ));
    }
    // Control characters (but tab and line ends) and bidirectional overrides: a file shown
    // in a terminal or a diff must read as it is.
    if let Some((at, c)) = text.char_indices().find(|(_, c)| {
        (c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    }) {
        return Err(malformed(
            line_at(text, at),
            format!("a control or direction character (U+{:04X})", u32::from(c)),
        ));
    }
    let body_text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let bom = text.len() - body_text.len();
    // The front-matter: between a first line `---` and the next line `---`.
    let mut lines = body_text.split_inclusive('\n');
    if lines.next().map(|l| l.trim_end()) != Some("---") {
        return Err(malformed(
            1,
            "the file must start with a `---` line (the YAML front-matter)",
        ));
    }
    let front_start = body_text.find('\n').map_or(body_text.len(), |i| i + 1);
    let mut offset = front_start;
    let mut front_end = None;
    for line in lines {
        if line.trim_end() == "---" {
            front_end = Some((offset, offset + line.len()));
            break;
        }
        offset += line.len();
    }
    let Some((front_end, body_start)) = front_end else {
        return Err(malformed(1, "the front-matter has no closing `---` line"));
    };
    let front_text = &body_text[front_start..front_end];
    let (front, signature_line) = parse_front(front_text)?;

    let body = &body_text[body_start..];
    let body_line = line_at(body_text, body_start);
    let (telos, warnings) = parse_sections(body, body_line)?;
    Ok(TelosFile {
        front,
        telos,
        warnings,
        version: sha256_hex(text.as_bytes()),
        canonical: canonical(&text[bom..], signature_line),
    })
}

/// The front-matter's fields, and the file line of `signature:` if present.
fn parse_front(front_text: &str) -> Result<(Front, Option<usize>), FileError> {
    // Front-matter lines start at file line 2.
    let docs = MarkedYaml::load_from_str(front_text).map_err(|e| {
        malformed(
            e.marker().line() + 1,
            format!("the front-matter is not YAML: {}", e.info()),
        )
    })?;
    let Some(doc) = docs.first() else {
        return Err(malformed(2, "the front-matter is empty"));
    };
    let YamlData::Mapping(map) = &doc.data else {
        return Err(malformed(
            doc.span.start.line() + 1,
            "the front-matter must be `key: value` lines",
        ));
    };
    let mut front = Front::default();
    let mut signature_line = None;
    for (key, value) in map {
        let line = key.span.start.line() + 1;
        let Some(name) = scalar_text(key) else {
            return Err(malformed(line, "a front-matter key must be a word"));
        };
        if !FRONT_KEYS.contains(&name.as_str()) {
            return Err(malformed(
                line,
                format!(
                    "unknown front-matter key `{name}` (known: {})",
                    FRONT_KEYS.join(", ")
                ),
            ));
        }
        let text = if matches!(value.data, YamlData::Value(Scalar::Null)) {
            String::new()
        } else {
            scalar_text(value)
                .ok_or_else(|| malformed(line, format!("`{name}` must be a single value")))?
        };
        if value.span.end.line() != value.span.start.line() && !text.is_empty() {
            return Err(malformed(line, format!("`{name}` must fit on its line")));
        }
        match name.as_str() {
            "telos_version" => front.telos_version = text,
            "written_at" => front.written_at = text,
            "written_by" => front.written_by = text,
            "previous_hash" => front.previous_hash = text,
            _ => {
                front.signature = text;
                signature_line = Some(line);
            }
        }
    }
    let line_of = |wanted: &str| {
        map.keys()
            .find(|k| scalar_text(k).as_deref() == Some(wanted))
            .map_or(2, |k| k.span.start.line() + 1)
    };
    for (name, value) in [
        ("telos_version", &front.telos_version),
        ("written_at", &front.written_at),
        ("written_by", &front.written_by),
        ("previous_hash", &front.previous_hash),
    ] {
        if value.is_empty() {
            return Err(malformed(
                line_of(name),
                format!("the front-matter needs `{name}`"),
            ));
        }
    }
    if front.written_at.parse::<jiff::Timestamp>().is_err() {
        return Err(malformed(
            line_of("written_at"),
            format!(
                "`written_at` is not a date and time with its offset (e.g. 2026-04-25T12:00:00+02:00): `{}`",
                front.written_at
            ),
        ));
    }
    if front.previous_hash != GENESIS && !is_sha256(&front.previous_hash) {
        return Err(malformed(
            line_of("previous_hash"),
            "`previous_hash` must be `genesis` or a sha256 (64 hex digits)",
        ));
    }
    Ok((front, signature_line))
}

fn is_sha256(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The telos sections of the body; `first_line` is the body's first file line.
fn parse_sections(body: &str, first_line: usize) -> Result<(Vec<Telos>, Vec<String>), FileError> {
    // The headings, by the Markdown parser: (level, text, byte range).
    let mut headings: Vec<(HeadingLevel, String, std::ops::Range<usize>)> = Vec::new();
    let mut open: Option<(HeadingLevel, String, usize)> = None;
    for (event, range) in Parser::new(body).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                open = Some((level, String::new(), range.start))
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, text, _)) = &mut open {
                    text.push_str(&t);
                }
            }
            Event::End(pulldown_cmark::TagEnd::Heading(_)) => {
                if let Some((level, text, start)) = open.take() {
                    headings.push((level, text, start..range.end));
                }
            }
            _ => {}
        }
    }
    let file_line = |offset: usize| first_line + line_at(body, offset) - 1;
    let mut telos: Vec<Telos> = Vec::new();
    for (i, (level, text, range)) in headings.iter().enumerate() {
        let line = file_line(range.start);
        match level {
            HeadingLevel::H1 => continue,
            HeadingLevel::H2 => {}
            _ => {
                return Err(malformed(
                    line,
                    "only `#` (a title) and `## t.<slug> — <sentence>` headings are allowed",
                ));
            }
        }
        let (id, phrase) = split_heading(text).ok_or_else(|| {
            malformed(
                line,
                format!("a section heading must be `## t.<slug> — <sentence>`, got `{text}`"),
            )
        })?;
        if telos.iter().any(|t| t.id == id) {
            return Err(malformed(line, format!("`{id}` is declared twice")));
        }
        if telos.len() == MAX_TELOS {
            return Err(malformed(line, format!("more than {MAX_TELOS} telos")));
        }
        let end = headings
            .get(i + 1)
            .map_or(body.len(), |(_, _, next)| next.start);
        let section = &body[range.end..end];
        let section_line = file_line(range.end);
        let (weight, threshold, notes) = parse_fields(section, section_line, line, &id)?;
        telos.push(Telos {
            is_non_retreat: id == NON_RETREAT,
            id,
            phrase,
            weight,
            activation_threshold: threshold,
            notes,
            line,
        });
    }
    if telos.is_empty() {
        return Err(malformed(
            first_line,
            "no telos declared: add a `## t.<slug> — <sentence>` section",
        ));
    }
    let sum: f64 = telos.iter().map(|t| t.weight).sum();
    if sum <= 0.0 {
        return Err(malformed(
            telos[0].line,
            "the weights sum to 0: give at least one telos a weight",
        ));
    }
    let mut warnings = Vec::new();
    if (sum - 1.0).abs() > 1e-9 {
        warnings.push(format!("the weights sum to {sum:.4}, not 1: renormalised"));
        for t in &mut telos {
            t.weight /= sum;
        }
    }
    Ok((telos, warnings))
}

/// `t.<slug> — <sentence>` (an em dash, an en dash or a hyphen between spaces).
fn split_heading(text: &str) -> Option<(String, String)> {
    let text = text.trim();
    let (id, phrase) = [" — ", " – ", " - "]
        .iter()
        .find_map(|dash| text.split_once(dash))?;
    let slug = id.trim().strip_prefix("t.")?;
    let slug_ok = !slug.is_empty()
        && slug.len() <= 64
        && slug
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    let phrase = phrase.trim();
    (slug_ok && !phrase.is_empty()).then(|| (id.trim().to_owned(), phrase.to_owned()))
}

/// `weight:`, `activation_threshold:` and `notes:` (which runs on over the next lines) of
/// one section.
fn parse_fields(
    section: &str,
    first_line: usize,
    heading_line: usize,
    id: &str,
) -> Result<(f64, f64, String), FileError> {
    let mut weight = None;
    let mut threshold = None;
    let mut notes: Option<Vec<&str>> = None;
    let mut in_notes = false;
    for (n, raw) in section.lines().enumerate() {
        let line = first_line + n;
        let trimmed = raw.trim();
        let field = trimmed
            .split_once(':')
            .filter(|(key, _)| matches!(key.trim(), "weight" | "activation_threshold" | "notes"));
        match field {
            Some((key, value)) => {
                let key = key.trim();
                let value = value.trim();
                let number = |what: &str| -> Result<f64, FileError> {
                    value
                        .parse::<f64>()
                        .ok()
                        .filter(|v| (0.0..=1.0).contains(v))
                        .ok_or_else(|| {
                            malformed(
                                line,
                                format!(
                                    "`{what}` of {id} must be a number from 0 to 1, got `{value}`"
                                ),
                            )
                        })
                };
                let duplicate = match key {
                    "weight" => weight.replace(number("weight")?).is_some(),
                    "activation_threshold" => {
                        threshold.replace(number("activation_threshold")?).is_some()
                    }
                    _ => notes.replace(vec![value]).is_some(),
                };
                if duplicate {
                    return Err(malformed(line, format!("`{key}` of {id} is given twice")));
                }
                in_notes = key == "notes";
            }
            None if trimmed.is_empty() => {
                if in_notes && let Some(notes) = &mut notes {
                    notes.push("");
                }
            }
            None if in_notes => {
                if let Some(notes) = &mut notes {
                    notes.push(raw.trim_end());
                }
            }
            None => {
                return Err(malformed(
                    line,
                    format!(
                        "in {id}, expected `weight:`, `activation_threshold:` or `notes:`, got `{}`",
                        trimmed.chars().take(60).collect::<String>()
                    ),
                ));
            }
        }
    }
    let weight = weight.ok_or_else(|| malformed(heading_line, format!("{id} has no `weight:`")))?;
    let threshold = threshold
        .ok_or_else(|| malformed(heading_line, format!("{id} has no `activation_threshold:`")))?;
    let notes = notes.unwrap_or_default().join("\n").trim().to_owned();
    Ok((weight, threshold, notes))
}

/// The signed text: every line but the signature's (`signature_line`, 1-based, counted in
/// `text`), without `\r` and trailing blanks, trailing empty lines dropped.
fn canonical(text: &str, signature_line: Option<usize>) -> String {
    let mut lines: Vec<&str> = text
        .split('\n')
        .enumerate()
        .filter(|(i, _)| Some(i + 1) != signature_line)
        .map(|(_, l)| l.trim_end())
        .collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// Parses `text` and checks its signature with `key` (scoped to whose file it is). What is
/// returned is read from the signed text itself, so nothing the signature does not cover
/// can change what the file means.
pub fn parse_signed(text: &str, key: &TelosKey) -> Result<TelosFile, FileError> {
    let file = parse(text)?;
    if file.front.signature.is_empty() {
        return Err(FileError::SignatureInvalid(
            "the file is not signed; run `metnos telos edit` to sign it".to_owned(),
        ));
    }
    if !key.verifies(&file.canonical, &file.front.signature) {
        return Err(FileError::SignatureInvalid(
            "the file changed after it was signed (or was signed for someone else); run `metnos telos edit` to review and sign it"
                .to_owned(),
        ));
    }
    // Everything from the signed text; the signature and the version from the file.
    let signed = parse(&file.canonical)?;
    Ok(TelosFile {
        front: Front {
            signature: file.front.signature,
            ..signed.front
        },
        telos: signed.telos,
        warnings: signed.warnings,
        version: file.version,
        canonical: file.canonical,
    })
}

/// `text` with its front-matter's `signature:` set to `key`'s signature (replacing one that
/// was there). `Err` when `text` does not parse.
pub fn sign_text(text: &str, key: &TelosKey) -> Result<String, FileError> {
    let file = parse(text)?;
    let signature = key.sign(&file.canonical);
    // Drop the old signature line, then add the new one just before the closing `---`.
    let canonical_lines: Vec<&str> = file.canonical.trim_end_matches('\n').split('\n').collect();
    let bom = if text.starts_with('\u{feff}') {
        "\u{feff}"
    } else {
        ""
    };
    let mut out = String::from(bom);
    let mut closed = false;
    for (i, line) in canonical_lines.iter().enumerate() {
        let line = line.strip_prefix('\u{feff}').unwrap_or(line);
        if i > 0 && !closed && line == "---" {
            out.push_str(&format!("signature: {signature}\n"));
            closed = true;
        }
        out.push_str(line);
        out.push('\n');
    }
    // What will be read is the canonical text: it must hold too.
    parse_signed(&out, key)?;
    Ok(out)
}

/// Sets `previous_hash` (and `written_at`, `written_by`) in `text`, keeping every other
/// line as written.
pub fn with_front(
    text: &str,
    previous_hash: &str,
    written_at: &str,
    written_by: &str,
) -> Result<String, FileError> {
    parse(text)?;
    let mut out = String::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut in_front = false;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end();
        if i == 0 {
            in_front = true;
            out.push_str(line);
            continue;
        }
        if in_front && bare == "---" {
            for (key, value) in [
                ("previous_hash", previous_hash),
                ("written_at", written_at),
                ("written_by", written_by),
            ] {
                if !seen.contains(key) {
                    out.push_str(&format!("{key}: {value}\n"));
                }
            }
            in_front = false;
            out.push_str(line);
            continue;
        }
        if in_front {
            let key = bare.split_once(':').map(|(k, _)| k.trim());
            let replaced = match key {
                Some("previous_hash") => Some(previous_hash),
                Some("written_at") => Some(written_at),
                Some("written_by") => Some(written_by),
                _ => None,
            };
            if let (Some(key), Some(value)) = (key, replaced) {
                seen.insert(key);
                out.push_str(&format!("{key}: {value}\n"));
                continue;
            }
        }
        out.push_str(line);
    }
    Ok(out)
}

/// The file in `.audit/` naming the last version signed here (its sha256).
pub const HEAD: &str = "head";

/// The `.audit/` folder beside `path`.
pub fn audit_dir(path: &Path) -> PathBuf {
    path.parent().unwrap_or(Path::new(".")).join(AUDIT_DIR)
}

/// The last version signed beside `path` (`.audit/head`), if any.
pub fn head(path: &Path) -> Option<String> {
    std::fs::read_to_string(audit_dir(path).join(HEAD))
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| is_sha256(h))
}

/// Puts `text` in force at `path`, signed, with `written_at` and `written_by` set and
/// `previous_hash` naming the last version signed here. Every signed version is kept in
/// `.audit/<sha256>.md` and `.audit/head` names the newest. A file in force that does not
/// verify (edited by hand, or put back from an old copy) is kept as
/// `.audit/unsigned-<sha256>.md` for the record and is not part of the chain. Returns the
/// new version's sha256.
pub fn commit(
    path: &Path,
    text: &str,
    key: &TelosKey,
    written_by: &str,
    written_at: &str,
) -> Result<String, FileError> {
    let io =
        |what: &Path, e: std::io::Error| FileError::Unreadable(format!("{}: {e}", what.display()));
    let audit = audit_dir(path);
    let dir = path.parent().unwrap_or(Path::new("."));
    metnos_kit::datadir::create_dir_all(&audit).map_err(|e| io(&audit, e))?;
    let head = head(path);
    let current = match std::fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(path, e)),
    };
    let mut previous_hash = head.clone().unwrap_or_else(|| GENESIS.to_owned());
    if let Some(bytes) = &current {
        let sha = sha256_hex(bytes);
        let signed = std::str::from_utf8(bytes)
            .ok()
            .is_some_and(|text| parse_signed(text, key).is_ok());
        if signed && (head.is_none() || head.as_deref() == Some(sha.as_str())) {
            // The version in force, signed here: the one the new version follows.
            let kept = audit.join(format!("{sha}.md"));
            if !kept.exists() {
                metnos_kit::datadir::write_file(&kept, bytes).map_err(|e| io(&kept, e))?;
            }
            previous_hash = sha;
        } else {
            let kept = audit.join(format!("unsigned-{sha}.md"));
            metnos_kit::datadir::write_file(&kept, bytes).map_err(|e| io(&kept, e))?;
        }
    }
    let text = with_front(text, &previous_hash, written_at, written_by)?;
    let signed = sign_text(&text, key)?;
    let version = sha256_hex(signed.as_bytes());
    let kept = audit.join(format!("{version}.md"));
    metnos_kit::datadir::write_file(&kept, signed.as_bytes()).map_err(|e| io(&kept, e))?;
    metnos_kit::datadir::create_dir_all(dir).map_err(|e| io(dir, e))?;
    metnos_kit::datadir::write_file(path, signed.as_bytes()).map_err(|e| io(path, e))?;
    let head_file = audit.join(HEAD);
    metnos_kit::datadir::write_file(&head_file, version.as_bytes())
        .map_err(|e| io(&head_file, e))?;
    Ok(version)
}

/// Whether `ancestor` is among the versions `file` follows (its `previous_hash`, that
/// one's, … through `.audit/` beside `path`), each verified with `key`.
pub fn follows(path: &Path, file: &TelosFile, ancestor: &str, key: &TelosKey) -> bool {
    let audit = audit_dir(path);
    let mut previous = file.front.previous_hash.clone();
    for _ in 0..10_000 {
        if previous == ancestor {
            return true;
        }
        if previous == GENESIS || !is_sha256(&previous) {
            return false;
        }
        let Ok(text) = std::fs::read_to_string(audit.join(format!("{previous}.md"))) else {
            return false;
        };
        if sha256_hex(text.as_bytes()) != previous {
            return false;
        }
        match parse_signed(&text, key) {
            Ok(older) => previous = older.front.previous_hash,
            Err(_) => return false,
        }
    }
    false
}

/// One version in a chain, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainLink {
    pub version: String,
    pub written_at: String,
    pub written_by: String,
    pub path: PathBuf,
}

/// Whether the version kept at `kept` is `file`'s signed text (its canonical form and
/// signature), whatever the bytes around it (a byte-order mark, CRLF line ends).
pub fn same_signed_text(kept: &Path, file: &TelosFile) -> bool {
    std::fs::read_to_string(kept)
        .ok()
        .and_then(|text| parse(&text).ok())
        .is_some_and(|kept| {
            kept.canonical == file.canonical && kept.front.signature == file.front.signature
        })
}

/// Walks the chain from the file at `path` back to `genesis` through `.audit/` beside it:
/// the file in force must be signed and be the last version signed here (`.audit/head`),
/// and every older one must be signed and have the sha256 its successor names. `Ok`: the
/// versions, newest first; `Err`: the first break.
pub fn verify_chain(path: &Path, key: &TelosKey) -> Result<Vec<ChainLink>, String> {
    let audit = audit_dir(path);
    let mut links = Vec::new();
    let mut current = path.to_path_buf();
    let mut expected_version: Option<String> = None;
    loop {
        let text = std::fs::read_to_string(&current)
            .map_err(|e| format!("{}: cannot be read: {e}", current.display()))?;
        let file = parse_signed(&text, key).map_err(|e| format!("{}: {e}", current.display()))?;
        match &expected_version {
            None => {
                // The same signed text saved again (a byte-order mark, CRLF line ends: an
                // editor's doing) is the head still, not a rollback.
                if let Some(head) = head(path)
                    && head != file.version
                    && !same_signed_text(&audit.join(format!("{head}.md")), &file)
                {
                    return Err(format!(
                        "{}: it is not the last version signed here ({head}): an older version was put back",
                        current.display()
                    ));
                }
            }
            Some(expected) if &file.version != expected => {
                return Err(format!(
                    "{}: its sha256 is {}, but the next version names {expected} as its previous one (the file was changed)",
                    current.display(),
                    file.version
                ));
            }
            Some(_) => {}
        }
        links.push(ChainLink {
            version: file.version.clone(),
            written_at: file.front.written_at.clone(),
            written_by: file.front.written_by.clone(),
            path: current.clone(),
        });
        if file.front.previous_hash == GENESIS {
            return Ok(links);
        }
        if links.len() > 10_000 {
            return Err("the chain is longer than 10000 versions".to_owned());
        }
        let previous = audit.join(format!("{}.md", file.front.previous_hash));
        if !previous.exists() {
            return Err(format!(
                "{}: its previous version {} is missing from {}",
                current.display(),
                file.front.previous_hash,
                audit.display()
            ));
        }
        expected_version = Some(file.front.previous_hash.clone());
        current = previous;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's TELOS.md (telos.md ch. 2), its seven telos verbatim.
    pub(crate) const SEED: &str = include_str!("../../tests/fixtures/seed_telos.md");

    fn key() -> TelosKey {
        TelosKey::from_bytes([7; 32])
    }

    #[test]
    fn the_seeds_file_parses_with_multi_line_notes_and_the_non_retreat_telos() {
        let file = parse(SEED).unwrap();
        assert_eq!(file.telos.len(), 7);
        assert_eq!(file.front.telos_version, "1.1");
        assert_eq!(file.front.written_by, "roberto");
        let tempo = &file.telos[0];
        assert_eq!(tempo.id, "t.tempo");
        assert_eq!(tempo.phrase, "Free my time from repetitive chores");
        assert_eq!(tempo.line, 8);
        assert!((tempo.weight - 0.22).abs() < 1e-12);
        assert_eq!(
            tempo.notes,
            "if something frees at least 30 minutes/week and I can trust it,\nconsider proposing it."
        );
        assert!(file.warnings.is_empty(), "{:?}", file.warnings);
        // The seed's weights, as declared (they sum to 1: nothing renormalised).
        let weights: Vec<f64> = file.telos.iter().map(|t| t.weight).collect();
        for (got, want) in weights
            .iter()
            .zip([0.22, 0.13, 0.18, 0.18, 0.09, 0.08, 0.12])
        {
            assert!((got - want).abs() < 1e-12, "{weights:?}");
        }
        let parsimonia = &file.telos[5];
        assert_eq!(
            parsimonia.phrase,
            "Don't spend (on APIs, services, compute time) more than needed"
        );
        let cultivate = file.telos.iter().find(|t| t.is_non_retreat).unwrap();
        assert_eq!(cultivate.id, NON_RETREAT);
        assert_eq!(
            cultivate.notes,
            "if I ask for something your pool cannot yet do, exhaust the\nsynthesis strategies \
             (compose, generate, ask) before answering\n\"I cannot\". Failure is allowed; silent \
             retreat is not. See\nch. 5 for the stop clause."
        );
        assert_eq!(file.telos.iter().filter(|t| t.is_non_retreat).count(), 1);
    }

    #[test]
    fn weights_that_do_not_sum_to_one_are_renormalised_with_a_warning() {
        let text = SEED.replace("weight: 0.22", "weight: 0.72");
        let file = parse(&text).unwrap();
        let sum: f64 = file.telos.iter().map(|t| t.weight).sum();
        assert!((sum - 1.0).abs() < 1e-12);
        assert!((file.telos[0].weight - 0.72 / 1.5).abs() < 1e-12);
        assert_eq!(file.warnings.len(), 1);
        assert!(file.warnings[0].contains("1.5000"), "{:?}", file.warnings);
    }

    #[test]
    fn every_error_names_its_line() {
        for (mutation, line, words) in [
            (
                SEED.replace("weight: 0.13", "weight: lots"),
                14,
                "must be a number from 0 to 1",
            ),
            (
                SEED.replace("weight: 0.13", "weight: 1.3"),
                14,
                "must be a number from 0 to 1",
            ),
            (
                SEED.replace("written_by: roberto\n", "written_by: a: b\n"),
                4,
                "not YAML",
            ),
            (
                SEED.replace("written_by: roberto\n", "colour: red\n"),
                4,
                "unknown front-matter key `colour`",
            ),
            (
                SEED.replace(
                    "written_at: 2026-04-25T12:00:00+02:00",
                    "written_at: yesterday",
                ),
                3,
                "not a date",
            ),
            (
                SEED.replace("previous_hash: genesis", "previous_hash: abc"),
                5,
                "`previous_hash` must be",
            ),
            (
                SEED.replace("## t.ordine — Keep", "## ordine — Keep"),
                13,
                "must be `## t.<slug>",
            ),
            (
                SEED.replace("## t.ordine —", "## t.tempo —"),
                13,
                "declared twice",
            ),
            (
                SEED.replace("activation_threshold: 0.40\n", ""),
                13,
                "has no `activation_threshold:`",
            ),
            (
                SEED.replace("weight: 0.13\n", "weight: 0.13\nwieght: 0.1\n"),
                15,
                "expected `weight:`",
            ),
            (
                SEED.replace("### ", "")
                    .replace("# My ultimate ends", "### deep"),
                7,
                "headings are allowed",
            ),
        ] {
            match parse(&mutation) {
                Err(FileError::Malformed { line: got, message }) => {
                    assert_eq!(got, line, "{message}");
                    assert!(message.contains(words), "{message}");
                }
                other => panic!("expected a malformed file for {words}, got {other:?}"),
            }
        }
        assert!(matches!(
            parse("# no front\n"),
            Err(FileError::Malformed { line: 1, .. })
        ));
        assert!(matches!(
            parse(
                "---\ntelos_version: 1\nwritten_at: 2026-04-25T12:00:00Z\nwritten_by: r\nprevious_hash: genesis\n---\n# nothing\n"
            ),
            Err(FileError::Malformed { line: 7, .. })
        ));
    }

    #[test]
    fn a_heading_inside_a_code_block_is_not_a_section() {
        let text = SEED.replace(
            "notes: I prefer small incremental tidying to large reorganisations.",
            "notes: I prefer small incremental tidying, like:\n```\n## t.fake — not a telos\n```",
        );
        let file = parse(&text).unwrap();
        assert_eq!(file.telos.len(), 7);
        assert!(
            file.telos[1].notes.contains("## t.fake"),
            "{}",
            file.telos[1].notes
        );
    }

    #[test]
    fn a_signed_file_verifies_and_any_edit_of_its_words_does_not() {
        let signed = sign_text(SEED, &key()).unwrap();
        let file = parse_signed(&signed, &key()).unwrap();
        assert_eq!(file.front.signature.len(), 64);
        // Windows line endings and trailing blanks do not matter.
        let crlf = signed.replace('\n', "  \r\n");
        assert!(parse_signed(&crlf, &key()).is_ok());
        // A changed weight, note or front-matter field does.
        for edit in [
            signed.replace("weight: 0.22", "weight: 0.23"),
            signed.replace("consider proposing it.", "always propose it."),
            signed.replace("written_by: roberto", "written_by: mallory"),
        ] {
            assert!(matches!(
                parse_signed(&edit, &key()),
                Err(FileError::SignatureInvalid(m)) if m.contains("changed after it was signed")
            ));
        }
        // Another key.
        assert!(parse_signed(&signed, &TelosKey::from_bytes([8; 32])).is_err());
        // Unsigned.
        assert!(matches!(
            parse_signed(SEED, &key()),
            Err(FileError::SignatureInvalid(m)) if m.contains("not signed")
        ));
        // Signing again replaces the signature, it does not add one.
        let again = sign_text(&signed, &key()).unwrap();
        assert_eq!(again, signed);
    }

    #[test]
    fn the_key_is_made_private_once_and_an_open_one_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = key_path(dir.path());
        let made = TelosKey::load_or_create(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let again = TelosKey::load_or_create(&path).unwrap();
        assert_eq!(made.sign("x"), again.sign("x"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = TelosKey::load_or_create(&path).unwrap_err();
        assert!(
            refused.to_string().contains("may be read by others"),
            "{refused}"
        );
        assert_eq!(format!("{made:?}"), "TelosKey(…)");
    }

    #[test]
    fn the_chain_verifies_across_three_versions_and_names_a_tampered_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cli_roberto").join(FILE_NAME);
        let v1 = commit(&path, SEED, &key(), "roberto", "2026-04-25T12:00:00+02:00").unwrap();
        let second = SEED.replace("weight: 0.22", "weight: 0.30");
        let v2 = commit(
            &path,
            &second,
            &key(),
            "roberto",
            "2026-05-01T09:00:00+02:00",
        )
        .unwrap();
        let third = second.replace("weight: 0.13", "weight: 0.05");
        let v3 = commit(
            &path,
            &third,
            &key(),
            "roberto",
            "2026-06-01T09:00:00+02:00",
        )
        .unwrap();
        let chain = verify_chain(&path, &key()).unwrap();
        let versions: Vec<&str> = chain.iter().map(|l| l.version.as_str()).collect();
        assert_eq!(versions, [v3.as_str(), v2.as_str(), v1.as_str()]);
        let current = parse_signed(&std::fs::read_to_string(&path).unwrap(), &key()).unwrap();
        assert_eq!(current.front.previous_hash, v2);
        assert_eq!(current.front.written_at, "2026-06-01T09:00:00+02:00");

        // An old version edited in the audit folder (even re-signed by someone holding the
        // key) no longer matches the hash its successor names.
        let kept = path
            .parent()
            .unwrap()
            .join(AUDIT_DIR)
            .join(format!("{v2}.md"));
        let edited = sign_text(
            &std::fs::read_to_string(&kept)
                .unwrap()
                .replace("weight: 0.30", "weight: 0.31"),
            &key(),
        )
        .unwrap();
        std::fs::write(&kept, edited).unwrap();
        let broken = verify_chain(&path, &key()).unwrap_err();
        assert!(broken.contains("the file was changed"), "{broken}");
        assert!(broken.contains(&v2), "{broken}");

        // A removed version breaks the chain too.
        std::fs::remove_file(&kept).unwrap();
        let broken = verify_chain(&path, &key()).unwrap_err();
        assert!(broken.contains("is missing"), "{broken}");

        // The file in force edited without signing.
        let in_force = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, in_force.replace("0.05", "0.5")).unwrap();
        let broken = verify_chain(&path, &key()).unwrap_err();
        assert!(broken.contains("changed after it was signed"), "{broken}");
    }

    /// Issue 38, break 4: the version in force saved again by an editor with a byte-order
    /// mark or CRLF line ends read as an older version put back.
    #[test]
    fn the_version_in_force_saved_with_a_bom_or_crlf_stays_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        commit(&path, SEED, &key(), "roberto", "2026-04-25T12:00:00+02:00").unwrap();
        commit(
            &path,
            &SEED.replace("weight: 0.22", "weight: 0.30"),
            &key(),
            "roberto",
            "2026-05-01T09:00:00+02:00",
        )
        .unwrap();
        let signed = std::fs::read_to_string(&path).unwrap();
        for resaved in [
            format!("\u{feff}{signed}"),
            signed.replace('\n', "\r\n"),
            format!("\u{feff}{}", signed.replace('\n', "\r\n")),
        ] {
            std::fs::write(&path, &resaved).unwrap();
            let chain = verify_chain(&path, &key());
            assert!(chain.is_ok(), "{chain:?}");
            assert_eq!(chain.unwrap().len(), 2);
        }
        // Another text under the same signature is still a break.
        std::fs::write(&path, signed.replace("0.30", "0.31")).unwrap();
        assert!(verify_chain(&path, &key()).is_err());
    }

    #[test]
    fn an_older_signed_version_put_back_is_not_the_head_and_a_hand_edit_stays_out_of_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let v1 = commit(&path, SEED, &key(), "roberto", "2026-04-25T12:00:00+02:00").unwrap();
        let first = std::fs::read(&path).unwrap();
        let v2 = commit(
            &path,
            &SEED.replace("weight: 0.22", "weight: 0.30"),
            &key(),
            "roberto",
            "2026-05-01T09:00:00+02:00",
        )
        .unwrap();
        // A backup of version 1 restored over version 2: signed, but not the head.
        std::fs::write(&path, &first).unwrap();
        let broken = verify_chain(&path, &key()).unwrap_err();
        assert!(broken.contains("an older version was put back"), "{broken}");
        let restored = parse_signed(&String::from_utf8(first).unwrap(), &key()).unwrap();
        assert!(!follows(&path, &restored, &v2, &key()));

        // Signing again after a hand edit: the edit is kept for the record, the new
        // version follows the last signed one, and the chain holds.
        std::fs::write(&path, SEED.replace("weight: 0.22", "weight: 0.99")).unwrap();
        let v3 = commit(
            &path,
            &SEED.replace("weight: 0.22", "weight: 0.99"),
            &key(),
            "roberto",
            "2026-06-01T09:00:00+02:00",
        )
        .unwrap();
        let chain = verify_chain(&path, &key()).unwrap();
        assert_eq!(
            chain.iter().map(|l| l.version.as_str()).collect::<Vec<_>>(),
            [v3.as_str(), v2.as_str(), v1.as_str()]
        );
        let current = parse_signed(&std::fs::read_to_string(&path).unwrap(), &key()).unwrap();
        assert!(follows(&path, &current, &v1, &key()));
        let unsigned = std::fs::read_dir(dir.path().join(AUDIT_DIR))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("unsigned-")
            })
            .count();
        assert_eq!(unsigned, 1, "the hand edit, kept for the record");
    }

    #[test]
    fn what_is_read_is_what_is_signed() {
        let key = key().scoped("telegram:42");
        let signed = sign_text(SEED, &key).unwrap();
        // A lone carriage return (a line ending to the Markdown parser, not to the
        // signature) is refused, naming its line.
        let lone = signed.replace("weight: 0.13\n", "weight: 0.13\r\r\n");
        assert!(matches!(
            parse(&lone),
            Err(FileError::Malformed { line: 15, message }) if message.contains("carriage return")
        ));
        // Trailing blanks the signature ignores (a no-break space here) change nothing in
        // what is read: the signed text is what is parsed.
        let padded = signed.replace(
            "## t.ordine — Keep the order of my digital data\n",
            "## t.ordine — Keep the order of my digital data\u{a0}\n",
        );
        let read = parse_signed(&padded, &key).unwrap();
        assert_eq!(read.telos, parse_signed(&signed, &key).unwrap().telos);
        // Signed for one person, it is not another's, nor the owner's.
        assert!(parse_signed(&signed, &self::key().scoped("telegram:43")).is_err());
        assert!(parse_signed(&signed, &self::key().scoped("owner")).is_err());
    }
}
