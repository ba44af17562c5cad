//! The Metnos planner service: the turn loop (seed agent_runtime.md). An LLM proposes
//! tool calls; each passes its references, schema and scope, policy, vaglio and — when
//! policy asks — a person's approval, then a signed executor runs it.
//!
//! - [`prefilter`]: which executors a query is offered (inverted index, adaptive K);
//! - [`piping`]: `{{stepN.field}}` references;
//! - [`engine`]: the loop, caps, duplicate-read guard, modes, suspend and resume;
//! - [`scratch`]: large observations and `scratchpad_read`;
//! - [`filters`]: the policy, vaglio and approval clients;
//! - [`store`]: turns (checkpoints, records) and the scratchpad, SQLite or PostgreSQL;
//! - [`turnlog`]: the daily JSONL turn log (no values, no message text).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use metnos_executors::signing::Trust;
use metnos_executors::{Catalog, Runner, ShellSettings};
use metnos_kit::server::{StartError, serve_with_store};
use metnos_kit::time::now_ms;
use metnos_kit::{Config, ServiceName, ShutdownFuture};
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::planner_service_server::{PlannerService, PlannerServiceServer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt, wrappers::ReceiverStream};
use tonic::{Request, Response, Status};
use tracing::Instrument;

pub mod cards;
pub mod engine;
pub mod filters;
pub mod piping;
pub mod prefilter;
pub mod scratch;
pub mod store;
pub mod turnlog;

use engine::{Checkpoint, Planner};
use store::State;

/// This service.
pub const SERVICE: ServiceName = ServiceName::Planner;

pub use store::MIGRATIONS;

/// A server-streaming response.
type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The runner as config describes it.
pub fn runner_from_config(config: &Config) -> Runner {
    let e = &config.executors;
    Runner {
        user_home: config.runtime.user_home.clone(),
        local_hosts: e.local_hosts.clone(),
        shell: ShellSettings {
            allow: e.shell_allow.clone(),
            workspace: e.workspace.clone(),
            cpu_seconds: e.shell_cpu_seconds.get(),
            memory_mb: e.shell_memory_mb.get(),
            file_size_mb: e.shell_file_size_mb.get(),
        },
    }
}

/// Serves the planner service on `listener` until `shutdown` resolves.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownFuture,
) -> Result<(), StartError> {
    let settings = |message: String| StartError::Settings {
        service: SERVICE,
        message,
    };
    let trust = Trust::from_config(&config.executors.trusted_keys)
        .map_err(|e| settings(format!("executors.trusted_keys: {e}")))?;
    let catalog = Arc::new(Catalog::load(&config.executors.catalog_dir, &trust));
    let tiers = metnos_llm::Tiers::from_config(&config.runtime.llm).map_err(|e| e.to_string());
    if let Err(e) = &tiers {
        tracing::warn!(error = %e, "no usable LLM: every turn will end with this error");
    }
    let filters = filters::Filters::connect(
        &config.service_url(ServiceName::Policy),
        &config.service_url(ServiceName::Vaglio),
        &config.service_url(ServiceName::Approval),
    )
    .map_err(settings)?;
    let runner = runner_from_config(&config);
    let turns = config.turns.clone();
    let mode = config.runtime.mode;
    let log = turnlog::TurnLog::new(config.data_dir.join("turns"));
    serve_with_store(
        SERVICE,
        &config,
        &MIGRATIONS,
        listener,
        shutdown,
        move |db, _readiness| {
            let store = store::Store::new(db);
            let retention = turns.retention_hours.get();
            // A turn that saved no progress for twice its budget was left by a planner that
            // stopped (the engine saves at each approval and at the end).
            let orphan_after_ms =
                i64::try_from(turns.budget_seconds.get().saturating_mul(2000)).unwrap_or(i64::MAX);
            let planner = Arc::new(Planner::new(engine::Parts {
                config: turns,
                default_mode: mode,
                tiers,
                catalog,
                runner,
                filters,
                store: store.clone(),
                log,
            }));
            tokio::spawn(async move {
                let mut every = tokio::time::interval(Duration::from_secs(600));
                loop {
                    every.tick().await;
                    let before =
                        now_ms() - i64::try_from(retention * 3_600_000).unwrap_or(i64::MAX);
                    if let Err(e) = store.prune_scratch(before).await {
                        tracing::warn!(error = %e, "scratchpad prune failed");
                    }
                    match store
                        .close_orphans(now_ms().saturating_sub(orphan_after_ms), now_ms())
                        .await
                    {
                        Ok(0) => {}
                        Ok(n) => tracing::warn!(
                            turns = n,
                            "closed turns left running by a stopped planner"
                        ),
                        Err(e) => tracing::warn!(error = %e, "orphaned turns not closed"),
                    }
                }
            });
            PlannerServiceServer::new(PlannerApi { planner })
        },
    )
    .await
}

