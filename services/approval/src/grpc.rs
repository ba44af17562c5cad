//! The edge: requests become domain types in [`request`] (`TryFrom`, INVALID_ARGUMENT
//! naming the field), answers are built here, and one exhaustive conversion turns errors
//! into statuses.

mod request;

use metnos_kit::authz::{Caller, Rule, Table};
use metnos_kit::tls::Identity;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use metnos_core::capability::Capability;
use metnos_core::principal::Principal;
use metnos_core::resolve::{EditRefusal, ResolveRefusal};
use metnos_kit::readiness::Readiness;
use metnos_kit::store::{failure_status, is_unreachable};
use metnos_kit::time::to_timestamp;
use metnos_proto::approval::v1 as pb;
use metnos_proto::approval::v1::approval_service_server::ApprovalService;
use metnos_proto::common::v1::Principal as PrincipalMsg;
use tokio::sync::broadcast::error::RecvError;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::card::{Card, CardRequest, Reversibility, Shape, Territory};
use crate::service::{Approvals, Decision, Error, NewRequest};
use crate::store::{Pending, Settled, Status as State};
use request::{decision_of, principal, territory_of};

/// Who may call which RPC (README, "Security model"): the planner asks and withdraws, the
/// gateway (for the people it authenticated) and the owner (for `cli`) decide, and the
/// handlers below keep each to its own people.
pub const AUTHORIZATION: Table = Table {
    service: "metnos.approval.v1.ApprovalService",
    rules: &[
        Rule {
            method: "CreatePending",
            callers: &[Identity::Planner],
        },
        Rule {
            method: "GetPending",
            callers: &[Identity::Planner, Identity::Gateway, Identity::Owner],
        },
        Rule {
            method: "Resolve",
            callers: &[Identity::Gateway, Identity::Owner],
        },
        Rule {
            method: "Cancel",
            callers: &[Identity::Planner, Identity::Gateway],
        },
        Rule {
            method: "ListPending",
            callers: &[Identity::Gateway, Identity::Web, Identity::Owner],
        },
        Rule {
            method: "CleanupExpired",
            callers: &[Identity::Owner],
        },
        Rule {
            method: "RenderCard",
            callers: &[Identity::Planner, Identity::Web, Identity::Owner],
        },
        Rule {
            method: "WaitDecision",
            callers: &[Identity::Planner, Identity::Gateway],
        },
        Rule {
            method: "VerifyDecisions",
            callers: &[Identity::Web, Identity::Owner],
        },
    ],
};

use metnos_core::limits;

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        match error {
            Error::Card(_)
            | Error::Args(_)
            | Error::Principal(_)
            | Error::BadPrincipal(_)
            | Error::Capability(_)
            | Error::TerritoryWithReject
            | Error::NoTerritoryOffered
            | Error::Unspecified(_)
            | Error::MalformedToken(_)
            | Error::EmptyExecutor
            | Error::TooBig(_)
            | Error::BadExtra
            | Error::Uncardable { .. }
            | Error::BadGrantOffer
            | Error::BadRevokeOffer
            | Error::BadShortcutOffer
            | Error::ReasonTooLong => Status::invalid_argument(error.to_string()),
            // An edit's refusal travels as a closed set too: the channel says it in the
            // person's language (issue 41).
            Error::EditNotOffered => edit_refused(&error, EditRefusal::NotOffered),
            Error::EditNotWithin { .. } => edit_refused(&error, EditRefusal::NotWithin),
            Error::BadSchedule(_) => edit_refused(&error, EditRefusal::BadSchedule),
            Error::NotFound => refused(
                Status::not_found(error.to_string()),
                ResolveRefusal::UnknownToken,
            ),
            // Expired by the sweep before the click: the person is told it expired.
            Error::NotPending(state) => refused(
                Status::failed_precondition(error.to_string()),
                if state == Settled::Expired {
                    ResolveRefusal::Expired
                } else {
                    ResolveRefusal::AlreadyResolved
                },
            ),
            Error::Expired => refused(
                Status::failed_precondition(error.to_string()),
                ResolveRefusal::Expired,
            ),
            Error::NotRequester => refused(
                Status::permission_denied(error.to_string()),
                ResolveRefusal::NotRequester,
            ),
            Error::NotItsPeople { .. } => Status::permission_denied(error.to_string()),
            Error::Unauthenticated => Status::unauthenticated(error.to_string()),
            Error::PolicyUnavailable(_) => Status::unavailable(error.to_string()),
            Error::Store(e) => failure_status(crate::SERVICE, "the approval store", &e),
        }
    }
}

