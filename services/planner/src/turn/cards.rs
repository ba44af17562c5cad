//! What the approval card of a call says: the verb, the target, the capability class, in
//! the person's language (approval_ux seed: a 3-line card).

use metnos_executors::Executor;
use metnos_proto::approval::v1 as approval;

use metnos_core::capability::Capability;
use metnos_core::language::Language;

use crate::turn::vetting::Cleared;
use crate::turn::{Call, Checkpoint};

fn verb(capability: Capability, italian: bool) -> &'static str {
    match (capability, italian) {
        (Capability::FsWrite, true) => "scriva",
        (Capability::FsWrite, false) => "write",
        (Capability::FsRead, true) => "legga",
        (Capability::FsRead, false) => "read",
        (Capability::NetworkHttp, true) => "scarichi",
        (Capability::NetworkHttp, false) => "download",
        (Capability::CodeExec, true) => "esegua",
        (Capability::CodeExec, false) => "run",
        (Capability::MailSend, true) => "invii",
        (Capability::MailSend, false) => "send",
        (Capability::MailRead, true) => "legga la posta",
        (Capability::MailRead, false) => "read mail",
        (Capability::CalendarRead, true) => "legga il calendario",
        (Capability::CalendarRead, false) => "read a calendar",
        (Capability::CalendarWrite, true) => "aggiunga al calendario",
        (Capability::CalendarWrite, false) => "add to a calendar",
        (_, true) => "usi",
        (_, false) => "use",
    }
}

/// What a card asks about: the call's arguments as they will run, the approval request, and
/// the resolved path of a write that runs code later it names (the only such path the
/// approved call may write).
pub(crate) struct Asked {
    pub args: serde_json::Value,
    pub request: metnos_proto::approval::v1::CreatePendingRequest,
    pub named_write: Option<String>,
}

/// The approval request for `call`, cleared by the filters, that needs a person's yes on
/// `capability`.
pub fn pending_request(
    cp: &Checkpoint,
    call: &Call,
    cleared: &Cleared,
    capability: Capability,
) -> approval::CreatePendingRequest {
    let executor: &Executor = &cleared.executor;
    // What the call really touches: a link on the way is followed, and the card says so.
    let target = cleared
        .resolved_target
        .as_deref()
        .unwrap_or(cleared.target.as_str());
    let name = call.name.as_str();
    let args_json = cleared.args.to_string();
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
            extra_json: extra_json(
                &call.arguments,
                &cleared.tainted,
                cleared.runs_code_later.as_ref().map(|r| r.rule),
                cleared
                    .resolved_target
                    .as_ref()
                    .map(|_| cleared.target.as_str()),
                &cleared.read_private,
                &unnamed_recipients(name, &cleared.args, &cp.query),
            ),
            ..Default::default()
        }),
        capability: capability.name().to_owned(),
        target: target.to_owned(),
        executor: name.to_owned(),
        args_json,
        ttl_seconds: 0,
        territory_target: String::new(),
        level: cp.level.to_wire(),
    }
}

/// The recipients of a mail (`to` and `cc`) that the person's own message does not name:
/// an address from a message read, a page or a file is marked on the card. An address is
/// named only when the message holds it whole (`b@acme.co` is not named by `bob@acme.com`);
/// a recipient written with quotes or a comment is never taken apart here, it is marked
/// as written (mail_send refuses quoted local parts anyway).
fn unnamed_recipients(executor: &str, args: &serde_json::Value, query: &str) -> Vec<String> {
    if executor != "mail_send" {
        return Vec::new();
    }
    let said = addresses_in(query);
    ["to", "cc"]
        .iter()
        .filter_map(|k| args.get(*k).and_then(serde_json::Value::as_str))
        .flat_map(|list| list.split(','))
        .map(str::trim)
        .filter(|one| !one.is_empty())
        .filter_map(|one| {
            if one.contains(['"', '(', ')', '\\']) {
                return Some(one.to_owned());
            }
            let address = match (one.rfind('<'), one.rfind('>')) {
                (Some(open), Some(close)) if open < close => &one[open + 1..close],
                _ => one,
            }
            .trim()
            .to_lowercase();
            (address.is_empty() || !said.contains(&address)).then(|| one.to_owned())
        })
        .take(50)
        .collect()
}

/// The mail addresses a text holds, whole, in lower case.
fn addresses_in(text: &str) -> std::collections::HashSet<String> {
    let address_char = |c: char| c.is_alphanumeric() || "._%+-@".contains(c);
    text.to_lowercase()
        .split(|c: char| !address_char(c))
        .map(|word| word.trim_matches('.'))
        .filter(|word| word.contains('@'))
        .map(str::to_owned)
        .collect()
}

