//! The private verdict log (seed vaglio.md ch. 6): one JSON line per verdict in monthly
//! files `vaglio/YYYY-MM.jsonl` under the data directory. Argument and context KEYS only,
//! never values. Writing happens on a task of its own: a verdict never waits for the disk
//! and never fails because of it; a line that cannot be written is counted and reported.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// The log's writer handle.
#[derive(Debug, Clone)]
pub struct VerdictLog {
    dir: PathBuf,
    tx: mpsc::UnboundedSender<Message>,
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
    let today = now.to_zoned(jiff::tz::TimeZone::UTC).date();
    let current = i64::from(today.year()) * 12 + i64::from(today.month()) - 1;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(month) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
            continue;
        };
        let Some((year, m)) = month.split_once('-') else {
            continue;
        };
        let (Ok(year), Ok(m)) = (year.parse::<i64>(), m.parse::<i64>()) else {
            continue;
        };
        if month.len() != 7 || !(1..=12).contains(&m) {
            continue;
        }
        if current - (year * 12 + m - 1) > i64::from(keep_months) {
            std::fs::remove_file(entry.path())?;
            removed.push(month.to_owned());
        }
    }
    removed.sort();
    Ok(removed)
}

impl VerdictLog {
    /// Starts the writer for `dir` (created when the first line is written).
    pub fn start(dir: PathBuf) -> VerdictLog {
        let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
        let failures = Arc::new(AtomicU64::new(0));
        // The same count as an OpenTelemetry counter, exported with the traces.
        let counter = opentelemetry::global::meter("metnos-vaglio")
            .u64_counter("metnos.vaglio.log_write_failures")
            .with_description("Verdict log lines that could not be written (the verdicts stood)")
            .build();
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let dir = dir.clone();
            let failures = Arc::clone(&failures);
            let failing = Arc::clone(&failing);
            tokio::spawn(async move {
                while let Some(message) = rx.recv().await {
                    // Take what else is waiting too, and write it in one go.
                    let mut batch = vec![message];
                    while let Ok(more) = rx.try_recv() {
                        batch.push(more);
                    }
                    let dir = dir.clone();
                    let failures = Arc::clone(&failures);
                    let (lost, flushes) =
                        tokio::task::spawn_blocking(move || write_batch(&dir, batch, &failures))
                            .await
                            .unwrap_or_default();
                    if lost > 0 {
                        counter.add(lost, &[]);
                    }
                    failing.store(lost > 0, Ordering::Relaxed);
                    // Answered once the batch is counted everywhere: a flush that returned
                    // before the counter moved would let an export miss lost lines.
                    for done in flushes {
                        let _ = done.send(());
                    }
                }
            });
        }
        VerdictLog {
            dir,
            tx,
            failures,
            failing,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues a record; never waits.
    pub fn append(&self, record: Record) {
        if self.tx.send(Message::Record(Box::new(record))).is_err() {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits until everything queued so far is written (or failed).
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Message::Flush(tx)).is_ok() {
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
    /// `limit` (the newest kept). A missing file is an empty month.
    pub fn read(
        &self,
        month: &str,
        blocked_only: bool,
        limit: usize,
    ) -> std::io::Result<Vec<Record>> {
        let path = self.dir.join(format!("{month}.jsonl"));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut records: Vec<Record> = text
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .filter(|r: &Record| !blocked_only || !r.approved)
            .collect();
        if records.len() > limit {
            records.drain(..records.len() - limit);
        }
        Ok(records)
    }
}

/// Writes a batch; returns how many lines were lost and the flushes it held.
fn write_batch(
    dir: &Path,
    batch: Vec<Message>,
    failures: &AtomicU64,
) -> (u64, Vec<oneshot::Sender<()>>) {
    let mut lost = 0;
    let mut flushes = Vec::new();
    let mut by_month: Vec<(String, Vec<u8>)> = Vec::new();
    for message in batch {
        match message {
            Message::Flush(done) => flushes.push(done),
            Message::Record(record) => {
                let month = month_of(record.ts);
                let mut line = match serde_json::to_vec(&record) {
                    Ok(line) => line,
                    Err(_) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        lost += 1;
                        continue;
                    }
                };
                line.push(b'\n');
                match by_month.iter_mut().find(|(m, _)| *m == month) {
                    Some((_, bytes)) => bytes.extend_from_slice(&line),
                    None => by_month.push((month, line)),
                }
            }
        }
    }
    for (month, bytes) in by_month {
        let lines = bytes.iter().filter(|b| **b == b'\n').count() as u64;
        // Verdicts quote the calls they judged: the owner's alone.
        let written = metnos_kit::datadir::create_dir_all(dir).and_then(|()| {
            let mut file = metnos_kit::datadir::file_options()
                .create(true)
                .append(true)
                .open(dir.join(format!("{month}.jsonl")))?;
            file.write_all(&bytes)
        });
        if let Err(e) = written {
            lost += lines;
            let total = failures.fetch_add(lines, Ordering::Relaxed) + lines;
            tracing::error!(error = %e, lines, failures_total = total, "verdict log lines could not be written");
        }
    }
    (lost, flushes)
}

#[cfg(test)]
mod tests {
    use super::*;

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
