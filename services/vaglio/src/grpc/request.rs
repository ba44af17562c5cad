//! Requests become domain types here, each field checked once: a call to judge
//! ([`Proposal`]), a proposal to weigh ([`ProposalIn`]), a person's answer ([`Signal`]). A
//! request that does not hold is a [`BadRequest`]: INVALID_ARGUMENT, naming the field.

use metnos_core::capability::{Capability, UnknownCapability};
use metnos_core::limits::{self, TooBig};
use metnos_core::principal::BadPrincipal;
use metnos_core::{AutonomyLevel, Principal};
use metnos_proto::common::v1 as common;
use metnos_proto::vaglio::v1 as pb;
use tonic::Status;

use crate::service::{Proposal, Provenance};
use crate::telos::engine::Signal;
use crate::telos::{Origin, ProposalIn};

/// A request the vaglio cannot take as it is, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum BadRequest {
    #[error(transparent)]
    TooBig(#[from] TooBig),
    #[error("{0} is missing")]
    Missing(&'static str),
    #[error(transparent)]
    Principal(#[from] BadPrincipal),
    #[error("{0} is empty")]
    Empty(&'static str),
    #[error("{field} may hold only {allowed}")]
    Alphabet {
        field: &'static str,
        allowed: &'static str,
    },
    #[error("proposal.description is one line: no control characters")]
    NotOneLine,
    #[error("{0} is unspecified")]
    Unspecified(&'static str),
    #[error("urgency_hint must be from 0.5 to 2 (or 0 for 1), got {0}")]
    Urgency(f64),
    #[error("confidence must be from 0 to 1, got {0}")]
    Confidence(f64),
    #[error(
        "proposal.channel `{channel}` is not the channel of proposal.principal (`{principal}`)"
    )]
    NotItsChannel { channel: String, principal: String },
    #[error("proposal.session_id is empty: the CLI's quota is per session")]
    NoSession,
    #[error("{field}: {error}")]
    Capability {
        field: &'static str,
        error: UnknownCapability,
    },
}

impl From<BadRequest> for Status {
    fn from(error: BadRequest) -> Status {
        Status::invalid_argument(error.to_string())
    }
}

/// The principal in `field`, which must be there.
pub fn principal_of(
    field: &'static str,
    p: Option<&common::Principal>,
) -> Result<Principal, BadRequest> {
    Ok(Principal::required(field, p)?)
}

impl TryFrom<pb::JudgeRequest> for Proposal {
    type Error = BadRequest;

    /// The call to judge, every field within its bound.
    fn try_from(r: pb::JudgeRequest) -> Result<Proposal, BadRequest> {
        let context = r.context.unwrap_or_default();
        limits::all(&[
            ("intent", &r.intent, limits::INTENT),
            ("executor", &r.executor, limits::EXECUTOR),
            ("args_json", &r.args_json, limits::ARGS_JSON),
            (
                "context.capability",
                &context.capability,
                limits::CAPABILITY,
            ),
            ("context.mode", &context.mode, 16),
        ])?;
        limits::entries("context.capabilities", context.capabilities.len(), 64)?;
        for capability in &context.capabilities {
            limits::bytes("context.capabilities[]", capability, limits::CAPABILITY)?;
        }
        provenance_within_bounds(&context.provenance)?;
        // Whose call it is, when the planner says: an invalid one is refused, never dropped
        // (a dropped principal would judge the call as nobody's).
        let asker = Principal::optional("context.principal", context.principal.as_ref())?;
        // A name outside the registry would slip past the guard's shell and write rules,
        // which look for `code:exec` and `fs:write`: it is refused, never ignored.
        let capability = Capability::parse_optional(&context.capability).map_err(|error| {
            BadRequest::Capability {
                field: "context.capability",
                error,
            }
        })?;
        let capabilities = context
            .capabilities
            .iter()
            .map(|name| Capability::parse(name))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| BadRequest::Capability {
                field: "context.capabilities[]",
                error,
            })?;
        Ok(Proposal {
            provenance: context
                .provenance
                .into_iter()
                .map(|p| Provenance {
                    arg: p.arg,
                    sources: p.sources,
                    sink: p.sink,
                })
                .collect(),
            intent: r.intent,
            executor: r.executor,
            args_json: r.args_json,
            mode: context.mode,
            read_private: context.read_private,
            step: context.step,
            capability,
            capabilities,
            critical: context.critical,
            asker: AutonomyLevel::from_wire(context.level).ok().zip(asker),
        })
    }
}

fn provenance_within_bounds(provenance: &[pb::Provenance]) -> Result<(), TooBig> {
    limits::entries("context.provenance", provenance.len(), 64)?;
    for entry in provenance {
        limits::bytes("context.provenance[].arg", &entry.arg, 128)?;
        limits::entries(
            "context.provenance[].sources",
            entry.sources.len(),
            metnos_core::provenance::MAX_LABELS,
        )?;
        for source in &entry.sources {
            limits::bytes(
                "context.provenance[].sources[]",
                source,
                metnos_core::provenance::MAX_LABEL,
            )?;
        }
    }
    Ok(())
}

impl TryFrom<pb::EvaluateProposalRequest> for ProposalIn {
    type Error = BadRequest;

    /// The proposal an evaluation request carries, each field checked: bounded, in its own
    /// alphabet, a known origin, urgency and confidence in range, the principal's own
    /// channel.
    fn try_from(r: pb::EvaluateProposalRequest) -> Result<ProposalIn, BadRequest> {
        let p = r.proposal.ok_or(BadRequest::Missing("proposal"))?;
        limits::all(&[
            ("proposal.proposal_id", &p.proposal_id, 128),
            ("proposal.kind", &p.kind, 128),
            ("proposal.effect_class", &p.effect_class, 128),
            ("proposal.description", &p.description, 2048),
            ("proposal.channel", &p.channel, 64),
            ("proposal.schedule_id", &p.schedule_id, 128),
            ("proposal.session_id", &p.session_id, 128),
        ])?;
        check_words(&p)?;
        if p.description.chars().any(char::is_control) {
            return Err(BadRequest::NotOneLine);
        }
        let origin = origin_of(p.origin)?;
        let urgency = if r.urgency_hint == 0.0 {
            1.0
        } else {
            r.urgency_hint
        };
        if !(0.5..=2.0).contains(&urgency) {
            return Err(BadRequest::Urgency(r.urgency_hint));
        }
        let confidence = r.confidence.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&confidence) {
            return Err(BadRequest::Confidence(confidence));
        }
        let person = principal_of("proposal.principal", p.principal.as_ref())?;
        // A proposal goes to its person on their channel: the quotas are that channel's.
        if person.channel() != p.channel {
            return Err(BadRequest::NotItsChannel {
                channel: p.channel,
                principal: person.channel().to_owned(),
            });
        }
        if p.channel == metnos_core::principal::TERMINAL && p.session_id.is_empty() {
            return Err(BadRequest::NoSession);
        }
        Ok(ProposalIn {
            proposal_id: p.proposal_id,
            kind: p.kind,
            effect_class: p.effect_class,
            description: p.description,
            channel: p.channel,
            origin,
            schedule_id: p.schedule_id,
            person,
            session_id: p.session_id,
            level: AutonomyLevel::from_wire(p.level).ok(),
            urgency,
            confidence,
        })
    }
}