/// The `PlannerService` implementation.
#[derive(Debug, Clone)]
pub struct PlannerApi {
    pub planner: Arc<Planner>,
}

fn store_error(e: sqlx::Error) -> Status {
    if metnos_kit::store::is_unreachable(&e) {
        Status::unavailable(format!("the planner store is unavailable: {e}"))
    } else {
        Status::internal(format!("planner store: {e}"))
    }
}

fn stream_of<T: Send + 'static>(
    rx: mpsc::Receiver<pb::TurnEvent>,
    wrap: fn(pb::TurnEvent) -> T,
) -> ResponseStream<T> {
    Box::pin(ReceiverStream::new(rx).map(move |e| Ok(wrap(e))))
}

impl PlannerApi {
    /// Loads and claims a suspended turn by id or token.
    async fn claim(&self, target: &pb::resume_turn_request::Target) -> Result<Checkpoint, Status> {
        let store = &self.planner.store;
        let found = match target {
            pb::resume_turn_request::Target::TurnId(id) => store.get(id).await,
            pb::resume_turn_request::Target::ApprovalToken(token) => store.by_token(token).await,
        }
        .map_err(store_error)?
        .ok_or_else(|| Status::not_found("no such turn"))?;
        if found.state != State::Suspended {
            return Err(Status::failed_precondition(format!(
                "turn {} is {}, not suspended",
                found.turn_id,
                found.state.as_str()
            )));
        }
        if !store
            .claim_suspended(&found.turn_id, now_ms())
            .await
            .map_err(store_error)?
        {
            return Err(Status::failed_precondition(format!(
                "turn {} is already being resumed",
                found.turn_id
            )));
        }
        serde_json::from_str(&found.checkpoint)
            .map_err(|e| Status::internal(format!("the turn's checkpoint is unreadable: {e}")))
    }
}

#[tonic::async_trait]
impl PlannerService for PlannerApi {
    type RunTurnStream = ResponseStream<pb::RunTurnResponse>;
    type ResumeTurnStream = ResponseStream<pb::ResumeTurnResponse>;

    async fn run_turn(
        &self,
        request: Request<pb::RunTurnRequest>,
    ) -> Result<Response<Self::RunTurnStream>, Status> {
        let request = request.into_inner();
        if request.query.trim().is_empty() {
            return Err(Status::invalid_argument("query is empty"));
        }
        let principal = request.principal.clone().unwrap_or_default();
        if principal.channel.is_empty() || principal.sender_id.is_empty() {
            return Err(Status::invalid_argument(
                "principal is missing (channel and sender_id are required)",
            ));
        }
        if request.level == 0
            || metnos_proto::common::v1::AutonomyLevel::try_from(request.level).is_err()
        {
            return Err(Status::invalid_argument("level is unspecified"));
        }
        let checkpoint = self.planner.start(&request);
        let (tx, rx) = mpsc::channel(64);
        // The turn outlives this call; its spans stay children of the RunTurn span.
        let parent = tracing::Span::current();
        tokio::spawn(
            Arc::clone(&self.planner)
                .run(checkpoint, tx)
                .instrument(parent),
        );
        Ok(Response::new(stream_of(rx, |e| pb::RunTurnResponse {
            event: Some(e),
        })))
    }

