//! One task of a suite through the throwaway stack: its files and pages set up, its turns
//! run as a person at the terminal would (cards answered as the task says), and each
//! turn's checks.

use std::time::{Duration, Instant};

use metnos_kit::ServiceName;
use metnos_kit::client::TracedChannel;
use metnos_proto::approval::v1 as approval;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::common::v1 as common;
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
use metnos_proto::planner::v1::turn_event::Event;
use serde::Serialize;
use serde_json::Value;

use super::stack::Throwaway;
use super::suite::{SITE, Task, ThreadArg, Turn};

/// How one task fared.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub task: String,
    pub what: String,
    pub passed: bool,
    /// What failed, in words (empty when it passed).
    pub why: Vec<String>,
    pub turns: usize,
    pub steps: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The turns' time, as the planner measured it.
    pub latency_ms: u64,
    /// Of which the model's answers took this long.
    pub llm_ms: u64,
    /// What the planner repaired of the model's answers (kinds).
    pub repairs: Vec<String>,
}

/// The clients a task needs.
#[derive(Debug)]
pub struct Clients {
    planner: PlannerServiceClient<TracedChannel>,
    approvals: ApprovalServiceClient<TracedChannel>,
}

impl Clients {
    pub fn connect(stack: &Throwaway) -> Result<Clients, String> {
        Ok(Clients {
            planner: PlannerServiceClient::new(stack.channel(ServiceName::Planner)?),
            approvals: ApprovalServiceClient::new(stack.channel(ServiceName::Approval)?),
        })
    }
}

/// What one turn showed.
#[derive(Debug, Default)]
struct Seen {
    /// (step, tool, arguments) as proposed.
    proposed: Vec<(u32, String, Value)>,
    /// Steps whose tool ran and answered ok.
    ran_ok: Vec<u32>,
    /// Steps policy let through (allowed, or asked about).
    passed_policy: Vec<u32>,
    /// Steps the vaglio or the person stopped.
    stopped: Vec<u32>,
    cards: usize,
    finished: Option<pb::TurnFinished>,
    /// A card answered though the task says nothing of cards.
    unexpected_card: bool,
}

/// Runs `task` (its person is `eval:<id>`), each turn within `limit`.
pub async fn run_task(
    stack: &Throwaway,
    clients: &mut Clients,
    task: &Task,
    limit: Duration,
) -> Outcome {
    let mut outcome = Outcome {
        task: task.id.clone(),
        what: task.what.clone(),
        passed: false,
        why: Vec::new(),
        turns: task.turns.len(),
        steps: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        latency_ms: 0,
        llm_ms: 0,
        repairs: Vec::new(),
    };
    if let Err(e) = set_up(stack, task) {
        outcome.why.push(e);
        return outcome;
    }
    let level = task
        .level()
        .unwrap_or(metnos_core::level::AutonomyLevel::Full);
    let principal = common::Principal {
        channel: metnos_core::principal::TERMINAL.to_owned(),
        sender_id: format!("eval-{}", task.id),
    };
    for (n, turn) in task.turns.iter().enumerate() {
        let thread = match (n, turn.thread) {
            (0, _) | (_, Some(ThreadArg::New)) => pb::Thread::New,
            _ => pb::Thread::Continue,
        };
        let request = pb::RunTurnRequest {
            principal: Some(principal.clone()),
            level: level.to_wire(),
            query: turn.say.replace(SITE, &stack.site),
            language: task.language.language().to_wire(),
            mode: pb::Mode::Unspecified as i32,
            forwarded: false,
            thread: thread as i32,
            thread_id: String::new(),
        };
        let started = Instant::now();
        let seen = tokio::time::timeout(limit, one_turn(clients, request, turn, &principal)).await;
        let prefix = if task.turns.len() > 1 {
            format!("turn {}: ", n + 1)
        } else {
            String::new()
        };
        let seen = match seen {
            Ok(Ok(seen)) => seen,
            Ok(Err(e)) => {
                outcome.why.push(format!("{prefix}{e}"));
                break;
            }
            Err(_) => {
                outcome.why.push(format!(
                    "{prefix}no end within {} s ({} s spent)",
                    limit.as_secs(),
                    started.elapsed().as_secs()
                ));
                // The turn runs on without its stream: stopped, so that it touches nothing
                // of the tasks after it.
                let cancel = pb::CancelTurnRequest {
                    target: Some(pb::cancel_turn_request::Target::Principal(
                        principal.clone(),
                    )),
                    reason: "metnos eval: the turn ran past its time".to_owned(),
                    ..Default::default()
                };
                let _ = clients.planner.cancel_turn(cancel).await;
                break;
            }
        };
        tally(clients, &mut outcome, &seen).await;
        for problem in check(stack, turn, &seen) {
            outcome.why.push(format!("{prefix}{problem}"));
        }
    }
    outcome.passed = outcome.why.is_empty();
    outcome
}

