//! The grants store: one implementation over SQLite or PostgreSQL ([`Db`]); the SQL is
//! the same on both (`$n` placeholders, BIGINT milliseconds, partial indexes).

use metnos_kit::on_db;
use metnos_kit::store::{Db, EmbeddedMigration, Finish, Migrations, Statement, stored_principal};
use sqlx::Row;

use crate::grant::{Candidate, Grant, NewGrant};
use metnos_core::capability::Capability;
use metnos_core::principal::Principal;

const SQLITE: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "grants",
        sql: include_str!("../migrations/sqlite/0001_grants.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "grant idempotency keys",
        sql: include_str!("../migrations/sqlite/0002_idempotency.sql"),
    },
    EmbeddedMigration {
        version: 3,
        description: "approval twins",
        sql: include_str!("../migrations/sqlite/0003_approval_twins.sql"),
    },
    EmbeddedMigration {
        version: 4,
        description: "grant changes journal",
        sql: include_str!("../migrations/sqlite/0004_grant_changes.sql"),
    },
];
const POSTGRES: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "grants",
        sql: include_str!("../migrations/postgres/0001_grants.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "grant idempotency keys",
        sql: include_str!("../migrations/postgres/0002_idempotency.sql"),
    },
    EmbeddedMigration {
        version: 3,
        description: "approval twins",
        sql: include_str!("../migrations/postgres/0003_approval_twins.sql"),
    },
    EmbeddedMigration {
        version: 4,
        description: "grant changes journal",
        sql: include_str!("../migrations/postgres/0004_grant_changes.sql"),
    },
];

/// The grant store's changes, chained (issue 23): every grant recorded, revoked or pruned.
pub const CHANGES: metnos_kit::journal::Journal = metnos_kit::journal::Journal {
    table: "grant_changes",
    head: "grant_changes_head",
    name: "grant changes",
};

/// The schema of the policy store, per backend.
pub const MIGRATIONS: Migrations = Migrations {
    sqlite: SQLITE,
    postgres: POSTGRES,
};

const GRANT_COLUMNS: &str = "id, channel, sender_id, capability, target, pattern, granted_at, \
                             expires_at, granted_by, revoked_at, last_used_at";

/// What [`GrantStore::record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    New(Grant),
    /// The grant an earlier call with the same idempotency key stored.
    Existing(Grant),
}

impl Recorded {
    pub fn grant(&self) -> &Grant {
        match self {
            Recorded::New(g) | Recorded::Existing(g) => g,
        }
    }
}

/// Filters of [`GrantStore::list`].
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub channel: Option<String>,
    pub sender_id: Option<String>,
    /// Also revoked and expired grants.
    pub include_inactive: bool,
}

/// A new grant as the changes' journal keeps it: keys only, the pattern (a path, a host)
/// and an approval's token as hashes.
fn granted(new: &NewGrant, id: i64, now_ms: i64) -> serde_json::Value {
    serde_json::json!({
        "at": now_ms,
        "change": "granted",
        "grant": id,
        "principal": new.principal.to_string(),
        "capability": new.capability.name(),
        "pattern": &metnos_kit::chain::hash(&new.pattern.text)[..16],
        "expires_at": new.expires_at,
        "granted_by": match new.granted_by.split_once(':') {
            Some((kind, rest)) => format!("{kind}:{}", &metnos_kit::chain::hash(rest)[..16]),
            None => new.granted_by.clone(),
        },
    })
}

/// One INSERT of several grants: far fewer round trips than one insert per grant.
fn insert_many(chunk: &[NewGrant], now_ms: i64) -> Statement {
    let values: Vec<String> = (0..chunk.len())
        .map(|r| {
            let b = r * 9;
            format!(
                "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                b + 1,
                b + 2,
                b + 3,
                b + 4,
                b + 5,
                b + 6,
                b + 7,
                b + 8,
                b + 9
            )
        })
        .collect();
    let sql = format!(
        "INSERT INTO grants (channel, sender_id, capability, target, pattern, \
         match_key, granted_at, expires_at, granted_by) VALUES {}",
        values.join(", ")
    );
    chunk.iter().fold(
        Statement::new(sqlx::AssertSqlSafe(sql)),
        |statement, new| bind_grant(statement, new, now_ms),
    )
}

