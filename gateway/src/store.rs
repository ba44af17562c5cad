//! The gateway's store: pairings, pairing codes, sent cards, the Telegram offset, the
//! updates already handled and which thread each answer belongs to. SQLite or PostgreSQL,
//! the same SQL.

use metnos_core::language::Language;
use metnos_core::level::{AutonomyLevel, UnknownLevel};
use metnos_kit::on_db;
use metnos_kit::store::{Db, EmbeddedMigration, Migrations};
use sqlx::Row;

const SQLITE: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "gateway",
        sql: include_str!("../migrations/sqlite/0001_gateway.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "card state",
        sql: include_str!("../migrations/sqlite/0002_card_state.sql"),
    },
    EmbeddedMigration {
        version: 3,
        description: "sent messages",
        sql: include_str!("../migrations/sqlite/0003_sent_messages.sql"),
    },
    EmbeddedMigration {
        version: 4,
        description: "answer threads",
        sql: include_str!("../migrations/sqlite/0004_answer_threads.sql"),
    },
    EmbeddedMigration {
        version: 5,
        description: "card trace",
        sql: include_str!("../migrations/sqlite/0005_card_trace.sql"),
    },
];
const POSTGRES: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "gateway",
        sql: include_str!("../migrations/postgres/0001_gateway.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "card state",
        sql: include_str!("../migrations/postgres/0002_card_state.sql"),
    },
    EmbeddedMigration {
        version: 3,
        description: "sent messages",
        sql: include_str!("../migrations/postgres/0003_sent_messages.sql"),
    },
    EmbeddedMigration {
        version: 4,
        description: "answer threads",
        sql: include_str!("../migrations/postgres/0004_answer_threads.sql"),
    },
    EmbeddedMigration {
        version: 5,
        description: "card trace",
        sql: include_str!("../migrations/postgres/0005_card_trace.sql"),
    },
];

/// The schema of the gateway store, per backend.
pub const MIGRATIONS: Migrations = Migrations {
    sqlite: SQLITE,
    postgres: POSTGRES,
};

/// How long a pairing code works.
pub const CODE_TTL_MS: i64 = 10 * 60 * 1000;

/// A person who may talk to Metnos.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairing {
    pub channel: String,
    pub sender_id: String,
    /// Where to write to them (the private chat on Telegram).
    pub chat_id: String,
    pub display_name: String,
    /// How much Metnos may do for them without asking (kept as `ReadOnly`, `Supervised`
    /// or `Full`).
    pub level: AutonomyLevel,
    /// The language to speak to them in (kept as `it` or `en`).
    pub language: Language,
    pub paired_at: i64,
}

/// A value in the store the gateway does not know: the row is refused, naming it.
#[derive(Debug, thiserror::Error)]
pub enum BadValue {
    #[error(transparent)]
    Level(#[from] UnknownLevel),
    #[error("unknown language `{0}`; the languages are it and en")]
    Language(String),
}

/// A stored level, parsed (any of its usual spellings).
fn level_of(text: &str) -> Result<AutonomyLevel, sqlx::Error> {
    AutonomyLevel::parse(text).map_err(|e| sqlx::Error::ColumnDecode {
        index: "level".to_owned(),
        source: Box::new(BadValue::from(e)),
    })
}

/// A stored language code, parsed (exactly `it` or `en`).
fn language_of(code: &str) -> Result<Language, sqlx::Error> {
    Language::from_code(code).ok_or_else(|| sqlx::Error::ColumnDecode {
        index: "language".to_owned(),
        source: Box::new(BadValue::Language(code.chars().take(32).collect())),
    })
}

/// A card sent to a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentCard {
    pub token: String,
    pub channel: String,
    pub chat_id: String,
    pub message_id: String,
    /// The card's lines, newline-joined (to show them in the final state).
    pub lines: String,
    /// The card as sent: its HTML, and its buttons as JSON rows of `[text, data]` (to
    /// show them again after a declined confirmation).
    pub html: String,
    pub buttons: String,
    /// The W3C traceparent of the call that sent it (empty: none): the click answering it
    /// joins that trace.
    pub traceparent: String,
}

fn card_from_row<R>(row: &R) -> Result<SentCard, sqlx::Error>
where
    R: Row,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(SentCard {
        token: row.try_get("token")?,
        channel: row.try_get("channel")?,
        chat_id: row.try_get("chat_id")?,
        message_id: row.try_get("message_id")?,
        lines: row.try_get("lines")?,
        html: row.try_get("html")?,
        buttons: row.try_get("buttons")?,
        traceparent: row.try_get("traceparent")?,
    })
}