/// The task's files in the home, its pages on the server.
fn set_up(stack: &Throwaway, task: &Task) -> Result<(), String> {
    stack.clear_home()?;
    for file in &task.files {
        let path = stack.home().join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot make {}: {e}", parent.display()))?;
        }
        // A new file (never through a link): the home was emptied.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, file.contents().as_bytes()))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let pages: Vec<(String, String)> = task
        .pages
        .iter()
        .map(|p| (p.path.clone(), p.text.replace(SITE, &stack.site)))
        .collect();
    stack.set_pages(&pages);
    Ok(())
}

/// The turn's events to its end; its cards answered as `turn.approve` says (no: when it
/// says nothing, and the card is counted against the task).
async fn one_turn(
    clients: &mut Clients,
    request: pb::RunTurnRequest,
    turn: &Turn,
    principal: &common::Principal,
) -> Result<Seen, String> {
    let mut stream = clients
        .planner
        .run_turn(request)
        .await
        .map_err(|s| format!("the planner refused the turn: {}", s.message()))?
        .into_inner();
    let mut seen = Seen::default();
    loop {
        let message = stream
            .message()
            .await
            .map_err(|s| format!("the turn's stream failed: {}", s.message()))?
            .ok_or("the planner ended the turn without an answer")?;
        match message.event.and_then(|e| e.event) {
            Some(Event::StepProposed(s)) => {
                let args = serde_json::from_str(&s.args_json).unwrap_or(Value::Null);
                seen.proposed.push((s.step, s.executor, args));
            }
            Some(Event::Observation(o)) if o.ok => seen.ran_ok.push(o.step),
            Some(Event::PolicyOutcome(p)) => {
                use metnos_proto::policy::v1::Outcome;
                if matches!(
                    Outcome::try_from(p.outcome),
                    Ok(Outcome::Allowed | Outcome::ApprovalRequired)
                ) {
                    seen.passed_policy.push(p.step);
                }
            }
            Some(Event::Verdict(v)) if !v.verdict.as_ref().is_some_and(|v| v.approved) => {
                seen.stopped.push(v.step);
            }
            Some(Event::ApprovalDecided(d))
                if d.status != approval::ApprovalStatus::Approved as i32 =>
            {
                seen.stopped.push(d.step);
            }
            Some(Event::AwaitingApproval(card)) => {
                seen.cards += 1;
                seen.unexpected_card |= turn.approve.is_none();
                let decision = if turn.approve == Some(true) {
                    approval::Decision::Approve
                } else {
                    approval::Decision::Reject
                };
                let resolve = approval::ResolveRequest {
                    token: card.token.clone(),
                    decision: decision as i32,
                    decider: Some(principal.clone()),
                    ..Default::default()
                };
                clients
                    .approvals
                    .resolve(resolve)
                    .await
                    .map_err(|s| format!("the card could not be answered: {}", s.message()))?;
            }
            Some(Event::Suspended(_)) => {
                return Err("the turn was left waiting for an approval".to_owned());
            }
            Some(Event::Finished(f)) => {
                seen.finished = Some(f);
                return Ok(seen);
            }
            _ => {}
        }
    }
}

