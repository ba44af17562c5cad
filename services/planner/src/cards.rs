//! What the approval card of a call says: the verb, the target, the capability class, in
//! the person's language (approval_ux seed: a 3-line card).

use metnos_executors::Executor;
use metnos_proto::approval::v1 as approval;

use metnos_core::language::Language;

use crate::turn::Checkpoint;

fn verb(capability: &str, italian: bool) -> &'static str {
    match (capability, italian) {
        ("fs:write", true) => "scriva",
        ("fs:write", false) => "write",
        ("fs:read", true) => "legga",
        ("fs:read", false) => "read",
        ("network:http", true) => "scarichi",
        ("network:http", false) => "download",
        ("code:exec", true) => "esegua",
        ("code:exec", false) => "run",
        ("mail:send", true) => "invii",
        ("mail:send", false) => "send",
        (_, true) => "usi",
        (_, false) => "use",
    }
}

/// The approval request for a call that policy said needs one.
pub fn pending_request(
    cp: &Checkpoint,
    executor: &Executor,
    capability: &str,
    target: &str,
    name: &str,
    args_json: &str,
    raw_args: &serde_json::Value,
) -> approval::CreatePendingRequest {
    let italian = cp.language != Some(Language::English);
    let shown_target = if target.is_empty() {
        name.to_owned()
    } else {
        target.to_owned()
    };
    let target_summary = if target.is_empty() {
        if italian {
            format!("con {name}")
        } else {
            format!("with {name}")
        }
    } else {
        shown_target.clone()
    };
    approval::CreatePendingRequest {
        requester: Some(cp.principal().to_proto()),
        request: Some(approval::ApprovalRequest {
            action_verb: verb(capability, italian).to_owned(),
            target_summary,
            capability_class: format!("{}:{}", name, shown_target),
            reversibility: if executor.manifest.critical {
                approval::Reversibility::Irreversible as i32
            } else {
                approval::Reversibility::Reversible as i32
            },
            territory_concession: approval::TerritoryConcession::None as i32,
            language: if italian {
                Language::Italian.to_wire()
            } else {
                Language::English.to_wire()
            },
            extra_json: extra_json(raw_args),
            ..Default::default()
        }),
        capability: capability.to_owned(),
        target: target.to_owned(),
        executor: name.to_owned(),
        args_json: args_json.to_owned(),
        ttl_seconds: 0,
        territory_target: String::new(),
        level: cp.level.to_wire(),
    }
}

/// What the approval service is told beside the call: which arguments came, through
/// `{{stepN…}}` references, from what earlier steps observed (the card says so).
fn extra_json(raw_args: &serde_json::Value) -> String {
    let from_earlier: Vec<&String> = raw_args
        .as_object()
        .map(|args| {
            args.iter()
                .filter(|(_, value)| !crate::piping::referenced_steps(value).is_empty())
                .map(|(key, _)| key)
                .collect()
        })
        .unwrap_or_default();
    if from_earlier.is_empty() {
        return String::new();
    }
    serde_json::json!({ metnos_core::call::FROM_EARLIER_STEPS: from_earlier }).to_string()
}
