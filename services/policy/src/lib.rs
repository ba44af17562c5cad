//! The Metnos policy service: the legality filter: the closed capability registry, the autonomy x capability table, per-target grants and the effective outcome (seed policy.md).
//!
//! Layout: [`serve`] is the entry point (`metnos-policy` and `metnos up` both call it with an
//! already bound listener); `PolicyApi` answers the `metnos.policy.v1.PolicyService` contract. The
//! service owns its store: grants (SQLite by default, PostgreSQL by URL).
//!
//! Status: the foundation only. Every RPC answers `UNIMPLEMENTED` naming itself until the
//! policy issue lands; nothing here returns a made-up result.

use metnos_kit::server::{StartError, not_implemented, serve_with_store};
use metnos_kit::store::{Db, Migrations};
use metnos_kit::{Config, ServiceName, ShutdownFuture};
use metnos_proto::policy::v1::policy_service_server::{PolicyService, PolicyServiceServer};
use metnos_proto::policy::v1::{
    CheckRequest, CheckResponse, GetTableRequest, GetTableResponse, ListCapabilitiesRequest,
    ListCapabilitiesResponse, ListGrantsRequest, ListGrantsResponse, PruneGrantsRequest,
    PruneGrantsResponse, RecordGrantRequest, RecordGrantResponse, RevokeGrantRequest,
    RevokeGrantResponse,
};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

/// This service.
pub const SERVICE: ServiceName = ServiceName::Policy;

/// The schema of this service's store, per backend.
pub const MIGRATIONS: Migrations = Migrations::NONE;

/// Serves the policy service on `listener` until `shutdown` resolves: opens and migrates
/// the store, reports SERVING, drains on shutdown.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownFuture,
) -> Result<(), StartError> {
    serve_with_store(SERVICE, &config, &MIGRATIONS, listener, shutdown, |db| {
        PolicyServiceServer::new(PolicyApi { _db: db })
    })
    .await
}

/// The `PolicyService` implementation.
#[derive(Debug)]
pub struct PolicyApi {
    _db: Db,
}

#[tonic::async_trait]
impl PolicyService for PolicyApi {
    async fn list_capabilities(
        &self,
        _request: Request<ListCapabilitiesRequest>,
    ) -> Result<Response<ListCapabilitiesResponse>, Status> {
        Err(not_implemented(
            "metnos.policy.v1.PolicyService/ListCapabilities",
        ))
    }

    async fn get_table(
        &self,
        _request: Request<GetTableRequest>,
    ) -> Result<Response<GetTableResponse>, Status> {
        Err(not_implemented("metnos.policy.v1.PolicyService/GetTable"))
    }

    async fn check(
        &self,
        _request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        Err(not_implemented("metnos.policy.v1.PolicyService/Check"))
    }

    async fn record_grant(
        &self,
        _request: Request<RecordGrantRequest>,
    ) -> Result<Response<RecordGrantResponse>, Status> {
        Err(not_implemented(
            "metnos.policy.v1.PolicyService/RecordGrant",
        ))
    }

    async fn list_grants(
        &self,
        _request: Request<ListGrantsRequest>,
    ) -> Result<Response<ListGrantsResponse>, Status> {
        Err(not_implemented("metnos.policy.v1.PolicyService/ListGrants"))
    }

    async fn revoke_grant(
        &self,
        _request: Request<RevokeGrantRequest>,
    ) -> Result<Response<RevokeGrantResponse>, Status> {
        Err(not_implemented(
            "metnos.policy.v1.PolicyService/RevokeGrant",
        ))
    }

    async fn prune_grants(
        &self,
        _request: Request<PruneGrantsRequest>,
    ) -> Result<Response<PruneGrantsResponse>, Status> {
        Err(not_implemented(
            "metnos.policy.v1.PolicyService/PruneGrants",
        ))
    }
}
