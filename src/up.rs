//! `metnos up`: the whole stack in one process, each service a gRPC server on its own
//! loopback port and its own runtime, SQLite stores under the data directory.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use metnos_kit::client::{self, EndpointError, Health};
use metnos_kit::config::{SERVICES, url_for_addr};
use metnos_kit::launch::EXIT_CONFIG;
use metnos_kit::runtime::{ServiceThread, ShutdownFuture, spawn_service};
use metnos_kit::server::{StartError, bind_std, shutdown_signal};
use metnos_kit::telemetry::{Telemetry, UpLogs};
use metnos_kit::tls::{Identity, Tls};
use metnos_kit::{Config, ServiceName};
use metnos_llm::check::TierCheck;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::runfile::RunFile;

/// Where each service really listens: its address, and the URL callers use.
type Urls = BTreeMap<ServiceName, (SocketAddr, String)>;

/// The services started so far, each with the telemetry it logs through.
type Running = Vec<(ServiceThread, Telemetry)>;

/// Why one service's runtime ended with an error.
#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error("{service}: {source}")]
    Listener {
        service: ServiceName,
        source: std::io::Error,
    },
    #[error(transparent)]
    Start(#[from] StartError),
}

/// Why the stack did not come up serving.
#[derive(Debug, thiserror::Error)]
enum ReadyError {
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// A service stopped first: what [`first_exit`] says.
    #[error("{0}")]
    Stopped(String),
    #[error("services not serving after {} s", .0.as_secs())]
    Timeout(Duration),
}

/// Runs the stack until SIGINT/SIGTERM. Exit 0 on a clean stop, 1 when a service failed
/// to start or stopped on its own, 2 for an unusable configuration.
pub async fn up(config: Config, verbose: bool) -> ExitCode {
    // One subscriber for the process: the command's logs and each service's, and the
    // export under each service's name; a log file per day, stderr for warnings.
    let logs = UpLogs {
        dir: config.data_dir.join(metnos_kit::datadir::LOGS_DIR),
        verbose,
    };
    let (_command_telemetry, mut telemetries) = match start_telemetry(&config, &logs) {
        Ok(started) => started,
        Err(code) => return code,
    };
    if let Err(code) = preflight(&config) {
        return code;
    }
    let owner = match set_up(&config) {
        Ok(owner) => owner,
        Err(code) => return code,
    };

    // Each LLM tier checked while the services start: one line each once they serve.
    let tiers = tokio::spawn({
        let llm = config.runtime.llm.clone();
        async move { metnos_llm::check::check_tiers(&llm, metnos_llm::check::QUICK_TIMEOUT).await }
    });

    let (listeners, urls) = match bind_all(&config) {
        Ok(bound) => bound,
        Err(code) => return code,
    };
    let mut running = match start_all(&config, listeners, &urls, &mut telemetries).await {
        Ok(running) => running,
        Err(code) => return code,
    };

    let ready_timeout = config.server.store_connect_timeout() + Duration::from_secs(10);
    if let Err(e) = wait_ready(&owner, &mut running, &urls, ready_timeout).await {
        return fail(running, ExitCode::FAILURE, format!("metnos up: {e}")).await;
    }

    // Before anyone is told the stack is up: a Ctrl-C right after must stop it cleanly.
    let stop = shutdown_signal();
    let run = RunFile::this_process(
        urls.iter()
            .map(|(s, (_, url))| (s.as_str().to_owned(), url.clone()))
            .collect(),
    );
    if let Err(e) = run.write(&config.data_dir) {
        return fail(
            running,
            ExitCode::FAILURE,
            format!("metnos up: cannot write the run file: {e}"),
        )
        .await;
    }
    announce(&config, &urls, tiers, &logs).await;
    tracing::info!(data_dir = %config.data_dir.display(), "metnos is up; Ctrl-C stops it");

    let failed = tokio::select! {
        () = stop => None,
        failed = first_exit(&mut running) => Some(failed),
    };
    RunFile::remove(&config.data_dir);
    match failed {
        None => stop_all(running, ExitCode::SUCCESS).await,
        Some(failed) => fail(running, ExitCode::FAILURE, format!("metnos up: {failed}")).await,
    }
}

/// The process's one log subscriber, installed as its default (SQLite's worker threads
/// close the services' spans through it), and each service's telemetry. The first is
/// kept alive by the caller until the stack stops.
fn start_telemetry(
    config: &Config,
    logs: &UpLogs,
) -> Result<(Telemetry, BTreeMap<ServiceName, Telemetry>), ExitCode> {
    let (command_telemetry, telemetries) =
        match Telemetry::for_up("metnos", &SERVICES, &config.telemetry, logs) {
            Ok(telemetries) => telemetries,
            Err(e) => {
                eprintln!("metnos up: {e}");
                return Err(ExitCode::from(EXIT_CONFIG));
            }
        };
    if let Err(e) = command_telemetry.install_global() {
        eprintln!("metnos up: cannot install the process's log subscriber: {e}");
        return Err(ExitCode::FAILURE);
    }
    let telemetries = SERVICES.into_iter().zip(telemetries).collect();
    Ok((command_telemetry, telemetries))
}

