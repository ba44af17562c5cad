//! The box a `shell_exec` command runs in, and what it reports.
//!
//! Two processes of `metnos-shell` build it, so that every step is a plain call of ours and
//! nothing runs between a fork and an exec:
//! - the executor itself (the *outer*, single-threaded) enters new user, PID, network, IPC
//!   and mount namespaces ([`enter_namespaces`]); its own identity is mapped to root inside;
//! - it spawns `metnos-shell shell_exec_box` (the *init*): PID 1 of the new PID namespace,
//!   dead with the outer (parent-death signal), in a session of its own (no terminal). The
//!   init mounts a `/proc` of its own namespace where the host allows, limits CPU, memory,
//!   file size and processes, stops the command from making user
//!   namespaces of its own, takes every capability from it, sets no-new-privileges and
//!   enters the Landlock ruleset, reports what holds on its standard input (a socket to the
//!   outer), then waits there for the command, runs it and waits for it. When the init exits, the kernel kills
//!   whatever the command left in the namespace (`setsid` daemons included).
//!
//! The network namespace has only a loopback that is down, so nothing is reachable; Landlock
//! also refuses TCP bind and connect where the kernel's ABI handles them. Without namespaces
//! or without Landlock the command is refused, unless `executors.allow_unsandboxed` says to
//! run it anyway (and the report says so).

use std::io::{BufRead, Read};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

mod confine;
pub mod serve;

use confine::confine;
pub use confine::{granted_beneath, readable_roots};

/// The first argument that makes `metnos-shell` the box's init.
pub const BOX_ARG: &str = "shell_exec_box";

/// The environment variable carrying the [`Plan`] to the init.
const PLAN_VAR: &str = "METNOS_SHELL_BOX";

/// The namespaces every run gets.
pub const NAMESPACES: [&str; 5] = ["user", "pid", "net", "ipc", "mount"];

/// How much of a command's stderr is kept.
pub const STDERR_CAP: usize = 4096;

/// The lowest `pid_max` the kernel accepts for a PID namespace.
const PID_MAX_MIN: u64 = 301;

/// What a command may read besides the workspace and its home: the system's programs and
/// libraries, the parts of `/etc` programs read ([`ETC_READABLE`]), and the kernel's
/// process view (each process's own files: Landlock refuses a boxed process access to the
/// `/proc/<pid>` of any process outside its box). Nothing of the person's home, nothing
/// under `/var`, `/tmp` or `/run`, nothing else of `/etc`.
pub const SYSTEM_READABLE: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
];

/// What programs read in `/etc`: the loader's cache, users and groups (for names), the
/// clock's zone, name-service and locale settings, the alternatives' links, MIME and
/// magic tables, the CA certificates and OpenSSL's settings (Node.js reads them at start).
pub const ETC_READABLE: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "passwd",
    "group",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "host.conf",
    "hosts",
    "gai.conf",
    "services",
    "protocols",
    "locale.alias",
    "locale.conf",
    "alternatives",
    "mime.types",
    "magic",
    "magic.mime",
    "terminfo",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "os-release",
    "debian_version",
];

/// The devices a command may read (`/dev/null` it may also write).
const DEVICES: &[&str] = &["/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// How the init builds the box (in its environment when it starts).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Plan {
    /// The command's environment.
    pub env: Vec<(String, String)>,
    pub workspace: PathBuf,
    /// The per-run home: empty, the command's to write, removed afterwards.
    pub home: PathBuf,
    /// Folders the person lets commands read besides [`SYSTEM_READABLE`]
    /// (`executors.shell_readable`).
    #[serde(default)]
    pub readable: Vec<PathBuf>,
    /// Metnos's own folders, where credentials usually are and the system's secrets:
    /// neither readable nor writable, wherever a readable folder holds them (the workspace
    /// excepted).
    pub hidden: Vec<PathBuf>,
    pub limits: Limits,
    pub allow_unsandboxed: bool,
    /// Whether the outer entered the namespaces (the init is then PID 1 of its own).
    pub namespaces: bool,
    /// The outer's user id outside the namespaces (root is exempt from RLIMIT_NPROC).
    pub outer_uid: u32,
    /// A long-lived server ([`serve`]): the init reports on its standard error and runs
    /// this command at once with its own standard input and output (the server's
    /// protocol), instead of waiting for a command on its channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<Run>,
}

