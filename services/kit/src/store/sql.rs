//! One statement for either backend, and the locked transaction ([`Db::locked_tx`]) that
//! decides and writes on a store shared by replicas.
//!
//! A [`Statement`] carries its SQL (`$n` placeholders suit both backends) and its arguments
//! encoded for both; it runs on a [`Db`] or inside a [`Tx`], and its rows come back as
//! [`Row`]s read by column with one typed call. Code that needs the same queries on SQLite
//! and PostgreSQL writes them once this way instead of once per pool.

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Arguments, ColumnIndex, Decode, Encode, Postgres, SqlStr, Sqlite, Transaction, Type};

use super::{Db, Pool};

/// A value both backends encode and decode the same way (`i64`, `f64`, `bool`, text,
/// their `Option`s).
pub trait Value:
    for<'q> Encode<'q, Sqlite> + Type<Sqlite> + for<'q> Encode<'q, Postgres> + Type<Postgres> + Clone
{
}

impl<T> Value for T where
    T: for<'q> Encode<'q, Sqlite>
        + Type<Sqlite>
        + for<'q> Encode<'q, Postgres>
        + Type<Postgres>
        + Clone
{
}

/// A statement and its arguments, for whichever backend runs it.
#[derive(Debug)]
pub struct Statement {
    sql: SqlStr,
    sqlite: SqliteArguments,
    postgres: PgArguments,
    /// The first value that failed to encode, said when the statement runs.
    unencoded: Option<sqlx::error::BoxDynError>,
}

impl Statement {
    /// A statement of fixed SQL.
    pub fn new(sql: impl sqlx::SqlSafeStr) -> Statement {
        Statement {
            sql: sql.into_sql_str(),
            sqlite: SqliteArguments::default(),
            postgres: PgArguments::default(),
            unencoded: None,
        }
    }

    /// Binds the next `$n`. A value that fails to encode fails the statement when it runs.
    pub fn bind<T: Value>(mut self, value: T) -> Statement {
        let added = self
            .sqlite
            .add(value.clone())
            .and_then(|()| self.postgres.add(value));
        if let Err(e) = added
            && self.unencoded.is_none()
        {
            self.unencoded = Some(e);
        }
        self
    }

    fn for_sqlite(self) -> Result<Query<'static, Sqlite, SqliteArguments>, sqlx::Error> {
        match self.unencoded {
            Some(e) => Err(sqlx::Error::Encode(e)),
            None => Ok(sqlx::query_with(self.sql, self.sqlite)),
        }
    }

    fn for_postgres(self) -> Result<Query<'static, Postgres, PgArguments>, sqlx::Error> {
        match self.unencoded {
            Some(e) => Err(sqlx::Error::Encode(e)),
            None => Ok(sqlx::query_with(self.sql, self.postgres)),
        }
    }
}

/// A row of either backend.
#[derive(Debug)]
pub enum Row {
    Sqlite(SqliteRow),
    Postgres(PgRow),
}

impl Row {
    /// The column at `index` (a position or a name).
    pub fn get<T, I>(&self, index: I) -> Result<T, sqlx::Error>
    where
        T: for<'r> Decode<'r, Sqlite>
            + Type<Sqlite>
            + for<'r> Decode<'r, Postgres>
            + Type<Postgres>,
        I: ColumnIndex<SqliteRow> + ColumnIndex<PgRow>,
    {
        use sqlx::Row as _;
        match self {
            Row::Sqlite(row) => row.try_get(index),
            Row::Postgres(row) => row.try_get(index),
        }
    }
}

/// A transaction on either backend; see [`Db::locked_tx`].
#[derive(Debug)]
pub enum Tx {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

impl Tx {
    /// Also holds `key` until this transaction ends, as [`Db::locked_tx`] holds its own
    /// (a PostgreSQL advisory lock; SQLite's `BEGIN IMMEDIATE` holds the whole store).
    pub async fn lock(&mut self, key: &str) -> Result<(), sqlx::Error> {
        if let Tx::Postgres(tx) = self {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(key)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Runs `statement`; the number of rows it changed.
    pub async fn execute(&mut self, statement: Statement) -> Result<u64, sqlx::Error> {
        Ok(match self {
            Tx::Sqlite(tx) => statement
                .for_sqlite()?
                .execute(&mut **tx)
                .await?
                .rows_affected(),
            Tx::Postgres(tx) => statement
                .for_postgres()?
                .execute(&mut **tx)
                .await?
                .rows_affected(),
        })
    }

    /// The rows `statement` returns.
    pub async fn fetch_all(&mut self, statement: Statement) -> Result<Vec<Row>, sqlx::Error> {
        Ok(match self {
            Tx::Sqlite(tx) => rows(
                statement.for_sqlite()?.fetch_all(&mut **tx).await?,
                Row::Sqlite,
            ),
            Tx::Postgres(tx) => rows(
                statement.for_postgres()?.fetch_all(&mut **tx).await?,
                Row::Postgres,
            ),
        })
    }

    /// The first row `statement` returns, if any.
    pub async fn fetch_optional(
        &mut self,
        statement: Statement,
    ) -> Result<Option<Row>, sqlx::Error> {
        Ok(match self {
            Tx::Sqlite(tx) => statement
                .for_sqlite()?
                .fetch_optional(&mut **tx)
                .await?
                .map(Row::Sqlite),
            Tx::Postgres(tx) => statement
                .for_postgres()?
                .fetch_optional(&mut **tx)
                .await?
                .map(Row::Postgres),
        })
    }

    /// The one row `statement` returns (an error when there is none).
    pub async fn fetch_one(&mut self, statement: Statement) -> Result<Row, sqlx::Error> {
        self.fetch_optional(statement)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }

    async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(tx) => tx.commit().await,
            Tx::Postgres(tx) => tx.commit().await,
        }
    }