/// What must hold before anything is set up: memory kept private, distinct listen
/// addresses, no stack already running on the data directory, which exists.
fn preflight(config: &Config) -> Result<(), ExitCode> {
    if let Err(e) = metnos_kit::launch::keep_memory_private() {
        eprintln!("metnos up: cannot make this process non-dumpable: {e}");
        return Err(ExitCode::FAILURE);
    }
    if let Err(e) = config.check_distinct_listen() {
        eprintln!("metnos up: {e}");
        return Err(ExitCode::from(EXIT_CONFIG));
    }
    if let Some(run) = RunFile::read_live(&config.data_dir) {
        eprintln!(
            "metnos up: already running as pid {} with data directory {}",
            run.pid,
            config.data_dir.display()
        );
        return Err(ExitCode::FAILURE);
    }
    if let Err(e) = metnos_kit::datadir::create_dir_all(&config.data_dir) {
        eprintln!(
            "metnos up: cannot create the data directory {}: {e}",
            config.data_dir.display()
        );
        return Err(ExitCode::FAILURE);
    }
    Ok(())
}

/// The first run sets up what the person need not decide: the installation's CA and
/// certificates (unless a mesh's are configured), the owner's signing key, the built-in
/// executors installed, signed and trusted; a later run re-signs the built-ins after an
/// upgrade. Then the owner's certificate, which is what waiting for the services presents.
fn set_up(config: &Config) -> Result<Tls, ExitCode> {
    match crate::setup::first_run(config, crate::setup::this_installation()) {
        Ok(notes) => {
            for note in notes.0 {
                eprintln!("metnos up: {note}");
            }
        }
        Err(e) => {
            eprintln!("metnos up: {e}");
            return Err(ExitCode::FAILURE);
        }
    }
    Tls::load(config, Identity::Owner).map_err(|e| {
        eprintln!("metnos up: the owner's certificate: {e}");
        ExitCode::FAILURE
    })
}

/// Binds every service first, so that a port in use fails before any service starts, and
/// reads where each really listens (ports may be 0 in the config).
fn bind_all(
    config: &Config,
) -> Result<(Vec<(ServiceName, std::net::TcpListener)>, Urls), ExitCode> {
    let mut listeners = Vec::new();
    for service in SERVICES {
        match bind_std(service, config.service(service).listen) {
            Ok(listener) => listeners.push((service, listener)),
            Err(e) => {
                eprintln!("metnos up: {e}");
                return Err(ExitCode::FAILURE);
            }
        }
    }
    let mut urls = BTreeMap::new();
    for (service, listener) in &listeners {
        match listener.local_addr() {
            Ok(addr) => urls.insert(*service, (addr, url_for_addr(addr))),
            Err(e) => {
                eprintln!("metnos up: {service}: {e}");
                return Err(ExitCode::FAILURE);
            }
        };
    }
    Ok((listeners, urls))
}

/// Starts each service on its listener, told where the others really listen; on a
/// failure, stops those already started and says why.
async fn start_all(
    config: &Config,
    listeners: Vec<(ServiceName, std::net::TcpListener)>,
    urls: &Urls,
    telemetries: &mut BTreeMap<ServiceName, Telemetry>,
) -> Result<Running, ExitCode> {
    let mut service_config = config.clone();
    for (service, (_, url)) in urls {
        service_config.set_service_url(*service, url.clone());
    }
    let mut running: Running = Vec::new();
    for (service, listener) in listeners {
        let Some(telemetry) = telemetries.remove(&service) else {
            continue;
        };
        if service == ServiceName::Vaglio {
            // Only the vaglio exports metrics so far; the process-wide meter provider
            // carries its name.
            telemetry.install_global_meters();
        }
        let thread = spawn(service, service_config.clone(), listener, &telemetry);
        match thread {
            Ok(thread) => running.push((thread, telemetry)),
            Err(e) => {
                return Err(fail(
                    running,
                    ExitCode::FAILURE,
                    format!("metnos up: {service}: cannot start its runtime: {e}"),
                )
                .await);
            }
        }
    }
    Ok(running)
}

