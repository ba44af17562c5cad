//! The edge: prost types in, domain types out, and back. Errors become gRPC statuses in
//! one exhaustive conversion; store causes are logged, never sent to the client.

use metnos_kit::authz::{Rule, Table};
use metnos_kit::tls::Identity;
use std::sync::Arc;

use metnos_core::level::AutonomyLevel;
use metnos_core::principal::Principal;
use metnos_kit::readiness::Readiness;
use metnos_kit::store::{failure_status, is_unreachable};
use metnos_kit::time::{from_timestamp, to_timestamp};
use metnos_proto::common::v1::Principal as PrincipalMsg;
use metnos_proto::policy::v1 as pb;
use metnos_proto::policy::v1::policy_service_server::PolicyService;
use tonic::{Request, Response, Status};

use crate::grant::Grant;
use crate::outcome::Decider;
use crate::service::{Error, Policy};
use crate::store::ListFilter;
use crate::table::{Outcome, table_outcome};
use metnos_core::capability::{DefaultApproval, REGISTRY, TargetKind};

/// Who may call which RPC (README, "Security model"): the planner asks, approval (a
/// territory) and the owner record grants; the planner lists them (its unused-grants
/// proposal) and approval lists and revokes them (an accepted revocation offer, only the
/// grants its card named, checked to be the person's own when asked); the owner
/// administers them.
pub const AUTHORIZATION: Table = Table {
    service: "metnos.policy.v1.PolicyService",
    rules: &[
        Rule {
            method: "ListCapabilities",
            callers: &Identity::ALL,
        },
        Rule {
            method: "GetTable",
            callers: &Identity::ALL,
        },
        Rule {
            method: "Check",
            // The vaglio: its LLM judge asks before calling an online provider.
            callers: &[Identity::Planner, Identity::Vaglio, Identity::Owner],
        },
        Rule {
            method: "RecordGrant",
            callers: &[Identity::Approval, Identity::Owner],
        },
        Rule {
            method: "ListGrants",
            callers: &[
                Identity::Planner,
                Identity::Approval,
                Identity::Web,
                Identity::Owner,
            ],
        },
        Rule {
            // The spectator page: the owner revoking from it (a revocation only ever takes
            // power away).
            method: "RevokeGrant",
            callers: &[Identity::Approval, Identity::Web, Identity::Owner],
        },
        Rule {
            method: "PruneGrants",
            callers: &[Identity::Owner],
        },
        Rule {
            method: "VerifyGrantChanges",
            callers: &[Identity::Web, Identity::Owner],
        },
    ],
};

use metnos_core::limits;
use metnos_core::principal::MAX_ID_LEN;

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        match error {
            Error::UnknownCapability(_)
            | Error::UnspecifiedLevel
            | Error::Target(_)
            | Error::Principal(_)
            | Error::BadPrincipal(_)
            | Error::Grant(_)
            | Error::InvalidGrantId(_)
            | Error::InvalidUnusedDays
            | Error::InvalidExpiry
            | Error::TooBig(_) => Status::invalid_argument(error.to_string()),
            Error::KeyReused => Status::already_exists(error.to_string()),
            Error::Store(e) => failure_status(crate::SERVICE, "the grant store", &e),
        }
    }
}

fn level_from(value: i32) -> Result<AutonomyLevel, Error> {
    AutonomyLevel::from_wire(value).map_err(|_| Error::UnspecifiedLevel)
}

fn outcome_to(outcome: Outcome) -> pb::Outcome {
    match outcome {
        Outcome::Allowed => pb::Outcome::Allowed,
        Outcome::ApprovalRequired => pb::Outcome::ApprovalRequired,
        Outcome::Denied => pb::Outcome::Denied,
    }
}

fn principal_from(message: Option<&PrincipalMsg>) -> Result<Option<Principal>, Error> {
    match message {
        None => Ok(None),
        Some(p) => Ok(Some(Principal::required("principal", Some(p))?)),
    }
}

fn grant_to(grant: Grant) -> pb::Grant {
    pb::Grant {
        id: grant.id,
        principal: Some(PrincipalMsg {
            channel: grant.principal.channel().to_owned(),
            sender_id: grant.principal.sender_id().to_owned(),
        }),
        capability: grant.capability,
        target: grant.target,
        granted_at: Some(to_timestamp(grant.granted_at)),
        expires_at: grant.expires_at.map(to_timestamp),
        granted_by: grant.granted_by,
        revoked_at: grant.revoked_at.map(to_timestamp),
        last_used_at: grant.last_used_at.map(to_timestamp),
    }
}

