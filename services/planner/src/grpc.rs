//! The edge: `metnos.planner.v1.PlannerService`. Requests become domain types here
//! (`TryFrom`, INVALID_ARGUMENT saying what is wrong), errors become statuses in one place
//! ([`crate::error`]), and a turn's events stream back as the engine sends them.

use metnos_kit::authz::{Caller, Rule, Table};
use metnos_kit::tls::Identity;
use std::pin::Pin;
use std::sync::Arc;

use metnos_core::level::AutonomyLevel;
use metnos_core::limits;
use metnos_core::principal::Principal;
use metnos_kit::time::now_ms;
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::planner_service_server::PlannerService;
use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt, wrappers::ReceiverStream};
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::error::Error;
use crate::store::{State, StoredTurn};
use crate::turn::conversation::Threading;
use crate::turn::engine::{Planner, Sink};
use crate::turn::{Checkpoint, TurnRequest, mode_from_wire};
use crate::turnlog;

/// A turn record as `spectator` (the gateway's page) may see it: each step's approval
/// token named as the decisions journal names it, never the token itself.
fn shown_to(spectator: bool, record_json: String) -> String {
    if !spectator {
        return record_json;
    }
    let Ok(mut record) = serde_json::from_str::<serde_json::Value>(&record_json) else {
        return String::new();
    };
    if let Some(steps) = record.get_mut("steps").and_then(|s| s.as_array_mut()) {
        for step in steps {
            // A record written before the turn log kept only names holds the token itself.
            if let Some(token) = step.get("approval_token").and_then(|t| t.as_str())
                && token.len() != 16
            {
                step["approval_token"] = metnos_kit::chain::token_name(token).into();
            }
        }
    }
    record.to_string()
}

/// Who may call which RPC (README, "Security model"): the gateway (for the people it
/// authenticated) and the owner (for `cli`) run, resume and cancel turns — each only for
/// its own people, checked below — and only the owner reads them.
pub const AUTHORIZATION: Table = Table {
    service: "metnos.planner.v1.PlannerService",
    rules: &[
        Rule {
            method: "RunTurn",
            callers: &[Identity::Gateway, Identity::Owner],
        },
        Rule {
            method: "ResumeTurn",
            callers: &[Identity::Gateway, Identity::Owner],
        },
        Rule {
            method: "CancelTurn",
            callers: &[Identity::Gateway, Identity::Owner],
        },
        // Reading turns: the owner's terminal, and the owner's spectator page (its own
        // identity, keys only, as the turn log).
        Rule {
            method: "GetTurn",
            callers: &[Identity::Web, Identity::Owner],
        },
        Rule {
            method: "ListTurns",
            callers: &[Identity::Web, Identity::Owner],
        },
        Rule {
            method: "ListTurnChanges",
            callers: &[Identity::Web, Identity::Owner],
        },
        Rule {
            method: "VerifyTurnLog",
            callers: &[Identity::Web, Identity::Owner],
        },
        // Standing orders: the owner's terminal. People on other channels manage theirs in
        // their chat (the planner's own tools), never through these.
        Rule {
            method: "CreateSchedule",
            callers: &[Identity::Owner],
        },
        Rule {
            method: "ListSchedules",
            callers: &[Identity::Web, Identity::Owner],
        },
        Rule {
            method: "SetScheduleState",
            callers: &[Identity::Owner],
        },
        Rule {
            method: "DeleteSchedule",
            callers: &[Identity::Owner],
        },
        Rule {
            method: "RunSchedule",
            callers: &[Identity::Owner],
        },
        // A terminal session's proposals: the owner's terminal (other channels get theirs
        // pushed by the gateway).
        Rule {
            method: "OpenSession",
            callers: &[Identity::Owner],
        },
        // Erasing a person's conversations: the gateway for its own people (checked
        // below), the owner for anyone.
        Rule {
            method: "ForgetConversations",
            callers: &[Identity::Gateway, Identity::Owner],
        },
        // A person's long-term memory: the owner's terminal; the spectator page lists it
        // without the words.
        Rule {
            method: "ListMemories",
            callers: &[Identity::Web, Identity::Owner],
        },
        Rule {
            method: "SearchMemories",
            callers: &[Identity::Owner],
        },
        Rule {
            method: "ForgetMemory",
            callers: &[Identity::Owner],
        },
        // What the catalog holds of MCP servers: the owner's terminal and the spectator page.
        Rule {
            method: "ListMcpServers",
            callers: &[Identity::Web, Identity::Owner],
        },
        // The mnestome: the owner's terminal; the spectator page lists it.
        Rule {
            method: "ListPassages",
            callers: &[Identity::Web, Identity::Owner],
        },
        Rule {
            method: "ForgetPassages",
            callers: &[Identity::Owner],
        },
    ],
};

