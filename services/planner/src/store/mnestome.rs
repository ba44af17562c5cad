//! The mnestome (issue 46, seed agent_runtime ch. 11.1): which executor's output was piped
//! into which executor's argument, and how well that went. A passage's weight moves toward
//! 1 each time a step fed that way succeeds (`w ← w + 0.2·(1 − w)`) and toward 0 each time
//! it fails (`w ← 0.8·w`); a refused or rejected step teaches nothing (it never ran). A
//! proto is a tool the model asked for that does not exist, with data piped from an
//! earlier step: what a chain of existing executors may do instead.
//!
//! Only names are kept — executors, an output's field, an argument's key — never values or
//! targets. The mnestome is the installation's, not a person's: what one person's turns
//! teach about tools is what the tools do, and it only ever suggests (each call of a
//! suggested chain still passes every filter).

use metnos_kit::store::Db;
use metnos_kit::store::sql::{Finish, Row, Statement, Tx};
use serde::Serialize;

/// How far one success moves a passage's weight toward 1.
pub const LEARN_RATE: f64 = 0.2;

/// What one failure leaves of a passage's weight.
pub const FAILURE_KEEPS: f64 = 0.8;

/// The weight from which a passage is followed by a chain's search.
pub const STRONG: f64 = 0.30;

/// The longest name kept (an executor, a field, an argument's key, a wanted tool).
pub const MAX_NAME: usize = 64;

/// Most argument names a proto keeps.
pub const MAX_PROTO_ARGS: usize = 8;

/// Most executors one hop of [`Mnestome::reachable`] asks about.
pub const MAX_FRONTIER: usize = 256;

/// A day, in milliseconds.
pub const DAY_MS: i64 = 86_400_000;

/// The half-life of a weight unused for a day or more (the daily ager's decay).
pub const HALF_LIFE_MS: i64 = 30 * DAY_MS;

/// Below this weight a passage becomes a proto again.
pub const DEMOTE_BELOW: f64 = 0.05;

/// A proto older than this with fewer than [`PROTO_KEEP_USES`] uses is removed.
pub const PROTO_KEEP_MS: i64 = 30 * DAY_MS;

/// See [`PROTO_KEEP_MS`].
pub const PROTO_KEEP_USES: u64 = 3;

/// What one run of the ager did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Aged {
    /// Passages and protos whose weight decayed.
    pub decayed: u64,
    /// Passages that fell under [`DEMOTE_BELOW`] and became protos.
    pub demoted: u64,
    /// Old protos of few uses removed.
    pub purged: u64,
}

/// What `weight` is after decaying from `since` to `now`: halved every [`HALF_LIFE_MS`].
pub fn decayed(weight: f64, since: i64, now: i64) -> f64 {
    let elapsed = now.saturating_sub(since).max(0) as f64;
    weight * 0.5f64.powf(elapsed / HALF_LIFE_MS as f64)
}

/// One passage: `from_executor`'s output field `from_field` (`*`: somewhere in its
/// observation, found by the copy rule) into `to_executor`'s argument `to_arg`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Passage {
    pub from_executor: String,
    pub from_field: String,
    pub to_executor: String,
    pub to_arg: String,
}

/// A passage with what was learned of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Strength {
    #[serde(flatten)]
    pub passage: Passage,
    pub weight: f64,
    pub uses: u64,
    pub successes: u64,
    /// Milliseconds since the epoch.
    pub last_used: i64,
}

/// A tool the model asked for that does not exist, fed from `from_executor`'s output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Proto {
    pub from_executor: String,
    pub wanted: String,
    pub arg_names: Vec<String>,
    /// How recurrent: each use moves it toward 1 as a success moves a passage.
    pub weight: f64,
    pub uses: u64,
    pub first_seen: i64,
    pub last_used: i64,
}

/// A chain the owner kept as a named shortcut (accepting a `synt_suggest` offer): the
/// pre-filter offers its executors to a request that names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shortcut {
    /// The wished tool's name.
    pub name: String,
    /// The executor whose output fed the wish (it runs first).
    pub from_executor: String,
    /// The executors after it, in order.
    pub chain: Vec<String>,
    pub created_at: i64,
}

impl Shortcut {
    /// Every executor it names, the first one included, in order.
    pub fn executors(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.from_executor.as_str()).chain(self.chain.iter().map(String::as_str))
    }
}

