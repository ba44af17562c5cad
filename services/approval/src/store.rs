//! The pending-approval registry: one implementation over SQLite or PostgreSQL. Every
//! state change is one conditional UPDATE (`… WHERE token = $1 AND status = 'pending'`),
//! so concurrent decisions on one token change it exactly once on either backend.

use metnos_core::capability::Capability;
use metnos_core::level::AutonomyLevel;
use metnos_core::principal::Principal;
use metnos_kit::on_db;
use metnos_kit::store::{Db, EmbeddedMigration, Migrations, Pool, Statement, stored_principal};
use sqlx::Row;

use crate::card::{Language, Reversibility, Territory};

const SQLITE: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "pending",
        sql: include_str!("../migrations/sqlite/0001_pending.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "policy level",
        sql: include_str!("../migrations/sqlite/0002_policy_level.sql"),
    },
    EmbeddedMigration {
        version: 3,
        description: "traceparent",
        sql: include_str!("../migrations/sqlite/0003_traceparent.sql"),
    },
    EmbeddedMigration {
        version: 4,
        description: "grant claim",
        sql: include_str!("../migrations/sqlite/0004_grant_claim.sql"),
    },
    EmbeddedMigration {
        version: 5,
        description: "decisions journal",
        sql: include_str!("../migrations/sqlite/0005_decisions.sql"),
    },
];
const POSTGRES: &[EmbeddedMigration] = &[
    EmbeddedMigration {
        version: 1,
        description: "pending",
        sql: include_str!("../migrations/postgres/0001_pending.sql"),
    },
    EmbeddedMigration {
        version: 2,
        description: "policy level",
        sql: include_str!("../migrations/postgres/0002_policy_level.sql"),
    },
    EmbeddedMigration {
        version: 3,
        description: "traceparent",
        sql: include_str!("../migrations/postgres/0003_traceparent.sql"),
    },
    EmbeddedMigration {
        version: 4,
        description: "grant claim",
        sql: include_str!("../migrations/postgres/0004_grant_claim.sql"),
    },
    EmbeddedMigration {
        version: 5,
        description: "decisions journal",
        sql: include_str!("../migrations/postgres/0005_decisions.sql"),
    },
];

/// A decision as the journal keeps it: when, which request (its token's hash, not the
/// token), what became of it and who decided. Written in the transaction that makes the
/// decision (issue 41): a decision the journal cannot hold is not made.
fn decision(
    token: &str,
    status: Status,
    by: Option<&Principal>,
    territory: Territory,
    now: i64,
) -> serde_json::Value {
    serde_json::json!({
        "at": now,
        "request": metnos_kit::chain::token_name(token),
        "status": status.as_str(),
        "by": by.map(ToString::to_string),
        "territory": territory.as_str(),
    })
}

/// The approval decisions' chained journal (issue 23).
pub const DECISIONS: metnos_kit::journal::Journal = metnos_kit::journal::Journal {
    table: "decisions",
    head: "decisions_head",
    name: "decisions",
};

/// The PostgreSQL channel on which replicas say which request changed.
pub const CHANGES_CHANNEL: &str = "metnos_approval_changes";

/// Calls `changed` with each token another replica (or this one) says changed, until the
/// store is not PostgreSQL. A lost listener is made again, with backoff (1 s doubling to
/// 30 s while PostgreSQL cannot be reached); the waiters' slow poll covers what a
/// reconnection misses.
pub async fn listen(db: &Db, changed: impl Fn(&str)) {
    let Pool::Postgres(pool) = db.pool() else {
        return;
    };
    const FIRST: std::time::Duration = std::time::Duration::from_secs(1);
    let mut backoff = FIRST;
    loop {
        let listening = async {
            let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
            listener.listen(CHANGES_CHANNEL).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let mut listener = match listening.await {
            Ok(listener) => listener,
            Err(e) => {
                tracing::warn!(error = %e, retry_in_s = backoff.as_secs(), "cannot listen for approval changes");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(30));
                continue;
            }
        };
        backoff = FIRST;
        loop {
            match listener.recv().await {
                Ok(notification) => changed(notification.payload()),
                Err(e) => {
                    tracing::warn!(error = %e, "approval change listener lost; reconnecting");
                    tokio::time::sleep(FIRST).await;
                    break;
                }
            }
        }
    }
}

