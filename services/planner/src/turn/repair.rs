//! What small local models really send, repaired before the turn goes on (issue 42): a
//! tool call written as text (Qwen/Hermes `<tool_call>`, a lone JSON object, Llama 3.1's
//! `<|python_tag|>`), `<think>` blocks, arguments of the wrong type, a name that almost
//! exists, an empty answer, an answer still holding `{{step…}}`. Pure functions; the turn
//! loop applies them and its log keeps each repair's kind (never what was repaired).

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One repair, as the turn log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Repair {
    /// `<think>…</think>` taken out of what the model wrote.
    Think,
    /// A tool call written in the text, taken as a call.
    TextToolCall,
    /// Arguments coerced to the tool's schema (`"5"` for an integer).
    ArgsCoerced,
    /// A tool name that does not exist, answered with the closest offered.
    UnknownTool,
    /// The same call with the same arguments a third time: not run.
    RepeatedCall,
    /// An empty answer: asked again.
    EmptyAnswer,
    /// An answer holding a `{{step…}}` reference: asked to write it again.
    Placeholder,
    /// A tool call written in the text that cannot be read (broken JSON, no tool of that
    /// name): asked to write it again.
    BadToolCall,
    /// A native tool call whose arguments are not a JSON object: asked again.
    BadArguments,
}

impl Repair {
    pub fn as_str(self) -> &'static str {
        match self {
            Repair::Think => "think",
            Repair::TextToolCall => "text_tool_call",
            Repair::ArgsCoerced => "args_coerced",
            Repair::UnknownTool => "unknown_tool",
            Repair::RepeatedCall => "repeated_call",
            Repair::EmptyAnswer => "empty_answer",
            Repair::Placeholder => "placeholder",
            Repair::BadToolCall => "bad_tool_call",
            Repair::BadArguments => "bad_arguments",
        }
    }
}

/// How much of a call's text is checked for a copy of the world's data.
const HEAD: usize = 64;

/// The longest tool name compared for closeness.
pub const MAX_NAME: usize = 64;

/// What the model is told after an empty answer.
pub const EMPTY_NOTE: &str = "(Metnos) Your answer was empty. Answer the person's request in \
plain text, or call one of the tools.";

/// What the model is told after an answer holding `{{step…}}` references.
pub const PLACEHOLDER_NOTE: &str = "(Metnos) Your answer contains {{step…}} references, which \
the person cannot read. Write the answer again with the actual values in place of every \
{{…}} reference.";

/// What the model is told after a tool call written in its text that cannot be read.
pub const BAD_CALL_NOTE: &str = "(Metnos) Your tool call could not be read. Call an offered \
tool by its exact name with a valid JSON object of arguments, as \
<tool_call>{\"name\": \"<tool>\", \"arguments\": {…}}</tool_call>, or answer in plain text.";

/// What the model is told of a call whose arguments were not a JSON object: the tool's
/// name as it wrote it (cut short) and the parser's word (a place, never a value).
pub fn bad_arguments_note(tool: &str, why: &str) -> String {
    let tool: String = tool
        .chars()
        .take(MAX_NAME)
        .filter(|c| !c.is_control())
        .collect();
    format!(
        "(Metnos) Your call of `{tool}` could not be run: its arguments must be a JSON object, and they were {why}. Call it again with valid JSON arguments, or answer in plain text."
    )
}

/// Whether `text`, outside any fence of world data, holds the markup of a tool call
/// (`<tool_call>`, `<|python_tag|>`).
pub fn has_call_markup(text: &str) -> bool {
    let outside = FENCED.replace_all(text, " ");
    let lower = outside.to_lowercase();
    lower.contains("<tool_call>") || lower.contains("<|python_tag|>")
}

/// A fence of world data in a model's text, closed or to the end.
static FENCED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?is)<<\s*untrusted-data.*?(?:<<\s*end-untrusted-data[^>]*>>|\z)")
        .expect("a valid pattern")
});

/// `text` without its thinking, which a model writes first: the `<think>…</think>` blocks
/// it opens with, whatever precedes the first `</think>` when no block was opened (a
/// template that opened it in the prompt), and a `<think>` it opens with and never closes
/// (cut off while thinking). Tags further on are the answer's own words (the world's are
/// disarmed in its fence): never a way to hide the answer's end. `None`: there was none.
pub fn strip_think(text: &str) -> Option<String> {
    static LEADING: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?is)\A(?:\s*<\s*think(?:ing)?\s*>.*?<\s*/\s*think(?:ing)?\s*>)+")
            .expect("a valid pattern")
    });
    static CLOSE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)<\s*/\s*think(?:ing)?\s*>").expect("a valid pattern"));
    static OPEN: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)\A\s*<\s*think(?:ing)?\s*>").expect("a valid pattern"));
    if let Some(block) = LEADING.find(text) {
        return Some(text[block.end()..].trim().to_owned());
    }
    if OPEN.is_match(text) {
        return Some(String::new());
    }
    CLOSE
        .find(text)
        .map(|close| text[close.end()..].trim().to_owned())
}

