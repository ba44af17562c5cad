//! Non-retreat (issue 46; the telos seed's `t.coltivazione_strumenti`): a request Metnos
//! cannot serve with the tools it has does not end in a bare "I cannot". When the model asks
//! for a tool that does not exist, the turn opens an **attempt**: it tries the composition
//! (a chain of existing executors, [`crate::turn::synt`]), and if no executor succeeds
//! after that, its answer asks the person what would let it, and the turn log records a
//! motivated failure (what was tried, why it stopped: keys only). While the attempt is
//! open — the turn running, then the person's answer to its question — a stop said about
//! it is the attempt's: the gateway sends it to the vaglio's `DetectStop` with
//! `non_retreat = true` and the attempt's id, which lowers the non-retreat telos (−0.7)
//! and blocks shortcut offers (the attempt's next step) for a day.
//!
//! The wished name is shown back to the person only when it is a plain name that the
//! model was not shown from the world (a page cannot put words in the question).

use metnos_core::language::Language;
use metnos_proto::planner::v1 as pb;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::store::mnestome::keepable;
use crate::turn::{Checkpoint, FinalKind, PolicyCheck, StepLog};

/// A turn's non-retreat attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub id: String,
    /// The wished tool's name.
    pub wanted: String,
    /// The step its call was refused at.
    pub step: u32,
    /// A chain of existing executors was found and told to the model.
    pub chain: bool,
    /// Policy denied the person this capability for executor `wanted` (the attempt is
    /// what would let it, not a missing tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied: Option<String>,
}

impl Attempt {
    pub fn to_proto(&self) -> pb::Attempt {
        pb::Attempt {
            attempt_id: self.id.clone(),
            wanted: self.wanted.clone(),
        }
    }
}

/// Opens `cp`'s attempt at step `step`, the refusal of a tool named `wanted` that does not
/// exist (`plain`: its name may be shown back), unless one is open; the event to emit.
pub(crate) fn open(
    cp: &mut Checkpoint,
    wanted: &str,
    plain: bool,
    step: u32,
    chain: bool,
) -> Option<pb::Attempt> {
    if cp.attempt.is_some() || !plain {
        return None;
    }
    let attempt = Attempt {
        id: format!("at-{}", metnos_kit::random::hex(8)),
        wanted: wanted.to_owned(),
        step,
        chain,
        denied: None,
    };
    tracing::info!(turn_id = %cp.turn_id, attempt = %attempt.id, chain, "a non-retreat attempt began: the model asked for a tool that does not exist");
    let event = attempt.to_proto();
    cp.attempt = Some(attempt);
    Some(event)
}

/// Opens `cp`'s attempt at a step policy denied (`log`): what would let Metnos is a
/// permission (the capability policy decided on, from its reason's labels); `None` when
/// policy did not deny it, or an attempt is open.
pub(crate) fn denied(cp: &mut Checkpoint, log: &StepLog) -> Option<pb::Attempt> {
    if cp.attempt.is_some() || log.policy != Some(PolicyCheck::Denied) || !keepable(&log.executor) {
        return None;
    }
    // "Supervised x fs:write = denied"
    let capability = log
        .policy_reason
        .as_deref()
        .and_then(|r| r.split_once(" x "))
        .and_then(|(_, rest)| rest.split_once(" = "))
        .map(|(c, _)| c.to_owned())
        .filter(|c| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b':' || b == b'_')
        })?;
    let attempt = Attempt {
        id: format!("at-{}", metnos_kit::random::hex(8)),
        wanted: log.executor.clone(),
        step: log.step,
        chain: false,
        denied: Some(capability),
    };
    tracing::info!(turn_id = %cp.turn_id, attempt = %attempt.id, "a non-retreat attempt began: policy denied a call");
    let event = attempt.to_proto();
    cp.attempt = Some(attempt);
    Some(event)
}

/// Whether an executor succeeded after the attempt's refusal.
fn served(cp: &Checkpoint, attempt: &Attempt) -> bool {
    cp.steps
        .iter()
        .any(|s| s.step > attempt.step && s.ok && s.executor != "?")
}