/// The command, sent to the init once the box is ready (one JSON line on its channel).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Run {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Inside the workspace.
    pub cwd: PathBuf,
}

/// The resource limits of one command (config `executors.shell_*`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct Limits {
    pub cpu_seconds: u64,
    pub memory_mb: u64,
    pub file_size_mb: u64,
    pub processes: u64,
}

/// What held a run: every `shell_exec` observation's `sandbox` metadata.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Protections {
    /// The namespaces the command ran in (`user`, `pid`, `net`, `ipc`), or none.
    pub namespaces: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces_error: Option<String>,
    /// `enforced`, `partially enforced` or `not enforced: <why>`.
    pub landlock: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_abi: Option<u32>,
    /// Landlock also refuses TCP bind and connect (ABI 4 and later).
    pub landlock_tcp: bool,
    /// Landlock also keeps signals and abstract sockets inside (ABI 6 and later).
    pub landlock_scoped: bool,
    /// No network: the command's network namespace has only a loopback that is down.
    pub network: bool,
    pub no_new_privs: bool,
    /// The command runs without capabilities (root inside, none of root's powers).
    pub no_capabilities: bool,
    /// The command cannot make user namespaces of its own.
    pub no_nested_user_namespaces: bool,
    /// How many processes the command may have at once, and by what.
    pub process_limit: String,
    /// Whether every process the command starts dies with it (its own PID namespace).
    pub tree_killed: bool,
    /// The command's `/proc` shows only the processes of its box (a `/proc` of its own
    /// PID namespace; where the host forbids mounting one, the host's, whose other
    /// processes' files Landlock still refuses).
    #[serde(default)]
    pub own_proc: bool,
    /// The command has no controlling terminal.
    pub no_terminal: bool,
    /// The command cannot open a Unix-domain socket (nor any socket but the network's, empty
    /// in its namespace, nor a datagram pair), io_uring or the kernel keyring: no path to
    /// the person's D-Bus, systemd, journald, ssh-agent, gpg-agent or Docker socket, which
    /// Landlock does not guard, nor to her session keys.
    #[serde(default)]
    pub no_local_sockets: bool,
}

impl Protections {
    /// Why the box is not a sandbox, when it is not: no namespaces, or no Landlock.
    pub fn missing(&self) -> Option<String> {
        if self.namespaces.is_empty() {
            let why = self.namespaces_error.as_deref().unwrap_or("not available");
            return Some(format!(
                "user, PID, network, IPC and mount namespaces cannot be created ({why})"
            ));
        }
        if !(self.landlock == "enforced" || self.landlock == "partially enforced") {
            return Some(format!("Landlock is {}", self.landlock));
        }
        if !self.no_local_sockets {
            return Some(
                "the seccomp filter refusing local sockets could not be installed".to_owned(),
            );
        }
        None
    }
}

/// The refusal when the box is not a sandbox.
pub fn refusal(missing: &str) -> String {
    format!(
        "shell_exec refused: no working sandbox on this host ({missing}); set executors.allow_unsandboxed = true to run commands without one"
    )
}

/// What the init tells the outer, one JSON line each.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Report {
    Ready(Protections),
    Refused(Protections),
    Failed(String),
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    Exited(i32),
    Signalled(i32),
    /// The budget ran out; the box was killed.
    TimedOut,
    /// The box is not a sandbox (and running without one is not allowed): nothing ran.
    Refused(String),
    /// The box could not be built or the command could not start.
    Failed(String),
    /// Only the box was built (the sandbox check).
    Checked,
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub protections: Protections,
    pub stdout: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr: Vec<u8>,
    pub end: End,
}

