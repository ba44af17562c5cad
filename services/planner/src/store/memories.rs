//! Each person's long-term memory (issue 40): what the model saved with `memory_save`, an
//! entry of at most [`MAX_CHARS`] characters with when, the turn that saved it and where
//! its text came from (its provenance labels: none for the person's own words). Searched
//! by full text — SQLite FTS5 ranked by bm25, PostgreSQL `tsvector` ranked by `ts_rank`,
//! both without stemming, so the same entries come back in the same order. A person has
//! at most `memory.max_entries`; a save beyond drops the oldest unused. Every read and
//! write names the person: nobody reaches another's memory.

use metnos_core::Principal;
use metnos_kit::store::sql::{Finish, Row, Statement};
use metnos_kit::store::{Db, Pool};
use serde::Serialize;

/// The longest entry, in characters.
pub const MAX_CHARS: usize = 500;

/// Most words a search looks for (the rest of a long query is not looked for).
pub const MAX_TERMS: usize = 16;

/// Most entries one search or listing returns.
pub const MAX_FOUND: u32 = 50;

/// One entry of a person's memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Memory {
    pub id: String,
    pub text: String,
    /// Where its text came from; empty: the person's own words.
    pub labels: Vec<String>,
    /// The turn that saved it.
    pub turn_id: String,
    pub saved_at: i64,
    /// When a search last returned it (or it was saved).
    pub used_at: i64,
}

/// Why a memory could not be saved, found or forgotten.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("a memory holds at most {MAX_CHARS} characters; this one has {0}")]
    TooLong(usize),
    #[error("a memory needs some text")]
    Empty,
    #[error("a memory cannot hold control or invisible characters")]
    Invisible,
    #[error("a memory keeps at most {max} sources; this one has {count}")]
    TooManyLabels { count: usize, max: usize },
    /// Not theirs, or not there: the same words either way.
    #[error("no memory `{0}` of yours")]
    NotFound(String),
    #[error("the search has no words to look for")]
    NoWords,
    #[error("your memory was forgotten after this message arrived: nothing was saved")]
    Forgotten,
    #[error("memory store: {0}")]
    Store(#[from] sqlx::Error),
}

/// A save's outcome: the entry, and how many of the oldest unused were dropped for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub memory: Memory,
    pub dropped: u64,
}

/// The planner's memories, on SQLite or PostgreSQL alike.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    db: Db,
    max_entries: u32,
}

const COLUMNS: &str = "m.id, m.text, m.labels, m.turn_id, m.saved_at, m.used_at";

fn memory_from_row(row: &Row) -> Result<Memory, sqlx::Error> {
    Ok(Memory {
        id: row.get("id")?,
        text: row.get("text")?,
        labels: super::threads::json_column(row, "labels")?,
        turn_id: row.get("turn_id")?,
        saved_at: row.get("saved_at")?,
        used_at: row.get("used_at")?,
    })
}

/// The turn a save is made by: its id, and when it began (a save by a turn begun before
/// its person last forgot their memory is refused).
#[derive(Debug, Clone, Copy)]
pub struct ByTurn<'a> {
    pub id: &'a str,
    pub begun_ms: i64,
}

/// The key that holds one person's memory against another writer (replicas included).
pub(super) fn person_key(person: &Principal) -> String {
    format!("metnos.memories.{person}")
}

/// What may be saved: some text, visible characters (a line break is one), within
/// [`MAX_CHARS`]; trimmed.
pub fn checked_text(text: &str) -> Result<&str, MemoryError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(MemoryError::Empty);
    }
    let chars = text.chars().count();
    if chars > MAX_CHARS {
        return Err(MemoryError::TooLong(chars));
    }
    let control = |c: char| c.is_control() && c != '\n' && c != '\t';
    if text.chars().any(control) || metnos_core::html::holds_invisible(text) {
        return Err(MemoryError::Invisible);
    }
    Ok(text)
}

/// The words of `text`: runs of letters and digits, lowercased, in Unicode's composed
/// form (an "è" typed as "e" and a combining accent is the same word).
fn words(text: &str) -> Vec<String> {
    use unicode_normalization::UnicodeNormalization;
    let text: String = text.nfc().collect();
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The words of `query` a search looks for: letters and digits, lowercased, once each, at
/// most [`MAX_TERMS`]. Nothing else reaches either backend's query syntax.
pub fn terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in words(query) {
        if !terms.contains(&word) && terms.len() < MAX_TERMS {
            terms.push(word);
        }
    }
    terms
}

/// A person's tag in SQLite's search index: letters and digits only (one token), the
/// same for every entry of theirs, another for anyone else.
fn person_tag(person: &Principal) -> String {
    use sha2::{Digest, Sha256};
    let hash = hex::encode(Sha256::digest(person.to_string().as_bytes()));
    format!("p{}", &hash[..16])
}

