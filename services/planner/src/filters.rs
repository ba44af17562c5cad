//! The three filters every call passes, as the planner reaches them: policy, vaglio and
//! approval; and the gateway, to tell a person what became of a turn nobody followed.
//! [`Filters`] is what the turn loop needs of them; [`GrpcFilters`] asks the real services
//! over gRPC (traced, so one turn is one trace); tests drive the loop with a fake.

use metnos_core::capability::Capability;
use metnos_core::language::Language;
use metnos_core::level::AutonomyLevel;
use metnos_core::principal::Principal;
use metnos_kit::client::{TracedChannel, channel};
use metnos_kit::tls::{Identity, Tls};
use metnos_proto::approval::v1 as approval;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::gateway::v1 as gateway;
use metnos_proto::gateway::v1::gateway_service_client::GatewayServiceClient;
use metnos_proto::policy::v1 as policy;
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;
use metnos_proto::vaglio::v1 as vaglio;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;
use tonic::Status;

use crate::turn::rules::Outcome;

/// Policy's answer for one capability and target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyAnswer {
    pub outcome: Outcome,
    pub reason: String,
    pub grant_id: Option<i64>,
}

impl From<policy::CheckResponse> for PolicyAnswer {
    fn from(answer: policy::CheckResponse) -> PolicyAnswer {
        // An outcome this planner does not know is a denial.
        let outcome = match policy::Outcome::try_from(answer.outcome) {
            Ok(policy::Outcome::Allowed) => Outcome::Allowed,
            Ok(policy::Outcome::ApprovalRequired) => Outcome::ApprovalRequired,
            Ok(policy::Outcome::Denied | policy::Outcome::Unspecified) | Err(_) => Outcome::Denied,
        };
        PolicyAnswer {
            outcome,
            reason: answer.reason,
            grant_id: answer.grant_id,
        }
    }
}

/// Why a service the loop depends on did not answer: the transport's status mapped once,
/// here, into what the loop decides on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The service read the request and found it wrong (INVALID_ARGUMENT): a refusal of
    /// this call, not an outage.
    #[error("{0}")]
    Refused(String),
    /// What was asked about is not there (a request swept, a pairing gone).
    #[error("{0}")]
    NotFound(String),
    /// Things are not in a state to answer this (answered already, revoked, taken, full).
    #[error("{message}")]
    Precondition { code: tonic::Code, message: String },
    /// The service was out of reach, too slow, or failed: nothing that depends on it runs.
    #[error("{message}")]
    Unavailable { code: tonic::Code, message: String },
}

impl ClientError {
    /// The status code the service answered with.
    pub fn code(&self) -> tonic::Code {
        match self {
            ClientError::Refused(_) => tonic::Code::InvalidArgument,
            ClientError::NotFound(_) => tonic::Code::NotFound,
            ClientError::Precondition { code, .. } | ClientError::Unavailable { code, .. } => *code,
        }
    }

    /// What the service said (for logs and the model; never shown to a person as is).
    pub fn message(&self) -> &str {
        match self {
            ClientError::Refused(message)
            | ClientError::NotFound(message)
            | ClientError::Precondition { message, .. }
            | ClientError::Unavailable { message, .. } => message,
        }
    }
}

impl From<Status> for ClientError {
    fn from(status: Status) -> ClientError {
        let message = status.message().to_owned();
        match status.code() {
            tonic::Code::InvalidArgument => ClientError::Refused(message),
            tonic::Code::NotFound => ClientError::NotFound(message),
            code @ (tonic::Code::FailedPrecondition
            | tonic::Code::AlreadyExists
            | tonic::Code::PermissionDenied
            | tonic::Code::ResourceExhausted
            | tonic::Code::Aborted
            | tonic::Code::OutOfRange) => ClientError::Precondition { code, message },
            code => ClientError::Unavailable { code, message },
        }
    }
}