/// Whether an answer still holds a `{{stepN…}}` reference.
pub fn has_placeholder(text: &str) -> bool {
    static REF: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\{\{\s*step\s*\d+").expect("a valid pattern"));
    REF.is_match(text)
}

/// A tool call found in a model's text.
#[derive(Debug, Clone, PartialEq)]
pub struct TextCall {
    pub name: String,
    pub arguments: Value,
    /// How the call's own JSON text begins, as written and as compact JSON (the name, the
    /// first arguments): what a page that carried the call would hold too, checked for a
    /// copy of the world's data. (Its later arguments may copy the world: what a call
    /// carries is checked like any call's.)
    pub heads: [String; 2],
}

/// What a model's text held: its calls, and the text left around them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Found {
    pub calls: Vec<TextCall>,
    pub rest: String,
}

/// The tool calls written in `text`, in the common text forms: Qwen/Hermes
/// `<tool_call>{…}</tool_call>`, Llama 3.1 `<|python_tag|>{…}`, and a lone JSON object
/// (or array of them, or one in a code fence) that is the whole text. A call is
/// `{"name": …, "arguments"|"parameters": {…}}`; it is taken only when its JSON parses and
/// its name is in `offered` — or, inside the tags that say it is a call, a name close to an
/// offered one ([`closest`]: the model is then told which it meant). Text inside a fence of world data
/// (`<<untrusted-data …>>` to its end) is the model quoting the world: never searched.
/// Nothing found: `None`.
pub fn calls_in_text(text: &str, offered: &[&str]) -> Option<Found> {
    let outside = FENCED.replace_all(text, " ");
    let found = tagged(&outside, offered).or_else(|| lone_json(&outside, offered))?;
    (!found.calls.is_empty()).then_some(found)
}

/// `<tool_call>…</tool_call>` (an unclosed last one to the end) and `<|python_tag|>…`.
fn tagged(text: &str, offered: &[&str]) -> Option<Found> {
    static TOOL_CALL: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?is)<tool_call>\s*(.*?)\s*(?:</tool_call>|\z)").expect("a valid pattern")
    });
    static PYTHON_TAG: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?s)<\|python_tag\|>\s*(.*?)\s*(?:<\|eom_id\|>|<\|eot_id\|>|\z)")
            .expect("a valid pattern")
    });
    let mut calls = Vec::new();
    let mut rest = text.to_owned();
    for pattern in [&*TOOL_CALL, &*PYTHON_TAG] {
        let mut matched = false;
        for block in pattern.captures_iter(text) {
            matched = true;
            let whole = block.get(0).map_or("", |m| m.as_str());
            let body = block.get(1).map_or("", |m| m.as_str());
            // Llama may write several calls after one tag, separated by `;`.
            for (value, raw) in json_values(strip_code_fence(body)) {
                let near = |name: &str| !closest(name, offered).is_empty();
                if let Some(call) = call_of(&value, raw, offered, &near) {
                    calls.push(call);
                }
            }
            rest = rest.replacen(whole, "", 1);
        }
        if matched {
            return Some(Found {
                calls,
                rest: rest.trim().to_owned(),
            });
        }
    }
    None
}

/// The whole text as one JSON call (or an array of calls), in a code fence or not.
fn lone_json(text: &str, offered: &[&str]) -> Option<Found> {
    let body = strip_code_fence(text.trim());
    let value: Value = serde_json::from_str(body).ok()?;
    let items = match value {
        Value::Array(items) => items,
        one => vec![one],
    };
    // A lone call is checked on its text as written; the items of an array, each on its
    // own (compact) text, the first on the array's text as written too.
    let calls: Option<Vec<TextCall>> = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let raw = if i == 0 {
                body.to_owned()
            } else {
                item.to_string()
            };
            call_of(item, &raw, offered, &|_| false)
        })
        .collect();
    Some(Found {
        calls: calls?,
        rest: String::new(),
    })
}

/// The JSON values one after another in `text` (separated by blanks, `;` or `,`), as many
/// as parse from its start, each with its own text.
fn json_values(text: &str) -> Vec<(Value, &str)> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        match values.next() {
            Some(Ok(value)) => {
                out.push((value, rest[..values.byte_offset()].trim()));
                rest = rest[values.byte_offset()..]
                    .trim_start_matches(|c: char| c.is_whitespace() || c == ';' || c == ',');
            }
            _ => break,
        }
    }
    out
}

