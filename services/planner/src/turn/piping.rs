//! Data piping between steps (seed agent_runtime.md ch. 7): an argument whose whole value
//! is `{{stepN.field}}` becomes that value of step N's observation. `field` is a dotted
//! path (`content`, `metadata.path`, `content.items.0.name`); a bare name not at the top
//! of the observation is looked up in its metadata, then in its content
//! (`{{step1.bytes_written}}`). A reference to a missing step or field is an error the LLM
//! is told, so it can correct the call.

use std::collections::BTreeSet;

use serde_json::Value;

/// A reference to a step's field, as written in an argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub step: u32,
    pub path: Vec<String>,
}

/// Parses `{{stepN.a.b}}` (surrounding spaces allowed inside the braces).
pub fn parse_reference(text: &str) -> Option<Reference> {
    let inner = text.trim().strip_prefix("{{")?.strip_suffix("}}")?.trim();
    let rest = inner.strip_prefix("step")?;
    let (number, path) = rest.split_once('.').unwrap_or((rest, ""));
    let step: u32 = number.parse().ok()?;
    let path: Vec<String> = if path.is_empty() {
        Vec::new()
    } else {
        path.split('.').map(str::to_owned).collect()
    };
    if path.iter().any(String::is_empty) {
        return None;
    }
    Some(Reference { step, path })
}

/// The steps `args` refers to.
pub fn referenced_steps(args: &Value) -> BTreeSet<u32> {
    let mut steps = BTreeSet::new();
    visit(args, &mut |text| {
        if let Some(r) = parse_reference(text) {
            steps.insert(r.step);
        }
    });
    steps
}

/// Every well-formed reference in `args`, in the order written.
pub fn references(args: &Value) -> Vec<Reference> {
    let mut found = Vec::new();
    visit(args, &mut |text| found.extend(parse_reference(text)));
    found
}

fn visit(value: &Value, f: &mut impl FnMut(&str)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|v| visit(v, f)),
        Value::Object(map) => map.values().for_each(|v| visit(v, f)),
        _ => {}
    }
}

/// Why a reference cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PipeError {
    #[error("{reference}: there is no step {step} yet (steps so far: {available})")]
    NoStep {
        reference: String,
        step: u32,
        available: String,
    },
    #[error("{reference}: step {step} has no field `{field}` (it has: {fields})")]
    NoField {
        reference: String,
        step: u32,
        field: String,
        fields: String,
    },
    #[error(
        "{reference}: a reference must be the whole value of an argument, not inside a longer text"
    )]
    Embedded { reference: String },
}

fn walk<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| match v {
        Value::Object(map) => map.get(key),
        Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

fn field_names(observation: &Value) -> String {
    let mut names: Vec<String> = Vec::new();
    if let Some(map) = observation.as_object() {
        names.extend(map.keys().cloned());
        if let Some(meta) = map.get("metadata").and_then(Value::as_object) {
            names.extend(meta.keys().map(|k| format!("metadata.{k}")));
        }
    }
    names.join(", ")
}

/// Looks a reference up in `observation`.
fn lookup<'a>(observation: &'a Value, path: &[String]) -> Option<&'a Value> {
    if path.is_empty() {
        return Some(observation);
    }
    walk(observation, path)
        .or_else(|| observation.get("metadata").and_then(|m| walk(m, path)))
        .or_else(|| observation.get("content").and_then(|c| walk(c, path)))
}

/// The first `{{stepN…}}` reference inside a longer text. Other braces (a template's
/// `{{steps}}`, `{{ name }}`) are content, not references.
fn embedded_reference(text: &str) -> Option<&str> {
    let mut from = 0;
    while let Some(open) = text[from..].find("{{").map(|i| from + i) {
        let close = text[open..].find("}}").map(|i| open + i + 2)?;
        if parse_reference(&text[open..close]).is_some() {
            return Some(&text[open..close]);
        }
        from = open + 2;
    }
    None
}

