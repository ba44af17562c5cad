//! The Metnos planner service: the turn loop (seed agent_runtime.md). An LLM proposes
//! tool calls; each passes its references, schema and scope, policy, vaglio and — when
//! policy asks — a person's approval, then a signed executor runs it.
//!
//! Layout (no module imports one that imports it back):
//! - [`turn`]: the turn loop — its state, pure rules, the [`turn::Planner`] that drives it
//!   and the stages it owns (vetting, suspension, execution);
//! - [`proactive`]: what Metnos does on its own — the scheduler, its jobs, proposals, the
//!   digest, standing orders, sessions; it reaches the loop only through a port;
//! - ports to the outside: [`filters`] (policy, vaglio, approval) and [`llm`] (real
//!   clients, or fakes in tests); [`store`]: turns, the scratchpad, the scheduler's
//!   tables and each person's conversation threads (`store::threads`), SQLite or
//!   PostgreSQL; [`turnlog`]: the daily JSONL turn log (no values, no
//!   message text);
//! - [`grpc`]: the contract's edge, [`error`]: its errors and their statuses.

use std::sync::Arc;
use std::time::Duration;

use metnos_executors::signing::Trust;
use metnos_executors::{Catalog, Runner, ShellSettings};
use metnos_kit::server::{StartError, Startup};
use metnos_kit::{Config, ServiceName, ShutdownFuture};
use metnos_proto::planner::v1::planner_service_server::PlannerServiceServer;
use tokio::net::TcpListener;

pub mod error;
pub mod filters;
pub mod grpc;
mod grpc_memory;
mod grpc_mnestome;
pub mod llm;
pub mod proactive;
pub use metnos_kit::schedule;
pub mod store;
pub mod turn;
pub mod turnlog;

use grpc::PlannerApi;
use proactive::{digest, jobs as maintenance, proposals, scheduler, standing};
use turn::engine::{self, Planner};

/// This service.
pub const SERVICE: ServiceName = ServiceName::Planner;

pub use store::MIGRATIONS;

/// The runner as config describes it.
pub fn runner_from_config(config: &Config) -> Runner {
    let e = &config.executors;
    Runner {
        // Metnos's own files: its data directory (but the shell's workspace in it), its
        // certificates, catalog, configuration and keys, wherever they are.
        forbidden: config.own_paths(),
        user_home: config.runtime.user_home.clone(),
        program_dirs: config.runtime.user_path.clone(),
        local_hosts: e.local_hosts.clone(),
        shell: ShellSettings {
            allow: e.shell_allow.clone(),
            workspace: e.workspace.clone(),
            cpu_seconds: e.shell_cpu_seconds.get(),
            memory_mb: e.shell_memory_mb.get(),
            file_size_mb: e.shell_file_size_mb.get(),
            processes: e.shell_processes.get(),
            allow_unsandboxed: e.allow_unsandboxed,
            readable: e.shell_readable.clone(),
        },
        prestart: e.prestart,
        waiting: Default::default(),
        mcp_dir: config.data_dir.join("mcp"),
        mcp: Default::default(),
        accounts: Arc::new(config.accounts()),
    }
}

/// The health name of `shell_exec`'s sandbox: SERVING when it can be built on this host
/// (or no shell_exec is installed), NOT_SERVING when shell_exec would refuse every command
/// or run it unboxed. The planner serves either way; `metnos status` says so on its row.
pub const SANDBOX_HEALTH: &str = "metnos.planner.v1.PlannerService.sandbox";