/// ```` ```json … ``` ```` around `text`, taken off.
fn strip_code_fence(text: &str) -> &str {
    let trimmed = text.trim();
    let Some(inner) = trimmed.strip_prefix("```") else {
        return trimmed;
    };
    let inner = inner.strip_suffix("```").unwrap_or(inner);
    // The fence's language word, up to the first line's end.
    match inner.split_once('\n') {
        Some((lang, body)) if !lang.trim_start().starts_with(['{', '[']) => body.trim(),
        _ => inner.trim(),
    }
}

/// A call from `{"name", "arguments"|"parameters"}` (or `{"function": {…}}`), when the
/// name is offered and the arguments are an object (or a string holding one).
fn call_of(
    value: &Value,
    raw: &str,
    offered: &[&str],
    near: &dyn Fn(&str) -> bool,
) -> Option<TextCall> {
    let value = value
        .get("function")
        .filter(|f| f.is_object())
        .unwrap_or(value);
    let name = value.get("name")?.as_str()?;
    if !offered.contains(&name) && !near(name) {
        return None;
    }
    let arguments = match value.get("arguments").or_else(|| value.get("parameters")) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(text)) => serde_json::from_str::<Value>(text).ok()?,
        Some(other) => other.clone(),
    };
    if !arguments.is_object() {
        return None;
    }
    let compact = format!(
        "{{\"name\":{},\"arguments\":{arguments}}}",
        Value::from(name)
    );
    Some(TextCall {
        name: name.to_owned(),
        arguments,
        heads: [
            raw.chars().take(HEAD).collect(),
            compact.chars().take(HEAD).collect(),
        ],
    })
}

/// `args` coerced to `schema` where a value has the wrong type and only one reading fits:
/// a number or a boolean written as a string, a number where a string is asked, one value
/// where an array is asked, an object or array written as a JSON string. Whether anything
/// changed. What does not fit one reading is left for the schema's own complaint.
///
/// A string `copied(text)` says came from the world is never read as JSON: its pieces
/// would each be too short to be seen as a copy, where the string is.
pub fn coerce(args: &mut Value, schema: &Value, copied: &dyn Fn(&str) -> bool) -> bool {
    let (Some(map), Some(properties)) = (
        args.as_object_mut(),
        schema.get("properties").and_then(Value::as_object),
    ) else {
        return false;
    };
    let mut changed = false;
    for (key, value) in map.iter_mut() {
        if matches!(value, Value::String(s) if copied(s)) {
            continue;
        }
        if let Some(coerced) = properties.get(key).and_then(|p| coerced(value, p)) {
            *value = coerced;
            changed = true;
        }
    }
    changed
}

/// `value` as `property` asks for it, when it is not and one reading fits.
fn coerced(value: &Value, property: &Value) -> Option<Value> {
    let kind = property.get("type")?.as_str()?;
    match (kind, value) {
        ("integer", Value::String(s)) => s.trim().parse::<i64>().ok().map(Value::from),
        ("number", Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number)),
        ("boolean", Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        ("string", Value::Number(n)) => Some(Value::String(n.to_string())),
        ("string", Value::Bool(b)) => Some(Value::String(b.to_string())),
        ("object", Value::String(s)) => serde_json::from_str::<Value>(s)
            .ok()
            .filter(Value::is_object),
        ("array", Value::String(s)) if s.trim_start().starts_with('[') => {
            serde_json::from_str::<Value>(s)
                .ok()
                .filter(Value::is_array)
        }
        ("array", Value::Array(_)) => None,
        ("array", one) => {
            let items = property.get("items");
            let one = match items.and_then(|i| coerced(one, i)) {
                Some(fitted) => fitted,
                None if fits(one, items) => one.clone(),
                None => return None,
            };
            Some(Value::Array(vec![one]))
        }
        _ => None,
    }
}

/// Whether `value` has the type `items` names (no `items`, or no type: any value).
fn fits(value: &Value, items: Option<&Value>) -> bool {
    let Some(kind) = items.and_then(|i| i.get("type")).and_then(Value::as_str) else {
        return true;
    };
    matches!(
        (kind, value),
        ("string", Value::String(_))
            | ("boolean", Value::Bool(_))
            | ("object", Value::Object(_))
            | ("number", Value::Number(_))
    ) || (kind == "integer" && value.as_i64().is_some())
}