impl Outcome {
    fn before_spawn(protections: Protections, end: End) -> Outcome {
        Outcome {
            protections,
            stdout: Vec::new(),
            stdout_truncated: false,
            stderr: Vec::new(),
            end,
        }
    }
}

/// How long the init may take to build the box and say so.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// The most bytes of a command line the init reads.
const MAX_RUN_BYTES: u64 = 1024 * 1024;

/// A box built before its command is known: the init waits, confined, for one [`Run`].
/// Dropped without running, the init reads the end of its channel and exits.
#[derive(Debug)]
pub struct Prepared {
    protections: Protections,
    /// The init and its channel, or why there is no box to run in.
    state: Result<(Child, UnixStream), End>,
}

/// Builds the box of `plan`: enters the namespaces, starts the init and waits for its report.
/// Call once per process: the namespaces are entered by this process itself.
pub fn prepare(plan: Plan) -> Prepared {
    let mut plan = plan;
    let mut protections = Protections::default();
    let refused = |protections: Protections, end: End| Prepared {
        protections,
        state: Err(end),
    };
    match enter_namespaces() {
        Ok(()) => {
            plan.namespaces = true;
            protections.namespaces = NAMESPACES.map(str::to_owned).to_vec();
        }
        Err(why) => {
            protections.namespaces_error = Some(why.to_string());
            if !plan.allow_unsandboxed {
                let missing = protections.missing().unwrap_or_default();
                return refused(protections, End::Refused(refusal(&missing)));
            }
        }
    }
    // The command may not write a forged observation into this process's stdout through
    // /proc/<pid>/fd (after the maps: a non-dumpable process's /proc files are root's).
    keep_private();
    let (channel, init_end) = match UnixStream::pair() {
        Ok(pair) => pair,
        Err(e) => return refused(protections, End::Failed(format!("socketpair: {e}"))),
    };
    let plan_text = match serde_json::to_string(&plan) {
        Ok(text) => text,
        Err(e) => return refused(protections, End::Failed(format!("plan: {e}"))),
    };
    let spawned = Command::new(own_program())
        .arg(BOX_ARG)
        .env_clear()
        .env(PLAN_VAR, plan_text)
        .current_dir("/")
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(init_end)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut init = match spawned {
        Ok(child) => child,
        Err(e) => {
            return refused(
                protections,
                End::Failed(format!("the sandbox could not start: {e}")),
            );
        }
    };
    // The first report says whether the box holds.
    let first = read_line(&mut &channel, READY_WITHIN);
    let end = match first.as_deref().map(serde_json::from_slice::<Report>) {
        Some(Ok(Report::Ready(p))) => {
            merge(&mut protections, p);
            None
        }
        Some(Ok(Report::Refused(p))) => {
            merge(&mut protections, p);
            Some(End::Refused(refusal(
                &protections.missing().unwrap_or_default(),
            )))
        }
        Some(Ok(Report::Failed(why))) => Some(End::Failed(why)),
        Some(Ok(Report::Exited { .. })) | Some(Err(_)) => Some(End::Failed(
            "the sandbox sent a report out of turn".to_owned(),
        )),
        None => Some(End::Failed(format!(
            "the sandbox did not report within {} s",
            READY_WITHIN.as_secs()
        ))),
    };
    match end {
        None => Prepared {
            protections,
            state: Ok((init, channel)),
        },
        Some(end) => {
            let _ = init.kill();
            let _ = init.wait();
            refused(protections, end)
        }
    }
}

impl Prepared {
    /// What holds around a command run in this box.
    pub fn protections(&self) -> &Protections {
        &self.protections
    }

