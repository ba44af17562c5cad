//! `metnos ask "<query>"`: one turn through the running planner, its steps shown as they
//! stream (a spinner while the LLM thinks, on a terminal), an approval card answered with
//! y/n, and the final answer on stdout. `metnos turns show|list`: the turn log.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Subcommand, ValueEnum};
use metnos_core::level::AutonomyLevel;
use metnos_kit::{Config, ServiceName};
use metnos_proto::approval::v1 as approval;
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::common::v1 as common;
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
use metnos_proto::policy::v1 as policy;

use crate::admin::{connect, failed, say};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    Local,
    Online,
    Hybrid,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LanguageArg {
    It,
    En,
}

/// How a turn from the terminal runs (`metnos ask` and `metnos chat`).
#[derive(Debug, clap::Args)]
pub struct TurnOptions {
    /// Autonomy level: ReadOnly, Supervised or Full, any case (default: turns.cli_level).
    #[arg(long, value_name = "LEVEL")]
    pub level: Option<AutonomyLevel>,
    /// Planner mode (default: runtime.mode).
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Language of the approval cards and the answers (default: Italian).
    #[arg(long, value_enum)]
    pub language: Option<LanguageArg>,
}

impl TurnOptions {
    /// The request for one turn of `principal` asking `query`.
    pub fn request(
        &self,
        config: &Config,
        principal: &common::Principal,
        query: String,
    ) -> pb::RunTurnRequest {
        pb::RunTurnRequest {
            principal: Some(principal.clone()),
            level: level_of(self.level, config).to_wire(),
            query,
            language: match self.language {
                Some(LanguageArg::En) => common::Language::English,
                _ => common::Language::Italian,
            } as i32,
            mode: match self.mode {
                None => pb::Mode::Unspecified,
                Some(ModeArg::Local) => pb::Mode::Local,
                Some(ModeArg::Online) => pb::Mode::Online,
                Some(ModeArg::Hybrid) => pb::Mode::Hybrid,
            } as i32,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct AskArgs {
    /// What to do, in your words.
    pub query: String,
    #[command(flatten)]
    pub options: TurnOptions,
}

#[derive(Debug, Subcommand)]
pub enum TurnsCommand {
    /// One logged turn, as JSON (no argument values, no message text).
    Show { turn_id: String },
    /// Logged turns of a day, newest first, one JSON object per line.
    List {
        /// YYYY-MM-DD (UTC); today when left out.
        #[arg(long)]
        date: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
}

/// The local user as a principal of channel `cli`.
pub fn cli_principal() -> common::Principal {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "local".to_owned());
    common::Principal {
        channel: "cli".to_owned(),
        sender_id: user,
    }
}

fn level_of(arg: Option<AutonomyLevel>, config: &Config) -> AutonomyLevel {
    arg.unwrap_or(config.turns.cli_level)
}

/// A spinner on stderr while the turn is quiet (terminals only).
struct Spinner {
    quiet: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Spinner {
    fn start() -> Spinner {
        let quiet = Arc::new(AtomicBool::new(true));
        if !std::io::stderr().is_terminal() {
            return Spinner { quiet, task: None };
        }
        let flag = Arc::clone(&quiet);
        let task = tokio::spawn(async move {
            let frames = ['|', '/', '-', '\\'];
            let mut i = 0;
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(120)).await;
                if flag.load(Ordering::Relaxed) {
                    eprint!("\r{} thinking…", frames[i % frames.len()]);
                    i += 1;
                }
            }
        });
        Spinner {
            quiet,
            task: Some(task),
        }
    }

    /// Clears the spinner line before printing.
    fn pause(&self) {
        if self.task.is_some() {
            self.quiet.store(false, Ordering::Relaxed);
            eprint!("\r\x1b[2K");
        }
    }

    fn resume(&self) {
        self.quiet.store(true, Ordering::Relaxed);
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            eprint!("\r\x1b[2K");
        }
    }
}

/// Reads y/n from stdin (a terminal or a pipe); `None` at end of input.
async fn ask_yes_no() -> Option<bool> {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        loop {
            eprint!("Approve? [y/n] ");
            let _ = std::io::stderr().flush();
            line.clear();
            match std::io::stdin().read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => match line.trim().to_lowercase().as_str() {
                    "y" | "yes" | "s" | "si" | "sì" => return Some(true),
                    "n" | "no" => return Some(false),
                    _ => eprintln!("Please answer y or n."),
                },
            }
        }
    })
    .await
    .ok()
    .flatten()
}

