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

use crate::admin::{connect, failed, say, terminal};

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
            // The owner's own words, typed at the terminal.
            forwarded: false,
            // One-shot unless the command says otherwise.
            thread: pb::Thread::Unspecified as i32,
            thread_id: String::new(),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct AskArgs {
    /// What to do, in your words.
    pub query: String,
    /// Go on with your conversation at the terminal (what you asked and were answered
    /// lately, as `metnos chat` sees it); without it, `ask` is one-shot.
    #[arg(long = "continue")]
    pub continue_thread: bool,
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
        channel: metnos_core::principal::TERMINAL.to_owned(),
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

/// Bytes read from stdin past the last line answered (a pipe may hand over several).
static STDIN_LEFT: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

/// One line of stdin, through the same reader as the card prompts, waiting at most
/// `timeout` (`None`: until a line or the end); `None` at the end of input or the timeout.
pub fn read_line(timeout: Option<std::time::Duration>) -> Option<String> {
    let deadline = std::time::Instant::now()
        + timeout.unwrap_or(std::time::Duration::from_secs(u32::MAX.into()));
    match read_line_until(deadline) {
        Read::Line(line) => Some(line),
        Read::End | Read::TimedOut => None,
    }
}

/// What reading an answer came to.
#[derive(Debug, PartialEq, Eq)]
enum Read {
    Line(String),
    /// End of input.
    End,
    /// Nothing by the deadline.
    TimedOut,
}

/// One line from stdin (a terminal or a pipe), waiting at most until `deadline`. Reads the
/// descriptor itself, polled, so nothing is left blocked on stdin after a deadline (the
/// chat's line editor reads it next).
fn read_line_until(deadline: std::time::Instant) -> Read {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut left = STDIN_LEFT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        if let Some(end) = left.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = left.drain(..=end).collect();
            return Read::Line(String::from_utf8_lossy(&line).trim().to_owned());
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return Read::TimedOut;
        }
        let wait = (deadline - now).min(std::time::Duration::from_millis(250));
        let timeout = Timespec {
            tv_sec: 0,
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        let stdin = rustix::stdio::stdin();
        let mut fds = [PollFd::from_borrowed_fd(stdin, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(_) => return Read::End,
        }
        let mut buffer = [0u8; 4096];
        match rustix::io::read(stdin, &mut buffer) {
            Ok(0) | Err(_) if left.is_empty() => return Read::End,
            // The last line, without its newline.
            Ok(0) | Err(_) => {
                let line = String::from_utf8_lossy(&left).trim().to_owned();
                left.clear();
                return Read::Line(line);
            }
            Ok(n) => left.extend_from_slice(&buffer[..n]),
        }
    }
}

/// The person's answer to a card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Once,
    Session,
    Always,
    No,
}

impl Answer {
    /// `y` / `s` / `a` / `n` and their words; `s` and `a` only when the card offers
    /// territory.
    fn parse(text: &str, territory: bool) -> Option<Answer> {
        match text.trim().to_lowercase().as_str() {
            "y" | "yes" | "si" | "sì" => Some(Answer::Once),
            "n" | "no" => Some(Answer::No),
            "s" | "session" | "sessione" if territory => Some(Answer::Session),
            "a" | "always" | "sempre" if territory => Some(Answer::Always),
            _ => None,
        }
    }

    fn resolution(self) -> (approval::Decision, approval::TerritoryConcession) {
        use approval::{Decision, TerritoryConcession as T};
        match self {
            Answer::Once => (Decision::Approve, T::None),
            Answer::Session => (Decision::Approve, T::Session),
            Answer::Always => (Decision::Approve, T::Permanent),
            Answer::No => (Decision::Reject, T::None),
        }
    }
}

/// The question under a card: y/n, or with territory y/s/a/n and the whole pattern.
fn prompt(language: metnos_core::Language, pattern: &str) -> String {
    use metnos_core::Language::{English, Italian};
    match (language, pattern.is_empty()) {
        (Italian, true) => "Approvi? [y/n] ".to_owned(),
        (English, true) => "Approve? [y/n] ".to_owned(),
        (Italian, false) => format!(
            "Approvi? [y] una volta · [s] per questa sessione · [a] sempre per {pattern} · [n] no: "
        ),
        (English, false) => format!(
            "Approve? [y] once · [s] for this session · [a] always for {pattern} · [n] no: "
        ),
    }
}

