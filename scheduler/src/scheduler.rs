//! The secondary scheduler's wiring: the watches, the loop that wakes on
//! their events and on the queue's timers, and leader gating. Each pass
//! hands the stores' objects to the cycle (`cycle/`), whose writes go
//! through [`KubeWrites`], and turns its report into metrics.

use crate::cluster::Objects;
use crate::config::Settings;
use crate::cycle::{Clock, Cycle};
use crate::kube_writes::KubeWrites;
use crate::metrics::{Metrics, Readiness};
use crate::watch::{WatchError, Watches};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};
use tracing::info;

pub use crate::annotations::BOTTLENECK_ANNOTATION;
pub use crate::kube_writes::{FAILPOINT_EXIT_AFTER_BINDS, FAILPOINT_EXIT_AFTER_CLAIMS};
pub use crate::writer::FIELD_MANAGER;

/// The longest a quiet scheduler sleeps before looking at its queue again.
const IDLE_WAKE: Duration = Duration::from_secs(5);

/// Why the scheduler stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Watch(#[from] WatchError),
}

/// What wakes the loop: `wake` for anything, `changed` when the cluster
/// changed in a way that may make an unschedulable pod fit.
#[derive(Default)]
struct Signals {
    wake: Notify,
    changed: AtomicBool,
}

impl Signals {
    fn poke(&self, changed: bool) {
        if changed {
            self.changed.store(true, Ordering::SeqCst);
        }
        self.wake.notify_one();
    }
}

/// The scheduler process: client, cycle state, metrics.
pub struct Scheduler {
    client: kube::Client,
    writes: KubeWrites,
    cycle: Cycle,
    metrics: Arc<Metrics>,
}

impl Scheduler {
    pub fn new(client: kube::Client, settings: Settings, metrics: Arc<Metrics>) -> Scheduler {
        Scheduler {
            writes: KubeWrites::new(client.clone(), client.clone()),
            cycle: Cycle::new(settings),
            client,
            metrics,
        }
    }

    /// At most `n` bindings outstanding at once (`cycle/drive/binds.rs`).
    pub fn with_binds_in_flight(mut self, n: usize) -> Scheduler {
        self.cycle = self.cycle.with_binds_in_flight(n);
        self
    }

    /// Evictions through `client`, which should not retry 429 Too Many
    /// Requests (see [`KubeWrites`]).
    pub fn with_eviction_client(mut self, client: kube::Client) -> Scheduler {
        self.writes = KubeWrites::new(self.client.clone(), client);
        self
    }

    /// Watches, waits for every store to be synced (then `readiness` turns
    /// ready), and schedules until `shutdown` completes, while `leader` is
    /// true: a standby replica keeps its stores warm but neither pops the
    /// queue nor binds (see `leader.rs`).
    pub async fn run(
        mut self,
        readiness: Arc<Readiness>,
        shutdown: impl Future<Output = ()>,
        mut leader: watch::Receiver<bool>,
    ) -> Result<(), RunError> {
        let signals = Arc::new(Signals::default());
        readiness.set_not_ready("starting the watches".into());
        let mut shutdown = std::pin::pin!(shutdown);
        let poke = {
            let signals = signals.clone();
            move |changed| signals.poke(changed)
        };
        let watches = tokio::select! {
            w = Watches::start(
                &self.client,
                true,
                poke,
                self.metrics.invalid_objects.clone(),
                &readiness,
            ) => w,
            () = &mut shutdown => return Ok(()),
        };
        tokio::select! {
            r = watches.synced(&readiness) => r?,
            () = &mut shutdown => return Ok(()),
        }
        info!(names = ?self.cycle.settings().all_scheduler_names(), "watches synced");
        let mut leading = false;
        loop {
            let now_leading = *leader.borrow_and_update();
            if now_leading != leading {
                leading = now_leading;
                self.metrics.leader.set(i64::from(leading));
                if leading {
                    info!("leading: scheduling");
                } else {
                    info!("standing by: not scheduling");
                }
            }
            if signals.changed.swap(false, Ordering::SeqCst) {
                self.cycle.cluster_changed();
            }
            if leading {
                self.cycle(&watches).await;
            }
            let now = Instant::now();
            let wake = self
                .cycle
                .next_wake()
                .map_or(now + IDLE_WAKE, |t| t.clamp(now, now + IDLE_WAKE));
            tokio::select! {
                () = signals.wake.notified() => {}
                () = tokio::time::sleep_until(wake.into()) => {}
                r = leader.changed() => {
                    if r.is_err() {
                        // The elector is gone: nothing may bind any more.
                        info!("leader election stopped; stopping");
                        return Ok(());
                    }
                }
                () = &mut shutdown => {
                    info!("stopping");
                    return Ok(());
                }
            }
        }
    }

    /// One cycle over what the stores hold now.
    async fn cycle(&mut self, watches: &Watches) {
        // Drained before the stores are read: a change applied in between
        // is read now and named again next cycle, never missed.
        let changed = watches.changed();
        // With a change list the cycle needs no copy of every object: it
        // keeps what it was given.
        let (pods, nodes, topologies, bad_topologies) = match &changed {
            Some(_) => (
                Vec::new(),
                Vec::new(),
                Vec::new(),
                watches.invalid_topologies(),
            ),
            None => {
                let (topologies, bad) = watches.topologies();
                (watches.pods.state(), watches.nodes.state(), topologies, bad)
            }
        };
        let (gangs, bad_gangs) = watches.gangs();
        let workloads = watches.workloads();
        let storage = watches.storage();
        let (dra, bad_dra) = watches.dra();
        for bad in bad_topologies.iter().chain(&bad_gangs).chain(&bad_dra) {
            self.writes.report_invalid(bad);
        }
        let objects = Objects {
            nodes: &nodes,
            topologies: &topologies,
            pods: &pods,
            namespaces: &watches.namespaces.state(),
            workloads: &workloads,
            storage: &storage,
            gangs: &gangs,
            dra: &dra,
            changed: changed.as_ref(),
        };
        let report = self
            .cycle
            .run(&objects, &self.writes, Clock::system())
            .await;
        self.metrics.observe(&report);
        self.metrics
            .events_dropped
            .inc_by(self.writes.take_dropped_events());
        let cycle = &self.cycle;
        self.writes.retain_events(|pod| cycle.is_queued(pod));
    }
}