/// A server-streaming response.
type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

impl TryFrom<pb::RunTurnRequest> for TurnRequest {
    type Error = Error;

    fn try_from(request: pb::RunTurnRequest) -> Result<TurnRequest, Error> {
        limits::bytes("query", &request.query, limits::QUERY)?;
        if request.query.trim().is_empty() {
            return Err(Error::EmptyQuery);
        }
        let principal = Principal::required("principal", request.principal.as_ref())?;
        let level = AutonomyLevel::from_wire(request.level).map_err(|_| Error::UnspecifiedLevel)?;
        let thread = match pb::Thread::try_from(request.thread) {
            Ok(pb::Thread::Unspecified) => Threading::None,
            Ok(pb::Thread::Continue) if request.thread_id.is_empty() => Threading::Continue,
            Ok(pb::Thread::Continue) => {
                limits::bytes("thread_id", &request.thread_id, limits::TOKEN)?;
                Threading::Older(request.thread_id)
            }
            Ok(pb::Thread::New) => Threading::New,
            Err(_) => return Err(Error::UnknownThread(request.thread)),
        };
        Ok(TurnRequest {
            principal,
            level,
            query: request.query,
            language: metnos_core::Language::from_wire(request.language),
            mode: mode_from_wire(request.mode),
            forwarded: request.forwarded,
            thread,
        })
    }
}

/// The person a caller acts for: given, and one of the people its identity speaks for.
fn acting(
    caller: Identity,
    principal: Option<&metnos_proto::common::v1::Principal>,
) -> Result<Principal, Error> {
    let principal = Principal::required("principal", principal)?;
    may_act_for(caller, &principal)?;
    Ok(principal)
}

/// Whether `caller` speaks for people of `principal`'s channel.
fn may_act_for(caller: Identity, principal: &Principal) -> Result<(), Error> {
    if Caller::speaks_for(caller, principal.channel()) {
        return Ok(());
    }
    Err(Error::NotItsPeople {
        caller: caller.spiffe_id(),
        principal: metnos_core::limits::shown(&principal.to_string()),
        channels: caller.channels().join(", "),
    })
}

/// A turn is acted on only for its own person.
fn theirs(turn: &StoredTurn, who: &Principal) -> Result<(), Error> {
    if turn.channel == who.channel() && turn.sender_id == who.sender_id() {
        return Ok(());
    }
    Err(Error::NotTheirTurn {
        turn_id: turn.turn_id.clone(),
        principal: metnos_core::limits::shown(&who.to_string()),
    })
}

/// The `PlannerService` implementation.
#[derive(Debug, Clone)]
pub struct PlannerApi {
    pub planner: Arc<Planner>,
    /// The planner's store (turns, the scheduler's tables).
    pub store: crate::store::Store,
    /// What a terminal session's proposals need; its filters and the terminal's level are
    /// the edge's too.
    pub sessions: crate::proactive::session::Sessions,
    /// The daily turn log (read by ListTurns; ForgetConversations writes its count there).
    pub turn_log: crate::turnlog::TurnLog,
    /// The builtin scheduler (none: the schedule RPCs answer UNAVAILABLE).
    pub scheduler: Option<crate::proactive::scheduler::Scheduler>,
    /// Days of turn logs the retention keeps (what it may have removed is no erasure).
    pub turn_log_days: u32,
}

