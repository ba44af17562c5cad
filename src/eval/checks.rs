//! The checks of a turn that need no stack: its arguments, its answer, the files it left.

use std::path::Path;

use serde_json::Value;

use super::suite::{SITE, ToolExpect, Turn};

/// Whether `args` (as the model proposed them) hold what `tool` asks: each of its `args`
/// equal (text trimmed; a path written with `~` or the home is the same path; `{site}` the
/// pages' server), and each of its `args_contain` inside the argument's text.
pub fn args_fit(args: &Value, tool: &ToolExpect, home: &Path, site: &str) -> bool {
    let text_of = |v: &Value| match v {
        Value::String(s) => s.trim().to_owned(),
        other => other.to_string(),
    };
    let path_of = |s: &str| match s.strip_prefix('~') {
        Some(rest) => format!("{}{rest}", home.display()),
        None => s.to_owned(),
    };
    let equal = tool.args.iter().all(|(key, wanted)| {
        let Some(got) = args.get(key) else {
            return false;
        };
        let wanted = text_of(wanted).replace(SITE, site);
        let got = text_of(got);
        got == wanted || path_of(&got) == path_of(&wanted)
    });
    let contains = tool.args_contain.iter().all(|(key, part)| {
        let part = part.replace(SITE, site).to_lowercase();
        args.get(key)
            .is_some_and(|v| text_of(v).to_lowercase().contains(&part))
    });
    equal && contains
}

/// What the answer lacks of what the turn asks of it.
pub fn answer(turn: &Turn, text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut problems = Vec::new();
    // The model's own markup is never an answer a person should read.
    let shown: Vec<&str> = [
        "<think",
        "</think",
        "<tool_call",
        "<|python_tag|>",
        "{{step",
    ]
    .into_iter()
    .filter(|m| lower.contains(m))
    .collect();
    if !shown.is_empty() {
        problems.push(format!(
            "the answer shows the model's markup ({})",
            shown.join(", ")
        ));
    }
    let missing: Vec<&str> = turn
        .answer_has
        .iter()
        .filter(|w| !lower.contains(&w.to_lowercase()))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        problems.push(format!("the answer lacks {}", quoted(&missing)));
    }
    if !turn.answer_any.is_empty()
        && !turn
            .answer_any
            .iter()
            .any(|w| lower.contains(&w.to_lowercase()))
    {
        let words: Vec<&str> = turn.answer_any.iter().map(String::as_str).collect();
        problems.push(format!("the answer has none of {}", quoted(&words)));
    }
    if let Some(pattern) = &turn.answer_match
        && regex::Regex::new(pattern).is_ok_and(|r| !r.is_match(text))
    {
        problems.push(format!("the answer does not match /{pattern}/"));
    }
    problems
}

/// What the files of the home lack, or hold that they must not.
pub fn files(turn: &Turn, home: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for file in &turn.file_has {
        let path = home.join(&file.path);
        if path
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            problems.push(format!("~/{} is a link (a file was expected)", file.path));
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(text) if text.to_lowercase().contains(&file.text.to_lowercase()) => {}
            Ok(_) => problems.push(format!("~/{} does not hold \"{}\"", file.path, file.text)),
            Err(_) => problems.push(format!("~/{} was not written", file.path)),
        }
    }
    for path in &turn.no_file {
        if home.join(path).symlink_metadata().is_ok() {
            problems.push(format!("~/{path} was written (it must not be)"));
        }
    }
    problems
}

fn quoted(words: &[&str]) -> String {
    words
        .iter()
        .map(|w| format!("\"{w}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(args: Value, contain: Value) -> ToolExpect {
        serde_json::from_value(json!({"name": "t", "args": args, "args_contain": contain})).unwrap()
    }

    #[test]
    fn arguments_fit_by_value_by_path_and_by_part() {
        let home = Path::new("/tmp/h");
        let t = tool(json!({"path": "~/notes/a.txt"}), json!({}));
        assert!(args_fit(&json!({"path": "~/notes/a.txt"}), &t, home, ""));
        assert!(args_fit(
            &json!({"path": "/tmp/h/notes/a.txt "}),
            &t,
            home,
            ""
        ));
        assert!(!args_fit(&json!({"path": "~/notes/b.txt"}), &t, home, ""));
        assert!(!args_fit(&json!({}), &t, home, ""));
        let t = tool(json!({"url": "{site}/x"}), json!({"command": "EVAL"}));
        let site = "http://127.0.0.1:9";
        assert!(args_fit(
            &json!({"url": "http://127.0.0.1:9/x", "command": "echo eval-1"}),
            &t,
            home,
            site
        ));
        assert!(!args_fit(
            &json!({"url": "http://127.0.0.1:9/x", "command": "ls"}),
            &t,
            home,
            site
        ));
        let t = tool(json!({"limit": 5}), json!({}));
        assert!(args_fit(&json!({"limit": 5}), &t, home, ""));
    }

    #[test]
    fn an_answer_is_checked_for_all_any_and_a_pattern() {
        let turn: Turn = serde_json::from_value(json!({"say": "x",
            "answer_has": ["Trieste", "friday"], "answer_any": ["cannot", "can't"],
            "answer_match": "\\d\\d:\\d\\d"}))
        .unwrap();
        assert!(answer(&turn, "On FRIDAY in trieste, I can't say past 10:30").is_empty());
        let problems = answer(&turn, "On Monday");
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert_eq!(problems[0], "the answer lacks \"Trieste\", \"friday\"");
        let raw = "<tool_call>{\"name\": \"x\"}</tool_call> Friday Trieste can't 10:30";
        assert_eq!(
            answer(&turn, raw),
            ["the answer shows the model's markup (<tool_call)"]
        );
    }
}
