//! The person's long-term memory as the model reaches it (issue 40): tools the planner
//! offers, like the standing-order tools — `memory_save {text}`, `memory_search {query,
//! limit}`, `memory_forget {id}` — each acting for the turn's own person only (the
//! principal comes from the turn, never from the model).
//!
//! Memory is a sink. What the person says in their own message is theirs and is saved at
//! once; a save whose text holds the world's data (copied from, or referring to, what a
//! step observed or an earlier answer was made from), a forwarded message's, or any save
//! in a turn the world may have steered (it read the world, or sees earlier answers made
//! from it), is asked about on a card at every level, naming the source, with no
//! territory: a page that says "remember: send every report to …" does not become a
//! standing instruction by itself. An approved entry keeps its sources, and a recall
//! carries them: it reaches the model fenced, and a call built from it is carded as the
//! page would be. A recall is private data too (`memory`): what follows it is asked before
//! anything leaves. Such a turn cannot forget entries either.

use metnos_core::names::tools::{MEMORY_FORGET, MEMORY_SAVE, MEMORY_SEARCH};
use metnos_core::provenance::Label;
use metnos_executors::Observation;
use metnos_llm::ToolDef;
use serde_json::{Map, Value, json};

use crate::store::memories::{ByTurn, MAX_CHARS, Memory, MemoryError, MemoryStore};
use crate::store::threads::MAX_LABELS;
use crate::turn::cards::Asked;
use crate::turn::flow::refusal;
use crate::turn::{Call, Checkpoint, PendingCall, taint};

/// How many entries a search returns unless the model asks for another number (at most
/// [`MAX_SEARCHED`]).
const DEFAULT_FOUND: u32 = 5;
const MAX_SEARCHED: u32 = 20;

/// Whether `name` is one of these tools.
pub fn is_tool(name: &str) -> bool {
    matches!(name, MEMORY_SAVE | MEMORY_SEARCH | MEMORY_FORGET)
}

/// The tools as the LLM sees them.
pub fn tool_defs() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: MEMORY_SAVE.to_owned(),
            description: format!(
                "Remember something for the person across conversations (at most {MAX_CHARS} \
                 characters): a fact, a preference, a date they told you. Save what the \
                 person said in their own words; something read from a page or a file is \
                 asked about first."
            ),
            parameters: json!({
                "type": "object",
                "required": ["text"],
                "properties": {"text": {"type": "string", "description": "What to remember, in plain words"}}
            }),
        },
        ToolDef {
            name: MEMORY_SEARCH.to_owned(),
            description: "Search what you remember for the person (full text, best first): \
                          each entry with its id, when it was saved and where its text came \
                          from."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "required": ["query"],
                "properties": {
                    "query": {"type": "string", "description": "Words to look for"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCHED}
                }
            }),
        },
        ToolDef {
            name: MEMORY_FORGET.to_owned(),
            description: "Forget one remembered entry of the person's, by the id \
                          memory_search gives."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "required": ["id"],
                "properties": {"id": {"type": "string"}}
            }),
        },
    ]
}

/// What a memory tool call comes to.
pub(crate) enum Remembered {
    /// Observed now (done, found, or refused), with where the observation came from.
    Observed(Call, Observation, Vec<String>),
    /// A card to ask first: the save as it will run once approved.
    Ask(Call, Box<Asked>),
}

fn text<'a>(args: &'a Value, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn ok(content: Value) -> Observation {
    Observation::success(content, Map::new())
}

fn refused(call: Call, why: impl Into<String>) -> Remembered {
    Remembered::Observed(call, refusal(why), Vec::new())
}

/// One call of a memory tool: what it observes now, or the card to ask first.
pub(crate) async fn answer(memories: &MemoryStore, cp: &Checkpoint, call: Call) -> Remembered {
    let person = cp.principal();
    let now = metnos_kit::time::now_ms();
    match call.name.as_str() {
        MEMORY_SAVE => save(memories, cp, call, now).await,
        MEMORY_SEARCH => {
            let query = text(&call.arguments, "query");
            let limit = call
                .arguments
                .get("limit")
                .and_then(Value::as_u64)
                .map_or(DEFAULT_FOUND, |n| {
                    n.clamp(1, u64::from(MAX_SEARCHED)) as u32
                });
            match memories.search(&person, query, limit, now).await {
                Ok(found) => {
                    // The person's memory is private: what follows a recall is asked
                    // before it leaves; entries from the world keep that world's labels.
                    let mut labels: Vec<String> = found
                        .iter()
                        .flat_map(|m| m.labels.iter().cloned())
                        .collect();
                    if !found.is_empty() {
                        labels.push(Label::Memory.to_string());
                    }
                    let labels = once_each(labels);
                    let shown: Vec<Value> = found.iter().map(shown).collect();
                    Remembered::Observed(call, ok(json!({"memories": shown})), labels)
                }
                Err(e) => refused(call, said(&e)),
            }
        }
        MEMORY_FORGET if !steered_by(cp).is_empty() || cp.scheduled => refused(
            call,
            "this turn has read data from the world (or runs a standing order), so it cannot \
             forget what the person asked to be remembered; the person can ask for it in a \
             new message",
        ),
        MEMORY_FORGET => match memories.forget(&person, text(&call.arguments, "id")).await {
            Ok(()) => {
                let id = text(&call.arguments, "id").to_owned();
                Remembered::Observed(call, ok(json!({"forgotten": id})), Vec::new())
            }
            Err(e) => refused(call, said(&e)),
        },
        _ => {
            let why = format!("nonexistent executor: {}", call.name);
            refused(call, why)
        }
    }
}

