//! `metnos status`: asks every service's health endpoint and prints a table.

use std::process::ExitCode;
use std::time::Duration;

use metnos_kit::client::{self, Health};
use metnos_kit::tls::Identity;
use metnos_kit::{Config, ServiceName};

use crate::admin::say;
use crate::runfile::service_urls;

/// Prints one row per service with SERVING or NOT_SERVING; exit 0 only if all serve.
pub async fn status(config: &Config, json: bool) -> ExitCode {
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
                    );
                }
            };
            let health =
                client::probe(channel.clone(), service.grpc_name(), Duration::from_secs(2)).await;
            // Parts a service reports on beside itself: they do not stop it serving.
            let note = match service {
                ServiceName::Vaglio if health.is_serving() => {
                    let log =
                        client::probe(channel, metnos_vaglio::LOG_HEALTH, Duration::from_secs(2))
                            .await;
                    (!log.is_serving())
                        .then(|| "verdict log lines are not being written".to_owned())
                }
                ServiceName::Planner if health.is_serving() => {
                    let sandbox = client::probe(
                        channel,
                        metnos_planner::SANDBOX_HEALTH,
                        Duration::from_secs(2),
                    )
                    .await;
                    // Only an explicit NOT_SERVING: before the planner's first check the
                    // name is not known yet.
                    matches!(&sandbox, Health::NotServing(why) if why == "NOT_SERVING").then(|| {
                        "shell_exec's sandbox cannot be built on this host (see `metnos executors sandbox`)"
                            .to_owned()
                    })
                }
                _ => None,
            };
            (*service, url.clone(), health, note)
        }
    });
    let results = futures::future::join_all(probes).await;

    if !json {
        say(&format!("{:<10} {:<28} STATUS", "SERVICE", "ADDRESS"));
    }
    let mut all_serving = true;
    for (service, url, health, note) in &results {
        let (word, detail) = match health {
            Health::Serving => ("SERVING", note.clone()),
            Health::NotServing(why) => ("NOT_SERVING", Some(why.clone())),
            Health::Unreachable(why) => ("NOT_SERVING", Some(format!("unreachable: {why}"))),
        };
        all_serving &= health.is_serving();
        if json {
            let line = serde_json::json!({
                "service": service.as_str(),
                "address": url,
                "status": word,
                "detail": detail,
            });
            say(&line.to_string());
        } else {
            match detail {
                Some(detail) => say(&format!(
                    "{:<10} {:<28} {word} ({detail})",
                    service.as_str(),
                    url
                )),
                None => say(&format!("{:<10} {:<28} {word}", service.as_str(), url)),
            }
        }
    }
    if all_serving {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
