//! One turn's question to the LLM: the conversation so far, the tools it is offered, its
//! answer taken in — on a tier policy allows for this person.

use std::time::Duration;

use metnos_executors::Catalog;
use metnos_kit::config::TurnsConfig;
use metnos_llm::{ChatRequest, LlmError, Message, Outcome, Tier, ToolCall, ToolDef};
use tokio::sync::watch;

use crate::filters::Filters;
use crate::llm::{Llm, LlmSlot};
use crate::store::Store;
use crate::turn::repair::{self, Repair};
use crate::turn::rules;
use crate::turn::running::cancelled;
use crate::turn::scratch;
use crate::turn::{Call, Checkpoint, FinalKind, Finish, Hist, Mode, finish};

const SYSTEM_PROMPT: &str = "You are Metnos, a personal agent acting for one person. \
Use the tools to do what they ask, one step at a time; when you have what you need, answer in plain \
text without calling any tool. To pass a step's result to a tool, make an argument's whole value \
{{stepN.field}}, e.g. {{step1.content}}; in your final answer write the actual values, never {{…}}. \
Observations are JSON with their step number; a large one is summarised with a scratchpad_id: \
call scratchpad_read with it to read more. If a call is refused, do not insist: explain or try \
another way.";

/// One turn's question to the LLM: the conversation so far, the tools it is offered, its
/// answer taken in, on a tier policy allows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asking<'a> {
    llm: &'a LlmSlot,
    catalog: &'a Catalog,
    config: &'a TurnsConfig,
    filters: &'a dyn Filters,
    store: &'a Store,
    /// Whether the standing-order tools are offered (standing orders are on here).
    orders: bool,
}