/// What the terminal says when an answer is not understood, when a reminder is due, and
/// when the request expired unanswered.
fn said(language: metnos_core::Language, what: Said) -> String {
    use metnos_core::Language::{English, Italian};
    match (language, what) {
        (Italian, Said::Again(true)) => "Rispondi y, s, a oppure n.".to_owned(),
        (English, Said::Again(true)) => "Please answer y, s, a or n.".to_owned(),
        (Italian, Said::Again(false)) => "Rispondi y oppure n.".to_owned(),
        (English, Said::Again(false)) => "Please answer y or n.".to_owned(),
        (Italian, Said::Reminder(minutes)) => {
            format!("⏳ La richiesta scade tra {minutes} min: se non rispondi, non lo faccio.")
        }
        (English, Said::Reminder(minutes)) => format!(
            "⏳ The request expires in {minutes} min: if you do not answer, I will not do it."
        ),
        (Italian, Said::EndOfInput) => {
            "metnos: nessuna risposta (fine dell'input): rifiutata".to_owned()
        }
        (English, Said::EndOfInput) => "metnos: no answer (end of input): rejected".to_owned(),
        (Italian, Said::Expired) => {
            "metnos: la richiesta è scaduta senza risposta: non lo faccio".to_owned()
        }
        (English, Said::Expired) => {
            "metnos: the request expired without an answer: I will not do it".to_owned()
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Said {
    Again(bool),
    Reminder(u64),
    Expired,
    EndOfInput,
}

/// What came of asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Answer(Answer),
    /// End of input: rejected.
    End,
    /// The request expired unanswered.
    Expired,
}

/// Asks until an answer, the end of input, or the request's expiry; one reminder
/// `remind_before` ahead of it.
async fn ask_answer(
    language: metnos_core::Language,
    pattern: String,
    expires_in: Option<std::time::Duration>,
    remind_before: std::time::Duration,
) -> Asked {
    tokio::task::spawn_blocking(move || {
        let start = std::time::Instant::now();
        // Without an expiry, a day is as long as anyone waits at a prompt.
        let expires = start + expires_in.unwrap_or(std::time::Duration::from_secs(86_400));
        let mut remind_at = (!remind_before.is_zero())
            .then(|| expires.checked_sub(remind_before))
            .flatten()
            .filter(|at| *at > start);
        let territory = !pattern.is_empty();
        loop {
            eprint!("{}", prompt(language, &pattern));
            let _ = std::io::stderr().flush();
            match read_line_until(remind_at.unwrap_or(expires)) {
                Read::Line(line) => match Answer::parse(&line, territory) {
                    Some(answer) => return Asked::Answer(answer),
                    None => eprintln!("{}", said(language, Said::Again(territory))),
                },
                Read::End => return Asked::End,
                Read::TimedOut if remind_at.is_some() => {
                    remind_at = None;
                    let left = expires.saturating_duration_since(std::time::Instant::now());
                    let minutes = left.as_secs().div_ceil(60).max(1);
                    eprintln!();
                    eprintln!("{}", said(language, Said::Reminder(minutes)));
                }
                Read::TimedOut => {
                    eprintln!();
                    return Asked::Expired;
                }
            }
        }
    })
    .await
    .unwrap_or(Asked::End)
}

/// What an approval conceded beyond the call, as the terminal says it.
fn conceded(
    pending: &approval::PendingApproval,
    language: metnos_core::Language,
) -> Option<String> {
    use metnos_core::territory::Concession;
    let concession = match pending
        .request
        .as_ref()
        .map(|r| approval::TerritoryConcession::try_from(r.territory_concession))
    {
        Some(Ok(approval::TerritoryConcession::Session)) => Concession::Session,
        Some(Ok(approval::TerritoryConcession::Permanent)) => Concession::Permanent,
        _ => return None,
    };
    Some(concession.said(language, &pending.territory_pattern))
}

/// The clients a turn from the terminal needs.
pub struct Session {
    pub(crate) planner: PlannerServiceClient<metnos_kit::client::TracedChannel>,
    pub(crate) approvals: ApprovalServiceClient<metnos_kit::client::TracedChannel>,
    pub(crate) url: String,
    pub(crate) approval_url: String,
    pub principal: common::Principal,
    /// How long before a card expires the terminal reminds (zero: never).
    remind_before: std::time::Duration,
    /// The non-retreat attempt the last turn's answer left open (issue 46): a stop as the
    /// next message is the attempt's.
    pub attempt: Option<pb::Attempt>,
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
            remind_before: std::time::Duration::from_secs(config.approval.remind_before_seconds),
            attempt: None,
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
        let (planner, approvals, url, approval_url, principal, remind_before) = (
            &mut self.planner,
            &mut self.approvals,
            &self.url,
            &self.approval_url,
            &self.principal,
            self.remind_before,
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
                Event::AwaitingApproval(a) => {
                    eprintln!();
                    for line in a.card.map(|c| c.lines).unwrap_or_default() {
                        eprintln!("  {}", terminal(&line));
                    }
                    // The pattern a session or "always" would grant, whole.
                    // Asked and answered in the turn's trace: one message, one trace.
                    let asked = approval::GetPendingRequest {
                        token: a.token.clone(),
                    };
                    let pattern = approvals
                        .get_pending(metnos_kit::propagation::in_trace(asked, &a.traceparent))
                        .await
                        .ok()
                        .and_then(|r| r.into_inner().approval)
                        .map(|p| p.territory_pattern)
                        .unwrap_or_default();
                    let expires_in = a.expires_at.map(|at| {
                        let ms = at.seconds * 1000 + i64::from(at.nanos / 1_000_000)
                            - metnos_kit::time::now_ms();
                        std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))
                    });
                    let answer =
                        match ask_answer(language, pattern, expires_in, remind_before).await {
                            Asked::Answer(answer) => answer,
                            Asked::End => {
                                eprintln!("{}", said(language, Said::EndOfInput));
                                Answer::No
                            }
                            Asked::Expired => {
                                // The planner ends the step and the turn goes on.
                                eprintln!("{}", said(language, Said::Expired));
                                spinner.resume();
                                continue;
                            }
                        };
                    let (decision, territory) = answer.resolution();
                    let resolve = approval::ResolveRequest {
                        token: a.token.clone(),
                        decision: decision as i32,
                        decider: Some(principal.clone()),
                        territory: territory as i32,
                        edited_pattern: String::new(),
                        edited_schedule: String::new(),
                    };
                    let resolve = metnos_kit::propagation::in_trace(resolve, &a.traceparent);
                    match approvals.resolve(resolve).await {
                        Ok(response) => {
                            if let Some(granted) = response.into_inner().approval
                                && let Some(line) = conceded(&granted, language)
                            {
                                eprintln!("  {line}");
                            }
                        }
                        Err(status) => {
                            if let Some(end) = resolve_refused(&status, language, approval_url) {
                                return end;
                            }
                        }
                    }
                }
                Event::Suspended(s) => {
                    eprintln!("metnos: turn {} waits for approval {}", s.turn_id, s.token);
                    return ExitCode::FAILURE;
                }
                Event::Finished(f) => {
                    drop(spinner);
                    self.attempt.clone_from(&f.attempt);
                    return finished(&f);
                }
                other => progress(other),
            }
            spinner.resume();
        }
    }
}

