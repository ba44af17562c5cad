//! The edge: `metnos.vaglio.v1.VaglioService`. Requests become domain types in
//! [`request`] (`TryFrom`, INVALID_ARGUMENT naming the field); answers are built here, and
//! errors become statuses in one exhaustive `From` each.

mod request;

use metnos_kit::authz::{Rule, Table};
use metnos_kit::tls::Identity;
use std::sync::Arc;

use metnos_core::Principal;
use metnos_kit::authz::Caller;
use metnos_kit::time::to_timestamp;
use metnos_proto::common::v1 as common;
use metnos_proto::vaglio::v1 as pb;
use metnos_proto::vaglio::v1::vaglio_service_server::VaglioService;
use tonic::{Request, Response, Status};

use crate::service::{BlockedBy, Error, Proposal, Vaglio, Verdict};
use crate::telos::{
    self, Decision, Evaluation, Found, Origin, ProposalIn, TelosEngine, TelosError,
};
pub use request::BadRequest;
use request::{principal_of, signal_of};

/// Who may call which RPC (README, "Security model"): the planner has calls judged, the
/// owner reads the verdicts; the telos RPCs go to who will need them.
pub const AUTHORIZATION: Table = Table {
    service: "metnos.vaglio.v1.VaglioService",
    rules: &[
        Rule {
            method: "Judge",
            callers: &[Identity::Planner, Identity::Owner],
        },
        Rule {
            method: "ListVerdicts",
            callers: &[Identity::Web, Identity::Owner],
        },
        Rule {
            method: "VerifyVerdictLog",
            callers: &[Identity::Web, Identity::Owner],
        },
        // The planner's proposals; the owner's dry runs (`metnos telos evaluate`).
        Rule {
            method: "EvaluateProposal",
            callers: &[Identity::Planner, Identity::Owner],
        },
        Rule {
            method: "GetTelos",
            callers: &[Identity::Web, Identity::Owner],
        },
        // The channels the people answer on: the gateway (Telegram), the owner (the CLI);
        // the planner only says a proposal's card went unanswered (48 h of silence).
        Rule {
            method: "RecordFeedback",
            callers: &[Identity::Gateway, Identity::Planner, Identity::Owner],
        },
        Rule {
            method: "DetectStop",
            callers: &[Identity::Gateway, Identity::Owner],
        },
        Rule {
            method: "ListRejectedProposals",
            // The planner: the evening digest's weekly line of discarded proposals.
            callers: &[Identity::Planner, Identity::Web, Identity::Owner],
        },
        Rule {
            method: "ListNever",
            callers: &[Identity::Owner],
        },
        Rule {
            method: "RemoveNever",
            callers: &[Identity::Owner],
        },
    ],
};

use metnos_core::limits;

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        match error {
            Error::EmptyExecutor | Error::Args(_) | Error::Month(_) | Error::TooBig(_) => {
                Status::invalid_argument(error.to_string())
            }
            Error::LogRead(e) => {
                tracing::error!(error = %e, "verdict log unreadable");
                Status::internal("the verdict log cannot be read; see the vaglio service log")
            }
            // Fail closed: no verdict is answered that the log does not hold.
            Error::LogBehind(_) => Status::unavailable(error.to_string()),
        }
    }
}

fn blocked_by(b: Option<BlockedBy>) -> pb::BlockedBy {
    match b {
        None => pb::BlockedBy::None,
        Some(BlockedBy::Guard) => pb::BlockedBy::Guard,
        Some(BlockedBy::Judge) => pb::BlockedBy::Judge,
    }
}

fn verdict_msg(v: &Verdict) -> pb::Verdict {
    pb::Verdict {
        approved: v.approved,
        reason: v.reason.clone(),
        score: v.score,
        blocked_by: blocked_by(v.blocked_by) as i32,
        judge_kind: v.judge_kind.to_owned(),
        ts: Some(to_timestamp((v.ts * 1000.0) as i64)),
        rule_id: v.rule_id.unwrap_or_default().to_owned(),
        arg_key: v.arg_key.clone().unwrap_or_default(),
    }
}

/// The `VaglioService` implementation: the judge and the telos engine.
#[derive(Debug, Clone)]
pub struct VaglioApi {
    vaglio: Arc<Vaglio>,
    telos: Arc<TelosEngine>,
    /// Months of verdicts the retention keeps (what it may have removed is no erasure).
    retention_months: u32,
}

impl VaglioApi {
    pub fn new(vaglio: Arc<Vaglio>, telos: Arc<TelosEngine>, retention_months: u32) -> VaglioApi {
        VaglioApi {
            vaglio,
            telos,
            retention_months,
        }
    }
}