    async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(tx) => tx.rollback().await,
            Tx::Postgres(tx) => tx.rollback().await,
        }
    }
}

fn rows<R>(found: Vec<R>, wrap: fn(R) -> Row) -> Vec<Row> {
    found.into_iter().map(wrap).collect()
}

/// How the work of a [`Db::locked_tx`] ends its transaction, with what it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish<T> {
    /// Keep what it wrote.
    Commit(T),
    /// Write nothing (a dry run, a quota taken meanwhile, a duplicate).
    Rollback(T),
}

/// The column of the row that ends a [`Db::sqlite_tx_at_once`] batch.
const COMMITTED: &str = "metnos_committed";

/// A SQLite connection that, unless the work on it finished, is closed instead of going
/// back to the pool: SQLite rolls back what it had not committed.
struct Closing(sqlx::pool::PoolConnection<Sqlite>, bool);

impl Drop for Closing {
    fn drop(&mut self) {
        if !self.1 {
            self.0.close_on_drop();
        }
    }
}

impl Db {
    /// Runs `statement` — several `;`-separated statements — as one `BEGIN IMMEDIATE`
    /// transaction in one round trip to a SQLite connection, and returns their rows (those
    /// of `RETURNING` clauses). A small write on SQLite costs mostly its round trips to the
    /// connection's worker thread, three for a [`Db::locked_tx`]; this pays one. All or
    /// nothing: a statement that fails, or a caller that stops waiting, leaves the
    /// transaction uncommitted, and its connection is closed rather than reused (SQLite
    /// rolls back). On PostgreSQL it is refused: use [`Db::locked_tx`].
    pub async fn sqlite_tx_at_once(&self, statement: Statement) -> Result<Vec<Row>, sqlx::Error> {
        let Pool::Sqlite(pool) = self.pool() else {
            return Err(sqlx::Error::Configuration(
                "a transaction in one round trip is SQLite's alone".into(),
            ));
        };
        // The last row says the COMMIT ran: a batch cut short (its worker gone) ends its
        // stream as one that finished would.
        let sql = format!(
            "BEGIN IMMEDIATE; {}; COMMIT; SELECT 'committed' AS {COMMITTED}",
            statement.sql.as_str()
        );
        let statement = Statement {
            sql: sqlx::SqlSafeStr::into_sql_str(sqlx::AssertSqlSafe(sql)),
            ..statement
        };
        let query = statement.for_sqlite()?;
        let _writing = self.writing().await;
        let mut conn = Closing(pool.acquire().await?, false);
        let mut found = query.fetch_all(&mut *conn.0).await?;
        let committed = found.pop().filter(|row| {
            use sqlx::Row as _;
            row.try_get::<String, _>(COMMITTED)
                .is_ok_and(|c| c == "committed")
        });
        if committed.is_none() {
            return Err(sqlx::Error::Protocol(
                "the transaction's batch stopped before its end".into(),
            ));
        }
        conn.1 = true;
        Ok(rows(found, Row::Sqlite))
    }

    /// Runs `work` in one transaction that holds `key` against every other holder of it,
    /// in this process or a replica: `BEGIN IMMEDIATE` on SQLite (the whole file, one
    /// writer at a time), a transaction-scoped advisory lock on `hashtext(key)` on
    /// PostgreSQL. The transaction ends as `work` says; an error rolls it back. Name the
    /// key for Metnos and what it guards, so another user of the database is not held.
    pub async fn locked_tx<T, E>(
        &self,
        key: &str,
        work: impl AsyncFnOnce(&mut Tx) -> Result<Finish<T>, E>,
    ) -> Result<T, E>
    where
        E: From<sqlx::Error>,
    {
        // Held until the transaction ends (SQLite; nothing on PostgreSQL).
        let _writing = self.writing().await;
        let mut tx = match self.pool() {
            Pool::Sqlite(pool) => Tx::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?),
            Pool::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                    .bind(key)
                    .execute(&mut *tx)
                    .await?;
                Tx::Postgres(tx)
            }
        };
        match work(&mut tx).await? {
            Finish::Commit(value) => {
                tx.commit().await?;
                Ok(value)
            }
            Finish::Rollback(value) => {
                tx.rollback().await?;
                Ok(value)
            }
        }
    }

    /// Runs `statement` on the pool; the number of rows it changed.
    pub async fn execute(&self, statement: Statement) -> Result<u64, sqlx::Error> {
        let _writing = self.writing().await;
        Ok(match self.pool() {
            Pool::Sqlite(pool) => statement.for_sqlite()?.execute(pool).await?.rows_affected(),
            Pool::Postgres(pool) => statement
                .for_postgres()?
                .execute(pool)
                .await?
                .rows_affected(),
        })
    }

    /// The rows `statement` returns.
    pub async fn fetch_all(&self, statement: Statement) -> Result<Vec<Row>, sqlx::Error> {
        Ok(match self.pool() {
            Pool::Sqlite(pool) => rows(statement.for_sqlite()?.fetch_all(pool).await?, Row::Sqlite),
            Pool::Postgres(pool) => rows(
                statement.for_postgres()?.fetch_all(pool).await?,
                Row::Postgres,
            ),
        })
    }

    /// The first row `statement` returns, if any.
    pub async fn fetch_optional(&self, statement: Statement) -> Result<Option<Row>, sqlx::Error> {
        Ok(match self.pool() {
            Pool::Sqlite(pool) => statement
                .for_sqlite()?
                .fetch_optional(pool)
                .await?
                .map(Row::Sqlite),
            Pool::Postgres(pool) => statement
                .for_postgres()?
                .fetch_optional(pool)
                .await?
                .map(Row::Postgres),
        })
    }
}