/// Says at start-up whether `shell_exec`'s sandbox can be built on this host, in the log
/// and in health ([`SANDBOX_HEALTH`]).
async fn log_shell_sandbox(
    runner: Runner,
    catalog: Arc<Catalog>,
    readiness: metnos_kit::readiness::Readiness,
) {
    if catalog.get(metnos_executors::runner::SHELL_EXEC).is_none() {
        readiness.set_component(SANDBOX_HEALTH, true).await;
        return;
    }
    let observation = runner.check_shell_sandbox(&catalog).await;
    let meta = |key: &str| {
        observation
            .metadata
            .as_ref()
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or_default()
    };
    let sandbox = meta("sandbox");
    let available = observation.ok && meta("available").as_bool() == Some(true);
    readiness.set_component(SANDBOX_HEALTH, available).await;
    match (observation.ok, meta("available").as_bool()) {
        (true, Some(true)) => tracing::info!(%sandbox, "the shell's sandbox is available"),
        (true, _) => tracing::warn!(
            %sandbox,
            "the shell's sandbox is not available: shell_exec runs commands without it (executors.allow_unsandboxed)"
        ),
        (false, _) => tracing::warn!(
            %sandbox,
            error = observation.error.as_deref().unwrap_or(""),
            "the shell's sandbox is not available: shell_exec refuses every command"
        ),
    }
}

/// This replica's name in the turns it holds: the host, where the planner listens and its
/// data directory — the same after a restart (so a restarted replica frees at once the
/// turns its previous process held), different for every other replica.
pub fn replica_name(config: &Config) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned());
    format!(
        "{host}|{}|{}",
        config.service(SERVICE).listen,
        config.data_dir.display()
    )
}

/// Serves the planner service on `listener` until `shutdown` resolves.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownFuture,
) -> Result<(), StartError> {
    let settings = |message: String| StartError::Settings {
        service: SERVICE,
        message,
    };
    let trust = Trust::load(&config.executors.trusted_keys, &config.executors.trust_file)
        .map_err(|e| settings(format!("executors: {e}")))?;
    let record = config.data_dir.join(metnos_kit::datadir::PROGRAM_DIGESTS);
    let catalog = Arc::new(Catalog::load_with_record(
        &config.executors.catalog_dir,
        &trust,
        Some(&record),
    ));
    let llm = metnos_llm::Tiers::from_config(&config.runtime.llm)
        .map(|tiers| Arc::new(tiers) as Arc<dyn llm::Llm>)
        .map_err(|e| llm::NoLlm(e.to_string()));
    if let Err(e) = &llm {
        tracing::warn!(error = %e, "no usable LLM: every turn will end with this error");
    }
    let filter_urls = [
        config.service_url(ServiceName::Policy),
        config.service_url(ServiceName::Vaglio),
        config.service_url(ServiceName::Approval),
        config.service_url(ServiceName::Gateway),
    ];
    let runner = runner_from_config(&config);
    if config.executors.allow_unsandboxed {
        tracing::warn!(
            "executors.allow_unsandboxed is set: where the shell's sandbox cannot be built, shell_exec runs commands without it"
        );
    }
    let replica = replica_name(&config);
    let sweep_every = Duration::from_secs(config.approval.sweep_interval_seconds.get());
    let shared = config.clone();
    Startup::new(SERVICE, &MIGRATIONS, &grpc::AUTHORIZATION, &config)
        .serve_with_store(listener, shutdown, move |running| {
            let filters = filters::GrpcFilters::connect(running.tls, &filter_urls)
                .map_err(|e| settings(e.to_string()))?;
            let filters: Arc<dyn filters::Filters> = Arc::new(filters);
            let lease = Duration::from_secs(shared.turns.lease_seconds.get());
            let holder = store::Holder::new(
                replica.clone(),
                i64::try_from(lease.as_millis()).unwrap_or(i64::MAX),
            );
            let tasks = scheduler::TaskStore::new(running.db.clone());
            let store = store::Store::with_holder(running.db, holder);
            let scheduler = scheduler_of(&shared, &replica, tasks, &store, &filters)
                .map_err(|e| settings(e.to_string()))?;
            running.background.spawn(
                "shell sandbox check",
                log_shell_sandbox(runner.clone(), catalog.clone(), running.readiness.clone()),
            );
            let scheduling = &shared.scheduler;
            let turn_log =
                turnlog::TurnLog::new(shared.data_dir.join(metnos_kit::datadir::TURNS_DIR));
            keep_turn_log_gaps(running.background, &turn_log);
            let planner = Arc::new(Planner::new(engine::Parts {
                config: shared.turns.clone(),
                default_mode: shared.runtime.mode,
                llm,
                catalog,
                runner,
                filters: Arc::clone(&filters),
                store: store.clone(),
                log: turn_log.clone(),
                conversation: shared.conversation.clone(),
                memory: shared.memory.clone(),
                orders: scheduling.enabled.then(|| scheduler.clone()),
            }));
            let scheduler = scheduler
                .with(maintenance::SyntSuggest::new(&planner, &filters, &shared))
                .map_err(|e| settings(e.to_string()))?;
            // Standing orders fire only when Metnos may act on its own.
            let tasks = scheduler.store.clone();
            let scheduler = if scheduling.enabled {
                scheduler.with_standing(Arc::new(standing::StandingOrders {
                    turns: Arc::new(Scheduled(Arc::clone(&planner))),
                    filters: Arc::clone(&filters),
                    db: store.db().clone(),
                    cli_level: shared.turns.cli_level,
                    tasks,
                    telos: shared.telos.clone(),
                }))
            } else {
                scheduler
            };
            let api_scheduler = scheduler.clone();
            // The builtin scheduler: due tasks fired once per slot across replicas; a
            // firing runs on after its tick.
            running
                .background
                .every("scheduler", scheduling.tick(), move || {
                    let scheduler = scheduler.clone();
                    async move {
                        scheduler.tick().await;
                    }
                });
            keep_leases(running.background, &planner, lease, sweep_every);
            Ok(PlannerServiceServer::new(PlannerApi {
                planner,
                sessions: proactive::session::Sessions {
                    db: store.db().clone(),
                    filters,
                    cli_level: shared.turns.cli_level,
                },
                store,
                turn_log,
                scheduler: Some(api_scheduler),
                turn_log_days: scheduling.turn_log_days.get(),
            })
            .max_decoding_message_size(metnos_kit::edge::MAX_REQUEST_BYTES))
        })
        .await
}

