//! The private verdict log (seed vaglio.md ch. 6): one JSON line per verdict in monthly
//! files `vaglio/YYYY-MM.jsonl` under the data directory. Argument and context KEYS only,
//! never values. Writing happens on a task of its own, a batch at a time, behind a bounded
//! queue. A verdict is answered once its line is in the queue (issue 41: never dropped):
//! a full queue makes it wait for room, and a log that has no room within
//! `vaglio.log_wait_ms` fails it closed rather than answering it unlogged. A disk that
//! refuses a line does not fail the verdict (the seed): the lines lost are counted and the
//! next line written is a gap record saying how many (`metnos audit verify` reports it).
//! Waiting for the disk itself would cost each verdict a write (p50 106 → 859 µs on one
//! client, BENCHMARKS.md); what a kill -9 can lose is the queue of that instant.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

/// One line of the log, the seed's record plus the rule that fired, if any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub approved: bool,
    pub reason: String,
    /// Unix time of the verdict, in seconds.
    pub ts: f64,
    pub judge_kind: String,
    pub score: f64,
    /// "guard", "judge" or null.
    pub blocked_by: Option<String>,
    pub intent: String,
    pub executor: String,
    pub args_keys: Vec<String>,
    pub context_keys: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg_key: Option<String>,
}

enum Message {
    Record(Box<Record>),
    Flush(oneshot::Sender<()>),
}

/// A verdict whose line the log could not take in time: the verdict must not be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the verdict log had no room for the verdict within {} ms (the disk is slower than the verdicts): refused unanswered",
    .0.as_millis()
)]
pub struct Behind(pub Duration);

/// What the log keeps and how much may wait to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    /// The intent is cut to this many bytes in a line (`vaglio.log_intent_bytes`).
    pub intent_bytes: usize,
    /// Lines waiting for the disk at most (`vaglio.log_queue_lines`); beyond, a verdict
    /// waits for room.
    pub queue_lines: usize,
    /// How long a verdict waits for room in the queue (`vaglio.log_wait_ms`); past it the
    /// verdict fails closed.
    pub wait: Duration,
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            intent_bytes: 2048,
            queue_lines: 1024,
            wait: Duration::from_secs(5),
        }
    }
}

/// The log's writer handle.
#[derive(Debug, Clone)]
pub struct VerdictLog {
    dir: PathBuf,
    tx: mpsc::Sender<Message>,
    limits: LogLimits,
    failures: Arc<AtomicU64>,
    /// Whether the last write failed.
    failing: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Message")
    }
}

/// `YYYY-MM` of a Unix time in seconds (UTC).
pub fn month_of(ts: f64) -> String {
    jiff::Timestamp::from_millisecond((ts * 1000.0) as i64)
        .map(|t| t.strftime("%Y-%m").to_string())
        .unwrap_or_else(|_| "1970-01".to_owned())
}

/// Removes the monthly files of `dir` whose every verdict is older than `keep_months`
/// months at `now` (the file of month M goes once M is more than `keep_months` months
/// before the current one). Other files are left alone. Returns the months removed.
pub fn prune(dir: &Path, keep_months: u32, now: jiff::Timestamp) -> std::io::Result<Vec<String>> {
    metnos_kit::datadir::prune_dated(dir, |month| {
        month.len() == 7 && expired(month, keep_months, now)
    })
}

/// Whether the retention keeping `keep_months` months at `now` may have removed the
/// verdicts of `month` (`YYYY-MM`, or a day `YYYY-MM-DD` of it; anything else: no).
pub fn expired(month: &str, keep_months: u32, now: jiff::Timestamp) -> bool {
    let today = now.to_zoned(jiff::tz::TimeZone::UTC).date();
    let current = i64::from(today.year()) * 12 + i64::from(today.month()) - 1;
    let Some((year, m)) = month.get(..7).and_then(|month| month.split_once('-')) else {
        return false;
    };
    let (Ok(year), Ok(m)) = (year.parse::<i64>(), m.parse::<i64>()) else {
        return false;
    };
    (1..=12).contains(&m) && current - (year * 12 + m - 1) > i64::from(keep_months)
}

