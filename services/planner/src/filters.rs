//! The three filters every call passes, as the planner reaches them: policy, vaglio and
//! approval, over gRPC (traced, so one turn is one trace).

use metnos_kit::client::{TracedChannel, channel};
use metnos_proto::approval::v1 as approval;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::common::v1 as common;
use metnos_proto::policy::v1 as policy;
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;
use metnos_proto::vaglio::v1 as vaglio;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;
use tonic::Status;

/// Clients of the three filter services.
#[derive(Debug, Clone)]
pub struct Filters {
    policy: PolicyServiceClient<TracedChannel>,
    vaglio: VaglioServiceClient<TracedChannel>,
    approval: ApprovalServiceClient<TracedChannel>,
}

impl Filters {
    /// Clients for the services at these URLs (connections are made lazily).
    pub fn connect(
        policy_url: &str,
        vaglio_url: &str,
        approval_url: &str,
    ) -> Result<Filters, String> {
        let make = |what: &str, url: &str| channel(url).map_err(|e| format!("{what}: {e}"));
        Ok(Filters {
            policy: PolicyServiceClient::new(make("policy", policy_url)?),
            vaglio: VaglioServiceClient::new(make("vaglio", vaglio_url)?),
            approval: ApprovalServiceClient::new(make("approval", approval_url)?),
        })
    }

    pub async fn check(
        &self,
        level: common::AutonomyLevel,
        principal: &common::Principal,
        capability: &str,
        target: &str,
    ) -> Result<policy::CheckResponse, Status> {
        let request = policy::CheckRequest {
            level: level as i32,
            capability: capability.to_owned(),
            principal: Some(principal.clone()),
            target: target.to_owned(),
        };
        Ok(self.policy.clone().check(request).await?.into_inner())
    }

    pub async fn judge(&self, request: vaglio::JudgeRequest) -> Result<vaglio::Verdict, Status> {
        let response = self.vaglio.clone().judge(request).await?.into_inner();
        response
            .verdict
            .ok_or_else(|| Status::internal("the vaglio answered without a verdict"))
    }

    pub async fn create_pending(
        &self,
        request: approval::CreatePendingRequest,
    ) -> Result<approval::CreatePendingResponse, Status> {
        Ok(self
            .approval
            .clone()
            .create_pending(request)
            .await?
            .into_inner())
    }

    pub async fn get_pending(&self, token: &str) -> Result<approval::PendingApproval, Status> {
        let request = approval::GetPendingRequest {
            token: token.to_owned(),
        };
        self.approval
            .clone()
            .get_pending(request)
            .await?
            .into_inner()
            .approval
            .ok_or_else(|| Status::internal("the approval service answered without the request"))
    }

    /// Waits until `token` is decided (approved, rejected, expired or cancelled).
    pub async fn wait_decision(&self, token: &str) -> Result<approval::PendingApproval, Status> {
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

    pub async fn cancel(&self, token: &str, reason: &str) -> Result<(), Status> {
        let request = approval::CancelRequest {
            token: token.to_owned(),
            reason: reason.to_owned(),
        };
        self.approval.clone().cancel(request).await?;
        Ok(())
    }
}