impl From<TelosError> for Status {
    fn from(error: TelosError) -> Status {
        match error {
            TelosError::NotFound(m) => Status::not_found(m),
            TelosError::Denied(m) => Status::permission_denied(m),
            TelosError::Precondition(m) => Status::failed_precondition(m),
            TelosError::Conflict(m) => Status::already_exists(m),
            TelosError::Store(e) => {
                metnos_kit::store::failure_status(crate::SERVICE, "the telos store", &e)
            }
        }
    }
}

/// The people a caller may speak for: the gateway for its channels, the owner for the CLI.
fn speaks_for<T>(request: &Request<T>, person: &Principal) -> Result<(), Status> {
    match Caller::of(request) {
        Some(caller) if Caller::speaks_for(caller, person.channel()) => Ok(()),
        Some(caller) => Err(Status::permission_denied(format!(
            "{caller} does not speak for people of channel `{}`",
            person.channel()
        ))),
        // No authorization layer said who called: refused.
        None => Err(Status::permission_denied("the caller is not known")),
    }
}

fn decision_msg(d: Decision) -> pb::AlignmentDecision {
    match d {
        Decision::Publish => pb::AlignmentDecision::Publish,
        Decision::Reject => pb::AlignmentDecision::Reject,
        Decision::DeferToDigest => pb::AlignmentDecision::DeferToDigest,
        Decision::DeferToSlot => pb::AlignmentDecision::DeferToSlot,
    }
}

fn origin_msg(o: Origin) -> pb::ProposalOrigin {
    match o {
        Origin::Adhoc => pb::ProposalOrigin::Spontaneous,
        Origin::SchedulerInCadence => pb::ProposalOrigin::SchedulerInCadence,
        Origin::SchedulerOffCadence => pb::ProposalOrigin::SchedulerOutOfCadence,
        Origin::ExplicitRequest => pb::ProposalOrigin::ExplicitRequest,
    }
}

fn result_msg(e: &Evaluation) -> pb::AlignmentResult {
    pb::AlignmentResult {
        proposal_id: e.proposal_id.clone(),
        expected_alignment: e.expected_alignment,
        per_telos: e
            .per_telos
            .iter()
            .map(|t| pb::FitEstimate {
                telos_id: t.telos_id.clone(),
                fit: t.fit,
                why: t.why.clone(),
                activation_threshold: t.activation_threshold,
                weight_effective: t.weight_effective,
                contribution: t.contribution,
            })
            .collect(),
        urgency: e.urgency,
        confidence: e.confidence,
        bother_cost: e.bother_cost,
        decision: decision_msg(e.decision) as i32,
        threshold_used: e.threshold_used,
        at: Some(to_timestamp(e.at_ms)),
        reason: e.reason.as_str().to_owned(),
        alignment_before_bother: e.alignment_before_bother,
        bother_sum: e.bother_sum,
        not_before: e.not_before_ms.map(to_timestamp),
        effect_class: e.effect_class.clone(),
        principal: e
            .person
            .split_once(':')
            .map(|(channel, sender_id)| common::Principal {
                channel: channel.to_owned(),
                sender_id: sender_id.to_owned(),
            }),
        channel: e.channel.clone(),
        origin: origin_msg(e.origin) as i32,
        telos_version: e.telos_version.clone(),
        ask_person: e.ask_person.clone().unwrap_or_default(),
        description: e.description.clone(),
    }
}

/// The decision and its figures on the evaluation's span: ids, scores and the decision,
/// never the proposal's words.
fn record_outcome(span: &tracing::Span, evaluation: &Evaluation) {
    span.record("decision", evaluation.decision.as_str());
    span.record("reason", evaluation.reason.as_str());
    span.record("expected_alignment", evaluation.expected_alignment);
    span.record(
        "alignment_before_bother",
        evaluation.alignment_before_bother,
    );
    span.record("bother_cost", evaluation.bother_cost);
    span.record(
        "telos",
        evaluation
            .per_telos
            .iter()
            .map(|t| format!("{}={:.3}", t.telos_id, t.fit))
            .collect::<Vec<_>>()
            .join(",")
            .as_str(),
    );
}

fn telos_msg(t: &telos::file::Telos, declared: f64, effective: f64, ema: f64) -> pb::Telos {
    pb::Telos {
        id: t.id.clone(),
        phrase: t.phrase.clone(),
        weight_declared: declared,
        weight_effective: effective,
        activation_threshold: t.activation_threshold,
        notes: t.notes.clone(),
        is_non_retreat: t.is_non_retreat,
        fitness: ema,
    }
}

