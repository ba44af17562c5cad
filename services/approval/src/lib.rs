//! The Metnos approval service (seed approval_ux.md ch. 2-6): requests for approval, the
//! 3-line card, single-use decisions taken by the person who was asked, and the grants a
//! territory concession records in the policy service.
//!
//! Layout: [`card`] renders (pure), [`describe`] says what a call does (pure), [`extra`] reads what
//! the planner says beside a call (pure), [`token`] makes tokens and call hashes, [`store`]
//! keeps requests in SQLite or PostgreSQL, [`service`] decides, [`grpc`] is the edge.
//! [`serve`] runs it (`metnos-approval` and `metnos up` both call it).

pub mod card;
pub mod describe;
pub mod extra;
pub mod grpc;
pub mod service;
pub mod shortcut;
pub mod store;
pub mod token;

use std::sync::Arc;
use std::time::Duration;

use metnos_kit::clock::{Clock, SystemClock};
use metnos_kit::server::{StartError, Startup};
use metnos_kit::tls::Identity;
use metnos_kit::{Config, ServiceName, ShutdownFuture};
use metnos_proto::approval::v1::approval_service_server::ApprovalServiceServer;
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;
use tokio::net::TcpListener;

pub use store::MIGRATIONS;

/// This service.
pub const SERVICE: ServiceName = ServiceName::Approval;

/// How often a waiter re-reads a request, for decisions written by another replica
/// sharing PostgreSQL (decisions written here arrive at once).
pub const WAIT_POLL: Duration = Duration::from_millis(200);

/// Serves the approval service on `listener` until `shutdown` resolves, with the system
/// clock.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownFuture,
) -> Result<(), StartError> {
    serve_with_clock(config, listener, shutdown, Arc::new(SystemClock)).await
}

/// As [`serve`], reading "now" from `clock` (tests move it by hand).
pub async fn serve_with_clock(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownFuture,
    clock: Arc<dyn Clock>,
) -> Result<(), StartError> {
    let policy_url = config.service_url(ServiceName::Policy);
    let settings = service::Settings {
        ttl_ms: (config.approval.ttl_seconds.get() * 1000) as i64,
        session_ms: (config.approval.session_seconds.get() * 1000) as i64,
    };
    let home = config.runtime.user_home.clone();
    let telos = config.telos.clone();
    let sweep_every = Duration::from_secs(config.approval.sweep_interval_seconds.get());
    Startup::new(SERVICE, &MIGRATIONS, &grpc::AUTHORIZATION, &config)
        .serve_with_store(listener, shutdown, move |running| {
            let policy = metnos_kit::client::channel(running.tls, Identity::Policy, &policy_url)
                .map(PolicyServiceClient::new)
                .map_err(|e| tracing::error!(error = %e, "policy URL is invalid; territory grants are off"))
                .ok();
            let approvals = Arc::new(service::Approvals::new(
                store::PendingStore::new(running.db),
                clock,
                settings,
                home,
                policy,
            )
            .with_telos(telos));
            let sweeper = Arc::clone(&approvals);
            running.background.every("sweeper", sweep_every, move || {
                let approvals = Arc::clone(&sweeper);
                async move {
                    if let Err(e) = approvals.sweep().await {
                        tracing::warn!(error = %e, "cannot sweep expired approvals");
                    }
                    if let Err(e) = approvals.retry_grants().await {
                        tracing::warn!(error = %e, "cannot retry territory grants");
                    }
                }
            });
            // On PostgreSQL, a decision taken on another replica reaches this one's waiters
            // at once (LISTEN/NOTIFY); the poll is only a fallback.
            let listening = Arc::clone(&approvals);
            let db = listening.store().db().clone();
            running.background.spawn("approval change listener", async move {
                store::listen(&db, |token| listening.changed_here(token)).await;
            });
            let api = grpc::ApprovalApi::new(approvals, running.readiness, WAIT_POLL);
            Ok(ApprovalServiceServer::new(api).max_decoding_message_size(metnos_kit::edge::MAX_REQUEST_BYTES))
        })
        .await
}
