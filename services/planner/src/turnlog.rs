//! The daily turn log, `turns/YYYY-MM-DD.jsonl` under the data directory: one JSON line per
//! turn, with argument keys and decisions but no argument values and no message text.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::Value;

#[derive(Debug)]
pub struct TurnLog {
    dir: PathBuf,
    lock: Mutex<()>,
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
            lock: Mutex::new(()),
        }
    }

    /// Appends a record; a failure is logged, never fatal to the turn.
    pub fn append(&self, record: &Value, now_ms: i64) {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let path = self.dir.join(format!("{}.jsonl", date_of(now_ms)));
        // Turns hold what was asked and what files said: the owner's alone.
        let result = metnos_kit::datadir::create_dir_all(&self.dir).and_then(|()| {
            let mut file = metnos_kit::datadir::file_options()
                .create(true)
                .append(true)
                .open(&path)?;
            writeln!(file, "{record}")
        });
        if let Err(e) = result {
            tracing::warn!(path = %path.display(), error = %e, "turn log line not written");
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
