//! The turns this process drives, each with its cancel signal, and how a turn learns that
//! it was cancelled here or on any replica.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::store::Store;

type Drivers = HashMap<String, (u64, watch::Sender<bool>)>;

/// Turns driven in this process: turn id → (which driver, its cancel signal).
#[derive(Debug, Default)]
pub(crate) struct Running {
    turns: Arc<Mutex<Drivers>>,
    generation: AtomicU64,
}

/// A turn driven here: removed from [`Running`] when dropped, if still its entry.
pub(crate) struct Registered {
    turns: Arc<Mutex<Drivers>>,
    turn_id: String,
    generation: u64,
}

fn locked(turns: &Mutex<Drivers>) -> MutexGuard<'_, Drivers> {
    turns.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut running = locked(&self.turns);
        if running
            .get(&self.turn_id)
            .is_some_and(|(generation, _)| *generation == self.generation)
        {
            running.remove(&self.turn_id);
        }
    }
}

impl Running {
    /// Notes a turn as driven here (its cancel signal, its lease renewed) until the guard
    /// drops — also when the task panics or is aborted. A turn driven twice here (a
    /// ResumeTurn while its first stream still waits) is one entry per driver: each
    /// removes only its own.
    pub(crate) fn register(&self, turn_id: &str) -> (watch::Receiver<bool>, Registered) {
        let (tx, rx) = watch::channel(false);
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        locked(&self.turns).insert(turn_id.to_owned(), (generation, tx));
        let guard = Registered {
            turns: Arc::clone(&self.turns),
            turn_id: turn_id.to_owned(),
            generation,
        };
        (rx, guard)
    }

    /// The ids of the turns driven here now.
    pub(crate) fn ids(&self) -> Vec<String> {
        locked(&self.turns).keys().cloned().collect()
    }

    /// Signals a turn running here to stop; `false` if it is not running here.
    pub(crate) fn signal_cancel(&self, turn_id: &str) -> bool {
        match locked(&self.turns).get(turn_id) {
            Some((_, tx)) => {
                let _ = tx.send(true);
                true
            }
            None => false,
        }
    }
}

/// Resolves when the turn is cancelled: here (the watch) or on any replica (the store's
/// flag, looked at twice a second).
pub(crate) async fn cancelled(store: &Store, turn_id: &str, cancel: &mut watch::Receiver<bool>) {
    let mut every = tokio::time::interval(Duration::from_millis(500));
    // A signal dropped (another driver of this turn took its place here) is not a cancel:
    // the store's flag still is.
    let mut local = true;
    loop {
        tokio::select! {
            changed = cancel.changed(), if local => {
                match changed {
                    Err(_) => local = false,
                    Ok(()) if *cancel.borrow() => return,
                    Ok(()) => {}
                }
            }
            _ = every.tick() => {
                if store.cancel_requested(turn_id).await.unwrap_or(false) {
                    return;
                }
            }
        }
    }
}