/// A task as the contract shows it.
pub fn schedule_of(
    scheduler: &crate::proactive::scheduler::Scheduler,
    task: &crate::proactive::scheduler::Task,
) -> pb::Schedule {
    use crate::proactive::scheduler::Kind;
    use metnos_kit::time::to_timestamp;
    let described = crate::schedule::Schedule::parse(&task.schedule)
        .map(|s| s.describe())
        .unwrap_or_else(|e| format!("unreadable: {e}"));
    pb::Schedule {
        id: task.id.clone(),
        kind: task.kind.as_str().to_owned(),
        name: task.name.clone(),
        principal: (task.kind == Kind::Standing).then(|| metnos_proto::common::v1::Principal {
            channel: task.channel.clone(),
            sender_id: task.sender_id.clone(),
        }),
        schedule: task.schedule.clone(),
        described,
        time_zone: scheduler.zone_name(task),
        query: task.query.clone(),
        level: task.level.map(|l| l.to_proto() as i32).unwrap_or_default(),
        notify: task.notify.as_str().to_owned(),
        state: task.state.as_str().to_owned(),
        next: scheduler
            .upcoming(task, 3)
            .into_iter()
            .map(to_timestamp)
            .collect(),
        last_run_at: task.last_run_at.map(to_timestamp),
        last_status: task.last_status.clone().unwrap_or_default(),
        last_output: task.last_output.clone().unwrap_or_default(),
        deferred: task.deferred,
    }
}

fn stream_of<T: Send + 'static>(
    rx: mpsc::Receiver<pb::TurnEvent>,
    wrap: fn(pb::TurnEvent) -> T,
) -> ResponseStream<T> {
    Box::pin(ReceiverStream::new(rx).map(move |e| Ok(wrap(e))))
}

fn checkpoint_of(found: &StoredTurn) -> Result<Checkpoint, Error> {
    Ok(Checkpoint::read(&found.checkpoint)?)
}

impl PlannerApi {
    fn scheduler(&self) -> Result<&crate::proactive::scheduler::Scheduler, Error> {
        self.scheduler.as_ref().ok_or(Error::NoScheduler)
    }

    /// Whether `caller` may start this turn: for one of its own people, and for the owner
    /// not above `turns.cli_level`.
    fn may_run(&self, caller: Identity, request: &TurnRequest) -> Result<(), Error> {
        may_act_for(caller, &request.principal)?;
        let allowed = self.sessions.cli_level;
        if caller == Identity::Owner && request.level > allowed {
            return Err(Error::AboveCliLevel {
                asked: request.level.to_string(),
                allowed: allowed.to_string(),
            });
        }
        Ok(())
    }

    /// A turn the gateway asks for runs only for a person its pairing record holds, at
    /// most at their level there: the gateway's certificate is not believed about either
    /// (a bug in it, or in what shares its process, must not start a turn for a stranger
    /// or at Full for someone paired at Supervised). The record is read through the
    /// gateway's GetPairing: the one source of truth, where a revocation or a lowered
    /// level takes effect at once (a signed pairing token would stay good until it
    /// expired, and need a key of its own).
    async fn paired_at(
        &self,
        caller: Identity,
        principal: &Principal,
        level: AutonomyLevel,
    ) -> Result<(), Error> {
        if caller != Identity::Gateway {
            return Ok(());
        }
        match self.sessions.filters.pairing_level(principal).await {
            Ok(None) => Err(Error::NotPaired(principal.to_string())),
            Ok(Some(paired)) if level > paired => Err(Error::AbovePairing {
                principal: principal.to_string(),
                asked: level.to_string(),
                paired: paired.to_string(),
            }),
            Ok(Some(_)) => Ok(()),
            Err(status) => {
                tracing::warn!(code = ?status.code(), "the person's pairing could not be read; the turn is refused");
                Err(Error::PairingUnknown(format!("{:?}", status.code())))
            }
        }
    }

