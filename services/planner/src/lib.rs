//! The Metnos planner service: the turn loop: an LLM proposes tool calls, each passes policy, vaglio and approval, then a signed executor runs it (seed agent_runtime.md).
//!
//! Layout: [`serve`] is the entry point (`metnos-planner` and `metnos up` both call it with an
//! already bound listener); `PlannerApi` answers the `metnos.planner.v1.PlannerService` contract. The
//! service owns its store: scratchpad, suspended turns and scheduler state.
//!
//! Status: the foundation only. Every RPC answers `UNIMPLEMENTED` naming itself until the
//! planner issue lands; nothing here returns a made-up result.

use std::pin::Pin;

use metnos_kit::server::{StartError, not_implemented, serve_with_store};
use metnos_kit::store::{Db, Migrations};
use metnos_kit::{Config, ServiceName, ShutdownFuture};
use metnos_proto::planner::v1::planner_service_server::{PlannerService, PlannerServiceServer};
use metnos_proto::planner::v1::{
    CancelTurnRequest, CancelTurnResponse, GetTurnRequest, GetTurnResponse, ListTurnsRequest,
    ListTurnsResponse, ResumeTurnRequest, ResumeTurnResponse, RunTurnRequest, RunTurnResponse,
};
use tokio::net::TcpListener;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// This service.
pub const SERVICE: ServiceName = ServiceName::Planner;

/// The schema of this service's store, per backend.
pub const MIGRATIONS: Migrations = Migrations::NONE;

/// A server-streaming response.
type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Serves the planner service on `listener` until `shutdown` resolves: opens and migrates
/// the store, reports SERVING, drains on shutdown.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownFuture,
) -> Result<(), StartError> {
    serve_with_store(
        SERVICE,
        &config,
        &MIGRATIONS,
        listener,
        shutdown,
        |db, _readiness| PlannerServiceServer::new(PlannerApi { _db: db }),
    )
    .await
}

/// The `PlannerService` implementation.
#[derive(Debug)]
pub struct PlannerApi {
    _db: Db,
}

#[tonic::async_trait]
impl PlannerService for PlannerApi {
    type RunTurnStream = ResponseStream<RunTurnResponse>;
    type ResumeTurnStream = ResponseStream<ResumeTurnResponse>;
    async fn run_turn(
        &self,
        _request: Request<RunTurnRequest>,
    ) -> Result<Response<Self::RunTurnStream>, Status> {
        Err(not_implemented("metnos.planner.v1.PlannerService/RunTurn"))
    }

    async fn resume_turn(
        &self,
        _request: Request<ResumeTurnRequest>,
    ) -> Result<Response<Self::ResumeTurnStream>, Status> {
        Err(not_implemented(
            "metnos.planner.v1.PlannerService/ResumeTurn",
        ))
    }

    async fn cancel_turn(
        &self,
        _request: Request<CancelTurnRequest>,
    ) -> Result<Response<CancelTurnResponse>, Status> {
        Err(not_implemented(
            "metnos.planner.v1.PlannerService/CancelTurn",
        ))
    }

    async fn get_turn(
        &self,
        _request: Request<GetTurnRequest>,
    ) -> Result<Response<GetTurnResponse>, Status> {
        Err(not_implemented("metnos.planner.v1.PlannerService/GetTurn"))
    }

    async fn list_turns(
        &self,
        _request: Request<ListTurnsRequest>,
    ) -> Result<Response<ListTurnsResponse>, Status> {
        Err(not_implemented(
            "metnos.planner.v1.PlannerService/ListTurns",
        ))
    }
}
