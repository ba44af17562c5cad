//! Hash-chained JSON-lines logs (issue 23): the turn log and the verdict log are records
//! nobody can quietly edit. Each line of a folder's dated files (`<stem>.jsonl`, in name
//! order: days or months) carries `seq`, its place in the folder's chain (1, 2, …, across
//! files), and `prev`, the SHA-256 of the line before it, whole — the first line of a file
//! links to the last of the previous file. `HEAD` holds the newest line's `seq` and hash
//! (so a removed last line shows), and `ROOTS` one line per closed file, its last `seq`
//! and hash (a file the retention removed leaves its root); `DAYS` one daily root per day
//! written on, the chain's end as that day began (for the monthly verdict log too).
//!
//! [`verify`] walks a folder and names the first record edited, removed or reordered:
//! a line whose `prev` is not the hash of the line before is a break — with the next `seq`
//! the line before was edited, with a gap records were removed, going back they were
//! reordered. Records stay what their writers made them (keys only); the chain adds two
//! fields.
//!
//! One writer at a time per folder, across processes: [`append`] holds an exclusive lock on
//! `<dir>/LOCK` and reads the chain's end from the files, never from memory.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::datadir;

/// The `prev` of a chain's first line.
pub const GENESIS: &str = "genesis";
/// The newest line's `seq` and hash.
pub const HEAD: &str = "HEAD";
/// One line per closed file: its name, last `seq` and hash.
pub const ROOTS: &str = "ROOTS";
/// One line per UTC day the chain was written on: the day, and the chain's end (`seq`,
/// hash) as that day's first record was written — the daily root.
pub const DAYS: &str = "DAYS";
const LOCK: &str = "LOCK";

/// The hex SHA-256 of a line (without its newline).
pub fn hash(line: &str) -> String {
    hex::encode(Sha256::digest(line.as_bytes()))
}

/// An approval token as records name it to those who may not hold it (the decisions
/// journal, the spectator page): the first 16 hex digits of its SHA-256.
pub fn token_name(token: &str) -> String {
    hash(token)[..16].to_owned()
}

/// Where a chain ends: the last line's `seq` and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    pub seq: u64,
    pub hash: String,
}

impl End {
    pub fn genesis() -> End {
        End {
            seq: 0,
            hash: GENESIS.to_owned(),
        }
    }
}

/// The dated files of `dir` (`<stem>.jsonl`, regular files), by name.
pub fn files(dir: &Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".jsonl") && entry.file_type()?.is_file() {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// The last non-empty line of `path` (read backwards, whatever its length); `None` for an
/// empty or missing file.
fn last_line(path: &Path) -> std::io::Result<Option<String>> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.seek(SeekFrom::End(0))?;
    let mut tail: Vec<u8> = Vec::new();
    let mut pos = len;
    const CHUNK: u64 = 8192;
    loop {
        let trimmed_end = tail.iter().rposition(|b| *b != b'\n').map(|i| i + 1);
        if let Some(end) = trimmed_end
            && let Some(start) = tail[..end].iter().rposition(|b| *b == b'\n')
        {
            return Ok(Some(
                String::from_utf8_lossy(&tail[start + 1..end]).into_owned(),
            ));
        }
        if pos == 0 {
            return Ok(trimmed_end.map(|end| String::from_utf8_lossy(&tail[..end]).into_owned()));
        }
        let step = CHUNK.min(pos);
        pos -= step;
        file.seek(SeekFrom::Start(pos))?;
        let mut chunk = vec![0u8; usize::try_from(step).unwrap_or(0)];
        file.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&tail);
        tail = chunk;
    }
}

/// The `seq` of a chained line (0 when it has none).
fn seq_of(line: &str) -> u64 {
    serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| v.get("seq").and_then(Value::as_u64))
        .unwrap_or(0)
}

/// Where the chain stands after `line`: the genesis after a line written before the chain
/// (no `seq`: an older version's log), else its `seq` and hash.
pub fn line_end(line: &str) -> End {
    match seq_of(line) {
        0 => End::genesis(),
        seq => End {
            seq,
            hash: hash(line),
        },
    }
}

/// Drops a last line left without its newline (a write cut short by a crash or a full
/// disk: a record never completed); whether there was one.
fn drop_torn_tail(path: &Path) -> std::io::Result<bool> {
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok(false);
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(false);
    }
    // Back to just after the last newline (or the start).
    let mut pos = len;
    let mut keep = 0;
    const CHUNK: u64 = 8192;
    while pos > 0 {
        let step = CHUNK.min(pos);
        pos -= step;
        file.seek(SeekFrom::Start(pos))?;
        let mut chunk = vec![0u8; usize::try_from(step).unwrap_or(0)];
        file.read_exact(&mut chunk)?;
        if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
            keep = pos + i as u64 + 1;
            break;
        }
    }
    file.set_len(keep)?;
    Ok(true)
}

/// The end of the chain before `file` would be written to: its own last line, else the
/// last line of the newest file before it, else the genesis. Also the file that closed, if
/// `file` starts a new one.
fn end_before(dir: &Path, file: &str) -> std::io::Result<(End, Option<String>)> {
    if let Some(line) = last_line(&dir.join(file))? {
        return Ok((line_end(&line), None));
    }
    let earlier = files(dir)?.into_iter().rfind(|name| name.as_str() < file);
    if let Some(name) = earlier
        && let Some(line) = last_line(&dir.join(&name))?
    {
        return Ok((line_end(&line), Some(name)));
    }
    // No line left (the retention removed every file): the chain goes on from where HEAD
    // says it ended, and that file's root is kept.
    if let Some((head_file, head)) = read_head(dir)?
        && head_file.as_str() != file
    {
        return Ok((head, Some(head_file)));
    }
    Ok((End::genesis(), None))
}

/// `record` (a JSON object) as the line after `end`: with `seq` and `prev` first.
fn chained(record: &Value, end: &End) -> String {
    let mut line = Map::new();
    line.insert("seq".to_owned(), Value::from(end.seq.saturating_add(1)));
    line.insert("prev".to_owned(), Value::from(end.hash.clone()));
    if let Value::Object(fields) = record {
        for (k, v) in fields {
            if k != "seq" && k != "prev" {
                line.insert(k.clone(), v.clone());
            }
        }
    } else {
        line.insert("record".to_owned(), record.clone());
    }
    Value::Object(line).to_string()
}

/// Writes `text` to `dir/name` through a temporary file and a rename (0600).
fn replace(dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    let temp = dir.join(format!(".{name}.tmp"));
    {
        let mut file = datadir::file_options()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&temp)?;
        // Renamed whole: a reader sees the old HEAD or the new, never half of one.
        file.write_all(text.as_bytes())?;
    }
    std::fs::rename(&temp, dir.join(name))
}