/// What the turn loop asks of policy, the vaglio and approval. A [`ClientError`] is a filter
/// that could not be asked, or refused the request itself: the call is not run.
#[tonic::async_trait]
pub trait Filters: Send + Sync + std::fmt::Debug {
    /// Policy: may `principal` at `level` use `capability` on `target`?
    async fn check(
        &self,
        level: AutonomyLevel,
        principal: &Principal,
        capability: Capability,
        target: &str,
    ) -> Result<PolicyAnswer, ClientError>;

    /// The vaglio's verdict on a proposed call.
    async fn judge(&self, request: vaglio::JudgeRequest) -> Result<vaglio::Verdict, ClientError>;

    /// Registers an approval request and renders its card.
    async fn create_pending(
        &self,
        request: approval::CreatePendingRequest,
    ) -> Result<approval::CreatePendingResponse, ClientError>;

    /// An approval request as it stands.
    async fn get_pending(&self, token: &str) -> Result<approval::PendingApproval, ClientError>;

    /// Waits until `token` is decided (approved, rejected, expired or cancelled).
    async fn wait_decision(&self, token: &str) -> Result<approval::PendingApproval, ClientError>;

    /// Withdraws a request nobody needs to answer any more.
    async fn cancel(&self, token: &str, reason: &str) -> Result<(), ClientError>;

    /// Tells `principal` `text` on their channel (the gateway's SendMessage), at most once
    /// under `key`.
    async fn tell(&self, principal: &Principal, text: &str, key: &str) -> Result<(), ClientError>;

    /// Shows `principal` the approval card of `token` (the gateway's SendCard).
    async fn show_card(
        &self,
        principal: &Principal,
        token: &str,
        card: approval::Card,
    ) -> Result<(), ClientError>;

    /// A channel's person's level now (the gateway's pairing); `None`: not paired.
    async fn pairing_level(
        &self,
        principal: &Principal,
    ) -> Result<Option<AutonomyLevel>, ClientError> {
        let _ = principal;
        Err(ClientError::from(Status::unimplemented("no gateway here")))
    }

    /// The vaglio's telos engine on a proactive proposal: publish, the digest, a slot, or
    /// reject. Fakes that never propose need not answer it.
    async fn evaluate_proposal(
        &self,
        request: vaglio::EvaluateProposalRequest,
    ) -> Result<vaglio::AlignmentResult, ClientError> {
        let _ = request;
        Err(ClientError::from(Status::unimplemented(
            "no telos engine here",
        )))
    }

    /// The language a channel's person reads (the gateway's pairing); English when unknown.
    async fn pairing_language(&self, principal: &Principal) -> Language {
        let _ = principal;
        Language::English
    }

    /// Everyone's active grants (policy), for the unused-grants proposal.
    async fn list_grants(&self) -> Result<Vec<policy::Grant>, ClientError> {
        Err(ClientError::from(Status::unimplemented(
            "no grant store here",
        )))
    }

    /// Tells the telos engine a proposal's card went unanswered (48 h of silence).
    async fn record_silence(
        &self,
        proposal_id: &str,
        person: &Principal,
    ) -> Result<(), ClientError> {
        let _ = (proposal_id, person);
        Err(ClientError::from(Status::unimplemented(
            "no telos engine here",
        )))
    }

    /// The proposals the telos engine discarded since `since_ms`, `person`'s or everyone's:
    /// the newest 1000, and (for a person) the `closest` nearest to being shown.
    async fn discarded(
        &self,
        person: Option<&Principal>,
        since_ms: i64,
        closest: u32,
    ) -> Result<Discarded, ClientError> {
        let _ = (person, since_ms, closest);
        Err(ClientError::from(Status::unimplemented(
            "no telos engine here",
        )))
    }
}

/// Discarded proposals: the newest (at most 1000), and the nearest to being shown.
pub type Discarded = (Vec<vaglio::AlignmentResult>, Vec<vaglio::AlignmentResult>);

/// How long the gateway is given to deliver a message: longer than it may take (its
/// retries and Telegram's "retry after" pauses), so a message is not asked for twice.
pub const TELL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(150);