/// INVALID_ARGUMENT for an edit not taken, with why as a closed set.
fn edit_refused(error: &Error, refusal: EditRefusal) -> Status {
    let mut status = Status::invalid_argument(error.to_string());
    status.metadata_mut().insert(
        metnos_core::resolve::EDIT_METADATA_KEY,
        tonic::metadata::MetadataValue::from_static(refusal.as_str()),
    );
    status
}

/// `status` with the seed's reason for a refused resolve, for the channel to say.
fn refused(mut status: Status, refusal: ResolveRefusal) -> Status {
    status.metadata_mut().insert(
        metnos_core::resolve::METADATA_KEY,
        tonic::metadata::MetadataValue::from_static(refusal.as_str()),
    );
    status
}

/// `caller` speaks for `principal` (the gateway for its channel's people, the owner for
/// `cli`'s); services that speak for nobody (the planner) are refused here — call this
/// only where a person must be spoken for.
fn speaks_for(caller: Identity, principal: &Principal) -> Result<(), Error> {
    if Caller::speaks_for(caller, principal.channel()) {
        return Ok(());
    }
    Err(Error::NotItsPeople {
        caller: caller.spiffe_id(),
        principal: metnos_core::limits::shown(&principal.to_string()),
        channels: caller.channels().join(", "),
    })
}

/// The gateway reaches only its own people's requests; the planner (which made them) and
/// the owner reach every one.
fn may_see(caller: Identity, pending: &Pending) -> Result<(), Error> {
    match caller {
        Identity::Gateway => speaks_for(caller, &pending.requester),
        _ => Ok(()),
    }
}

fn principal_msg(p: &Principal) -> PrincipalMsg {
    PrincipalMsg {
        channel: p.channel().to_owned(),
        sender_id: p.sender_id().to_owned(),
    }
}

fn card_msg(card: &Card) -> pb::Card {
    pb::Card {
        lines: card.lines.clone(),
        buttons: card
            .buttons
            .iter()
            .map(|row| pb::ButtonRow {
                buttons: row
                    .iter()
                    .map(|b| pb::Button {
                        text: b.text.clone(),
                        data: b.data.clone(),
                    })
                    .collect(),
            })
            .collect(),
        shape: match card.shape {
            Shape::Full => pb::CardShape::Full,
            Shape::Medium => pb::CardShape::Medium,
            Shape::Short => pb::CardShape::Short,
        } as i32,
        telegram_html: card.telegram_html.clone(),
    }
}

