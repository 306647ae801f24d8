//! Events are reports, not decisions: the scheduler publishes them in the
//! background, never waiting for them. With bindings pipelined it can place
//! pods faster than the API server takes their events, so the events wait
//! in a bounded queue, at most [`EVENTS_IN_FLIGHT`] published at once;
//! when [`MAX_QUEUED_EVENTS`] are waiting, a new one is dropped and counted
//! (`gputopo_events_dropped_total`), as client-go's event broadcaster does.
//! Unbounded, a backlog would hold a task, an event and a request per pod.

use futures::future::BoxFuture;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::{Semaphore, mpsc};

/// Events waiting to be published before new ones are dropped (client-go's
/// `maxQueuedEvents`).
pub const MAX_QUEUED_EVENTS: usize = 1000;

/// Events being published at once.
pub const EVENTS_IN_FLIGHT: usize = 16;

/// See the module docs.
#[derive(Debug, Default)]
pub struct EventQueue {
    /// Started on the first event (inside the runtime).
    tx: OnceLock<mpsc::Sender<BoxFuture<'static, ()>>>,
    dropped: AtomicU64,
}

impl EventQueue {
    /// Queues `publish`; returns `false` (and counts it) when the queue is
    /// full and the event is dropped.
    pub fn push(&self, publish: impl Future<Output = ()> + Send + 'static) -> bool {
        let tx = self.tx.get_or_init(start);
        match tx.try_send(Box::pin(publish)) {
            Ok(()) => true,
            Err(_) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Events dropped since the last call.
    pub fn take_dropped(&self) -> u64 {
        self.dropped.swap(0, Ordering::Relaxed)
    }
}

/// The worker: publishes queued events, [`EVENTS_IN_FLIGHT`] at a time.
fn start() -> mpsc::Sender<BoxFuture<'static, ()>> {
    let (tx, mut rx) = mpsc::channel::<BoxFuture<'static, ()>>(MAX_QUEUED_EVENTS);
    let slots = Arc::new(Semaphore::new(EVENTS_IN_FLIGHT));
    tokio::spawn(async move {
        while let Some(publish) = rx.recv().await {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                break;
            };
            tokio::spawn(async move {
                publish.await;
                drop(slot);
            });
        }
    });
    tx
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tokio::sync::Notify;

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_and_the_rest_are_published() {
        let queue = EventQueue::default();
        let gate = Arc::new(Notify::new());
        let published = Arc::new(AtomicUsize::new(0));
        let event = || {
            let gate = gate.clone();
            let published = published.clone();
            async move {
                gate.notified().await;
                published.fetch_add(1, Ordering::SeqCst);
            }
        };
        // Let the worker take the first EVENTS_IN_FLIGHT (they wait on the
        // gate), then fill the queue behind them.
        for _ in 0..EVENTS_IN_FLIGHT {
            assert!(queue.push(event()));
        }
        tokio::task::yield_now().await;
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        let mut accepted = EVENTS_IN_FLIGHT;
        let mut refused = 0;
        for _ in 0..MAX_QUEUED_EVENTS + 100 {
            if queue.push(event()) {
                accepted += 1;
            } else {
                refused += 1;
            }
        }
        assert!(refused >= 99, "{refused} dropped");
        assert!(
            accepted <= EVENTS_IN_FLIGHT + MAX_QUEUED_EVENTS + 1,
            "{accepted} kept: the queue is bounded"
        );
        assert_eq!(queue.take_dropped(), refused as u64);
        assert_eq!(queue.take_dropped(), 0, "counted once");
        // Open the gate until every accepted event is out.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while published.load(Ordering::SeqCst) < accepted {
            gate.notify_waiters();
            tokio::task::yield_now().await;
            assert!(
                std::time::Instant::now() < deadline,
                "{} of {accepted} published",
                published.load(Ordering::SeqCst)
            );
        }
    }
}
