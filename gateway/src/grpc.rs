//! `metnos.gateway.v1.GatewayService`: messages and cards out, pairings kept.

use std::sync::Arc;

use metnos_core::level::AutonomyLevel;
use metnos_kit::time::{now_ms, to_timestamp};
use metnos_proto::common::v1 as common;
use metnos_proto::gateway::v1 as pb;
use metnos_proto::gateway::v1::gateway_service_server::GatewayService;
use tonic::{Request, Response, Status};

use crate::CHANNEL;
use crate::outbox::{self, Outbox};
use crate::store::{Pairing, Store};
use crate::text;
use crate::transport::Telegram;

/// The service.
#[derive(Debug, Clone)]
pub struct GatewayApi {
    pub store: Store,
    pub telegram: Option<Arc<Telegram>>,
}

fn store_error(e: sqlx::Error) -> Status {
    if metnos_kit::store::is_unreachable(&e) {
        Status::unavailable(format!("the gateway store is unavailable: {e}"))
    } else {
        Status::internal(format!("gateway store: {e}"))
    }
}

fn level_name(level: i32) -> Result<&'static str, Status> {
    AutonomyLevel::from_wire(level)
        .map(AutonomyLevel::as_str)
        .map_err(|e| Status::invalid_argument(e.to_string()))
}

pub fn pairing_msg(p: &Pairing) -> pb::Pairing {
    pb::Pairing {
        principal: Some(common::Principal {
            channel: p.channel.clone(),
            sender_id: p.sender_id.clone(),
        }),
        display_name: p.display_name.clone(),
        level: p.autonomy().to_wire(),
        language: p.language().to_wire(),
        paired_at: Some(to_timestamp(p.paired_at)),
    }
}

fn principal_of(p: Option<common::Principal>) -> Result<common::Principal, Status> {
    match p {
        Some(p) if !p.channel.is_empty() && !p.sender_id.is_empty() => Ok(p),
        _ => Err(Status::invalid_argument(
            "principal is missing (channel and sender_id are required)",
        )),
    }
}

impl GatewayApi {
    fn outbox_for(&self, channel: &str) -> Result<&Outbox, Status> {
        if channel != CHANNEL {
            return Err(Status::invalid_argument(format!(
                "unknown channel `{}`",
                channel.chars().take(32).collect::<String>()
            )));
        }
        self.telegram
            .as_deref()
            .map(Telegram::outbox)
            .ok_or_else(|| Status::unavailable("the Telegram channel is off (no bot token)"))
    }

    /// The principal's pairing, or NOT_FOUND.
    async fn paired(&self, principal: &common::Principal) -> Result<Pairing, Status> {
        self.store
            .pairing(&principal.channel, &principal.sender_id)
            .await
            .map_err(store_error)?
            .ok_or_else(|| Status::not_found("the principal is not paired"))
    }

    async fn chat_of(&self, principal: &common::Principal) -> Result<i64, Status> {
        let pairing = self.paired(principal).await?;
        pairing
            .chat_id
            .parse()
            .map_err(|_| Status::internal("the pairing's chat id is not a number"))
    }
}