    /// Runs `turn` on its own task and gives its events. The turn outlives this call; its
    /// spans stay children of the RPC's span.
    fn spawn<F, Fut>(&self, turn: F) -> mpsc::Receiver<pb::TurnEvent>
    where
        F: FnOnce(Arc<Planner>, Sink) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(64);
        let parent = tracing::Span::current();
        tokio::spawn(turn(Arc::clone(&self.planner), tx).instrument(parent));
        rx
    }

    /// Loads and claims a suspended turn by id or token, for `caller` acting for `who`.
    async fn claim(
        &self,
        caller: Identity,
        target: &pb::resume_turn_request::Target,
        who: &Principal,
    ) -> Result<Checkpoint, Error> {
        let store = &self.store;
        let found = match target {
            pb::resume_turn_request::Target::TurnId(id) => store.get(id).await,
            pb::resume_turn_request::Target::ApprovalToken(token) => store.by_token(token).await,
        }?
        .ok_or(Error::NoSuchTurn)?;
        theirs(&found, who)?;
        let now = now_ms();
        match found.state {
            State::Suspended => {}
            // Its resumer died before applying the decision: taken over from its checkpoint.
            State::Resuming if found.lease_until < now => {}
            State::Resuming => {
                return Err(Error::HeldElsewhere {
                    turn_id: found.turn_id,
                    seconds: u64::try_from((found.lease_until - now + 999) / 1000).unwrap_or(1),
                });
            }
            State::Running | State::Finished => {
                return Err(Error::NotSuspended {
                    turn_id: found.turn_id,
                    state: found.state.as_str(),
                });
            }
        }
        // Read before it is claimed: an unreadable checkpoint must not leave the turn
        // claimed by nobody until the orphan sweep.
        let checkpoint = checkpoint_of(&found)?;
        // A turn goes on at its level only while the person is still paired at it: a
        // revoked or lowered pairing holds for a turn that waited on a card too (checked
        // before the claim, so a refusal leaves the turn as it was).
        self.paired_at(caller, &checkpoint.principal(), checkpoint.level)
            .await?;
        let token = found.approval_token.as_deref().unwrap_or_default();
        if !store
            .claim_suspended_at(&found.turn_id, Some(token), now_ms())
            .await?
        {
            return Err(Error::AlreadyResuming(found.turn_id));
        }
        Ok(checkpoint)
    }
}

#[tonic::async_trait]
impl PlannerService for PlannerApi {
    type RunTurnStream = ResponseStream<pb::RunTurnResponse>;
    type ResumeTurnStream = ResponseStream<pb::ResumeTurnResponse>;

    async fn run_turn(
        &self,
        request: Request<pb::RunTurnRequest>,
    ) -> Result<Response<Self::RunTurnStream>, Status> {
        let caller = Caller::of(&request).ok_or(Error::Unauthenticated)?;
        let request = TurnRequest::try_from(request.into_inner())?;
        self.may_run(caller, &request)?;
        self.paired_at(caller, &request.principal, request.level)
            .await?;
        let mut checkpoint = self.planner.start(&request);
        self.planner
            .attach_thread(&mut checkpoint, &request.thread)
            .await;
        let rx = self.spawn(|planner, sink| planner.run(checkpoint, sink));
        Ok(Response::new(stream_of(rx, |e| pb::RunTurnResponse {
            event: Some(e),
        })))
    }

    async fn resume_turn(
        &self,
        request: Request<pb::ResumeTurnRequest>,
    ) -> Result<Response<Self::ResumeTurnStream>, Status> {
        let caller = Caller::of(&request).ok_or(Error::Unauthenticated)?;
        let request = request.into_inner();
        let target = request.target.ok_or(Error::NoResumeTarget)?;
        match &target {
            pb::resume_turn_request::Target::TurnId(id) => {
                limits::bytes("turn_id", id, limits::TOKEN).map_err(Error::from)?;
            }
            pb::resume_turn_request::Target::ApprovalToken(token) => {
                limits::bytes("approval_token", token, limits::TOKEN).map_err(Error::from)?;
            }
        }
        let who = acting(caller, request.principal.as_ref())?;
        let checkpoint = self.claim(caller, &target, &who).await?;
        let rx = self.spawn(|planner, sink| planner.resume(checkpoint, sink));
        Ok(Response::new(stream_of(rx, |e| pb::ResumeTurnResponse {
            event: Some(e),
        })))
    }

