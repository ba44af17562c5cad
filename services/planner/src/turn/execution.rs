//! A step's observation: what the LLM is shown (a large one as a scratchpad summary), what
//! `{{stepN…}}` references get, the step's log completed, the person's stream told, and a
//! failure counted (a hybrid turn escalates after enough of them).

use std::time::Instant;

use metnos_core::names::Builtin;
use metnos_executors::Observation;
use metnos_llm::Tier;
use metnos_proto::planner::v1 as pb;
use serde_json::{Value, json};

use metnos_executors::{Catalog, Executor, Runner};
use metnos_kit::config::TurnsConfig;
use tokio::sync::watch;
use tracing::Instrument;

use crate::llm::{LlmSlot, tier_used};
use crate::store::Store;
use crate::store::mnestome::Mnestome;
use crate::turn::flow::{Sink, emit, refusal};
use crate::turn::passages;
use crate::turn::paths;
use crate::turn::record::Records;
use crate::turn::rules;
use crate::turn::running::cancelled;
use crate::turn::scratch;
use crate::turn::taint;
use crate::turn::vetting::Cleared;
use crate::turn::{Call, Checkpoint, Hist, StepLog};

/// An observation as the LLM sees it and as piping keeps it.
struct Shown {
    shown: Value,
    piped: Value,
    scratchpad_id: Option<String>,
}

/// Running a cleared call and completing its step: the observation shown to the LLM (a
/// large one through the scratchpad), kept for piping, labelled, and told to the stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Execution<'a> {
    config: &'a TurnsConfig,
    catalog: &'a Catalog,
    runner: &'a Runner,
    store: &'a Store,
    llm: &'a LlmSlot,
    records: Records<'a>,
}

