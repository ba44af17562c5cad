//! `metnos.gateway.v1.GatewayService`: messages and cards out, pairings kept. Every
//! failure is an [`Error`], turned into a status in one place (`error.rs`).

use metnos_kit::authz::{Rule, Table};
use metnos_kit::tls::Identity;
use std::sync::Arc;
use tracing::Instrument;

use metnos_core::level::AutonomyLevel;
use metnos_core::limits;
use metnos_core::principal::Principal;
use metnos_kit::time::{now_ms, to_timestamp};
use metnos_proto::common::v1 as common;
use metnos_proto::gateway::v1 as pb;
use metnos_proto::gateway::v1::gateway_service_server::GatewayService;
use tonic::{Request, Response, Status};

use crate::conversation::Clients;
use crate::error::Error;
use crate::outbox::{self, Outbox};
use crate::service::CHANNEL;
use crate::store::{Pairing, Store};
use crate::text::{self, Says};
use crate::transport::Telegram;
use metnos_core::language::Language;

/// Who may call which RPC (README, "Security model"): the planner and approval reach
/// people, only the owner administers pairings.
pub const AUTHORIZATION: Table = Table {
    service: "metnos.gateway.v1.GatewayService",
    rules: &[
        Rule {
            method: "SendMessage",
            callers: &[Identity::Planner, Identity::Approval],
        },
        Rule {
            method: "SendCard",
            callers: &[Identity::Planner, Identity::Approval],
        },
        Rule {
            method: "EditCard",
            callers: &[Identity::Planner, Identity::Approval],
        },
        Rule {
            method: "ListPairings",
            callers: &[Identity::Owner],
        },
        Rule {
            method: "GetPairing",
            // The planner: a person's level now, for their standing orders' firings.
            callers: &[Identity::Owner, Identity::Planner],
        },
        Rule {
            method: "ApprovePairing",
            callers: &[Identity::Owner],
        },
        Rule {
            method: "SetLevel",
            callers: &[Identity::Owner],
        },
        Rule {
            method: "RevokePairing",
            callers: &[Identity::Owner],
        },
        Rule {
            method: "CreateWebLogin",
            callers: &[Identity::Owner],
        },
    ],
};

/// The service.
#[derive(Debug, Clone)]
pub struct GatewayApi {
    pub store: Store,
    pub telegram: Option<Arc<Telegram>>,
    /// The planner and approval: what a revoked or lowered person had under way is
    /// stopped through them. `None` only in tests of the edge alone.
    pub clients: Option<Clients>,
    /// The spectator page's sign-ins; `None` when the page is off.
    pub web: Option<Arc<crate::web::Sessions>>,
}

pub fn pairing_msg(p: &Pairing) -> pb::Pairing {
    pb::Pairing {
        principal: Some(common::Principal {
            channel: p.channel.clone(),
            sender_id: p.sender_id.clone(),
        }),
        display_name: p.display_name.clone(),
        level: p.level.to_wire(),
        language: p.language.to_wire(),
        paired_at: Some(to_timestamp(p.paired_at)),
    }
}

/// The principal a request names, checked as at every edge (the store finds the rest).
fn principal_of(p: Option<common::Principal>) -> Result<Principal, Error> {
    Ok(Principal::required("principal", p.as_ref())?)
}

fn message_ref(chat: i64, id: i32) -> pb::MessageRef {
    pb::MessageRef {
        channel: CHANNEL.to_owned(),
        chat_id: chat.to_string(),
        message_id: id.to_string(),
    }
}

impl GatewayApi {
    /// Stops what `who` has under way (turns, pending approvals) and closes their cards.
    async fn withdraw(&self, who: &Principal, lang: Language, reason: &str) -> Result<(), Error> {
        let Some(clients) = &self.clients else {
            return Ok(());
        };
        let tokens = clients
            .withdraw(who, reason)
            .await
            .map_err(|status| Error::Withdraw(status.message().to_owned()))?;
        tracing::info!(principal = %who, withdrawn = tokens.len(), reason, "turns and approvals withdrawn");
        if let Some(telegram) = &self.telegram {
            telegram.conversation().close_withdrawn(&tokens, lang).await;
        }
        Ok(())
    }

    fn outbox_for(&self, channel: &str) -> Result<Arc<Outbox>, Error> {
        if channel != CHANNEL {
            return Err(Error::UnknownChannel(channel.chars().take(32).collect()));
        }
        self.telegram
            .as_deref()
            .map(Telegram::outbox_handle)
            .ok_or(Error::ChannelOff)
    }

