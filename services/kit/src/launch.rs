//! The `main` of every service binary: flags, config, telemetry, bind, serve, exit code.

use std::fmt::Display;
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tokio::net::TcpListener;

use crate::client;
use crate::config::{Config, ConfigSource, ServiceName};
use crate::runtime::ShutdownFuture;
use crate::server;
use crate::telemetry::Telemetry;

/// Flags shared by every `metnos-<service>` binary.
#[derive(Debug, Parser)]
struct ServiceArgs {
    /// Config file (default: $METNOS_CONFIG, ./metnos.toml, ~/.config/metnos/metnos.toml).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Ask the configured instance of this service whether it is SERVING, and exit 0 if
    /// so, 1 if not (for container health checks).
    #[arg(long)]
    health_check: bool,
}

/// Exit code for an unusable configuration.
pub const EXIT_CONFIG: u8 = 2;

/// Runs a service binary: loads the config (a bad value exits 2 before anything binds),
/// sets up telemetry, binds the listen address, runs `serve` until SIGTERM/SIGINT, flushes
/// traces. Fatal errors are printed as one line and exit 1.
pub fn run_service<F, Fut, E>(service: ServiceName, serve: F) -> ExitCode
where
    F: FnOnce(Config, TcpListener, ShutdownFuture) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let args = ServiceArgs::parse();
    let name = service.binary();
    if let Err(e) = keep_memory_private() {
        eprintln!("{name}: cannot make this process non-dumpable: {e}");
        return ExitCode::FAILURE;
    }
    let config = match Config::load(&ConfigSource::from_env(args.config)) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        if args.health_check {
            return health_check(service, &config).await;
        }
        let telemetry = match Telemetry::new(name, &config.telemetry) {
            Ok(telemetry) => telemetry,
            Err(e) => {
                eprintln!("{name}: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        };
        if let Err(e) = telemetry.install_global() {
            eprintln!("{name}: cannot install logging: {e}");
            return ExitCode::FAILURE;
        }
        let listener = match server::bind(service, config.service(service).listen).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("{name}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let result = serve(config, listener, Box::pin(server::shutdown_signal())).await;
        telemetry.shutdown().await;
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{name}: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0): no other process of the same
/// user — a command an executor runs, say — may read its memory or its
/// `/proc/<pid>/environ` (where secrets such as API tokens are), or attach to it; only
/// a process with `CAP_SYS_PTRACE` in the machine's first user namespace may, and the
/// shell's sandbox has none. Every long-running Metnos process calls it first.
pub fn keep_memory_private() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)?;
    Ok(())
}

async fn health_check(service: ServiceName, config: &Config) -> ExitCode {
    let url = config.service_url(service);
    // The service asks itself, with its own certificate.
    let identity = crate::tls::Identity::of(service);
    let tls = match crate::tls::Tls::load(config, identity) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("{}: {e}", service.binary());
            return ExitCode::FAILURE;
        }
    };
    let channel = match client::channel(&tls, identity, &url) {
        Ok(channel) => channel,
        Err(e) => {
            eprintln!("{}: {e}", service.binary());
            return ExitCode::FAILURE;
        }
    };
    match client::probe(channel, service.grpc_name(), Duration::from_secs(3)).await {
        client::Health::Serving => {
            println!("{service} {url} SERVING");
            ExitCode::SUCCESS
        }
        client::Health::NotServing(why) | client::Health::Unreachable(why) => {
            println!("{service} {url} NOT_SERVING ({why})");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_os = "linux")]
    #[test]
    fn a_metnos_process_is_not_dumpable() {
        use rustix::process::{DumpableBehavior, dumpable_behavior};
        super::keep_memory_private().unwrap();
        assert_eq!(dumpable_behavior().unwrap(), DumpableBehavior::NotDumpable);
    }
}
