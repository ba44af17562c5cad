//! A hash-chained journal kept in a service's own store (issue 23): the approval decisions,
//! the grant store's changes. The lines are [`crate::chain`]'s (`seq`, `prev`, the record),
//! one row each in `table` (`seq` primary key, `line`), and the chain's head (its last `seq`
//! and hash) in one row of `head` — both written in one transaction under a lock (SQLite's
//! `BEGIN IMMEDIATE`, a PostgreSQL advisory lock), so replicas sharing the store append one
//! chain. The same table keeps the daily roots: one row per UTC day written on, `id`
//! `YYYYMMDD`, the chain's end as that day's first record was written. [`Journal::verify`]
//! walks it like the chained files.

use serde_json::Value;

use sqlx::AssertSqlSafe;

use crate::chain::{End, Report};
use crate::store::{Db, Finish, Row, Statement, Tx};

/// Where a journal lives in its store.
#[derive(Debug, Clone, Copy)]
pub struct Journal {
    /// The lines' table (`seq` BIGINT primary key, `line` TEXT).
    pub table: &'static str,
    /// The head's table (`id` = 1, `seq`, `hash`).
    pub head: &'static str,
    /// The name reports give it.
    pub name: &'static str,
}

impl Journal {
    /// Appends `record` after the journal's head; returns the new end.
    pub async fn append(&self, db: &Db, record: &Value) -> Result<End, sqlx::Error> {
        db.locked_tx(&self.key(), async |tx| {
            self.append_in(tx, record).await.map(Finish::Commit)
        })
        .await
    }

    /// Runs `change` (a statement `RETURNING` a row per thing it changed) and journals the
    /// records `record` makes of those rows, all in one transaction under the journal's
    /// lock (issue 41): nothing is changed without its record, nor recorded without being
    /// changed. Returns the rows.
    pub async fn change(
        &self,
        db: &Db,
        change: Statement,
        record: impl Fn(&[Row]) -> Result<Vec<Value>, sqlx::Error>,
    ) -> Result<Vec<Row>, sqlx::Error> {
        db.locked_tx(&self.key(), async |tx| {
            let rows = tx.fetch_all(change).await?;
            for line in record(&rows)? {
                self.append_in(tx, &line).await?;
            }
            Ok(Finish::Commit(rows))
        })
        .await
    }

    /// The journal's lock, for a transaction of [`Db::locked_tx`] that writes to it
    /// ([`Journal::append_in`]); named for Metnos and the table: another user of the
    /// database is not held.
    pub fn key(&self) -> String {
        format!("metnos.journal.{}", self.table)
    }