/// The schema of the approval store, per backend.
pub const MIGRATIONS: Migrations = Migrations {
    sqlite: SQLITE,
    postgres: POSTGRES,
};

/// The states of a request (seed ch. 6.1, plus cancelled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Pending,
    Approved,
    Rejected,
    Expired,
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Approved => "approved",
            Status::Rejected => "rejected",
            Status::Expired => "expired",
            Status::Cancelled => "cancelled",
        }
    }

    fn parse(text: &str) -> Result<Status, sqlx::Error> {
        Ok(match text {
            "pending" => Status::Pending,
            "approved" => Status::Approved,
            "rejected" => Status::Rejected,
            "expired" => Status::Expired,
            "cancelled" => Status::Cancelled,
            other => return Err(decode_error("status", other)),
        })
    }

    pub fn is_terminal(self) -> bool {
        self != Status::Pending
    }

    /// The state a request is settled in; `None` while it is pending.
    pub fn settled(self) -> Option<Settled> {
        match self {
            Status::Pending => None,
            Status::Approved => Some(Settled::Approved),
            Status::Rejected => Some(Settled::Rejected),
            Status::Expired => Some(Settled::Expired),
            Status::Cancelled => Some(Settled::Cancelled),
        }
    }
}

/// A request's state once it is no longer pending: what a late decision or cancel is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Approved,
    Rejected,
    Expired,
    Cancelled,
}

impl Settled {
    /// As the store and the messages spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::Approved => Status::Approved.as_str(),
            Settled::Rejected => Status::Rejected.as_str(),
            Settled::Expired => Status::Expired.as_str(),
            Settled::Cancelled => Status::Cancelled.as_str(),
        }
    }
}

impl std::fmt::Display for Settled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn decode_error(column: &str, value: &str) -> sqlx::Error {
    sqlx::Error::Decode(format!("unknown {column} `{value}` in the approval store").into())
}

/// A request for approval, as stored. Times are milliseconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub token: String,
    pub requester: Principal,
    pub action_verb: String,
    pub target_summary: String,
    pub capability_class: String,
    pub reversibility: Reversibility,
    /// The concession approving makes (none when the capability cannot be granted).
    pub territory: Territory,
    pub language: Language,
    /// None: a proposal's request that names no capability (a revocation offer).
    pub capability: Option<Capability>,
    pub target: String,
    pub territory_target: String,
    pub executor: String,
    pub call_sha256: String,
    pub recurrence_count: u32,
    pub created_at: i64,
    pub expires_at: i64,
    pub status: Status,
    pub decision_at: Option<i64>,
    pub decided_by: Option<Principal>,
    pub cancel_reason: Option<String>,
    pub grant_id: Option<i64>,
    pub extra_json: String,
    /// The autonomy level policy judged the call at (the card's reason line); none for
    /// requests stored before it was kept.
    pub policy_level: Option<AutonomyLevel>,
    /// The W3C `traceparent` of the turn that asked (empty: none), so the decision joins
    /// the turn's trace.
    pub traceparent: String,
}

const COLUMNS: &str = "token, channel, sender_id, capability_class, action_verb, target_summary, \
    reversibility, territory, language, capability, target, territory_target, executor, \
    call_sha256, recurrence_count, created_at, expires_at, status, decision_at, \
    decision_by_channel, decision_by_sender, cancel_reason, grant_id, request_extra, policy_level, \
    traceparent";