/// What the approval service is told beside the call: which arguments came, through
/// `{{stepN…}}` references, from what earlier steps observed, and which carry data from
/// the world into a sink, from where (the card says so, and offers no territory: a grant
/// does not lift that question).
fn extra_json(
    raw_args: &serde_json::Value,
    tainted: &[crate::turn::taint::Carried],
    runs_code_later: Option<&str>,
    through_link: Option<&str>,
    read_private: &[String],
    unnamed_recipients: &[String],
) -> String {
    let from_earlier: Vec<String> = raw_args
        .as_object()
        .map(|args| {
            args.iter()
                .filter(|(_, value)| !crate::turn::piping::referenced_steps(value).is_empty())
                .take(16)
                .map(|(key, _)| key.chars().take(64).collect())
                .collect()
        })
        .unwrap_or_default();
    // Within what the approval service takes (16 KiB of extra, escaping included): eight
    // arguments, up to four sources each (files and commands first: they were sorted so),
    // fewer and shorter if the text needs much escaping.
    let sinks_within = |sources_each: usize, bytes_each: usize| -> Vec<serde_json::Value> {
        tainted
            .iter()
            .filter(|c| c.sink)
            .take(8)
            .map(|c| {
                let sources: Vec<String> = c
                    .sources
                    .iter()
                    .take(sources_each)
                    .map(|l| {
                        let mut end = l.len().min(bytes_each);
                        while !l.is_char_boundary(end) {
                            end -= 1;
                        }
                        l[..end].to_owned()
                    })
                    .collect();
                serde_json::json!({"arg": c.arg.chars().take(64).collect::<String>(), "sources": sources})
            })
            .collect()
    };
    let sinks = [(4, 200), (1, 64), (1, 16)]
        .into_iter()
        .map(|(n, bytes)| sinks_within(n, bytes))
        .find(|sinks| serde_json::Value::from(sinks.clone()).to_string().len() <= 12_000)
        .unwrap_or_else(|| sinks_within(0, 0));
    let mut extra = serde_json::Map::new();
    if !from_earlier.is_empty() {
        extra.insert(
            metnos_core::call::FROM_EARLIER_STEPS.to_owned(),
            serde_json::json!(from_earlier),
        );
    }
    if !sinks.is_empty() {
        extra.insert(
            metnos_core::provenance::TAINTED_SINK.to_owned(),
            serde_json::Value::Array(sinks),
        );
    }
    if !read_private.is_empty() {
        let labels: Vec<String> = read_private
            .iter()
            .map(|l| l.chars().take(200).collect())
            .collect();
        extra.insert(
            metnos_core::provenance::READ_PRIVATE.to_owned(),
            serde_json::json!(labels),
        );
    }
    if let Some(written) = through_link {
        extra.insert(
            metnos_core::provenance::THROUGH_LINK.to_owned(),
            serde_json::json!(written.chars().take(1024).collect::<String>()),
        );
    }
    if let Some(rule) = runs_code_later {
        extra.insert(
            metnos_core::provenance::RUNS_CODE_LATER.to_owned(),
            serde_json::json!({ "rule": rule }),
        );
    }
    if !unnamed_recipients.is_empty() {
        let unnamed: Vec<String> = unnamed_recipients
            .iter()
            .map(|a| a.chars().take(320).collect())
            .collect();
        extra.insert(
            metnos_core::provenance::UNNAMED_RECIPIENTS.to_owned(),
            serde_json::json!(unnamed),
        );
    }
    if extra.is_empty() {
        return String::new();
    }
    serde_json::Value::Object(extra).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipients_the_person_never_named_are_found_however_written() {
        let args = serde_json::json!({
            "to": "Mario <Mario@Plumber.example>, x@evil.example",
            "cc": " Anna@Example.org ",
        });
        let query = "reply to mario@plumber.example that Tuesday is fine, copy anna@example.org.";
        assert_eq!(
            unnamed_recipients("mail_send", &args, query),
            ["x@evil.example"]
        );
        // Named means named whole; quotes are never taken apart.
        for sneaky in [
            "b@acme.co",
            r#""<>"@evil.example"#,
            r#""<mario@plumber.example>"@evil.example"#,
            "mario@plumber.example (x@evil.example)",
        ] {
            let args = serde_json::json!({"to": sneaky});
            let query = "write to bob@acme.com and mario@plumber.example";
            assert_eq!(
                unnamed_recipients("mail_send", &args, query),
                [sneaky],
                "{sneaky}"
            );
        }
        assert!(unnamed_recipients("web_fetch", &args, "").is_empty());
    }
    use crate::turn::taint::{Carried, How};

    #[test]
    fn the_sources_sent_with_a_card_fit_the_approval_services_limit_and_never_vanish() {
        // Labels that escape to six bytes a character (control characters in file names).
        let label = format!("file:~/{}", "\u{1}".repeat(500));
        let tainted: Vec<Carried> = (0..20)
            .map(|i| Carried {
                arg: format!("arg{i}{}", "\u{1}".repeat(100)),
                from_steps: vec![1],
                sources: vec![label.clone(); 16],
                how: vec![How::Copied],
                sink: true,
            })
            .collect();
        let extra = extra_json(&serde_json::json!({}), &tainted, None, None, &[], &[]);
        assert!(extra.len() <= 16 * 1024, "{}", extra.len());
        let value: serde_json::Value = serde_json::from_str(&extra).unwrap();
        assert_eq!(
            value[metnos_core::provenance::TAINTED_SINK]
                .as_array()
                .unwrap()
                .len(),
            8
        );
        // An ordinary one keeps its sources whole.
        let one = vec![Carried {
            arg: "body".into(),
            from_steps: vec![1],
            sources: vec!["file:~/Documents/report.txt".into()],
            how: vec![How::Piped],
            sink: true,
        }];
        let extra = extra_json(
            &serde_json::json!({"body": "{{step1.content}}"}),
            &one,
            None,
            None,
            &[],
            &[],
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&extra).unwrap(),
            serde_json::json!({
                "from_earlier_steps": ["body"],
                "tainted_sink": [{"arg": "body", "sources": ["file:~/Documents/report.txt"]}]
            })
        );
    }
}