/// Appends `records` to `dir/file` (`<stem>.jsonl`, created 0600 in a 0700 folder),
/// chained after the folder's last line; updates `HEAD`, and `ROOTS` when `file` starts a
/// new one. Returns the new end.
pub fn append(dir: &Path, file: &str, records: &[Value]) -> std::io::Result<End> {
    datadir::create_dir_all(dir)?;
    let lock = datadir::file_options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)?;
    // Never behind the newest file (a record dated earlier, a clock set back): the chain
    // grows at its end only.
    let newest = files(dir)?
        .into_iter()
        .rfind(|name| name.len() == file.len());
    let file = match newest {
        Some(newest) if newest.as_str() > file => newest,
        _ => file.to_owned(),
    };
    let file = file.as_str();
    if drop_torn_tail(&dir.join(file))? {
        tracing::warn!(dir = %dir.display(), file, "a log line left half-written (a crash) was dropped");
    }
    let (mut end, closed) = end_before(dir, file)?;
    // The file holding the chain's end (the daily root names it: where the retention keeps
    // that file, the record is there).
    let end_file = closed.clone().unwrap_or_else(|| file.to_owned());
    // HEAD behind the files is a crash between the lines and HEAD (the files are right);
    // missing, or ahead, or naming another line, the end was cut or edited: the next line
    // says so, so the next write cannot cover it.
    let mark = head_mark(read_head(dir)?.map(|(_, head)| head).as_ref(), &end);
    let roots_kept = roots(dir)?;
    let closed = closed.filter(|name| !roots_kept.iter().any(|(kept, _)| kept == name));
    if let Some(closed) = closed {
        let root = serde_json::json!({"file": closed, "seq": end.seq, "hash": end.hash});
        let mut roots = datadir::file_options()
            .create(true)
            .append(true)
            .open(dir.join(ROOTS))?;
        writeln!(roots, "{root}")?;
    }
    // The day's root, at its first record: the chain as the day began.
    // Written whenever the day differs from the last root's (a clock set wrong once does
    // not stop the roots until it comes round again).
    let today = crate::time::rfc3339(crate::time::now_ms())[..10].to_owned();
    drop_torn_tail(&dir.join(DAYS))?;
    let last_day = kept_lines(dir, DAYS, "day")?.pop().map(|(day, _)| day);
    if end.seq > 0 && last_day.as_deref() != Some(today.as_str()) {
        let root =
            serde_json::json!({"day": today, "seq": end.seq, "hash": end.hash, "file": end_file});
        let mut days = datadir::file_options()
            .create(true)
            .append(true)
            .open(dir.join(DAYS))?;
        writeln!(days, "{root}")?;
    }
    let mut text = String::new();
    // A file's first record names the file before it (hashed with it: whoever deletes that
    // file and edits `ROOTS` to hide it cannot edit this too without a new chain end).
    let after = (end.seq > 0 && end_file != file).then(|| end_file.clone());
    for (n, record) in records.iter().enumerate() {
        let line = match (&mark, &after, n) {
            (None, None, _) | (_, _, 1..) => chained(record, &end),
            (mark, after, 0) => {
                let mut record = record.clone();
                if let Value::Object(fields) = &mut record {
                    if let Some(mark) = mark {
                        fields.insert(BREAK.to_owned(), mark.clone());
                    }
                    if let Some(after) = after {
                        fields.insert(AFTER.to_owned(), Value::String(after.clone()));
                    }
                }
                chained(&record, &end)
            }
        };
        end = End {
            seq: end.seq.saturating_add(1),
            hash: hash(&line),
        };
        text.push_str(&line);
        text.push('\n');
    }
    let mut out = datadir::file_options()
        .create(true)
        .append(true)
        .open(dir.join(file))?;
    out.write_all(text.as_bytes())?;
    let head = serde_json::json!({"file": file, "seq": end.seq, "hash": end.hash}).to_string();
    if let Err(e) = replace(dir, HEAD, &head) {
        // The records are in: a HEAD behind them is a crash's state, which the next write
        // puts right (issue 41: failing here had writers count written records as lost,
        // and a gap record written twice).
        tracing::warn!(dir = %dir.display(), error = %e, "the chain's HEAD was not moved; the next write moves it");
    }
    Ok(end)
}

/// The field a line carries when it was written after its chain's end was cut or edited.
pub const BREAK: &str = "chain_break";

pub use crate::gap::{Gap, NOT_LOGGED};

/// The field of a file's first record naming the file before it.
pub const AFTER: &str = "chain_after";

/// What the next line must say when `head` (kept beside the chain) does not name the
/// chain's `end` as found: `None` when it does, or when the chain ran ahead of it (a crash
/// between the lines and the head).
pub fn head_mark(head: Option<&End>, end: &End) -> Option<Value> {
    match head {
        None if end.seq > 0 => Some(serde_json::json!({"head": "missing", "found_seq": end.seq})),
        None => None,
        Some(head) if head.seq < end.seq => None,
        Some(head) if head.seq == end.seq && head.hash == end.hash => None,
        Some(head) => Some(serde_json::json!({
            "head_seq": head.seq,
            "head_hash": head.hash,
            "found_seq": end.seq,
        })),
    }
}

impl Report {
    /// The newest daily root, in words (`2026-11-26: seq 12, sha256 3fa2…`, the hash
    /// whole): what the owner may note down to compare later. Empty when none is kept yet.
    pub fn newest_day(&self) -> String {
        // The newest by the chain, not by its date (a clock once set wrong).
        self.days
            .iter()
            .max_by_key(|(_, end)| end.seq)
            .map(|(day, end)| {
                let file = self
                    .day_files
                    .iter()
                    .find(|(d, _)| d == day)
                    .map(|(_, file)| format!(" in {file}"))
                    .unwrap_or_default();
                format!("{day}: seq {}{file}, sha256 {}", end.seq, end.hash)
            })
            .unwrap_or_default()
    }
}

/// What [`verify`] found in one folder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub dir: PathBuf,
    pub files: usize,
    pub lines: u64,
    /// Lines from before the chain (an older version's log), at its start: counted, not
    /// checked.
    pub unchained: u64,
    /// The first break, in words (file, line, what), if any.
    pub broken: Option<String>,
    /// The daily roots kept: (day, the chain's end as it began), oldest first.
    pub days: Vec<(String, End)>,
    /// The file that held each daily root's record, by day, where the root names it.
    pub day_files: Vec<(String, String)>,
    /// Records their writer answered for but could not write, as the chain's gap records
    /// ([`NOT_LOGGED`]) count them.
    pub not_logged: u64,
    /// Where the first gap record is, in words (file, line).
    pub first_gap: Option<String>,
}

/// Walks `dir`'s chain (files from `since`, a stem prefix such as `2026-11-20`, if given)
/// and reports the first record edited, removed or reordered, and a `HEAD` or root that
/// the files no longer match. `expired` says of a file's stem (or a daily root's day)
/// whether the retention may have removed it by now: a `HEAD` or a daily root naming
/// records the retention keeps, with none of them left, is a log deleted or emptied.
pub fn verify(
    dir: &Path,
    since: Option<&str>,
    expired: &dyn Fn(&str) -> bool,
) -> std::io::Result<Report> {
    let mut report = Report {
        dir: dir.to_owned(),
        ..Report::default()
    };
    // Read while no writer is half-way through (the writers hold it exclusively).
    let _lock = match File::open(dir.join(LOCK)) {
        Ok(lock) => {
            rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockShared)?;
            Some(lock)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    report.days = days(dir)?;
    report.day_files = day_files(dir)?;
    let kept = Retained {
        roots: roots(dir)?,
        days: report.days.clone(),
        day_files: report.day_files.clone(),
        since,
        expired,
    };
    let walked = match walk_files(dir, &kept, &mut report)? {
        Ok(walked) => walked,
        Err(broken) => {
            report.broken = Some(broken);
            return Ok(report);
        }
    };
    if let Some(broken) = kept.gone(&walked) {
        report.broken = Some(broken);
        return Ok(report);
    }
    // The newest line: HEAD names it. With no record left, only the retention may have
    // removed them: a HEAD or a daily root naming what it keeps says they were erased.
    let head = read_head(dir)?;
    if walked.previous.is_some() {
        report.broken = head_break(head.as_ref().map(|(_, h)| h), walked.previous.as_ref());
    } else if since.is_none_or(|since| {
        head.as_ref()
            .is_some_and(|(file, _)| file.trim_end_matches(".jsonl") >= since)
    }) {
        // Nothing walked from `since` on, though HEAD names a file from then: erased too.
        report.broken = erased(head.as_ref(), &kept.days, walked.last, expired);
    }
    // Nothing at all, anchors gone too, where a writer once ran (its LOCK is there): the
    // whole log was erased (or the very first write stopped before its record).
    if report.broken.is_none()
        && _lock.is_some()
        && since.is_none()
        && head.is_none()
        && walked.last.is_none()
        && kept.days.is_empty()
        && kept.roots.is_empty()
    {
        report.broken = Some(
            "a writer ran here (its LOCK is there), but no record, head or root is left (the whole log was erased)".to_owned(),
        );
    }
    Ok(report)
}

/// What a folder keeps beside its chain, and which of its files a verification holds to
/// it: those from `since` on that the retention keeps (`expired` says which it may have
/// removed by now).
struct Retained<'a> {
    roots: Vec<(String, End)>,
    days: Vec<(String, End)>,
    day_files: Vec<(String, String)>,
    since: Option<&'a str>,
    expired: &'a dyn Fn(&str) -> bool,
}