impl<'a> Execution<'a> {
    pub(crate) fn new(
        config: &'a TurnsConfig,
        catalog: &'a Catalog,
        runner: &'a Runner,
        store: &'a Store,
        llm: &'a LlmSlot,
        records: Records<'a>,
    ) -> Execution<'a> {
        Execution {
            config,
            catalog,
            runner,
            store,
            llm,
            records,
        }
    }

    /// Runs the signed executor, unless the turn is cancelled first. `named_writes`: the
    /// resolved paths that run code later which the person named and approved.
    pub(crate) async fn execute(
        &self,
        turn_id: &str,
        executor: &Executor,
        args: &Value,
        named_writes: &[std::path::PathBuf],
        cancel: &mut watch::Receiver<bool>,
    ) -> Observation {
        let span = tracing::info_span!("executor", executor = %executor.name());
        let run = self
            .runner
            .run_naming(self.catalog, executor, args, named_writes)
            .instrument(span);
        tokio::select! {
            observation = run => observation,
            () = cancelled(self.store, turn_id, cancel) => Observation::failure("cancelled before the executor finished"),
        }
    }

    /// Runs a cleared call; the mnestome learns the passages that fed it (the arguments
    /// its schema names, as the step's log keeps them) from how it went (issue 46).
    pub(crate) async fn run_learning(
        &self,
        cp: &Checkpoint,
        call: &Call,
        cleared: &Cleared,
        log: &StepLog,
        cancel: &mut watch::Receiver<bool>,
    ) -> Observation {
        let keys = log.known_keys.as_deref().unwrap_or_default();
        let fed = passages::fed(cp, &call.arguments, &call.name, keys);
        let observation = self
            .execute(&cp.turn_id, &cleared.executor, &cleared.args, &[], cancel)
            .await;
        // A run the person's stop cut short says nothing of how the passage does.
        if !*cancel.borrow() {
            let mnestome = Mnestome::new(self.store.db().clone());
            passages::learn(&mnestome, &fed, observation.ok).await;
        }
        observation
    }

    /// The duplicate-read guard learns a target once a call on it succeeded (a failed
    /// read, a timed-out fetch or a refused write may be tried again).
    pub(crate) fn note_seen(
        &self,
        cp: &mut Checkpoint,
        executor: &str,
        args: &Value,
        step: u32,
        observation: &Observation,
    ) {
        if !observation.ok {
            return;
        }
        if let Some(key) = paths::guard_key_of(self.catalog, &self.runner.user_home, executor, args)
        {
            cp.seen_targets.push((executor.to_owned(), key, step));
        }
    }

    /// `scratchpad_read` of this turn's own pages.
    pub(crate) async fn read_scratch(
        &self,
        cp: &Checkpoint,
        call: &Call,
    ) -> (Observation, Vec<String>) {
        if cp.scratch_ids.is_empty() {
            return (refusal("the scratchpad is empty in this turn"), Vec::new());
        }
        let observation = scratch::read(self.store, &cp.turn_id, &call.arguments).await;
        let labels = self.labels_for(cp, call, &call.arguments, &observation);
        (observation, labels)
    }

    /// What the LLM sees of an observation of step `n`, and what piping keeps of it: a
    /// large one goes to the scratchpad and both become its id and summary.
    /// A `scratchpad_read` answer is never stored again: it is already bounded
    /// ([`scratch::MAX_READ`] characters), and stored it would come back as another
    /// summary, so the model could never page through a large observation.
    async fn shown(
        &self,
        cp: &mut Checkpoint,
        n: u32,
        observation: &Observation,
        read_back: bool,
    ) -> Shown {
        let value = serde_json::to_value(observation).unwrap_or(Value::Null);
        let size = value.to_string().len() as u64;
        if read_back || size <= self.config.scratchpad_threshold_bytes.get() {
            return Shown {
                shown: value.clone(),
                piped: value,
                scratchpad_id: None,
            };
        }
        match scratch::store(self.store, &cp.turn_id, n, observation, size).await {
            Ok(synthetic) => {
                let id = synthetic["scratchpad_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                cp.scratch_ids.push(id.clone());
                Shown {
                    shown: synthetic,
                    // Piping still gets the whole observation, through the scratchpad.
                    piped: json!({"scratchpad_id": id}),
                    scratchpad_id: Some(id),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "scratchpad unavailable; the observation is cut");
                let text = value.to_string();
                Shown {
                    shown: json!({"ok": observation.ok, "summary": scratch::summary(&text)}),
                    piped: value,
                    scratchpad_id: None,
                }
            }
        }
    }

    /// Records the observation of `log.step` for the LLM and for piping, and tells the
    /// person's stream. `labels` say where it came from (none: the planner's own words, a
    /// refusal); one from the world is shown to the LLM inside the turn's fence.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn observe(
        &self,
        cp: &mut Checkpoint,
        sink: &Sink,
        call: &Call,
        mut log: StepLog,
        observation: Observation,
        mut labels: Vec<String>,
        started: Instant,
    ) {
        // What the call's arguments carried is in what it observed (an executor's answer
        // built from it, a refusal echoing it).
        for carried in &log.tainted {
            for source in &carried.sources {
                if !labels.contains(source) {
                    labels.push(source.clone());
                }
            }
        }
        let n = log.step;
        let Shown {
            mut shown,
            piped,
            scratchpad_id,
        } = self
            .shown(cp, n, &observation, call.name == scratch::TOOL)
            .await;
        if let Value::Object(map) = &mut shown {
            map.insert("step".to_owned(), json!(n));
        }
        while cp.observations.len() < n as usize {
            cp.observations.push(Value::Null);
        }
        cp.observations[n as usize - 1] = piped;
        let content = if taint::untrusted(&labels) {
            let nonce = cp.fence_nonce();
            taint::fence(&nonce, n, &labels, &shown.to_string())
        } else {
            shown.to_string()
        };
        cp.history.push(Hist::Tool {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content,
        });
        log.labels = labels;
        if !observation.ok {
            self.count_failure(cp);
        }
        log.ok = observation.ok;
        let requested = call.arguments.get("url").and_then(Value::as_str);
        log.observed =
            observation.ok || reads_a_file(call) || carries_output(&observation, requested);
        log.duration_ms = started.elapsed().as_millis() as u64;
        log.scratchpad_id = scratchpad_id.clone();
        let summary = match (&observation.error, &observation.content) {
            (Some(error), _) => error.clone(),
            (None, Some(Value::String(text))) => text.chars().take(200).collect(),
            (None, Some(other)) => other.to_string().chars().take(200).collect(),
            (None, None) => String::new(),
        };
        let duration_ms = log.duration_ms;
        cp.steps.push(log.keys_only());
        self.records.show(cp, "running").await;
        let observed = pb::ObservationSummary {
            step: n,
            ok: observation.ok,
            summary,
            scratchpad_id: scratchpad_id.unwrap_or_default(),
            duration_ms,
        };
        emit(sink, pb::turn_event::Event::Observation(observed)).await;
    }

    /// Where the observation of `call` (run with `args`) came from.
    pub(crate) fn labels_for(
        &self,
        cp: &Checkpoint,
        call: &Call,
        args: &Value,
        observation: &Observation,
    ) -> Vec<String> {
        // The planner's own tools (a standing order set up on the person's yes) answer
        // with the planner's data, never the world's.
        if crate::proactive::tools::is_tool(&call.name) {
            return Vec::new();
        }
        // An approved memory repeats its words: they are still where they came from.
        if crate::turn::remember::is_tool(&call.name) {
            return crate::turn::remember::labels_of_saved(args);
        }
        if call.name == scratch::TOOL {
            let id = args.get("id").and_then(Value::as_str).unwrap_or_default();
            // Only this turn's own ids are labels (an id the model made up is its text).
            return match cp
                .steps
                .iter()
                .find(|s| s.scratchpad_id.as_deref() == Some(id))
            {
                Some(origin) => std::iter::once(format!("scratchpad:{id}"))
                    .chain(origin.labels.iter().cloned())
                    .collect(),
                // An unknown page: whatever it holds is the world's.
                None => vec![format!("tool:{}", scratch::TOOL)],
            };
        }
        // An MCP server's answer is its own words, whichever tool gave it.
        if let Some(pin) = self
            .catalog
            .get(&call.name)
            .and_then(|e| e.manifest.mcp.as_ref())
        {
            let label = metnos_core::provenance::Label::Mcp(pin.server.clone());
            return vec![taint::cut_label(label.to_string())];
        }
        let target = self
            .catalog
            .get(&call.name)
            .and_then(|e| e.manifest.target_arg.as_deref())
            .and_then(|k| args.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let builtin = Builtin::of(&call.name);
        let target = match builtin {
            Some(b) if b.reads_files() && !target.is_empty() => paths::from_home(
                &paths::guard_key(&self.runner.user_home, &call.name, target),
                &self.runner.user_home,
            ),
            _ => target.to_owned(),
        };
        let value = serde_json::to_value(observation).unwrap_or(Value::Null);
        let final_url = value
            .get("metadata")
            .and_then(|m| m.get("final_url"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let private = builtin == Some(Builtin::WebFetch)
            && taint::private_page(
                &[target.as_str(), final_url],
                args.get("headers"),
                &self.runner.local_hosts,
            );
        taint::labels_of(&call.name, &target, &value, private)
    }

    /// A failed step; a hybrid turn moves to the wise tier after enough of them.
    fn count_failure(&self, cp: &mut Checkpoint) {
        cp.failures += 1;
        let after = self.config.hybrid_escalate_after_failures;
        if !rules::escalates(cp.mode, cp.tier, cp.failures, after) {
            return;
        }
        if tier_used(self.llm, Tier::Wise) == tier_used(self.llm, cp.tier) {
            tracing::info!(
                failures = cp.failures,
                "hybrid turn would escalate, but no wise tier is configured"
            );
        } else {
            tracing::info!(
                failures = cp.failures,
                "hybrid turn escalates to the wise tier"
            );
        }
        cp.tier = Tier::Wise;
    }
}

/// Whether `call` reads a local file: failed, it still told something of it (that it is
/// there, its size, a parse error's line and field count), so it counts as read.
fn reads_a_file(call: &Call) -> bool {
    Builtin::of(&call.name).is_some_and(Builtin::reads_files)
        && call.arguments.get("path").is_some_and(|p| !p.is_null())
}

/// Whether a failed observation still carries output of the place it read: content, a
/// program's stderr, a command that ran in the box at all (its exit status and its time
/// came from what it read: `grep -q PIN pin.txt`), or where a fetch was redirected
/// (`requested`: the URL it asked for; a private host's redirect can carry its data).
fn carries_output(observation: &Observation, requested: Option<&str>) -> bool {
    let filled = |v: &Value| match v {
        Value::Null => false,
        Value::String(s) => !s.trim().is_empty(),
        _ => true,
    };
    let meta = |key: &str| observation.metadata.as_ref().and_then(|m| m.get(key));
    observation.content.as_ref().is_some_and(filled)
        || meta("stderr").is_some_and(filled)
        || meta("sandbox").is_some()
        || meta("final_url")
            .and_then(Value::as_str)
            .is_some_and(|url| !url.is_empty() && Some(url) != requested)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reviews of issue 38: a failed step still read the place when it printed, wrote to
    /// stderr, ran a command at all (its status says what it read) or was redirected.
    #[test]
    fn a_failed_step_that_ran_or_printed_counts_as_observed() {
        let failed = |details: Value, content: Option<&str>| Observation {
            content: content.map(|c| Value::String(c.to_owned())),
            ..Observation::failure_with(
                "failed".to_owned(),
                details.as_object().cloned().unwrap_or_default(),
            )
        };
        let url = Some("https://nas.lan/a");
        assert!(!carries_output(&failed(json!({}), None), url));
        assert!(!carries_output(
            &failed(json!({"final_url": "https://nas.lan/a"}), None),
            url
        ));
        assert!(carries_output(
            &failed(json!({}), Some("net 4,210 EUR")),
            url
        ));
        assert!(carries_output(
            &failed(json!({"stderr": "pin.txt: 1234"}), None),
            url
        ));
        assert!(carries_output(
            &failed(json!({"sandbox": {}, "exit_code": 1}), None),
            url
        ));
        assert!(carries_output(
            &failed(json!({"final_url": "https://evil.example/?d=secret"}), None),
            url
        ));
    }
}