/// The contract's view of a stored request.
pub fn pending_msg(p: &Pending) -> pb::PendingApproval {
    let schedule_card = p.executor == crate::describe::SCHEDULE_CREATE;
    pb::PendingApproval {
        token: p.token.clone(),
        requester: Some(principal_msg(&p.requester)),
        request: Some(pb::ApprovalRequest {
            action_verb: p.action_verb.clone(),
            target_summary: p.target_summary.clone(),
            capability_class: p.capability_class.clone(),
            reversibility: match p.reversibility {
                Reversibility::Reversible => pb::Reversibility::Reversible,
                Reversibility::Irreversible => pb::Reversibility::Irreversible,
                Reversibility::Partial => pb::Reversibility::Partial,
            } as i32,
            territory_concession: match p.territory {
                Territory::None => pb::TerritoryConcession::None,
                Territory::Session => pb::TerritoryConcession::Session,
                Territory::Permanent => pb::TerritoryConcession::Permanent,
            } as i32,
            recurrence_count: p.recurrence_count,
            token: p.token.clone(),
            extra_json: p.extra_json.clone(),
            language: p.language.to_wire(),
        }),
        capability: Capability::name_of(p.capability).to_owned(),
        target: p.target.clone(),
        status: match p.status {
            State::Pending => pb::ApprovalStatus::Pending,
            State::Approved => pb::ApprovalStatus::Approved,
            State::Rejected => pb::ApprovalStatus::Rejected,
            State::Expired => pb::ApprovalStatus::Expired,
            State::Cancelled => pb::ApprovalStatus::Cancelled,
        } as i32,
        created_at: Some(to_timestamp(p.created_at)),
        expires_at: Some(to_timestamp(p.expires_at)),
        decision_at: p.decision_at.map(to_timestamp),
        decided_by: p.decided_by.as_ref().map(principal_msg),
        call_sha256: p.call_sha256.clone(),
        cancel_reason: p.cancel_reason.clone().unwrap_or_default(),
        grant_id: p.grant_id,
        level: p.policy_level.map_or(0, |level| level.to_wire()),
        // A standing order's card offers no territory: the column holds the schedule the
        // person chose instead of the card's, if they edited it.
        territory_pattern: if schedule_card {
            String::new()
        } else {
            p.territory_target.clone()
        },
        edited_schedule: if schedule_card {
            p.territory_target.clone()
        } else {
            String::new()
        },
        executor: p.executor.clone(),
    }
}

type WaitStream = Pin<Box<dyn Stream<Item = Result<pb::WaitDecisionResponse, Status>> + Send>>;

/// The `ApprovalService` implementation.
#[derive(Debug, Clone)]
pub struct ApprovalApi {
    approvals: Arc<Approvals>,
    readiness: Readiness,
    /// How often a waiter re-reads the store, for decisions written by another replica.
    poll_every: Duration,
}

impl ApprovalApi {
    pub fn new(
        approvals: Arc<Approvals>,
        readiness: Readiness,
        poll_every: Duration,
    ) -> ApprovalApi {
        ApprovalApi {
            approvals,
            readiness,
            poll_every,
        }
    }

    async fn status(&self, error: Error) -> Status {
        if let Error::Store(e) = &error
            && is_unreachable(e)
        {
            self.readiness
                .store_failed(self.approvals.store().db())
                .await;
        }
        error.into()
    }
}

#[tonic::async_trait]
impl ApprovalService for ApprovalApi {
    type WaitDecisionStream = WaitStream;

    async fn create_pending(
        &self,
        request: Request<pb::CreatePendingRequest>,
    ) -> Result<Response<pb::CreatePendingResponse>, Status> {
        let r = request.into_inner();
        let result = async {
            let new = NewRequest::try_from(r)?;
            self.approvals.create(new).await
        }
        .await;
        match result {
            Ok((pending, card)) => Ok(Response::new(pb::CreatePendingResponse {
                approval: Some(pending_msg(&pending)),
                card: Some(card_msg(&card)),
            })),
            Err(e) => Err(self.status(e).await),
        }
    }

    async fn get_pending(
        &self,
        request: Request<pb::GetPendingRequest>,
    ) -> Result<Response<pb::GetPendingResponse>, Status> {
        let caller = Caller::of(&request).ok_or(Error::Unauthenticated)?;
        let found = async {
            let pending = self.approvals.get(&request.get_ref().token).await?;
            may_see(caller, &pending)?;
            Ok(pending)
        };
        match found.await {
            Ok(p) => Ok(Response::new(pb::GetPendingResponse {
                approval: Some(pending_msg(&p)),
            })),
            Err(e) => Err(self.status(e).await),
        }
    }