#[tonic::async_trait]
impl VaglioService for VaglioApi {
    async fn judge(
        &self,
        request: Request<pb::JudgeRequest>,
    ) -> Result<Response<pb::JudgeResponse>, Status> {
        let proposal = Proposal::try_from(request.into_inner())?;
        let verdict = self.vaglio.judge(&proposal).await?;
        tracing::info!(
            approved = verdict.approved,
            score = verdict.score,
            judge_kind = verdict.judge_kind,
            rule = verdict.rule_id.unwrap_or(""),
            "verdict"
        );
        Ok(Response::new(pb::JudgeResponse {
            verdict: Some(verdict_msg(&verdict)),
        }))
    }

    async fn verify_verdict_log(
        &self,
        _: Request<pb::VerifyVerdictLogRequest>,
    ) -> Result<Response<pb::VerifyVerdictLogResponse>, Status> {
        self.vaglio.log().flush().await;
        let dir = self.vaglio.log().dir().to_owned();
        let keep = self.retention_months;
        let report = tokio::task::spawn_blocking(move || {
            let now = jiff::Timestamp::now();
            metnos_kit::chain::verify(&dir, None, &|month| crate::log::expired(month, keep, now))
        })
        .await
        .map_err(|e| Status::internal(format!("walking the verdict log failed: {e}")))?
        .map_err(|e| Status::unavailable(format!("the verdict log cannot be read: {e}")))?;
        Ok(Response::new(pb::VerifyVerdictLogResponse {
            not_logged: report.not_logged,
            records: report.lines,
            newest_day_root: report.newest_day(),
            broken: report.broken.unwrap_or_default(),
            unchained: report.unchained,
        }))
    }

    async fn list_verdicts(
        &self,
        request: Request<pb::ListVerdictsRequest>,
    ) -> Result<Response<pb::ListVerdictsResponse>, Status> {
        // The spectator page (the gateway): the verdicts, not what was asked (a turn's
        // intent is its person's words).
        let spectator = Caller::of(&request) == Some(Identity::Web);
        let r = request.into_inner();
        limits::bytes("month", &r.month, 7).map_err(Error::from)?;
        limits::number("limit", u64::from(r.limit), u64::from(limits::LIST))
            .map_err(Error::from)?;
        let limit = if r.limit == 0 { 1000 } else { r.limit } as usize;
        self.vaglio.log().flush().await;
        // File reads, off the async workers.
        let vaglio = Arc::clone(&self.vaglio);
        let records =
            tokio::task::spawn_blocking(move || vaglio.read_log(&r.month, r.blocked_only, limit))
                .await
                .map_err(|e| Status::internal(format!("reading the verdict log failed: {e}")))??;
        let records = records
            .into_iter()
            .map(|rec| pb::VerdictRecord {
                verdict: Some(pb::Verdict {
                    approved: rec.approved,
                    reason: rec.reason,
                    score: rec.score,
                    blocked_by: match rec.blocked_by.as_deref() {
                        Some("guard") => pb::BlockedBy::Guard,
                        Some("judge") => pb::BlockedBy::Judge,
                        _ => pb::BlockedBy::None,
                    } as i32,
                    judge_kind: rec.judge_kind,
                    ts: Some(to_timestamp((rec.ts * 1000.0) as i64)),
                    rule_id: rec.rule_id.unwrap_or_default(),
                    arg_key: rec.arg_key.unwrap_or_default(),
                }),
                intent: if spectator { String::new() } else { rec.intent },
                executor: rec.executor,
                args_keys: rec.args_keys,
                context_keys: rec.context_keys,
            })
            .collect();
        Ok(Response::new(pb::ListVerdictsResponse {
            records,
            log_write_failures: self.vaglio.log().failures(),
        }))
    }

