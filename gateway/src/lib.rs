//! The Metnos gateway service: the channel gateway: Telegram and CLI channels, pairing, approval callbacks (seed approval_ux.md ch. 7).
//!
//! Layout: [`serve`] is the entry point (`metnos-gateway` and `metnos up` both call it with an
//! already bound listener); `GatewayApi` answers the `metnos.gateway.v1.GatewayService` contract. The
//! service owns its store: pairings and channel state.
//!
//! Status: the foundation only. Every RPC answers `UNIMPLEMENTED` naming itself until the
//! gateway issue lands; nothing here returns a made-up result.

use metnos_kit::server::{StartError, not_implemented, serve_with_store};
use metnos_kit::store::{Db, Migrations};
use metnos_kit::{Config, ServiceName, ShutdownFuture};
use metnos_proto::gateway::v1::gateway_service_server::{GatewayService, GatewayServiceServer};
use metnos_proto::gateway::v1::{
    ApprovePairingRequest, ApprovePairingResponse, EditCardRequest, EditCardResponse,
    GetPairingRequest, GetPairingResponse, ListPairingsRequest, ListPairingsResponse,
    RevokePairingRequest, RevokePairingResponse, SendCardRequest, SendCardResponse,
    SendMessageRequest, SendMessageResponse, SetLevelRequest, SetLevelResponse,
};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

/// This service.
pub const SERVICE: ServiceName = ServiceName::Gateway;

/// The schema of this service's store, per backend.
pub const MIGRATIONS: Migrations = Migrations::NONE;

/// Serves the gateway service on `listener` until `shutdown` resolves: opens and migrates
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
        |db, _readiness| GatewayServiceServer::new(GatewayApi { _db: db }),
    )
    .await
}

/// The `GatewayService` implementation.
#[derive(Debug)]
pub struct GatewayApi {
    _db: Db,
}

#[tonic::async_trait]
impl GatewayService for GatewayApi {
    async fn send_message(
        &self,
        _request: Request<SendMessageRequest>,
    ) -> Result<Response<SendMessageResponse>, Status> {
        Err(not_implemented(
            "metnos.gateway.v1.GatewayService/SendMessage",
        ))
    }

    async fn send_card(
        &self,
        _request: Request<SendCardRequest>,
    ) -> Result<Response<SendCardResponse>, Status> {
        Err(not_implemented("metnos.gateway.v1.GatewayService/SendCard"))
    }

    async fn edit_card(
        &self,
        _request: Request<EditCardRequest>,
    ) -> Result<Response<EditCardResponse>, Status> {
        Err(not_implemented("metnos.gateway.v1.GatewayService/EditCard"))
    }

    async fn list_pairings(
        &self,
        _request: Request<ListPairingsRequest>,
    ) -> Result<Response<ListPairingsResponse>, Status> {
        Err(not_implemented(
            "metnos.gateway.v1.GatewayService/ListPairings",
        ))
    }

    async fn get_pairing(
        &self,
        _request: Request<GetPairingRequest>,
    ) -> Result<Response<GetPairingResponse>, Status> {
        Err(not_implemented(
            "metnos.gateway.v1.GatewayService/GetPairing",
        ))
    }

    async fn approve_pairing(
        &self,
        _request: Request<ApprovePairingRequest>,
    ) -> Result<Response<ApprovePairingResponse>, Status> {
        Err(not_implemented(
            "metnos.gateway.v1.GatewayService/ApprovePairing",
        ))
    }

    async fn set_level(
        &self,
        _request: Request<SetLevelRequest>,
    ) -> Result<Response<SetLevelResponse>, Status> {
        Err(not_implemented("metnos.gateway.v1.GatewayService/SetLevel"))
    }

    async fn revoke_pairing(
        &self,
        _request: Request<RevokePairingRequest>,
    ) -> Result<Response<RevokePairingResponse>, Status> {
        Err(not_implemented(
            "metnos.gateway.v1.GatewayService/RevokePairing",
        ))
    }
}
