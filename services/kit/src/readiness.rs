//! What a service reports through `grpc.health.v1`: SERVING only while it has started,
//! its store answers, and it is not shutting down.
//!
//! [`Readiness`] owns the health reporter; the server flips `started`/`stopping`, and a
//! service that finds its store unreachable calls [`Readiness::store_failed`], which
//! reports NOT_SERVING and probes the store until it answers again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::config::ServiceName;
use crate::store::Db;

/// How often an unreachable store is probed.
const STORE_PROBE_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Debug, Default)]
struct State {
    started: bool,
    stopping: bool,
    store_ok: bool,
    probing: bool,
    published: Option<ServingStatus>,
}

/// A service's readiness, shared by its server and its handlers.
#[derive(Debug, Clone)]
pub struct Readiness {
    service: ServiceName,
    reporter: HealthReporter,
    state: Arc<Mutex<State>>,
}

impl Readiness {
    /// Not serving until the server starts.
    pub fn new(service: ServiceName) -> Readiness {
        Readiness {
            service,
            reporter: HealthReporter::new(),
            state: Arc::new(Mutex::new(State {
                store_ok: true,
                ..State::default()
            })),
        }
    }

    pub(crate) fn reporter(&self) -> HealthReporter {
        self.reporter.clone()
    }

    pub(crate) async fn set_started(&self) {
        self.update(|s| s.started = true).await;
    }

    pub(crate) async fn set_stopping(&self) {
        self.update(|s| s.stopping = true).await;
    }

    /// Reports the health of a part of the service under its own name (e.g.
    /// `metnos.vaglio.v1.VaglioService.log`), beside the service's: a detail that stock
    /// health checks can ask for, without taking the whole service out of rotation.
    pub async fn set_component(&self, name: &str, healthy: bool) {
        let status = if healthy {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.reporter.set_service_status(name, status).await;
    }

    /// Whether health says SERVING now.
    pub async fn is_serving(&self) -> bool {
        let state = self.state.lock().await;
        serving(&state) == ServingStatus::Serving
    }

    /// The store failed in a way that means it is unreachable: report NOT_SERVING and
    /// probe it in the background until it answers, then report SERVING again.
    pub async fn store_failed(&self, db: &Db) {
        let start_probe = {
            let mut state = self.state.lock().await;
            state.store_ok = false;
            let start = !state.probing;
            state.probing = true;
            self.publish(&mut state).await;
            start
        };
        if !start_probe {
            return;
        }
        tracing::warn!(service = %self.service, store = db.backend(), "store unreachable; not serving until it answers");
        let readiness = self.clone();
        let db = db.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(STORE_PROBE_INTERVAL).await;
                if readiness.state.lock().await.stopping {
                    return;
                }
                if db.ping().await.is_ok() {
                    tracing::info!(service = %readiness.service, "store answers again; serving");
                    readiness
                        .update(|s| {
                            s.store_ok = true;
                            s.probing = false;
                        })
                        .await;
                    return;
                }
            }
        });
    }

    async fn update(&self, change: impl FnOnce(&mut State)) {
        let mut state = self.state.lock().await;
        change(&mut state);
        self.publish(&mut state).await;
    }

    /// Publishes the status if it changed; called with the state locked so that
    /// concurrent changes are published in order.
    async fn publish(&self, state: &mut State) {
        let status = serving(state);
        if state.published == Some(status) {
            return;
        }
        state.published = Some(status);
        self.reporter.set_service_status("", status).await;
        self.reporter
            .set_service_status(self.service.grpc_name(), status)
            .await;
    }
}

fn serving(state: &State) -> ServingStatus {
    if state.started && state.store_ok && !state.stopping {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    }
}
