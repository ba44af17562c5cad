//! The Metnos vaglio service (seed vaglio.md): the constitutional evaluator in two
//! phases. A binary guard that nothing talks around ([`guard`]), then a graded judge
//! ([`judge`], rule-based, or an LLM with the rules as fallback), and a private verdict log
//! ([`log`], keys only). [`service`] puts them together, [`grpc`] is the edge. The telos
//! engine (seed telos.md, [`telos`]) decides whether a proposal Metnos makes on its own
//! reaches the person now, in the evening digest, or never.
//!
//! The judge's settings are the config's `[vaglio.judge]`: `kind` (`rule-based-v1`, default,
//! or `llm-v1`, which uses the `middle` LLM tier), `threshold` (default 0.30) and
//! `timeout_seconds` (default 10). The seed's `METNOS_JUDGE_*` variables set them too; the
//! config maps them, this crate never reads the environment.

pub mod grpc;
pub mod guard;
pub mod judge;
pub mod log;
pub mod service;
mod shell_rules;
pub mod telos;

use std::sync::Arc;
use std::time::Duration;

use metnos_kit::clock::{Clock, SystemClock};
use metnos_kit::server::{StartError, Startup};
use metnos_kit::store::Migrations;
use metnos_kit::tls::Identity;
use metnos_kit::{Config, ServiceName, ShutdownFuture};
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;
use metnos_proto::vaglio::v1::vaglio_service_server::VaglioServiceServer;
use tokio::net::TcpListener;

/// This service.
pub const SERVICE: ServiceName = ServiceName::Vaglio;

/// The health name of the verdict log: SERVING while its lines are written, NOT_SERVING
/// while they are not (the service itself keeps serving verdicts).
pub const LOG_HEALTH: &str = "metnos.vaglio.v1.VaglioService.log";

/// The vaglio's relational store: the telos state.
pub const MIGRATIONS: Migrations = telos::store::MIGRATIONS;

/// The judge settings could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

/// The judge of `[vaglio.judge]`, with the LLM tiers of the config for `llm-v1`.
pub fn judge_settings(config: &Config) -> Result<(f64, service::JudgeKind), SettingsError> {
    use metnos_kit::config::JudgeKind;
    let judge = &config.vaglio.judge;
    let kind = match judge.kind {
        JudgeKind::RuleBased => service::JudgeKind::RuleBased,
        JudgeKind::Llm => {
            let tiers = metnos_llm::Tiers::from_config(&config.runtime.llm)
                .map_err(|e| SettingsError(format!("vaglio.judge.kind is llm-v1: {e}")))?;
            service::JudgeKind::Llm {
                tiers,
                timeout: judge.timeout(),
            }
        }
    };
    Ok((judge.threshold.get(), kind))
}

/// Policy, as the LLM judge asks it before calling an online provider.
#[derive(Debug, Clone)]
struct PolicyGate(PolicyServiceClient<metnos_kit::client::TracedChannel>);

#[tonic::async_trait]
impl service::OnlineGate for PolicyGate {
    async fn allowed(
        &self,
        level: metnos_core::AutonomyLevel,
        principal: &metnos_core::Principal,
        host: &str,
    ) -> Result<(), service::GateRefusal> {
        use metnos_proto::policy::v1 as policy;
        use service::GateRefusal;
        let request = policy::CheckRequest {
            level: level.to_wire(),
            capability: metnos_core::Capability::LlmOnline.name().to_owned(),
            principal: Some(principal.to_proto()),
            target: host.to_owned(),
        };
        match self.0.clone().check(request).await {
            Ok(answer) => match policy::Outcome::try_from(answer.into_inner().outcome) {
                Ok(policy::Outcome::Allowed) => Ok(()),
                Ok(policy::Outcome::ApprovalRequired) => Err(GateRefusal::ApprovalRequired(level)),
                _ => Err(GateRefusal::Denied(level)),
            },
            Err(status) => Err(GateRefusal::Unreachable(status.code())),
        }
    }
}

/// A fit estimator that always fails: proposals are rejected (`fit_estimation_failed`),
/// never published, when the LLM tiers cannot be built.
#[derive(Debug)]
struct NoEstimator(String);

#[tonic::async_trait]
impl telos::fit::FitEstimator for NoEstimator {
    async fn estimate(
        &self,
        _: &telos::fit::Asked<'_>,
        _: &[telos::file::Telos],
    ) -> Result<telos::fit::Estimate, telos::fit::FitError> {
        Err(telos::fit::FitError::Unavailable(self.0.clone()))
    }
}