fn from_row<R>(row: &R) -> Result<Pending, sqlx::Error>
where
    R: Row,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<i64>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let text = |column: &str| row.try_get::<String, _>(column);
    let reversibility = text("reversibility")?;
    let territory = text("territory")?;
    let language = text("language")?;
    let decided_by = match (
        row.try_get::<Option<String>, _>("decision_by_channel")?,
        row.try_get::<Option<String>, _>("decision_by_sender")?,
    ) {
        (Some(channel), Some(sender_id)) => Some(stored_principal(&channel, &sender_id)?),
        _ => None,
    };
    Ok(Pending {
        token: text("token")?,
        requester: stored_principal(&text("channel")?, &text("sender_id")?)?,
        action_verb: text("action_verb")?,
        target_summary: text("target_summary")?,
        capability_class: text("capability_class")?,
        reversibility: Reversibility::parse(&reversibility)
            .ok_or_else(|| decode_error("reversibility", &reversibility))?,
        territory: Territory::parse(&territory)
            .ok_or_else(|| decode_error("territory", &territory))?,
        language: Language::from_code(&language)
            .ok_or_else(|| decode_error("language", &language))?,
        capability: {
            let name = text("capability")?;
            Capability::parse_optional(&name).map_err(|_| decode_error("capability", &name))?
        },
        target: text("target")?,
        territory_target: text("territory_target")?,
        executor: text("executor")?,
        call_sha256: text("call_sha256")?,
        recurrence_count: u32::try_from(row.try_get::<i64, _>("recurrence_count")?)
            .unwrap_or(u32::MAX),
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        status: Status::parse(&text("status")?)?,
        decision_at: row.try_get("decision_at")?,
        decided_by,
        cancel_reason: row.try_get("cancel_reason")?,
        grant_id: row.try_get("grant_id")?,
        extra_json: text("request_extra")?,
        // Unknown or empty (stored before the level was kept): no reason line.
        policy_level: AutonomyLevel::parse(&text("policy_level")?).ok(),
        traceparent: text("traceparent")?,
    })
}

/// Pending approvals, persisted.
#[derive(Debug, Clone)]
pub struct PendingStore {
    db: Db,
}

impl PendingStore {
    pub fn new(db: Db) -> PendingStore {
        PendingStore { db }
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Whether other replicas may share this store (PostgreSQL), so changes are told to
    /// them.
    pub fn shared(&self) -> bool {
        matches!(self.db.pool(), Pool::Postgres(_))
    }

    /// Tells every replica on this PostgreSQL store that `token` changed (a no-op on
    /// SQLite, which has one writer). Its waiters hear it through [`listen`].
    pub async fn notify(&self, token: &str) -> Result<(), sqlx::Error> {
        if let Pool::Postgres(pool) = self.db.pool() {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANGES_CHANNEL)
                .bind(token)
                .execute(pool)
                .await?;
        }
        Ok(())
    }