    async fn cancel_turn(
        &self,
        request: Request<pb::CancelTurnRequest>,
    ) -> Result<Response<pb::CancelTurnResponse>, Status> {
        let caller = Caller::of(&request).ok_or(Error::Unauthenticated)?;
        let request = request.into_inner();
        limits::bytes("reason", &request.reason, limits::REASON).map_err(Error::from)?;
        if let Some(pb::cancel_turn_request::Target::TurnId(id)) = &request.target {
            limits::bytes("turn_id", id, limits::TOKEN).map_err(Error::from)?;
        }
        let store = &self.store;
        let (found, who) = match &request.target {
            Some(pb::cancel_turn_request::Target::TurnId(id)) => {
                let who = acting(caller, request.on_behalf_of.as_ref())?;
                (
                    store
                        .get(id)
                        .await
                        .map_err(Error::Store)?
                        .into_iter()
                        .collect(),
                    who,
                )
            }
            Some(pb::cancel_turn_request::Target::Principal(p)) => {
                let who = acting(caller, Some(p))?;
                let turns = if request.all {
                    store.unfinished_of(who.channel(), who.sender_id()).await
                } else {
                    store
                        .current_of(who.channel(), who.sender_id())
                        .await
                        .map(|t| t.into_iter().collect())
                };
                (turns.map_err(Error::Store)?, who)
            }
            None => return Err(Error::NoCancelTarget.into()),
        };
        let found: Vec<StoredTurn> = found;
        let Some(newest) = found.first() else {
            return Err(Error::NoSuchTurn.into());
        };
        let turn_id = newest.turn_id.clone();
        let mut cancelled = false;
        for turn in &found {
            theirs(turn, &who)?;
            cancelled |= self.planner.cancel_turn(turn).await?;
        }
        if !request.reason.is_empty() {
            tracing::info!(turn_id, turns = found.len(), reason = %request.reason, cancelled, "turn cancel requested");
        }
        Ok(Response::new(pb::CancelTurnResponse { turn_id, cancelled }))
    }

    async fn get_turn(
        &self,
        request: Request<pb::GetTurnRequest>,
    ) -> Result<Response<pb::GetTurnResponse>, Status> {
        let spectator = Caller::of(&request) == Some(Identity::Web);
        let id = request.into_inner().turn_id;
        limits::bytes("turn_id", &id, limits::TOKEN).map_err(Error::from)?;
        let found = self
            .store
            .get(&id)
            .await
            .map_err(Error::Store)?
            .ok_or_else(|| Error::NoTurn(id.chars().take(64).collect()))?;
        let record_json = match found.record {
            Some(record) if found.state == State::Finished => record,
            _ => serde_json::json!({"turn_id": found.turn_id, "state": found.state.as_str()})
                .to_string(),
        };
        let record_json = shown_to(spectator, record_json);
        Ok(Response::new(pb::GetTurnResponse { record_json }))
    }

    async fn list_turns(
        &self,
        request: Request<pb::ListTurnsRequest>,
    ) -> Result<Response<pb::ListTurnsResponse>, Status> {
        let spectator = Caller::of(&request) == Some(Identity::Web);
        let request = request.into_inner();
        let date = if request.date.is_empty() {
            turnlog::date_of(now_ms())
        } else if turnlog::valid_date(&request.date) {
            request.date
        } else {
            return Err(Error::BadDate(request.date.chars().take(20).collect()).into());
        };
        limits::number("limit", u64::from(request.limit), u64::from(limits::LIST))
            .map_err(Error::from)?;
        let limit = if request.limit == 0 {
            50
        } else {
            request.limit as usize
        };
        let records = self.turn_log.read(&date, limit).map_err(Error::TurnLog)?;
        Ok(Response::new(pb::ListTurnsResponse {
            records_json: records
                .iter()
                .map(|r| shown_to(spectator, r.to_string()))
                .collect(),
        }))
    }

    async fn list_turn_changes(
        &self,
        request: Request<pb::ListTurnChangesRequest>,
    ) -> Result<Response<pb::ListTurnChangesResponse>, Status> {
        let spectator = Caller::of(&request) == Some(Identity::Web);
        let request = request.into_inner();
        limits::number("limit", u64::from(request.limit), u64::from(limits::LIST))
            .map_err(Error::from)?;
        let limit = if request.limit == 0 {
            100
        } else {
            request.limit
        };
        let store = &self.store;
        let changes = if request.unfinished {
            store.unfinished(limit).await
        } else {
            store.changes(request.after_ms, limit).await
        }
        .map_err(Error::from)?;
        Ok(Response::new(pb::ListTurnChangesResponse {
            changes: changes
                .into_iter()
                .map(|c| pb::TurnChange {
                    turn_id: c.turn_id,
                    state: c.state,
                    record_json: shown_to(spectator, c.record),
                    changed_ms: c.changed_ms,
                })
                .collect(),
        }))
    }

