//! Where a service keeps its relational store, parsed from its `store` key, and URLs made
//! safe to print.

use std::path::{Path, PathBuf};

use super::ServiceName;

/// Where a service keeps its relational store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// A SQLite file (WAL mode).
    Sqlite { path: PathBuf },
    /// A PostgreSQL database.
    Postgres { url: String },
}

impl StoreSpec {
    /// Parses a `store` value: `sqlite`, `sqlite:<path>` (relative paths are under the
    /// data directory) or `postgres://…` / `postgresql://…`.
    pub fn parse(value: &str, data_dir: &Path, service: ServiceName) -> Result<StoreSpec, String> {
        let value = value.trim();
        if value.is_empty() || value == "sqlite" {
            return Ok(StoreSpec::Sqlite {
                path: data_dir.join(format!("{service}.db")),
            });
        }
        if let Some(path) = value.strip_prefix("sqlite:") {
            let path = path.trim_start_matches("//");
            if path.is_empty() {
                return Err(
                    "sqlite: needs a file path, e.g. sqlite:/var/lib/metnos/policy.db".to_owned(),
                );
            }
            let path = Path::new(path);
            let path = if path.is_absolute() {
                path.to_path_buf()
            } else {
                data_dir.join(path)
            };
            return Ok(StoreSpec::Sqlite { path });
        }
        if value.starts_with("postgres://") || value.starts_with("postgresql://") {
            let parsed: Result<sqlx::postgres::PgConnectOptions, _> = value.parse();
            if let Err(e) = parsed {
                return Err(format!(
                    "not a valid PostgreSQL URL ({}): {}",
                    first_line(&e.to_string()),
                    redact_url(value)
                ));
            }
            return Ok(StoreSpec::Postgres {
                url: value.to_owned(),
            });
        }
        Err(format!(
            "must be `sqlite`, `sqlite:<path>` or a postgres:// URL, got {}",
            redact_url(value)
        ))
    }

    /// Printable description with any password removed.
    pub fn describe(&self) -> String {
        match self {
            StoreSpec::Sqlite { path } => format!("sqlite:{}", path.display()),
            StoreSpec::Postgres { url } => redact_url(url),
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// A URL with its password (if any) replaced by `***`, safe to log.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let user = userinfo.split(':').next().unwrap_or_default();
    if userinfo.contains(':') {
        format!("{scheme}://{user}:***@{host}{tail}")
    } else {
        format!("{scheme}://{user}@{host}{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_env::{load_err, with_env};

    #[test]
    fn bad_store_values_are_refused_with_the_password_hidden() {
        with_env(&[("METNOS_APPROVAL__STORE", "mysql://u:pw@h/db")], |jail| {
            let err = load_err();
            assert!(err.contains("`approval.store`"), "{err}");
            assert!(!err.contains("pw"), "{err}");
            jail.set_env("METNOS_APPROVAL__STORE", "postgres://u:pw@h:notaport/db");
            let err = load_err();
            assert!(err.contains("not a valid PostgreSQL URL"), "{err}");
            assert!(!err.contains(":pw@"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn redaction_hides_only_the_password() {
        assert_eq!(
            redact_url("postgres://u:p@h:1/d?x=1"),
            "postgres://u:***@h:1/d?x=1"
        );
        assert_eq!(redact_url("postgres://u@h/d"), "postgres://u@h/d");
        assert_eq!(redact_url("postgres://h/d"), "postgres://h/d");
    }
}