impl VerdictLog {
    /// Starts the writer for `dir` (created when the first line is written), with the
    /// default limits.
    pub fn start(dir: PathBuf) -> VerdictLog {
        VerdictLog::with_limits(dir, LogLimits::default())
    }

    /// Starts the writer for `dir` with `limits`.
    pub fn with_limits(dir: PathBuf, limits: LogLimits) -> VerdictLog {
        let (tx, rx) = mpsc::channel::<Message>(limits.queue_lines.max(1));
        let failures = Arc::new(AtomicU64::new(0));
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        tokio::spawn(write_lines(
            dir.clone(),
            rx,
            Arc::clone(&failures),
            Arc::clone(&failing),
        ));
        VerdictLog {
            dir,
            tx,
            limits,
            failures,
            failing,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues a record, its intent cut to the configured length, waiting for room when the
    /// queue is full. A log that has no room within `wait` is [`Behind`]: the verdict must
    /// not be answered.
    pub async fn append(&self, mut record: Record) -> Result<(), Behind> {
        cut(&mut record.intent, self.limits.intent_bytes);
        let queued = match self.tx.try_send(Message::Record(Box::new(record))) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Full(message)) => self
                .tx
                .send_timeout(message, self.limits.wait)
                .await
                .is_ok(),
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        };
        if queued {
            Ok(())
        } else {
            tracing::warn!(
                wait_ms = self.limits.wait.as_millis() as u64,
                "verdict log behind: a verdict was refused unanswered"
            );
            Err(Behind(self.limits.wait))
        }
    }

    /// Waits until everything queued so far is written (or failed).
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Message::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// Whether the last batch could not be written (cleared by the next good one).
    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    /// Lines that could not be written since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// The records of `month` (oldest first), only refused ones if `blocked_only`, at most
    /// `limit` (the newest kept). A missing file is an empty month. The file is read from
    /// its end, a block at a time, only as far back as `limit` records need.
    pub fn read(
        &self,
        month: &str,
        blocked_only: bool,
        limit: usize,
    ) -> std::io::Result<Vec<Record>> {
        let path = self.dir.join(format!("{month}.jsonl"));
        let mut records = Vec::new();
        let read = tail_lines(&path, |line| {
            if let Ok(record) = serde_json::from_slice::<Record>(line)
                && (!blocked_only || !record.approved)
            {
                records.push(record);
            }
            records.len() < limit
        });
        match read {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        }
        records.reverse();
        Ok(records)
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary, saying how much went.
fn cut(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let removed = text.len() - end;
    text.truncate(end);
    text.push_str(&format!("…[{removed} bytes cut]"));
}

/// Calls `each` with the lines of `path` from the last to the first (without their
/// newline), until it returns `false`. Reads 64 KiB blocks from the end.
fn tail_lines(path: &Path, each: impl FnMut(&[u8]) -> bool) -> std::io::Result<()> {
    tail_lines_within(path, MAX_LINE, each)
}

/// The longest line [`tail_lines`] hands on; a longer one (written before lines were cut)
/// is skipped, so reading never holds more than this and a block.
const MAX_LINE: usize = 1024 * 1024;

fn tail_lines_within(
    path: &Path,
    max_line: usize,
    mut each: impl FnMut(&[u8]) -> bool,
) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    const BLOCK: u64 = 64 * 1024;
    let mut file = std::fs::File::open(path)?;
    let mut end = file.seek(SeekFrom::End(0))?;
    // The bytes after the last newline seen so far (the start of a line not yet whole).
    let mut carry: Vec<u8> = Vec::new();
    // Inside a line longer than `max_line`: its start, once found, is dropped too.
    let mut skipping = false;
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let mut block = vec![0; usize::try_from(end - start).unwrap_or(0)];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block)?;
        block.extend_from_slice(&carry);
        carry.clear();
        let mut rest = block.as_slice();
        while let Some(newline) = rest.iter().rposition(|b| *b == b'\n') {
            let line = &rest[newline + 1..];
            if std::mem::take(&mut skipping) {
                // The first part of the over-long line.
            } else if !line.is_empty() && !each(line) {
                return Ok(());
            }
            rest = &rest[..newline];
        }
        if skipping || rest.len() > max_line {
            skipping = true;
        } else {
            carry.extend_from_slice(rest);
        }
        end = start;
    }
    if !carry.is_empty() && !skipping {
        each(&carry);
    }
    Ok(())
}