/// What walking a folder's files found, for the checks that follow the walk.
#[derive(Default)]
struct Walked {
    /// The last record walked, and where it is.
    previous: Option<(End, String)>,
    /// The first and the last seq walked, to hold each daily root to the record it names.
    first: Option<u64>,
    last: Option<u64>,
    /// The files walked that held records, to hold each closed file's root to its file.
    with_records: Vec<String>,
    /// What each file's first record says came before it: (where, that file).
    afters: Vec<(String, String)>,
}

/// Walks every file of `dir` from `kept.since` on: `Err` with the first break, in words.
fn walk_files(
    dir: &Path,
    kept: &Retained<'_>,
    report: &mut Report,
) -> std::io::Result<Result<Walked, String>> {
    let day_roots = by_seq(&kept.days);
    let mut walked = Walked::default();
    for name in &files(dir)? {
        let stem = name.trim_end_matches(".jsonl");
        let text = std::fs::read_to_string(dir.join(name))?;
        if kept.since.is_some_and(|since| stem < since) {
            // Not walked, but its end is where the next file's chain starts.
            if let Some(line) = text.lines().rfind(|l| !l.is_empty())
                && seq_of(line) > 0
            {
                walked.previous = Some((line_end(line), format!("{name}, its last line")));
            }
            continue;
        }
        report.files += 1;
        let lines: Vec<&str> = text.lines().collect();
        let first = |_: u64| {
            // The chain's first line kept: the root of the file before it (the files before
            // it pruned by the retention), else the genesis — a start cut away shows.
            kept.roots
                .iter()
                .rfind(|(file, _)| file.as_str() < name.as_str())
                .map(|(_, end)| end.clone())
                .or_else(|| Some(End::genesis()))
        };
        if let Some(broken) = walk(name, &lines, &mut walked.previous, first, report) {
            return Ok(Err(broken));
        }
        if let Some(broken) = walked.note(name, &lines, &day_roots, report) {
            return Ok(Err(broken));
        }
        // A closed file's root: its last line as it was when the next file began.
        if let Some((_, root)) = kept.roots.iter().find(|(file, _)| file == name)
            && let Some((end, at)) = &walked.previous
            && (end.seq != root.seq || end.hash != root.hash)
        {
            return Ok(Err(format!(
                "{at}: the file's root says its last record is seq {} (records at its end were removed or edited)",
                root.seq
            )));
        }
    }
    Ok(Ok(walked))
}

impl Walked {
    /// Notes the records of file `name` (walked and found chained): the seqs, the file,
    /// what its first record says came before it, a first record whose start is not proven
    /// (counted in `report`). The break a daily root finds, if any.
    fn note(
        &mut self,
        name: &str,
        lines: &[&str],
        day_roots: &DayRoots<'_>,
        report: &mut Report,
    ) -> Option<String> {
        for (n, line) in lines.iter().enumerate() {
            let seq = seq_of(line);
            if seq == 0 {
                continue;
            }
            self.last = Some(seq);
            let after = after_of(line);
            if self.first.is_none() && n == 0 && seq > 1 && after.is_none() {
                // The chain's first record, at a file's start, neither the genesis nor
                // naming the file before it: written by an older version, or what was
                // before it cut away. Its start is not proven: counted with the lines
                // from before the chain (NOT CHECKED unless the owner accepts them).
                report.unchained += 1;
            }
            self.first.get_or_insert(seq);
            if let Some(after) = after {
                self.afters.push((format!("{name}, line {}", n + 1), after));
            }
            if self.with_records.last().map(String::as_str) != Some(name) {
                self.with_records.push(name.to_owned());
            }
            if let Some(broken) = day_root_break(day_roots, seq, line) {
                return Some(format!("{name}, line {}: {broken}", n + 1));
            }
        }
        None
    }
}

impl Retained<'_> {
    /// Whether a verification holds the file of stem `stem` to be there.
    fn keeps(&self, stem: &str) -> bool {
        !(self.expired)(stem) && self.since.is_none_or(|since| stem >= since)
    }

    /// The break of records gone that the retention keeps, once every file was walked.
    fn gone(&self, walked: &Walked) -> Option<String> {
        self.root_gone(walked)
            .or_else(|| self.after_gone(walked))
            .or_else(|| self.day_before(walked))
            .or_else(|| self.day_past(walked))
    }

    /// A closed file the retention keeps is there with its records: the first file kept
    /// links to the root of the one before it, so files cut from the start show only here.
    fn root_gone(&self, walked: &Walked) -> Option<String> {
        let (file, root) = self.roots.iter().find(|(file, root)| {
            root.seq > 0
                && self.keeps(file.trim_end_matches(".jsonl"))
                && !walked.with_records.contains(file)
        })?;
        Some(format!(
            "{file}: its root says it held the records up to seq {}, but the file is gone or empty (it was deleted or emptied; the retention keeps that file)",
            root.seq
        ))
    }

    /// A file's first record names the file before it: one the retention keeps is there.
    fn after_gone(&self, walked: &Walked) -> Option<String> {
        let (at, after) = walked.afters.iter().find(|(_, after)| {
            self.keeps(after.trim_end_matches(".jsonl")) && !walked.with_records.contains(after)
        })?;
        Some(format!(
            "{at}: its file follows {after}, which the retention keeps, but that file is gone or empty (it was deleted or emptied)"
        ))
    }

    /// A daily root names the record its day began after, and the file holding it: where
    /// the retention keeps that file, the chain reaches back to that record (the oldest
    /// files deleted, and a root renamed to a date the retention removed, still show).
    fn day_before(&self, walked: &Walked) -> Option<String> {
        let first = walked.first?;
        let (day, root, file) = self.days.iter().find_map(|(day, root)| {
            let (_, file) = self.day_files.iter().find(|(d, _)| d == day)?;
            (root.seq > 0 && root.seq < first && self.keeps(file.trim_end_matches(".jsonl")))
                .then_some((day, root, file))
        })?;
        Some(format!(
            "the daily root of {day} names seq {} in {file}, which the retention keeps, but the chain now begins at seq {first} (records were removed)",
            root.seq
        ))
    }

    /// A daily root past the end: records written since that day began were removed.
    fn day_past(&self, walked: &Walked) -> Option<String> {
        let last = walked.last?;
        let (day, root) = self.days.iter().find(|(_, root)| root.seq > last)?;
        Some(format!(
            "the daily root of {day} names seq {}, past the chain's end at seq {last} (records were removed)",
            root.seq
        ))
    }
}

