//! A thread's summary (issue 40): its older exchanges, folded by the fast tier into one
//! text when they no longer fit in a turn's history budget, with the union of their
//! provenance labels. One per thread, replaced as it is folded further; read, like the
//! thread, only by its person.

use metnos_core::Principal;
use metnos_kit::store::sql::{Finish, Statement};

use super::threads::{
    Exchange, ThreadError, ThreadStore, exchange_from_row, json_column, owned_in, person_key,
};

/// The longest summary kept, in bytes (a longer answer of the model is cut).
pub const MAX_SUMMARY: usize = 4 * 1024;

/// Most provenance labels a summary keeps: the union of what it folds. A fold that would
/// need more is not made (a summary never drops where its text came from).
pub const MAX_SUMMARY_LABELS: usize = 256;

/// A thread's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// It covers the thread's exchanges 1..=`upto_seq`.
    pub upto_seq: i64,
    /// The thread's last exchange when it was made.
    pub made_at_seq: i64,
    pub text: String,
    /// Where its text came from: the labels of every exchange it folds.
    pub labels: Vec<String>,
    pub made_at: i64,
}

impl ThreadStore {
    /// `person`'s thread `thread_id`'s summary, if it has one (another person's thread has
    /// none for them).
    pub async fn summary(
        &self,
        person: &Principal,
        thread_id: &str,
    ) -> Result<Option<Summary>, ThreadError> {
        let row = self
            .db
            .fetch_optional(
                Statement::new(
                    "SELECT s.upto_seq, s.made_at_seq, s.text, s.labels, s.made_at \
                     FROM thread_summaries s JOIN threads t ON t.id = s.thread_id \
                     WHERE s.thread_id = $1 AND t.channel = $2 AND t.sender_id = $3",
                )
                .bind(thread_id.to_owned())
                .bind(person.channel().to_owned())
                .bind(person.sender_id().to_owned()),
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(Summary {
            upto_seq: row.get("upto_seq")?,
            made_at_seq: row.get("made_at_seq")?,
            text: row.get("text")?,
            labels: json_column(&row, "labels")?,
            made_at: row.get("made_at")?,
        }))
    }

    /// Keeps `summary` as `person`'s thread `thread_id`'s, unless the one there already
    /// covers as much (two replicas folding at once keep the further fold): whether it was
    /// kept. A thread of someone else is no such thread.
    pub async fn put_summary(
        &self,
        person: &Principal,
        thread_id: &str,
        summary: &Summary,
    ) -> Result<bool, ThreadError> {
        if summary.text.len() > MAX_SUMMARY {
            return Err(ThreadError::TooLong {
                field: "summary",
                len: summary.text.len(),
            });
        }
        if summary.labels.len() > MAX_SUMMARY_LABELS {
            return Err(ThreadError::TooMany {
                field: "summary's labels",
                count: summary.labels.len(),
                max: MAX_SUMMARY_LABELS,
            });
        }
        let labels = serde_json::to_string(&summary.labels).unwrap_or_else(|_| "[]".into());
        self.db
            .locked_tx(&person_key(person), async |tx| {
                owned_in(tx, person, thread_id).await?;
                let written = tx
                    .execute(
                        Statement::new(
                            "INSERT INTO thread_summaries (thread_id, upto_seq, made_at_seq, text, labels, made_at) \
                             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (thread_id) DO UPDATE SET \
                             upto_seq = excluded.upto_seq, made_at_seq = excluded.made_at_seq, \
                             text = excluded.text, labels = excluded.labels, made_at = excluded.made_at \
                             WHERE thread_summaries.upto_seq < excluded.upto_seq",
                        )
                        .bind(thread_id.to_owned())
                        .bind(summary.upto_seq)
                        .bind(summary.made_at_seq)
                        .bind(summary.text.clone())
                        .bind(labels)
                        .bind(summary.made_at),
                    )
                    .await?;
                Ok(Finish::Commit(written == 1))
            })
            .await
    }

    /// `person`'s thread `thread_id`'s exchanges after `after_seq` and before `before_seq`,
    /// oldest first, at most `limit`.
    pub async fn between(
        &self,
        person: &Principal,
        thread_id: &str,
        after_seq: i64,
        before_seq: i64,
        limit: u32,
    ) -> Result<Vec<Exchange>, ThreadError> {
        let rows = self
            .db
            .fetch_all(
                Statement::new(
                    "SELECT e.seq, e.turn_id, e.at, e.message, e.answer, e.labels, e.steps, e.forwarded \
                     FROM exchanges e JOIN threads t ON t.id = e.thread_id \
                     WHERE e.thread_id = $1 AND t.channel = $2 AND t.sender_id = $3 \
                     AND e.seq > $4 AND e.seq < $5 ORDER BY e.seq LIMIT $6",
                )
                .bind(thread_id.to_owned())
                .bind(person.channel().to_owned())
                .bind(person.sender_id().to_owned())
                .bind(after_seq)
                .bind(before_seq)
                .bind(i64::from(limit)),
            )
            .await?;
        Ok(rows
            .iter()
            .map(exchange_from_row)
            .collect::<Result<Vec<_>, _>>()?)
    }
}