/// The writer: takes what is waiting and writes it in one go, a gap record first when
/// lines were lost before; answers the flushes it held once the batch is written or lost.
async fn write_lines(
    dir: PathBuf,
    mut rx: mpsc::Receiver<Message>,
    failures: Arc<AtomicU64>,
    failing: Arc<std::sync::atomic::AtomicBool>,
) {
    // The same count as an OpenTelemetry counter, exported with the traces.
    let counter = opentelemetry::global::meter("metnos-vaglio")
        .u64_counter("metnos.vaglio.log_write_failures")
        .with_description("Verdict log lines that could not be written (the verdicts stood; a gap record says how many)")
        .build();
    let mut gap = metnos_kit::chain::Gap::default();
    loop {
        // While lines are missing from the chain, the writer also wakes on its own to write
        // the gap record alone: a gap is never left to a later verdict that may not come.
        let mut batch = if gap.count() > 0 {
            match tokio::time::timeout(GAP_RETRY, rx.recv()).await {
                Ok(Some(message)) => vec![message],
                Ok(None) | Err(_) => Vec::new(),
            }
        } else {
            match rx.recv().await {
                Some(message) => vec![message],
                None => break,
            }
        };
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let closed = batch.is_empty() && rx.is_closed();
        let records = batch
            .iter()
            .filter(|m| matches!(m, Message::Record(_)))
            .count() as u64;
        let (folder, pending) = (dir.clone(), gap.clone());
        let written =
            tokio::task::spawn_blocking(move || write_batch(&folder, batch, pending)).await;
        let written = written.unwrap_or_else(|_| {
            // The writer panicked: its lines are missing, and said so.
            let mut lost = gap.clone();
            lost.add(
                records,
                "the log's writer failed",
                metnos_kit::time::now_ms(),
            );
            Written {
                lost: records,
                why: "the log's writer failed".to_owned(),
                gap: lost,
                answers: Vec::new(),
            }
        });
        gap = written.gap;
        if written.lost > 0 {
            let total = failures.fetch_add(written.lost, Ordering::Relaxed) + written.lost;
            counter.add(written.lost, &[]);
            tracing::error!(lines = written.lost, failures_total = total, error = %written.why, "verdict log lines could not be written (a gap record will say so)");
        }
        // Failing while any line is missing from the chain (its gap record not in yet).
        failing.store(gap.count() > 0, Ordering::Relaxed);
        // Answered once the batch is counted everywhere: a flush that returned before the
        // counter moved would let an export miss lost lines.
        for done in written.answers {
            let _ = done.send(());
        }
        if closed {
            // Every handle is gone (the service stops) and the last try is made.
            break;
        }
    }
}

/// How often a gap record not yet in the chain is tried again on its own.
const GAP_RETRY: Duration = Duration::from_secs(5);

/// What writing a batch did.
struct Written {
    lost: u64,
    why: String,
    /// The lines still missing from the chain (none once a gap record is in).
    gap: metnos_kit::chain::Gap,
    answers: Vec<oneshot::Sender<()>>,
}