/// The most shortcuts read for one turn's offer (the owner accepts each one by hand).
pub const MAX_SHORTCUTS: u32 = 256;

/// A name the mnestome may keep: ASCII letters, digits, `_`, `-`, `.`, `*`, at most
/// [`MAX_NAME`] bytes. Anything else (a model's free text in a key, a tool name copied
/// from a page) is not kept.
pub fn keepable(name: &str) -> bool {
    metnos_core::names::plain_name(name)
}

/// The planner's mnestome, on SQLite or PostgreSQL alike.
#[derive(Debug, Clone)]
pub struct Mnestome {
    db: Db,
}

const STRENGTH: &str =
    "from_executor, from_field, to_executor, to_arg, weight, uses, successes, last_used";

fn strength_from_row(row: &Row) -> Result<Strength, sqlx::Error> {
    Ok(Strength {
        passage: Passage {
            from_executor: row.get("from_executor")?,
            from_field: row.get("from_field")?,
            to_executor: row.get("to_executor")?,
            to_arg: row.get("to_arg")?,
        },
        weight: row.get("weight")?,
        uses: u64::try_from(row.get::<i64, _>("uses")?).unwrap_or(0),
        successes: u64::try_from(row.get::<i64, _>("successes")?).unwrap_or(0),
        last_used: row.get("last_used")?,
    })
}

fn proto_from_row(row: &Row) -> Result<Proto, sqlx::Error> {
    let names: String = row.get("arg_names")?;
    Ok(Proto {
        from_executor: row.get("from_executor")?,
        wanted: row.get("wanted")?,
        arg_names: names
            .split(',')
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect(),
        weight: row.get("weight")?,
        uses: u64::try_from(row.get::<i64, _>("uses")?).unwrap_or(0),
        first_seen: row.get("first_seen")?,
        last_used: row.get("last_used")?,
    })
}

impl Mnestome {
    pub fn new(db: Db) -> Mnestome {
        Mnestome { db }
    }

    /// A step fed by `passages` ran: `ok` when it succeeded. A success creates a passage
    /// (weight 0.2) or strengthens it; a failure weakens only a passage already known (a
    /// failure alone teaches no passage).
    pub async fn learned(
        &self,
        passages: &[Passage],
        ok: bool,
        now_ms: i64,
    ) -> Result<(), sqlx::Error> {
        let success = format!(
            "INSERT INTO passages ({STRENGTH}) VALUES ($1, $2, $3, $4, {LEARN_RATE}, 1, 1, $5) \
             ON CONFLICT (from_executor, from_field, to_executor, to_arg) DO UPDATE SET \
             weight = passages.weight + {LEARN_RATE} * (1 - passages.weight), \
             uses = passages.uses + 1, successes = passages.successes + 1, \
             last_used = excluded.last_used"
        );
        let failure = format!(
            "UPDATE passages SET weight = weight * {FAILURE_KEEPS}, uses = uses + 1, \
             last_used = $5 WHERE from_executor = $1 AND from_field = $2 \
             AND to_executor = $3 AND to_arg = $4"
        );
        for p in passages {
            let sql = if ok { &success } else { &failure };
            let statement = Statement::new(sqlx::AssertSqlSafe(sql.clone()))
                .bind(p.from_executor.clone())
                .bind(p.from_field.clone())
                .bind(p.to_executor.clone())
                .bind(p.to_arg.clone())
                .bind(now_ms);
            self.db.execute(statement).await?;
        }
        Ok(())
    }

    /// The model asked for `wanted`, which does not exist, with data from
    /// `from_executor`'s output in arguments named `arg_names`: the proto's uses so far.
    pub async fn proto(
        &self,
        from_executor: &str,
        wanted: &str,
        arg_names: &[String],
        now_ms: i64,
    ) -> Result<u64, sqlx::Error> {
        let mut names: Vec<&str> = arg_names
            .iter()
            .map(String::as_str)
            .filter(|n| keepable(n))
            .collect();
        names.sort_unstable();
        names.dedup();
        names.truncate(MAX_PROTO_ARGS);
        let statement = Statement::new(sqlx::AssertSqlSafe(format!(
            "INSERT INTO protos (from_executor, wanted, arg_names, weight, uses, first_seen, \
             last_used) VALUES ($1, $2, $3, {LEARN_RATE}, 1, $4, $4) \
             ON CONFLICT (from_executor, wanted, arg_names) DO UPDATE SET \
             weight = protos.weight + {LEARN_RATE} * (1 - protos.weight), \
             uses = protos.uses + 1, last_used = excluded.last_used RETURNING uses"
        )))
        .bind(from_executor.to_owned())
        .bind(wanted.to_owned())
        .bind(names.join(","))
        .bind(now_ms);
        let _writing = self.db.writing().await;
        let rows = self.db.fetch_all(statement).await?;
        let uses: i64 = rows.first().map(|r| r.get(0)).transpose()?.unwrap_or(0);
        Ok(u64::try_from(uses).unwrap_or(0))
    }