/// The clients a turn from the terminal needs.
pub struct Session {
    planner: PlannerServiceClient<metnos_kit::client::TracedChannel>,
    approvals: ApprovalServiceClient<metnos_kit::client::TracedChannel>,
    url: String,
    approval_url: String,
    pub principal: common::Principal,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("principal", &self.principal)
            .finish_non_exhaustive()
    }
}

impl Session {
    pub fn connect(config: &Config) -> Result<Session, ExitCode> {
        let (channel, url) = connect(config, ServiceName::Planner)?;
        let (approval_channel, approval_url) = connect(config, ServiceName::Approval)?;
        Ok(Session {
            planner: PlannerServiceClient::new(channel),
            approvals: ApprovalServiceClient::new(approval_channel),
            url,
            approval_url,
            principal: cli_principal(),
        })
    }

    /// A client that can cancel this session's turns while one runs.
    pub fn canceller(
        &self,
    ) -> (
        PlannerServiceClient<metnos_kit::client::TracedChannel>,
        common::Principal,
    ) {
        (self.planner.clone(), self.principal.clone())
    }

    /// Cancels the local user's running turn; whether there was one.
    pub async fn cancel(&mut self) -> bool {
        let request = pb::CancelTurnRequest {
            target: Some(pb::cancel_turn_request::Target::Principal(
                self.principal.clone(),
            )),
            reason: "stop from the terminal".to_owned(),
            ..Default::default()
        };
        self.planner
            .cancel_turn(request)
            .await
            .is_ok_and(|r| r.into_inner().cancelled)
    }