#[derive(Debug, Clone)]
pub struct Store {
    db: Db,
}

fn pairing_from_row<R>(row: &R) -> Result<Pairing, sqlx::Error>
where
    R: Row,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(Pairing {
        channel: row.try_get("channel")?,
        sender_id: row.try_get("sender_id")?,
        chat_id: row.try_get("chat_id")?,
        display_name: row.try_get("display_name")?,
        level: level_of(&row.try_get::<String, _>("level")?)?,
        language: language_of(&row.try_get::<String, _>("language")?)?,
        paired_at: row.try_get("paired_at")?,
    })
}

const PAIRING_COLUMNS: &str =
    "channel, sender_id, chat_id, display_name, level, language, paired_at";

/// An unpaired sender asking to talk.
#[derive(Debug, Clone, Copy)]
pub struct Stranger<'a> {
    pub channel: &'a str,
    pub sender_id: &'a str,
    pub chat_id: &'a str,
    pub display_name: &'a str,
    pub language: Language,
}

/// What asking for a code gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeRequest {
    /// A new code, to be sent.
    New(String),
    /// A code was issued to this sender less than ten minutes ago: say nothing more.
    AlreadyIssued,
}

impl Store {
    pub fn new(db: Db) -> Store {
        Store { db }
    }

    pub async fn pairing(
        &self,
        channel: &str,
        sender_id: &str,
    ) -> Result<Option<Pairing>, sqlx::Error> {
        let sql =
            format!("SELECT {PAIRING_COLUMNS} FROM pairings WHERE channel = $1 AND sender_id = $2");
        on_db!(&self.db, pool => {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(channel).bind(sender_id).fetch_optional(pool).await?;
            row.as_ref().map(pairing_from_row).transpose()
        })
    }

