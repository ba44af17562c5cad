//! The call hash an approval binds to: a person approves exactly one executor call, and
//! only a call with the same hash may run on that approval.

use sha2::{Digest, Sha256};

/// The key of an approval request's `extra_json` that names the arguments whose value came,
/// through a `{{stepN…}}` reference, from what an earlier step of the turn observed: the
/// planner sets it, the approval service's card says so.
pub const FROM_EARLIER_STEPS: &str = "from_earlier_steps";

/// `args_json` is not a JSON object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("args_json is not a JSON object: {0}")]
pub struct ArgsError(pub String);

/// The hex sha256 of an executor call: the executor name, a newline, and the arguments as
/// canonical JSON (object keys sorted at every depth, no insignificant white space), so
/// the same call hashes the same however its JSON was spelled.
pub fn call_sha256(executor: &str, args_json: &str) -> Result<String, ArgsError> {
    let value: serde_json::Value =
        serde_json::from_str(args_json).map_err(|e| ArgsError(e.to_string()))?;
    value_sha256(executor, &value)
}

/// As [`call_sha256`], for arguments already parsed.
pub fn value_sha256(executor: &str, args: &serde_json::Value) -> Result<String, ArgsError> {
    if !args.is_object() {
        return Err(ArgsError("it is not an object".to_owned()));
    }
    let mut hasher = Sha256::new();
    hasher.update(executor.as_bytes());
    hasher.update(b"\n");
    hasher.update(canonical(args).as_bytes());
    Ok(hex::encode(hasher.finalize()))
}

fn canonical(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let inner: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", inner.join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_call_spelled_differently_hashes_the_same() {
        let a = call_sha256(
            "fs_write",
            r#"{"path":"/tmp/x","content":"hi","opts":{"b":1,"a":[1,2]}}"#,
        )
        .unwrap();
        let b = call_sha256(
            "fs_write",
            "{ \"opts\": {\"a\": [1, 2], \"b\": 1}, \"content\": \"hi\", \"path\": \"/tmp/x\" }",
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn a_changed_argument_or_executor_changes_the_hash() {
        let base = call_sha256("fs_write", r#"{"path":"/tmp/x","content":"hi"}"#).unwrap();
        let other_path = call_sha256("fs_write", r#"{"path":"/tmp/y","content":"hi"}"#).unwrap();
        let other_exec = call_sha256("fs_read", r#"{"path":"/tmp/x","content":"hi"}"#).unwrap();
        let reordered_array =
            call_sha256("fs_write", r#"{"path":"/tmp/x","content":["h","i"]}"#).unwrap();
        let other_array =
            call_sha256("fs_write", r#"{"path":"/tmp/x","content":["i","h"]}"#).unwrap();
        assert_ne!(base, other_path);
        assert_ne!(base, other_exec);
        assert_ne!(reordered_array, other_array, "array order is meaningful");
    }

    #[test]
    fn args_must_be_a_json_object() {
        assert!(call_sha256("x", "[1]").is_err());
        assert!(call_sha256("x", "not json").is_err());
        assert!(call_sha256("x", "{}").is_ok());
    }
}