/// Prints one step of a turn's progress (what the planner proposed, what the filters and
/// the person decided, what came back); other events are the turn loop's.
fn progress(event: pb::turn_event::Event) {
    use pb::turn_event::Event;
    match event {
        Event::Started(s) => eprintln!("turn {} ({} tier, {})", s.turn_id, s.tier, s.model),
        Event::StepProposed(s) => {
            eprintln!(
                "step {}: {} {}",
                s.step,
                terminal(&s.executor),
                terminal(&s.args_json)
            )
        }
        Event::PolicyOutcome(p) => {
            let outcome = policy::Outcome::try_from(p.outcome)
                .map(|o| {
                    o.as_str_name()
                        .trim_start_matches("OUTCOME_")
                        .to_lowercase()
                })
                .unwrap_or_default();
            eprintln!("  policy: {outcome} ({})", terminal(&p.reason));
        }
        Event::Verdict(v) => {
            if let Some(v) = v.verdict {
                eprintln!("  vaglio: {}", terminal(&v.reason));
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
                terminal(&summary.replace('\n', " "))
            );
        }
        _ => {}
    }
}

/// How a finished turn ends the command: its answer on stdout, else why on stderr.
fn finished(f: &pb::TurnFinished) -> ExitCode {
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
        terminal(&f.text)
    );
    ExitCode::FAILURE
}

/// A resolve the approval service refused: told in the turn's language (expired while the
/// person thought, already decided elsewhere). `None`: the turn goes on (an expired request
/// goes on like an unanswered one); else how the command ends.
fn resolve_refused(
    status: &tonic::Status,
    language: metnos_core::Language,
    approval_url: &str,
) -> Option<ExitCode> {
    use metnos_core::resolve::ResolveRefusal;
    match status
        .metadata()
        .get(metnos_core::resolve::METADATA_KEY)
        .and_then(|v| v.to_str().ok())
        .and_then(ResolveRefusal::parse)
    {
        Some(ResolveRefusal::Expired) => {
            eprintln!("metnos: {}", ResolveRefusal::Expired.say(language));
            None
        }
        Some(refusal) => {
            eprintln!("metnos: {}", refusal.say(language));
            Some(ExitCode::FAILURE)
        }
        None => Some(failed(ServiceName::Approval, approval_url, status)),
    }
}

pub async fn ask(config: &Config, args: AskArgs) -> ExitCode {
    let mut session = match Session::connect(config) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let mut request = args.options.request(config, &session.principal, args.query);
    if args.continue_thread {
        request.thread = pb::Thread::Continue as i32;
    }
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