/// The break of a chain with no record left whose `head` or daily roots name records the
/// retention keeps (`expired` says which it may have removed).
fn erased(
    head: Option<&(String, End)>,
    days: &[(String, End)],
    walked: Option<u64>,
    expired: &dyn Fn(&str) -> bool,
) -> Option<String> {
    if walked.is_some() {
        return None;
    }
    if let Some((file, end)) = head
        && end.seq > 0
        && !expired(file.trim_end_matches(".jsonl"))
    {
        return Some(format!(
            "the head says the chain ends at seq {} in {file}, but no record is left (the log was deleted or emptied; the retention keeps that file)",
            end.seq
        ));
    }
    days.iter()
        .rfind(|(day, root)| root.seq > 0 && !expired(day))
        .map(|(day, root)| {
            format!(
                "the daily root of {day} names seq {}, but no record is left (the log was deleted or emptied; the retention keeps that day)",
                root.seq
            )
        })
}

/// The file a record names as the one before its own (`chain_after`), if it does.
fn after_of(line: &str) -> Option<String> {
    if !line.contains(AFTER) {
        return None;
    }
    let record: Value = serde_json::from_str(line).ok()?;
    record.get(AFTER)?.as_str().map(str::to_owned)
}

/// The daily roots by the seq they name.
type DayRoots<'a> = std::collections::HashMap<u64, (&'a str, &'a End)>;

fn by_seq(days: &[(String, End)]) -> DayRoots<'_> {
    days.iter()
        .map(|(day, end)| (end.seq, (day.as_str(), end)))
        .collect()
}

/// The break a daily root finds in `line` (seq `seq`): a root naming this seq with
/// another hash says the record was rewritten since that day began.
fn day_root_break(days: &DayRoots, seq: u64, line: &str) -> Option<String> {
    let (day, root) = days.get(&seq)?;
    (root.hash != hash(line)).then(|| {
        format!("the daily root of {day} says this record (seq {seq}) read otherwise: it was rewritten, with every record after it")
    })
}

/// Walks `lines` (of `name`), each linked to the one before (`previous`, carried across
/// files; `first` says what the very first line must link to, if anything is known);
/// counts them into `report`; the first break, in words.
fn walk(
    name: &str,
    lines: &[&str],
    previous: &mut Option<(End, String)>,
    first: impl Fn(u64) -> Option<End>,
    report: &mut Report,
) -> Option<String> {
    // Every seq, to tell a gap that is a reordering from a removal.
    let seqs: Vec<u64> = lines.iter().map(|l| seq_of(l)).collect();
    for (n, line) in lines.iter().enumerate() {
        let at = format!("{name}, line {}", n + 1);
        if line.is_empty() {
            return Some(format!("{at}: an empty line (a record was removed)"));
        }
        let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(line) else {
            return Some(format!("{at}: not a JSON record (it was edited)"));
        };
        let seq = fields.get("seq").and_then(Value::as_u64);
        let prev = fields.get("prev").and_then(Value::as_str);
        let (Some(seq), Some(prev)) = (seq, prev) else {
            if previous.is_none() && report.lines == 0 && !fields.contains_key("prev") {
                // Written before the chain (an older version's log): at its start only.
                report.unchained += 1;
                continue;
            }
            return Some(format!("{at}: no seq or prev (it was edited)"));
        };
        report.lines += 1;
        if let Some(lost) = fields.get(NOT_LOGGED).and_then(Value::as_u64) {
            report.not_logged = report.not_logged.saturating_add(lost);
            report.first_gap.get_or_insert_with(|| at.clone());
        }
        if let Some(mark) = fields.get(BREAK) {
            let said = match mark.get("head_seq").and_then(Value::as_u64) {
                Some(head) => format!(
                    "written after the chain's end was cut or edited (the head named seq {head}, the files ended at seq {})",
                    mark.get("found_seq").and_then(Value::as_u64).unwrap_or(0)
                ),
                None => "written after the chain's head was removed".to_owned(),
            };
            return Some(format!("{at}: {said}"));
        }
        let expected = match previous.as_ref() {
            Some((end, _)) => Some(end.clone()),
            None => first(seq),
        };
        // Linked to the record before and the next seq: a valid link over a gap in the
        // seqs (a record left out, the rest relinked) steps around the daily roots.
        if let Some(expected) = expected
            && (prev != expected.hash || seq != expected.seq.saturating_add(1))
        {
            let next = expected.seq.saturating_add(1);
            let before = previous
                .as_ref()
                .map_or_else(|| "the record before".to_owned(), |(_, at)| at.clone());
            let missing = next..seq;
            let later = seqs.get(n + 1..).unwrap_or_default();
            let what = if seq == next {
                format!("{before} was edited (this record's link to it no longer holds)")
            } else if seq > next && later.iter().any(|s| missing.contains(s)) {
                format!(
                    "records were reordered (seq {seq} comes before seq {})",
                    next
                )
            } else if seq > next {
                format!(
                    "{} record(s) before it were removed (seq {} to {})",
                    seq - next,
                    next,
                    seq - 1
                )
            } else {
                format!(
                    "records were reordered (seq {seq} comes after seq {})",
                    expected.seq
                )
            };
            return Some(format!("{at}: {what}"));
        }
        *previous = Some((
            End {
                seq,
                hash: hash(line),
            },
            at,
        ));
    }
    None
}

/// A chain kept elsewhere than in files (a store's table): `record` as the line after
/// `end`, and the new end.
pub fn link(end: &End, record: &Value) -> (String, End) {
    let line = chained(record, end);
    let next = End {
        seq: end.seq.saturating_add(1),
        hash: hash(&line),
    };
    (line, next)
}

/// Walks a chain kept as `lines` (from the genesis, in `seq` order) named `name`, and its
/// `head` (the newest line's `seq` and hash, kept beside it).
pub fn verify_lines(
    name: &str,
    lines: &[String],
    head: Option<&End>,
    days: &[(String, End)],
) -> Report {
    let mut report = Report {
        days: days.to_vec(),
        ..Report::default()
    };
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let mut previous = None;
    report.files = 1;
    report.broken = walk(
        name,
        &lines,
        &mut previous,
        // A journal is never pruned: its first row is seq 1, linked to the genesis, and a
        // start cut away shows.
        |_| Some(End::genesis()),
        &mut report,
    );
    if report.broken.is_some() {
        return report;
    }
    let day_roots = by_seq(days);
    for (n, line) in lines.iter().enumerate() {
        if let Some(broken) = day_root_break(&day_roots, seq_of(line), line) {
            report.broken = Some(format!("{name}, record {}: {broken}", n + 1));
            return report;
        }
    }
    let last = previous.as_ref().map_or(0, |(end, _)| end.seq);
    if let Some((day, root)) = days.iter().find(|(_, root)| root.seq > last) {
        report.broken = Some(format!(
            "{name}: the daily root of {day} names seq {}, past the chain's end at seq {last} (records were removed)",
            root.seq
        ));
        return report;
    }
    report.broken = head_break(head, previous.as_ref());
    report
}

/// Whether `head` still names the chain's last line (`last`).
fn head_break(head: Option<&End>, last: Option<&(End, String)>) -> Option<String> {
    let Some(head) = head else {
        return last.map(|(_, at)| {
            format!("{at}: the head is missing (records after this one could have been cut)")
        });
    };
    let Some((end, at)) = last else {
        return (head.seq > 0).then(|| {
            format!(
                "the head says the chain ends at seq {} but no record is left",
                head.seq
            )
        });
    };
    if end.seq == head.seq && end.hash == head.hash {
        return None;
    }
    Some(if head.seq > end.seq {
        format!(
            "{at}: the head says the chain ends at seq {} (the last {} record(s) were removed)",
            head.seq,
            head.seq - end.seq
        )
    } else {
        format!("{at}: the head names another last record (it was edited)")
    })
}

