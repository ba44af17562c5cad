//! The services a conversation reaches: the planner and approval ([`Clients`]), and the
//! vaglio's stop recogniser and telos feedback ([`StopDetector`]).

use std::time::Duration;

use metnos_core::principal::Principal;
use metnos_kit::client::TracedChannel;
use metnos_proto::approval::v1 as approval;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
use metnos_proto::planner::v1::turn_event::Event;
use metnos_proto::vaglio::v1 as vaglio_pb;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;

use crate::text::{self, Stop};

/// RunTurn and ResumeTurn responses alike.
pub trait TurnMessage: Send + 'static {
    fn event(self) -> Option<Event>;
}

impl TurnMessage for pb::RunTurnResponse {
    fn event(self) -> Option<Event> {
        self.event.and_then(|e| e.event)
    }
}

impl TurnMessage for pb::ResumeTurnResponse {
    fn event(self) -> Option<Event> {
        self.event.and_then(|e| e.event)
    }
}

/// The planner and approval, as the gateway reaches them.
#[derive(Debug, Clone)]
pub struct Clients {
    pub planner: PlannerServiceClient<TracedChannel>,
    pub approval: ApprovalServiceClient<TracedChannel>,
}

impl Clients {
    /// Stops everything `who` has under way, at once: their pending approvals are
    /// withdrawn and every unfinished turn of theirs cancelled. The withdrawn tokens are
    /// returned, so their cards can say so.
    pub async fn withdraw(
        &self,
        who: &Principal,
        reason: &str,
    ) -> Result<Vec<String>, tonic::Status> {
        let listed = approval::ListPendingRequest {
            include_resolved: false,
            limit: 1000,
            requester: Some(who.to_proto()),
        };
        let pending = self
            .approval
            .clone()
            .list_pending(listed)
            .await?
            .into_inner()
            .approvals;
        let cancel = pb::CancelTurnRequest {
            target: Some(pb::cancel_turn_request::Target::Principal(who.to_proto())),
            reason: reason.to_owned(),
            all: true,
            ..Default::default()
        };
        match self.planner.clone().cancel_turn(cancel).await {
            Ok(_) => {}
            Err(status) if status.code() == tonic::Code::NotFound => {}
            Err(status) => return Err(status),
        }
        let mut tokens = Vec::new();
        for request in pending {
            let cancel = approval::CancelRequest {
                token: request.token.clone(),
                reason: reason.to_owned(),
            };
            match self.approval.clone().cancel(cancel).await {
                // Already cancelled with its turn: the same outcome.
                Ok(_) => {}
                Err(status) if status.code() == tonic::Code::FailedPrecondition => {}
                Err(status) => return Err(status),
            }
            tokens.push(request.token);
        }
        Ok(tokens)
    }
}

/// The stop clause's one recogniser is the vaglio's (`DetectStop`); when it cannot be
/// asked within [`StopDetector::PATIENCE`], the same recogniser linked here answers, so a
/// stop is never lost.
#[derive(Debug, Clone)]
pub struct StopDetector {
    vaglio: Option<VaglioServiceClient<TracedChannel>>,
}

impl StopDetector {
    pub const PATIENCE: Duration = Duration::from_secs(2);

    /// Tells the vaglio's telos engine how `who` answered proposal `proposal_id`. A
    /// failure is logged: the answer itself (a grant recorded, a rejection) stands.
    pub async fn feedback(
        &self,
        proposal_id: &str,
        kind: vaglio_pb::FeedbackKind,
        who: &Principal,
    ) {
        let Some(vaglio) = &self.vaglio else {
            return;
        };
        let request = vaglio_pb::RecordFeedbackRequest {
            proposal_id: proposal_id.to_owned(),
            kind: kind as i32,
            principal: Some(who.to_proto()),
        };
        match vaglio.clone().record_feedback(request).await {
            Ok(answer) => {
                if answer.into_inner().never_listed {
                    tracing::info!("a kind of proposal is never proposed again to this person");
                }
            }
            Err(status) => {
                tracing::warn!(code = ?status.code(), reason = %status.message(), "the answer to a proposal did not reach the telos engine");
            }
        }
    }

    pub fn new(vaglio: Option<VaglioServiceClient<TracedChannel>>) -> StopDetector {
        StopDetector { vaglio }
    }

    /// What `text` from `who` says about stopping.
    pub async fn detect(&self, who: &Principal, text: &str) -> Stop {
        let Some(vaglio) = &self.vaglio else {
            return text::stop_of(text);
        };
        let request = vaglio_pb::DetectStopRequest {
            // The recogniser reads whole short phrases; a long message is never a stop.
            text: text.chars().take(1000).collect(),
            current_intent: String::new(),
            principal: Some(who.to_proto()),
            non_retreat: false,
        };
        let asked = tokio::time::timeout(Self::PATIENCE, vaglio.clone().detect_stop(request)).await;
        match asked {
            Ok(Ok(answer)) => match vaglio_pb::StopKind::try_from(answer.into_inner().kind) {
                Ok(vaglio_pb::StopKind::Stop) => Stop::Clear,
                Ok(vaglio_pb::StopKind::Ambiguous) => Stop::Ambiguous,
                _ => Stop::No,
            },
            Ok(Err(status)) => {
                tracing::warn!(code = ?status.code(), "the vaglio's stop recogniser failed; the local one answers");
                text::stop_of(text)
            }
            Err(_) => {
                tracing::warn!(
                    "the vaglio's stop recogniser did not answer in time; the local one answers"
                );
                text::stop_of(text)
            }
        }
    }
}
