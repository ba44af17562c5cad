//! A shortcut offer's card (issue 46): the planner offers the owner to keep a chain of
//! existing executors as a named shortcut for a wish the model kept making. The card says
//! the wish, how often and the chain, from the request's arguments alone, once they are
//! checked to be plain names.

use metnos_core::language::Language;
use serde_json::Value;

use crate::describe::Described;

/// The most executors a shortcut's chain names after its first one.
pub const MAX_SHORTCUT_CHAIN: usize = 3;

/// What a shortcut offer says, when its arguments are what one must be: the wished
/// name, the first executor, one to [`MAX_SHORTCUT_CHAIN`] after it — executor names
/// only (lower-case letters, digits, `_`; MCP tools' `__`) — and how often it was wished.
pub fn shortcut_parts(args_json: &str) -> Option<(String, String, Vec<String>, u64)> {
    let args = serde_json::from_str::<Value>(args_json).ok()?;
    let object = args.as_object()?;
    if object
        .keys()
        .any(|k| !matches!(k.as_str(), "wanted" | "from" | "chain" | "uses"))
    {
        return None;
    }
    let name = |v: &Value| {
        v.as_str()
            .filter(|s| metnos_core::names::valid_tool_name(s))
            .map(str::to_owned)
    };
    // A wish is the model's name for a tool that does not exist: plain, not an executor's.
    let wish = object
        .get("wanted")?
        .as_str()
        .filter(|s| metnos_core::names::plain_name(s))?
        .to_owned();
    let chain: Vec<String> = object
        .get("chain")?
        .as_array()?
        .iter()
        .map(name)
        .collect::<Option<_>>()?;
    if !(1..=MAX_SHORTCUT_CHAIN).contains(&chain.len()) {
        return None;
    }
    // A wish is offered after three uses; a count beyond reason is not a card's.
    let uses = object
        .get("uses")?
        .as_u64()
        .filter(|n| (3..=1_000_000).contains(n))?;
    Some((wish, name(object.get("from")?)?, chain, uses))
}

/// A shortcut offer's card: the wish, how often, and the chain, from its arguments
/// (checked by [`shortcut_parts`] before a card is made).
pub fn shortcut_offer(args_json: &str, language: Language) -> Described {
    let (wanted, from, chain, uses) = shortcut_parts(args_json).unwrap_or_default();
    let it = language == Language::Italian;
    let steps = std::iter::once(from)
        .chain(chain)
        .collect::<Vec<_>>()
        .join(" → ");
    Described {
        verb: if it {
            format!("tenga una scorciatoia per «{wanted}»")
        } else {
            format!("keep a shortcut for `{wanted}`")
        },
        summary: if it {
            format!("«{wanted}» è stato chiesto {uses} volte; lo fa {steps} — da ora lo propongo")
        } else {
            format!("{wanted} was asked for {uses} times; {steps} does it — offered from now on")
        },
        had_invisible: false,
    }
}