/// The attempt a turn ending as `kind` leaves open: not served, and the turn answered (an
/// error or a stop says its own words); a standing order's firing asks nobody (no one
/// follows its answer up).
pub(crate) fn unserved(cp: &Checkpoint, kind: FinalKind) -> Option<&Attempt> {
    cp.attempt
        .as_ref()
        .filter(|a| kind == FinalKind::Answer && !cp.scheduled && !served(cp, a))
}

/// What the answer adds for an attempt left open: what was tried, and what would let it.
pub(crate) fn question(attempt: &Attempt, language: Option<Language>) -> String {
    let wanted = &attempt.wanted;
    let language = language.unwrap_or(Language::English);
    if let Some(capability) = &attempt.denied {
        return match language {
            Language::Italian => format!(
                "Potrei farlo se mi fosse permesso usare {capability} (`{wanted}`); cosa può \
                 fare ciascuno lo decide il proprietario. Dimmi un altro modo — o scrivi «basta» \
                 e per oggi non ci riprovo."
            ),
            Language::English => format!(
                "I could do it if I were allowed to use {capability} (`{wanted}`); what each \
                 person may do is the owner's to decide. Tell me another way — or say stop and \
                 I will not try again today."
            ),
        };
    }
    match (language, attempt.chain) {
        (Language::Italian, chain) => format!(
            "Non ho uno strumento «{wanted}»{}. Potrebbe aggiungerlo un server MCP o un \
             esecutore (`metnos mcp add`, `metnos executors add` per il proprietario): dimmi \
             cosa mi permetterebbe di farlo — o scrivi «basta» e per oggi non ci riprovo.",
            if chain {
                " e la catena di strumenti esistenti che ho provato non è bastata"
            } else {
                ""
            }
        ),
        (Language::English, chain) => format!(
            "There is no tool for `{wanted}`{}. An MCP server or an executor could add one \
             (`metnos mcp add`, `metnos executors add`, for the owner): tell me what would let \
             me do it — or say stop and I will not try again today.",
            if chain {
                ", and the chain of existing tools I tried was not enough"
            } else {
                ""
            }
        ),
    }
}

/// Every question [`question`] asks for a wish named `wanted` (both languages, with and
/// without a chain tried): Metnos's own words, which a later turn of the thread sees.
pub(crate) fn questions_for(wanted: &str) -> Vec<String> {
    let mut out = Vec::new();
    for language in [Language::English, Language::Italian] {
        for chain in [false, true] {
            let attempt = Attempt {
                id: String::new(),
                wanted: wanted.to_owned(),
                step: 0,
                chain,
                denied: None,
            };
            out.push(question(&attempt, Some(language)));
        }
    }
    out
}

/// The turn log's account of the attempt (keys and names only): what was tried and how it
/// ended, for a turn ending as `kind` (its name: `answer`, `cap_steps`, …).
pub(crate) fn record(cp: &Checkpoint, kind: &str) -> Option<Value> {
    let attempt = cp.attempt.as_ref()?;
    let mut tried = vec![if attempt.denied.is_some() {
        "policy"
    } else {
        "composition"
    }];
    if attempt.chain {
        tried.push("chain told to the model");
    }
    let (outcome, why) = if served(cp, attempt) {
        ("served", "an executor succeeded after the refusal")
    } else if kind == FinalKind::Answer.as_str() {
        let why = if attempt.denied.is_some() {
            "policy denied the capability"
        } else {
            "no tool fits and no chain served it"
        };
        ("asked the person", why)
    } else {
        ("ended", kind)
    };
    let mut record = json!({
        "id": attempt.id,
        "wanted": attempt.wanted,
        "refused_at_step": attempt.step,
        "tried": tried,
        "outcome": outcome,
        "why": why,
    });
    if let Some(capability) = &attempt.denied {
        record["denied"] = json!(capability);
    }
    Some(record)
}