/// `HEAD`: the file of the newest line, and the chain's end.
fn read_head(dir: &Path) -> std::io::Result<Option<(String, End)>> {
    let text = match std::fs::read_to_string(dir.join(HEAD)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let value: Value = serde_json::from_str(&text).unwrap_or_default();
    let text = |k: &str| {
        value
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Ok(Some((
        text("file"),
        End {
            seq: value.get("seq").and_then(Value::as_u64).unwrap_or(0),
            hash: text("hash"),
        },
    )))
}

/// The file each daily root names as holding its record: (day, file), in the order written
/// (roots written before they named one are left out).
fn day_files(dir: &Path) -> std::io::Result<Vec<(String, String)>> {
    let text = match std::fs::read_to_string(dir.join(DAYS)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|v| {
            Some((
                v.get("day")?.as_str()?.to_owned(),
                v.get("file")?.as_str()?.to_owned(),
            ))
        })
        .collect())
}

/// The roots kept: (file, its end), in file order.
fn roots(dir: &Path) -> std::io::Result<Vec<(String, End)>> {
    kept(dir, ROOTS, "file")
}

/// The daily roots kept: (day, the chain's end as it began), oldest first.
pub fn days(dir: &Path) -> std::io::Result<Vec<(String, End)>> {
    kept(dir, DAYS, "day")
}

/// `dir/name`'s lines as (their `key`, an end), sorted by it.
fn kept(dir: &Path, name: &str, key: &str) -> std::io::Result<Vec<(String, End)>> {
    let mut kept = kept_lines(dir, name, key)?;
    kept.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(kept)
}

/// `dir/name`'s lines as (their `key`, an end), in the order written.
fn kept_lines(dir: &Path, name: &str, key: &str) -> std::io::Result<Vec<(String, End)>> {
    let text = match std::fs::read_to_string(dir.join(name)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let roots: Vec<(String, End)> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|v| {
            Some((
                v.get(key)?.as_str()?.to_owned(),
                End {
                    seq: v.get("seq")?.as_u64()?,
                    hash: v.get("hash")?.as_str()?.to_owned(),
                },
            ))
        })
        .collect();
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lines(dir: &Path, file: &str) -> Vec<String> {
        std::fs::read_to_string(dir.join(file))
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn write(dir: &Path, file: &str, lines: &[String]) {
        std::fs::write(dir.join(file), lines.join("\n") + "\n").unwrap();
    }

    /// Two files of three records each.
    fn chain() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (file, n) in [("2026-11-25.jsonl", 0), ("2026-11-26.jsonl", 3)] {
            for i in 0..3 {
                append(
                    dir.path(),
                    file,
                    &[json!({"turn": n + i, "args_keys": ["path"]})],
                )
                .unwrap();
            }
        }
        dir
    }

    fn broken(dir: &Path) -> String {
        verify(dir, None, &|_| false)
            .unwrap()
            .broken
            .unwrap_or_default()
    }

    #[test]
    fn an_untouched_chain_verifies_across_files_and_keeps_its_records() {
        let dir = chain();
        let report = verify(dir.path(), None, &|_| false).unwrap();
        assert_eq!(report.broken, None);
        assert_eq!((report.files, report.lines), (2, 6));
        let first: Value = serde_json::from_str(&lines(dir.path(), "2026-11-26.jsonl")[0]).unwrap();
        assert_eq!(first["seq"], 4);
        assert_eq!(first["turn"], 3);
        assert_eq!(first["args_keys"], json!(["path"]));
        // The second file's first line links to the first file's last.
        let last = lines(dir.path(), "2026-11-25.jsonl").pop().unwrap();
        assert_eq!(first["prev"], hash(&last));
        // The first file's root was kept when the second began.
        let roots = std::fs::read_to_string(dir.path().join(ROOTS)).unwrap();
        assert!(
            roots.contains("2026-11-25.jsonl") && roots.contains(&hash(&last)),
            "{roots}"
        );
        assert_eq!(
            verify(dir.path(), Some("2026-11-26"), &|_| false)
                .unwrap()
                .files,
            1
        );
    }

    #[test]
    fn an_edited_line_is_named() {
        let dir = chain();
        let mut file = lines(dir.path(), "2026-11-25.jsonl");
        file[1] = file[1].replace("\"turn\":1", "\"turn\":9");
        write(dir.path(), "2026-11-25.jsonl", &file);
        let broken = broken(dir.path());
        assert!(
            broken.starts_with("2026-11-25.jsonl, line 3: 2026-11-25.jsonl, line 2 was edited"),
            "{broken}"
        );
    }

    #[test]
    fn a_removed_line_is_named() {
        let dir = chain();
        let mut file = lines(dir.path(), "2026-11-26.jsonl");
        file.remove(1);
        write(dir.path(), "2026-11-26.jsonl", &file);
        let broken = broken(dir.path());
        assert!(
            broken.starts_with(
                "2026-11-26.jsonl, line 2: 1 record(s) before it were removed (seq 5 to 5)"
            ),
            "{broken}"
        );
    }

    #[test]
    fn a_swapped_pair_is_named() {
        let dir = chain();
        let mut file = lines(dir.path(), "2026-11-26.jsonl");
        file.swap(0, 1);
        write(dir.path(), "2026-11-26.jsonl", &file);
        assert_eq!(
            broken(dir.path()),
            "2026-11-26.jsonl, line 1: records were reordered (seq 5 comes before seq 4)"
        );
        let mut file = lines(dir.path(), "2026-11-26.jsonl");
        file.swap(0, 1);
        file.swap(1, 2);
        write(dir.path(), "2026-11-26.jsonl", &file);
        assert_eq!(
            broken(dir.path()),
            "2026-11-26.jsonl, line 2: records were reordered (seq 6 comes before seq 5)"
        );
    }

    #[test]
    fn a_removed_last_line_a_removed_file_and_a_cut_file_are_named() {
        let dir = chain();
        let mut file = lines(dir.path(), "2026-11-26.jsonl");
        let last = file.pop().unwrap();
        write(dir.path(), "2026-11-26.jsonl", &file);
        assert!(broken(dir.path()).contains("the head says the chain ends at seq 6"));
        file.push(last);
        write(dir.path(), "2026-11-26.jsonl", &file);
        assert_eq!(broken(dir.path()), "");

        // The first file's last line cut: its root no longer holds.
        let mut first = lines(dir.path(), "2026-11-25.jsonl");
        first.pop();
        write(dir.path(), "2026-11-25.jsonl", &first);
        let said = broken(dir.path());
        assert!(
            said.starts_with(
                "2026-11-25.jsonl, line 2: the file's root says its last record is seq 3"
            ),
            "{said}"
        );

        // A whole middle file gone (not the oldest, which the retention removes).
        let dir = chain();
        append(dir.path(), "2026-11-27.jsonl", &[json!({"turn": 6})]).unwrap();
        std::fs::remove_file(dir.path().join("2026-11-26.jsonl")).unwrap();
        assert!(
            broken(dir.path()).contains("removed (seq 4 to 6)"),
            "{}",
            broken(dir.path())
        );
    }

    #[test]
    fn the_oldest_files_pruned_by_retention_leave_a_chain_that_verifies() {
        let dir = chain();
        std::fs::remove_file(dir.path().join("2026-11-25.jsonl")).unwrap();
        let by_retention = |stem: &str| stem <= "2026-11-25";
        assert_eq!(
            verify(dir.path(), None, &by_retention).unwrap().broken,
            None
        );
    }

    /// Issue 38 (sixteenth review): the oldest files deleted and the root of the last of
    /// them renamed to a date the retention removed; with the daily roots left as they
    /// were, or the older of them deleted too.
    #[test]
    fn files_erased_under_a_root_renamed_to_an_expired_date_are_a_break() {
        for days_too in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            for (file, n) in [("2026-11-24.jsonl", 0), ("2026-11-25.jsonl", 3)] {
                for i in 0..3 {
                    append(dir.path(), file, &[json!({"turn": n + i})]).unwrap();
                }
            }
            // Today's root, as the next day's writes would keep it: seq 6, in 2026-11-25.
            let sixth = lines(dir.path(), "2026-11-25.jsonl")[2].clone();
            let root = json!({"day": "2026-11-26", "seq": 6, "hash": hash(&sixth), "file": "2026-11-25.jsonl"});
            std::fs::write(dir.path().join(DAYS), format!("{root}\n")).unwrap();
            let third = lines(dir.path(), "2026-11-24.jsonl")[2].clone();
            if !days_too {
                let older = json!({"day": "2026-11-25", "seq": 3, "hash": hash(&third), "file": "2026-11-24.jsonl"});
                let text = std::fs::read_to_string(dir.path().join(DAYS)).unwrap();
                std::fs::write(dir.path().join(DAYS), format!("{older}\n{text}")).unwrap();
            }
            for i in 0..3 {
                append(dir.path(), "2026-11-26.jsonl", &[json!({"turn": 6 + i})]).unwrap();
            }
            let intact = verify(dir.path(), None, &|stem: &str| stem < "2026-11-01").unwrap();
            assert_eq!(intact.broken, None, "{days_too}");
            assert!(
                intact.newest_day().contains("seq 6 in 2026-11-25.jsonl"),
                "{}",
                intact.newest_day()
            );
            std::fs::remove_file(dir.path().join("2026-11-24.jsonl")).unwrap();
            std::fs::remove_file(dir.path().join("2026-11-25.jsonl")).unwrap();
            let forged = json!({"file": "2000-01-01.jsonl", "seq": 6, "hash": hash(&sixth)});
            std::fs::write(dir.path().join(ROOTS), format!("{forged}\n")).unwrap();
            let broken = verify(dir.path(), None, &|stem: &str| stem < "2026-11-01")
                .unwrap()
                .broken
                .unwrap_or_default();
            // (The first kept file's first record names the file before it too.)
            assert!(
                broken.contains("2026-11-25.jsonl") && broken.contains("deleted"),
                "{days_too}: {broken}"
            );
        }
    }

    /// Nineteenth review of issue 38: a root edited to the largest seq is a break, never a
    /// panic (an overflow) of the verifying or the writing process.
    #[test]
    fn a_root_at_the_largest_seq_is_a_break_not_a_panic() {
        let dir = chain();
        std::fs::remove_file(dir.path().join("2026-11-25.jsonl")).unwrap();
        let forged = json!({"file": "2000-01-01.jsonl", "seq": u64::MAX, "hash": "x"});
        std::fs::write(dir.path().join(ROOTS), format!("{forged}\n")).unwrap();
        let report = verify(dir.path(), None, &|stem: &str| stem < "2026-11-26").unwrap();
        assert!(report.broken.is_some(), "{report:?}");
        let head = json!({"file": "2026-11-26.jsonl", "seq": u64::MAX, "hash": "x"});
        std::fs::write(dir.path().join(HEAD), format!("{head}\n")).unwrap();
        append(dir.path(), "2026-11-27.jsonl", &[json!({"n": 1})]).unwrap();
    }

    /// Issue 38 (eighteenth review): records left out and the rest relinked, keeping their
    /// seqs: every link holds, but the seq jumps (and the daily root naming a left-out seq
    /// would be stepped over).
    #[test]
    fn a_gap_in_the_seqs_is_a_break_however_well_linked() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..5 {
            append(dir.path(), "2026-11-26.jsonl", &[json!({"n": n})]).unwrap();
        }
        let kept = lines(dir.path(), "2026-11-26.jsonl");
        // Leave out seq 2 and 3; relink seq 4 and 5 to the records now before them.
        let mut end = End::genesis();
        let mut out = Vec::new();
        for line in [&kept[0], &kept[3], &kept[4]] {
            let mut record: Value = serde_json::from_str(line).unwrap();
            record["prev"] = Value::String(end.hash.clone());
            let text = record.to_string();
            end = End {
                seq: record["seq"].as_u64().unwrap(),
                hash: hash(&text),
            };
            out.push(text);
        }
        write(dir.path(), "2026-11-26.jsonl", &out);
        let head = json!({"file": "2026-11-26.jsonl", "seq": end.seq, "hash": end.hash});
        std::fs::write(dir.path().join(HEAD), format!("{head}\n")).unwrap();
        let broken = verify(dir.path(), None, &|_| false)
            .unwrap()
            .broken
            .unwrap_or_default();
        assert!(
            broken.contains("line 2: 2 record(s) before it were removed (seq 2 to 3)"),
            "{broken}"
        );
        // The same in a store's journal.
        let mut end = End::genesis();
        let mut rows = Vec::new();
        for n in 0..4 {
            let (line, next) = link(&end, &json!({"n": n}));
            rows.push(line);
            end = next;
        }
        let mut relinked: Value = serde_json::from_str(&rows[2]).unwrap();
        relinked["prev"] = Value::String(hash(&rows[0]));
        let gap = vec![rows[0].clone(), relinked.to_string()];
        let tail = End {
            seq: 3,
            hash: hash(&gap[1]),
        };
        let report = verify_lines("decisions", &gap, Some(&tail), &[]);
        assert!(
            report
                .broken
                .is_some_and(|b| b.contains("1 record(s) before it were removed")),
        );
    }

    /// Issue 38 (seventeenth review): the oldest files deleted, `ROOTS` rewritten to an
    /// expired date and the older daily roots deleted, the newest kept as it was: the first
    /// kept file's first record still names the file before it.
    #[test]
    fn a_file_s_first_record_names_the_file_before_it() {
        let dir = tempfile::tempdir().unwrap();
        for (file, n) in [
            ("2026-11-24.jsonl", 0),
            ("2026-11-25.jsonl", 3),
            ("2026-11-26.jsonl", 6),
        ] {
            for i in 0..3 {
                append(dir.path(), file, &[json!({"turn": n + i})]).unwrap();
            }
        }
        let first = lines(dir.path(), "2026-11-26.jsonl")[0].clone();
        assert!(
            first.contains(r#""chain_after":"2026-11-25.jsonl""#),
            "{first}"
        );
        assert!(!lines(dir.path(), "2026-11-24.jsonl")[0].contains(AFTER));
        let kept = |stem: &str| stem < "2026-11-01";
        assert_eq!(verify(dir.path(), None, &kept).unwrap().broken, None);
        std::fs::remove_file(dir.path().join("2026-11-24.jsonl")).unwrap();
        std::fs::remove_file(dir.path().join("2026-11-25.jsonl")).unwrap();
        let sixth = serde_json::from_str::<Value>(&first).unwrap()["prev"].clone();
        let forged = json!({"file": "2000-01-01.jsonl", "seq": 6, "hash": sixth});
        std::fs::write(dir.path().join(ROOTS), format!("{forged}\n")).unwrap();
        std::fs::write(dir.path().join(DAYS), "").unwrap();
        let broken = verify(dir.path(), None, &kept)
            .unwrap()
            .broken
            .unwrap_or_default();
        assert!(
            broken.starts_with("2026-11-26.jsonl, line 1: its file follows 2026-11-25.jsonl"),
            "{broken}"
        );
        // The same files removed by the retention: intact.
        let removed = |stem: &str| stem < "2026-11-26";
        let report = verify(dir.path(), None, &removed).unwrap();
        assert_eq!((report.broken, report.unchained), (None, 0));
        // The first kept file's first records cut too: its start is not proven.
        let file = dir.path().join("2026-11-26.jsonl");
        let rest = lines(dir.path(), "2026-11-26.jsonl")[2..].join("\n") + "\n";
        std::fs::write(&file, rest).unwrap();
        let third = serde_json::from_str::<Value>(&lines(dir.path(), "2026-11-26.jsonl")[0])
            .unwrap()["prev"]
            .clone();
        let forged = json!({"file": "2000-01-01.jsonl", "seq": 8, "hash": third});
        std::fs::write(dir.path().join(ROOTS), format!("{forged}\n")).unwrap();
        let report = verify(dir.path(), None, &kept).unwrap();
        assert_eq!((report.broken, report.unchained), (None, 1));
    }

    /// Issue 38 (fifteenth review): the oldest files deleted or emptied inside the
    /// retention's horizon read intact, the first kept file linking to their roots.
    #[test]
    fn the_oldest_files_erased_inside_the_retention_are_a_break() {
        for how in ["deleted", "emptied"] {
            let dir = chain();
            let file = dir.path().join("2026-11-25.jsonl");
            match how {
                "emptied" => std::fs::write(&file, "").unwrap(),
                _ => std::fs::remove_file(&file).unwrap(),
            }
            let broken = verify(dir.path(), None, &|_| false)
                .unwrap()
                .broken
                .unwrap_or_default();
            assert!(
                broken.starts_with("2026-11-25.jsonl: its root says it held the records up to seq"),
                "{how}: {broken}"
            );
            // From a later day on, the file is not asked about.
            let from_later = verify(dir.path(), Some("2026-11-26"), &|_| false).unwrap();
            assert_eq!(from_later.broken, None, "{how}");
        }
    }

    #[test]
    fn the_end_is_read_from_the_files_whatever_a_line_s_length() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(50_000);
        append(dir.path(), "2026-11-26.jsonl", &[json!({"text": long})]).unwrap();
        let end = append(dir.path(), "2026-11-26.jsonl", &[json!({"n": 2})]).unwrap();
        assert_eq!(end.seq, 2);
        assert_eq!(verify(dir.path(), None, &|_| false).unwrap().broken, None);
    }
}

