//! The daily turn log, `turns/YYYY-MM-DD.jsonl` under the data directory: one JSON line per
//! turn, with argument keys and decisions but no argument values and no message text.

use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::Value;

/// Deletes the daily logs (`YYYY-MM-DD.jsonl`) of days more than `keep_days` before the
/// day of `now_ms` (UTC), and nothing else in `dir`; returns the days removed. A missing
/// folder is nothing to prune.
pub fn prune(dir: &std::path::Path, keep_days: u32, now_ms: i64) -> std::io::Result<Vec<String>> {
    let today = date_of(now_ms)
        .parse::<jiff::civil::Date>()
        .map_err(std::io::Error::other)?;
    let oldest_kept = today
        .checked_sub(jiff::Span::new().days(i64::from(keep_days)))
        .map_err(std::io::Error::other)?;
    metnos_kit::datadir::prune_dated(dir, |day| expired_before(day, oldest_kept))
}

/// Whether the retention keeping `keep_days` days at `now_ms` may have removed the log of
/// `day` (`YYYY-MM-DD`; anything else: no), for `metnos audit verify` and the record.
pub fn expired(day: &str, keep_days: u32, now_ms: i64) -> bool {
    let Ok(today) = date_of(now_ms).parse::<jiff::civil::Date>() else {
        return false;
    };
    today
        .checked_sub(jiff::Span::new().days(i64::from(keep_days)))
        .is_ok_and(|oldest_kept| expired_before(day, oldest_kept))
}

fn expired_before(day: &str, oldest_kept: jiff::civil::Date) -> bool {
    valid_date(day)
        && day
            .parse::<jiff::civil::Date>()
            .is_ok_and(|d| d < oldest_kept)
}

/// Clones share one lock: appends in this process never interleave. It holds the turns
/// whose lines could not be written, until a gap record saying so is in the chain.
///
/// Turns ending together are written together (group commit, issue 45): the first to end
/// writes, on a blocking thread, every record queued meanwhile in one chain append — one
/// lock, one read of the chain's end, one write and one `HEAD` — and each turn goes on
/// once its own line is in the file, as before. The async workers never wait on the disk.
#[derive(Debug, Clone)]
pub struct TurnLog {
    dir: PathBuf,
    lock: std::sync::Arc<Mutex<metnos_kit::chain::Gap>>,
    queue: std::sync::Arc<Mutex<Queue>>,
}

/// Records waiting for the writer, and whether one is writing.
#[derive(Debug, Default)]
struct Queue {
    records: Vec<Queued>,
    writing: bool,
}

#[derive(Debug)]
struct Queued {
    record: Value,
    now_ms: i64,
    written: tokio::sync::oneshot::Sender<()>,
}

/// Writes what is queued when dropped: a writer task the runtime drops unrun (it is
/// stopping) still writes its records rather than leave their turns waiting.
struct Writer(TurnLog);

impl Drop for Writer {
    fn drop(&mut self) {
        self.0.drain();
    }
}

/// `YYYY-MM-DD` (UTC) of a time in milliseconds.
pub fn date_of(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d").to_string())
        .unwrap_or_else(|_| "1970-01-01".to_owned())
}

/// Whether `date` is `YYYY-MM-DD`.
pub fn valid_date(date: &str) -> bool {
    date.parse::<jiff::civil::Date>().is_ok() && date.len() == 10
}

impl TurnLog {
    pub fn new(dir: PathBuf) -> TurnLog {
        TurnLog {
            dir,
            lock: std::sync::Arc::new(Mutex::new(metnos_kit::chain::Gap::default())),
            queue: std::sync::Arc::default(),
        }
    }

    /// The log's folder.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Appends a record and returns once it is written (or counted by the gap record to
    /// come); a failure is logged, never fatal to the turn, and never silent: the next line
    /// written is a gap record counting the turns not written (`metnos audit verify`
    /// reports it).
    pub async fn append(&self, record: &Value, now_ms: i64) {
        let (written, done) = tokio::sync::oneshot::channel();
        let start = {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.records.push(Queued {
                record: record.clone(),
                now_ms,
                written,
            });
            !std::mem::replace(&mut queue.writing, true)
        };
        if start {
            let writer = Writer(self.clone());
            tokio::task::spawn_blocking(move || drop(writer));
        }
        let _ = done.await;
    }

