//! Gap records (issue 41): records a writer answered for but could not write are counted,
//! and the next line it writes to its chain says how many ([`crate::chain::verify`] counts
//! them). Nothing acknowledged goes unrecorded silently.

use serde_json::Value;

/// The field of a gap record: how many records before it were answered for but could not
/// be written (the disk refused them). [`verify`] counts them.
pub const NOT_LOGGED: &str = "not_logged";

/// Records a writer could not write, until a gap record saying so is in the chain: nothing
/// acknowledged goes unrecorded silently.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gap {
    count: u64,
    first_ms: i64,
    last_ms: i64,
    why: String,
}

impl Gap {
    /// Notes `lost` records that could not be written at `now_ms`, and why (the first
    /// reason is kept).
    pub fn add(&mut self, lost: u64, why: &str, now_ms: i64) {
        if lost == 0 {
            return;
        }
        if self.count == 0 {
            self.first_ms = now_ms;
            self.why = why.chars().take(200).collect();
        }
        self.count = self.count.saturating_add(lost);
        self.last_ms = now_ms;
    }

    /// How many records are missing so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The gap record to write before the next records, if any is missing.
    pub fn record(&self) -> Option<Value> {
        (self.count > 0).then(|| {
            serde_json::json!({
                NOT_LOGGED: self.count,
                "first_at": crate::time::rfc3339(self.first_ms),
                "last_at": crate::time::rfc3339(self.last_ms),
                "why": self.why,
            })
        })
    }

    /// The gap record is in the chain now.
    pub fn clear(&mut self) {
        *self = Gap::default();
    }
}