/// The `PolicyService` implementation.
#[derive(Debug, Clone)]
pub struct PolicyApi {
    policy: Arc<Policy>,
    readiness: Readiness,
}

impl PolicyApi {
    pub fn new(policy: Arc<Policy>, readiness: Readiness) -> PolicyApi {
        PolicyApi { policy, readiness }
    }

    /// The status for `error`; an unreachable store also turns health NOT_SERVING.
    async fn status(&self, error: Error) -> Status {
        if let Error::Store(e) = &error
            && is_unreachable(e)
        {
            self.readiness.store_failed(self.policy.db()).await;
        }
        error.into()
    }
}

#[tonic::async_trait]
impl PolicyService for PolicyApi {
    async fn list_capabilities(
        &self,
        _request: Request<pb::ListCapabilitiesRequest>,
    ) -> Result<Response<pb::ListCapabilitiesResponse>, Status> {
        let capabilities = REGISTRY
            .iter()
            .map(|spec| pb::Capability {
                name: spec.name.to_owned(),
                critical: spec.critical,
                default_approval: match spec.default_approval {
                    DefaultApproval::None => pb::DefaultApproval::None,
                    DefaultApproval::PerTarget => pb::DefaultApproval::PerTarget,
                    DefaultApproval::Always => pb::DefaultApproval::Always,
                } as i32,
                target_kind: match spec.target_kind {
                    TargetKind::PathGlob => pb::TargetKind::PathGlob,
                    TargetKind::Host => pb::TargetKind::Host,
                    TargetKind::Exact => pb::TargetKind::Exact,
                    TargetKind::None => pb::TargetKind::None,
                } as i32,
                description: spec.description.to_owned(),
                reads_only: spec.reads_only,
            })
            .collect();
        Ok(Response::new(pb::ListCapabilitiesResponse { capabilities }))
    }

    async fn get_table(
        &self,
        _request: Request<pb::GetTableRequest>,
    ) -> Result<Response<pb::GetTableResponse>, Status> {
        let rows = AutonomyLevel::ALL
            .iter()
            .map(|level| pb::TableRow {
                level: level.to_wire(),
                cells: REGISTRY
                    .iter()
                    .map(|spec| pb::TableCell {
                        capability: spec.name.to_owned(),
                        outcome: outcome_to(table_outcome(*level, spec.capability)) as i32,
                    })
                    .collect(),
            })
            .collect();
        Ok(Response::new(pb::GetTableResponse { rows }))
    }

    async fn check(
        &self,
        request: Request<pb::CheckRequest>,
    ) -> Result<Response<pb::CheckResponse>, Status> {
        // The vaglio asks only about an online judge: never about anyone's other grants.
        if metnos_kit::authz::Caller::of(&request) == Some(Identity::Vaglio)
            && request.get_ref().capability != metnos_core::Capability::LlmOnline.name()
        {
            return Err(Status::permission_denied(
                "the vaglio may ask policy only about llm:online",
            ));
        }
        let request = request.into_inner();
        let result = async {
            limits::all(&[
                ("capability", &request.capability, limits::CAPABILITY),
                ("target", &request.target, limits::TARGET),
            ])?;
            let level = level_from(request.level)?;
            let principal = principal_from(request.principal.as_ref())?;
            self.policy
                .check(level, &request.capability, principal, &request.target)
                .await
        }
        .await;
        let decision = match result {
            Ok(decision) => decision,
            Err(e) => return Err(self.status(e).await),
        };
        tracing::debug!(outcome = %decision.outcome, grant = ?decision.grant_id, "check");
        Ok(Response::new(pb::CheckResponse {
            outcome: outcome_to(decision.outcome) as i32,
            table_outcome: outcome_to(decision.table_outcome) as i32,
            decided_by: match decision.decided_by {
                Decider::Table => pb::Decider::Table,
                Decider::Grant => pb::Decider::Grant,
            } as i32,
            grant_id: decision.grant_id,
            reason: decision.reason,
        }))
    }

