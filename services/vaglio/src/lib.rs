//! The Metnos vaglio service (seed vaglio.md): the constitutional evaluator in two
//! phases. A binary guard that nothing talks around ([`guard`]), then a graded judge
//! ([`judge`], rule-based, or an LLM with the rules as fallback), and a private verdict log
//! ([`log`], keys only). [`service`] puts them together, [`grpc`] is the edge. The telos
//! engine (seed telos.md) will live here too; its RPCs answer UNIMPLEMENTED until then.
//!
//! Settings from the environment, as the seed has them: `METNOS_JUDGE_THRESHOLD`
//! (default 0.30), `METNOS_JUDGE_KIND` (`rule-based-v1`, default, or `llm-v1`, which uses
//! the `middle` LLM tier) and `METNOS_JUDGE_TIMEOUT_SECONDS` (default 10).

pub mod grpc;
pub mod guard;
pub mod judge;
pub mod log;
pub mod service;

use std::sync::Arc;
use std::time::Duration;

use metnos_kit::server::{StartError, Startup};
use metnos_kit::store::Migrations;
use metnos_kit::{Config, ServiceName, ShutdownFuture};
use metnos_proto::vaglio::v1::vaglio_service_server::VaglioServiceServer;
use tokio::net::TcpListener;

/// This service.
pub const SERVICE: ServiceName = ServiceName::Vaglio;

/// The health name of the verdict log: SERVING while its lines are written, NOT_SERVING
/// while they are not (the service itself keeps serving verdicts).
pub const LOG_HEALTH: &str = "metnos.vaglio.v1.VaglioService.log";

/// The vaglio's relational store holds nothing yet (the telos state will).
pub const MIGRATIONS: Migrations = Migrations::NONE;

/// The judge settings could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

/// The judge settings from `METNOS_JUDGE_*` and the LLM tiers of the config.
pub fn judge_settings(config: &Config) -> Result<(f64, service::JudgeKind), SettingsError> {
    let threshold = match std::env::var("METNOS_JUDGE_THRESHOLD") {
        Err(_) => judge::DEFAULT_THRESHOLD,
        Ok(text) => text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|t| (0.0..=1.0).contains(t))
            .ok_or_else(|| {
                SettingsError(format!(
                    "METNOS_JUDGE_THRESHOLD must be a number from 0 to 1, got `{text}`"
                ))
            })?,
    };
    let timeout = match std::env::var("METNOS_JUDGE_TIMEOUT_SECONDS") {
        Err(_) => 10,
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|t| *t > 0)
            .ok_or_else(|| {
                SettingsError(format!(
                    "METNOS_JUDGE_TIMEOUT_SECONDS must be a whole number of seconds, got `{text}`"
                ))
            })?,
    };
    let kind = match std::env::var("METNOS_JUDGE_KIND").as_deref() {
        Err(_) | Ok("rule-based-v1") => service::JudgeKind::RuleBased,
        Ok("llm-v1") => {
            let tiers = metnos_llm::Tiers::from_config(&config.runtime.llm)
                .map_err(|e| SettingsError(format!("METNOS_JUDGE_KIND=llm-v1: {e}")))?;
            service::JudgeKind::Llm {
                tiers,
                timeout: Duration::from_secs(timeout),
            }
        }
        Ok(other) => {
            return Err(SettingsError(format!(
                "METNOS_JUDGE_KIND must be rule-based-v1 or llm-v1, got `{other}`"
            )));
        }
    };
    Ok((threshold, kind))
}

/// Serves the vaglio on `listener` until `shutdown` resolves.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownFuture,
) -> Result<(), StartError> {
    let (threshold, kind) = match judge_settings(&config) {
        Ok(settings) => settings,
        Err(e) => {
            return Err(StartError::Settings {
                service: SERVICE,
                message: e.0,
            });
        }
    };
    let home = config.runtime.user_home.clone();
    let log_dir = config.data_dir.join("vaglio");
    Startup::new(SERVICE, &MIGRATIONS, &config)
        .serve_with_store(listener, shutdown, move |_db, readiness, background| {
            let log = log::VerdictLog::start(log_dir);
            let vaglio = Arc::new(service::Vaglio::new(home, threshold, kind, log.clone()));
            // The log's own health, beside the service's: verdicts go on when it cannot
            // write.
            let watched = log.clone();
            let mut last = None;
            background.every("log health", Duration::from_millis(500), move || {
                let healthy = !watched.is_failing();
                let changed = last != Some(healthy);
                last = Some(healthy);
                let readiness = readiness.clone();
                async move {
                    if changed {
                        readiness.set_component(LOG_HEALTH, healthy).await;
                    }
                }
            });
            background.on_stop("verdict log", async move { log.flush().await });
            Ok(VaglioServiceServer::new(grpc::VaglioApi::new(vaglio)))
        })
        .await
}