    async fn verify_turn_log(
        &self,
        _: Request<pb::VerifyTurnLogRequest>,
    ) -> Result<Response<pb::VerifyTurnLogResponse>, Status> {
        let dir = self.turn_log.dir().to_owned();
        let keep = self.turn_log_days;
        let report = tokio::task::spawn_blocking(move || {
            let now = metnos_kit::time::now_ms();
            metnos_kit::chain::verify(&dir, None, &|day| crate::turnlog::expired(day, keep, now))
        })
        .await
        .map_err(|e| Status::internal(format!("walking the turn log failed: {e}")))?
        .map_err(|e| Status::unavailable(format!("the turn log cannot be read: {e}")))?;
        Ok(Response::new(pb::VerifyTurnLogResponse {
            not_logged: report.not_logged,
            records: report.lines,
            newest_day_root: report.newest_day(),
            broken: report.broken.unwrap_or_default(),
            unchained: report.unchained,
        }))
    }

    async fn create_schedule(
        &self,
        request: Request<pb::CreateScheduleRequest>,
    ) -> Result<Response<pb::CreateScheduleResponse>, Status> {
        let caller = Caller::of(&request).ok_or(Error::Unauthenticated)?;
        let r = request.into_inner();
        let scheduler = self.scheduler()?;
        let person = acting(caller, r.principal.as_ref())?;
        if !person.is_terminal() {
            return Err(Error::NotCliSchedule(limits::shown(person.channel())).into());
        }
        limits::bytes("schedule", &r.schedule, crate::schedule::MAX_LEN).map_err(Error::from)?;
        limits::bytes("query", &r.query, limits::QUERY).map_err(Error::from)?;
        limits::bytes("name", &r.name, 200).map_err(Error::from)?;
        limits::bytes("notify", &r.notify, 32).map_err(Error::from)?;
        let allowed = self.sessions.cli_level;
        let level = AutonomyLevel::from_wire(r.level).unwrap_or(allowed);
        if level > allowed {
            return Err(Error::AboveCliLevel {
                asked: level.to_string(),
                allowed: allowed.to_string(),
            }
            .into());
        }
        let task = scheduler
            .create(&crate::proactive::scheduler::Order {
                person: &person,
                schedule: &r.schedule,
                query: &r.query,
                name: &r.name,
                notify: &r.notify,
                level,
                anchor_ms: None,
            })
            .await
            .map_err(Error::from)?;
        Ok(Response::new(pb::CreateScheduleResponse {
            schedule: Some(schedule_of(scheduler, &task)),
        }))
    }

    async fn list_schedules(
        &self,
        request: Request<pb::ListSchedulesRequest>,
    ) -> Result<Response<pb::ListSchedulesResponse>, Status> {
        let spectator = Caller::of(&request) == Some(Identity::Web);
        let r = request.into_inner();
        let scheduler = self.scheduler()?;
        let person = Principal::optional("principal", r.principal.as_ref()).map_err(Error::from)?;
        let tasks = scheduler
            .store
            .list(person.as_ref().map(|p| (p.channel(), p.sender_id())))
            .await
            .map_err(Error::from)?;
        Ok(Response::new(pb::ListSchedulesResponse {
            schedules: tasks
                .iter()
                .map(|t| schedule_of(scheduler, t))
                .map(|mut s| {
                    // The spectator page: when and whose, not what was asked or answered (a
                    // standing order's name is by default its request's beginning).
                    if spectator {
                        s.query.clear();
                        s.last_output.clear();
                        if s.kind == "standing" {
                            s.name.clone_from(&s.id);
                        }
                    }
                    s
                })
                .collect(),
        }))
    }

    async fn set_schedule_state(
        &self,
        request: Request<pb::SetScheduleStateRequest>,
    ) -> Result<Response<pb::SetScheduleStateResponse>, Status> {
        let r = request.into_inner();
        limits::bytes("id", &r.id, 64).map_err(Error::from)?;
        let scheduler = self.scheduler()?;
        let task = scheduler
            .set_active(&r.id, r.active)
            .await
            .map_err(Error::from)?;
        Ok(Response::new(pb::SetScheduleStateResponse {
            schedule: Some(schedule_of(scheduler, &task)),
        }))
    }