/// What SQLite's search index holds of `person`'s entry `text`: each word prefixed with
/// their tag, so only their searches find (and rank) it.
fn tagged_words(person: &Principal, text: &str) -> String {
    let tag = person_tag(person);
    words(text)
        .into_iter()
        .map(|w| format!("{tag}{w}"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl MemoryStore {
    pub fn new(db: Db, max_entries: u32) -> MemoryStore {
        MemoryStore { db, max_entries }
    }

    /// Saves `text` (checked: [`checked_text`]) as `person`'s, from `sources`, by `turn`
    /// (refused, [`MemoryError::Forgotten`], when they forgot their memory since it
    /// began); beyond `memory.max_entries` their oldest unused entries go. `id`: the
    /// entry's, when the save must happen once however often it is applied (an approved
    /// card's), else a new one.
    pub async fn save(
        &self,
        person: &Principal,
        text: &str,
        sources: &[String],
        turn: ByTurn<'_>,
        id: Option<&str>,
        now_ms: i64,
    ) -> Result<Saved, MemoryError> {
        // Kept composed: PostgreSQL's index reads the text itself.
        let text: String = {
            use unicode_normalization::UnicodeNormalization;
            checked_text(text)?.nfc().collect()
        };
        if sources.len() > super::threads::MAX_LABELS {
            return Err(MemoryError::TooManyLabels {
                count: sources.len(),
                max: super::threads::MAX_LABELS,
            });
        }
        let memory = Memory {
            id: id.map_or_else(
                || format!("m-{}", metnos_kit::random::hex(8)),
                str::to_owned,
            ),
            text,
            labels: sources.to_vec(),
            turn_id: turn.id.to_owned(),
            saved_at: now_ms,
            used_at: now_ms,
        };
        let labels = serde_json::to_string(&memory.labels).unwrap_or_else(|_| "[]".into());
        let max = i64::from(self.max_entries);
        let sqlite = matches!(self.db.pool(), Pool::Sqlite(_));
        let dropped = self
            .db
            .locked_tx(&person_key(person), async |tx| {
                let inserted = tx
                    .execute(
                    Statement::new(
                        "INSERT INTO memories (id, channel, sender_id, text, labels, turn_id, saved_at, used_at) \
                         SELECT $1, $2, $3, $4, $5, $6, $7, $7 WHERE NOT EXISTS (SELECT 1 FROM memory_forgets \
                         WHERE channel = $2 AND sender_id = $3 AND at >= $8) ON CONFLICT (id) DO NOTHING",
                    )
                    .bind(memory.id.clone())
                    .bind(person.channel().to_owned())
                    .bind(person.sender_id().to_owned())
                    .bind(memory.text.clone())
                    .bind(labels)
                    .bind(memory.turn_id.clone())
                    .bind(now_ms)
                    .bind(turn.begun_ms),
                )
                .await?;
                if inserted == 0 {
                    // Saved before (the same card applied again): once. Else forgotten.
                    let before = tx
                        .fetch_optional(
                            Statement::new("SELECT id FROM memories WHERE id = $1")
                                .bind(memory.id.clone()),
                        )
                        .await?;
                    return match before {
                        Some(_) => Ok(Finish::Rollback(0)),
                        None => Err(MemoryError::Forgotten),
                    };
                }
                if sqlite {
                    index_in(tx, &memory.id, &tagged_words(person, &memory.text)).await?;
                }
                let count: i64 = tx
                    .fetch_one(
                        Statement::new(
                            "SELECT COUNT(*) FROM memories WHERE channel = $1 AND sender_id = $2",
                        )
                        .bind(person.channel().to_owned())
                        .bind(person.sender_id().to_owned()),
                    )
                    .await?
                    .get(0)?;
                if count <= max {
                    return Ok(Finish::Commit(0));
                }
                let dropped = tx
                    .execute(
                        Statement::new(
                            "DELETE FROM memories WHERE id IN (SELECT id FROM memories \
                             WHERE channel = $1 AND sender_id = $2 AND id <> $3 \
                             ORDER BY used_at, saved_at LIMIT $4)",
                        )
                        .bind(person.channel().to_owned())
                        .bind(person.sender_id().to_owned())
                        .bind(memory.id.clone())
                        .bind(count - max),
                    )
                    .await?;
                Ok(Finish::Commit(dropped))
            })
            .await?;
        if dropped > 0 {
            tracing::info!(principal = %person, dropped, max, "memory full: the oldest unused entries were dropped");
        }
        Ok(Saved { memory, dropped })
    }

    /// `person`'s entries that hold words of `query`, best first (at most `limit`, and
    /// [`MAX_FOUND`]); those returned count as used now.
    pub async fn search(
        &self,
        person: &Principal,
        query: &str,
        limit: u32,
        now_ms: i64,
    ) -> Result<Vec<Memory>, MemoryError> {
        let terms = terms(query);
        if terms.is_empty() {
            return Err(MemoryError::NoWords);
        }
        let limit = i64::from(limit.clamp(1, MAX_FOUND));
        let statement = match self.db.pool() {
            // The person's tagged words match their entries alone: the best are chosen in
            // the index, and only they are read (still theirs: checked again on the row).
            Pool::Sqlite(_) => Statement::new(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS}, f.rank FROM (SELECT rowid AS seq, bm25(memory_words) AS rank \
                 FROM memory_words WHERE memory_words MATCH $1 ORDER BY rank, rowid DESC LIMIT $4) f \
                 CROSS JOIN memories m ON m.seq = f.seq \
                 WHERE m.channel = $2 AND m.sender_id = $3 ORDER BY f.rank, m.seq DESC"
            )))
            .bind({
                let tag = person_tag(person);
                terms
                    .iter()
                    .map(|t| format!("\"{tag}{t}\""))
                    .collect::<Vec<_>>()
                    .join(" OR ")
            }),
            Pool::Postgres(_) => Statement::new(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS}, ts_rank(m.words, q) AS rank \
                 FROM memories m, to_tsquery('simple', $1) q \
                 WHERE m.words @@ q AND m.channel = $2 AND m.sender_id = $3 \
                 ORDER BY rank DESC, m.saved_at DESC LIMIT $4"
            )))
            .bind(terms.join(" | ")),
        };
        let rows = self
            .db
            .fetch_all(
                statement
                    .bind(person.channel().to_owned())
                    .bind(person.sender_id().to_owned())
                    .bind(limit),
            )
            .await?;
        let mut found = rows
            .iter()
            .map(memory_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        if !found.is_empty() {
            // One statement for all of them: the ids as arguments, never in the SQL.
            let marks: Vec<String> = (0..found.len()).map(|i| format!("${}", i + 2)).collect();
            let mut touch = Statement::new(sqlx::AssertSqlSafe(format!(
                "UPDATE memories SET used_at = $1 WHERE id IN ({})",
                marks.join(", ")
            )))
            .bind(now_ms);
            for memory in &mut found {
                touch = touch.bind(memory.id.clone());
                memory.used_at = now_ms;
            }
            self.db.execute(touch).await?;
        }
        Ok(found)
    }

    /// `person`'s newest entries, at most `limit` (and [`MAX_FOUND`]).
    pub async fn list(&self, person: &Principal, limit: u32) -> Result<Vec<Memory>, MemoryError> {
        let rows = self
            .db
            .fetch_all(
                Statement::new(sqlx::AssertSqlSafe(format!(
                    "SELECT {COLUMNS} FROM memories m WHERE m.channel = $1 AND m.sender_id = $2 \
                     ORDER BY m.saved_at DESC, m.id LIMIT $3"
                )))
                .bind(person.channel().to_owned())
                .bind(person.sender_id().to_owned())
                .bind(i64::from(limit.clamp(1, MAX_FOUND))),
            )
            .await?;
        Ok(rows
            .iter()
            .map(memory_from_row)
            .collect::<Result<Vec<_>, _>>()?)
    }

    /// How many entries `person` has, and how many of them came from the world (carry a
    /// label).
    pub async fn count(&self, person: &Principal) -> Result<(u64, u64), MemoryError> {
        let row = self
            .db
            .fetch_optional(
                Statement::new(
                    "SELECT COUNT(*), COALESCE(SUM(CASE WHEN labels <> '[]' THEN 1 ELSE 0 END), 0) \
                     FROM memories WHERE channel = $1 AND sender_id = $2",
                )
                .bind(person.channel().to_owned())
                .bind(person.sender_id().to_owned()),
            )
            .await?;
        let Some(row) = row else {
            return Ok((0, 0));
        };
        let all: i64 = row.get(0)?;
        let world: i64 = row.get(1)?;
        Ok((all.max(0) as u64, world.max(0) as u64))
    }

    /// Forgets `person`'s entry `id`; another's, or none, is [`MemoryError::NotFound`].
    pub async fn forget(&self, person: &Principal, id: &str) -> Result<(), MemoryError> {
        let gone = self
            .db
            .execute(
                Statement::new(
                    "DELETE FROM memories WHERE id = $1 AND channel = $2 AND sender_id = $3",
                )
                .bind(id.to_owned())
                .bind(person.channel().to_owned())
                .bind(person.sender_id().to_owned()),
            )
            .await?;
        if gone == 0 {
            return Err(MemoryError::NotFound(id.chars().take(64).collect()));
        }
        Ok(())
    }

    /// Indexes the entries SQLite's search index does not hold (written before it was per
    /// person, or by hand): how many. Nothing to do on PostgreSQL, where the words are a
    /// column of the entry.
    pub async fn index_missing(&self) -> Result<u64, MemoryError> {
        if !matches!(self.db.pool(), Pool::Sqlite(_)) {
            return Ok(0);
        }
        let mut indexed = 0;
        loop {
            let rows = self
                .db
                .fetch_all(Statement::new(
                    "SELECT m.id, m.channel, m.sender_id, m.text FROM memories m \
                     WHERE NOT EXISTS (SELECT 1 FROM memory_words w WHERE w.rowid = m.seq) LIMIT 500",
                ))
                .await?;
            if rows.is_empty() {
                return Ok(indexed);
            }
            for row in &rows {
                let person = metnos_kit::store::stored_principal(
                    &row.get::<String, _>("channel")?,
                    &row.get::<String, _>("sender_id")?,
                )?;
                let id: String = row.get("id")?;
                let words = tagged_words(&person, &row.get::<String, _>("text")?);
                self.db
                    .locked_tx(&person_key(&person), async |tx| {
                        index_in(tx, &id, &words).await.map(Finish::Commit)
                    })
                    .await?;
                indexed += 1;
            }
        }
    }

    /// Forgets every entry of `person` at `now_ms`: how many went. A turn begun before
    /// saves nothing after.
    pub async fn forget_all(&self, person: &Principal, now_ms: i64) -> Result<u64, MemoryError> {
        Ok(self
            .db
            .locked_tx(&person_key(person), async |tx| {
                forget_all_in(tx, person, now_ms).await.map(Finish::Commit)
            })
            .await?)
    }
}