    /// Every passage of at least `min_weight`, strongest first.
    pub async fn strong(&self, min_weight: f64) -> Result<Vec<Strength>, sqlx::Error> {
        let statement = Statement::new(sqlx::AssertSqlSafe(format!(
            "SELECT {STRENGTH} FROM passages WHERE weight >= $1 \
             ORDER BY weight DESC, from_executor, from_field, to_executor, to_arg"
        )))
        .bind(min_weight);
        self.db
            .fetch_all(statement)
            .await?
            .iter()
            .map(strength_from_row)
            .collect()
    }

    /// The passages of at least `min_weight` reachable from `from` in at most `hops`
    /// (a query per hop, on the key's first column; at most [`MAX_FRONTIER`] executors
    /// asked at each).
    pub async fn reachable(
        &self,
        from: &str,
        hops: usize,
        min_weight: f64,
    ) -> Result<Vec<Strength>, sqlx::Error> {
        let mut seen: std::collections::BTreeSet<String> = [from.to_owned()].into();
        let mut frontier = vec![from.to_owned()];
        let mut out = Vec::new();
        for _ in 0..hops {
            if frontier.is_empty() {
                break;
            }
            frontier.truncate(MAX_FRONTIER);
            let places: Vec<String> = (0..frontier.len()).map(|i| format!("${}", i + 2)).collect();
            let sql = format!(
                "SELECT {STRENGTH} FROM passages WHERE weight >= $1 AND from_executor IN ({}) \
                 ORDER BY weight DESC, to_executor",
                places.join(", ")
            );
            let mut statement = Statement::new(sqlx::AssertSqlSafe(sql)).bind(min_weight);
            for name in frontier.drain(..) {
                statement = statement.bind(name);
            }
            for row in self.db.fetch_all(statement).await? {
                let strength = strength_from_row(&row)?;
                if seen.insert(strength.passage.to_executor.clone()) {
                    frontier.push(strength.passage.to_executor.clone());
                }
                out.push(strength);
            }
        }
        Ok(out)
    }

    /// The `limit` strongest passages (all of them when `None`).
    pub async fn list(&self, limit: Option<u32>) -> Result<Vec<Strength>, sqlx::Error> {
        let mut all = self.strong(0.0).await?;
        if let Some(limit) = limit {
            all.truncate(limit as usize);
        }
        Ok(all)
    }

    /// The `limit` strongest passages naming `executor` at either end (every passage when
    /// it is empty), and how many there are in all; the same for protos (the wish or the
    /// executor it was fed from), most used first. Filtered and cut by the store.
    pub async fn naming(
        &self,
        executor: &str,
        limit: u32,
    ) -> Result<(Vec<Strength>, u64, Vec<Proto>), sqlx::Error> {
        let passages = Statement::new(sqlx::AssertSqlSafe(format!(
            "SELECT {STRENGTH} FROM passages \
             WHERE $1 = '' OR from_executor = $1 OR to_executor = $1 \
             ORDER BY weight DESC, from_executor, from_field, to_executor, to_arg LIMIT $2"
        )))
        .bind(executor.to_owned())
        .bind(i64::from(limit));
        let count = Statement::new(
            "SELECT COUNT(*) FROM passages WHERE $1 = '' OR from_executor = $1 OR to_executor = $1",
        )
        .bind(executor.to_owned());
        let protos = Statement::new(
            "SELECT from_executor, wanted, arg_names, weight, uses, first_seen, last_used \
             FROM protos WHERE $1 = '' OR from_executor = $1 OR wanted = $1 \
             ORDER BY uses DESC, from_executor, wanted, arg_names LIMIT $2",
        )
        .bind(executor.to_owned())
        .bind(i64::from(limit));
        let passages = self.db.fetch_all(passages).await?;
        let total: i64 = match self.db.fetch_optional(count).await? {
            Some(row) => row.get(0)?,
            None => 0,
        };
        let protos = self.db.fetch_all(protos).await?;
        Ok((
            passages
                .iter()
                .map(strength_from_row)
                .collect::<Result<_, _>>()?,
            u64::try_from(total).unwrap_or(0),
            protos
                .iter()
                .map(proto_from_row)
                .collect::<Result<_, _>>()?,
        ))
    }