    async fn record_grant(
        &self,
        request: Request<pb::RecordGrantRequest>,
    ) -> Result<Response<pb::RecordGrantResponse>, Status> {
        let request = request.into_inner();
        let result = async {
            limits::all(&[
                ("capability", &request.capability, limits::CAPABILITY),
                ("target", &request.target, limits::TARGET),
                ("granted_by", &request.granted_by, limits::REASON),
                (
                    "idempotency_key",
                    &request.idempotency_key,
                    limits::IDEMPOTENCY_KEY,
                ),
            ])?;
            let principal = Principal::required("principal", request.principal.as_ref())?;
            let expires_at = match &request.expires_at {
                None => None,
                Some(ts) => Some(from_timestamp(ts).ok_or(Error::InvalidExpiry)?),
            };
            self.policy
                .record(
                    principal,
                    &request.capability,
                    &request.target,
                    expires_at,
                    &request.granted_by,
                    &request.idempotency_key,
                )
                .await
        }
        .await;
        match result {
            Ok(grant) => Ok(Response::new(pb::RecordGrantResponse {
                grant: Some(grant_to(grant)),
            })),
            Err(e) => Err(self.status(e).await),
        }
    }

    async fn list_grants(
        &self,
        request: Request<pb::ListGrantsRequest>,
    ) -> Result<Response<pb::ListGrantsResponse>, Status> {
        // The gateway (the spectator page) never holds an approval's token: a grant's
        // `approval:<token>` is named as the decisions journal names it.
        let spectator = metnos_kit::authz::Caller::of(&request) == Some(Identity::Web);
        let request = request.into_inner();
        let sizes = limits::all(&[
            ("channel", &request.channel, MAX_ID_LEN),
            ("sender_id", &request.sender_id, MAX_ID_LEN),
        ]);
        if let Err(e) = sizes {
            return Err(Error::TooBig(e).into());
        }
        let filter = ListFilter {
            channel: Some(request.channel).filter(|c| !c.is_empty()),
            sender_id: Some(request.sender_id).filter(|s| !s.is_empty()),
            include_inactive: request.include_inactive,
        };
        match self.policy.list(&filter).await {
            Ok(grants) => Ok(Response::new(pb::ListGrantsResponse {
                grants: grants
                    .into_iter()
                    .map(grant_to)
                    .map(|mut g| {
                        if spectator && let Some(token) = g.granted_by.strip_prefix("approval:") {
                            g.granted_by =
                                format!("approval:{}", metnos_kit::chain::token_name(token));
                        }
                        g
                    })
                    .collect(),
            })),
            Err(e) => Err(self.status(e).await),
        }
    }

    async fn revoke_grant(
        &self,
        request: Request<pb::RevokeGrantRequest>,
    ) -> Result<Response<pb::RevokeGrantResponse>, Status> {
        let r = request.into_inner();
        let of = Principal::optional("principal", r.principal.as_ref())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        match self.policy.revoke(r.grant_id, of.as_ref()).await {
            Ok(revoked) => Ok(Response::new(pb::RevokeGrantResponse { revoked })),
            Err(e) => Err(self.status(e).await),
        }
    }

    async fn prune_grants(
        &self,
        request: Request<pb::PruneGrantsRequest>,
    ) -> Result<Response<pb::PruneGrantsResponse>, Status> {
        let unused_days = request.into_inner().unused_days;
        if let Err(e) = limits::number("unused_days", u64::from(unused_days), 36_500) {
            return Err(Error::TooBig(e).into());
        }
        match self.policy.prune(unused_days).await {
            Ok(revoked) => Ok(Response::new(pb::PruneGrantsResponse {
                revoked: revoked.into_iter().map(grant_to).collect(),
            })),
            Err(e) => Err(self.status(e).await),
        }
    }

    async fn verify_grant_changes(
        &self,
        _request: Request<pb::VerifyGrantChangesRequest>,
    ) -> Result<Response<pb::VerifyGrantChangesResponse>, Status> {
        match self.policy.verify_changes().await {
            Ok(report) => Ok(Response::new(pb::VerifyGrantChangesResponse {
                records: report.lines,
                newest_day_root: report.newest_day(),
                broken: report.broken.unwrap_or_default(),
            })),
            Err(e) => Err(self.status(e).await),
        }
    }
}
