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

    /// What `text` from `who` says about stopping. During a non-retreat `attempt`, a clear
    /// stop is recorded as the attempt's (the non-retreat telos lowered, shortcut offers
    /// blocked for a day), and an ambiguous one's question (returned) names it.
    pub async fn detect(
        &self,
        who: &Principal,
        text: &str,
        attempt: Option<&metnos_proto::planner::v1::Attempt>,
    ) -> (Stop, Option<String>) {
        let Some(vaglio) = &self.vaglio else {
            return (text::stop_of(text), None);
        };
        let request = vaglio_pb::DetectStopRequest {
            // The recogniser reads whole short phrases; a long message is never a stop.
            text: text.chars().take(1000).collect(),
            principal: Some(who.to_proto()),
            ..attempt_request(attempt)
        };
        let asked = tokio::time::timeout(Self::PATIENCE, vaglio.clone().detect_stop(request)).await;
        match asked {
            Ok(Ok(answer)) => {
                let answer = answer.into_inner();
                let stop = match vaglio_pb::StopKind::try_from(answer.kind) {
                    Ok(vaglio_pb::StopKind::Stop) => Stop::Clear,
                    Ok(vaglio_pb::StopKind::Ambiguous) => Stop::Ambiguous,
                    _ => Stop::No,
                };
                let question = Some(answer.confirmation_question).filter(|q| !q.is_empty());
                (stop, question)
            }
            Ok(Err(status)) => {
                tracing::warn!(code = ?status.code(), "the vaglio's stop recogniser failed; the local one answers");
                (text::stop_of(text), None)
            }
            Err(_) => {
                tracing::warn!(
                    "the vaglio's stop recogniser did not answer in time; the local one answers"
                );
                (text::stop_of(text), None)
            }
        }
    }

    /// `who` confirmed stopping `attempt` (yes to its question): recorded as a clear stop
    /// of it. Failures are logged: the stop itself holds.
    pub async fn attempt_stopped(
        &self,
        who: &Principal,
        attempt: &metnos_proto::planner::v1::Attempt,
    ) {
        let Some(vaglio) = &self.vaglio else {
            return;
        };
        let request = vaglio_pb::DetectStopRequest {
            text: "/stop".to_owned(),
            principal: Some(who.to_proto()),
            ..attempt_request(Some(attempt))
        };
        let asked = tokio::time::timeout(Self::PATIENCE, vaglio.clone().detect_stop(request)).await;
        if !matches!(asked, Ok(Ok(_))) {
            tracing::warn!(
                "a confirmed stop of a non-retreat attempt did not reach the telos engine"
            );
        }
    }
}

/// A stop request's attempt part: a non-retreat attempt names itself and the intent a stop
/// of it blocks for a day — shortcut offers, the attempt's next step.
fn attempt_request(
    attempt: Option<&metnos_proto::planner::v1::Attempt>,
) -> vaglio_pb::DetectStopRequest {
    match attempt {
        Some(a) => vaglio_pb::DetectStopRequest {
            non_retreat: true,
            current_intent: metnos_core::names::proposals::SHORTCUT_OFFER.to_owned(),
            attempt_id: a.attempt_id.clone(),
            attempt: a.wanted.clone(),
            ..Default::default()
        },
        None => vaglio_pb::DetectStopRequest::default(),
    }
}