#[cfg(test)]
mod end_tests {
    use super::*;
    use serde_json::json;

    fn day(dir: &Path, file: &str, n: usize) {
        for i in 0..n {
            append(dir, file, &[json!({"n": i})]).unwrap();
        }
    }

    fn broken(dir: &Path) -> String {
        verify(dir, None, &|_| false)
            .unwrap()
            .broken
            .unwrap_or_default()
    }

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `records` chained from the genesis, as a writer rewriting the whole log would:
    /// every link and the head consistent.
    fn rewrite(dir: &Path, file: &str, records: &[Value]) {
        let mut end = End::genesis();
        let mut text = String::new();
        for record in records {
            let (line, next) = link(&end, record);
            text.push_str(&line);
            text.push('\n');
            end = next;
        }
        std::fs::write(dir.join(file), text).unwrap();
        replace(
            dir,
            HEAD,
            &json!({"file": file, "seq": end.seq, "hash": end.hash}).to_string(),
        )
        .unwrap();
    }

    /// The daily root: the first record of a day keeps the chain's end as the day began
    /// (once a day). A log rewritten whole — every link and HEAD consistent — still shows,
    /// as does a cut end made consistent again.
    #[test]
    fn a_daily_root_catches_a_log_rewritten_whole() {
        let dir = tempfile::tempdir().unwrap();
        let file = "2026-11.jsonl";
        day(dir.path(), file, 1);
        assert!(
            days(dir.path()).unwrap().is_empty(),
            "nothing before the first record"
        );
        day(dir.path(), file, 3);
        let kept = days(dir.path()).unwrap();
        // (A run across midnight keeps two roots, the second with seq 2 or more.)
        let today = kept[0].0.clone();
        assert_eq!(kept[0].1.seq, 1, "{kept:?}");
        assert!(
            kept.len() == 1 || kept[1].1.seq >= 2,
            "one root a day: {kept:?}"
        );
        if kept.len() > 1 {
            return;
        }
        // A root kept on an earlier day, naming seq 3 as it was.
        let third = lines(&dir.path().join(file))[2].clone();
        let mut text = std::fs::read_to_string(dir.path().join(DAYS)).unwrap();
        text.push_str(&format!(
            "{}\n",
            json!({"day": "2026-01-01", "seq": 3, "hash": hash(&third)})
        ));
        std::fs::write(dir.path().join(DAYS), text).unwrap();
        let report = verify(dir.path(), None, &|_| false).unwrap();
        assert_eq!((report.lines, report.broken.as_deref()), (4, None));
        assert_eq!(report.days.len(), 2, "{:?}", report.days);
        // The newest is the one furthest along the chain, whatever its date says.
        assert_eq!(
            report.newest_day(),
            format!("2026-01-01: seq 3, sha256 {}", hash(&third))
        );

        // Rewritten whole from its first record.
        let records: Vec<Value> = (0..5).map(|i| json!({"n": i * 10 + 1})).collect();
        rewrite(dir.path(), file, &records);
        let said = broken(dir.path());
        assert!(
            said.contains("line 1") && said.contains(&format!("daily root of {today}")),
            "{said}"
        );
        // Cut to two records as they were, made consistent again: the earlier root names
        // seq 3.
        rewrite(dir.path(), file, &[json!({"n": 0}), json!({"n": 0})]);
        let said = broken(dir.path());
        assert!(said.contains("past the chain's end at seq 2"), "{said}");
    }

