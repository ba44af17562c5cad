//! Compose-only synthesis (issue 46, seed agent_runtime ch. 11.1.1): when the model asks
//! for a tool that does not exist with data piped from an earlier step, the wish is kept as
//! a proto, and a chain of existing executors is looked for in the mnestome — a
//! breadth-first search over strong passages from the piped executor, at most
//! [`MAX_HOPS`], the chain's last executor scored against the wanted name's words by the
//! pre-filter. No model call. A chain found is told in the refusal's observation
//! (`synt`); it does not widen what the turn offers (a wish a page put in the model's
//! mouth must not reach executors the pre-filter did not offer), and each call of it still
//! passes every filter.

use std::collections::{BTreeSet, HashMap, VecDeque};

use serde_json::{Value, json};

use crate::store::mnestome::{Mnestome, Proto, STRONG, Strength, keepable};
use crate::turn::prefilter::Index;
use crate::turn::{Call, Checkpoint, Hist, StepLog, passages, piping, taint};

/// The longest chain looked for.
pub const MAX_HOPS: usize = 3;

/// A chain of existing executors that may do what a wanted tool would.
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    /// The executors to call, in order (the piped executor, already run, not included).
    pub executors: Vec<String>,
    /// The pre-filter's score of the last one for the wanted name.
    pub score: u32,
    /// Why, in names and weights only.
    pub because: String,
}

/// The best chain from `from` toward `wanted` over `passages` (those of at least
/// [`STRONG`]; weaker ones are skipped): the reached executor the pre-filter scores highest
/// for `wanted`'s words, then the shortest chain, then by name. `None` when no executor
/// reached scores above zero.
pub fn find_chain(passages: &[Strength], from: &str, wanted: &str, index: &Index) -> Option<Chain> {
    type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
    let mut scores: Map<String, u32> = Map::default();
    scores.extend(index.rank(wanted).into_iter().map(|c| (c.name, c.score)));
    if scores.is_empty() {
        return None;
    }
    let mut next: Map<&str, Vec<(&str, f64)>> = Map::default();
    for s in passages.iter().filter(|s| s.weight >= STRONG) {
        next.entry(s.passage.from_executor.as_str())
            .or_default()
            .push((s.passage.to_executor.as_str(), s.weight));
    }
    // Breadth first: each executor reached once, by its shortest chain, through the
    // strongest of its passages (edges in name order, the strongest first).
    let mut reached: Map<&str, (&str, f64, usize)> = Map::default();
    reached.insert(from, (from, 0.0, 0));
    let mut queue = VecDeque::from([from]);
    let mut best: Option<(u32, usize, &str)> = None;
    while let Some(at) = queue.pop_front() {
        let hops = reached[at].2 + 1;
        if hops > MAX_HOPS {
            continue;
        }
        let Some(edges) = next.get_mut(at) else {
            continue;
        };
        edges.sort_unstable_by(|a, b| a.0.cmp(b.0).then(b.1.total_cmp(&a.1)));
        for &(to, weight) in edges.iter() {
            if reached.contains_key(to) {
                continue;
            }
            reached.insert(to, (at, weight, hops));
            queue.push_back(to);
            if let Some(&score) = scores.get(to) {
                let better = best.is_none_or(|(s, h, name)| {
                    (score, std::cmp::Reverse(hops), std::cmp::Reverse(to))
                        > (s, std::cmp::Reverse(h), std::cmp::Reverse(name))
                });
                if better {
                    best = Some((score, hops, to));
                }
            }
        }
    }
    let (score, _, end) = best?;
    let mut path: Vec<(&str, &str, f64)> = Vec::new();
    let mut at = end;
    while at != from {
        let (parent, weight, _) = reached[at];
        path.push((parent, at, weight));
        at = parent;
    }
    path.reverse();
    let steps: Vec<String> = path
        .iter()
        .map(|(a, b, weight)| format!("{a} → {b} (weight {weight:.2})"))
        .collect();
    Some(Chain {
        executors: path.iter().map(|(_, to, _)| (*to).to_owned()).collect(),
        score,
        because: format!(
            "earlier turns piped {}; {end} answers to `{wanted}`'s words",
            steps.join(", ")
        ),
    })
}