    /// Every proto, most used first.
    pub async fn protos(&self) -> Result<Vec<Proto>, sqlx::Error> {
        let statement = Statement::new(
            "SELECT from_executor, wanted, arg_names, weight, uses, first_seen, last_used FROM protos \
             ORDER BY uses DESC, from_executor, wanted, arg_names",
        );
        self.db
            .fetch_all(statement)
            .await?
            .iter()
            .map(proto_from_row)
            .collect()
    }

    /// Forgets every passage, proto and shortcut that names `executor` (anywhere): how
    /// many.
    pub async fn forget(&self, executor: &str) -> Result<u64, sqlx::Error> {
        let passages =
            Statement::new("DELETE FROM passages WHERE from_executor = $1 OR to_executor = $1")
                .bind(executor.to_owned());
        let protos = Statement::new("DELETE FROM protos WHERE from_executor = $1 OR wanted = $1")
            .bind(executor.to_owned());
        let mut n = self.db.execute(passages).await? + self.db.execute(protos).await?;
        // A chain is a list in one column: matched here, not by LIKE (`_` is its wildcard);
        // every shortcut, not only the newest a turn reads.
        for shortcut in self.shortcuts_up_to(i64::MAX).await? {
            if shortcut.name == executor || shortcut.executors().any(|e| e == executor) {
                let gone =
                    Statement::new("DELETE FROM shortcuts WHERE name = $1 AND from_executor = $2")
                        .bind(shortcut.name)
                        .bind(shortcut.from_executor);
                n += self.db.execute(gone).await?;
            }
        }
        Ok(n)
    }

    /// Keeps `shortcut` (the owner accepted it); a later one for the same wish and first
    /// executor replaces it. Its names must be keepable, the chain one to three long.
    pub async fn keep_shortcut(&self, shortcut: &Shortcut) -> Result<bool, sqlx::Error> {
        let names_ok = keepable(&shortcut.name)
            && shortcut.executors().all(keepable)
            && (1..=3).contains(&shortcut.chain.len());
        if !names_ok {
            return Ok(false);
        }
        let statement = Statement::new(
            "INSERT INTO shortcuts (name, from_executor, chain, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (name, from_executor) DO UPDATE SET chain = excluded.chain, \
             created_at = excluded.created_at",
        )
        .bind(shortcut.name.clone())
        .bind(shortcut.from_executor.clone())
        .bind(shortcut.chain.join(","))
        .bind(shortcut.created_at);
        self.db.execute(statement).await?;
        Ok(true)
    }

    /// The shortcuts kept, newest first (at most [`MAX_SHORTCUTS`]).
    pub async fn shortcuts(&self) -> Result<Vec<Shortcut>, sqlx::Error> {
        self.shortcuts_up_to(i64::from(MAX_SHORTCUTS)).await
    }

    async fn shortcuts_up_to(&self, limit: i64) -> Result<Vec<Shortcut>, sqlx::Error> {
        let statement = Statement::new(
            "SELECT name, from_executor, chain, created_at FROM shortcuts \
             ORDER BY created_at DESC, name, from_executor LIMIT $1",
        )
        .bind(limit);
        self.db
            .fetch_all(statement)
            .await?
            .iter()
            .map(|row| {
                let chain: String = row.get("chain")?;
                Ok(Shortcut {
                    name: row.get("name")?,
                    from_executor: row.get("from_executor")?,
                    chain: chain
                        .split(',')
                        .filter(|n| !n.is_empty())
                        .map(str::to_owned)
                        .collect(),
                    created_at: row.get("created_at")?,
                })
            })
            .collect()
    }

