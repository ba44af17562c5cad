//! What a step teaches the mnestome (issue 46): the passages its arguments were fed by — a
//! `{{stepN.field}}` reference, or the copy rule finding an earlier step's output in what
//! the model wrote — learned once the step ran, stronger when it succeeded, weaker when it
//! failed. A refused step never gets here. Learning never stops a turn: an error is logged.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::store::mnestome::{Mnestome, Passage, keepable};
use crate::turn::{Checkpoint, piping, taint};

/// The field a reference to step `n` names, as a passage keeps it: `content`, `ok`,
/// `error`, a metadata field (`metadata.status`, also for a bare `{{stepN.status}}` that
/// the executor's metadata answers), else `content`: a deeper path, or a bare name found
/// in the content, names the world's keys, which are never kept.
fn field_of(cp: &Checkpoint, n: u32, path: &[String]) -> String {
    let metadata_has = |key: &str| {
        n.checked_sub(1)
            .and_then(|i| cp.observations.get(i as usize))
            .and_then(|o| o.get("metadata"))
            .is_some_and(|m| m.get(key).is_some())
    };
    match path {
        [] => "observation".to_owned(),
        [first, second, ..] if first == "metadata" => format!("metadata.{second}"),
        [first, ..] if matches!(first.as_str(), "ok" | "error" | "content") => first.clone(),
        [first, ..] if metadata_has(first) => format!("metadata.{first}"),
        _ => "content".to_owned(),
    }
}

/// The executor step `n` ran, when it ran and succeeded.
pub(crate) fn executor_of(cp: &Checkpoint, n: u32) -> Option<&str> {
    cp.steps
        .iter()
        .find(|s| s.step == n && s.ok)
        .map(|s| s.executor.as_str())
        .filter(|name| *name != "?" && keepable(name))
}

/// The passages feeding `to_executor`'s call `args` (as the model wrote them, references
/// unresolved): one per argument its schema names (`known_keys`) and earlier step it was
/// made of.
pub(crate) fn fed(
    cp: &Checkpoint,
    args: &Value,
    to_executor: &str,
    known_keys: &[String],
) -> Vec<Passage> {
    let Some(map) = args.as_object() else {
        return Vec::new();
    };
    if !keepable(to_executor) {
        return Vec::new();
    }
    let mut out: BTreeSet<Passage> = BTreeSet::new();
    for (key, value) in map {
        if !known_keys.contains(key) || !keepable(key) {
            continue;
        }
        let mut referenced = BTreeSet::new();
        for reference in piping::references(value) {
            referenced.insert(reference.step);
            let field = field_of(cp, reference.step, &reference.path);
            if let (Some(from), true) = (executor_of(cp, reference.step), keepable(&field)) {
                out.insert(passage(from, &field, to_executor, key));
            }
        }
        for step in copied_steps(cp, value).difference(&referenced) {
            if let Some(from) = executor_of(cp, *step) {
                out.insert(passage(from, "*", to_executor, key));
            }
        }
    }
    out.into_iter().collect()
}

/// The steps whose output the copy rule finds in `value` (its keys too).
pub(crate) fn copied_steps(cp: &Checkpoint, value: &Value) -> BTreeSet<u32> {
    let mut leaves = Vec::new();
    taint::written(value, &mut leaves);
    let mut copied = BTreeSet::new();
    for leaf in leaves {
        cp.index.copied(leaf, &cp.query, &mut copied);
    }
    copied
}

fn passage(from: &str, field: &str, to: &str, arg: &str) -> Passage {
    Passage {
        from_executor: from.to_owned(),
        from_field: field.to_owned(),
        to_executor: to.to_owned(),
        to_arg: arg.to_owned(),
    }
}

/// Learns `passages` from a step that ran (`ok`: it succeeded); an error is logged.
pub(crate) async fn learn(mnestome: &Mnestome, passages: &[Passage], ok: bool) {
    if passages.is_empty() {
        return;
    }
    let now = metnos_kit::time::now_ms();
    if let Err(e) = mnestome.learned(passages, ok, now).await {
        tracing::warn!(error = %e, passages = passages.len(), "the mnestome could not learn this step's passages; the turn goes on");
    }
}