/// Serves the vaglio on `listener` until `shutdown` resolves, with the system clock.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownFuture,
) -> Result<(), StartError> {
    serve_with_clock(config, listener, shutdown, Arc::new(SystemClock)).await
}

/// [`serve`], reading "now" from `clock` (tests drive the telos engine's time with it).
pub async fn serve_with_clock(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownFuture,
    clock: Arc<dyn Clock>,
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
    let log_dir = config.data_dir.join(metnos_kit::datadir::VERDICTS_DIR);
    let own_data = config.own_paths();
    let workspace = config.executors.workspace.clone();
    let retention_months = config.vaglio.log_retention_months.get();
    let log_limits = log::LogLimits {
        intent_bytes: config.vaglio.log_intent_bytes.get() as usize,
        queue_lines: config.vaglio.log_queue_lines.get() as usize,
        wait: std::time::Duration::from_millis(config.vaglio.log_wait_ms.get()),
    };
    let policy_url = config.service_url(ServiceName::Policy);
    let telos_settings = telos::Settings::from_config(&config.telos);
    let telos_files = telos::Files::from_config(&config);
    let fit_tiers = metnos_llm::Tiers::from_config(&config.runtime.llm).map_err(|e| e.to_string());
    let fit_timeout = config.telos.fit_timeout();
    Startup::new(SERVICE, &MIGRATIONS, &grpc::AUTHORIZATION, &config)
        .serve_with_store(listener, shutdown, move |running| {
            let log = log::VerdictLog::with_limits(log_dir, log_limits);
            let asks_llm = matches!(kind, service::JudgeKind::Llm { .. });
            let mut vaglio = service::Vaglio::new(home, threshold, kind, log.clone())
                .guarding_own_data(&own_data, &workspace);
            // An LLM judge and an online fit estimator ask policy before calling an online
            // provider.
            let gate: Option<Arc<dyn service::OnlineGate>> =
                match metnos_kit::client::channel(running.tls, Identity::Policy, &policy_url) {
                    Ok(channel) => Some(Arc::new(PolicyGate(PolicyServiceClient::new(channel)))),
                    Err(e) => {
                        tracing::error!(error = %e, "policy URL is invalid; no online LLM is ever called");
                        None
                    }
                };
            if asks_llm && let Some(gate) = &gate {
                vaglio = vaglio.with_online_gate(Arc::clone(gate));
            }
            let vaglio = Arc::new(vaglio);
            let estimator: Arc<dyn telos::fit::FitEstimator> = match fit_tiers {
                Ok(tiers) => Arc::new(telos::fit::LlmEstimator {
                    tiers,
                    timeout: fit_timeout,
                    online_gate: gate,
                }),
                Err(e) => {
                    tracing::error!(error = %e, "no LLM tier for the fit estimate: every proactive proposal is rejected");
                    Arc::new(NoEstimator(format!("no LLM tier: {e}")))
                }
            };
            let telos = Arc::new(telos::TelosEngine::new(
                telos::store::TelosStore::new(running.db),
                telos_settings,
                telos_files,
                estimator,
                clock,
            ));
            // The log's own health, beside the service's: verdicts go on when it cannot
            // write.
            let watched = log.clone();
            let mut last = None;
            running
                .background
                .every("log health", Duration::from_millis(500), move || {
                    let healthy = !watched.is_failing();
                    let changed = last != Some(healthy);
                    last = Some(healthy);
                    let readiness = running.readiness.clone();
                    async move {
                        if changed {
                            readiness.set_component(LOG_HEALTH, healthy).await;
                        }
                    }
                });
            // Retention: at start, then daily.
            let retention = retention_months;
            let pruned_dir = log.dir().to_path_buf();
            running
                .background
                .every("verdict log retention", Duration::from_secs(24 * 3600), move || {
                    let dir = pruned_dir.clone();
                    async move {
                        let pruned = tokio::task::spawn_blocking(move || {
                            log::prune(&dir, retention, jiff::Timestamp::now())
                        })
                        .await;
                        match pruned {
                            Ok(Ok(months)) if !months.is_empty() => {
                                tracing::info!(months = ?months, retention, "verdict log months removed")
                            }
                            Ok(Err(e)) => tracing::warn!(error = %e, "verdict log retention failed"),
                            _ => {}
                        }
                    }
                });
            running
                .background
                .on_stop("verdict log", async move { log.flush().await });
            Ok(VaglioServiceServer::new(grpc::VaglioApi::new(vaglio, telos, retention_months))
                .max_decoding_message_size(metnos_kit::edge::MAX_REQUEST_BYTES))
        })
        .await
}