    /// A cut end is not covered up by the next write: the line after it says so.
    #[test]
    fn a_cut_end_stays_visible_after_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("2026-11-26.jsonl");
        day(dir.path(), "2026-11-26.jsonl", 3);
        let mut kept = lines(&file);
        kept.pop();
        std::fs::write(&file, kept.join("\n") + "\n").unwrap();
        append(dir.path(), "2026-11-26.jsonl", &[json!({"n": 9})]).unwrap();
        append(dir.path(), "2026-11-26.jsonl", &[json!({"n": 10})]).unwrap();
        assert_eq!(
            broken(dir.path()),
            "2026-11-26.jsonl, line 3: written after the chain's end was cut or edited (the head named seq 3, the files ended at seq 2)"
        );
    }

    /// A removed HEAD is a break, and stays one after the next write.
    #[test]
    fn a_removed_head_is_a_break_that_the_next_write_keeps() {
        let dir = tempfile::tempdir().unwrap();
        day(dir.path(), "2026-11-26.jsonl", 2);
        std::fs::remove_file(dir.path().join(HEAD)).unwrap();
        assert!(
            broken(dir.path()).contains("the head is missing"),
            "{}",
            broken(dir.path())
        );
        append(dir.path(), "2026-11-26.jsonl", &[json!({"n": 9})]).unwrap();
        assert!(
            broken(dir.path()).contains("line 3: written after the chain's head was removed"),
            "{}",
            broken(dir.path())
        );
    }

    /// A line a crash left half-written is dropped; the chain goes on intact. A crash
    /// between the lines and HEAD is no break either.
    #[test]
    fn a_crash_leaves_no_false_alarm() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("2026-11-26.jsonl");
        day(dir.path(), "2026-11-26.jsonl", 2);
        let mut torn = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        torn.write_all(b"{\"seq\":3,\"prev\":\"ab").unwrap();
        append(dir.path(), "2026-11-26.jsonl", &[json!({"n": 2})]).unwrap();
        assert_eq!(verify(dir.path(), None, &|_| false).unwrap().broken, None);
        assert_eq!(lines(&file).len(), 3);
        // Lines written, HEAD not (it still names the line before).
        let head = std::fs::read_to_string(dir.path().join(HEAD)).unwrap();
        append(dir.path(), "2026-11-26.jsonl", &[json!({"n": 3})]).unwrap();
        std::fs::write(dir.path().join(HEAD), head).unwrap();
        append(dir.path(), "2026-11-26.jsonl", &[json!({"n": 4})]).unwrap();
        assert_eq!(verify(dir.path(), None, &|_| false).unwrap().broken, None);
    }

    /// An older version's lines (no seq, no prev) at the start are counted, not flagged;
    /// the chain starts after them.
    #[test]
    fn lines_from_before_the_chain_are_counted_not_flagged() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("2026-11-25.jsonl"),
            "{\"turn_id\":\"a\"}\n{\"turn_id\":\"b\"}\n",
        )
        .unwrap();
        day(dir.path(), "2026-11-25.jsonl", 2);
        day(dir.path(), "2026-11-26.jsonl", 1);
        let report = verify(dir.path(), None, &|_| false).unwrap();
        assert_eq!(
            (report.unchained, report.lines, report.broken),
            (2, 3, None)
        );
    }

    /// Issue 38, break 4: deleting or emptying the whole current log passed while HEAD and
    /// DAYS still named it; only the retention may leave nothing.
    #[test]
    fn an_erased_log_is_a_break_unless_the_retention_removed_it() {
        for how in ["deleted", "emptied", "deleted with its roots"] {
            let dir = tempfile::tempdir().unwrap();
            day(dir.path(), "2026-11-26.jsonl", 3);
            let file = dir.path().join("2026-11-26.jsonl");
            match how {
                "emptied" => std::fs::write(&file, "").unwrap(),
                "deleted with its roots" => {
                    std::fs::remove_file(&file).unwrap();
                    std::fs::remove_file(dir.path().join(HEAD)).unwrap();
                }
                _ => std::fs::remove_file(&file).unwrap(),
            }
            let report = verify(dir.path(), None, &|_| false).unwrap();
            let broken = report.broken.unwrap_or_default();
            assert!(broken.contains("no record is left"), "{how}: {broken}");
            if how != "deleted with its roots" {
                // From a day on: the same.
                let report = verify(dir.path(), Some("2026-11-20"), &|_| false).unwrap();
                let broken = report.broken.unwrap_or_default();
                assert!(broken.contains("no record is left"), "{how}: {broken}");
            }
            // The same state past the retention's horizon is its doing.
            let report = verify(dir.path(), None, &|_| true).unwrap();
            assert_eq!(report.broken, None, "{how}");
        }
    }

    /// Twenty-ninth review of issue 38: every file of the log erased, its head and roots
    /// too, read as intact. Where a writer once ran (its LOCK stays) it is a break; a
    /// folder no writer ever used is not.
    #[test]
    fn a_log_erased_with_its_head_and_roots_is_a_break() {
        let dir = tempfile::tempdir().unwrap();
        day(dir.path(), "2026-11-26.jsonl", 3);
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().is_some_and(|n| n != LOCK) {
                std::fs::remove_file(path).unwrap();
            }
        }
        assert!(dir.path().join(LOCK).exists());
        for expired in [false, true] {
            let report = verify(dir.path(), None, &|_| expired).unwrap();
            let broken = report.broken.unwrap_or_default();
            assert!(broken.contains("the whole log was erased"), "{broken}");
        }
        let fresh = tempfile::tempdir().unwrap();
        assert_eq!(verify(fresh.path(), None, &|_| false).unwrap().broken, None);
    }

    /// The retention removing every file: the chain goes on from HEAD, and verifies.
    #[test]
    fn the_retention_removing_every_file_leaves_a_chain_that_verifies() {
        let dir = tempfile::tempdir().unwrap();
        day(dir.path(), "2026-10-01.jsonl", 2);
        day(dir.path(), "2026-10-02.jsonl", 2);
        std::fs::remove_file(dir.path().join("2026-10-01.jsonl")).unwrap();
        std::fs::remove_file(dir.path().join("2026-10-02.jsonl")).unwrap();
        day(dir.path(), "2026-11-26.jsonl", 1);
        let report = verify(dir.path(), None, &|stem| stem < "2026-11").unwrap();
        assert_eq!(report.broken, None);
        assert_eq!(report.lines, 1);
        // The same files removed inside the retention's horizon were erased.
        let report = verify(dir.path(), None, &|_| false).unwrap();
        assert!(
            report
                .broken
                .is_some_and(|b| b.starts_with("2026-10-01.jsonl"))
        );
    }

    /// The start cut away (with no root to say where it began) is a break; so is a stray
    /// file that is not a day's ignored by the writer.
    #[test]
    fn a_cut_start_is_a_break_and_a_stray_file_does_not_capture_the_writes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("2026-11-26.jsonl");
        day(dir.path(), "2026-11-26.jsonl", 3);
        let mut kept = lines(&file);
        kept.remove(0);
        std::fs::write(&file, kept.join("\n") + "\n").unwrap();
        assert!(
            broken(dir.path()).contains("line 1: 1 record(s) before it were removed (seq 1 to 1)"),
            "{}",
            broken(dir.path())
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.jsonl"), "").unwrap();
        day(dir.path(), "2026-11-26.jsonl", 1);
        assert_eq!(lines(&dir.path().join("2026-11-26.jsonl")).len(), 1);
    }
}