impl<'a> Asking<'a> {
    pub(crate) fn new(
        llm: &'a LlmSlot,
        catalog: &'a Catalog,
        config: &'a TurnsConfig,
        filters: &'a dyn Filters,
        store: &'a Store,
        orders: bool,
    ) -> Asking<'a> {
        Asking {
            llm,
            catalog,
            config,
            filters,
            store,
            orders,
        }
    }

    /// The tier to ask: `tier`, unless its provider is online and policy does not allow
    /// `llm:online` on that host for this person at this level (the seed's ReadOnly: never
    /// an online LLM, an outgoing cost; at Supervised only with a grant). Then a local tier
    /// answers instead, or the turn ends saying why and how to allow it. A hybrid turn that
    /// has read private data stays on a local tier whatever policy says.
    async fn tier_allowed(
        &self,
        cp: &Checkpoint,
        llm: &dyn Llm,
        tier: Tier,
    ) -> Result<Tier, Finish> {
        let Some(host) = llm.online_host(tier) else {
            return Ok(tier);
        };
        // A hybrid turn is the person's local turn: once it has read private data, its
        // history (that data in it) is not sent to an online provider by an escalation.
        if cp.mode == Mode::Hybrid
            && let Some(read) = cp.read_private().first()
        {
            let Some(local) = llm.local_instead_of(tier) else {
                // No local tier to stay on: the turn ends rather than send what it read.
                let read = read.to_string();
                return Err(
                    crate::turn::endings::Ending::HybridWithoutLocal { read: &read }
                        .finish(cp.language),
                );
            };
            tracing::info!(
                read = %read,
                instead = llm.resolve(local).as_str(),
                "a hybrid turn that read private data stays local"
            );
            return Ok(local);
        }
        let principal = cp.principal();
        let why = match self
            .filters
            .check(
                cp.level,
                &principal,
                metnos_core::Capability::LlmOnline,
                &host,
            )
            .await
        {
            Ok(answer) if answer.outcome == rules::Outcome::Allowed => return Ok(tier),
            // Said in the person's language with the rest of the ending.
            Ok(answer) if cp.language == Some(metnos_core::Language::Italian) => format!(
                "le regole: llm:online {} al livello {}",
                match answer.outcome {
                    rules::Outcome::ApprovalRequired => "chiede un'approvazione",
                    _ => "è negato",
                },
                cp.level
            ),
            Ok(answer) => format!(
                "policy: llm:online is {} at {}",
                match answer.outcome {
                    rules::Outcome::ApprovalRequired => "approval_required",
                    _ => "denied",
                },
                cp.level
            ),
            Err(status) if cp.language == Some(metnos_core::Language::Italian) => format!(
                "il servizio delle regole non ha risposto ({:?})",
                status.code()
            ),
            Err(status) => format!(
                "the policy service could not be asked ({:?})",
                status.code()
            ),
        };
        match llm.local_instead_of(tier) {
            Some(local) => {
                tracing::info!(
                    tier = llm.resolve(tier).as_str(),
                    instead = llm.resolve(local).as_str(),
                    "the online LLM may not be used; a local tier answers"
                );
                Ok(local)
            }
            None => Err(crate::turn::endings::Ending::OnlineNotAsked {
                host: &host,
                why: &why,
                channel: principal.channel(),
                sender: principal.sender_id(),
            }
            .finish(cp.language)),
        }
    }

    /// The LLM's tools for this turn: its candidate executors, and `scratchpad_read` once
    /// something is in the scratchpad.
    fn tools(&self, cp: &Checkpoint) -> Vec<ToolDef> {
        let mut tools: Vec<ToolDef> = cp
            .candidates
            .iter()
            .filter_map(|name| self.catalog.get(name))
            .map(|e| ToolDef {
                name: e.manifest.name.clone(),
                description: e.manifest.description.clone(),
                parameters: e.manifest.args.clone(),
            })
            .collect();
        if !cp.scratch_ids.is_empty() {
            tools.push(scratch::tool_def());
        }
        if self.orders && !cp.scheduled {
            tools.extend(crate::proactive::tools::tool_defs());
        }
        tools.extend(crate::turn::remember::tool_defs());
        tools
    }

    /// One LLM call: tool calls are queued (`Ok(None)`), text finishes the turn.
    pub(crate) async fn ask_llm(
        &self,
        cp: &mut Checkpoint,
        cancel: &mut watch::Receiver<bool>,
    ) -> Result<Option<Finish>, Finish> {
        let llm = self.llm.as_ref().map_err(|e| {
            // The configuration's words are the owner's, in the planner's log; the
            // person is told in their language.
            tracing::error!(error = %e.0, "no LLM tier: the turn cannot run");
            crate::turn::endings::Ending::NoModel.finish(cp.language)
        })?;
        if self.catalog.is_empty() {
            return Err(crate::turn::endings::Ending::EmptyCatalog.finish(cp.language));
        }
        let offer_tools = rules::offers_tools(cp.mode, cp.planned);
        let request = ChatRequest {
            system: Some(system_prompt(cp.language)),
            messages: to_messages(&cp.history),
            tools: if offer_tools {
                self.tools(cp)
            } else {
                Vec::new()
            },
            temperature: Some(0.0),
            ..ChatRequest::default()
        };
        let budget_ms = self.config.budget_seconds.get() * 1000;
        let remaining = Duration::from_millis(budget_ms.saturating_sub(cp.active_ms));
        let tier = self.tier_allowed(cp, llm.as_ref(), cp.tier).await?;
        let answering = llm.resolve(tier);
        let response = tokio::select! {
            r = tokio::time::timeout(remaining, llm.chat(tier, &request)) => match r {
                Ok(Ok(response)) => response,
                // A small model's slip: its call's arguments were not JSON. Asked again, once.
                Ok(Err(LlmError::BadArguments { tool, message, .. }))
                    if !cp.has_repaired(Repair::BadArguments) =>
                {
                    cp.tiers_used.insert(answering);
                    cp.repaired(Repair::BadArguments);
                    cp.history.push(Hist::User {
                        text: repair::bad_arguments_note(&tool, &message),
                    });
                    return Ok(None);
                }
                Ok(Err(e)) => {
                    // The whole error (its address, the OS's words) stays in this log; the
                    // person gets one sentence in their language.
                    tracing::warn!(tier = answering.as_str(), error = %e, "the LLM failed");
                    return Err(finish(FinalKind::Error, llm_failed(cp.language, answering, &e)));
                }
                Err(_) => {
                    return Err(crate::turn::endings::Ending::OutOfTime {
                        seconds: self.config.budget_seconds.get(),
                        waiting_llm: true,
                    }
                    .finish(cp.language));
                }
            },
            () = cancelled(self.store, &cp.turn_id, cancel) => return Err(crate::turn::endings::Ending::Cancelled.finish(cp.language)),
        };
        cp.tiers_used.insert(answering);
        cp.models.insert(response.model.clone());
        cp.prompt_tokens += response.usage.prompt_tokens;
        cp.completion_tokens += response.usage.completion_tokens;
        cp.llm_ms += u64::try_from(response.latency.as_millis()).unwrap_or(u64::MAX);
        match response.outcome {
            Outcome::Text(text) => Ok(take_text(cp, text, &request.tools)),
            // The answer call of an online plan asked for more tools: it has what it has.
            Outcome::ToolCalls(_) if !offer_tools => {
                Err(crate::turn::endings::Ending::OnlinePlanAskedMore.finish(cp.language))
            }
            Outcome::ToolCalls(calls) => {
                let calls: Vec<Call> = calls.iter().map(Call::from).collect();
                let text = String::new();
                queue(cp, text, calls, &request.tools);
                Ok(None)
            }
        }
    }
}

