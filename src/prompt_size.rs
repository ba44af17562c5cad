//! `metnos doctor`'s word on the planner's prompt (issue 42): the system prompt and the
//! most tools a turn offers, in tokens, against the context the fast tier's server gives
//! its model — a small model whose context the prompt fills has no room left to work in.

use metnos_executors::Catalog;
use metnos_kit::Config;
use metnos_llm::ToolDef;
use serde_json::json;

use crate::doctor::Check;

/// Characters per token, as a rule of thumb for English text and JSON (no tokenizer of
/// every model is at hand; the figure is said to be "about").
const CHARS_PER_TOKEN: usize = 4;

/// Past this share of the context, the prompt leaves too little for the conversation.
const MOST_OF_CONTEXT: u64 = 50;

fn tokens(chars: usize) -> u64 {
    chars.div_ceil(CHARS_PER_TOKEN) as u64
}

/// The check: "prompt", ok or warn.
pub async fn check(config: &Config, catalog: Option<&Catalog>) -> Check {
    let system = metnos_planner::turn::asking::system_prompt(Some(metnos_core::Language::English));
    let mut tools: Vec<ToolDef> = catalog
        .map(|c| {
            let accounts = config.accounts();
            c.executors()
                .filter(|e| metnos_executors::builtin::usable_with(&e.manifest.name, &accounts))
                .map(|e| ToolDef {
                    name: e.manifest.name.clone(),
                    description: e.manifest.description.clone(),
                    parameters: e.manifest.args.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    tools.extend(metnos_planner::turn::remember::tool_defs());
    tools.extend(metnos_planner::proactive::tools::tool_defs());
    tools.push(metnos_planner::turn::scratch::tool_def());
    // As the request carries them.
    let wire: Vec<serde_json::Value> = tools
        .iter()
        .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
        .collect();
    let (prompt, tool_tokens) = (
        tokens(system.len()),
        tokens(serde_json::to_string(&wire).map_or(0, |w| w.len())),
    );
    let total = prompt + tool_tokens;
    let said = format!(
        "the system prompt and the {} tools a turn may be offered are about {total} tokens (prompt {prompt}, tools {tool_tokens})",
        tools.len()
    );
    let context = match config.runtime.llm.get("fast") {
        Some(fast) => match metnos_llm::Provider::from_config("fast", fast) {
            Ok(provider) => provider.context_length(super::doctor::QUICK).await,
            Err(_) => None,
        },
        None => None,
    };
    match context {
        Some(context) if total * 100 > context * MOST_OF_CONTEXT => Check::warn(
            "prompt",
            format!(
                "{said}: {}% of the fast tier's context of {context} tokens",
                total * 100 / context.max(1)
            ),
            "give the model a larger context (Ollama: `num_ctx` in a Modelfile or OLLAMA_CONTEXT_LENGTH; llama-server: --ctx-size)",
        ),
        Some(context) => Check::ok(
            "prompt",
            format!(
                "{said}: {}% of the fast tier's context of {context} tokens",
                (total * 100).div_ceil(context.max(1))
            ),
        ),
        None => Check::ok(
            "prompt",
            format!("{said}; the fast tier's server does not say its context"),
        ),
    }
}