    async fn evaluate_proposal(
        &self,
        request: Request<pb::EvaluateProposalRequest>,
    ) -> Result<Response<pb::EvaluateProposalResponse>, Status> {
        let caller = Caller::of(&request);
        let r = request.into_inner();
        let dry_run = r.dry_run;
        // Real evaluations take quota slots and write the journal: the planner's only.
        if !dry_run && caller != Some(Identity::Planner) {
            return Err(Status::permission_denied(
                "only the planner makes real evaluations; the owner may dry-run one",
            ));
        }
        let proposal = ProposalIn::try_from(r)?;
        // Ids, scores and the decision — never the proposal's words.
        let span = tracing::info_span!(
            "telos.evaluate",
            proposal_id = %proposal.proposal_id,
            effect_class = %proposal.effect_class,
            channel = %proposal.channel,
            dry_run,
            decision = tracing::field::Empty,
            reason = tracing::field::Empty,
            expected_alignment = tracing::field::Empty,
            alignment_before_bother = tracing::field::Empty,
            bother_cost = tracing::field::Empty,
            telos = tracing::field::Empty,
        );
        let evaluation = {
            use tracing::Instrument;
            self.telos
                .evaluate(&proposal, dry_run)
                .instrument(span.clone())
                .await?
        };
        record_outcome(&span, &evaluation);
        Ok(Response::new(pb::EvaluateProposalResponse {
            result: Some(result_msg(&evaluation)),
        }))
    }

    async fn get_telos(
        &self,
        request: Request<pb::GetTelosRequest>,
    ) -> Result<Response<pb::GetTelosResponse>, Status> {
        // The spectator page: the owner's telos, nobody else's.
        if Caller::of(&request) == Some(Identity::Web) && request.get_ref().principal.is_some() {
            return Err(Status::permission_denied(
                "the spectator page reads only the owner's telos: leave principal unset",
            ));
        }
        let r = request.into_inner();
        let person = match r.principal.as_ref() {
            Some(p) => principal_of("principal", Some(p))?,
            None => Principal::new(metnos_core::principal::TERMINAL, "owner")
                .map_err(|e| Status::internal(e.to_string()))?,
        };
        match self.telos.load(&person).await? {
            Found::None => Err(Status::not_found(format!(
                "{person} has no TELOS.md; `metnos telos edit` writes one"
            ))),
            Found::Bad(e, path) => Err(Status::failed_precondition(format!(
                "{}: {e}",
                path.display()
            ))),
            Found::Good(loaded) => {
                let weights = self.telos.weights(&person, &loaded.file).await?;
                Ok(Response::new(pb::GetTelosResponse {
                    telos: loaded
                        .file
                        .telos
                        .iter()
                        .zip(weights)
                        .map(|(t, (d, e, ema))| telos_msg(t, d, e, ema))
                        .collect(),
                    version: loaded.file.version.clone(),
                    path: loaded.path.display().to_string(),
                    warnings: loaded.file.warnings.clone(),
                }))
            }
        }
    }

    async fn record_feedback(
        &self,
        request: Request<pb::RecordFeedbackRequest>,
    ) -> Result<Response<pb::RecordFeedbackResponse>, Status> {
        let by = principal_of("principal", request.get_ref().principal.as_ref())?;
        let planner = Caller::of(&request) == Some(Identity::Planner);
        if !planner {
            speaks_for(&request, &by)?;
        }
        let r = request.into_inner();
        limits::bytes("proposal_id", &r.proposal_id, 128).map_err(Error::from)?;
        if planner && r.kind != pb::FeedbackKind::Silence48h as i32 {
            // The planner saw no answer; what a person answered comes from their channel.
            return Err(Status::permission_denied(
                "the planner may record only a proposal's silence",
            ));
        }
        let signal = signal_of(r.kind)?;
        let (updated, never_listed) = self.telos.feedback(&r.proposal_id, signal, &by).await?;
        Ok(Response::new(pb::RecordFeedbackResponse {
            updated: updated
                .iter()
                .map(|(t, d, e, ema)| telos_msg(t, *d, *e, *ema))
                .collect(),
            never_listed,
        }))
    }