    /// Runs `run` in the box within `budget`, keeping at most `stdout_cap` bytes of its
    /// output; `None` only ends the box (the sandbox check).
    pub fn run(self, run: Option<&Run>, budget: Duration, stdout_cap: usize) -> Outcome {
        let mut protections = self.protections;
        let (mut init, mut channel) = match self.state {
            Ok(state) => state,
            Err(end) => return Outcome::before_spawn(protections, end),
        };
        let Some(run) = run else {
            drop(channel);
            let _ = init.wait();
            return Outcome::before_spawn(protections, End::Checked);
        };
        let sent = serde_json::to_vec(run).map(|mut line| {
            line.push(b'\n');
            line
        });
        if let Err(e) = sent
            .map_err(std::io::Error::other)
            .and_then(|line| std::io::Write::write_all(&mut channel, &line))
        {
            let _ = init.kill();
            let _ = init.wait();
            return Outcome::before_spawn(
                protections,
                End::Failed(format!("the sandbox did not take the command: {e}")),
            );
        }
        let streams = collect(&mut init, channel, budget, stdout_cap);
        let status = init.wait();
        let end = match (
            streams.timed_out,
            read_reports(&streams.report, &mut protections),
        ) {
            (true, _) => End::TimedOut,
            (false, Some(end)) => end,
            (false, None) => End::Failed(format!(
                "the sandbox ended without a report ({})",
                status.map_or_else(|e| e.to_string(), |s| s.to_string())
            )),
        };
        Outcome {
            protections,
            stdout: streams.stdout,
            stdout_truncated: streams.stdout_truncated,
            stderr: streams.stderr,
            end,
        }
    }
}

/// One line from `channel` within `wait` (without its newline); `None` at its end, on an
/// error, or when the time runs out. The init sends nothing after its first report until
/// it is sent the command, so nothing after the line is taken from the channel.
fn read_line<R: Read + std::os::fd::AsFd>(channel: &mut R, wait: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + wait;
    let mut line = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !wait_readable([Some(&*channel), None, None], left)[0] {
            return None;
        }
        match channel.read(&mut buffer) {
            Ok(0) | Err(_) => return None,
            Ok(n) => line.extend_from_slice(&buffer[..n]),
        }
        if let Some(end) = line.iter().position(|b| *b == b'\n') {
            line.truncate(end);
            return Some(line);
        }
        if line.len() > 64 * 1024 {
            return None;
        }
    }
}

/// How the run ended, by the init's reports (the last one that says), and what held.
fn read_reports(reports: &[u8], protections: &mut Protections) -> Option<End> {
    let mut end = None;
    for line in reports.split(|b| *b == b'\n') {
        let Ok(report) = serde_json::from_slice::<Report>(line) else {
            continue;
        };
        end = Some(match report {
            Report::Ready(p) => {
                merge(protections, p);
                End::Checked
            }
            Report::Refused(p) => {
                merge(protections, p);
                End::Refused(refusal(&protections.missing().unwrap_or_default()))
            }
            Report::Failed(why) => End::Failed(why),
            Report::Exited {
                code: Some(code), ..
            } => End::Exited(code),
            Report::Exited {
                code: None,
                signal: Some(signal),
            } => End::Signalled(signal),
            Report::Exited { .. } => End::Failed("the command ended without a status".into()),
        });
    }
    end
}

/// The init's findings, beside the outer's (the namespaces are the outer's to say).
fn merge(outer: &mut Protections, init: Protections) {
    *outer = Protections {
        namespaces: std::mem::take(&mut outer.namespaces),
        namespaces_error: outer.namespaces_error.take(),
        ..init
    };
}

/// This program, exactly the file this process runs.
fn own_program() -> PathBuf {
    if cfg!(target_os = "linux") {
        PathBuf::from("/proc/self/exe")
    } else {
        std::env::current_exe().unwrap_or_else(|_| PathBuf::from(super::PROGRAM))
    }
}

