//! The telos engine's store, one implementation over SQLite or PostgreSQL: every evaluated
//! proposal (the rejected ones are the journal), the ledger of publications and digest
//! places, per-telos fitness, the never-list, who was asked for a TELOS.md, stopped
//! intents.
//!
//! A decision that takes a place (a publication or a digest item) reads the ledger,
//! decides and writes in one transaction that holds the person's channel: `BEGIN
//! IMMEDIATE` on SQLite, a transaction-scoped advisory lock on PostgreSQL. The ledger
//! insert itself is conditional on the quota, so two replicas can never both take the last
//! slot.

use std::collections::HashMap;

use metnos_kit::on_db;
use metnos_kit::store::{Db, EmbeddedMigration, Finish, Migrations, Row, Statement, Tx};
use sqlx::{AssertSqlSafe, Row as _};

use super::Reason;

const SQLITE: &[EmbeddedMigration] = &[EmbeddedMigration {
    version: 1,
    description: "telos",
    sql: include_str!("../../migrations/sqlite/0001_telos.sql"),
}];
const POSTGRES: &[EmbeddedMigration] = &[EmbeddedMigration {
    version: 1,
    description: "telos",
    sql: include_str!("../../migrations/postgres/0001_telos.sql"),
}];

/// The schema of the vaglio's store, per backend.
pub const MIGRATIONS: Migrations = Migrations {
    sqlite: SQLITE,
    postgres: POSTGRES,
};

/// A proposal as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub proposal_id: String,
    pub person: String,
    pub channel: String,
    pub effect_class: String,
    pub decision: String,
    pub reason: String,
    pub expected_alignment: f64,
    pub before_bother: f64,
    pub threshold: f64,
    /// The telos with gate > 0.
    pub contributors: Vec<String>,
    pub result_json: String,
    pub at_ms: i64,
    pub answer: Option<String>,
    pub viewed: bool,
}

/// One ledger line.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerEntry {
    /// `publish`, `digest`, `schedule` or `window`.
    pub place: &'static str,
    pub source: &'static str,
    /// `m` in the bother sum.
    pub weight: f64,
    pub session: String,
    pub at_ms: i64,
}

/// What the ledger says of one person on one channel, as a decision needs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LedgerView {
    /// Publications since `since_ms`: `(at_ms, m)`.
    pub publications: Vec<(i64, f64)>,
    pub adhoc_last_hour: u32,
    pub adhoc_today: u32,
    pub adhoc_this_session: u32,
    pub scheduler_today: u32,
    pub digest_pending: u32,
    /// Proposals deferred unjudged by a protected window since the last digest.
    pub window_pending: u32,
    /// Scheduler results waiting for the digest (apart from the ten ad hoc places).
    pub schedule_pending: u32,
}

/// The windows a [`LedgerView`] is read over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ViewSpan {
    pub now_ms: i64,
    /// Publications older than this weigh nothing in the bother sum any more.
    pub bother_since_ms: i64,
    /// The person's local midnight.
    pub day_start_ms: i64,
    /// The last evening digest.
    pub digest_since_ms: i64,
}

/// What a decision writes: the proposal, and the place it took (if any), under the quota
/// it must respect.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub record: Recorded,
    pub place: Option<(LedgerEntry, Quota)>,
    /// Kept (the id answers the same from now on); `false` for a CLI proposal deferred to
    /// the next session, which weighs it again under the same id.
    pub keep: bool,
}

/// The condition on a ledger insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    /// Ad hoc on a chat channel: fewer than `per_hour` in the last hour and `per_day` today.
    Adhoc { per_hour: u32, per_day: u32 },
    /// Ad hoc on the CLI: fewer than this many in the session.
    Session(u32),
    /// Scheduler firings today.
    Scheduler(u32),
    /// Items waiting for the digest (of the entry's place: `digest`, `schedule` for
    /// scheduler results, or `window` for those deferred unjudged by a protected window).
    Digest(u32),
}

/// One EMA step: `ema ← (1 − alpha)·ema + alpha·signal`, at `now_ms`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub alpha: f64,
    pub signal: f64,
    pub now_ms: i64,
}