    /// The daily ager (`apply_ager`): the weight of each passage and proto unused for a day
    /// decays with a 30-day half-life, from its last use or last decay; a passage under
    /// [`DEMOTE_BELOW`] becomes a proto again (its target executor the wish, no uses);
    /// protos first seen over 30 days ago with fewer than 3 uses are removed. One
    /// transaction: a run interrupted changes nothing.
    pub async fn age(&self, now_ms: i64) -> Result<Aged, sqlx::Error> {
        self.db
            .locked_tx("metnos.mnestome", async |tx| {
                // Protos first: a passage demoted below starts its proto's decay now.
                let mut aged = Aged {
                    decayed: age_protos(tx, now_ms).await?,
                    ..Aged::default()
                };
                let idle = Statement::new(
                    "SELECT from_executor, from_field, to_executor, to_arg, weight, uses, \
                     last_used, decayed_at FROM passages WHERE last_used <= $1",
                )
                .bind(now_ms - DAY_MS);
                for row in tx.fetch_all(idle).await? {
                    let since = row.get::<i64, _>("last_used")?.max(row.get("decayed_at")?);
                    let weight = decayed(row.get("weight")?, since, now_ms);
                    let key = |s: Statement| -> Result<Statement, sqlx::Error> {
                        Ok(s.bind(row.get::<String, _>("from_executor")?)
                            .bind(row.get::<String, _>("from_field")?)
                            .bind(row.get::<String, _>("to_executor")?)
                            .bind(row.get::<String, _>("to_arg")?))
                    };
                    // Written only if unchanged since read: a step learning meanwhile (on
                    // PostgreSQL, where learning does not take this lock) wins.
                    let keyed = "from_executor = $1 AND from_field = $2 AND to_executor = $3 \
                                 AND to_arg = $4 AND weight = $5 AND last_used = $6";
                    let (was, last_used) = (
                        row.get::<f64, _>("weight")?,
                        row.get::<i64, _>("last_used")?,
                    );
                    if weight < DEMOTE_BELOW {
                        let gone = format!("DELETE FROM passages WHERE {keyed}");
                        let gone = key(Statement::new(sqlx::AssertSqlSafe(gone)))?
                            .bind(was)
                            .bind(last_used);
                        if tx.execute(gone).await? == 1 {
                            let proto = Statement::new(
                                "INSERT INTO protos (from_executor, wanted, arg_names, weight, \
                                 uses, first_seen, last_used, decayed_at) \
                                 VALUES ($1, $3, $4, $5, 0, $6, $7, $6) \
                                 ON CONFLICT (from_executor, wanted, arg_names) DO NOTHING",
                            );
                            let proto = key(proto)?.bind(weight).bind(now_ms).bind(last_used);
                            tx.execute(proto).await?;
                            aged.demoted += 1;
                        }
                    } else {
                        let update = format!(
                            "UPDATE passages SET weight = $7, decayed_at = $8 WHERE {keyed}"
                        );
                        let update = key(Statement::new(sqlx::AssertSqlSafe(update)))?
                            .bind(was)
                            .bind(last_used)
                            .bind(weight)
                            .bind(now_ms);
                        aged.decayed += tx.execute(update).await?;
                    }
                }
                let purge =
                    Statement::new("DELETE FROM protos WHERE first_seen < $1 AND uses < $2")
                        .bind(now_ms - PROTO_KEEP_MS)
                        .bind(PROTO_KEEP_USES as i64);
                aged.purged = tx.execute(purge).await?;
                Ok::<_, sqlx::Error>(Finish::Commit(aged))
            })
            .await
    }
}

/// The protos' share of the ager: each unused for a day decays. How many.
async fn age_protos(tx: &mut Tx, now_ms: i64) -> Result<u64, sqlx::Error> {
    let idle = Statement::new(
        "SELECT from_executor, wanted, arg_names, weight, last_used, decayed_at FROM protos \
         WHERE last_used <= $1",
    )
    .bind(now_ms - DAY_MS);
    let mut n = 0;
    for row in tx.fetch_all(idle).await? {
        let since = row.get::<i64, _>("last_used")?.max(row.get("decayed_at")?);
        let update = Statement::new(
            "UPDATE protos SET weight = $4, decayed_at = $5 WHERE from_executor = $1 \
             AND wanted = $2 AND arg_names = $3 AND weight = $6 AND last_used = $7",
        )
        .bind(row.get::<String, _>("from_executor")?)
        .bind(row.get::<String, _>("wanted")?)
        .bind(row.get::<String, _>("arg_names")?)
        .bind(decayed(row.get("weight")?, since, now_ms))
        .bind(now_ms)
        .bind(row.get::<f64, _>("weight")?)
        .bind(row.get::<i64, _>("last_used")?);
        n += tx.execute(update).await?;
    }
    Ok(n)
}
