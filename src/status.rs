//! `metnos status`: asks every service's health endpoint and prints a table, then a row
//! per LLM tier (checked from here, as `metnos up` does at start) and one for
//! `shell_exec`'s sandbox (as the planner found it).

use std::process::ExitCode;
use std::time::Duration;

use metnos_kit::client::{self, Health};
use metnos_kit::tls::{Identity, Tls};
use metnos_kit::{Config, ServiceName};

use metnos_llm::check::{Level, TierCheck};

use crate::admin::say;
use crate::runfile::service_urls;

/// One service's answers: its health, a note on a part it reports beside itself, and (the
/// planner's) the sandbox's health.
type Probed = (ServiceName, String, Health, Option<String>, Option<Health>);

/// One printed row: name, address, status word, detail.
type Row = (String, String, &'static str, Option<String>);

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
    let probes = urls
        .iter()
        .map(|(service, url)| probe(tls.clone(), *service, url.clone()));
    let results = futures::future::join_all(probes).await;

    if !json {
        say(&format!("{:<10} {:<28} STATUS", "SERVICE", "ADDRESS"));
    }
    let all_serving = results
        .iter()
        .all(|(_, _, health, _, _)| health.is_serving());
    let mut rows = service_rows(&results);
    rows.extend(tier_rows(tiers.await.unwrap_or_default()));
    if let Some(row) = sandbox_row(&results) {
        rows.push(row);
    }
    let planner_serves = results
        .iter()
        .any(|(service, _, health, _, _)| *service == ServiceName::Planner && health.is_serving());
    if planner_serves {
        rows.extend(mcp_rows(config).await);
    }
    print_rows(rows, json);
    if all_serving {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Asks `service` at `url` for its health, and for what it reports on beside itself.
async fn probe(tls: Tls, service: ServiceName, url: String) -> Probed {
    let channel = match client::channel(&tls, Identity::of(service), &url) {
        Ok(channel) => channel,
        Err(e) => return (service, url, Health::Unreachable(e.to_string()), None, None),
    };
    let health = client::probe(channel.clone(), service.grpc_name(), Duration::from_secs(2)).await;
    // Parts a service reports on beside itself: they do not stop it serving.
    let note = match service {
        ServiceName::Vaglio if health.is_serving() => {
            let log = client::probe(
                channel.clone(),
                metnos_vaglio::LOG_HEALTH,
                Duration::from_secs(2),
            )
            .await;
            (!log.is_serving()).then(|| "verdict log lines are not being written".to_owned())
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
    (service, url, health, note, sandbox)
}

/// A row per service.
fn service_rows(results: &[Probed]) -> Vec<Row> {
    results
        .iter()
        .map(|(service, url, health, note, _)| {
            let (word, detail) = match health {
                Health::Serving => ("SERVING", note.clone()),
                Health::NotServing(why) => ("NOT_SERVING", Some(why.clone())),
                Health::Unreachable(why) => ("NOT_SERVING", Some(format!("unreachable: {why}"))),
            };
            (service.as_str().to_owned(), url.clone(), word, detail)
        })
        .collect()
}

/// A row per LLM tier.
fn tier_rows(checks: Vec<TierCheck>) -> Vec<Row> {
    checks
        .into_iter()
        .map(|check| {
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
            (format!("llm:{}", check.tier), address, word, detail)
        })
        .collect()
}

/// The sandbox's row, as the planner found it (none when the planner is not configured).
fn sandbox_row(results: &[Probed]) -> Option<Row> {
    let (_, url, _, _, sandbox) = results
        .iter()
        .rfind(|(service, ..)| *service == ServiceName::Planner)?;
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
    Some(("sandbox".to_owned(), url.clone(), word, detail))
}

/// One row per admitted MCP server, as the planner holds it: its tools, and its standing
/// once the planner started it (issue 43).
async fn mcp_rows(config: &Config) -> Vec<Row> {
    use metnos_proto::planner::v1 as pb;
    let Ok((channel, _)) = crate::admin::connect(config, ServiceName::Planner) else {
        return Vec::new();
    };
    let mut client = pb::planner_service_client::PlannerServiceClient::new(channel);
    let Ok(listed) = client.list_mcp_servers(pb::ListMcpServersRequest {}).await else {
        return Vec::new();
    };
    let listed = listed.into_inner();
    let mut servers: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for tool in listed.tools {
        servers.entry(tool.server).or_default().push(tool.tool);
    }
    servers
        .into_iter()
        .map(|(server, tools)| {
            let state = listed.servers.iter().find(|s| s.server == server);
            let (word, detail) = match state {
                None => (
                    "ADMITTED",
                    format!(
                        "{} tool(s): {}; not started yet",
                        tools.len(),
                        tools.join(", ")
                    ),
                ),
                Some(s) if !s.disabled.is_empty() => (
                    "WARN",
                    format!(
                        "{} enabled; disabled until `metnos mcp review {server}`: {}",
                        s.enabled.len(),
                        s.disabled.join("; ")
                    ),
                ),
                Some(s) if s.connected => (
                    "CONNECTED",
                    format!(
                        "{} tool(s) enabled: {}",
                        s.enabled.len(),
                        s.enabled.join(", ")
                    ),
                ),
                Some(s) => ("DOWN", s.last_error.clone()),
            };
            let detail = crate::mcp_cli::visible(&detail);
            (format!("mcp:{server}"), String::new(), word, Some(detail))
        })
        .collect()
}

/// Prints the rows as a table, or as JSON lines.
fn print_rows(rows: Vec<Row>, json: bool) {
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
}
