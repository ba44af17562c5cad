//! What the planner says beside a call (`extra_json`), read once into [`Extra`]: which
//! arguments carry an earlier step's content or the world's data into a sink, a write that
//! runs code later, the private data the turn read before sending elsewhere, the path as
//! written when a link leads elsewhere, and whether the call held invisible characters.
//! Each says something on the card; none of it is believed to lift a question (a caller can
//! only add warnings and take territory away).

use serde_json::Value;

use metnos_core::provenance::{
    MAX_LABELS, READ_PRIVATE, RUNS_CODE_LATER, TAINTED_SINK, THROUGH_LINK, UNNAMED_RECIPIENTS,
};

/// The key that says the call held invisible characters (set by this service).
const HAD_INVISIBLE: &str = "had_invisible";

/// A request's `extra_json`, parsed: a malformed or missing part is absent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extra {
    /// The arguments that carry an earlier step's content (at most 16).
    pub from_earlier: Vec<String>,
    /// The arguments carrying data from the world into a sink, with their sources' labels.
    pub tainted: Vec<crate::describe::Tainted>,
    /// The rule of a write that runs code later (the person's message named the path).
    pub runs_code_later: Option<String>,
    /// The private data the turn read before this call sends to another party (labels).
    pub read_private: Vec<String>,
    /// The path as the call wrote it, when a link leads it to the request's target.
    pub through_link: Option<String>,
    /// A mail's recipients the person's own message never named.
    pub unnamed_recipients: Vec<String>,
    pub had_invisible: bool,
}

fn strings(value: Option<&Value>, max: usize, chars: usize) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .take(max)
                .map(|s| s.chars().take(chars).collect())
                .collect()
        })
        .unwrap_or_default()
}

impl Extra {
    pub fn parse(extra_json: &str) -> Extra {
        let Ok(extra) = serde_json::from_str::<Value>(extra_json) else {
            return Extra::default();
        };
        let tainted = extra
            .get(TAINTED_SINK)
            .and_then(Value::as_array)
            .map(|entries| {
                entries
                    .iter()
                    .take(16)
                    .map(|entry| {
                        let arg = entry
                            .get("arg")
                            .and_then(Value::as_str)
                            .unwrap_or("?")
                            .chars()
                            .take(64)
                            .collect();
                        (arg, strings(entry.get("sources"), MAX_LABELS, usize::MAX))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Extra {
            from_earlier: strings(
                extra.get(crate::describe::FROM_EARLIER_STEPS),
                16,
                usize::MAX,
            ),
            tainted,
            runs_code_later: extra.get(RUNS_CODE_LATER).map(|marked| {
                marked
                    .get("rule")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .chars()
                    .take(64)
                    .collect()
            }),
            read_private: strings(extra.get(READ_PRIVATE), 4, 200),
            unnamed_recipients: strings(extra.get(UNNAMED_RECIPIENTS), 50, 320),
            through_link: extra
                .get(THROUGH_LINK)
                .and_then(Value::as_str)
                .map(|w| w.chars().take(1024).collect()),
            had_invisible: extra
                .get(HAD_INVISIBLE)
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    }

    /// Whether approving may concede more than this call: not when the call carries the
    /// world's data into a sink, runs code later, or sends after a private read (each is
    /// asked about every time).
    pub fn asks_every_time(&self) -> bool {
        !self.tainted.is_empty() || self.runs_code_later.is_some() || !self.read_private.is_empty()
    }
}

/// `extra_json` with the mark that its call held invisible characters.
pub fn mark_invisible(extra_json: &str) -> String {
    let mut extra =
        serde_json::from_str::<serde_json::Map<String, Value>>(extra_json).unwrap_or_default();
    extra.insert(HAD_INVISIBLE.to_owned(), Value::Bool(true));
    Value::Object(extra).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_part_reads_back_and_a_malformed_one_is_absent() {
        let extra = Extra::parse(
            r#"{"from_earlier_steps":["body"],"tainted_sink":[{"arg":"url","sources":["file:~/a"]}],
                "runs_code_later":{"rule":"write.home_hidden"},"read_private":["file:~/r.txt","shell"],
                "through_link":"~/q/x","had_invisible":true}"#,
        );
        assert_eq!(extra.from_earlier, ["body"]);
        assert_eq!(
            extra.tainted,
            [("url".to_owned(), vec!["file:~/a".to_owned()])]
        );
        assert_eq!(extra.runs_code_later.as_deref(), Some("write.home_hidden"));
        assert_eq!(extra.read_private, ["file:~/r.txt", "shell"]);
        assert_eq!(extra.through_link.as_deref(), Some("~/q/x"));
        assert!(extra.had_invisible && extra.asks_every_time());
        for malformed in [
            "",
            "[]",
            "not json",
            r#"{"read_private":"x","had_invisible":"yes"}"#,
        ] {
            let extra = Extra::parse(malformed);
            assert_eq!(extra, Extra::default(), "{malformed}");
            assert!(!extra.asks_every_time());
        }
        assert!(Extra::parse(&mark_invisible("")).had_invisible);
        assert!(Extra::parse(&mark_invisible(r#"{"read_private":["shell"]}"#)).had_invisible);
    }
}