/// What was read from the init's three pipes.
struct Streams {
    stdout: Vec<u8>,
    stdout_truncated: bool,
    stderr: Vec<u8>,
    report: Vec<u8>,
    timed_out: bool,
}

/// A pipe being read into a capped buffer.
struct Source<R> {
    reader: Option<R>,
    kept: Vec<u8>,
    cap: usize,
    over: bool,
}

impl<R: Read> Source<R> {
    fn new(reader: Option<R>, cap: usize) -> Self {
        Source {
            reader,
            kept: Vec::new(),
            cap,
            over: false,
        }
    }

    /// Reads what is there (the pipe was ready); drops the reader at its end.
    fn read_some(&mut self) {
        let Some(reader) = self.reader.as_mut() else {
            return;
        };
        let mut buffer = [0u8; 16 * 1024];
        match reader.read(&mut buffer) {
            Ok(0) | Err(_) => self.reader = None,
            Ok(n) => {
                let room = self.cap.saturating_sub(self.kept.len());
                self.kept.extend_from_slice(&buffer[..n.min(room)]);
                self.over |= n > room;
            }
        }
    }
}

/// Reads stdout, stderr and the report until all three end (the init and everything in
/// its namespace are gone), killing the init when `budget` runs out. One thread: a process
/// that has entered a new PID namespace cannot start threads.
fn collect(init: &mut Child, report: UnixStream, budget: Duration, stdout_cap: usize) -> Streams {
    let mut stdout = Source::new(init.stdout.take(), stdout_cap);
    let mut stderr = Source::new(init.stderr.take(), STDERR_CAP);
    let mut report = Source::new(Some(report), 64 * 1024);
    let deadline = Instant::now() + budget;
    // Without a PID namespace a grandchild may hold the pipes open after the kill.
    let give_up = deadline + Duration::from_secs(1);
    let mut timed_out = false;
    while stdout.reader.is_some() || stderr.reader.is_some() || report.reader.is_some() {
        let now = Instant::now();
        if now >= deadline && !timed_out {
            let _ = init.kill();
            timed_out = true;
        }
        if now >= give_up {
            break;
        }
        let wait = if timed_out { give_up } else { deadline }.saturating_duration_since(now);
        let [out_ready, err_ready, report_ready] = wait_readable(
            [
                stdout.reader.as_ref().map(|r| r as &dyn std::os::fd::AsFd),
                stderr.reader.as_ref().map(|r| r as &dyn std::os::fd::AsFd),
                report.reader.as_ref().map(|r| r as &dyn std::os::fd::AsFd),
            ],
            wait,
        );
        if out_ready {
            stdout.read_some();
        }
        if err_ready {
            stderr.read_some();
        }
        if report_ready {
            report.read_some();
        }
    }
    Streams {
        stdout: stdout.kept,
        stdout_truncated: stdout.over,
        stderr: stderr.kept,
        report: report.kept,
        timed_out,
    }
}