/// Tells whoever listens on stdout where each service is, how each LLM tier answered, and
/// that the stack is ready. A closed stdout must not stop the stack.
async fn announce(config: &Config, urls: &Urls, tiers: JoinHandle<Vec<TierCheck>>, logs: &UpLogs) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for (service, (addr, _)) in urls {
        let _ = writeln!(out, "{service} {addr}");
    }
    let _ = out.flush();
    for check in tiers.await.unwrap_or_default() {
        match check.fix() {
            Some(fix) => {
                let _ = writeln!(out, "{} — {fix}", check.line());
            }
            None => {
                let _ = writeln!(out, "{}", check.line());
            }
        }
    }
    let telegram = match metnos_gateway::bot_token(config) {
        Ok(Some(_)) => "Telegram on",
        _ => "Telegram off (no bot token)",
    };
    let _ = writeln!(
        out,
        "ready: {telegram}; logs in {}; try: metnos ask \"what time is it\"",
        logs.dir.display()
    );
    let _ = out.flush();
}

/// Starts one service on a runtime of its own that logs and traces through `telemetry`,
/// serving on `listener` (bound with [`metnos_kit::server::bind_std`]).
pub fn spawn(
    service: ServiceName,
    config: Config,
    listener: std::net::TcpListener,
    telemetry: &Telemetry,
) -> std::io::Result<ServiceThread> {
    spawn_service(
        service,
        telemetry.dispatch().clone(),
        metnos_kit::runtime::workers(service, metnos_kit::runtime::cores()),
        move |shutdown| run_one(service, config, listener, shutdown),
    )
}

async fn run_one(
    service: ServiceName,
    config: Config,
    listener: std::net::TcpListener,
    shutdown: ShutdownFuture,
) -> Result<(), RunError> {
    let listener =
        TcpListener::from_std(listener).map_err(|source| RunError::Listener { service, source })?;
    let result = match service {
        ServiceName::Policy => metnos_policy::serve(config, listener, shutdown).await,
        ServiceName::Vaglio => metnos_vaglio::serve(config, listener, shutdown).await,
        ServiceName::Approval => metnos_approval::serve(config, listener, shutdown).await,
        ServiceName::Planner => metnos_planner::serve(config, listener, shutdown).await,
        ServiceName::Gateway => metnos_gateway::serve(config, listener, shutdown).await,
    };
    Ok(result?)
}

/// Waits until every service reports SERVING, or one of them stops (its error is the
/// answer), or `timeout` passes.
async fn wait_ready(
    owner: &Tls,
    running: &mut [(ServiceThread, Telemetry)],
    urls: &Urls,
    timeout: Duration,
) -> Result<(), ReadyError> {
    // Every service asked side by side, each again 5 ms after an answer other than
    // SERVING: the stack is up when the slowest is, not after the sum of their waits.
    let probes = urls.iter().map(|(service, (_, url))| async move {
        let channel = client::channel(owner, Identity::of(*service), url)?;
        loop {
            let health =
                client::probe(channel.clone(), service.grpc_name(), Duration::from_secs(1)).await;
            if health == Health::Serving {
                return Ok::<(), ReadyError>(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let all_serving = async { futures::future::try_join_all(probes).await.map(drop) };
    tokio::select! {
        result = all_serving => result,
        failed = first_exit(running) => Err(ReadyError::Stopped(failed)),
        () = tokio::time::sleep(timeout) => Err(ReadyError::Timeout(timeout)),
    }
}

/// Resolves with a message when any service stops (with its error, if it had one).
async fn first_exit(running: &mut [(ServiceThread, Telemetry)]) -> String {
    let exits = running.iter_mut().map(|(thread, _)| {
        Box::pin(async move {
            let service = thread.service();
            match thread.finished().await {
                Ok(()) => format!("{service} stopped unexpectedly"),
                Err(e) => e,
            }
        })
    });
    futures::future::select_all(exits).await.0
}

/// Stops what runs, then prints `message` as the last line a person sees.
async fn fail(running: Running, code: ExitCode, message: String) -> ExitCode {
    stop_all(running, code).await;
    eprintln!("{message}");
    code
}

/// Stops services in reverse start order (callers before callees), then flushes every
/// service's traces at once: a collector that does not answer costs one flush timeout, not
/// one per service.
async fn stop_all(running: Running, code: ExitCode) -> ExitCode {
    let mut code = code;
    let mut telemetries = Vec::with_capacity(running.len());
    for (thread, telemetry) in running.into_iter().rev() {
        let service = thread.service();
        if let Err(e) = thread.stop().await {
            // A service that already failed reports its error through `code`.
            tracing::warn!(%service, error = %e, "service stopped with an error");
            code = ExitCode::FAILURE;
        }
        telemetries.push(telemetry);
    }
    futures::future::join_all(telemetries.into_iter().map(Telemetry::shutdown)).await;
    code
}
