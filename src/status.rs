//! `metnos status`: asks every service's health endpoint and prints a table, then a row
//! per LLM tier (checked from here, as `metnos up` does at start) and one for
//! `shell_exec`'s sandbox (as the planner found it).

use std::process::ExitCode;
use std::time::Duration;

use metnos_kit::client::{self, Health};
use metnos_kit::tls::Identity;
use metnos_kit::{Config, ServiceName};

use metnos_llm::check::Level;

use crate::admin::say;
use crate::runfile::service_urls;

/// Prints one row per service with SERVING or NOT_SERVING, one per LLM tier (READY, WARN
/// or NOT_READY) and one for the sandbox; exit 0 only if all five services serve (the
/// other rows inform; `metnos doctor` fails on them).
pub async fn status(config: &Config, json: bool) -> ExitCode {
    let tiers = tokio::spawn({
        let llm = config.runtime.llm.clone();
        async move { metnos_llm::check::check_tiers(&llm, metnos_llm::check::QUICK_TIMEOUT).await }
    });
    let urls = service_urls(config);
    let tls = match crate::admin::owner_tls(config) {
        Ok(tls) => tls,
        Err(code) => return code,
    };
    let probes = urls.iter().map(|(service, url)| {
        let tls = tls.clone();
        async move {
            let channel = match client::channel(&tls, Identity::of(*service), url) {
                Ok(channel) => channel,
                Err(e) => {
                    return (
                        *service,
                        url.clone(),
                        Health::Unreachable(e.to_string()),
                        None,
                        None,
                    );
                }
            };
            let health =
                client::probe(channel.clone(), service.grpc_name(), Duration::from_secs(2)).await;
            // Parts a service reports on beside itself: they do not stop it serving.
            let note = match service {
                ServiceName::Vaglio if health.is_serving() => {
                    let log = client::probe(
                        channel.clone(),
                        metnos_vaglio::LOG_HEALTH,
                        Duration::from_secs(2),
                    )
                    .await;
                    (!log.is_serving())
                        .then(|| "verdict log lines are not being written".to_owned())
                }
                _ => None,
            };
            let sandbox = match service {
                ServiceName::Planner if health.is_serving() => Some(
                    client::probe(
                        channel,
                        metnos_planner::SANDBOX_HEALTH,
                        Duration::from_secs(2),
                    )
                    .await,
                ),
                _ => None,
            };
            (*service, url.clone(), health, note, sandbox)
        }
    });
    let results = futures::future::join_all(probes).await;

    if !json {
        say(&format!("{:<10} {:<28} STATUS", "SERVICE", "ADDRESS"));
    }
    let mut all_serving = true;
    let mut rows: Vec<(String, String, &str, Option<String>)> = Vec::new();
    let mut planner = None;
    for (service, url, health, note, sandbox) in &results {
        let (word, detail) = match health {
            Health::Serving => ("SERVING", note.clone()),
            Health::NotServing(why) => ("NOT_SERVING", Some(why.clone())),
            Health::Unreachable(why) => ("NOT_SERVING", Some(format!("unreachable: {why}"))),
        };
        all_serving &= health.is_serving();
        rows.push((service.as_str().to_owned(), url.clone(), word, detail));
        if *service == ServiceName::Planner {
            planner = Some((url.clone(), sandbox.clone()));
        }
    }
    for check in tiers.await.unwrap_or_default() {
        let word = match check.level() {
            Level::Ok => "READY",
            Level::Warn => "WARN",
            Level::Fail => "NOT_READY",
        };
        let detail = (check.level() != Level::Ok).then(|| match check.fix() {
            Some(fix) => format!("{} — {fix}", check.line()),
            None => check.line(),
        });
        let address = if check.base_url.is_empty() {
            "-".to_owned()
        } else {
            check.base_url.clone()
        };
        rows.push((format!("llm:{}", check.tier), address, word, detail));
    }
    if let Some((url, sandbox)) = planner {
        // Only an explicit NOT_SERVING: before the planner's first check the name is not
        // known yet.
        let (word, detail) = match sandbox {
            Some(Health::Serving) => ("SERVING", None),
            Some(Health::NotServing(why)) if why == "NOT_SERVING" => (
                "NOT_SERVING",
                Some("shell_exec's sandbox cannot be built on this host (see `metnos executors sandbox`)".to_owned()),
            ),
            Some(_) => ("UNKNOWN", Some("the planner has not checked it yet".to_owned())),
            None => ("UNKNOWN", Some("the planner does not answer".to_owned())),
        };
        rows.push(("sandbox".to_owned(), url, word, detail));
    }
    for (name, address, word, detail) in rows {
        if json {
            let line = serde_json::json!({
                "service": name,
                "address": address,
                "status": word,
                "detail": detail,
            });
            say(&line.to_string());
        } else {
            match detail {
                Some(detail) => say(&format!("{name:<10} {address:<28} {word} ({detail})")),
                None => say(&format!("{name:<10} {address:<28} {word}")),
            }
        }
    }
    if all_serving {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
