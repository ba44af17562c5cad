//! Running a service on a runtime of its own, so that several services can share one
//! process (`metnos up`, system tests) and still log and trace under their own names:
//! every thread of the runtime defaults to the service's `tracing` subscriber and is
//! marked as the service's ([`crate::telemetry::mark_thread`]).

use std::cell::RefCell;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;

use tokio::sync::oneshot;
use tracing::Dispatch;

use crate::config::ServiceName;

thread_local! {
    static DEFAULT_DISPATCH: RefCell<Option<tracing::dispatcher::DefaultGuard>> = const { RefCell::new(None) };
}

/// The future a service gets to learn it must shut down.
pub type ShutdownFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A service running on its own thread and runtime.
#[derive(Debug)]
pub struct ServiceThread {
    service: ServiceName,
    stop: Option<oneshot::Sender<()>>,
    done: Option<oneshot::Receiver<Result<(), String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Starts `run(shutdown)` on a new runtime with `workers` worker threads, all of whose
/// threads log and trace through `dispatch`.
pub fn spawn_service<F, Fut, E>(
    service: ServiceName,
    dispatch: Dispatch,
    workers: usize,
    run: F,
) -> std::io::Result<ServiceThread>
where
    F: FnOnce(ShutdownFuture) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (done_tx, done_rx) = oneshot::channel();
    let name = service.binary();
    let runtime = {
        let dispatch = dispatch.clone();
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers.max(1))
            .thread_name(name)
            .enable_all()
            .on_thread_start(move || {
                crate::telemetry::mark_thread(service);
                let guard = tracing::dispatcher::set_default(&dispatch);
                DEFAULT_DISPATCH.with(|slot| *slot.borrow_mut() = Some(guard));
            })
            .on_thread_stop(|| DEFAULT_DISPATCH.with(|slot| drop(slot.borrow_mut().take())))
            .build()?
    };
    let thread = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            crate::telemetry::mark_thread(service);
            let _default = tracing::dispatcher::set_default(&dispatch);
            let shutdown: ShutdownFuture = Box::pin(async move {
                // A dropped handle also means stop.
                let _ = stop_rx.await;
            });
            let result = runtime.block_on(run(shutdown)).map_err(|e| e.to_string());
            // Connections still open after the grace period are cut here.
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            let _ = done_tx.send(result);
        })?;
    Ok(ServiceThread {
        service,
        stop: Some(stop_tx),
        done: Some(done_rx),
        thread: Some(thread),
    })
}

impl ServiceThread {
    pub fn service(&self) -> ServiceName {
        self.service
    }

    /// Asks the service to shut down (idempotent).
    pub fn request_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Resolves when the service has stopped, with its error if it failed. Cancel-safe;
    /// after it has resolved once, later calls resolve at once with `Ok`.
    pub async fn finished(&mut self) -> Result<(), String> {
        let Some(done) = self.done.as_mut() else {
            return Ok(());
        };
        let result = done
            .await
            .unwrap_or_else(|_| Err(format!("{}: service thread panicked", self.service)));
        self.done = None;
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        result
    }

    /// Stops the service and waits for it.
    pub async fn stop(mut self) -> Result<(), String> {
        self.request_stop();
        self.finished().await
    }
}

impl Drop for ServiceThread {
    fn drop(&mut self) {
        self.request_stop();
    }
}

/// Worker threads for `service`'s runtime on a machine of `cores` cores (issue 45). The
/// planner and the vaglio do a turn's work (its stages, TLS, the judge): each gets a worker
/// per core, or a 16-core machine runs every turn through a worker or two (1.28x the
/// throughput of one client with sixteen). Policy and approval answer short store-bound
/// calls, whose SQLite writes are one at a time anyway: half the cores, at most 4. The
/// gateway waits on people: one. Idle workers are parked threads, so a small machine pays
/// for what it has: 2, 2, 1, 1, 1 on two cores.
pub fn workers(service: ServiceName, cores: usize) -> usize {
    let cores = cores.max(1);
    match service {
        ServiceName::Planner | ServiceName::Vaglio => cores,
        ServiceName::Policy | ServiceName::Approval => cores.div_ceil(2).min(4),
        ServiceName::Gateway => 1,
    }
}

/// This machine's cores, as the runtimes see them (the process's CPU affinity and cgroup
/// quota included); 1 when unknown.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Starts `serve(listener, shutdown)` on a runtime of its own (its workers as
/// [`workers`] gives them for this machine, as `metnos up` does), no logs, on a
/// fresh `127.0.0.1` port; returns the service's URL and its handle. For load drivers,
/// which measure a real server beside their clients in one process.
pub fn spawn_on_loopback<F, Fut, E>(
    service: ServiceName,
    serve: F,
) -> std::io::Result<(String, ServiceThread)>
where
    F: FnOnce(tokio::net::TcpListener, ShutdownFuture) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let url = format!("http://{}", listener.local_addr()?);
    let workers = workers(service, cores());
    let thread = spawn_service(
        service,
        Dispatch::none(),
        workers,
        move |shutdown| async move {
            let listener =
                tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
            serve(listener, shutdown).await.map_err(|e| e.to_string())
        },
    )?;
    Ok((url, thread))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_turn_s_services_get_a_worker_per_core_and_the_others_stay_small() {
        let on = |cores| {
            [
                ServiceName::Planner,
                ServiceName::Vaglio,
                ServiceName::Policy,
                ServiceName::Approval,
                ServiceName::Gateway,
            ]
            .map(|service| workers(service, cores))
        };
        assert_eq!(on(2), [2, 2, 1, 1, 1]);
        assert_eq!(on(16), [16, 16, 4, 4, 1]);
        // An unknown count is one core, never zero workers.
        assert_eq!(on(0), [1, 1, 1, 1, 1]);
    }
}