/// Which of `fds` can be read (data or end) within `wait`.
fn wait_readable(fds: [Option<&dyn std::os::fd::AsFd>; 3], wait: Duration) -> [bool; 3] {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let borrowed: Vec<(usize, std::os::fd::BorrowedFd<'_>)> = fds
        .iter()
        .enumerate()
        .filter_map(|(i, fd)| fd.map(|fd| (i, fd.as_fd())))
        .collect();
    let mut polled: Vec<PollFd<'_>> = borrowed
        .iter()
        .map(|(_, fd)| PollFd::from_borrowed_fd(*fd, PollFlags::IN))
        .collect();
    let timeout = Timespec::try_from(wait).unwrap_or(Timespec {
        tv_sec: 1,
        tv_nsec: 0,
    });
    let mut ready = [false; 3];
    if poll(&mut polled, Some(&timeout)).is_err() {
        return ready;
    }
    for ((i, _), fd) in borrowed.iter().zip(&polled) {
        ready[*i] = !fd.revents().is_empty();
    }
    ready
}

/// Enters new user, PID, network, IPC and mount namespaces, this process's own user and group
/// mapped to root inside (so the init can set the namespaces' limits; the command gets no
/// capability). The process must be single-threaded.
/// Why the box's namespaces could not be entered.
#[derive(Debug, thiserror::Error)]
enum NamespaceError {
    #[cfg(target_os = "linux")]
    #[error("unshare: {0}")]
    Unshare(rustix::io::Errno),
    #[cfg(target_os = "linux")]
    #[error("{file}: {source}")]
    Map {
        file: &'static str,
        source: std::io::Error,
    },
    #[cfg(not(target_os = "linux"))]
    #[error("not available on this operating system")]
    Unavailable,
}

#[cfg(target_os = "linux")]
fn enter_namespaces() -> Result<(), NamespaceError> {
    use rustix::thread::UnshareFlags;
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    // `unshare` is deprecated for `unshare_unsafe` because CLONE_FILES can leave one
    // thread using descriptors of a table another thread no longer shares; these flags
    // touch no descriptor table, and this process has one thread.
    #[allow(deprecated)]
    rustix::thread::unshare(
        UnshareFlags::NEWUSER
            | UnshareFlags::NEWPID
            | UnshareFlags::NEWNET
            | UnshareFlags::NEWIPC
            | UnshareFlags::NEWNS,
    )
    .map_err(NamespaceError::Unshare)?;
    for (file, text) in [
        ("/proc/self/setgroups", "deny".to_owned()),
        ("/proc/self/uid_map", format!("0 {uid} 1")),
        ("/proc/self/gid_map", format!("0 {gid} 1")),
    ] {
        std::fs::write(file, text).map_err(|source| NamespaceError::Map { file, source })?;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn enter_namespaces() -> Result<(), NamespaceError> {
    Err(NamespaceError::Unavailable)
}

/// The init: builds the box, reports, waits for the command, runs it, reports how it
/// ended. Its standard input is its channel to the outer (a socket: reports out, the
/// command in); the plan is in its environment.
pub fn init_main() -> ExitCode {
    #[cfg(target_os = "linux")]
    {
        // Dead with the outer; should the outer be gone already, the first report fails.
        let _ =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    }
    // Nor a forged report or command into the channel through /proc/1/fd/0.
    keep_private();
    let plan: Plan = match std::env::var(PLAN_VAR)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
    {
        Ok(plan) => plan,
        Err(e) => {
            let _ = send(&Report::Failed(format!("the sandbox's plan: {e}")));
            return ExitCode::FAILURE;
        }
    };
    let protections = confine(&plan);
    let serving = plan.serve.is_some();
    let report = |report: &Report| {
        if serving {
            send_on(report, std::io::stderr())
        } else {
            send(report)
        }
    };
    if protections.missing().is_some() && !plan.allow_unsandboxed {
        let _ = report(&Report::Refused(protections));
        return ExitCode::SUCCESS;
    }
    if report(&Report::Ready(protections)).is_err() {
        return ExitCode::FAILURE;
    }
    if let Some(run) = &plan.serve {
        return serve::run_server(&plan, run);
    }
    // Then the command, once it is known; the end of the channel means none.
    let mut line = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_RUN_BYTES)
        .read_until(b'\n', &mut line);
    if read.is_err() || line.iter().all(u8::is_ascii_whitespace) {
        return ExitCode::SUCCESS;
    }
    let run: Run = match serde_json::from_slice(&line) {
        Ok(run) => run,
        Err(e) => {
            let _ = send(&Report::Failed(format!("the sandbox's command: {e}")));
            return ExitCode::FAILURE;
        }
    };
    let program = &run.program;
    let child = Command::new(program)
        .args(&run.args)
        .current_dir(&run.cwd)
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            let name = program.file_name().unwrap_or_default().to_string_lossy();
            let _ = send(&Report::Failed(format!("`{name}` could not start: {e}")));
            return ExitCode::FAILURE;
        }
    };
    let report = match child.wait() {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            Report::Exited {
                code: status.code(),
                signal: status.signal(),
            }
        }
        Err(e) => Report::Failed(format!("waiting for the command failed: {e}")),
    };
    let _ = send(&report);
    ExitCode::SUCCESS
}