    async fn resolve(
        &self,
        request: Request<pb::ResolveRequest>,
    ) -> Result<Response<pb::ResolveResponse>, Status> {
        let caller = Caller::of(&request).ok_or(Error::Unauthenticated)?;
        let r = request.into_inner();
        let result = async {
            let decision = decision_of(r.decision)?;
            let decider = principal(r.decider.as_ref(), "decider")?;
            // Who decides is who the caller authenticated: the gateway for its channel's
            // people, the owner for the local user. Nobody else is believed.
            speaks_for(caller, &decider)?;
            let territory = territory_of(r.territory);
            if !r.edited_schedule.is_empty() {
                if decision != Decision::Approve
                    || territory != Territory::None
                    || !r.edited_pattern.is_empty()
                {
                    return Err(Error::EditNotOffered);
                }
                return self
                    .approvals
                    .resolve_edited_schedule(&r.token, &r.edited_schedule, &decider)
                    .await;
            }
            if !r.edited_pattern.is_empty() {
                if decision != Decision::Approve || territory != Territory::Permanent {
                    return Err(Error::EditNotOffered);
                }
                return self
                    .approvals
                    .resolve_edited(&r.token, &r.edited_pattern, &decider)
                    .await;
            }
            self.approvals
                .resolve(&r.token, decision, territory, &decider)
                .await
        }
        .await;
        match result {
            Ok(p) => Ok(Response::new(pb::ResolveResponse {
                approval: Some(pending_msg(&p)),
            })),
            Err(e) => Err(self.status(e).await),
        }
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        let caller = Caller::of(&request).ok_or(Error::Unauthenticated)?;
        let r = request.into_inner();
        let cancelled = async {
            may_see(caller, &self.approvals.get(&r.token).await?)?;
            self.approvals.cancel(&r.token, &r.reason).await
        };
        match cancelled.await {
            Ok(p) => Ok(Response::new(pb::CancelResponse {
                approval: Some(pending_msg(&p)),
            })),
            Err(e) => Err(self.status(e).await),
        }
    }

    async fn list_pending(
        &self,
        request: Request<pb::ListPendingRequest>,
    ) -> Result<Response<pb::ListPendingResponse>, Status> {
        let caller = Caller::of(&request).ok_or(Error::Unauthenticated)?;
        let r = request.into_inner();
        // The owner's spectator page sees every request, but never a token (each shows as
        // the hash the decisions journal names it by); the gateway lists only its own
        // people's.
        let spectator = caller == Identity::Web;
        if caller == Identity::Gateway && r.requester.is_none() {
            return Err(Status::permission_denied(
                "the gateway lists only the requests of a person it speaks for: give requester",
            ));
        }
        let listed = async {
            let requester = match &r.requester {
                Some(p) => Some(principal(Some(p), "requester")?),
                None => None,
            };
            if let Some(requester) = &requester
                && caller == Identity::Gateway
            {
                speaks_for(caller, requester)?;
            }
            self.approvals
                .list(r.include_resolved, r.limit, requester.as_ref())
                .await
        };
        match listed.await {
            Ok(all) => Ok(Response::new(pb::ListPendingResponse {
                approvals: all
                    .iter()
                    .map(|p| {
                        let mut shown = pending_msg(p);
                        // A person it does not speak for (the owner's terminal): no token, and
                        // none of the card's words (its target line holds the call's data: a
                        // file's first lines, a standing order's request).
                        if spectator && speaks_for(caller, &p.requester).is_err() {
                            let name = metnos_kit::chain::token_name(&p.token);
                            if let Some(request) = &mut shown.request {
                                request.token = name.clone();
                                request.target_summary.clear();
                                request.extra_json.clear();
                            }
                            shown.token = name;
                            shown.target.clear();
                            shown.edited_schedule.clear();
                        }
                        shown
                    })
                    .collect(),
            })),
            Err(e) => Err(self.status(e).await),
        }
    }

    async fn cleanup_expired(
        &self,
        _request: Request<pb::CleanupExpiredRequest>,
    ) -> Result<Response<pb::CleanupExpiredResponse>, Status> {
        match self.approvals.sweep().await {
            Ok(expired) => Ok(Response::new(pb::CleanupExpiredResponse { expired })),
            Err(e) => Err(self.status(e).await),
        }
    }