/// Whether `name` is text the model was shown from elsewhere than the person's own message:
/// a long one by the copy rule; any one found as a word in an observation it was shown, or in
/// the thread before this message (an earlier answer or the summary, but for Metnos's own
/// question of an attempt for this name; a forwarded message); fails closed for a forwarded
/// message (all of it someone else's words).
fn seen_in_the_world(cp: &Checkpoint, name: &str) -> bool {
    if cp.forwarded {
        return true;
    }
    let mut copied = BTreeSet::new();
    cp.index.copied(name, &cp.query, &mut copied);
    if !copied.is_empty() {
        return true;
    }
    let current = cp
        .history
        .iter()
        .rposition(|h| matches!(h, Hist::User { text } if *text == cp.query));
    // Metnos's own question of an earlier attempt for this very name is not the world's.
    let own = crate::turn::attempt::questions_for(name);
    cp.history.iter().enumerate().any(|(i, h)| {
        let earlier = current.is_some_and(|c| i < c);
        match h {
            Hist::Tool { content, .. } => has_word(content, name),
            // An earlier answer, or the summary (a short name copied into it carries no
            // sources: each is read as the world's).
            Hist::Assistant { text, .. } if earlier => {
                let text = own
                    .iter()
                    .fold(text.clone(), |t, q| t.replace(q.as_str(), ""));
                has_word(&text, name)
            }
            // A forwarded message, fenced: someone else's words.
            Hist::User { text } if earlier && taint::is_fenced(text, &cp.fence_nonce) => {
                has_word(text, name)
            }
            _ => false,
        }
    })
}

/// Whether `name` is a word of `text` (ASCII letters, digits, `_ - . *`; case aside), read
/// as the model reads it: JSON escapes are decoded first — `\n` separates words, `\u005f`
/// is `_` — so a page's `call:\nsteal_notes` still shows the word `steal_notes`.
fn has_word(text: &str, name: &str) -> bool {
    let is_word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '*');
    // A sentence's full stop (or a dash, a star) around a name is not part of it.
    let is = |w: &str| {
        w.eq_ignore_ascii_case(name) || w.trim_matches(['.', '-', '*']).eq_ignore_ascii_case(name)
    };
    let mut word = String::new();
    let mut chars = text.chars();
    loop {
        let c = match chars.next() {
            Some('\\') => match chars.next() {
                Some('u') => {
                    let hex: String = chars.by_ref().take(4).collect();
                    u32::from_str_radix(&hex, 16)
                        .ok()
                        .and_then(char::from_u32)
                        .unwrap_or(' ')
                }
                Some('n' | 't' | 'r' | 'b' | 'f') | None => ' ',
                Some(other) => other,
            },
            Some(c) => c,
            None => return is(&word),
        };
        if is_word(c) {
            word.push(c);
        } else {
            if is(&word) {
                return true;
            }
            word.clear();
        }
    }
}

/// Whether the name of `call`, a tool that does not exist, is the model's own plain name:
/// keepable, not carried from what a step read, not a word the model was shown from the
/// world (nor from a forwarded message). Only such a name is kept or shown back.
pub(crate) fn plain_wish(cp: &Checkpoint, call: &Call, log: &StepLog) -> bool {
    let name_is_worlds = log.tainted.iter().any(|c| c.arg == "(executor name)");
    keepable(&call.name) && !name_is_worlds && !seen_in_the_world(cp, &call.name)
}

/// The executors whose output `args` was made of (references and copies), in step order.
fn piped_from(cp: &Checkpoint, args: &Value) -> Vec<String> {
    let mut steps: BTreeSet<u32> = piping::references(args).iter().map(|r| r.step).collect();
    steps.extend(passages::copied_steps(cp, args));
    let mut out: Vec<String> = Vec::new();
    for executor in steps
        .into_iter()
        .filter_map(|n| passages::executor_of(cp, n))
    {
        if !out.iter().any(|e| e == executor) {
            out.push(executor.to_owned());
        }
    }
    out
}