    async fn detect_stop(
        &self,
        request: Request<pb::DetectStopRequest>,
    ) -> Result<Response<pb::DetectStopResponse>, Status> {
        let who = request
            .get_ref()
            .principal
            .as_ref()
            .map(|p| principal_of("principal", Some(p)))
            .transpose()?;
        if let Some(who) = &who {
            speaks_for(&request, who)?;
        }
        let r = request.into_inner();
        limits::all(&[
            ("text", &r.text, 4096),
            ("current_intent", &r.current_intent, 256),
            ("attempt_id", &r.attempt_id, 128),
            ("attempt", &r.attempt, 128),
        ])
        .map_err(Error::from)?;
        // An attempt's id and name are the planner's plain names (they reach the log).
        for (field, value) in [("attempt_id", &r.attempt_id), ("attempt", &r.attempt)] {
            if !value.is_empty() && !metnos_core::names::plain_name(value) {
                return Err(Status::invalid_argument(format!(
                    "{field}: letters, digits, _ - . * only"
                )));
            }
        }
        use metnos_core::stop::{Stop, attempt_question, confirmation_question, stop_of};
        let mut answer = pb::DetectStopResponse::default();
        match stop_of(&r.text) {
            Stop::No => answer.kind = pb::StopKind::None as i32,
            Stop::Ambiguous => {
                answer.kind = pb::StopKind::Ambiguous as i32;
                // A non-retreat attempt's question names what is being tried.
                answer.confirmation_question = if r.non_retreat && !r.attempt.trim().is_empty() {
                    attempt_question(&r.text, &r.attempt)
                } else {
                    confirmation_question(&r.text, &r.current_intent)
                };
            }
            Stop::Clear => {
                answer.kind = pb::StopKind::Stop as i32;
                if r.non_retreat
                    && let Some(who) = &who
                {
                    // A block matches a proposal's kind: kept only for an intent spelled as
                    // one (the −0.7 is recorded either way).
                    let is_kind = r.current_intent.chars().all(|c| {
                        c.is_ascii_lowercase()
                            || c.is_ascii_digit()
                            || matches!(c, '_' | '.' | ':' | '/' | '-')
                    });
                    let intent = if is_kind {
                        r.current_intent.as_str()
                    } else {
                        ""
                    };
                    let until = self.telos.stopped(who, intent, &r.attempt_id).await?;
                    answer.blocked_until = Some(to_timestamp(until));
                }
            }
        }
        Ok(Response::new(answer))
    }

    async fn list_rejected_proposals(
        &self,
        request: Request<pb::ListRejectedProposalsRequest>,
    ) -> Result<Response<pb::ListRejectedProposalsResponse>, Status> {
        let spectator = Caller::of(&request) == Some(Identity::Web);
        let r = request.into_inner();
        limits::number("limit", u64::from(r.limit), 1000).map_err(Error::from)?;
        limits::number("borderline", u64::from(r.borderline), 1000).map_err(Error::from)?;
        let person = r
            .principal
            .as_ref()
            .map(|p| principal_of("principal", Some(p)))
            .transpose()?;
        let since = r.since.as_ref().and_then(metnos_kit::time::from_timestamp);
        let limit = if r.limit == 0 { 100 } else { r.limit };
        let results = self
            .telos
            .journal(person.as_ref(), since, limit, r.borderline)
            .await?;
        Ok(Response::new(pb::ListRejectedProposalsResponse {
            results: results
                .iter()
                .map(result_msg)
                .map(|mut r| {
                    // The spectator page: the figures, not the proposal's words.
                    if spectator {
                        r.description.clear();
                        r.ask_person.clear();
                        // The model's words about the proposal and each telos, and the
                        // telos' own names.
                        r.per_telos.clear();
                    }
                    r
                })
                .collect(),
        }))
    }

    async fn list_never(
        &self,
        request: Request<pb::ListNeverRequest>,
    ) -> Result<Response<pb::ListNeverResponse>, Status> {
        let r = request.into_inner();
        let person = r
            .principal
            .as_ref()
            .map(|p| principal_of("principal", Some(p)))
            .transpose()?
            .map(|p| p.to_string());
        let entries = self
            .telos
            .store()
            .list_never(person.as_deref())
            .await
            .map_err(TelosError::from)?;
        Ok(Response::new(pb::ListNeverResponse {
            entries: entries
                .into_iter()
                .map(
                    |(person, effect_class, since, proposal_id)| pb::NeverEntry {
                        principal: person.split_once(':').map(|(c, s)| common::Principal {
                            channel: c.to_owned(),
                            sender_id: s.to_owned(),
                        }),
                        effect_class,
                        since: Some(to_timestamp(since)),
                        proposal_id,
                    },
                )
                .collect(),
        }))
    }

    async fn remove_never(
        &self,
        request: Request<pb::RemoveNeverRequest>,
    ) -> Result<Response<pb::RemoveNeverResponse>, Status> {
        let r = request.into_inner();
        let person = principal_of("principal", r.principal.as_ref())?;
        limits::bytes("effect_class", &r.effect_class, 128).map_err(Error::from)?;
        if self
            .telos
            .store()
            .remove_never(&person.to_string(), &r.effect_class)
            .await
            .map_err(TelosError::from)?
        {
            tracing::info!(person = %person, effect_class = %r.effect_class, "taken off the never-list");
            Ok(Response::new(pb::RemoveNeverResponse {}))
        } else {
            Err(Status::not_found(format!(
                "`{}` is not on {person}'s never-list",
                r.effect_class
            )))
        }
    }
}