    async fn verify_decisions(
        &self,
        _request: Request<pb::VerifyDecisionsRequest>,
    ) -> Result<Response<pb::VerifyDecisionsResponse>, Status> {
        match self.approvals.verify_decisions().await {
            Ok(report) => Ok(Response::new(pb::VerifyDecisionsResponse {
                records: report.lines,
                newest_day_root: report.newest_day(),
                broken: report.broken.unwrap_or_default(),
            })),
            Err(e) => Err(self.status(e).await),
        }
    }

    async fn render_card(
        &self,
        request: Request<pb::RenderCardRequest>,
    ) -> Result<Response<pb::RenderCardResponse>, Status> {
        let r = request.into_inner();
        let result = async {
            let message = r.request.as_ref().ok_or(Error::Unspecified("request"))?;
            limits::all(&[
                ("capability", &r.capability, limits::CAPABILITY),
                (
                    "request.extra_json",
                    &message.extra_json,
                    limits::EXTRA_JSON,
                ),
            ])?;
            // A stored request's card is the one its person sees: its reason line and its
            // invisible-characters warning come from the stored request, never the caller's
            // copy of it (the web page's list, `metnos approvals show`).
            if crate::token::is_well_formed(&message.token)
                && let Ok(pending) = self.approvals.get(&message.token).await
            {
                return Ok(self.approvals.card(&pending));
            }
            let mut card = CardRequest::try_from(message)?;
            // A preview: a warning the caller asks for is shown (it can only add one).
            card.had_invisible = crate::extra::Extra::parse(&message.extra_json).had_invisible;
            // A preview has no token yet: the buttons show a placeholder one.
            let token = if message.token.is_empty() {
                "0".repeat(crate::token::TOKEN_LEN)
            } else if crate::token::is_well_formed(&message.token) {
                message.token.clone()
            } else {
                return Err(Error::MalformedToken(limits::shown(&message.token)));
            };
            let capability = Capability::parse_optional(&r.capability)?;
            self.approvals.render(&card, capability, &token)
        }
        .await;
        match result {
            Ok(card) => Ok(Response::new(pb::RenderCardResponse {
                card: Some(card_msg(&card)),
            })),
            Err(e) => Err(self.status(e).await),
        }
    }

    async fn wait_decision(
        &self,
        request: Request<pb::WaitDecisionRequest>,
    ) -> Result<Response<Self::WaitDecisionStream>, Status> {
        let caller = Caller::of(&request).ok_or(Error::Unauthenticated)?;
        let token = request.into_inner().token;
        // Subscribe before the first read, so no change slips between them.
        let mut changes = self.approvals.subscribe();
        let first = match self.approvals.get(&token).await {
            Ok(p) => p,
            Err(e) => return Err(self.status(e).await),
        };
        may_see(caller, &first)?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let approvals = Arc::clone(&self.approvals);
        let poll_every = self.poll_every;
        tokio::spawn(async move {
            let mut last = first;
            if tx
                .send(Ok(pb::WaitDecisionResponse {
                    approval: Some(pending_msg(&last)),
                }))
                .await
                .is_err()
            {
                return;
            }
            let mut poll = tokio::time::interval(poll_every);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !last.status.is_terminal() {
                let until_expiry = Duration::from_millis(
                    u64::try_from(last.expires_at - approvals.now()).unwrap_or(0),
                );
                tokio::select! {
                    change = changes.recv() => match change {
                        Ok(changed) if changed != token => continue,
                        Ok(_) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return,
                    },
                    _ = poll.tick() => {}
                    () = tokio::time::sleep(until_expiry) => {
                        if let Err(e) = approvals.store().expire(&token, approvals.now()).await {
                            tracing::warn!(error = %e, "cannot mark an approval expired");
                        }
                    }
                    () = tx.closed() => return,
                }
                let current = match approvals.get(&token).await {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                };
                if current.status != last.status
                    && tx
                        .send(Ok(pb::WaitDecisionResponse {
                            approval: Some(pending_msg(&current)),
                        }))
                        .await
                        .is_err()
                {
                    return;
                }
                last = current;
            }
        });
        Ok(Response::new(
            Box::pin(ReceiverStream::new(rx)) as WaitStream
        ))
    }
}