    pub async fn insert(&self, p: &Pending) -> Result<(), sqlx::Error> {
        let sql = format!(
            "INSERT INTO pending ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
             $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26)"
        );
        let _writing = self.db.writing().await;
        on_db!(&self.db, pool => {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(&p.token)
                .bind(p.requester.channel())
                .bind(p.requester.sender_id())
                .bind(&p.capability_class)
                .bind(&p.action_verb)
                .bind(&p.target_summary)
                .bind(p.reversibility.as_str())
                .bind(p.territory.as_str())
                .bind(p.language.code())
                .bind(Capability::name_of(p.capability))
                .bind(&p.target)
                .bind(&p.territory_target)
                .bind(&p.executor)
                .bind(&p.call_sha256)
                .bind(i64::from(p.recurrence_count))
                .bind(p.created_at)
                .bind(p.expires_at)
                .bind(p.status.as_str())
                .bind(p.decision_at)
                .bind(p.decided_by.as_ref().map(|d| d.channel().to_owned()))
                .bind(p.decided_by.as_ref().map(|d| d.sender_id().to_owned()))
                .bind(&p.cancel_reason)
                .bind(p.grant_id)
                .bind(&p.extra_json)
                .bind(p.policy_level.map_or("", AutonomyLevel::as_str))
                .bind(&p.traceparent)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    pub async fn get(&self, token: &str) -> Result<Option<Pending>, sqlx::Error> {
        let sql = format!("SELECT {COLUMNS} FROM pending WHERE token = $1");
        on_db!(&self.db, pool => {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(token).fetch_optional(pool).await?;
            row.as_ref().map(from_row).transpose()
        })
    }

    /// How many of this person's requests for this class and target were approved.
    pub async fn count_approved(
        &self,
        requester: &Principal,
        capability_class: &str,
    ) -> Result<u32, sqlx::Error> {
        let sql = "SELECT COUNT(*) FROM pending WHERE channel = $1 AND sender_id = $2 \
                   AND capability_class = $3 AND status = 'approved'";
        let count: i64 = on_db!(&self.db, pool => {
            sqlx::query_scalar(sql)
                .bind(requester.channel())
                .bind(requester.sender_id())
                .bind(capability_class)
                .fetch_one(pool)
                .await?
        });
        Ok(u32::try_from(count).unwrap_or(u32::MAX))
    }

    /// Pending → approved/rejected by `decider`, if still pending and not expired at
    /// `now`; `edited`: the pattern the person chose instead of the one offered (checked to
    /// lie within it), written in the same update. True when this call made the change.
    pub async fn decide(
        &self,
        token: &str,
        status: Status,
        territory: Territory,
        decider: &Principal,
        now: i64,
        edited: Option<&str>,
    ) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE pending SET status = $1, decision_at = $2, decision_by_channel = $3, \
                   decision_by_sender = $4, territory = $5, territory_target = COALESCE($7, territory_target) \
                   WHERE token = $6 AND status = 'pending' AND expires_at > $2 RETURNING token";
        let change = Statement::new(sql)
            .bind(status.as_str())
            .bind(now)
            .bind(decider.channel().to_owned())
            .bind(decider.sender_id().to_owned())
            .bind(territory.as_str())
            .bind(token.to_owned())
            .bind(edited.map(str::to_owned));
        let record = |token: &str| decision(token, status, Some(decider), territory, now);
        Ok(!self.journalled(change, record).await?.is_empty())
    }

    /// Pending → expired, if its time has come at `now`.
    pub async fn expire(&self, token: &str, now: i64) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE pending SET status = 'expired', decision_at = $1 \
                   WHERE token = $2 AND status = 'pending' AND expires_at <= $1 RETURNING token";
        let change = Statement::new(sql).bind(now).bind(token.to_owned());
        let record = |token: &str| decision(token, Status::Expired, None, Territory::None, now);
        Ok(!self.journalled(change, record).await?.is_empty())
    }