    /// Runs one turn, showing its events on stderr and its answer on stdout.
    pub async fn turn(&mut self, request: pb::RunTurnRequest) -> ExitCode {
        let (planner, approvals, url, approval_url, principal) = (
            &mut self.planner,
            &mut self.approvals,
            &self.url,
            &self.approval_url,
            &self.principal,
        );
        let language = metnos_core::Language::from_wire(request.language)
            .unwrap_or(metnos_core::Language::Italian);
        let mut stream = match planner.run_turn(request).await {
            Ok(r) => r.into_inner(),
            Err(status) => return failed(ServiceName::Planner, url, &status),
        };
        let spinner = Spinner::start();
        loop {
            let message = match stream.message().await {
                Ok(Some(m)) => m,
                Ok(None) => {
                    spinner.pause();
                    eprintln!("metnos: the planner ended the turn without an answer");
                    return ExitCode::FAILURE;
                }
                Err(status) => {
                    spinner.pause();
                    return failed(ServiceName::Planner, url, &status);
                }
            };
            let Some(event) = message.event.and_then(|e| e.event) else {
                continue;
            };
            spinner.pause();
            use pb::turn_event::Event;
            match event {
                Event::Started(s) => eprintln!("turn {} ({} tier, {})", s.turn_id, s.tier, s.model),
                Event::StepProposed(s) => {
                    eprintln!("step {}: {} {}", s.step, s.executor, s.args_json)
                }
                Event::PolicyOutcome(p) => {
                    let outcome = policy::Outcome::try_from(p.outcome)
                        .map(|o| {
                            o.as_str_name()
                                .trim_start_matches("OUTCOME_")
                                .to_lowercase()
                        })
                        .unwrap_or_default();
                    eprintln!("  policy: {outcome} ({})", p.reason);
                }
                Event::Verdict(v) => {
                    if let Some(v) = v.verdict {
                        eprintln!("  vaglio: {}", v.reason);
                    }
                }
                Event::AwaitingApproval(a) => {
                    eprintln!();
                    for line in a.card.map(|c| c.lines).unwrap_or_default() {
                        eprintln!("  {line}");
                    }
                    let decision = match ask_yes_no().await {
                        Some(true) => approval::Decision::Approve,
                        Some(false) => approval::Decision::Reject,
                        None => {
                            eprintln!("metnos: no answer (end of input): rejected");
                            approval::Decision::Reject
                        }
                    };
                    let resolve = approval::ResolveRequest {
                        token: a.token,
                        decision: decision as i32,
                        decider: Some(principal.clone()),
                    };
                    if let Err(status) = approvals.resolve(resolve).await {
                        // A refusal the approval service classes (expired while the person
                        // thought, already decided elsewhere) in the turn's language.
                        if let Some(refusal) = status
                            .metadata()
                            .get(metnos_core::resolve::METADATA_KEY)
                            .and_then(|v| v.to_str().ok())
                            .and_then(metnos_core::resolve::ResolveRefusal::parse)
                        {
                            eprintln!("metnos: {}", refusal.say(language));
                            return ExitCode::FAILURE;
                        }
                        return failed(ServiceName::Approval, approval_url, &status);
                    }
                }
                Event::ApprovalDecided(d) => {
                    let status = approval::ApprovalStatus::try_from(d.status)
                        .map(|s| {
                            s.as_str_name()
                                .trim_start_matches("APPROVAL_STATUS_")
                                .to_lowercase()
                        })
                        .unwrap_or_default();
                    eprintln!("  approval: {status}");
                }
                Event::Observation(o) => {
                    let mark = if o.ok { "ok" } else { "failed" };
                    let summary: String = o.summary.chars().take(120).collect();
                    eprintln!(
                        "  {mark} ({} ms): {}",
                        o.duration_ms,
                        summary.replace('\n', " ")
                    );
                }
                Event::Suspended(s) => {
                    eprintln!("metnos: turn {} waits for approval {}", s.turn_id, s.token);
                    return ExitCode::FAILURE;
                }
                Event::Finished(f) => {
                    drop(spinner);
                    let kind = pb::FinalKind::try_from(f.kind).unwrap_or(pb::FinalKind::Error);
                    if kind == pb::FinalKind::Answer {
                        say(&f.text);
                        return ExitCode::SUCCESS;
                    }
                    eprintln!(
                        "metnos: {} — {}",
                        kind.as_str_name()
                            .trim_start_matches("FINAL_KIND_")
                            .to_lowercase(),
                        f.text
                    );
                    return ExitCode::FAILURE;
                }
            }
            spinner.resume();
        }
    }
}

pub async fn ask(config: &Config, args: AskArgs) -> ExitCode {
    let mut session = match Session::connect(config) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let request = args.options.request(config, &session.principal, args.query);
    session.turn(request).await
}

pub async fn turns(config: &Config, command: TurnsCommand) -> ExitCode {
    let (channel, url) = match connect(config, ServiceName::Planner) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let mut planner = PlannerServiceClient::new(channel);
    match command {
        TurnsCommand::Show { turn_id } => {
            match planner.get_turn(pb::GetTurnRequest { turn_id }).await {
                Ok(r) => say(&r.into_inner().record_json),
                Err(status) => return failed(ServiceName::Planner, &url, &status),
            }
        }
        TurnsCommand::List { date, limit } => {
            let request = pb::ListTurnsRequest {
                date: date.unwrap_or_default(),
                limit,
            };
            match planner.list_turns(request).await {
                Ok(r) => {
                    for record in r.into_inner().records_json {
                        say(&record);
                    }
                }
                Err(status) => return failed(ServiceName::Planner, &url, &status),
            }
        }
    }
    ExitCode::SUCCESS
}