    async fn resume_turn(
        &self,
        request: Request<pb::ResumeTurnRequest>,
    ) -> Result<Response<Self::ResumeTurnStream>, Status> {
        let target = request
            .into_inner()
            .target
            .ok_or_else(|| Status::invalid_argument("give a turn_id or an approval_token"))?;
        let checkpoint = self.claim(&target).await?;
        let (tx, rx) = mpsc::channel(64);
        let parent = tracing::Span::current();
        tokio::spawn(
            Arc::clone(&self.planner)
                .resume(checkpoint, tx)
                .instrument(parent),
        );
        Ok(Response::new(stream_of(rx, |e| pb::ResumeTurnResponse {
            event: Some(e),
        })))
    }

    async fn cancel_turn(
        &self,
        request: Request<pb::CancelTurnRequest>,
    ) -> Result<Response<pb::CancelTurnResponse>, Status> {
        let request = request.into_inner();
        let store = &self.planner.store;
        let found = match request.target {
            Some(pb::cancel_turn_request::Target::TurnId(id)) => store.get(&id).await,
            Some(pb::cancel_turn_request::Target::Principal(p)) => {
                store.current_of(&p.channel, &p.sender_id).await
            }
            None => return Err(Status::invalid_argument("give a turn_id or a principal")),
        }
        .map_err(store_error)?
        .ok_or_else(|| Status::not_found("no such turn"))?;
        let turn_id = found.turn_id.clone();
        let cancelled = match found.state {
            State::Finished => false,
            _ if self.planner.signal_cancel(&turn_id) => true,
            State::Suspended
                if store
                    .claim_suspended(&turn_id, now_ms())
                    .await
                    .map_err(store_error)? =>
            {
                let mut checkpoint: Checkpoint = serde_json::from_str(&found.checkpoint)
                    .map_err(|e| Status::internal(format!("unreadable checkpoint: {e}")))?;
                self.planner.cancel_claimed(&mut checkpoint).await;
                true
            }
            _ => {
                store.request_cancel(&turn_id).await.map_err(store_error)?;
                true
            }
        };
        if !request.reason.is_empty() {
            tracing::info!(turn_id, reason = %request.reason, cancelled, "turn cancel requested");
        }
        Ok(Response::new(pb::CancelTurnResponse { turn_id, cancelled }))
    }

    async fn get_turn(
        &self,
        request: Request<pb::GetTurnRequest>,
    ) -> Result<Response<pb::GetTurnResponse>, Status> {
        let id = request.into_inner().turn_id;
        let found = self
            .planner
            .store
            .get(&id)
            .await
            .map_err(store_error)?
            .ok_or_else(|| {
                Status::not_found(format!(
                    "no turn `{}`",
                    id.chars().take(64).collect::<String>()
                ))
            })?;
        let record_json = match found.record {
            Some(record) if found.state == State::Finished => record,
            _ => serde_json::json!({"turn_id": found.turn_id, "state": found.state.as_str()})
                .to_string(),
        };
        Ok(Response::new(pb::GetTurnResponse { record_json }))
    }

    async fn list_turns(
        &self,
        request: Request<pb::ListTurnsRequest>,
    ) -> Result<Response<pb::ListTurnsResponse>, Status> {
        let request = request.into_inner();
        let date = if request.date.is_empty() {
            turnlog::date_of(now_ms())
        } else if turnlog::valid_date(&request.date) {
            request.date
        } else {
            return Err(Status::invalid_argument(format!(
                "date `{}` is not in YYYY-MM-DD form",
                request.date.chars().take(20).collect::<String>()
            )));
        };
        let limit = if request.limit == 0 {
            50
        } else {
            request.limit as usize
        };
        let records = self
            .planner
            .log
            .read(&date, limit)
            .map_err(|e| Status::internal(format!("the turn log cannot be read: {e}")))?;
        Ok(Response::new(pb::ListTurnsResponse {
            records_json: records.iter().map(ToString::to_string).collect(),
        }))
    }
}