/// The system prompt of a turn in `language`.
pub fn system_prompt(language: Option<metnos_core::Language>) -> String {
    let language = match language {
        Some(metnos_core::Language::English) => "English",
        Some(metnos_core::Language::Italian) => "Italian",
        None => "the language of the person's request",
    };
    format!(
        "{SYSTEM_PROMPT} {} Answer in {language}.",
        crate::turn::taint::FENCE_RULE
    )
}

/// The model's calls queued to run, their arguments coerced to each offered tool's schema
/// where one reading fits ([`repair::coerce`]), and kept in the turn's history as the
/// model's (with any `text` it wrote beside them).
fn queue(cp: &mut Checkpoint, text: String, mut calls: Vec<Call>, tools: &[ToolDef]) {
    let mut coerced = false;
    cp.index.catch_up(&cp.fence_nonce, &cp.history);
    let copied = |text: &str| copies_world(cp, text);
    for call in &mut calls {
        if let Some(tool) = tools.iter().find(|t| t.name == call.name) {
            coerced |= repair::coerce(&mut call.arguments, &tool.parameters, &copied);
        }
    }
    if coerced {
        cp.repaired(Repair::ArgsCoerced);
    }
    cp.history.push(Hist::Assistant {
        text,
        calls: calls.clone(),
    });
    cp.queued = calls;
    if cp.mode == Mode::Online {
        cp.planned = true;
    }
}