/// Writes a batch, a gap record first if `gap` holds lost lines.
fn write_batch(dir: &Path, batch: Vec<Message>, mut gap: metnos_kit::chain::Gap) -> Written {
    let mut written = Written {
        lost: 0,
        why: String::new(),
        gap: metnos_kit::chain::Gap::default(),
        answers: Vec::new(),
    };
    let now_ms = metnos_kit::time::now_ms();
    let mut by_month: Vec<(String, Vec<serde_json::Value>)> = Vec::new();
    for message in batch {
        let record = match message {
            Message::Flush(done) => {
                written.answers.push(done);
                continue;
            }
            Message::Record(record) => record,
        };
        let month = month_of(record.ts);
        let Ok(line) = serde_json::to_value(&record) else {
            written.lost += 1;
            gap.add(1, "a record that is not JSON", now_ms);
            continue;
        };
        match by_month.iter_mut().find(|(m, _)| *m == month) {
            Some((_, lines)) => lines.push(line),
            None => by_month.push((month, vec![line])),
        }
    }
    // The gap record goes first in the first file written (alone, in this month's, when no
    // line comes with it); once it is in, the gap is closed.
    if gap.count() > 0 && by_month.is_empty() {
        by_month.push((month_of(now_ms as f64 / 1000.0), Vec::new()));
    }
    let carried = match (gap.record(), by_month.first_mut()) {
        (Some(record), Some((_, lines))) => {
            lines.insert(0, record);
            true
        }
        _ => false,
    };
    for (n, (month, records)) in by_month.into_iter().enumerate() {
        let with_gap = carried && n == 0;
        // Verdicts quote the calls they judged: the owner's alone (0600 in a 0700
        // folder); each line chained to the one before it (`metnos audit verify`).
        match metnos_kit::chain::append(dir, &format!("{month}.jsonl"), &records) {
            Ok(_) if with_gap => gap.clear(),
            Ok(_) => {}
            Err(e) => {
                let lines = records.len() as u64 - u64::from(with_gap);
                written.lost += lines;
                written.why = e.to_string();
                gap.add(lines, &written.why, now_ms);
            }
        }
    }
    written.gap = gap;
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_from_the_end_skips_a_line_longer_than_the_limit_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("2026-11.jsonl");
        let long = "X".repeat(200_000);
        std::fs::write(&path, format!("first\n{long}\nlast\n")).unwrap();
        let read = |max_line| {
            let mut lines = Vec::new();
            tail_lines_within(&path, max_line, |line| {
                lines.push(String::from_utf8_lossy(line).into_owned());
                true
            })
            .unwrap();
            lines
        };
        // Within the limit: every line, newest first.
        assert_eq!(read(MAX_LINE), ["last", long.as_str(), "first"]);
        // Over it: the long line is skipped, no piece of it handed on.
        assert_eq!(read(10_000), ["last", "first"]);
    }

    #[test]
    fn retention_removes_the_months_wholly_older_than_it_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "2025-09.jsonl",
            "2025-10.jsonl",
            "2025-11.jsonl",
            "2026-11.jsonl",
            "2025-1.jsonl",
            "notes.jsonl",
            "2019-13.jsonl",
            "keep.txt",
        ] {
            std::fs::write(dir.path().join(name), "{}\n").unwrap();
        }
        let now: jiff::Timestamp = "2026-11-25T12:00:00Z".parse().unwrap();
        let removed = prune(dir.path(), 12, now).unwrap();
        // 2025-11's verdicts are at most 12 months old: kept; 2025-10's are all older.
        assert_eq!(removed, ["2025-09", "2025-10"]);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "2019-13.jsonl",
                "2025-1.jsonl",
                "2025-11.jsonl",
                "2026-11.jsonl",
                "keep.txt",
                "notes.jsonl"
            ]
        );
        // A missing folder is nothing to do.
        assert!(prune(&dir.path().join("none"), 12, now).unwrap().is_empty());
        // One month kept: what is older than last month goes.
        assert_eq!(prune(dir.path(), 1, now).unwrap(), ["2025-11"]);
    }
}
