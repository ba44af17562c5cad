//! Paths as the loop compares and shows them: the duplicate-read guard's key (links
//! followed), a path spelled from the person's home.

use std::path::Path;

use metnos_executors::Catalog;
use serde_json::Value;

use crate::turn::rules;

/// The duplicate-read guard's key of `target` for `executor`: a URL without its fragment,
/// a path resolved (links followed) from the person's home.
pub(crate) fn guard_key(user_home: &Path, executor: &str, target: &str) -> String {
    use metnos_executors::scope::{expand_home, normalize, resolve};
    if target.is_empty() {
        return String::new();
    }
    if executor == metnos_core::names::Builtin::WebFetch.name() {
        return url::Url::parse(target).map_or_else(
            |_| target.to_owned(),
            |mut url| {
                url.set_fragment(None);
                url.to_string()
            },
        );
    }
    let lexical = normalize(&expand_home(target, user_home));
    resolve(&lexical)
        .unwrap_or(lexical)
        .to_string_lossy()
        .into_owned()
}

/// The guard's key of a call about to run, from its executor's target argument.
pub(crate) fn guard_key_of(
    catalog: &Catalog,
    user_home: &Path,
    executor: &str,
    args: &Value,
) -> Option<String> {
    let target = catalog
        .get(executor)?
        .manifest
        .target_arg
        .as_deref()
        .and_then(|k| args.get(k))
        .and_then(Value::as_str)?;
    rules::is_duplicate_guarded(executor, target).then(|| guard_key(user_home, executor, target))
}

/// `path` spelled from the person's home (`~/Documents/x`), as a card shows it.
pub(crate) fn from_home(path: &str, home: &Path) -> String {
    let home = home.to_string_lossy();
    let home = home.trim_end_matches('/');
    if home.is_empty() {
        return path.to_owned();
    }
    if path == home {
        "~".to_owned()
    } else if let Some(rest) = path.strip_prefix(home).and_then(|r| r.strip_prefix('/')) {
        format!("~/{rest}")
    } else {
        path.to_owned()
    }
}