    pub async fn pairings(&self) -> Result<Vec<Pairing>, sqlx::Error> {
        let sql = format!(
            "SELECT {PAIRING_COLUMNS} FROM pairings ORDER BY paired_at, channel, sender_id"
        );
        on_db!(&self.db, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?;
            // A row this version cannot read (a level or language it does not know) is
            // logged and left out of the list; that person's own lookups refuse it.
            Ok(rows
                .iter()
                .filter_map(|row| match pairing_from_row(row) {
                    Ok(pairing) => Some(pairing),
                    Err(e) => {
                        tracing::warn!(error = %e, "a pairing cannot be read; it is left out");
                        None
                    }
                })
                .collect())
        })
    }

    /// A code for an unpaired sender, unless one was issued to them within its lifetime.
    pub async fn request_code(
        &self,
        who: &Stranger<'_>,
        code: &str,
        now_ms: i64,
    ) -> Result<CodeRequest, sqlx::Error> {
        let Stranger {
            channel,
            sender_id,
            chat_id,
            display_name,
            language,
        } = *who;
        let live = "SELECT COUNT(*) FROM pairing_codes WHERE channel = $1 AND sender_id = $2 AND expires_at > $3 AND used_at IS NULL";
        let count: i64 = on_db!(&self.db, pool => {
            sqlx::query_scalar(live).bind(channel).bind(sender_id).bind(now_ms).fetch_one(pool).await?
        });
        if count > 0 {
            return Ok(CodeRequest::AlreadyIssued);
        }
        let insert = "INSERT INTO pairing_codes (code, channel, sender_id, chat_id, display_name, language, created_at, expires_at) \
                      VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
        on_db!(&self.db, pool => {
            sqlx::query(insert)
                .bind(code).bind(channel).bind(sender_id).bind(chat_id).bind(display_name).bind(language.code())
                .bind(now_ms).bind(now_ms + CODE_TTL_MS)
                .execute(pool).await?;
        });
        Ok(CodeRequest::New(code.to_owned()))
    }

    /// Uses a code (once, within ten minutes) and pairs its sender at `level`.
    pub async fn approve_code(
        &self,
        code: &str,
        level: AutonomyLevel,
        now_ms: i64,
    ) -> Result<Option<Pairing>, sqlx::Error> {
        let claim = "UPDATE pairing_codes SET used_at = $2 WHERE code = $1 AND used_at IS NULL AND expires_at > $2";
        let claimed = on_db!(&self.db, pool => {
            sqlx::query(claim).bind(code).bind(now_ms).execute(pool).await?.rows_affected()
        });
        if claimed != 1 {
            return Ok(None);
        }
        let select = "SELECT channel, sender_id, chat_id, display_name, language FROM pairing_codes WHERE code = $1";
        let (channel, sender_id, chat_id, display_name, language): (
            String,
            String,
            String,
            String,
            String,
        ) = on_db!(&self.db, pool => {
            let row = sqlx::query(select).bind(code).fetch_one(pool).await?;
            (row.try_get("channel")?, row.try_get("sender_id")?, row.try_get("chat_id")?, row.try_get("display_name")?, row.try_get("language")?)
        });
        let pairing = Pairing {
            channel,
            sender_id,
            chat_id,
            display_name,
            level,
            language: language_of(&language)?,
            paired_at: now_ms,
        };
        let upsert = "INSERT INTO pairings (channel, sender_id, chat_id, display_name, level, language, paired_at) \
                      VALUES ($1, $2, $3, $4, $5, $6, $7) \
                      ON CONFLICT (channel, sender_id) DO UPDATE SET chat_id = excluded.chat_id, \
                      display_name = excluded.display_name, level = excluded.level, \
                      language = excluded.language, paired_at = excluded.paired_at";
        on_db!(&self.db, pool => {
            sqlx::query(upsert)
                .bind(&pairing.channel).bind(&pairing.sender_id).bind(&pairing.chat_id)
                .bind(&pairing.display_name).bind(pairing.level.as_str()).bind(pairing.language.code()).bind(pairing.paired_at)
                .execute(pool).await?;
        });
        Ok(Some(pairing))
    }

    /// Pairs directly (the local CLI user, or tests).
    pub async fn pair(&self, pairing: &Pairing) -> Result<(), sqlx::Error> {
        let upsert = "INSERT INTO pairings (channel, sender_id, chat_id, display_name, level, language, paired_at) \
                      VALUES ($1, $2, $3, $4, $5, $6, $7) \
                      ON CONFLICT (channel, sender_id) DO UPDATE SET level = excluded.level";
        on_db!(&self.db, pool => {
            sqlx::query(upsert)
                .bind(&pairing.channel).bind(&pairing.sender_id).bind(&pairing.chat_id)
                .bind(&pairing.display_name).bind(pairing.level.as_str()).bind(pairing.language.code()).bind(pairing.paired_at)
                .execute(pool).await?;
        });
        Ok(())
    }

    pub async fn set_level(
        &self,
        channel: &str,
        sender_id: &str,
        level: AutonomyLevel,
    ) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE pairings SET level = $3 WHERE channel = $1 AND sender_id = $2";
        let n = on_db!(&self.db, pool => {
            sqlx::query(sql).bind(channel).bind(sender_id).bind(level.as_str()).execute(pool).await?.rows_affected()
        });
        Ok(n == 1)
    }

    pub async fn revoke(&self, channel: &str, sender_id: &str) -> Result<bool, sqlx::Error> {
        let sql = "DELETE FROM pairings WHERE channel = $1 AND sender_id = $2";
        let n = on_db!(&self.db, pool => {
            sqlx::query(sql).bind(channel).bind(sender_id).execute(pool).await?.rows_affected()
        });
        Ok(n == 1)
    }

    /// Remembers a sent card (sent again, e.g. by a resumed turn: the new message), open.
    /// Takes `key` for a message about to be sent to `chat`: `None` when this caller sends
    /// it, else what became of it before (state, message ids, since when).
    pub async fn begin_send(
        &self,
        key: &str,
        chat: &str,
        now_ms: i64,
    ) -> Result<Option<(String, Vec<i32>, i64)>, sqlx::Error> {
        let insert = "INSERT INTO sent_messages (idempotency_key, state, chat_id, created_at) \
                      VALUES ($1, 'sending', $2, $3) ON CONFLICT (idempotency_key) DO NOTHING";
        let select =
            "SELECT state, message_ids, created_at FROM sent_messages WHERE idempotency_key = $1";
        on_db!(&self.db, pool => {
            let inserted = sqlx::query(insert).bind(key).bind(chat).bind(now_ms).execute(pool).await?.rows_affected();
            if inserted == 1 {
                return Ok(None);
            }
            let row = sqlx::query(select).bind(key).fetch_optional(pool).await?;
            Ok(match row {
                // Gone meanwhile (it did not go): this caller sends it.
                None => None,
                Some(row) => {
                    let state: String = row.try_get("state")?;
                    let ids: String = row.try_get("message_ids")?;
                    let since: i64 = row.try_get("created_at")?;
                    Some((state, serde_json::from_str(&ids).unwrap_or_default(), since))
                }
            })
        })
    }

    /// What became of the message sent under `key`: sent (`Some(ids)`, or `None` for
    /// "part of it went or may have"), or it certainly did not go (`forget`: the key is
    /// free for another try).
    pub async fn end_send(
        &self,
        key: &str,
        outcome: Option<&[i32]>,
        forget: bool,
    ) -> Result<(), sqlx::Error> {
        if forget {
            let sql = "DELETE FROM sent_messages WHERE idempotency_key = $1";
            on_db!(&self.db, pool => {
                sqlx::query(sql).bind(key).execute(pool).await?;
            });
            return Ok(());
        }
        let (state, ids) = match outcome {
            Some(ids) => ("sent", serde_json::to_string(ids).unwrap_or_default()),
            None => ("maybe", "[]".to_owned()),
        };
        let sql =
            "UPDATE sent_messages SET state = $2, message_ids = $3 WHERE idempotency_key = $1";
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(key).bind(state).bind(ids).execute(pool).await?;
        });
        Ok(())
    }

    /// Forgets keyed messages older than `before_ms`.
    pub async fn prune_sent(&self, before_ms: i64) -> Result<u64, sqlx::Error> {
        let sql = "DELETE FROM sent_messages WHERE created_at < $1";
        let affected = on_db!(&self.db, pool => {
            sqlx::query(sql).bind(before_ms).execute(pool).await?.rows_affected()
        });
        Ok(affected)
    }

    pub async fn put_card(&self, card: &SentCard, now_ms: i64) -> Result<(), sqlx::Error> {
        let sql = "INSERT INTO cards (token, channel, chat_id, message_id, lines, created_at, html, buttons, traceparent) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                   ON CONFLICT (token) DO UPDATE SET chat_id = excluded.chat_id, message_id = excluded.message_id, lines = excluded.lines, \
                   html = excluded.html, buttons = excluded.buttons, traceparent = excluded.traceparent, closed_at = NULL";
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(&card.token).bind(&card.channel).bind(&card.chat_id).bind(&card.message_id).bind(&card.lines).bind(now_ms)
                .bind(&card.html).bind(&card.buttons).bind(&card.traceparent)
                .execute(pool).await?;
        });
        Ok(())
    }

    pub async fn card(&self, token: &str) -> Result<Option<SentCard>, sqlx::Error> {
        let sql = "SELECT token, channel, chat_id, message_id, lines, html, buttons, traceparent FROM cards WHERE token = $1";
        on_db!(&self.db, pool => {
            let row = sqlx::query(sql).bind(token).fetch_optional(pool).await?;
            row.as_ref().map(card_from_row).transpose()
        })
    }

    /// Cards not yet closed to their outcome, oldest first (at most `limit`).
    pub async fn open_cards(&self, limit: u32) -> Result<Vec<SentCard>, sqlx::Error> {
        let sql = "SELECT token, channel, chat_id, message_id, lines, html, buttons, traceparent FROM cards \
                   WHERE closed_at IS NULL ORDER BY created_at LIMIT $1";
        on_db!(&self.db, pool => {
            let rows = sqlx::query(sql).bind(i64::from(limit)).fetch_all(pool).await?;
            rows.iter().map(card_from_row).collect()
        })
    }

    /// The card shows its outcome: it is no longer swept.
    pub async fn mark_closed(&self, token: &str, now_ms: i64) -> Result<(), sqlx::Error> {
        let sql = "UPDATE cards SET closed_at = $1 WHERE token = $2 AND closed_at IS NULL";
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(now_ms).bind(token).execute(pool).await?;
        });
        Ok(())
    }

    /// Claims the card's one reminder: true the first time only.
    pub async fn claim_reminder(&self, token: &str, now_ms: i64) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE cards SET reminded_at = $1 WHERE token = $2 AND reminded_at IS NULL";
        let n = on_db!(&self.db, pool => {
            sqlx::query(sql).bind(now_ms).bind(token).execute(pool).await?.rows_affected()
        });
        Ok(n == 1)
    }

    pub async fn setting(&self, key: &str) -> Result<Option<String>, sqlx::Error> {
        let sql = "SELECT value FROM settings WHERE key = $1";
        on_db!(&self.db, pool => {
            Ok(sqlx::query_scalar(sql).bind(key).fetch_optional(pool).await?)
        })
    }

    pub async fn set_setting(&self, key: &str, value: &str) -> Result<(), sqlx::Error> {
        let sql = "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value";
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(key).bind(value).execute(pool).await?;
        });
        Ok(())
    }

    /// Takes the setting `key`: whether it was there (it is gone now).
    pub async fn take_setting(&self, key: &str) -> Result<bool, sqlx::Error> {
        let sql = "DELETE FROM settings WHERE key = $1";
        let n = on_db!(&self.db, pool => {
            sqlx::query(sql).bind(key).execute(pool).await?.rows_affected()
        });
        Ok(n > 0)
    }

    /// Remembers that the messages `message_ids` sent to `chat` answered `sender_id` in
    /// their thread `thread_id`.
    pub async fn note_answer(
        &self,
        chat: &str,
        message_ids: &[i32],
        sender_id: &str,
        thread_id: &str,
        now_ms: i64,
    ) -> Result<(), sqlx::Error> {
        let sql = "INSERT INTO answer_threads (chat_id, message_id, sender_id, thread_id, sent_at) \
                   VALUES ($1, $2, $3, $4, $5) ON CONFLICT (chat_id, message_id) DO NOTHING";
        for id in message_ids {
            on_db!(&self.db, pool => {
                sqlx::query(sql).bind(chat).bind(i64::from(*id)).bind(sender_id).bind(thread_id).bind(now_ms)
                    .execute(pool).await?;
            });
        }
        Ok(())
    }

    /// The thread of `sender_id`'s that the message `message_id` in `chat` answered, if
    /// it was one of their answers and is still remembered.
    pub async fn answer_thread(
        &self,
        chat: &str,
        message_id: i32,
        sender_id: &str,
    ) -> Result<Option<String>, sqlx::Error> {
        let sql = "SELECT thread_id FROM answer_threads \
                   WHERE chat_id = $1 AND message_id = $2 AND sender_id = $3";
        on_db!(&self.db, pool => {
            Ok(sqlx::query_scalar(sql).bind(chat).bind(i64::from(message_id)).bind(sender_id)
                .fetch_optional(pool).await?)
        })
    }

    /// Forgets which thread `sender_id`'s answers belonged to (`/forget`): how many.
    pub async fn forget_answers(&self, sender_id: &str) -> Result<u64, sqlx::Error> {
        let sql = "DELETE FROM answer_threads WHERE sender_id = $1";
        Ok(on_db!(&self.db, pool => {
            sqlx::query(sql).bind(sender_id).execute(pool).await?.rows_affected()
        }))
    }

    /// Forgets answers sent before `before_ms` (the conversation's retention).
    pub async fn prune_answers(&self, before_ms: i64) -> Result<u64, sqlx::Error> {
        let sql = "DELETE FROM answer_threads WHERE sent_at < $1";
        Ok(on_db!(&self.db, pool => {
            sqlx::query(sql).bind(before_ms).execute(pool).await?.rows_affected()
        }))
    }

    /// Whether an update was already handled.
    pub async fn handled(&self, update_id: i64) -> Result<bool, sqlx::Error> {
        let sql = "SELECT COUNT(*) FROM handled_updates WHERE update_id = $1";
        let n: i64 = on_db!(&self.db, pool => {
            sqlx::query_scalar(sql).bind(update_id).fetch_one(pool).await?
        });
        Ok(n > 0)
    }

    /// Records an update as handled and moves the offset past it, together.
    pub async fn mark_handled(&self, update_id: i64, now_ms: i64) -> Result<(), sqlx::Error> {
        let insert = "INSERT INTO handled_updates (update_id, handled_at) VALUES ($1, $2) ON CONFLICT (update_id) DO NOTHING";
        let offset = "INSERT INTO settings (key, value) VALUES ('telegram.offset', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value";
        let prune = "DELETE FROM handled_updates WHERE handled_at < $1";
        on_db!(&self.db, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(insert).bind(update_id).bind(now_ms).execute(&mut *tx).await?;
            sqlx::query(offset).bind((update_id + 1).to_string()).execute(&mut *tx).await?;
            // Telegram keeps unconfirmed updates for 24 hours; older ids cannot come back.
            sqlx::query(prune).bind(now_ms - 48 * 3_600_000).execute(&mut *tx).await?;
            tx.commit().await?;
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_level_or_language_is_parsed_and_a_bad_one_is_named() {
        assert_eq!(level_of("Supervised").unwrap(), AutonomyLevel::Supervised);
        // The spellings an operator may have written by hand.
        assert_eq!(level_of("readonly").unwrap(), AutonomyLevel::ReadOnly);
        assert_eq!(language_of("en").unwrap(), Language::English);
        let level = level_of("root").unwrap_err().to_string();
        assert!(
            level.contains("level") && level.contains("`root`"),
            "{level}"
        );
        let language = language_of("de").unwrap_err().to_string();
        assert!(
            language.contains("language") && language.contains("`de`"),
            "{language}"
        );
    }
}
