//! The grants an approved concession records in the policy service, and the grants an
//! approved revocation offer revokes there.

use metnos_core::capability::Capability;
use metnos_core::principal::Principal;
use metnos_proto::common::v1::Principal as PrincipalMsg;
use metnos_proto::policy::v1::RecordGrantRequest;

use super::{Approvals, Error, GRANT_CLAIM_MS, MAX_REVOKED, POLICY_DEADLINE};
use crate::card::Territory;
use crate::store::Pending;

impl Approvals {
    /// The grants a revocation offer names (`args_json`'s `grants`, ids), each an active
    /// grant of `requester`'s in policy's store; anything else refuses the offer.
    pub(super) async fn revocable(
        &self,
        requester: &Principal,
        capability: Option<Capability>,
        args_json: &str,
    ) -> Result<Vec<metnos_proto::policy::v1::Grant>, Error> {
        let args: serde_json::Value =
            serde_json::from_str(args_json).unwrap_or(serde_json::Value::Null);
        let ids: Vec<i64> = args
            .get("grants")
            .and_then(serde_json::Value::as_array)
            .map(|ids| ids.iter().map(|id| id.as_i64().unwrap_or(0)).collect())
            .unwrap_or_default();
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        if capability.is_some()
            || ids.is_empty()
            || ids.len() > MAX_REVOKED
            || unique.len() != ids.len()
            || ids.iter().any(|id| *id <= 0)
        {
            return Err(Error::BadRevokeOffer);
        }
        let Some(mut policy) = self.policy.clone() else {
            return Err(Error::PolicyUnavailable(
                "no policy service is configured".into(),
            ));
        };
        let request = metnos_proto::policy::v1::ListGrantsRequest {
            channel: requester.channel().to_owned(),
            sender_id: requester.sender_id().to_owned(),
            include_inactive: false,
        };
        let listed = tokio::time::timeout(POLICY_DEADLINE, policy.list_grants(request))
            .await
            .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("policy did not answer")))
            .map_err(|status| Error::PolicyUnavailable(format!("{:?}", status.code())))?
            .into_inner()
            .grants;
        let mine = |g: &&metnos_proto::policy::v1::Grant| {
            g.principal.as_ref().is_some_and(|p| {
                p.channel == requester.channel() && p.sender_id == requester.sender_id()
            }) && g.revoked_at.is_none()
        };
        ids.iter()
            .map(|id| {
                listed
                    .iter()
                    .filter(mine)
                    .find(|g| g.id == *id)
                    .cloned()
                    .ok_or(Error::BadRevokeOffer)
            })
            .collect()
    }

    /// Revokes the grants an approved revocation offer names (its target: their ids). On
    /// failure the sweeper tries again; revoking is idempotent in policy.
    async fn revoke_grants(&self, pending: &Pending, claimed_until: i64) -> Option<i64> {
        let mut policy = self.policy.clone()?;
        let ids: Vec<i64> = pending
            .target
            .split(',')
            .filter_map(|id| id.parse().ok())
            .collect();
        // Each bound to the requester: policy revokes only their own grant. One deadline for
        // all of them, well within the claim.
        let person = PrincipalMsg {
            channel: pending.requester.channel().to_owned(),
            sender_id: pending.requester.sender_id().to_owned(),
        };
        let all = async {
            // A grant used since the offer was made is no longer unused: kept (the person
            // agreed to revoke grants they did not use).
            let listed = policy
                .list_grants(metnos_proto::policy::v1::ListGrantsRequest {
                    channel: person.channel.clone(),
                    sender_id: person.sender_id.clone(),
                    include_inactive: false,
                })
                .await?
                .into_inner()
                .grants;
            let used_since = |id: i64| {
                listed.iter().any(|g| {
                    g.id == id
                        && g.last_used_at
                            .as_ref()
                            .and_then(metnos_kit::time::from_timestamp)
                            .is_some_and(|used| used >= pending.created_at)
                })
            };
            for id in &ids {
                if used_since(*id) {
                    tracing::info!(token = %metnos_kit::chain::token_name(&pending.token), grant = id, "a grant used since the revocation offer is kept");
                    continue;
                }
                let request = metnos_proto::policy::v1::RevokeGrantRequest {
                    grant_id: *id,
                    principal: Some(person.clone()),
                };
                policy.revoke_grant(request).await?;
            }
            Ok::<(), tonic::Status>(())
        };
        let asked = tokio::time::timeout(POLICY_DEADLINE, all)
            .await
            .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("policy did not answer")));
        if let Err(status) = asked {
            if permanent(status.code()) {
                // Asking again would get the same answer: the approval stands, nothing more
                // is revoked, and the queue moves on.
                tracing::error!(token = %metnos_kit::chain::token_name(&pending.token), code = ?status.code(), "policy refused the revocation; it is not asked again");
                let _ = self
                    .store
                    .give_up_grant(&pending.token, claimed_until)
                    .await;
            } else {
                tracing::warn!(token = %metnos_kit::chain::token_name(&pending.token), code = ?status.code(), "grants not revoked yet; will try again");
                let _ = self
                    .store
                    .release_grant(&pending.token, claimed_until)
                    .await;
            }
            return None;
        }
        let first = *ids.first()?;
        if let Err(e) = self.store.set_grant(&pending.token, first).await {
            tracing::warn!(token = %metnos_kit::chain::token_name(&pending.token), error = %e, "grants revoked but not noted; will note it later");
            return None;
        }
        tracing::info!(token = %metnos_kit::chain::token_name(&pending.token), count = ids.len(), "unused grants revoked");
        Some(first)
    }

    /// Records the grant of an approved concession in the policy service (or, for an
    /// approved revocation offer, revokes its grants). On failure the sweeper tries again
    /// later; the decision stands either way.
    pub(super) async fn record_grant(&self, pending: &Pending) -> Option<i64> {
        let mut policy = self.policy.clone()?;
        // Claimed first: the resolve and every replica's retry sweep would otherwise ask
        // policy at once (policy's idempotency key makes a second ask return the same grant
        // anyway).
        let now = self.now();
        let claimed_until = now.saturating_add(GRANT_CLAIM_MS);
        match self
            .store
            .claim_grant(&pending.token, now, claimed_until)
            .await
        {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                tracing::warn!(token = %metnos_kit::chain::token_name(&pending.token), error = %e, "cannot claim the grant's recording; will try again");
                return None;
            }
        }
        if pending.executor == crate::describe::GRANT_REVOKE {
            return self.revoke_grants(pending, claimed_until).await;
        }
        // The pattern the card offered (a request stored before offers existed: its target).
        let target = if pending.territory_target.is_empty() {
            &pending.target
        } else {
            &pending.territory_target
        };
        let expires_at = match pending.territory {
            Territory::Session => Some(metnos_kit::time::to_timestamp(
                pending.decision_at.unwrap_or_else(|| self.now()) + self.settings.session_ms,
            )),
            Territory::Permanent | Territory::None => None,
        };
        let request = RecordGrantRequest {
            principal: Some(PrincipalMsg {
                channel: pending.requester.channel().to_owned(),
                sender_id: pending.requester.sender_id().to_owned(),
            }),
            capability: Capability::name_of(pending.capability).to_owned(),
            target: target.clone(),
            expires_at,
            granted_by: format!("approval:{}", pending.token),
            idempotency_key: format!("approval:{}", pending.token),
        };
        // Well within the claim, so a hung policy neither holds Resolve nor the sweeper.
        let asked = tokio::time::timeout(POLICY_DEADLINE, policy.record_grant(request))
            .await
            .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("policy did not answer")));
        match asked {
            Ok(response) => {
                let id = response.into_inner().grant.map(|g| g.id)?;
                if let Err(e) = self.store.set_grant(&pending.token, id).await {
                    // The retry asks again and policy returns this same grant.
                    tracing::warn!(token = %metnos_kit::chain::token_name(&pending.token), error = %e, "grant recorded but not noted; will note it later");
                    return None;
                }
                tracing::info!(token = %metnos_kit::chain::token_name(&pending.token), grant = id, territory = pending.territory.as_str(), "territory granted");
                Some(id)
            }
            Err(status) => {
                // Policy's message may quote the pattern; the code says enough here.
                if permanent(status.code()) {
                    // Asking again would get the same answer (an expiry now past, a key
                    // reused): the approval stands without a grant, and the queue moves on.
                    tracing::error!(token = %metnos_kit::chain::token_name(&pending.token), capability = %Capability::name_of(pending.capability), code = ?status.code(), "policy refused the territory grant; it is not asked again");
                    let _ = self
                        .store
                        .give_up_grant(&pending.token, claimed_until)
                        .await;
                } else {
                    tracing::warn!(token = %metnos_kit::chain::token_name(&pending.token), capability = %Capability::name_of(pending.capability), code = ?status.code(), "territory grant not recorded yet");
                    let _ = self
                        .store
                        .release_grant(&pending.token, claimed_until)
                        .await;
                }
                None
            }
        }
    }
}

/// Policy's answers that asking again would not change.
fn permanent(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::InvalidArgument
            | tonic::Code::AlreadyExists
            | tonic::Code::FailedPrecondition
            | tonic::Code::PermissionDenied
    )
}