    /// [`Journal::append`]'s work, inside a transaction that holds the journal's lock
    /// ([`Journal::key`]).
    pub async fn append_in(&self, tx: &mut Tx, record: &Value) -> Result<End, sqlx::Error> {
        // Two statements a record besides its line: one read of the head and the last
        // row together, one write of the head with the day's root (each a round trip to
        // SQLite's worker thread, which is most of a small write's cost).
        let read = format!(
            "SELECT (SELECT seq FROM {head} WHERE id = 1), (SELECT hash FROM {head} WHERE id = 1), \
             (SELECT line FROM {table} ORDER BY seq DESC LIMIT 1)",
            head = self.head,
            table = self.table
        );
        let insert = format!("INSERT INTO {} (seq, line) VALUES ($1, $2)", self.table);
        let upsert = "ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash";
        let move_head = format!(
            "INSERT INTO {} (id, seq, hash) VALUES (1, $1, $2) {upsert}",
            self.head
        );
        // The day's root is kept as first written: only the head's row (id 1) is updated.
        let move_head_keep_day = format!(
            "INSERT INTO {head} (id, seq, hash) VALUES (1, $1, $2), ($3, $4, $5) {upsert} \
             WHERE {head}.id = 1",
            head = self.head
        );
        let today = day_id(&crate::time::rfc3339(crate::time::now_ms())[..10]);
        let row = tx
            .fetch_optional(Statement::new(AssertSqlSafe(read)))
            .await?
            .ok_or_else(|| {
                sqlx::Error::Protocol("the journal's head read returned no row".into())
            })?;
        let head = match (
            row.get::<Option<i64>, _>(0)?,
            row.get::<Option<String>, _>(1)?,
        ) {
            (Some(seq), Some(hash)) => Some(End {
                seq: u64::try_from(seq).unwrap_or(0),
                hash,
            }),
            _ => None,
        };
        let last: Option<String> = row.get(2)?;
        // The chain goes on from its last row; a head that does not name it (missing, or the
        // rows cut or edited) is said in the new row, so it stays visible.
        let end = last
            .as_deref()
            .map_or_else(End::genesis, crate::chain::line_end);
        let marked;
        let record = match crate::chain::head_mark(head.as_ref(), &end) {
            Some(mark) => {
                let mut with = record.clone();
                if let Value::Object(fields) = &mut with {
                    fields.insert(crate::chain::BREAK.to_owned(), mark);
                }
                marked = with;
                &marked
            }
            None => record,
        };
        let (line, next) = crate::chain::link(&end, record);
        let seq = i64::try_from(next.seq).unwrap_or(i64::MAX);
        tx.execute(Statement::new(AssertSqlSafe(insert)).bind(seq).bind(line))
            .await?;
        // The day's root, at its first record: the chain as the day began.
        let moved = if end.seq > 0 {
            Statement::new(AssertSqlSafe(move_head_keep_day))
                .bind(seq)
                .bind(next.hash.clone())
                .bind(today)
                .bind(i64::try_from(end.seq).unwrap_or(i64::MAX))
                .bind(end.hash.clone())
        } else {
            Statement::new(AssertSqlSafe(move_head))
                .bind(seq)
                .bind(next.hash.clone())
        };
        tx.execute(moved).await?;
        Ok(next)
    }

    /// The journal's daily roots: (day, the chain's end as it began), oldest first.
    pub async fn days(&self, db: &Db) -> Result<Vec<(String, End)>, sqlx::Error> {
        let sql = format!(
            "SELECT CAST(id AS BIGINT), CAST(seq AS BIGINT), hash FROM {} WHERE id > 1 ORDER BY id",
            self.head
        );
        crate::on_db!(db, pool => {
            let rows: Vec<(i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_all(pool)
                .await?;
            Ok(rows
                .into_iter()
                .map(|(id, seq, hash)| {
                    let day = format!("{:04}-{:02}-{:02}", id / 10_000, id / 100 % 100, id % 100);
                    (day, End { seq: u64::try_from(seq).unwrap_or(0), hash })
                })
                .collect())
        })
    }

    /// The journal's lines in `seq` order, and its head.
    pub async fn read(&self, db: &Db) -> Result<(Vec<String>, Option<End>), sqlx::Error> {
        // The head first, then the rows up to it: a row appended meanwhile (with its new
        // head) is not half-seen.
        let lines_sql = format!(
            "SELECT line FROM {} WHERE $1 < 0 OR seq <= $1 ORDER BY seq",
            self.table
        );
        let head_sql = format!("SELECT seq, hash FROM {} WHERE id = 1", self.head);
        crate::on_db!(db, pool => {
            let head: Option<(i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(head_sql))
                .fetch_optional(pool)
                .await?;
            let upto = head.as_ref().map_or(-1, |(seq, _)| *seq);
            let lines: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(lines_sql))
                .bind(upto)
                .fetch_all(pool)
                .await?;
            Ok((
                lines,
                head.map(|(seq, hash)| End {
                    seq: u64::try_from(seq).unwrap_or(0),
                    hash,
                }),
            ))
        })
    }

    /// Walks the journal: its first record edited, removed or reordered, or a head it no
    /// longer matches.
    pub async fn verify(&self, db: &Db) -> Result<Report, sqlx::Error> {
        let days = self.days(db).await?;
        let (lines, head) = self.read(db).await?;
        Ok(crate::chain::verify_lines(
            self.name,
            &lines,
            head.as_ref(),
            &days,
        ))
    }
}

/// A day's row id in the head table: `2026-11-26` is 20261126 (never 1, the head's).
fn day_id(day: &str) -> i64 {
    day.replace('-', "").parse().unwrap_or(0)
}