#[tonic::async_trait]
impl GatewayService for GatewayApi {
    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        let request = request.into_inner();
        let principal = principal_of(request.principal)?;
        if request.text.trim().is_empty() {
            return Err(Status::invalid_argument("text is empty"));
        }
        let outbox = self.outbox_for(&principal.channel)?;
        let chat = self.chat_of(&principal).await?;
        let sent = outbox.send_text(chat, &request.text).await;
        if sent.is_empty() {
            return Err(Status::unavailable("Telegram did not take the message"));
        }
        Ok(Response::new(pb::SendMessageResponse {
            sent: sent
                .into_iter()
                .map(|id| pb::MessageRef {
                    channel: CHANNEL.to_owned(),
                    chat_id: chat.to_string(),
                    message_id: id.to_string(),
                })
                .collect(),
        }))
    }

    async fn send_card(
        &self,
        request: Request<pb::SendCardRequest>,
    ) -> Result<Response<pb::SendCardResponse>, Status> {
        let request = request.into_inner();
        let principal = principal_of(request.principal)?;
        let card = request.card.unwrap_or_default();
        if card.lines.is_empty() {
            return Err(Status::invalid_argument("the card has no lines"));
        }
        let outbox = self.outbox_for(&principal.channel)?;
        let chat = self.chat_of(&principal).await?;
        let id = outbox
            .send_card(chat, &request.token, &card)
            .await
            .ok_or_else(|| Status::unavailable("Telegram did not take the card"))?;
        Ok(Response::new(pb::SendCardResponse {
            sent: Some(pb::MessageRef {
                channel: CHANNEL.to_owned(),
                chat_id: chat.to_string(),
                message_id: id.to_string(),
            }),
        }))
    }

    async fn edit_card(
        &self,
        request: Request<pb::EditCardRequest>,
    ) -> Result<Response<pb::EditCardResponse>, Status> {
        let request = request.into_inner();
        let message = request
            .message
            .ok_or_else(|| Status::invalid_argument("message is missing"))?;
        let outbox = self.outbox_for(&message.channel)?;
        let (Ok(chat), Ok(id)) = (
            message.chat_id.parse::<i64>(),
            message.message_id.parse::<i32>(),
        ) else {
            return Err(Status::not_found("no such message"));
        };
        let buttons = (!request.buttons.is_empty()).then(|| outbox::keyboard(&request.buttons));
        outbox
            .edit(
                chat,
                id,
                text::escape_html(&request.lines.join("\n")),
                buttons,
            )
            .await
            .map_err(|e| {
                if e.contains("not found") {
                    Status::not_found(e)
                } else {
                    Status::unavailable(e)
                }
            })?;
        Ok(Response::new(pb::EditCardResponse {}))
    }

    async fn list_pairings(
        &self,
        _: Request<pb::ListPairingsRequest>,
    ) -> Result<Response<pb::ListPairingsResponse>, Status> {
        let pairings = self.store.pairings().await.map_err(store_error)?;
        Ok(Response::new(pb::ListPairingsResponse {
            pairings: pairings.iter().map(pairing_msg).collect(),
        }))
    }

    async fn get_pairing(
        &self,
        request: Request<pb::GetPairingRequest>,
    ) -> Result<Response<pb::GetPairingResponse>, Status> {
        let principal = principal_of(request.into_inner().principal)?;
        let pairing = self.paired(&principal).await?;
        Ok(Response::new(pb::GetPairingResponse {
            pairing: Some(pairing_msg(&pairing)),
        }))
    }

    async fn approve_pairing(
        &self,
        request: Request<pb::ApprovePairingRequest>,
    ) -> Result<Response<pb::ApprovePairingResponse>, Status> {
        let request = request.into_inner();
        let level = level_name(request.level)?;
        let code = request.code.trim().to_uppercase();
        let pairing = self
            .store
            .approve_code(&code, level, now_ms())
            .await
            .map_err(store_error)?
            .ok_or_else(|| {
                Status::not_found(
                    "no such pairing code (unknown, already used, or older than 10 minutes)",
                )
            })?;
        tracing::info!(channel = %pairing.channel, sender_id = %pairing.sender_id, level, "paired");
        if let (Some(telegram), Ok(chat)) = (&self.telegram, pairing.chat_id.parse::<i64>()) {
            let hello = match pairing.language.as_str() {
                "en" => format!("Paired: you can talk to me now (level {level})."),
                _ => format!("Fatto: ora puoi parlarmi (livello {level})."),
            };
            telegram.outbox().send_text(chat, &hello).await;
        }
        Ok(Response::new(pb::ApprovePairingResponse {
            pairing: Some(pairing_msg(&pairing)),
        }))
    }

    async fn set_level(
        &self,
        request: Request<pb::SetLevelRequest>,
    ) -> Result<Response<pb::SetLevelResponse>, Status> {
        let request = request.into_inner();
        let principal = principal_of(request.principal)?;
        let level = level_name(request.level)?;
        if !self
            .store
            .set_level(&principal.channel, &principal.sender_id, level)
            .await
            .map_err(store_error)?
        {
            return Err(Status::not_found("the principal is not paired"));
        }
        let pairing = self.paired(&principal).await?;
        Ok(Response::new(pb::SetLevelResponse {
            pairing: Some(pairing_msg(&pairing)),
        }))
    }

    async fn revoke_pairing(
        &self,
        request: Request<pb::RevokePairingRequest>,
    ) -> Result<Response<pb::RevokePairingResponse>, Status> {
        let principal = principal_of(request.into_inner().principal)?;
        let revoked = self
            .store
            .revoke(&principal.channel, &principal.sender_id)
            .await
            .map_err(store_error)?;
        Ok(Response::new(pb::RevokePairingResponse { revoked }))
    }
}