/// One EMA step on one telos, from 0 for a telos without one: `$3` = α·s, `$5` = 1 − α.
/// One statement, so concurrent answers never lose an update.
const EMA_STEP: &str = "INSERT INTO telos_fitness (person, telos_id, ema, updated_ms) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (person, telos_id) DO UPDATE \
     SET ema = $5 * telos_fitness.ema + $3, updated_ms = $4";

/// Whether the write happened (`false`: the quota was taken meanwhile; nothing written).
pub type Taken = bool;

const PROPOSAL_COLUMNS: &str = "proposal_id, person, channel, effect_class, decision, reason, \
     expected_alignment, before_bother, threshold, contributors, result_json, at_ms, answer, viewed";

/// Inserts a proposal record; changes no row when its id exists.
fn insert_proposal(r: &Recorded) -> Statement {
    let sql = format!(
        "INSERT INTO telos_proposals ({PROPOSAL_COLUMNS}) VALUES \
         ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
         ON CONFLICT (proposal_id) DO NOTHING"
    );
    Statement::new(AssertSqlSafe(sql))
        .bind(r.proposal_id.clone())
        .bind(r.person.clone())
        .bind(r.channel.clone())
        .bind(r.effect_class.clone())
        .bind(r.decision.clone())
        .bind(r.reason.clone())
        .bind(r.expected_alignment)
        .bind(r.before_bother)
        .bind(r.threshold)
        .bind(r.contributors.join(","))
        .bind(r.result_json.clone())
        .bind(r.at_ms)
        .bind(r.answer.clone())
        .bind(r.viewed)
}

/// A proposal row as recorded.
fn recorded(row: &Row) -> Result<Recorded, sqlx::Error> {
    let contributors: String = row.get("contributors")?;
    Ok(Recorded {
        proposal_id: row.get("proposal_id")?,
        person: row.get("person")?,
        channel: row.get("channel")?,
        effect_class: row.get("effect_class")?,
        decision: row.get("decision")?,
        reason: row.get("reason")?,
        expected_alignment: row.get("expected_alignment")?,
        before_bother: row.get("before_bother")?,
        threshold: row.get("threshold")?,
        contributors: contributors
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        result_json: row.get("result_json")?,
        at_ms: row.get("at_ms")?,
        answer: row.get("answer")?,
        viewed: row.get("viewed")?,
    })
}

/// What the ledger says of `person` on `channel` over `span`, read in the decision's
/// transaction.
async fn read_view(
    tx: &mut Tx,
    person: &str,
    channel: &str,
    session: &str,
    span: ViewSpan,
) -> Result<LedgerView, sqlx::Error> {
    let since = span
        .bother_since_ms
        .min(span.day_start_ms)
        .min(span.now_ms - 3_600_000);
    let rows = tx
        .fetch_all(
            Statement::new(
                "SELECT place, source, weight, session, at_ms FROM telos_ledger \
                 WHERE person = $1 AND channel = $2 AND at_ms >= $3",
            )
            .bind(person)
            .bind(channel)
            .bind(since),
        )
        .await?;
    let mut view = LedgerView::default();
    for row in &rows {
        let place: String = row.get(0)?;
        let source: String = row.get(1)?;
        let weight: f64 = row.get(2)?;
        let at: i64 = row.get(4)?;
        if place != "publish" {
            continue;
        }
        if at >= span.bother_since_ms {
            view.publications.push((at, weight));
        }
        if source == "adhoc" {
            if at > span.now_ms - 3_600_000 {
                view.adhoc_last_hour += 1;
            }
            if at >= span.day_start_ms {
                view.adhoc_today += 1;
            }
        } else if at >= span.day_start_ms {
            view.scheduler_today += 1;
        }
    }
    // Only the CLI's quota is per session.
    let session_count: i64 = if session.is_empty() {
        0
    } else {
        let count = Statement::new(
            "SELECT COUNT(*) FROM telos_ledger WHERE person = $1 AND channel = $2 \
             AND place = 'publish' AND source = 'adhoc' AND session = $3",
        )
        .bind(person)
        .bind(channel)
        .bind(session);
        tx.fetch_one(count).await?.get(0)?
    };
    view.adhoc_this_session = u32::try_from(session_count).unwrap_or(u32::MAX);
    let waiting = tx
        .fetch_all(
            Statement::new(
                "SELECT place, COUNT(*) FROM telos_ledger WHERE person = $1 \
                 AND place IN ('digest', 'window', 'schedule') AND at_ms >= $2 GROUP BY place",
            )
            .bind(person)
            .bind(span.digest_since_ms),
        )
        .await?;
    for row in &waiting {
        let place: String = row.get(0)?;
        let n = u32::try_from(row.get::<i64, _>(1)?).unwrap_or(u32::MAX);
        match place.as_str() {
            "digest" => view.digest_pending = n,
            "schedule" => view.schedule_pending = n,
            _ => view.window_pending = n,
        }
    }
    Ok(view)
}

