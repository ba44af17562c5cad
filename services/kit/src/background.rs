//! A service's background work (sweepers, flushers, health watchers, a channel's polling):
//! started with the service, told to stop when its shutdown begins, awaited — and what must
//! happen last (a final flush) run — once it has stopped serving. One path for every service,
//! so nothing outlives the service that started it.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

type Finally = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Background tasks of one service.
pub struct Background {
    stop: watch::Sender<bool>,
    tasks: Vec<(&'static str, JoinHandle<()>)>,
    finally: Vec<(&'static str, Finally)>,
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background")
            .field(
                "tasks",
                &self.tasks.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            )
            .field(
                "finally",
                &self.finally.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for Background {
    fn default() -> Self {
        Background::new()
    }
}

/// Resolves once the service's shutdown has begun.
pub type Stopped = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Background {
    pub fn new() -> Background {
        Background {
            stop: watch::channel(false).0,
            tasks: Vec::new(),
            finally: Vec::new(),
        }
    }

    /// A future that resolves when the service starts to shut down.
    pub fn stopped(&self) -> Stopped {
        let mut rx = self.stop.subscribe();
        Box::pin(async move {
            let _ = rx.wait_for(|stop| *stop).await;
        })
    }

    /// Runs `task` until it ends or the service starts to shut down (it is then dropped at
    /// its next await point).
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let stopped = self.stopped();
        let handle = tokio::spawn(async move {
            tokio::select! {
                () = task => {}
                () = stopped => {}
            }
        });
        self.tasks.push((name, handle));
    }

    /// Runs the task `start` makes from the shutdown signal: it ends on its own once the
    /// signal resolves (finishing what it is doing), and is aborted only if it is still
    /// running the grace period after the service stopped serving.
    pub fn spawn_graceful<F, Fut>(&mut self, name: &'static str, start: F)
    where
        F: FnOnce(Stopped) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let task = start(self.stopped());
        self.tasks.push((name, tokio::spawn(task)));
    }

    /// Runs `tick` every `period` (the first at once; a late tick delays the next rather
    /// than bunching) until the service starts to shut down. A tick under way when the
    /// shutdown begins is finished, never cut (a flush half done loses what it took).
    pub fn every<F, Fut>(&mut self, name: &'static str, period: Duration, mut tick: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        self.spawn_graceful(name, move |mut stopped| async move {
            let mut every = tokio::time::interval(period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    () = &mut stopped => return,
                }
                tick().await;
            }
        });
    }

    /// Runs `last` after the service stopped serving and its tasks ended (a final flush).
    pub fn on_stop(&mut self, name: &'static str, last: impl Future<Output = ()> + Send + 'static) {
        self.finally.push((name, Box::pin(last)));
    }

    /// Tells the tasks to stop (the shutdown has begun).
    pub fn signal(&self) -> impl FnOnce() + Send + 'static {
        let stop = self.stop.clone();
        move || {
            let _ = stop.send(true);
        }
    }

    /// Stops the tasks, waits for them until `deadline` (together, not each), aborts those
    /// still running, then runs the last steps.
    pub async fn finish(self, deadline: tokio::time::Instant) {
        let _ = self.stop.send(true);
        for (name, mut handle) in self.tasks {
            if tokio::time::timeout_at(deadline, &mut handle)
                .await
                .is_err()
            {
                tracing::warn!(task = name, "background task did not stop in time; aborted");
                handle.abort();
            }
        }
        for (_, last) in self.finally {
            last.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tasks_tick_until_the_shutdown_and_the_last_step_runs_after_them() {
        let ticks = Arc::new(AtomicU32::new(0));
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut background = Background::new();
        {
            let ticks = Arc::clone(&ticks);
            background.every("ticker", Duration::from_secs(5), move || {
                let ticks = Arc::clone(&ticks);
                async move {
                    ticks.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        {
            let order = Arc::clone(&order);
            let stopped = background.stopped();
            background.spawn("watcher", async move {
                stopped.await;
                order.lock().unwrap().push("watcher saw the stop");
            });
        }
        {
            let order = Arc::clone(&order);
            background.on_stop("flush", async move {
                order.lock().unwrap().push("flushed");
            });
        }
        tokio::time::sleep(Duration::from_secs(12)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), 3, "at 0, 5 and 10 s");
        let stop = background.signal();
        stop();
        background
            .finish(tokio::time::Instant::now() + Duration::from_secs(1))
            .await;
        let after = ticks.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(
            ticks.load(Ordering::SeqCst),
            after,
            "no tick after the stop"
        );
        // The watcher was dropped at the stop (it raced the same signal) or saw it; the
        // last step ran after the tasks, always.
        assert_eq!(order.lock().unwrap().last(), Some(&"flushed"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_tick_under_way_at_the_shutdown_is_finished_not_cut() {
        let mut background = Background::new();
        let flushed = Arc::new(AtomicU32::new(0));
        {
            let flushed = Arc::clone(&flushed);
            background.every("flusher", Duration::from_secs(5), move || {
                let flushed = Arc::clone(&flushed);
                async move {
                    // A flush that takes a while: half done, it would lose what it took.
                    tokio::time::sleep(Duration::from_millis(400)).await;
                    flushed.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        background.signal()();
        background
            .finish(tokio::time::Instant::now() + Duration::from_secs(1))
            .await;
        assert_eq!(
            flushed.load(Ordering::SeqCst),
            1,
            "the first tick completed"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_graceful_task_finishes_its_work_after_the_signal() {
        let mut background = Background::new();
        let finished = Arc::new(AtomicU32::new(0));
        {
            let finished = Arc::clone(&finished);
            background.spawn_graceful("worker", move |stopped| async move {
                stopped.await;
                // Work that must not be cut: it outlasts the signal.
                tokio::time::sleep(Duration::from_millis(300)).await;
                finished.fetch_add(1, Ordering::SeqCst);
            });
        }
        background
            .finish(tokio::time::Instant::now() + Duration::from_secs(1))
            .await;
        assert_eq!(
            finished.load(Ordering::SeqCst),
            1,
            "waited for, not dropped"
        );

        let mut background = Background::new();
        background.spawn_graceful("stubborn", |_| std::future::pending());
        let started = tokio::time::Instant::now();
        background
            .finish(tokio::time::Instant::now() + Duration::from_secs(2))
            .await;
        assert_eq!(
            tokio::time::Instant::now() - started,
            Duration::from_secs(2),
            "aborted after the wait, not waited on forever"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_never_ends_does_not_hold_the_shutdown() {
        let mut background = Background::new();
        let done = Arc::new(AtomicU32::new(0));
        {
            let done = Arc::clone(&done);
            background.on_stop("after", async move {
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        background.spawn("stuck", std::future::pending());
        let started = tokio::time::Instant::now();
        background
            .finish(tokio::time::Instant::now() + Duration::from_secs(2))
            .await;
        assert!(tokio::time::Instant::now() - started <= Duration::from_secs(2));
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }
}