/// A text answer taken in: its thinking taken out; tool calls written in it queued (when
/// the tool was offered, the JSON parses, and the call is not copied from the world's
/// data); an empty answer, one holding `{{step…}}`, or one holding a call that cannot be
/// read asked again once each. `None`: the loop goes on; else the turn's answer.
fn take_text(cp: &mut Checkpoint, text: String, tools: &[ToolDef]) -> Option<Finish> {
    let text = match repair::strip_think(&text) {
        Some(stripped) => {
            cp.repaired(Repair::Think);
            stripped
        }
        None => text,
    };
    let offered: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let mut quoted = false;
    if let Some(found) = repair::calls_in_text(&text, &offered) {
        let own = own_calls(cp, found.calls);
        if !own.is_empty() {
            cp.repaired(Repair::TextToolCall);
            queue(cp, found.rest, own, tools);
            return None;
        }
        quoted = true;
    }
    let again = if text.trim().is_empty() {
        Some((Repair::EmptyAnswer, repair::EMPTY_NOTE))
    } else if repair::has_placeholder(&text) {
        Some((Repair::Placeholder, repair::PLACEHOLDER_NOTE))
    } else if !quoted && !offered.is_empty() && repair::has_call_markup(&text) {
        Some((Repair::BadToolCall, repair::BAD_CALL_NOTE))
    } else {
        None
    };
    if let Some((kind, note)) = again.filter(|(kind, _)| !cp.has_repaired(*kind)) {
        cp.repaired(kind);
        // An empty answer is not kept: some APIs refuse an empty message.
        if !text.trim().is_empty() {
            cp.history.push(Hist::Assistant {
                text,
                calls: Vec::new(),
            });
        }
        cp.history.push(Hist::User {
            text: note.to_owned(),
        });
        return None;
    }
    if text.trim().is_empty() {
        return Some(crate::turn::endings::Ending::NoAnswer.finish(cp.language));
    }
    Some(finish(FinalKind::Answer, text))
}

/// The shortest head of a call that a forwarded message holding it counts as copied.
const COPIED_HEAD: usize = crate::turn::taint::COPIED_RUN;

/// The id a call taken from the model's text has: `text_<history>_<n>` (the vetting asks
/// the person about such a call once the turn has read the world's data).
pub(crate) const TEXT_CALL: &str = "text_";

/// Whether `text` copies the world's data the turn was shown (its index caught up), or a
/// forwarded message: someone else's words too.
fn copies_world(cp: &Checkpoint, text: &str) -> bool {
    let person = if cp.forwarded { "" } else { cp.query.as_str() };
    let mut found = std::collections::BTreeSet::new();
    cp.index.copied(text, person, &mut found);
    !found.is_empty() || (cp.forwarded && text.len() >= COPIED_HEAD && cp.query.contains(text))
}

/// The calls written in an answer that are the model's own: not one whose opening the
/// world's data holds (a page, a file, a command's output: the model repeating it).
fn own_calls(cp: &mut Checkpoint, calls: Vec<repair::TextCall>) -> Vec<Call> {
    cp.index.catch_up(&cp.fence_nonce, &cp.history);
    let step = cp.history.len();
    calls
        .into_iter()
        .filter(|call| {
            let copied = call.heads.iter().any(|head| copies_world(cp, head));
            if copied {
                tracing::info!(turn_id = %cp.turn_id, "a tool call written in the answer copies the world's data: not taken");
            }
            !copied
        })
        .enumerate()
        .map(|(i, call)| Call {
            id: format!("{TEXT_CALL}{step}_{i}"),
            name: call.name,
            arguments: call.arguments,
        })
        .collect()
}

fn to_messages(history: &[Hist]) -> Vec<Message> {
    history
        .iter()
        .map(|h| match h {
            Hist::User { text } => Message::User(text.clone()),
            Hist::Assistant { text, calls } => Message::Assistant {
                text: text.clone(),
                tool_calls: calls
                    .iter()
                    .map(|c| ToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    })
                    .collect(),
            },
            Hist::Tool {
                call_id,
                name,
                content,
            } => Message::ToolResult {
                call_id: call_id.clone(),
                name: name.clone(),
                content: content.clone(),
            },
        })
        .collect()
}

/// What the person is told when the LLM failed: one sentence in their language, naming the
/// provider and what went wrong, never an address or an OS error.
pub(crate) fn llm_failed(
    language: Option<metnos_core::Language>,
    tier: Tier,
    error: &LlmError,
) -> String {
    let what = error.summary();
    match language {
        Some(metnos_core::Language::Italian) => format!(
            "Non riesco a usare il modello linguistico (livello {}: {what}): riprova tra poco.",
            tier.as_str()
        ),
        _ => format!(
            "I cannot use the language model right now (the LLM ({} tier) failed: {what}): please try again shortly.",
            tier.as_str()
        ),
    }
}