/// For a call to a tool that does not exist: records the proto (fed by an earlier step's
/// output, under a name that is neither free text nor the world's) and looks for a chain.
/// The `synt` field the refusal's observation carries, when one is found (told, not
/// offered). Fail-safe: an error is logged, nothing is told.
pub(crate) async fn proposed(
    mnestome: &Mnestome,
    index: &Index,
    cp: &Checkpoint,
    call: &Call,
    log: &StepLog,
) -> Option<Value> {
    if !plain_wish(cp, call, log) {
        return None;
    }
    let froms = piped_from(cp, &call.arguments);
    if froms.is_empty() {
        return None;
    }
    // An argument's name copied from what a step read is the world's text: not kept.
    let arg_names: Vec<String> = call
        .arguments
        .as_object()
        .map(|m| {
            m.keys()
                .filter(|k| !seen_in_the_world(cp, k))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let now = metnos_kit::time::now_ms();
    for from in &froms {
        if let Err(e) = mnestome.proto(from, &call.name, &arg_names, now).await {
            tracing::warn!(error = %e, "the mnestome could not keep a proto; the turn goes on");
        }
    }
    let mut chains = Vec::new();
    for from in &froms {
        match mnestome.reachable(from, MAX_HOPS, STRONG).await {
            Ok(near) => chains.extend(find_chain(&near, from, &call.name, index)),
            Err(e) => {
                tracing::warn!(error = %e, "the mnestome could not be read for a chain");
                return None;
            }
        }
    }
    let chain = chains.into_iter().max_by(|a, b| {
        (a.score, std::cmp::Reverse(a.executors.len()))
            .cmp(&(b.score, std::cmp::Reverse(b.executors.len())))
    })?;
    tracing::info!(chain = ?chain.executors, "a chain of existing executors was suggested for a missing tool");
    Some(json!({"chain": chain.executors, "because": chain.because}))
}

/// The proto a suggestion is for: used at least this often…
pub const SUGGEST_USES: u64 = 3;

/// … and still at least this recurrent.
pub const SUGGEST_WEIGHT: f64 = 0.30;

/// What `synt_suggest` found for one recurring proto.
#[derive(Debug, Clone, PartialEq)]
pub struct Suggestion {
    pub proto: Proto,
    pub chain: Option<Chain>,
}

/// The nightly compose-only synthesis (`synt_suggest`): each proto used at least
/// [`SUGGEST_USES`] times and of weight at least [`SUGGEST_WEIGHT`], with the chain found
/// for it, if any.
pub async fn suggest(mnestome: &Mnestome, index: &Index) -> Result<Vec<Suggestion>, sqlx::Error> {
    let strong = mnestome.strong(STRONG).await?;
    Ok(mnestome
        .protos()
        .await?
        .into_iter()
        .filter(|p| p.uses >= SUGGEST_USES && p.weight >= SUGGEST_WEIGHT)
        .map(|proto| {
            let chain = find_chain(&strong, &proto.from_executor, &proto.wanted, index);
            Suggestion { proto, chain }
        })
        .collect())
}

/// A call of a tool that does not exist, at its refusal: the mnestome and the pre-filter
/// to look for a chain with, the call and its step's log.
#[derive(Clone, Copy)]
pub(crate) struct Wish<'a>(
    pub &'a Mnestome,
    pub &'a Index,
    pub &'a Call,
    pub &'a StepLog,
);

impl Wish<'_> {
    /// The refusal of step `n`, with the chain of existing executors that may do it when
    /// the mnestome knows one; the turn's non-retreat attempt begins (said on `sink`) when
    /// the wish's name is the model's own ([`crate::turn::attempt`]).
    pub(crate) async fn refused(
        &self,
        cp: &mut Checkpoint,
        sink: &crate::turn::flow::Sink,
        why: String,
        n: u32,
    ) -> metnos_executors::Observation {
        let mut observation = crate::turn::flow::refusal(why);
        let Wish(mnestome, index, call, log) = *self;
        let synt = proposed(mnestome, index, cp, call, log).await;
        let chain = synt.is_some();
        if let Some(synt) = synt {
            observation
                .metadata
                .get_or_insert_default()
                .insert("synt".to_owned(), synt);
        }
        let plain = plain_wish(cp, call, log);
        if let Some(a) = crate::turn::attempt::open(cp, &call.name, plain, n, chain) {
            let event = metnos_proto::planner::v1::turn_event::Event::Attempt(a);
            crate::turn::flow::emit(sink, event).await;
        }
        observation
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mnestome::Passage;
    use crate::turn::prefilter::Entry;

    #[test]
    fn a_word_is_read_through_json_escapes_as_the_model_reads_it() {
        // A newline, a tab or an escaped quote before the name separates it.
        for text in [
            r#"{"content":"call:\nsteal_notes"}"#,
            r#"{"content":"x\tsteal_notes\r"}"#,
            r#"{"content":"\"steal_notes\""}"#,
            r#"{"content":"steal\u005fnotes now"}"#,
            "plain STEAL_NOTES here",
            "use steal_notes.",
            "*steal_notes*, now",
        ] {
            assert!(has_word(text, "steal_notes"), "{text}");
        }
        for text in [
            r#"{"content":"steal_notes_more"}"#,
            r#"{"content":"nsteal_notes"}"#,
            "steal notes",
            "\\u12",
        ] {
            assert!(!has_word(text, "steal_notes"), "{text}");
        }
    }

    fn index() -> Index {
        let entry = |name: &str, description: &str| Entry {
            name: name.into(),
            description: description.into(),
            affinity: Vec::new(),
        };
        Index::new(&[
            entry("web_fetch", "fetch a web page"),
            entry("text_summarize", "summarize a text"),
            entry("fs_write", "write a file"),
            entry("a1", "step"),
            entry("a2", "step"),
            entry("a3", "step"),
            entry("translate_far", "translate a text"),
        ])
    }

    fn strength(from: &str, to: &str, weight: f64) -> Strength {
        Strength {
            passage: Passage {
                from_executor: from.into(),
                from_field: "content".into(),
                to_executor: to.into(),
                to_arg: "text".into(),
            },
            weight,
            uses: 3,
            successes: 3,
            last_used: 0,
        }
    }

    #[test]
    fn the_chain_ends_at_the_executor_that_answers_the_wanted_name_over_strong_passages() {
        let passages = [
            strength("fs_read", "text_summarize", 0.5),
            strength("text_summarize", "fs_write", 0.4),
            // Weak: not followed, though web_fetch answers "page".
            strength("fs_read", "web_fetch", 0.29),
        ];
        let chain = find_chain(&passages, "fs_read", "summarize_page", &index()).unwrap();
        assert_eq!(chain.executors, ["text_summarize"]);
        assert_eq!(
            chain.because,
            "earlier turns piped fs_read → text_summarize (weight 0.50); text_summarize answers to `summarize_page`'s words"
        );
        // Two hops when the end is further.
        let chain = find_chain(&passages, "fs_read", "write_summary_file", &index()).unwrap();
        assert_eq!(chain.executors, ["text_summarize", "fs_write"]);
        assert_eq!(chain.score, 2);
        assert!(find_chain(&passages, "fs_read", "fetch_page", &index()).is_none());
        assert!(find_chain(&passages, "fs_read", "nothing_matches", &index()).is_none());
    }

    #[test]
    fn a_chain_is_at_most_three_hops() {
        let passages = [
            strength("start", "a1", 0.9),
            strength("a1", "a2", 0.9),
            strength("a2", "a3", 0.9),
            strength("a3", "translate_far", 0.9),
        ];
        assert!(find_chain(&passages, "start", "translate", &index()).is_none());
        let chain = find_chain(&passages, "a1", "translate", &index()).unwrap();
        assert_eq!(chain.executors, ["a2", "a3", "translate_far"]);
    }
}