#[cfg(test)]
mod stored_tests {
    use super::*;
    use serde_json::json;

    /// A chain kept in a table: linked, verified with its head; an edited, removed or
    /// swapped row, and a removed last row, are each named.
    #[test]
    fn a_chain_kept_as_rows_names_each_kind_of_tampering() {
        let mut end = End::genesis();
        let mut rows = Vec::new();
        for n in 0..4 {
            let (line, next) = link(&end, &json!({"status": "approved", "n": n}));
            rows.push(line);
            end = next;
        }
        let head = end.clone();
        let report = verify_lines("decisions", &rows, Some(&head), &[]);
        assert_eq!((report.lines, report.broken), (4, None));
        let broken = |rows: &[String]| {
            verify_lines("decisions", rows, Some(&head), &[])
                .broken
                .unwrap()
        };
        let mut edited = rows.clone();
        edited[1] = edited[1].replace("approved", "rejected");
        assert_eq!(
            broken(&edited),
            "decisions, line 3: decisions, line 2 was edited (this record's link to it no longer holds)"
        );
        let mut removed = rows.clone();
        removed.remove(1);
        assert!(broken(&removed).contains("line 2: 1 record(s) before it were removed"));
        let mut swapped = rows.clone();
        swapped.swap(1, 2);
        assert!(broken(&swapped).contains("line 2: records were reordered"));
        let mut cut = rows.clone();
        cut.pop();
        assert!(broken(&cut).contains("the head says the chain ends at seq 4"));
        let mut last = rows.clone();
        last[3] = last[3].replace("approved", "rejected");
        assert!(broken(&last).contains("the head names another last record"));
        assert!(broken(&[]).contains("no record is left"));
        let lost = verify_lines("decisions", &rows, None, &[]).broken.unwrap();
        assert!(lost.contains("the head is missing"), "{lost}");
        // Fifteenth review of issue 38: the oldest rows deleted (a journal is never pruned).
        let mut start_cut = rows.clone();
        start_cut.drain(..2);
        assert!(
            broken(&start_cut).contains("line 1: 2 record(s) before it were removed (seq 1 to 2)"),
            "{}",
            broken(&start_cut)
        );
    }
}
