//! Requests become domain types here (`TryFrom`): a request to register ([`NewRequest`]),
//! the card fields it carries ([`CardRequest`]), a decision, a person. What does not hold
//! is an [`Error`] that says which field; the edge answers it INVALID_ARGUMENT.

use metnos_core::capability::Capability;
use metnos_core::limits;
use metnos_core::principal::Principal;
use metnos_proto::approval::v1 as pb;
use metnos_proto::common::v1::Principal as PrincipalMsg;

use crate::card::{CardRequest, Language, Reversibility, Territory};
use crate::service::{Decision, Error, NewRequest};

/// The person in `field`, which must be there.
pub fn principal(message: Option<&PrincipalMsg>, field: &'static str) -> Result<Principal, Error> {
    Ok(Principal::required(field, message)?)
}

/// A concession on the wire; unspecified or unknown is none (just this call).
pub fn territory_of(value: i32) -> Territory {
    match pb::TerritoryConcession::try_from(value) {
        Ok(pb::TerritoryConcession::Session) => Territory::Session,
        Ok(pb::TerritoryConcession::Permanent) => Territory::Permanent,
        _ => Territory::None,
    }
}

/// A resolve request's decision, which must be given.
pub fn decision_of(value: i32) -> Result<Decision, Error> {
    match pb::Decision::try_from(value) {
        Ok(pb::Decision::Approve) => Ok(Decision::Approve),
        Ok(pb::Decision::Reject) => Ok(Decision::Reject),
        _ => Err(Error::Unspecified("decision")),
    }
}

impl TryFrom<&pb::ApprovalRequest> for CardRequest {
    type Error = Error;

    /// The card fields a caller sends; the service fills in the rest.
    fn try_from(message: &pb::ApprovalRequest) -> Result<CardRequest, Error> {
        let reversibility = match pb::Reversibility::try_from(message.reversibility) {
            Ok(pb::Reversibility::Reversible) => Reversibility::Reversible,
            Ok(pb::Reversibility::Irreversible) => Reversibility::Irreversible,
            Ok(pb::Reversibility::Partial) => Reversibility::Partial,
            _ => return Err(Error::Unspecified("reversibility")),
        };
        // Read by RenderCard's marker only: CreatePending offers territory itself.
        let territory = territory_of(message.territory_concession);
        // Unspecified: English.
        let language = Language::from_wire(message.language).unwrap_or(Language::English);
        Ok(CardRequest {
            action_verb: message.action_verb.clone(),
            target_summary: message.target_summary.clone(),
            capability_class: message.capability_class.clone(),
            reversibility,
            territory,
            recurrence_count: message.recurrence_count,
            language,
            reason: None,
            territory_offer: None,
            had_invisible: false,
        })
    }
}

impl TryFrom<pb::CreatePendingRequest> for NewRequest {
    type Error = Error;

    /// A request to register, every field within its bound.
    fn try_from(r: pb::CreatePendingRequest) -> Result<NewRequest, Error> {
        let message = r.request.as_ref().ok_or(Error::Unspecified("request"))?;
        limits::all(&[
            ("capability", &r.capability, limits::CAPABILITY),
            ("target", &r.target, limits::TARGET),
            ("territory_target", &r.territory_target, limits::TARGET),
            ("executor", &r.executor, limits::EXECUTOR),
            ("args_json", &r.args_json, limits::ARGS_JSON),
            (
                "request.extra_json",
                &message.extra_json,
                limits::EXTRA_JSON,
            ),
            ("request.token", &message.token, limits::TOKEN),
        ])?;
        // A negative TTL sent as unsigned arrives as ~136 years.
        limits::number(
            "ttl_seconds",
            u64::from(r.ttl_seconds),
            u64::from(limits::TTL_SECONDS),
        )?;
        let requester = principal(r.requester.as_ref(), "requester")?;
        let card = CardRequest::try_from(message)?;
        let extra_json = message.extra_json.clone();
        Ok(NewRequest {
            requester,
            card,
            capability: Capability::parse_optional(&r.capability)?,
            target: r.target,
            territory_target: r.territory_target,
            executor: r.executor,
            args_json: r.args_json,
            ttl_seconds: r.ttl_seconds,
            extra_json,
            // Unspecified (an older caller): the card has no reason line.
            policy_level: metnos_core::level::AutonomyLevel::from_wire(r.level).ok(),
        })
    }
}