fn origin_of(wire: i32) -> Result<Origin, BadRequest> {
    match pb::ProposalOrigin::try_from(wire) {
        Ok(pb::ProposalOrigin::Spontaneous) => Ok(Origin::Adhoc),
        Ok(pb::ProposalOrigin::SchedulerInCadence) => Ok(Origin::SchedulerInCadence),
        Ok(pb::ProposalOrigin::SchedulerOutOfCadence) => Ok(Origin::SchedulerOffCadence),
        Ok(pb::ProposalOrigin::ExplicitRequest) => Ok(Origin::ExplicitRequest),
        _ => Err(BadRequest::Unspecified("proposal.origin")),
    }
}

/// A feedback request's `kind`.
pub fn signal_of(wire: i32) -> Result<Signal, BadRequest> {
    match pb::FeedbackKind::try_from(wire) {
        Ok(pb::FeedbackKind::Accept) => Ok(Signal::Accept),
        Ok(pb::FeedbackKind::AcceptWithEdit) => Ok(Signal::AcceptWithEdit),
        Ok(pb::FeedbackKind::Reject) => Ok(Signal::Reject),
        Ok(pb::FeedbackKind::RejectNeverAgain) => Ok(Signal::NeverAgain),
        Ok(pb::FeedbackKind::Stop) => Ok(Signal::Stop),
        Ok(pb::FeedbackKind::Silence48h) => Ok(Signal::Silence48h),
        Ok(pb::FeedbackKind::ViewedUndecided) => Ok(Signal::ViewedUndecided),
        _ => Err(BadRequest::Unspecified("kind")),
    }
}

/// The words the ledger, the never-list and the logs key on have one spelling each.
fn check_words(p: &pb::ActionProposal) -> Result<(), BadRequest> {
    const ID: &str = "letters, digits, _ . : -";
    const CLASS: &str = "lower-case letters, digits, _ . : / -";
    const CHANNEL: &str = "lower-case letters, digits, _ -";
    let id_chars = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
    let class_chars = |c: char| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | ':' | '/' | '-')
    };
    let channel_chars =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-');
    let words: [(_, _, &dyn Fn(char) -> bool, _, _); 6] = [
        ("proposal.proposal_id", &p.proposal_id, &id_chars, true, ID),
        ("proposal.schedule_id", &p.schedule_id, &id_chars, false, ID),
        ("proposal.session_id", &p.session_id, &id_chars, false, ID),
        ("proposal.kind", &p.kind, &class_chars, true, CLASS),
        (
            "proposal.effect_class",
            &p.effect_class,
            &class_chars,
            true,
            CLASS,
        ),
        (
            "proposal.channel",
            &p.channel,
            &channel_chars,
            true,
            CHANNEL,
        ),
    ];
    for (field, value, allowed, required, what) in words {
        if required && value.is_empty() {
            return Err(BadRequest::Empty(field));
        }
        if !value.chars().all(allowed) {
            return Err(BadRequest::Alphabet {
                field,
                allowed: what,
            });
        }
    }
    Ok(())
}