/// The turn loop as the scheduler starts it: a standing order's firing.
#[derive(Debug)]
struct Scheduled(Arc<Planner>);

impl proactive::TurnStarter for Scheduled {
    fn start_scheduled(&self, request: &turn::TurnRequest, sink: turn::engine::Sink) -> String {
        let mut cp = self.0.start(request);
        cp.scheduled = true;
        let turn_id = cp.turn_id.clone();
        tokio::spawn(Arc::clone(&self.0).run(cp, sink));
        turn_id
    }
}

/// The builtin scheduler with its jobs — each replica's turn-log retention, the
/// scratchpad's pruning, the conversations' retention, the evening digest, stale grants, the proposals' upkeep — and
/// its limits on standing orders.
fn scheduler_of(
    config: &Config,
    replica: &str,
    tasks: scheduler::TaskStore,
    store: &store::Store,
    filters: &Arc<dyn filters::Filters>,
) -> Result<scheduler::Scheduler, scheduler::BadBuiltin> {
    let scheduling = &config.scheduler;
    let clock = Arc::new(metnos_kit::clock::SystemClock);
    let mut scheduler =
        scheduler::Scheduler::new(tasks, clock.clone(), replica, config.telos.clone())
            // Each replica's own turn log (its data directory): one task per replica.
            .builtin(
                &maintenance::turn_log_task(replica),
                <maintenance::TurnLogRetention as scheduler::Builtin>::SCHEDULE,
                Arc::new(maintenance::TurnLogRetention {
                    dir: config.data_dir.join(metnos_kit::datadir::TURNS_DIR),
                    keep_days: scheduling.turn_log_days.get(),
                }),
            )?
            .with(maintenance::ScratchpadPrune {
                store: store.clone(),
                retention_hours: config.turns.retention_hours.get(),
            })?
            .with(maintenance::ThreadRetention {
                db: store.db().clone(),
                retention_ms: config.conversation.retention_ms(),
            })?
            .with(maintenance::ApplyAger {
                db: store.db().clone(),
            })?
            .with(digest::EveningDigest {
                db: store.db().clone(),
                filters: Arc::clone(filters),
                telos: config.telos.clone(),
                clock,
            })?
            .with(proposals::StaleGrants {
                db: store.db().clone(),
                filters: Arc::clone(filters),
                unused_days: scheduling.stale_grant_days.get(),
                enabled: scheduling.enabled,
            })?
            .with(proposals::ProposalUpkeep {
                db: store.db().clone(),
                filters: Arc::clone(filters),
                fatigue_days: scheduling.fatigue_days.get(),
            })?
            .with_limits(
                scheduling.min_interval_minutes.get(),
                scheduling.max_per_person.get(),
            );
    scheduler.fatigue = proposals::Fatigue {
        approvals: scheduling.fatigue_approvals.get(),
        days: scheduling.fatigue_days.get(),
    };
    Ok(scheduler)
}