/// `args` with every reference replaced; `observation(n)` gives step n's observation.
pub fn resolve(
    args: &Value,
    observation: &dyn Fn(u32) -> Option<Value>,
    steps_so_far: u32,
) -> Result<Value, PipeError> {
    match args {
        Value::String(text) => {
            if let Some(reference) = parse_reference(text) {
                let shown = text.trim().to_owned();
                let Some(obs) = observation(reference.step) else {
                    return Err(PipeError::NoStep {
                        reference: shown,
                        step: reference.step,
                        available: if steps_so_far == 0 {
                            "none".to_owned()
                        } else {
                            format!("1 to {steps_so_far}")
                        },
                    });
                };
                return lookup(&obs, &reference.path)
                    .cloned()
                    .ok_or_else(|| PipeError::NoField {
                        reference: shown,
                        step: reference.step,
                        field: reference.path.join("."),
                        fields: field_names(&obs),
                    });
            }
            if let Some(reference) = embedded_reference(text) {
                return Err(PipeError::Embedded {
                    reference: reference.to_owned(),
                });
            }
            Ok(args.clone())
        }
        Value::Array(items) => items
            .iter()
            .map(|v| resolve(v, observation, steps_so_far))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| resolve(v, observation, steps_so_far).map(|v| (k.clone(), v)))
            .collect::<Result<serde_json::Map<_, _>, _>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn history(step: u32) -> Option<Value> {
        match step {
            1 => Some(
                json!({"ok": true, "content": "<html>hi</html>", "metadata": {"status": 200, "final_url": "https://x"}}),
            ),
            2 => Some(
                json!({"ok": true, "content": {"items": [{"name": "a"}, {"name": "b"}]}, "metadata": {"bytes_written": 173}}),
            ),
            _ => None,
        }
    }

    #[test]
    fn the_seeds_fetch_and_save_example() {
        let args = json!({"path": "/tmp/out.txt", "content": "{{step1.content}}"});
        assert_eq!(
            resolve(&args, &history, 2).unwrap(),
            json!({"path": "/tmp/out.txt", "content": "<html>hi</html>"})
        );
        assert_eq!(referenced_steps(&args), BTreeSet::from([1]));
    }

    #[test]
    fn dotted_paths_reach_nested_fields_metadata_and_array_items() {
        let lookup = |text: &str| resolve(&json!({"x": text}), &history, 2).unwrap()["x"].clone();
        assert_eq!(lookup("{{step1.metadata.status}}"), json!(200));
        assert_eq!(lookup("{{ step2.bytes_written }}"), json!(173));
        assert_eq!(lookup("{{step2.content.items.1.name}}"), json!("b"));
        assert_eq!(lookup("{{step2.items.0}}"), json!({"name": "a"}));
        assert_eq!(lookup("not a reference"), json!("not a reference"));
    }

    #[test]
    fn missing_steps_and_fields_are_errors_the_llm_can_act_on() {
        let err = resolve(&json!({"x": "{{step3.content}}"}), &history, 2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "{{step3.content}}: there is no step 3 yet (steps so far: 1 to 2)"
        );
        let err = resolve(&json!({"x": "{{step1.body}}"}), &history, 2).unwrap_err();
        assert!(err.to_string().starts_with("{{step1.body}}: step 1 has no field `body` (it has: ok, content, metadata, metadata.status"), "{err}");
        let err = resolve(&json!({"x": "saved {{step1.content}} here"}), &history, 2).unwrap_err();
        assert!(
            matches!(err, PipeError::Embedded { reference } if reference == "{{step1.content}}")
        );
        let err =
            resolve(&json!({"x": "{{ a }} then {{step1.content}}"}), &history, 2).unwrap_err();
        assert!(
            matches!(err, PipeError::Embedded { reference } if reference == "{{step1.content}}")
        );
    }

    #[test]
    fn template_braces_that_are_not_references_are_content() {
        for text in [
            "<li>{{steps}}</li>",
            "{{ stepper.name }} and {{step}}",
            "{{stepx}} is not a reference",
            "{{ unclosed",
            "}} {{",
        ] {
            assert_eq!(
                resolve(&json!({"content": text}), &history, 2).unwrap(),
                json!({"content": text}),
                "{text}"
            );
        }
    }

    proptest::proptest! {
        /// Any text the LLM writes resolves or is refused with a reason; never a panic.
        #[test]
        fn any_text_resolves_or_is_refused(text in "[a-z0-9 {}.]{0,40}") {
            let _ = resolve(&json!({"x": text.clone(), "y": [text]}), &history, 2);
        }
    }
}
