//! `metnos`: the user's front door to Metnos. The commands live in the `metnos` library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use metnos::approvals_cli::{self, ApprovalsCommand};
use metnos::ask_cli::{self, AskArgs, TurnsCommand};
use metnos::audit_cli::{self, AuditCommand};
use metnos::chat_cli::{self, ChatArgs};
use metnos::conversations_cli::{self, ConversationsCommand};
use metnos::executors_cli::{self, ExecutorsCommand};
use metnos::mcp_cli::{self, McpCommand};
use metnos::memory_cli::{self, MemoryCommand};
use metnos::mnestome_cli::{self, MnestomeCommand};
use metnos::pair_cli::{self, PairCommand};
use metnos::pki_cli::{self, PkiCommand};
use metnos::policy_cli::{self, GrantsCommand, PolicyCommand};
use metnos::schedules_cli::{self, SchedulesCommand};
use metnos::telos_cli::{self, TelosCommand};
use metnos::vaglio_cli::{self, VaglioCommand};
use metnos::web_cli::{self, WebCommand};
use metnos::{status, up};
use metnos_kit::launch::EXIT_CONFIG;
use metnos_kit::{Config, ConfigSource};

#[derive(Debug, Parser)]
#[command(
    name = "metnos",
    version,
    about = "Metnos, a self-hosted personal agent"
)]
struct Cli {
    /// Config file (default: $METNOS_CONFIG, ./metnos.toml, ~/.config/metnos/metnos.toml).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start all five services in this process, on loopback, until Ctrl-C. Logs go to
    /// <data_dir>/logs (a file per day, 14 kept); stderr shows warnings and errors only.
    Up {
        /// Info lines on stderr too.
        #[arg(long)]
        verbose: bool,
    },
    /// Check what a first answer needs: config, LLM tiers, catalog, sandbox, ports,
    /// Telegram token, data directory, certificates; exit 1 on any fail.
    Doctor {
        /// One JSON object per check instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Show whether each service is SERVING; exit 0 only if all are.
    Status {
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The legality filter: registry, table, checks.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Persistent per-target grants: list, add, revoke, prune.
    Grants {
        #[command(subcommand)]
        command: GrantsCommand,
    },
    /// The constitutional evaluator: judge a call, read the verdict log.
    Vaglio {
        #[command(subcommand)]
        command: VaglioCommand,
    },
    /// The person's declared ends (TELOS.md): show, edit and sign, verify the chain,
    /// evaluate a proposal, the rejected journal, the never-list.
    Telos {
        #[command(subcommand)]
        command: TelosCommand,
    },
    /// Requests for approval: list, show.
    Approvals {
        #[command(subcommand)]
        command: ApprovalsCommand,
    },
    /// One turn: ask Metnos to do something, see its steps, answer its approval cards.
    Ask(AskArgs),
    /// Measure how well Metnos works with a model: a suite of tasks through a throwaway
    /// stack; a table on stderr, JSON lines on stdout, exit 1 below --min-pass.
    Eval(metnos::eval::EvalArgs),
    /// An interactive session: one request per line, history, cards answered inline.
    Chat(ChatArgs),
    /// Your conversations with Metnos (the threads a follow-up message sees): `forget`
    /// erases a person's.
    Conversations {
        #[command(subcommand)]
        command: ConversationsCommand,
    },
    /// What Metnos remembers for a person (memory_save): list, search, forget an entry.
    Memory {
        #[command(subcommand)]
        command: MemoryCommand,
    },
    /// Which tools Metnos has learned to chain (the mnestome): list, show, forget.
    Mnestome {
        #[command(subcommand)]
        command: MnestomeCommand,
    },
    /// The turn log: one turn, or a day's turns.
    Turns {
        #[command(subcommand)]
        command: TurnsCommand,
    },
    /// Standing orders and the scheduler's tasks: list, add your own, pause, resume,
    /// delete, fire now.
    Schedules {
        #[command(subcommand)]
        command: SchedulesCommand,
    },
    /// The tamper-evident records: `verify` walks the hash-chained turn and verdict logs.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// The owner's web page: `login` prints a one-time sign-in link.
    Web {
        #[command(subcommand)]
        command: WebCommand,
    },
    /// Who may talk to Metnos: approve pairing codes, list, change levels, revoke.
    Pair {
        #[command(subcommand)]
        command: PairCommand,
    },
    /// Executors: keys, signatures, the catalog, running one by hand.
    Executors {
        #[command(subcommand)]
        command: ExecutorsCommand,
    },
    /// Tools from MCP servers: add (admit and sign), list, review, disable, enable, remove.
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// The installation's CA and certificates (mutual TLS between every part).
    Pki {
        #[command(subcommand)]
        command: PkiCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&ConfigSource::from_env(cli.config)) {
        Ok(config) => config,
        // The doctor reports a config that does not load as its first check.
        Err(e) if matches!(cli.command, Command::Doctor { .. }) => {
            let Command::Doctor { json } = cli.command else {
                unreachable!("matched above")
            };
            return metnos::doctor::config_failed(&e, json);
        }
        Err(e) => {
            eprintln!("metnos: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    // The services run on runtimes of their own (`metnos up`); this one waits for them, or
    // runs one command's calls: one worker is enough.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("metnos: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Up { verbose } => up::up(config, verbose).await,
            Command::Status { json } => status::status(&config, json).await,
            Command::Doctor { json } => metnos::doctor::doctor(&config, json).await,
            Command::Policy { command } => policy_cli::policy(&config, command).await,
            Command::Grants { command } => policy_cli::grants(&config, command).await,
            Command::Vaglio { command } => vaglio_cli::vaglio(&config, command).await,
            Command::Telos { command } => telos_cli::telos(&config, command).await,
            Command::Approvals { command } => approvals_cli::approvals(&config, command).await,
            Command::Executors { command } => executors_cli::executors(&config, command).await,
            Command::Mcp { command } => mcp_cli::mcp(&config, command).await,
            Command::Ask(args) => ask_cli::ask(&config, args).await,
            Command::Eval(args) => metnos::eval::eval(&config, args).await,
            Command::Chat(args) => chat_cli::chat(&config, args).await,
            Command::Pair { command } => pair_cli::pair(&config, command).await,
            Command::Conversations { command } => {
                conversations_cli::conversations(&config, command).await
            }
            Command::Memory { command } => memory_cli::memory(&config, command).await,
            Command::Mnestome { command } => mnestome_cli::mnestome(&config, command).await,
            Command::Turns { command } => ask_cli::turns(&config, command).await,
            Command::Schedules { command } => schedules_cli::schedules(&config, command).await,
            Command::Audit { command } => audit_cli::audit(&config, command).await,
            Command::Web { command } => web_cli::web(&config, command).await,
            Command::Pki { command } => pki_cli::pki(&config, command),
        }
    })
}