impl Seen {
    /// Whether step `step`'s tool ran: it answered ok, or it passed policy and nobody
    /// stopped it (a run that failed is a run).
    fn ran(&self, step: u32) -> bool {
        self.ran_ok.contains(&step)
            || (self.passed_policy.contains(&step) && !self.stopped.contains(&step))
    }
}

/// The turn's figures added to the task's, and its repairs from its record (as
/// `metnos turns show` reads it).
async fn tally(clients: &mut Clients, outcome: &mut Outcome, seen: &Seen) {
    outcome.steps += seen.proposed.len();
    let Some(finished) = &seen.finished else {
        return;
    };
    outcome.latency_ms += finished.latency_ms;
    if let Some(usage) = &finished.usage {
        outcome.prompt_tokens += usage.prompt_tokens;
        outcome.completion_tokens += usage.completion_tokens;
    }
    let request = pb::GetTurnRequest {
        turn_id: finished.turn_id.clone(),
    };
    let Some(record) = clients
        .planner
        .get_turn(request)
        .await
        .ok()
        .and_then(|r| serde_json::from_str::<Value>(&r.into_inner().record_json).ok())
    else {
        return;
    };
    outcome.llm_ms += record["llm_ms"].as_u64().unwrap_or(0);
    if let Some(repairs) = record["repairs"].as_array() {
        outcome
            .repairs
            .extend(repairs.iter().filter_map(Value::as_str).map(str::to_owned));
    }
}

/// What the turn got wrong, each in a few words.
fn check(stack: &Throwaway, turn: &Turn, seen: &Seen) -> Vec<String> {
    let mut problems = Vec::new();
    let home = stack.home();
    let Some(finished) = &seen.finished else {
        return vec!["no end".to_owned()];
    };
    let kind = pb::FinalKind::try_from(finished.kind)
        .map(|k| {
            k.as_str_name()
                .trim_start_matches("FINAL_KIND_")
                .to_lowercase()
        })
        .unwrap_or_default();
    let wanted = turn.kind.as_deref().unwrap_or("answer");
    if kind != wanted {
        problems.push(format!(
            "ended as {kind}, not {wanted}: {}",
            cut(&finished.text)
        ));
    }
    for tool in &turn.tools {
        let right = seen.proposed.iter().any(|(_, name, args)| {
            name == &tool.name && super::checks::args_fit(args, tool, &home, &stack.site)
        });
        if right {
            continue;
        }
        let named = seen.proposed.iter().any(|(_, name, _)| name == &tool.name);
        problems.push(if named {
            format!("{} was called with other arguments", tool.name)
        } else {
            format!("{} was not called", tool.name)
        });
    }
    for forbidden in &turn.forbid {
        let ran: Vec<&str> = seen
            .proposed
            .iter()
            .filter(|(step, name, _)| seen.ran(*step) && (forbidden == "*" || name == forbidden))
            .map(|(_, name, _)| name.as_str())
            .collect();
        if !ran.is_empty() {
            problems.push(format!("ran {} (forbidden)", ran.join(", ")));
        }
    }
    if turn.card == Some(true) && seen.cards == 0 {
        problems.push("no approval card was shown".to_owned());
    }
    if turn.card == Some(false) && seen.cards > 0 || seen.unexpected_card {
        problems.push("an approval card nobody expected".to_owned());
    }
    problems.extend(super::checks::answer(turn, &finished.text));
    problems.extend(super::checks::files(turn, &home));
    problems
}

/// A text cut for a message.
fn cut(text: &str) -> String {
    let one_line = text.replace('\n', " ");
    let mut cut: String = one_line.chars().take(80).collect();
    if cut.len() < one_line.len() {
        cut.push('…');
    }
    cut
}
