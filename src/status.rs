//! `metnos status`: asks every service's health endpoint and prints a table.

use std::process::ExitCode;
use std::time::Duration;

use metnos_kit::Config;
use metnos_kit::client::{self, Health};

use crate::admin::say;
use crate::runfile::service_urls;

/// Prints one row per service with SERVING or NOT_SERVING; exit 0 only if all serve.
pub async fn status(config: &Config, json: bool) -> ExitCode {
    let urls = service_urls(config);
    let probes = urls.iter().map(|(service, url)| async move {
        let health = match client::channel(url) {
            Ok(channel) => {
                client::probe(channel, service.grpc_name(), Duration::from_secs(2)).await
            }
            Err(e) => Health::Unreachable(e.to_string()),
        };
        (*service, url.clone(), health)
    });
    let results = futures::future::join_all(probes).await;

    if !json {
        say(&format!("{:<10} {:<28} STATUS", "SERVICE", "ADDRESS"));
    }
    let mut all_serving = true;
    for (service, url, health) in &results {
        let (word, detail) = match health {
            Health::Serving => ("SERVING", None),
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