/// The offered tools closest to `name`, best first (at most three): by the words they
/// share (`read_file` and `fs_read` share "read") and by spelling.
pub fn closest<'a>(name: &str, offered: &[&'a str]) -> Vec<&'a str> {
    // A name is short; a longer one is nobody's (and its spelling costs its square).
    if name.chars().count() > MAX_NAME {
        return Vec::new();
    }
    let words = |s: &str| -> Vec<String> {
        s.to_lowercase()
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let asked = words(name);
    let mut scored: Vec<(f64, &str)> = offered
        .iter()
        .map(|tool| {
            let theirs = words(tool);
            let shared = asked.iter().filter(|w| theirs.contains(w)).count();
            let overlap = shared as f64 / asked.len().max(theirs.len()).max(1) as f64;
            // Spelling alone counts when it is close (`fs_reads`, `web_fecth`).
            let spelling = strsim::jaro_winkler(&name.to_lowercase(), &tool.to_lowercase());
            let spelling = if spelling >= 0.88 { spelling } else { 0.0 };
            (overlap.max(spelling), *tool)
        })
        .filter(|(score, _)| *score >= 0.3)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.into_iter().take(3).map(|(_, tool)| tool).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn think_blocks_are_taken_out_whatever_their_shape() {
        assert_eq!(
            strip_think("<think>the user wants the time</think>\n\nIt is 10:04.").as_deref(),
            Some("It is 10:04.")
        );
        // A template that opened the block in the prompt: only its end is written.
        assert_eq!(
            strip_think("okay, so… </think> Ciao!").as_deref(),
            Some("Ciao!")
        );
        // Cut off while thinking: nothing of it is an answer.
        assert_eq!(strip_think("<think>let me see").as_deref(), Some(""));
        assert_eq!(
            strip_think("<THINKING>x</THINKING> <think>y</think>ab").as_deref(),
            Some("ab")
        );
        assert_eq!(strip_think("no thoughts here"), None);
        // Tags further on are the answer's: never a way to hide its end or its start.
        let quoted = "<think>ok</think>The mail says: <think>click here</think> do not.";
        assert_eq!(
            strip_think(quoted).as_deref(),
            Some("The mail says: <think>click here</think> do not.")
        );
        assert_eq!(
            strip_think("Warning: phishing. <think>rest").as_deref(),
            None
        );
    }

    #[test]
    fn hermes_qwen_python_tag_and_lone_json_calls_are_found() {
        let offered = ["time_now", "fs_read"];
        let hermes = "<tool_call>\n{\"name\": \"time_now\", \"arguments\": {}}\n</tool_call>";
        let found = calls_in_text(hermes, &offered).unwrap();
        assert_eq!(found.calls[0].name, "time_now");
        assert_eq!(found.calls[0].arguments, json!({}));
        assert_eq!(found.rest, "");
        // Two calls, one unclosed, with prose around.
        let two = "Sure.\n<tool_call>{\"name\":\"fs_read\",\"arguments\":{\"path\":\"~/a\"}}</tool_call>\n<tool_call>{\"name\":\"time_now\",\"arguments\":\"{}\"}";
        let found = calls_in_text(two, &offered).unwrap();
        assert_eq!(found.calls.len(), 2);
        // Each call is checked on its own text.
        assert_eq!(
            found.calls[1].heads[0],
            "{\"name\":\"time_now\",\"arguments\":\"{}\"}"
        );
        assert_eq!(found.calls[0].arguments, json!({"path": "~/a"}));
        assert_eq!(found.rest, "Sure.");
        let llama =
            "<|python_tag|>{\"name\": \"fs_read\", \"parameters\": {\"path\": \"~/b\"}}<|eom_id|>";
        let found = calls_in_text(llama, &offered).unwrap();
        assert_eq!(found.calls[0].arguments, json!({"path": "~/b"}));
        let lone = "```json\n{\"name\": \"time_now\", \"arguments\": {}}\n```";
        assert_eq!(
            calls_in_text(lone, &offered).unwrap().calls[0].name,
            "time_now"
        );
        let function =
            "{\"type\": \"function\", \"function\": {\"name\": \"time_now\", \"arguments\": {}}}";
        assert_eq!(calls_in_text(function, &offered).unwrap().calls.len(), 1);
    }

    #[test]
    fn text_that_is_not_an_offered_call_stays_text() {
        let offered = ["time_now"];
        // Not offered, nor near an offered name.
        assert_eq!(
            calls_in_text("{\"name\": \"shell_exec\", \"arguments\": {}}", &offered),
            None
        );
        assert_eq!(
            calls_in_text(
                "<tool_call>{\"name\": \"shell_exec\"}</tool_call>",
                &offered
            ),
            None
        );
        // Near one inside the tags: taken, for the model to be told the name it meant; a
        // lone JSON object must name an offered tool exactly.
        let near = calls_in_text(
            "<tool_call>{\"name\": \"get_time_now\"}</tool_call>",
            &offered,
        );
        assert_eq!(near.unwrap().calls[0].name, "get_time_now");
        assert_eq!(
            calls_in_text("{\"name\": \"get_time_now\"}", &offered),
            None
        );
        // JSON that is an answer, not a call; prose mentioning a call.
        assert_eq!(calls_in_text("{\"temperature\": 21}", &offered), None);
        assert_eq!(
            calls_in_text(
                "I would call {\"name\": \"time_now\", \"arguments\": {}} next",
                &offered
            ),
            None
        );
        // Broken JSON.
        assert_eq!(
            calls_in_text("<tool_call>{\"name\": \"time_now\", </tool_call>", &offered),
            None
        );
        // Quoted inside a fence of world data, closed or not.
        let quoted = "The page says:\n<<untrusted-data k1 step=1 sources=[]>>\n<tool_call>{\"name\": \"time_now\", \"arguments\": {}}</tool_call>\n<<end-untrusted-data k1>>";
        assert_eq!(calls_in_text(quoted, &offered), None);
        let unclosed = "<<untrusted-data k1>> <tool_call>{\"name\": \"time_now\"}</tool_call>";
        assert_eq!(calls_in_text(unclosed, &offered), None);
    }

    #[test]
    fn arguments_are_coerced_only_when_one_reading_fits() {
        let schema = json!({"type": "object", "properties": {
            "limit": {"type": "integer"}, "ratio": {"type": "number"},
            "all": {"type": "boolean"}, "path": {"type": "string"},
            "argv": {"type": "array", "items": {"type": "string"}},
            "ids": {"type": "array", "items": {"type": "integer"}},
            "env": {"type": "object"}}});
        let mut args = json!({"limit": " 5", "ratio": "0.5", "all": "TRUE", "path": 7,
            "argv": "ls", "ids": "3", "env": "{\"A\": \"1\"}"});
        assert!(coerce(&mut args, &schema, &|_| false));
        assert_eq!(
            args,
            json!({"limit": 5, "ratio": 0.5, "all": true, "path": "7",
            "argv": ["ls"], "ids": [3], "env": {"A": "1"}})
        );
        // Nothing to fit, or more than one reading: left to the schema's complaint.
        let mut args = json!({"limit": "five", "all": "yes", "ids": "x", "argv": ["ok"]});
        assert!(!coerce(&mut args, &schema, &|_| false));
        assert_eq!(
            args,
            json!({"limit": "five", "all": "yes", "ids": "x", "argv": ["ok"]})
        );
        // A string copied from the world stays one string (its copy stays visible).
        let mut args = json!({"env": "{\"A\": \"1\"}", "limit": "5"});
        assert!(coerce(&mut args, &schema, &|s| s.starts_with('{')));
        assert_eq!(args, json!({"env": "{\"A\": \"1\"}", "limit": 5}));
    }

    #[test]
    fn the_closest_offered_tools_are_named() {
        let offered = ["fs_read", "fs_write", "fs_list", "time_now", "web_fetch"];
        assert_eq!(closest("read_file", &offered)[0], "fs_read");
        assert_eq!(closest("fs_reads", &offered)[0], "fs_read");
        assert_eq!(closest("get_time", &offered)[0], "time_now");
        assert_eq!(closest("fetch_url", &offered)[0], "web_fetch");
        assert!(closest("zzzz", &offered).is_empty());
        assert_eq!(closest("web_fecth", &offered)[0], "web_fetch");
        assert!(closest("no_such_tool", &["memory_save", "fs_read"]).is_empty());
        assert!(closest(&"fs_read".repeat(100_000), &offered).is_empty());
    }

    #[test]
    fn call_markup_is_seen_outside_fences_only() {
        assert!(has_call_markup("<tool_call>{\"name\": broken</tool_call>"));
        assert!(has_call_markup("<|python_tag|>{"));
        assert!(!has_call_markup(
            "<<untrusted-data k1 step=1>>\n<tool_call>x</tool_call>\n<<end-untrusted-data k1>>"
        ));
        assert!(!has_call_markup("plain words"));
    }

    #[test]
    fn placeholders_are_seen() {
        assert!(has_placeholder("The file says {{step1.content}}."));
        assert!(has_placeholder("{{ step2.metadata.path }}"));
        assert!(!has_placeholder("curly {{braces}} are fine"));
    }
}