/// Indexes the entry `id` (just written) under `words` inside its transaction (SQLite).
async fn index_in(
    tx: &mut metnos_kit::store::sql::Tx,
    id: &str,
    words: &str,
) -> Result<(), sqlx::Error> {
    tx.execute(
        Statement::new(
            "INSERT INTO memory_words (rowid, words) SELECT m.seq, $2 FROM memories m \
             WHERE m.id = $1 AND NOT EXISTS (SELECT 1 FROM memory_words w WHERE w.rowid = m.seq)",
        )
        .bind(id.to_owned())
        .bind(words.to_owned()),
    )
    .await?;
    Ok(())
}

/// Forgets every entry of `person` at `now_ms` inside a transaction that holds their
/// memory (alone, or with their conversations: see
/// [`super::threads::ThreadStore::forget`]): how many went. When they forgot moves only
/// forward.
pub(super) async fn forget_all_in(
    tx: &mut metnos_kit::store::sql::Tx,
    person: &Principal,
    now_ms: i64,
) -> Result<u64, sqlx::Error> {
    use super::threads::{Forgets, mark};
    tx.execute(mark(Forgets::Memory, person, now_ms)).await?;
    tx.execute(
        Statement::new("DELETE FROM memories WHERE channel = $1 AND sender_id = $2")
            .bind(person.channel().to_owned())
            .bind(person.sender_id().to_owned()),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_only_words_once_each() {
        assert_eq!(
            terms("My sister's birthday? \"OR\" NEAR(x) *"),
            ["my", "sister", "s", "birthday", "or", "near", "x"]
        );
        assert_eq!(
            terms("Compleanno di Maria è il 3 maggio"),
            ["compleanno", "di", "maria", "è", "il", "3", "maggio"]
        );
        assert!(terms("' -- ;").is_empty());
        assert_eq!(
            terms("a b c d e f g h i j k l m n o p q r s").len(),
            MAX_TERMS
        );
    }

    #[test]
    fn only_visible_text_within_the_limit_is_saved() {
        assert_eq!(
            checked_text("  my sister's birthday is 3 May \n").unwrap(),
            "my sister's birthday is 3 May"
        );
        assert!(matches!(checked_text("   "), Err(MemoryError::Empty)));
        assert!(matches!(
            checked_text(&"x".repeat(501)),
            Err(MemoryError::TooLong(501))
        ));
        assert!(
            checked_text(&"è".repeat(500)).is_ok(),
            "characters, not bytes"
        );
        assert!(matches!(
            checked_text("hi\u{202e}there"),
            Err(MemoryError::Invisible)
        ));
        assert!(matches!(
            checked_text("bell\u{7}"),
            Err(MemoryError::Invisible)
        ));
        assert!(checked_text("two\nlines").is_ok());
    }
}