/// Clients of the three filter services and the gateway.
#[derive(Debug, Clone)]
pub struct GrpcFilters {
    policy: PolicyServiceClient<TracedChannel>,
    vaglio: VaglioServiceClient<TracedChannel>,
    approval: ApprovalServiceClient<TracedChannel>,
    gateway: GatewayServiceClient<TracedChannel>,
}

/// A client that cannot be made (a bad URL or TLS setting), naming the service.
#[derive(Debug, thiserror::Error)]
#[error("{who}: {error}")]
pub struct ConnectError {
    who: Identity,
    error: metnos_kit::client::EndpointError,
}

impl GrpcFilters {
    /// Clients, as the planner (`tls`), for policy, the vaglio, approval and the gateway
    /// at these URLs (connections are made lazily).
    pub fn connect(
        tls: &Tls,
        [policy, vaglio, approval, gateway]: &[String; 4],
    ) -> Result<GrpcFilters, ConnectError> {
        let make = |who: Identity, url: &str| {
            channel(tls, who, url).map_err(|error| ConnectError { who, error })
        };
        Ok(GrpcFilters {
            policy: PolicyServiceClient::new(make(Identity::Policy, policy)?),
            vaglio: VaglioServiceClient::new(make(Identity::Vaglio, vaglio)?),
            approval: ApprovalServiceClient::new(make(Identity::Approval, approval)?),
            gateway: GatewayServiceClient::new(make(Identity::Gateway, gateway)?),
        })
    }
}

#[tonic::async_trait]
impl Filters for GrpcFilters {
    async fn check(
        &self,
        level: AutonomyLevel,
        principal: &Principal,
        capability: Capability,
        target: &str,
    ) -> Result<PolicyAnswer, ClientError> {
        let request = policy::CheckRequest {
            level: level.to_wire(),
            capability: capability.name().to_owned(),
            principal: Some(principal.to_proto()),
            target: target.to_owned(),
        };
        Ok(self
            .policy
            .clone()
            .check(request)
            .await?
            .into_inner()
            .into())
    }

    async fn judge(&self, request: vaglio::JudgeRequest) -> Result<vaglio::Verdict, ClientError> {
        let response = self.vaglio.clone().judge(request).await?.into_inner();
        response.verdict.ok_or_else(|| {
            ClientError::from(Status::internal("the vaglio answered without a verdict"))
        })
    }

    async fn create_pending(
        &self,
        request: approval::CreatePendingRequest,
    ) -> Result<approval::CreatePendingResponse, ClientError> {
        Ok(self
            .approval
            .clone()
            .create_pending(request)
            .await?
            .into_inner())
    }

    async fn get_pending(&self, token: &str) -> Result<approval::PendingApproval, ClientError> {
        let request = approval::GetPendingRequest {
            token: token.to_owned(),
        };
        self.approval
            .clone()
            .get_pending(request)
            .await?
            .into_inner()
            .approval
            .ok_or_else(|| {
                ClientError::from(Status::internal(
                    "the approval service answered without the request",
                ))
            })
    }

    async fn wait_decision(&self, token: &str) -> Result<approval::PendingApproval, ClientError> {
        let request = approval::WaitDecisionRequest {
            token: token.to_owned(),
        };
        let mut stream = self
            .approval
            .clone()
            .wait_decision(request)
            .await?
            .into_inner();
        loop {
            match stream.message().await? {
                Some(message) => {
                    if let Some(pending) = message.approval
                        && pending.status != approval::ApprovalStatus::Pending as i32
                    {
                        return Ok(pending);
                    }
                }
                None => return self.get_pending(token).await,
            }
        }
    }

    async fn cancel(&self, token: &str, reason: &str) -> Result<(), ClientError> {
        let request = approval::CancelRequest {
            token: token.to_owned(),
            reason: reason.to_owned(),
        };
        self.approval.clone().cancel(request).await?;
        Ok(())
    }

    async fn tell(&self, principal: &Principal, text: &str, key: &str) -> Result<(), ClientError> {
        let request = gateway::SendMessageRequest {
            principal: Some(principal.to_proto()),
            text: text.to_owned(),
            reply_to: None,
            idempotency_key: key.to_owned(),
        };
        let mut client = self.gateway.clone();
        let mut request = tonic::Request::new(request);
        request.set_timeout(TELL_DEADLINE);
        client.send_message(request).await?;
        Ok(())
    }