/// Takes `entry`'s place if its `quota` allows (the conditional insert); whether it did.
async fn take_place(
    tx: &mut Tx,
    write: &Write,
    (entry, quota): &(LedgerEntry, Quota),
    person: &str,
    channel: &str,
    span: ViewSpan,
) -> Result<Taken, sqlx::Error> {
    let (limit, extra, since) = match *quota {
        Quota::Adhoc { per_hour, per_day } => (per_hour, per_day, span.day_start_ms),
        Quota::Session(n) => (n, 0, 0),
        Quota::Scheduler(n) => (n, 0, span.day_start_ms),
        Quota::Digest(n) => (n, 0, span.digest_since_ms),
    };
    let mut insert = Statement::new(conditional_insert(*quota))
        .bind(person)
        .bind(channel)
        .bind(entry.place)
        .bind(entry.source)
        .bind(entry.weight)
        .bind(entry.session.as_str())
        .bind(write.record.proposal_id.as_str())
        .bind(entry.at_ms)
        .bind(i64::from(limit));
    if !matches!(quota, Quota::Session(_)) {
        insert = insert.bind(since);
    }
    if matches!(quota, Quota::Adhoc { .. }) {
        insert = insert.bind(i64::from(extra));
    }
    Ok(tx.execute(insert).await? == 1)
}

/// The telos state.
#[derive(Debug, Clone)]
pub struct TelosStore {
    db: Db,
}

/// The SQL that takes a place if its quota allows: `$1..$8` the entry, `$9` the limit,
/// `$10` the window's start (or the session).
fn conditional_insert(quota: Quota) -> &'static str {
    match quota {
        Quota::Adhoc { .. } => {
            "INSERT INTO telos_ledger (person, channel, place, source, weight, session, proposal_id, at_ms) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8 \
             WHERE (SELECT COUNT(*) FROM telos_ledger WHERE person = $1 AND channel = $2 \
                    AND place = 'publish' AND source = 'adhoc' AND at_ms > $8 - 3600000) < $9 \
               AND (SELECT COUNT(*) FROM telos_ledger WHERE person = $1 AND channel = $2 \
                    AND place = 'publish' AND source = 'adhoc' AND at_ms >= $10) < $11"
        }
        Quota::Session(_) => {
            "INSERT INTO telos_ledger (person, channel, place, source, weight, session, proposal_id, at_ms) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8 \
             WHERE (SELECT COUNT(*) FROM telos_ledger WHERE person = $1 AND channel = $2 \
                    AND place = 'publish' AND source = 'adhoc' AND session = $6) < $9"
        }
        Quota::Scheduler(_) => {
            "INSERT INTO telos_ledger (person, channel, place, source, weight, session, proposal_id, at_ms) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8 \
             WHERE (SELECT COUNT(*) FROM telos_ledger WHERE person = $1 AND channel = $2 \
                    AND place = 'publish' AND source <> 'adhoc' AND at_ms >= $10) < $9"
        }
        Quota::Digest(_) => {
            "INSERT INTO telos_ledger (person, channel, place, source, weight, session, proposal_id, at_ms) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8 \
             WHERE (SELECT COUNT(*) FROM telos_ledger WHERE person = $1 \
                    AND place = $3 AND at_ms >= $10) < $9"
        }
    }
}