/// A grant's nine columns, bound in the order of the inserts' column lists.
fn bind_grant(statement: Statement, new: &NewGrant, now_ms: i64) -> Statement {
    statement
        .bind(new.principal.channel().to_owned())
        .bind(new.principal.sender_id().to_owned())
        .bind(new.capability.name())
        .bind(new.target.clone())
        .bind(new.pattern.text.clone())
        .bind(new.pattern.key.clone())
        .bind(now_ms)
        .bind(new.expires_at)
        .bind(new.granted_by.clone())
}

/// Grants, persisted.
#[derive(Debug, Clone)]
pub struct GrantStore {
    db: Db,
}

fn grant_from_row<R>(row: &R) -> Result<Grant, sqlx::Error>
where
    R: Row,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<i64>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(Grant {
        id: row.try_get("id")?,
        principal: stored_principal(
            &row.try_get::<String, _>("channel")?,
            &row.try_get::<String, _>("sender_id")?,
        )?,
        capability: row.try_get("capability")?,
        target: row.try_get("target")?,
        pattern: row.try_get("pattern")?,
        granted_at: row.try_get("granted_at")?,
        expires_at: row.try_get("expires_at")?,
        granted_by: row.try_get("granted_by")?,
        revoked_at: row.try_get("revoked_at")?,
        last_used_at: row.try_get("last_used_at")?,
    })
}

impl GrantStore {
    pub fn new(db: Db) -> GrantStore {
        GrantStore { db }
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Stores a grant; returns it with its id. A grant with an idempotency key is stored
    /// once: another call with the same key returns the grant the first one stored
    /// (`Recorded::Existing`), whatever it asked.
    pub async fn record(&self, new: &NewGrant, now_ms: i64) -> Result<Recorded, sqlx::Error> {
        let sql = "INSERT INTO grants (channel, sender_id, capability, target, pattern, match_key, \
                   granted_at, expires_at, granted_by, idempotency_key) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                   ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING \
                   RETURNING id";
        let change = bind_grant(Statement::new(sql), new, now_ms).bind(new.idempotency_key.clone());
        // Granted and journalled in one transaction: no grant the journal does not hold.
        let ids = |rows: &[metnos_kit::store::Row]| {
            rows.iter()
                .map(|row| row.get::<i64, _>(0))
                .collect::<Result<Vec<_>, _>>()
        };
        let rows = CHANGES
            .change(&self.db, change, |rows| {
                Ok(ids(rows)?
                    .into_iter()
                    .map(|id| granted(new, id, now_ms))
                    .collect())
            })
            .await?;
        let id = ids(&rows)?.pop();
        let Some(id) = id else {
            let sql = format!("SELECT {GRANT_COLUMNS} FROM grants WHERE idempotency_key = $1");
            let existing = on_db!(&self.db, pool => {
                let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(new.idempotency_key.as_deref())
                    .fetch_one(pool)
                    .await?;
                grant_from_row(&row)?
            });
            return Ok(Recorded::Existing(existing));
        };
        Ok(Recorded::New(Grant {
            id,
            principal: new.principal.clone(),
            capability: new.capability.name().to_owned(),
            target: new.target.clone(),
            pattern: new.pattern.text.clone(),
            granted_at: now_ms,
            expires_at: new.expires_at,
            granted_by: new.granted_by.clone(),
            revoked_at: None,
            last_used_at: None,
        }))
    }

    /// Stores many grants in one transaction (imports, benchmarks); returns how many.
    pub async fn record_many(&self, grants: &[NewGrant], now_ms: i64) -> Result<u64, sqlx::Error> {
        // Several rows per statement: far fewer round trips than one insert per grant.
        const ROWS: usize = 500;
        let imported = serde_json::json!({
            "at": now_ms,
            "change": "imported",
            "count": grants.len(),
        });
        self.db
            .locked_tx(&CHANGES.key(), async |tx| {
                for chunk in grants.chunks(ROWS) {
                    tx.execute(insert_many(chunk, now_ms)).await?;
                }
                CHANGES.append_in(tx, &imported).await?;
                Ok::<_, sqlx::Error>(Finish::Commit(()))
            })
            .await?;
        Ok(grants.len() as u64)
    }

    /// The active grants of `principal` for `capability` whose lookup key is one of `keys`:
    /// every grant that could match the target those keys came from, oldest first.
    pub async fn candidates(
        &self,
        principal: &Principal,
        capability: Capability,
        keys: &[String],
        now_ms: i64,
    ) -> Result<Vec<Candidate>, sqlx::Error> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (0..keys.len()).map(|i| format!("${}", i + 5)).collect();
        let sql = format!(
            "SELECT id, pattern, expires_at, revoked_at FROM grants \
             WHERE channel = $1 AND sender_id = $2 AND capability = $3 AND revoked_at IS NULL \
             AND (expires_at IS NULL OR expires_at > $4) AND match_key IN ({}) ORDER BY id",
            placeholders.join(", ")
        );
        on_db!(&self.db, pool => {
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(principal.channel())
                .bind(principal.sender_id())
                .bind(capability.name())
                .bind(now_ms);
            for key in keys {
                query = query.bind(key);
            }
            let rows = query.fetch_all(pool).await?;
            rows.iter()
                .map(|row| {
                    Ok(Candidate {
                        id: row.try_get("id")?,
                        pattern: row.try_get("pattern")?,
                        expires_at: row.try_get("expires_at")?,
                        revoked_at: row.try_get("revoked_at")?,
                    })
                })
                .collect()
        })
    }