    /// The principal's pairing, or NOT_FOUND.
    async fn paired(&self, principal: &Principal) -> Result<Pairing, Error> {
        self.store
            .pairing(principal.channel(), principal.sender_id())
            .await?
            .ok_or(Error::NotPaired)
    }

    async fn chat_of(&self, principal: &Principal) -> Result<i64, Error> {
        let pairing = self.paired(principal).await?;
        pairing.chat_id.parse().map_err(|_| Error::BadChatId)
    }
}

/// A card as a channel can show it: at most 20 lines of 1 KB, 10 rows of 8 buttons, each
/// button's text and data at most 64 bytes (Telegram's limit on callback data).
fn card_within_limits(
    lines: &[String],
    rows: &[metnos_proto::approval::v1::ButtonRow],
) -> Result<(), Error> {
    limits::entries("lines", lines.len(), 20)?;
    for line in lines {
        limits::bytes("lines[]", line, limits::REASON)?;
    }
    limits::entries("buttons", rows.len(), 10)?;
    for row in rows {
        limits::entries("buttons[].buttons", row.buttons.len(), 8)?;
        for button in &row.buttons {
            limits::bytes("button text", &button.text, 64)?;
            limits::bytes("button data", &button.data, 64)?;
        }
    }
    Ok(())
}

/// How long a keyed message may be "being sent" before a caller asking again is told it may
/// have gone (the gateway stopped during it): longer than a send can take.
const SENDING_PATIENCE_MS: i64 = 300_000;