impl TelosStore {
    pub fn new(db: Db) -> TelosStore {
        TelosStore { db }
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The proposal recorded under `proposal_id`.
    pub async fn find(&self, proposal_id: &str) -> Result<Option<Recorded>, sqlx::Error> {
        let sql = format!("SELECT {PROPOSAL_COLUMNS} FROM telos_proposals WHERE proposal_id = $1");
        let find = Statement::new(AssertSqlSafe(sql)).bind(proposal_id);
        let row = self.db.fetch_optional(find).await?;
        row.as_ref().map(recorded).transpose()
    }

    /// Records a proposal decided without a place (a rejection, a deferral to a slot).
    /// `false` when its id was recorded already.
    pub async fn record(&self, r: &Recorded) -> Result<bool, sqlx::Error> {
        Ok(self.db.execute(insert_proposal(r)).await? == 1)
    }

    /// Reads `person`'s ledger on `channel` inside one transaction holding it, lets
    /// `decide` choose, and writes what it chose (nothing for a dry run). `Ok(None)`: the proposal id was recorded
    /// already (nothing written). `Ok(Some(false))`: the quota was taken meanwhile.
    pub async fn decide(
        &self,
        person: &str,
        channel: &str,
        session: &str,
        span: ViewSpan,
        dry_run: bool,
        decide: impl FnOnce(&LedgerView) -> Write,
    ) -> Result<Option<(Write, Taken)>, sqlx::Error> {
        // The person, not the channel: the digest's places are counted per person.
        self.db
            .locked_tx(person, async |tx| {
                let view = read_view(tx, person, channel, session, span).await?;
                let write = decide(&view);
                if dry_run || !write.keep {
                    return Ok(Finish::Rollback(Some((write, true))));
                }
                if let Some(place) = &write.place
                    && !take_place(tx, &write, place, person, channel, span).await?
                {
                    return Ok(Finish::Rollback(Some((write, false))));
                }
                if tx.execute(insert_proposal(&write.record)).await? != 1 {
                    return Ok(Finish::Rollback(None));
                }
                Ok(Finish::Commit(Some((write, true))))
            })
            .await
    }

    /// The fitness EMA of each of `person`'s telos that has one.
    pub async fn fitness(&self, person: &str) -> Result<HashMap<String, f64>, sqlx::Error> {
        on_db!(&self.db, pool => {
            let rows = sqlx::query("SELECT telos_id, ema FROM telos_fitness WHERE person = $1")
                .bind(person)
                .fetch_all(pool)
                .await?;
            rows.iter()
                .map(|r| Ok((r.try_get::<String, _>(0)?, r.try_get::<f64, _>(1)?)))
                .collect()
        })
    }

    /// Closes `proposal_id` with `answer` (or marks it viewed) and moves the EMA of each of
    /// `telos` by `alpha·signal`, atomically. `false`: it was answered already (or viewed,
    /// for a second "viewed").
    pub async fn answer(
        &self,
        proposal_id: &str,
        answer: Option<&str>,
        person: &str,
        telos: &[String],
        step: Step,
    ) -> Result<bool, sqlx::Error> {
        let Step {
            alpha,
            signal,
            now_ms,
        } = step;
        on_db!(&self.db, pool => {
            let mut tx = pool.begin().await?;
            let changed = match answer {
                Some(answer) => sqlx::query(
                    "UPDATE telos_proposals SET answer = $2 WHERE proposal_id = $1 AND answer IS NULL",
                )
                .bind(proposal_id)
                .bind(answer)
                .execute(&mut *tx)
                .await?,
                None => sqlx::query(
                    "UPDATE telos_proposals SET viewed = $2 WHERE proposal_id = $1 AND answer IS NULL AND viewed = $3",
                )
                .bind(proposal_id)
                .bind(true)
                .bind(false)
                .execute(&mut *tx)
                .await?,
            };
            if changed.rows_affected() != 1 {
                tx.rollback().await?;
                return Ok(false);
            }
            for telos_id in telos {
                // ema ← (1 − α)·ema + α·s, from 0 for a telos without one; one statement, so
                // concurrent answers never lose an update.
                sqlx::query(
                    EMA_STEP,
                )
                .bind(person)
                .bind(telos_id)
                .bind(alpha * signal)
                .bind(now_ms)
                .bind(1.0 - alpha)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(true)
        })
    }

    /// Moves one telos's EMA by `alpha·signal` (a stop, which names no proposal).
    pub async fn nudge(&self, person: &str, telos_id: &str, step: Step) -> Result<(), sqlx::Error> {
        let Step {
            alpha,
            signal,
            now_ms,
        } = step;
        on_db!(&self.db, pool => {
            sqlx::query(
                EMA_STEP,
            )
            .bind(person)
            .bind(telos_id)
            .bind(alpha * signal)
            .bind(now_ms)
            .bind(1.0 - alpha)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// Forgets the fitness of `telos` (removed from the person's file).
    pub async fn discard_fitness(&self, person: &str, telos: &[String]) -> Result<(), sqlx::Error> {
        on_db!(&self.db, pool => {
            for telos_id in telos {
                sqlx::query("DELETE FROM telos_fitness WHERE person = $1 AND telos_id = $2")
                    .bind(person)
                    .bind(telos_id)
                    .execute(pool)
                    .await?;
            }
            Ok(())
        })
    }

    /// Puts `effect_class` on `person`'s never-list (kept as it was if already there).
    pub async fn add_never(
        &self,
        person: &str,
        effect_class: &str,
        proposal_id: &str,
        now_ms: i64,
    ) -> Result<(), sqlx::Error> {
        on_db!(&self.db, pool => {
            sqlx::query(
                "INSERT INTO telos_never (person, effect_class, since_ms, proposal_id) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (person, effect_class) DO NOTHING",
            )
            .bind(person)
            .bind(effect_class)
            .bind(now_ms)
            .bind(proposal_id)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    pub async fn is_never(&self, person: &str, effect_class: &str) -> Result<bool, sqlx::Error> {
        on_db!(&self.db, pool => {
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM telos_never WHERE person = $1 AND effect_class = $2",
            )
            .bind(person)
            .bind(effect_class)
            .fetch_one(pool)
            .await?;
            Ok(n > 0)
        })
    }

    /// `(person, effect_class, since_ms, proposal_id)`, oldest first.
    pub async fn list_never(
        &self,
        person: Option<&str>,
    ) -> Result<Vec<(String, String, i64, String)>, sqlx::Error> {
        on_db!(&self.db, pool => {
            let rows = sqlx::query(
                "SELECT person, effect_class, since_ms, proposal_id FROM telos_never \
                 WHERE $1 = '' OR person = $1 ORDER BY since_ms, person, effect_class",
            )
            .bind(person.unwrap_or(""))
            .fetch_all(pool)
            .await?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
                .collect()
        })
    }

    /// `false` when it was not on the list.
    pub async fn remove_never(
        &self,
        person: &str,
        effect_class: &str,
    ) -> Result<bool, sqlx::Error> {
        on_db!(&self.db, pool => {
            let done = sqlx::query("DELETE FROM telos_never WHERE person = $1 AND effect_class = $2")
                .bind(person)
                .bind(effect_class)
                .execute(pool)
                .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// Whether `person` is asked now to write a TELOS.md: `true` exactly once per person,
    /// across replicas.
    pub async fn ask_once(&self, person: &str, now_ms: i64) -> Result<bool, sqlx::Error> {
        on_db!(&self.db, pool => {
            let done = sqlx::query(
                "INSERT INTO telos_people (person, asked_ms) VALUES ($1, $2) \
                 ON CONFLICT (person) DO UPDATE SET asked_ms = $2 WHERE telos_people.asked_ms IS NULL",
            )
            .bind(person)
            .bind(now_ms)
            .execute(pool)
            .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// The version of `person`'s TELOS.md last seen in force and its `written_at`, if any.
    pub async fn version_of(&self, person: &str) -> Result<Option<(String, String)>, sqlx::Error> {
        on_db!(&self.db, pool => {
            let row = sqlx::query("SELECT version, written_at FROM telos_people WHERE person = $1")
                .bind(person)
                .fetch_optional(pool)
                .await?;
            row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()
        })
    }

    /// Records that `person`'s file in force is `version` with `ids`; when it replaces
    /// another version, returns that one's `(version, ids)` — to exactly one caller across
    /// replicas.
    pub async fn seen_version(
        &self,
        person: &str,
        version: &str,
        written_at: &str,
        ids: &[String],
    ) -> Result<Option<(String, Vec<String>)>, sqlx::Error> {
        let ids = ids.join(",");
        on_db!(&self.db, pool => {
            sqlx::query(
                "INSERT INTO telos_people (person, version, telos_ids) VALUES ($1, '', '') \
                 ON CONFLICT (person) DO NOTHING",
            )
            .bind(person)
            .execute(pool)
            .await?;
            let row = sqlx::query("SELECT version, telos_ids FROM telos_people WHERE person = $1")
                .bind(person)
                .fetch_one(pool)
                .await?;
            let old_version: String = row.try_get(0)?;
            let old_ids: String = row.try_get(1)?;
            if old_version == version {
                return Ok(None);
            }
            let done = sqlx::query(
                "UPDATE telos_people SET version = $2, telos_ids = $3, written_at = $5 WHERE person = $1 AND version = $4",
            )
            .bind(person)
            .bind(version)
            .bind(&ids)
            .bind(&old_version)
            .bind(written_at)
            .execute(pool)
            .await?;
            if done.rows_affected() != 1 || old_version.is_empty() {
                return Ok(None);
            }
            Ok(Some((
                old_version,
                old_ids.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect(),
            )))
        })
    }

    /// Blocks `intent` for `person` until `until_ms`.
    pub async fn stop(&self, person: &str, intent: &str, until_ms: i64) -> Result<(), sqlx::Error> {
        on_db!(&self.db, pool => {
            sqlx::query(
                "INSERT INTO telos_stops (person, intent, until_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (person, intent) DO UPDATE SET until_ms = $3",
            )
            .bind(person)
            .bind(intent)
            .bind(until_ms)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// Until when `intent` is blocked for `person`, if it is at `now_ms`.
    pub async fn stopped(
        &self,
        person: &str,
        intent: &str,
        now_ms: i64,
    ) -> Result<Option<i64>, sqlx::Error> {
        on_db!(&self.db, pool => {
            sqlx::query_scalar(
                "SELECT until_ms FROM telos_stops WHERE person = $1 AND intent = $2 AND until_ms > $3",
            )
            .bind(person)
            .bind(intent)
            .bind(now_ms)
            .fetch_optional(pool)
            .await
        })
    }

    /// The journal: rejected proposals, newest first, or (`borderline`) the N closest to
    /// their threshold, since `since_ms`.
    pub async fn journal(
        &self,
        person: Option<&str>,
        since_ms: i64,
        limit: u32,
        borderline: bool,
    ) -> Result<Vec<Recorded>, sqlx::Error> {
        let order = if borderline {
            "ABS(threshold - before_bother), at_ms DESC"
        } else {
            "at_ms DESC"
        };
        let scored = if borderline {
            // Scored ones only: a never-listed proposal was never weighed.
            format!(
                "AND reason IN ('{}', '{}')",
                Reason::BelowThreshold,
                Reason::DigestFull
            )
        } else {
            String::new()
        };
        let sql = format!(
            "SELECT {PROPOSAL_COLUMNS} FROM telos_proposals \
             WHERE decision = 'reject' AND at_ms >= $1 AND ($2 = '' OR person = $2) \
             {scored} ORDER BY {order} LIMIT $3"
        );
        let journal = Statement::new(AssertSqlSafe(sql))
            .bind(since_ms)
            .bind(person.unwrap_or(""))
            .bind(i64::from(limit));
        let rows = self.db.fetch_all(journal).await?;
        rows.iter().map(recorded).collect()
    }
}