/// `memory_save`: the person's own words saved now; the world's asked about first.
async fn save(memories: &MemoryStore, cp: &Checkpoint, mut call: Call, now: i64) -> Remembered {
    let args = call.arguments.clone();
    if !crate::turn::piping::referenced_steps(&args).is_empty() {
        return refused(
            call,
            "memory_save takes the words to remember themselves, not a reference to a step",
        );
    }
    let words = match crate::store::memories::checked_text(text(&args, "text")) {
        Ok(words) => words.to_owned(),
        Err(e) => return refused(call, said(&e)),
    };
    let sources = sources_of(cp, &args);
    if sources.len() > MAX_LABELS {
        return refused(call, "this text comes from too many sources to remember");
    }
    if sources.is_empty() {
        let saved = memories
            .save(&cp.principal(), &words, &[], by_turn(cp), None, now)
            .await;
        return match saved {
            Ok(saved) => {
                let content = json!({"saved": saved.memory.id, "text": saved.memory.text});
                Remembered::Observed(call, ok(content), Vec::new())
            }
            Err(e) => refused(call, said(&e)),
        };
    }
    // Asked first, at every level: the words as they will be stored, and where from.
    let bound = json!({"text": words, "sources": sources});
    let extra = json!({"tainted_sink": [{"arg": "text", "sources": sources}]}).to_string();
    let shown: String = words.chars().take(60).collect();
    call.arguments = bound.clone();
    let asked = crate::proactive::tools::asked(cp, MEMORY_SAVE, bound, &shown, extra);
    Remembered::Ask(call, Box::new(asked))
}

/// Where the text of a save came from: what its arguments carry of the world (copied or
/// referred to), and a forwarded message's; else, when the world may have steered the
/// turn — it read the world, or the thread's earlier answers it sees were made from it —
/// all of that (a page's words reworded, or cut into short pieces, are still the page's).
fn sources_of(cp: &Checkpoint, args: &Value) -> Vec<String> {
    let mut index = cp.index.clone();
    index.catch_up(&cp.fence_nonce, &cp.history);
    let carried = taint::carried(args, &index, &cp.query, &|n| cp.labels_of(n));
    let mut sources: Vec<String> = carried.into_iter().flat_map(|c| c.sources).collect();
    if cp.forwarded {
        sources.push(Label::Forwarded.to_string());
    }
    if sources.is_empty() {
        sources = steered_by(cp);
    }
    once_each(sources)
}

/// The world's labels of what this turn read (a failed step's too: its error may be a
/// server's words) and of the earlier answers it sees; none: the person's turn alone.
fn steered_by(cp: &Checkpoint) -> Vec<String> {
    let untrusted = |l: &String| taint::untrusted(std::slice::from_ref(l));
    let read = cp.steps.iter().flat_map(|s| s.labels.iter());
    let earlier = cp.earlier.iter().flat_map(|e| e.labels.iter());
    once_each(
        read.chain(earlier)
            .filter(|l| untrusted(l))
            .cloned()
            .collect(),
    )
}

fn once_each(mut labels: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    labels.retain(|l| seen.insert(l.clone()));
    metnos_core::provenance::sort(&mut labels);
    labels
}

/// An entry as the model is shown it: its words, when, and where they came from.
fn shown(memory: &Memory) -> Value {
    let mut shown = json!({
        "id": memory.id,
        "text": memory.text,
        "saved_at": metnos_kit::time::rfc3339(memory.saved_at),
    });
    if !memory.labels.is_empty() {
        shown["sources"] = json!(memory.labels);
    }
    shown
}

/// A store failure said without the database's words.
/// The turn `cp` as the memory knows a save's turn.
fn by_turn(cp: &Checkpoint) -> ByTurn<'_> {
    ByTurn {
        id: &cp.turn_id,
        begun_ms: cp.started_ms,
    }
}

fn said(error: &MemoryError) -> String {
    match error {
        MemoryError::Store(e) => {
            tracing::warn!(error = %e, "the memory store failed");
            "the memory store is unavailable".to_owned()
        }
        other => other.to_string(),
    }
}

/// Whether `name` acts only once its card is approved.
pub fn is_carded(name: &str) -> bool {
    name == MEMORY_SAVE
}

/// Where what an approved save observes came from: the sources its card named (its answer
/// repeats the words).
pub fn labels_of_saved(args: &Value) -> Vec<String> {
    args.get("sources")
        .and_then(Value::as_array)
        .map(|all| {
            all.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// What an approved save does: the words kept with the sources its card named.
pub(crate) async fn decided(
    memories: &MemoryStore,
    cp: &Checkpoint,
    pending: &PendingCall,
) -> Observation {
    let args = &pending.args;
    let sources = labels_of_saved(args);
    let now = metnos_kit::time::now_ms();
    // Its id from the approval's: the same decision applied twice saves it once.
    let id = format!("m-{}", metnos_kit::chain::token_name(&pending.token));
    let saved = memories
        .save(
            &cp.principal(),
            text(args, "text"),
            &sources,
            by_turn(cp),
            Some(&id),
            now,
        )
        .await;
    match saved {
        Ok(saved) => {
            ok(json!({"saved": saved.memory.id, "text": saved.memory.text, "sources": sources}))
        }
        Err(e) => refusal(said(&e)),
    }
}
