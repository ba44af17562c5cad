//! The Metnos approval service: the approval flow: pending requests, 3-line cards, single-use decisions by the requester (seed approval_ux.md).
//!
//! Layout: [`serve`] is the entry point (`metnos-approval` and `metnos up` both call it with an
//! already bound listener); `ApprovalApi` answers the `metnos.approval.v1.ApprovalService` contract. The
//! service owns its store: pending approvals.
//!
//! Status: the foundation only. Every RPC answers `UNIMPLEMENTED` naming itself until the
//! approval issue lands; nothing here returns a made-up result.

use std::pin::Pin;

use metnos_kit::server::{StartError, not_implemented, serve_with_store};
use metnos_kit::store::{Db, Migrations};
use metnos_kit::{Config, ServiceName, ShutdownFuture};
use metnos_proto::approval::v1::approval_service_server::{ApprovalService, ApprovalServiceServer};
use metnos_proto::approval::v1::{
    CancelRequest, CancelResponse, CleanupExpiredRequest, CleanupExpiredResponse,
    CreatePendingRequest, CreatePendingResponse, GetPendingRequest, GetPendingResponse,
    ListPendingRequest, ListPendingResponse, RenderCardRequest, RenderCardResponse, ResolveRequest,
    ResolveResponse, WaitDecisionRequest, WaitDecisionResponse,
};
use tokio::net::TcpListener;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// This service.
pub const SERVICE: ServiceName = ServiceName::Approval;

/// The schema of this service's store, per backend.
pub const MIGRATIONS: Migrations = Migrations::NONE;

/// A server-streaming response.
type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Serves the approval service on `listener` until `shutdown` resolves: opens and migrates
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
        |db, _readiness| ApprovalServiceServer::new(ApprovalApi { _db: db }),
    )
    .await
}

/// The `ApprovalService` implementation.
#[derive(Debug)]
pub struct ApprovalApi {
    _db: Db,
}

#[tonic::async_trait]
impl ApprovalService for ApprovalApi {
    type WaitDecisionStream = ResponseStream<WaitDecisionResponse>;
    async fn create_pending(
        &self,
        _request: Request<CreatePendingRequest>,
    ) -> Result<Response<CreatePendingResponse>, Status> {
        Err(not_implemented(
            "metnos.approval.v1.ApprovalService/CreatePending",
        ))
    }

    async fn get_pending(
        &self,
        _request: Request<GetPendingRequest>,
    ) -> Result<Response<GetPendingResponse>, Status> {
        Err(not_implemented(
            "metnos.approval.v1.ApprovalService/GetPending",
        ))
    }

    async fn resolve(
        &self,
        _request: Request<ResolveRequest>,
    ) -> Result<Response<ResolveResponse>, Status> {
        Err(not_implemented(
            "metnos.approval.v1.ApprovalService/Resolve",
        ))
    }

    async fn cancel(
        &self,
        _request: Request<CancelRequest>,
    ) -> Result<Response<CancelResponse>, Status> {
        Err(not_implemented("metnos.approval.v1.ApprovalService/Cancel"))
    }

    async fn list_pending(
        &self,
        _request: Request<ListPendingRequest>,
    ) -> Result<Response<ListPendingResponse>, Status> {
        Err(not_implemented(
            "metnos.approval.v1.ApprovalService/ListPending",
        ))
    }

    async fn cleanup_expired(
        &self,
        _request: Request<CleanupExpiredRequest>,
    ) -> Result<Response<CleanupExpiredResponse>, Status> {
        Err(not_implemented(
            "metnos.approval.v1.ApprovalService/CleanupExpired",
        ))
    }

    async fn render_card(
        &self,
        _request: Request<RenderCardRequest>,
    ) -> Result<Response<RenderCardResponse>, Status> {
        Err(not_implemented(
            "metnos.approval.v1.ApprovalService/RenderCard",
        ))
    }

    async fn wait_decision(
        &self,
        _request: Request<WaitDecisionRequest>,
    ) -> Result<Response<Self::WaitDecisionStream>, Status> {
        Err(not_implemented(
            "metnos.approval.v1.ApprovalService/WaitDecision",
        ))
    }
}
