//! The Metnos vaglio service: the constitutional evaluator: a binary guard, a graded judge, the private verdict log, and the telos engine (seeds vaglio.md, telos.md).
//!
//! Layout: [`serve`] is the entry point (`metnos-vaglio` and `metnos up` both call it with an
//! already bound listener); `VaglioApi` answers the `metnos.vaglio.v1.VaglioService` contract. The
//! service owns its store: telos state (the verdict log itself is monthly JSONL under the data directory).
//!
//! Status: the foundation only. Every RPC answers `UNIMPLEMENTED` naming itself until the
//! vaglio issue lands; nothing here returns a made-up result.

use metnos_kit::server::{StartError, not_implemented, serve_with_store};
use metnos_kit::store::{Db, Migrations};
use metnos_kit::{Config, ServiceName, ShutdownFuture};
use metnos_proto::vaglio::v1::vaglio_service_server::{VaglioService, VaglioServiceServer};
use metnos_proto::vaglio::v1::{
    DetectStopRequest, DetectStopResponse, EvaluateProposalRequest, EvaluateProposalResponse,
    GetTelosRequest, GetTelosResponse, JudgeRequest, JudgeResponse, ListRejectedProposalsRequest,
    ListRejectedProposalsResponse, ListVerdictsRequest, ListVerdictsResponse,
    RecordFeedbackRequest, RecordFeedbackResponse,
};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

/// This service.
pub const SERVICE: ServiceName = ServiceName::Vaglio;

/// The schema of this service's store, per backend.
pub const MIGRATIONS: Migrations = Migrations::NONE;

/// Serves the vaglio service on `listener` until `shutdown` resolves: opens and migrates
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
        |db, _readiness| VaglioServiceServer::new(VaglioApi { _db: db }),
    )
    .await
}

/// The `VaglioService` implementation.
#[derive(Debug)]
pub struct VaglioApi {
    _db: Db,
}

#[tonic::async_trait]
impl VaglioService for VaglioApi {
    async fn judge(
        &self,
        _request: Request<JudgeRequest>,
    ) -> Result<Response<JudgeResponse>, Status> {
        Err(not_implemented("metnos.vaglio.v1.VaglioService/Judge"))
    }

    async fn list_verdicts(
        &self,
        _request: Request<ListVerdictsRequest>,
    ) -> Result<Response<ListVerdictsResponse>, Status> {
        Err(not_implemented(
            "metnos.vaglio.v1.VaglioService/ListVerdicts",
        ))
    }

    async fn evaluate_proposal(
        &self,
        _request: Request<EvaluateProposalRequest>,
    ) -> Result<Response<EvaluateProposalResponse>, Status> {
        Err(not_implemented(
            "metnos.vaglio.v1.VaglioService/EvaluateProposal",
        ))
    }

    async fn get_telos(
        &self,
        _request: Request<GetTelosRequest>,
    ) -> Result<Response<GetTelosResponse>, Status> {
        Err(not_implemented("metnos.vaglio.v1.VaglioService/GetTelos"))
    }

    async fn record_feedback(
        &self,
        _request: Request<RecordFeedbackRequest>,
    ) -> Result<Response<RecordFeedbackResponse>, Status> {
        Err(not_implemented(
            "metnos.vaglio.v1.VaglioService/RecordFeedback",
        ))
    }

    async fn detect_stop(
        &self,
        _request: Request<DetectStopRequest>,
    ) -> Result<Response<DetectStopResponse>, Status> {
        Err(not_implemented("metnos.vaglio.v1.VaglioService/DetectStop"))
    }

    async fn list_rejected_proposals(
        &self,
        _request: Request<ListRejectedProposalsRequest>,
    ) -> Result<Response<ListRejectedProposalsResponse>, Status> {
        Err(not_implemented(
            "metnos.vaglio.v1.VaglioService/ListRejectedProposals",
        ))
    }
}