    /// Up to `limit` active grants of `principal` for `capability`, with their lookup
    /// keys: what a cache of that person's grants holds.
    pub async fn load_active(
        &self,
        principal: &Principal,
        capability: Capability,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<(String, Candidate)>, sqlx::Error> {
        let sql = "SELECT id, pattern, match_key, expires_at, revoked_at FROM grants \
                   WHERE channel = $1 AND sender_id = $2 AND capability = $3 AND revoked_at IS NULL \
                   AND (expires_at IS NULL OR expires_at > $4) ORDER BY id LIMIT $5";
        on_db!(&self.db, pool => {
            let rows = sqlx::query(sql)
                .bind(principal.channel())
                .bind(principal.sender_id())
                .bind(capability.name())
                .bind(now_ms)
                .bind(limit)
                .fetch_all(pool)
                .await?;
            rows.iter()
                .map(|row| {
                    Ok((
                        row.try_get("match_key")?,
                        Candidate {
                            id: row.try_get("id")?,
                            pattern: row.try_get("pattern")?,
                            expires_at: row.try_get("expires_at")?,
                            revoked_at: row.try_get("revoked_at")?,
                        },
                    ))
                })
                .collect()
        })
    }

    /// Grants, newest first.
    pub async fn list(&self, filter: &ListFilter, now_ms: i64) -> Result<Vec<Grant>, sqlx::Error> {
        let mut conditions = Vec::new();
        let mut next = 1;
        if filter.channel.is_some() {
            conditions.push(format!("channel = ${next}"));
            next += 1;
        }
        if filter.sender_id.is_some() {
            conditions.push(format!("sender_id = ${next}"));
            next += 1;
        }
        if !filter.include_inactive {
            conditions.push(format!(
                "revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ${next})"
            ));
        }
        let mut sql = format!("SELECT {GRANT_COLUMNS} FROM grants");
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        sql.push_str(" ORDER BY granted_at DESC, id DESC");
        on_db!(&self.db, pool => {
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            if let Some(channel) = &filter.channel {
                query = query.bind(channel);
            }
            if let Some(sender) = &filter.sender_id {
                query = query.bind(sender);
            }
            if !filter.include_inactive {
                query = query.bind(now_ms);
            }
            let rows = query.fetch_all(pool).await?;
            rows.iter().map(grant_from_row).collect()
        })
    }

    /// Marks a grant revoked; returns whose grant it was and of which capability, or
    /// `None` if it was already revoked or never existed.
    pub async fn revoke(
        &self,
        id: i64,
        of: Option<&Principal>,
        now_ms: i64,
    ) -> Result<Option<(Principal, String)>, sqlx::Error> {
        // `of`: only that person's grant (an empty channel never matches a stored one).
        let sql = "UPDATE grants SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL \
                   AND ($3 = 0 OR (channel = $4 AND sender_id = $5)) \
                   RETURNING channel, sender_id, capability";
        let (bound, channel, sender) = match of {
            Some(p) => (1_i64, p.channel(), p.sender_id()),
            None => (0, "", ""),
        };
        let change = Statement::new(sql)
            .bind(now_ms)
            .bind(id)
            .bind(bound)
            .bind(channel.to_owned())
            .bind(sender.to_owned());
        let revoked_of = |row: &metnos_kit::store::Row| {
            Ok::<_, sqlx::Error>((
                stored_principal(&row.get::<String, _>(0)?, &row.get::<String, _>(1)?)?,
                row.get::<String, _>(2)?,
            ))
        };
        let rows = CHANGES
            .change(&self.db, change, |rows| {
                rows.iter()
                    .map(|row| {
                        let (principal, capability) = revoked_of(row)?;
                        Ok(serde_json::json!({
                            "at": now_ms,
                            "change": "revoked",
                            "grant": id,
                            "principal": principal.to_string(),
                            "capability": capability,
                        }))
                    })
                    .collect()
            })
            .await?;
        let revoked = rows.first().map(revoked_of).transpose()?;
        Ok(revoked)
    }

    /// Walks the changes' journal (`metnos audit verify`).
    pub async fn verify_changes(&self) -> Result<metnos_kit::chain::Report, sqlx::Error> {
        CHANGES.verify(&self.db).await
    }

    /// Revokes, in one statement, every active grant last used (or, never used, granted)
    /// before `cutoff_ms`, and returns them.
    pub async fn prune(&self, cutoff_ms: i64, now_ms: i64) -> Result<Vec<Grant>, sqlx::Error> {
        let sql = format!(
            "UPDATE grants SET revoked_at = $1 \
             WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $1) \
             AND COALESCE(last_used_at, granted_at) < $2 RETURNING {GRANT_COLUMNS}"
        );
        let change = Statement::new(sqlx::AssertSqlSafe(sql))
            .bind(now_ms)
            .bind(cutoff_ms);
        let grants_of = |rows: &[metnos_kit::store::Row]| {
            let mut grants = rows
                .iter()
                .map(|row| match row {
                    metnos_kit::store::Row::Sqlite(row) => grant_from_row(row),
                    metnos_kit::store::Row::Postgres(row) => grant_from_row(row),
                })
                .collect::<Result<Vec<_>, _>>()?;
            grants.sort_by_key(|g| g.id);
            Ok::<_, sqlx::Error>(grants)
        };
        // Revoked and journalled in one transaction.
        let rows = CHANGES
            .change(&self.db, change, |rows| {
                let grants = grants_of(rows)?;
                Ok(Vec::from_iter((!grants.is_empty()).then(|| {
                    serde_json::json!({
                        "at": now_ms,
                        "change": "pruned",
                        "grants": grants.iter().map(|g| g.id).collect::<Vec<_>>(),
                    })
                })))
            })
            .await?;
        let grants = grants_of(&rows)?;
        Ok(grants)
    }

    /// Records when grants were last used (never moving `last_used_at` backwards).
    pub async fn touch(&self, uses: &[(i64, i64)]) -> Result<(), sqlx::Error> {
        if uses.is_empty() {
            return Ok(());
        }
        let sql = "UPDATE grants SET last_used_at = $1 \
                   WHERE id = $2 AND (last_used_at IS NULL OR last_used_at < $1)";
        on_db!(&self.db, pool => {
            let mut tx = pool.begin().await?;
            for (id, at) in uses {
                sqlx::query(sql).bind(at).bind(id).execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }
}