/// Turns the disk refused: their gap record is tried again on its own every few seconds,
/// and once more as the planner stops, not left to a turn that may never come.
fn keep_turn_log_gaps(
    background: &mut metnos_kit::background::Background,
    turn_log: &turnlog::TurnLog,
) {
    let gaps = turn_log.clone();
    background.every("turn log gaps", Duration::from_secs(5), move || {
        let gaps = gaps.clone();
        async move {
            let now = metnos_kit::time::now_ms();
            let _ = tokio::task::spawn_blocking(move || gaps.write_gap(now)).await;
        }
    });
    let last = turn_log.clone();
    background.on_stop("turn log gaps", async move {
        let now = metnos_kit::time::now_ms();
        let _ = tokio::task::spawn_blocking(move || last.write_gap(now)).await;
    });
}

/// The turns' leases: renewed every third of their length; the turns of a replica that
/// stopped are ended, released or resumed once theirs expired (at start, at once for this
/// replica's own previous process); the terminal's turns whose request expired after the
/// terminal went away taken up (a terminal still there sees the expiry within a sweep of
/// the approval service).
fn keep_leases(
    background: &mut metnos_kit::background::Background,
    planner: &Arc<Planner>,
    lease: Duration,
    sweep_every: Duration,
) {
    let renewing = Arc::clone(planner);
    background.every("turn leases", lease / 3, move || {
        let planner = Arc::clone(&renewing);
        async move { planner.renew_leases().await }
    });
    let freeing = Arc::clone(planner);
    background.spawn("free previous turns", async move {
        match freeing.store().expire_previous_runs().await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(turns = n, "the turns this replica's previous process held are free again"),
            Err(e) => tracing::warn!(error = %e, "cannot free the turns of this replica's previous process"),
        }
        freeing.sweep_leases().await;
    });
    let indexing = Arc::clone(planner);
    background.spawn("memory index", async move {
        match indexing.memories().index_missing().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(entries = n, "memory entries indexed for search"),
            Err(e) => tracing::warn!(error = %e, "cannot index the memory's entries for search"),
        }
    });
    let sweeping = Arc::clone(planner);
    background.every("lease sweep", lease.min(sweep_every), move || {
        let planner = Arc::clone(&sweeping);
        async move {
            planner.sweep_leases().await;
        }
    });
    let expiring = Arc::clone(planner);
    let grace_ms = i64::try_from(sweep_every.as_millis().saturating_mul(3)).unwrap_or(i64::MAX);
    background.every("expired approvals", sweep_every, move || {
        let planner = Arc::clone(&expiring);
        async move {
            planner.resume_expired_unfollowed(grace_ms).await;
        }
    });
}