    /// Pending → cancelled, with the reason.
    pub async fn cancel(&self, token: &str, reason: &str, now: i64) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE pending SET status = 'cancelled', decision_at = $1, cancel_reason = $2 \
                   WHERE token = $3 AND status = 'pending' RETURNING token";
        let change = Statement::new(sql)
            .bind(now)
            .bind(reason.to_owned())
            .bind(token.to_owned());
        let record = |token: &str| decision(token, Status::Cancelled, None, Territory::None, now);
        Ok(!self.journalled(change, record).await?.is_empty())
    }

    /// Marks every pending request past its expiry as expired; returns their tokens.
    pub async fn sweep(&self, now: i64) -> Result<Vec<String>, sqlx::Error> {
        let sql = "UPDATE pending SET status = 'expired', decision_at = $1 \
                   WHERE status = 'pending' AND expires_at <= $1 RETURNING token";
        let change = Statement::new(sql).bind(now);
        let record = |token: &str| decision(token, Status::Expired, None, Territory::None, now);
        self.journalled(change, record).await
    }

    /// Runs `change` (an UPDATE `RETURNING token`) and journals `record(token)` for each
    /// request it changed, in one transaction: the tokens changed.
    async fn journalled(
        &self,
        change: Statement,
        record: impl Fn(&str) -> serde_json::Value,
    ) -> Result<Vec<String>, sqlx::Error> {
        let tokens = |rows: &[metnos_kit::store::Row]| {
            rows.iter()
                .map(|row| row.get::<String, _>(0))
                .collect::<Result<Vec<_>, _>>()
        };
        let rows = DECISIONS
            .change(&self.db, change, |rows| {
                Ok(tokens(rows)?.iter().map(|t| record(t)).collect())
            })
            .await?;
        tokens(&rows)
    }

    /// The decisions journal, in seq order, and its head.
    pub async fn decisions(
        &self,
    ) -> Result<(Vec<String>, Option<metnos_kit::chain::End>), sqlx::Error> {
        DECISIONS.read(&self.db).await
    }

    /// Walks the decisions journal, its daily roots with it.
    pub async fn verify_decisions(&self) -> Result<metnos_kit::chain::Report, sqlx::Error> {
        DECISIONS.verify(&self.db).await
    }

    /// Requests, newest first.
    pub async fn list(
        &self,
        include_resolved: bool,
        limit: u32,
        requester: Option<&Principal>,
    ) -> Result<Vec<Pending>, sqlx::Error> {
        let status = if include_resolved {
            "TRUE"
        } else {
            "status = 'pending'"
        };
        let person = if requester.is_some() {
            "channel = $2 AND sender_id = $3"
        } else {
            "TRUE"
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM pending WHERE {status} AND {person} \
             ORDER BY created_at DESC, token LIMIT $1"
        );
        let (channel, sender) = requester.map_or(("", ""), |p| (p.channel(), p.sender_id()));
        on_db!(&self.db, pool => {
            let query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(i64::from(limit));
            let query = if requester.is_some() { query.bind(channel).bind(sender) } else { query };
            let rows = query.fetch_all(pool).await?;
            rows.iter().map(from_row).collect()
        })
    }

    /// Records the grant a territory concession made.
    pub async fn set_grant(&self, token: &str, grant_id: i64) -> Result<(), sqlx::Error> {
        let sql = "UPDATE pending SET grant_id = $1 WHERE token = $2 AND grant_id IS NULL";
        let _writing = self.db.writing().await;
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(grant_id).bind(token).execute(pool).await?;
        });
        Ok(())
    }

    /// Claims the recording of an approved concession's grant until `until_ms`: `true`
    /// when this caller may ask policy now (nobody recorded it, nobody else is asking).
    pub async fn claim_grant(
        &self,
        token: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE pending SET grant_claimed_until = $3 WHERE token = $1 AND grant_id IS NULL \
                   AND status = 'approved' AND grant_claimed_until < $2";
        let _writing = self.db.writing().await;
        let affected = on_db!(&self.db, pool => {
            sqlx::query(sql).bind(token).bind(now_ms).bind(until_ms).execute(pool).await?.rows_affected()
        });
        Ok(affected == 1)
    }

    /// Policy refused the grant for good (its answer would not change): never asked again.
    /// Only the claim made until `claimed_until` (this caller's) is turned into that.
    pub async fn give_up_grant(&self, token: &str, claimed_until: i64) -> Result<(), sqlx::Error> {
        let sql = "UPDATE pending SET grant_claimed_until = $2 WHERE token = $1 AND grant_id IS NULL \
                   AND grant_claimed_until = $3";
        let _writing = self.db.writing().await;
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(token).bind(i64::MAX).bind(claimed_until).execute(pool).await?;
        });
        Ok(())
    }

    /// Gives this caller's claim (made until `claimed_until`) back, policy could not be
    /// asked, so the next sweep tries again; a later claimer's claim (this one's expired
    /// meanwhile) is left alone.
    pub async fn release_grant(&self, token: &str, claimed_until: i64) -> Result<(), sqlx::Error> {
        let sql = "UPDATE pending SET grant_claimed_until = 0 WHERE token = $1 AND grant_id IS NULL \
                   AND grant_claimed_until = $2";
        let _writing = self.db.writing().await;
        on_db!(&self.db, pool => {
            sqlx::query(sql).bind(token).bind(claimed_until).execute(pool).await?;
        });
        Ok(())
    }

    /// Approved concessions whose grant is not recorded yet.
    /// (Not one being recorded now, nor one policy refused for good.)
    pub async fn ungranted(&self, limit: u32, now_ms: i64) -> Result<Vec<Pending>, sqlx::Error> {
        let sql = format!(
            "SELECT {COLUMNS} FROM pending WHERE status = 'approved' AND (territory <> 'none' OR executor = 'grant_revoke') \
             AND grant_id IS NULL AND grant_claimed_until < $2 ORDER BY decision_at LIMIT $1"
        );
        on_db!(&self.db, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(i64::from(limit)).bind(now_ms).fetch_all(pool).await?;
            rows.iter().map(from_row).collect()
        })
    }
}