    async fn show_card(
        &self,
        principal: &Principal,
        token: &str,
        card: approval::Card,
    ) -> Result<(), ClientError> {
        let request = gateway::SendCardRequest {
            principal: Some(principal.to_proto()),
            token: token.to_owned(),
            card: Some(card),
        };
        let mut request = tonic::Request::new(request);
        request.set_timeout(TELL_DEADLINE);
        self.gateway.clone().send_card(request).await?;
        Ok(())
    }

    async fn pairing_level(
        &self,
        principal: &Principal,
    ) -> Result<Option<AutonomyLevel>, ClientError> {
        let request = gateway::GetPairingRequest {
            principal: Some(principal.to_proto()),
        };
        match self.gateway.clone().get_pairing(request).await {
            Ok(answer) => {
                let level = answer
                    .into_inner()
                    .pairing
                    .map(|p| p.level)
                    .unwrap_or_default();
                AutonomyLevel::from_wire(level).map(Some).map_err(|_| {
                    ClientError::from(Status::internal(
                        "the gateway answered a pairing without a level",
                    ))
                })
            }
            Err(status) if status.code() == tonic::Code::NotFound => Ok(None),
            Err(status) => Err(status.into()),
        }
    }

    async fn evaluate_proposal(
        &self,
        request: vaglio::EvaluateProposalRequest,
    ) -> Result<vaglio::AlignmentResult, ClientError> {
        self.vaglio
            .clone()
            .evaluate_proposal(request)
            .await?
            .into_inner()
            .result
            .ok_or_else(|| {
                ClientError::from(Status::internal("the vaglio answered without a result"))
            })
    }

    async fn pairing_language(&self, principal: &Principal) -> Language {
        if principal.is_terminal() {
            return Language::English;
        }
        let request = gateway::GetPairingRequest {
            principal: Some(principal.to_proto()),
        };
        self.gateway
            .clone()
            .get_pairing(request)
            .await
            .ok()
            .and_then(|r| r.into_inner().pairing)
            .and_then(|p| Language::from_wire(p.language))
            .unwrap_or(Language::English)
    }

    async fn list_grants(&self) -> Result<Vec<policy::Grant>, ClientError> {
        let request = policy::ListGrantsRequest {
            channel: String::new(),
            sender_id: String::new(),
            include_inactive: false,
        };
        Ok(self
            .policy
            .clone()
            .list_grants(request)
            .await?
            .into_inner()
            .grants)
    }

    async fn record_silence(
        &self,
        proposal_id: &str,
        person: &Principal,
    ) -> Result<(), ClientError> {
        let request = vaglio::RecordFeedbackRequest {
            proposal_id: proposal_id.to_owned(),
            kind: vaglio::FeedbackKind::Silence48h as i32,
            principal: Some(person.to_proto()),
        };
        self.vaglio.clone().record_feedback(request).await?;
        Ok(())
    }

    async fn discarded(
        &self,
        person: Option<&Principal>,
        since_ms: i64,
        closest: u32,
    ) -> Result<Discarded, ClientError> {
        let since = Some(metnos_kit::time::to_timestamp(since_ms));
        let all = vaglio::ListRejectedProposalsRequest {
            limit: 1000,
            principal: person.map(Principal::to_proto),
            borderline: 0,
            since,
        };
        let all = self
            .vaglio
            .clone()
            .list_rejected_proposals(all)
            .await?
            .into_inner()
            .results;
        let Some(person) = person.filter(|_| !all.is_empty() && closest > 0) else {
            return Ok((all, Vec::new()));
        };
        let nearest = vaglio::ListRejectedProposalsRequest {
            limit: closest,
            principal: Some(person.to_proto()),
            borderline: closest,
            since,
        };
        let nearest = self
            .vaglio
            .clone()
            .list_rejected_proposals(nearest)
            .await?
            .into_inner()
            .results;
        Ok((all, nearest))
    }
}
