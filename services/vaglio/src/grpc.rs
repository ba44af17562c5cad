//! The edge: prost types to domain types and back.

use metnos_kit::authz::{Rule, Table};
use metnos_kit::tls::Identity;
use std::sync::Arc;

use metnos_kit::server::not_implemented;
use metnos_kit::time::to_timestamp;
use metnos_proto::vaglio::v1 as pb;
use metnos_proto::vaglio::v1::vaglio_service_server::VaglioService;
use tonic::{Request, Response, Status};

use crate::service::{BlockedBy, Error, Proposal, Provenance, Vaglio, Verdict};

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
            callers: &[Identity::Owner],
        },
        Rule {
            method: "EvaluateProposal",
            callers: &[Identity::Planner],
        },
        Rule {
            method: "GetTelos",
            callers: &[Identity::Owner],
        },
        Rule {
            method: "RecordFeedback",
            callers: &[Identity::Gateway],
        },
        Rule {
            method: "DetectStop",
            callers: &[Identity::Gateway],
        },
        Rule {
            method: "ListRejectedProposals",
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

/// The `VaglioService` implementation; the telos RPCs arrive with the telos issue.
#[derive(Debug, Clone)]
pub struct VaglioApi {
    vaglio: Arc<Vaglio>,
}

impl VaglioApi {
    pub fn new(vaglio: Arc<Vaglio>) -> VaglioApi {
        VaglioApi { vaglio }
    }
}

#[tonic::async_trait]
impl VaglioService for VaglioApi {
    async fn judge(
        &self,
        request: Request<pb::JudgeRequest>,
    ) -> Result<Response<pb::JudgeResponse>, Status> {
        let r = request.into_inner();
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
        ])
        .map_err(Error::from)?;
        limits::entries("context.capabilities", context.capabilities.len(), 64)
            .map_err(Error::from)?;
        for capability in &context.capabilities {
            limits::bytes("context.capabilities[]", capability, limits::CAPABILITY)
                .map_err(Error::from)?;
        }
        limits::entries("context.provenance", context.provenance.len(), 64).map_err(Error::from)?;
        for entry in &context.provenance {
            limits::bytes("context.provenance[].arg", &entry.arg, 128).map_err(Error::from)?;
            limits::entries(
                "context.provenance[].sources",
                entry.sources.len(),
                metnos_core::provenance::MAX_LABELS,
            )
            .map_err(Error::from)?;
            for source in &entry.sources {
                limits::bytes(
                    "context.provenance[].sources[]",
                    source,
                    metnos_core::provenance::MAX_LABEL,
                )
                .map_err(Error::from)?;
            }
        }
        let proposal = Proposal {
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
            step: context.step,
            capability: context.capability,
            capabilities: context.capabilities,
            critical: context.critical,
            asker: metnos_core::AutonomyLevel::from_wire(context.level)
                .ok()
                .zip(
                    context
                        .principal
                        .and_then(|p| metnos_core::Principal::new(&p.channel, &p.sender_id).ok()),
                ),
        };
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

    async fn list_verdicts(
        &self,
        request: Request<pb::ListVerdictsRequest>,
    ) -> Result<Response<pb::ListVerdictsResponse>, Status> {
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
                intent: rec.intent,
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
        _r: Request<pb::EvaluateProposalRequest>,
    ) -> Result<Response<pb::EvaluateProposalResponse>, Status> {
        Err(not_implemented(
            "metnos.vaglio.v1.VaglioService/EvaluateProposal",
        ))
    }

    async fn get_telos(
        &self,
        _r: Request<pb::GetTelosRequest>,
    ) -> Result<Response<pb::GetTelosResponse>, Status> {
        Err(not_implemented("metnos.vaglio.v1.VaglioService/GetTelos"))
    }

    async fn record_feedback(
        &self,
        _r: Request<pb::RecordFeedbackRequest>,
    ) -> Result<Response<pb::RecordFeedbackResponse>, Status> {
        Err(not_implemented(
            "metnos.vaglio.v1.VaglioService/RecordFeedback",
        ))
    }

    async fn detect_stop(
        &self,
        _r: Request<pb::DetectStopRequest>,
    ) -> Result<Response<pb::DetectStopResponse>, Status> {
        Err(not_implemented("metnos.vaglio.v1.VaglioService/DetectStop"))
    }

    async fn list_rejected_proposals(
        &self,
        _r: Request<pb::ListRejectedProposalsRequest>,
    ) -> Result<Response<pb::ListRejectedProposalsResponse>, Status> {
        Err(not_implemented(
            "metnos.vaglio.v1.VaglioService/ListRejectedProposals",
        ))
    }
}