    async fn delete_schedule(
        &self,
        request: Request<pb::DeleteScheduleRequest>,
    ) -> Result<Response<pb::DeleteScheduleResponse>, Status> {
        let r = request.into_inner();
        limits::bytes("id", &r.id, 64).map_err(Error::from)?;
        self.scheduler()?.delete(&r.id).await.map_err(Error::from)?;
        Ok(Response::new(pb::DeleteScheduleResponse {}))
    }

    async fn run_schedule(
        &self,
        request: Request<pb::RunScheduleRequest>,
    ) -> Result<Response<pb::RunScheduleResponse>, Status> {
        let r = request.into_inner();
        limits::bytes("id", &r.id, 64).map_err(Error::from)?;
        let scheduler = self.scheduler()?;
        let task = scheduler.run_now(&r.id).await.map_err(Error::from)?;
        Ok(Response::new(pb::RunScheduleResponse {
            schedule: Some(schedule_of(scheduler, &task)),
        }))
    }

    async fn forget_conversations(
        &self,
        request: Request<pb::ForgetConversationsRequest>,
    ) -> Result<Response<pb::ForgetConversationsResponse>, Status> {
        let caller = Caller::of(&request).ok_or(Error::Unauthenticated)?;
        let request = request.into_inner();
        let person =
            Principal::required("principal", request.principal.as_ref()).map_err(Error::from)?;
        if caller != Identity::Owner {
            may_act_for(caller, &person)?;
        }
        crate::grpc_memory::forget_conversations(
            &self.planner,
            &self.turn_log,
            caller,
            &person,
            request.memory,
        )
        .await
    }

    async fn list_memories(
        &self,
        request: Request<pb::ListMemoriesRequest>,
    ) -> Result<Response<pb::ListMemoriesResponse>, Status> {
        crate::grpc_memory::list(self.planner.memories(), request).await
    }

    async fn search_memories(
        &self,
        request: Request<pb::SearchMemoriesRequest>,
    ) -> Result<Response<pb::SearchMemoriesResponse>, Status> {
        crate::grpc_memory::search(self.planner.memories(), request).await
    }

    async fn forget_memory(
        &self,
        request: Request<pb::ForgetMemoryRequest>,
    ) -> Result<Response<pb::ForgetMemoryResponse>, Status> {
        crate::grpc_memory::forget(self.planner.memories(), request).await
    }

    async fn list_passages(
        &self,
        request: Request<pb::ListPassagesRequest>,
    ) -> Result<Response<pb::ListPassagesResponse>, Status> {
        crate::grpc_mnestome::list(self.planner.mnestome(), request).await
    }

    async fn forget_passages(
        &self,
        request: Request<pb::ForgetPassagesRequest>,
    ) -> Result<Response<pb::ForgetPassagesResponse>, Status> {
        crate::grpc_mnestome::forget(self.planner.mnestome(), request).await
    }

    async fn list_mcp_servers(
        &self,
        _request: Request<pb::ListMcpServersRequest>,
    ) -> Result<Response<pb::ListMcpServersResponse>, Status> {
        Ok(Response::new(self.planner.mcp_servers().await))
    }

    async fn open_session(
        &self,
        request: Request<pb::OpenSessionRequest>,
    ) -> Result<Response<pb::OpenSessionResponse>, Status> {
        let caller = Caller::of(&request).ok_or(Error::Unauthenticated)?;
        let r = request.into_inner();
        let person = acting(caller, r.principal.as_ref())?;
        if !person.is_terminal() {
            return Err(Error::NotCliSession(limits::shown(person.channel())).into());
        }
        if !crate::proactive::session::valid_session_id(&r.session_id) {
            return Err(Error::BadSessionId.into());
        }
        let language =
            metnos_core::Language::from_wire(r.language).unwrap_or(metnos_core::Language::English);
        let (notes, proposals) = crate::proactive::session::open(
            &self.sessions,
            &person,
            &r.session_id,
            language,
        )
        .await
        .map_err(|e| {
            // What failed, in a word: the services' and the store's messages stay out.
            let cause = e.cause();
            tracing::warn!(cause = %cause, "a terminal session's proposals could not be weighed");
            Status::unavailable(format!(
                "the session's proposals cannot be weighed now ({cause})"
            ))
        })?;
        Ok(Response::new(pb::OpenSessionResponse { proposals, notes }))
    }
}