/// Non-dumpable: no process of the same user without `CAP_SYS_PTRACE` (the command has no
/// capability) can open this one's `/proc/<pid>/fd`, memory or environment.
fn keep_private() {
    #[cfg(target_os = "linux")]
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
}

/// One report line on the pipe that is this process's standard input.
fn send(report: &Report) -> std::io::Result<()> {
    send_on(report, std::io::stdin())
}

/// One report line on `channel`.
fn send_on(report: &Report, channel: impl std::os::fd::AsFd) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(report).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut rest = line.as_slice();
    while !rest.is_empty() {
        let n = rustix::io::write(&channel, rest)?;
        rest = &rest[n..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::confine::kernel_at_least;
    use super::*;
    use std::path::Path;

    fn full() -> Protections {
        Protections {
            namespaces: NAMESPACES.map(str::to_owned).to_vec(),
            landlock: "enforced".to_owned(),
            no_local_sockets: true,
            ..Protections::default()
        }
    }

    #[test]
    fn a_box_without_namespaces_or_landlock_is_not_a_sandbox() {
        assert_eq!(full().missing(), None);
        let partial = Protections {
            landlock: "partially enforced".to_owned(),
            ..full()
        };
        assert_eq!(partial.missing(), None);
        let no_namespaces = Protections {
            namespaces: Vec::new(),
            namespaces_error: Some("unshare: Operation not permitted".to_owned()),
            ..full()
        };
        assert!(
            no_namespaces
                .missing()
                .unwrap()
                .contains("namespaces cannot be created (unshare: Operation not permitted)")
        );
        let no_landlock = Protections {
            landlock: "not enforced: this kernel has no Landlock".to_owned(),
            ..full()
        };
        assert!(
            no_landlock
                .missing()
                .unwrap()
                .contains("Landlock is not enforced")
        );
        let local_sockets = Protections {
            no_local_sockets: false,
            ..full()
        };
        assert!(local_sockets.missing().unwrap().contains("seccomp"));
        assert!(refusal("x").contains("executors.allow_unsandboxed = true"));
    }

    #[test]
    fn reports_travel_as_one_line_each() {
        for report in [
            Report::Ready(full()),
            Report::Exited {
                code: None,
                signal: Some(9),
            },
            Report::Failed("x".into()),
        ] {
            let text = serde_json::to_string(&report).unwrap();
            assert!(!text.contains('\n'));
            assert_eq!(serde_json::from_str::<Report>(&text).unwrap(), report);
        }
    }

    #[test]
    fn a_plan_and_its_command_travel_to_the_init_intact() {
        let run = Run {
            program: PathBuf::from("/usr/bin/true"),
            args: vec!["a\nb".into()],
            cwd: PathBuf::from("/w"),
        };
        let line = serde_json::to_string(&run).unwrap();
        assert!(!line.contains('\n'), "one line on the channel: {line}");
        assert_eq!(serde_json::from_str::<Run>(&line).unwrap(), run);
        let plan = Plan {
            env: vec![("HOME".into(), "/h".into())],
            workspace: PathBuf::from("/w"),
            home: PathBuf::from("/h"),
            readable: vec![PathBuf::from("/srv/music")],
            hidden: vec![PathBuf::from("/srv/music/.keys")],
            limits: Limits::default(),
            allow_unsandboxed: false,
            namespaces: true,
            outer_uid: 0,
            serve: None,
        };
        let text = serde_json::to_string(&plan).unwrap();
        assert_eq!(serde_json::from_str::<Plan>(&text).unwrap(), plan);
    }

    #[test]
    fn a_hidden_folder_inside_another_hides_nothing_less() {
        // Production hides the data directory and the certificates' folder inside it.
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("metnos");
        let pki = data.join("pki");
        for dir in [data.join("keys"), data.join("workspace"), pki.clone()] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(data.join("planner.db"), "").unwrap();
        std::fs::write(root.path().join("notes.txt"), "").unwrap();
        let base = [root.path().to_path_buf()];
        for hidden in [
            vec![data.clone(), pki.clone()],
            vec![pki.clone(), data.clone()],
        ] {
            let roots = granted_beneath(&base, &hidden);
            let granted_inside: Vec<_> = roots.iter().filter(|r| r.starts_with(&data)).collect();
            assert!(
                granted_inside.is_empty(),
                "{hidden:?} grants {granted_inside:?}"
            );
            assert!(roots.contains(&root.path().join("notes.txt")), "{roots:?}");
        }
        // The certificates alone: the rest of the data directory stays readable.
        let roots = granted_beneath(&base, std::slice::from_ref(&pki));
        assert!(roots.contains(&data.join("keys")), "{roots:?}");
        assert!(!roots.iter().any(|r| r.starts_with(&pki)), "{roots:?}");
        // A readable folder inside a hidden one is not granted; one beside it is, whole.
        let roots = granted_beneath(
            &[data.join("keys"), root.path().join("notes.txt")],
            std::slice::from_ref(&data),
        );
        assert_eq!(roots, vec![root.path().join("notes.txt")]);
    }

    #[test]
    fn a_command_reads_the_system_s_folders_and_what_the_person_added_only() {
        let home = tempfile::tempdir().unwrap();
        let music = home.path().join("music");
        std::fs::create_dir_all(music.join(".keys")).unwrap();
        std::fs::write(music.join("a.flac"), "").unwrap();
        let plan = Plan {
            env: Vec::new(),
            workspace: PathBuf::from("/w"),
            home: PathBuf::from("/h"),
            readable: vec![music.clone()],
            hidden: metnos_core::forbidden::usual_places(home.path())
                .into_iter()
                .chain([music.join(".keys"), PathBuf::from("/etc/metnos")])
                .collect(),
            limits: Limits::default(),
            allow_unsandboxed: false,
            namespaces: true,
            outer_uid: 0,
            serve: None,
        };
        let roots = readable_roots(&plan);
        for whole in ["/usr", "/bin", "/proc"] {
            assert!(roots.contains(&PathBuf::from(whole)), "{whole}: {roots:?}");
        }
        // Of /etc, what programs read.
        assert!(!roots.contains(&PathBuf::from("/etc")), "{roots:?}");
        assert!(roots.contains(&PathBuf::from("/etc/passwd")), "{roots:?}");
        assert!(
            roots.contains(&PathBuf::from("/etc/ld.so.cache")),
            "{roots:?}"
        );
        for secret in ["/etc/shadow", "/etc/gshadow", "/etc/ssh", "/etc/metnos"] {
            assert!(
                !roots.iter().any(|r| r.starts_with(secret)),
                "{secret}: {roots:?}"
            );
        }
        assert!(roots.contains(&music.join("a.flac")), "{roots:?}");
        assert!(!roots.iter().any(|r| r.starts_with(music.join(".keys"))));
        // Nothing else of the machine: no home, no /var, no /tmp, no /.
        let outside: Vec<_> = roots
            .iter()
            .filter(|r| {
                !r.starts_with(&music)
                    && !SYSTEM_READABLE.iter().any(|base| r.starts_with(base))
                    && !ETC_READABLE
                        .iter()
                        .any(|e| r.starts_with(Path::new("/etc").join(e)))
            })
            .collect();
        assert!(outside.is_empty(), "{outside:?}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn kernel_versions_compare_by_major_then_minor() {
        assert!(kernel_at_least(2, 6));
        assert!(!kernel_at_least(999, 0));
    }
}