#[tonic::async_trait]
impl GatewayService for GatewayApi {
    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        let request = request.into_inner();
        limits::bytes("text", &request.text, limits::MESSAGE).map_err(Error::from)?;
        let principal = principal_of(request.principal)?;
        if request.text.trim().is_empty() {
            return Err(Error::EmptyText.into());
        }
        limits::bytes(
            "idempotency_key",
            &request.idempotency_key,
            limits::IDEMPOTENCY_KEY,
        )
        .map_err(Error::from)?;
        let outbox = self.outbox_for(principal.channel())?;
        let chat = self.chat_of(&principal).await?;
        let key = (!request.idempotency_key.is_empty()).then_some(request.idempotency_key);
        if let Some(key) = &key
            && let Some((state, ids, since)) = self
                .store
                .begin_send(key, &chat.to_string(), now_ms())
                .await
                .map_err(Error::from)?
        {
            return match state.as_str() {
                "sent" => Ok(Response::new(pb::SendMessageResponse {
                    sent: ids.into_iter().map(|id| message_ref(chat, id)).collect(),
                })),
                // Under way (or this gateway stopped during it, if long ago).
                "sending" if now_ms() - since < SENDING_PATIENCE_MS => {
                    Err(Error::NotTaken("message").into())
                }
                _ => Err(Error::MaybeTaken("message").into()),
            };
        }
        // On a task of its own: a caller that stops waiting does not cut a send in the
        // middle (it is finished, its outcome kept under its key, and logged if it fails).
        let store = self.store.clone();
        let text = request.text;
        let sending = tokio::spawn(
            async move {
                let delivery = outbox.deliver(chat, &text).await;
                if let Some(key) = &key {
                    let kept = match &delivery {
                        outbox::Delivery::Sent(ids) => store.end_send(key, Some(ids), false).await,
                        outbox::Delivery::NotSent => store.end_send(key, None, true).await,
                        outbox::Delivery::MaybeSent(_) => store.end_send(key, None, false).await,
                    };
                    if let Err(e) = kept {
                        tracing::warn!(error = %e, "cannot keep what became of a keyed message");
                    }
                }
                delivery
            }
            .in_current_span(),
        );
        let delivery = sending
            .await
            .unwrap_or(outbox::Delivery::MaybeSent(Vec::new()));
        match delivery {
            outbox::Delivery::Sent(sent) => Ok(Response::new(pb::SendMessageResponse {
                sent: sent.into_iter().map(|id| message_ref(chat, id)).collect(),
            })),
            outbox::Delivery::NotSent => Err(Error::NotTaken("message").into()),
            outbox::Delivery::MaybeSent(_) => Err(Error::MaybeTaken("message").into()),
        }
    }

    async fn send_card(
        &self,
        request: Request<pb::SendCardRequest>,
    ) -> Result<Response<pb::SendCardResponse>, Status> {
        let request = request.into_inner();
        limits::bytes("token", &request.token, limits::TOKEN).map_err(Error::from)?;
        let principal = principal_of(request.principal)?;
        let card = request.card.unwrap_or_default();
        card_within_limits(&card.lines, &card.buttons)?;
        limits::bytes("card.telegram_html", &card.telegram_html, limits::MESSAGE)
            .map_err(Error::from)?;
        if card.lines.is_empty() {
            return Err(Error::EmptyCard.into());
        }
        let outbox = self.outbox_for(principal.channel())?;
        let chat = self.chat_of(&principal).await?;
        // On a task of its own, as a message: a card Telegram showed is remembered even if
        // the caller stopped waiting.
        let token = request.token;
        let sending = tokio::spawn(
            async move { outbox.send_card(chat, &token, &card).await }.in_current_span(),
        );
        let id = sending
            .await
            .ok()
            .flatten()
            .ok_or(Error::NotTaken("card"))?;
        Ok(Response::new(pb::SendCardResponse {
            sent: Some(message_ref(chat, id)),
        }))
    }

    async fn edit_card(
        &self,
        request: Request<pb::EditCardRequest>,
    ) -> Result<Response<pb::EditCardResponse>, Status> {
        let request = request.into_inner();
        card_within_limits(&request.lines, &request.buttons)?;
        let message = request.message.ok_or(Error::MissingMessage)?;
        let outbox = self.outbox_for(&message.channel)?;
        let (Ok(chat), Ok(id)) = (
            message.chat_id.parse::<i64>(),
            message.message_id.parse::<i32>(),
        ) else {
            return Err(Error::NoSuchMessage.into());
        };
        let buttons = (!request.buttons.is_empty()).then(|| outbox::keyboard(&request.buttons));
        let html = text::escape_html(&request.lines.join("\n"));
        outbox.edit(chat, id, html, buttons).await?;
        Ok(Response::new(pb::EditCardResponse {}))
    }

    async fn list_pairings(
        &self,
        _: Request<pb::ListPairingsRequest>,
    ) -> Result<Response<pb::ListPairingsResponse>, Status> {
        let pairings = self.store.pairings().await.map_err(Error::from)?;
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
        limits::bytes("code", &request.code, 32).map_err(Error::from)?;
        let level = AutonomyLevel::from_wire(request.level).map_err(Error::from)?;
        let code = request.code.trim().to_uppercase();
        let pairing = self
            .store
            .approve_code(&code, level, now_ms())
            .await
            .map_err(Error::from)?
            .ok_or(Error::NoSuchCode)?;
        tracing::info!(channel = %pairing.channel, sender_id = %pairing.sender_id, %level, "paired");
        if let (Some(telegram), Ok(chat)) = (&self.telegram, pairing.chat_id.parse::<i64>()) {
            let hello = text::say(pairing.language, Says::Paired(level.as_str()));
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
        let level = AutonomyLevel::from_wire(request.level).map_err(Error::from)?;
        let before = self.paired(&principal).await?;
        let changed = self
            .store
            .set_level(principal.channel(), principal.sender_id(), level)
            .await
            .map_err(Error::from)?;
        if !changed {
            return Err(Error::NotPaired.into());
        }
        let pairing = self.paired(&principal).await?;
        if pairing.level < before.level {
            // What was asked at the old level is not decided at it.
            self.withdraw(
                &principal,
                pairing.language,
                "the person's level was lowered",
            )
            .await?;
        }
        Ok(Response::new(pb::SetLevelResponse {
            pairing: Some(pairing_msg(&pairing)),
        }))
    }

    async fn revoke_pairing(
        &self,
        request: Request<pb::RevokePairingRequest>,
    ) -> Result<Response<pb::RevokePairingResponse>, Status> {
        let principal = principal_of(request.into_inner().principal)?;
        let language = self
            .store
            .pairing(principal.channel(), principal.sender_id())
            .await
            .map_err(Error::from)?
            .map(|p| p.language);
        let revoked = self
            .store
            .revoke(principal.channel(), principal.sender_id())
            .await
            .map_err(Error::from)?;
        // Revoked first, so nothing new starts for them; then what they had under way stops.
        if let Some(language) = language {
            self.withdraw(&principal, language, "the person's pairing was revoked")
                .await?;
        }
        Ok(Response::new(pb::RevokePairingResponse { revoked }))
    }

    async fn create_web_login(
        &self,
        _: Request<pb::CreateWebLoginRequest>,
    ) -> Result<Response<pb::CreateWebLoginResponse>, Status> {
        let web = self.web.as_ref().ok_or(Error::WebOff)?;
        let (url, expires_ms) = web.new_login(now_ms());
        Ok(Response::new(pb::CreateWebLoginResponse {
            url,
            expires_at: Some(to_timestamp(expires_ms)),
        }))
    }
}