    /// Writes the queue until it is empty, a batch at a time.
    fn drain(&self) {
        loop {
            let batch = {
                let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                if queue.records.is_empty() {
                    queue.writing = false;
                    return;
                }
                std::mem::take(&mut queue.records)
            };
            // One append per day file, in the order the turns ended.
            let mut batch = batch.into_iter().peekable();
            while let Some(first) = batch.next() {
                let day = date_of(first.now_ms);
                let mut run = vec![first];
                while let Some(next) = batch.next_if(|q| date_of(q.now_ms) == day) {
                    run.push(next);
                }
                let now_ms = run[0].now_ms;
                let (records, written): (Vec<Value>, Vec<_>) =
                    run.into_iter().map(|q| (q.record, q.written)).unzip();
                // A writer that panicked still counts its records, in the gap record to come.
                let wrote = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.write(&records, now_ms);
                }));
                if wrote.is_err() {
                    let mut gap = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                    let lost = u64::try_from(records.len()).unwrap_or(u64::MAX);
                    gap.add(lost, "the turn log's writer failed", now_ms);
                }
                for sender in written {
                    let _ = sender.send(());
                }
            }
        }
    }

    /// Appends `records` now, after the gap record if turns are missing.
    fn write(&self, records: &[Value], now_ms: i64) {
        let mut gap = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let file = format!("{}.jsonl", date_of(now_ms));
        let mut lines = Vec::from_iter(gap.record());
        lines.extend_from_slice(records);
        // Turns hold what was asked and what files said: the owner's alone (0600 in a
        // 0700 folder); each line chained to the one before it (`metnos audit verify`).
        match metnos_kit::chain::append(&self.dir, &file, &lines) {
            Ok(_) => gap.clear(),
            Err(e) => {
                gap.add(
                    u64::try_from(records.len()).unwrap_or(u64::MAX),
                    &e.to_string(),
                    now_ms,
                );
                tracing::error!(path = %self.dir.join(&file).display(), error = %e, not_logged = gap.count(), "turn log line not written (a gap record will say so)");
            }
        }
    }

    /// Writes the gap record alone, if turns are missing from the chain: a gap is never
    /// left to a later turn that may not come (called every few seconds and at stop).
    pub fn write_gap(&self, now_ms: i64) {
        let mut gap = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(record) = gap.record() else {
            return;
        };
        let file = format!("{}.jsonl", date_of(now_ms));
        match metnos_kit::chain::append(&self.dir, &file, &[record]) {
            Ok(_) => gap.clear(),
            Err(e) => {
                tracing::debug!(error = %e, not_logged = gap.count(), "the turn log's gap record is not written yet");
            }
        }
    }

    /// The records of one day, newest first.
    pub fn read(&self, date: &str, limit: usize) -> std::io::Result<Vec<Value>> {
        let path = self.dir.join(format!("{date}.jsonl"));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(text
            .lines()
            .rev()
            .filter_map(|l| serde_json::from_str(l).ok())
            .take(limit)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_the_disk_refused_is_counted_by_a_gap_record_in_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let log = TurnLog::new(dir.path().join("turns"));
        let now = 1_795_694_400_000;
        log.write(&[serde_json::json!({"turn": "a"})], now);
        // The disk refuses two turns (the lock cannot be opened): the turns stand.
        let lock = dir.path().join("turns/LOCK");
        std::fs::remove_file(&lock).unwrap();
        std::fs::create_dir(&lock).unwrap();
        log.write(&[serde_json::json!({"turn": "b"})], now);
        log.write(&[serde_json::json!({"turn": "c"})], now);
        std::fs::remove_dir(&lock).unwrap();
        // The disk takes lines again: the gap is written on its own, no later turn needed.
        log.write_gap(now);
        let report =
            metnos_kit::chain::verify(&dir.path().join("turns"), None, &|_| false).unwrap();
        assert_eq!((report.lines, report.not_logged), (2, 2), "{report:?}");
        log.write_gap(now);
        log.write(&[serde_json::json!({"turn": "d"})], now);
        log.write(&[serde_json::json!({"turn": "e"})], now);
        let report =
            metnos_kit::chain::verify(&dir.path().join("turns"), None, &|_| false).unwrap();
        assert_eq!(report.broken, None);
        // a, the gap record (2 missing), d, e.
        assert_eq!((report.lines, report.not_logged), (4, 2), "{report:?}");
        let day = log.read("2026-11-26", 10).unwrap();
        assert_eq!(day[2]["not_logged"], 2, "{day:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn turns_ending_together_are_each_written_once_in_one_chain_before_they_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let log = TurnLog::new(dir.path().join("turns"));
        let now = 1_795_694_400_000;
        let ends: Vec<_> = (0..64)
            .map(|n| {
                let log = log.clone();
                tokio::spawn(async move {
                    log.append(&serde_json::json!({"turn": n}), now).await;
                    // Once `append` returns, the turn's line is in the file.
                    let day = log.read("2026-11-26", 100).unwrap();
                    assert!(
                        day.iter().any(|r| r["turn"] == n),
                        "turn {n} not written yet"
                    );
                })
            })
            .collect();
        for end in ends {
            end.await.unwrap();
        }
        let report =
            metnos_kit::chain::verify(&dir.path().join("turns"), None, &|_| false).unwrap();
        assert_eq!(
            (report.lines, report.broken.as_deref()),
            (64, None),
            "{report:?}"
        );
        let mut turns: Vec<i64> = log
            .read("2026-11-26", 100)
            .unwrap()
            .iter()
            .map(|r| r["turn"].as_i64().unwrap())
            .collect();
        turns.sort_unstable();
        assert_eq!(turns, (0..64).collect::<Vec<_>>());
    }

    #[test]
    fn retention_removes_only_the_days_older_than_it() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "2026-08-27.jsonl",
            "2026-08-28.jsonl",
            "2026-11-25.jsonl",
            "notes.txt",
            "1999-01-01.json",
        ] {
            std::fs::write(dir.path().join(name), "{}\n").unwrap();
        }
        std::fs::create_dir(dir.path().join("2001-01-01.jsonl")).unwrap();
        // 2026-11-26 12:00 UTC, 90 days kept: 2026-08-28 is the oldest kept.
        let now = 1_795_694_400_000;
        assert_eq!(date_of(now), "2026-11-26");
        assert_eq!(prune(dir.path(), 90, now).unwrap(), ["2026-08-27"]);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "1999-01-01.json",
                "2001-01-01.jsonl",
                "2026-08-28.jsonl",
                "2026-11-25.jsonl",
                "notes.txt"
            ]
        );
        assert!(prune(&dir.path().join("none"), 90, now).unwrap().is_empty());
    }
}
