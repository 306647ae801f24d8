//! The bind pipeline: a placed pod is assumed at once (the snapshot and the
//! assume cache hold its GPUs, so no later decision can promise them
//! again), its binding is sent, and the next pod is decided while the API
//! server answers. At most [`Cycle::binds_in_flight`] bindings are
//! outstanding; the cycle waits for the rest before it ends, so a cycle's
//! report holds every outcome it started.
//!
//! A binding that fails takes its assumption back out of the snapshot and
//! the assume cache, and the pod backs off (a 404 ends it: the pod is gone).
//! Gang members are bound through [`Cycle::bind_all`], one after another and
//! awaited: a crash between two leaves a prefix bound, which the next leader
//! completes or undoes by the partly-bound-gang rule.
//!
//! Dropping the cycle (a lost lease) drops the bindings not yet answered;
//! any the API server already accepted are seen bound by the next leader's
//! watch, and those it did not stay pending: nothing is promised twice,
//! because the promise is the binding itself.

use super::drive::{Member, Work};
use super::{ClusterWrites, Cycle, Outcome, WriteError};
use crate::cluster::pod_key;
use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use gputopo_scheduler_core::schedule::Placement;
use tracing::{info, warn};

/// How many bindings one scheduler has outstanding by default. The API
/// server's binding is one small write; 32 keeps a 2-core control plane busy
/// without queueing seconds of work in its admission (kube-scheduler binds
/// each pod in its own goroutine, bounded only by its client's rate limit).
pub const DEFAULT_BINDS_IN_FLIGHT: usize = 32;

/// A binding the API server has answered.
pub(super) struct BindDone {
    member: Member,
    placement: Placement,
    result: Result<(), WriteError>,
}

/// The bindings sent and not yet answered.
pub(super) type InFlight<'a> = FuturesUnordered<BoxFuture<'a, BindDone>>;

impl Cycle {
    /// Assumes `member` on `placement` and sends its binding without waiting
    /// for the answer (beyond keeping at most
    /// [`Cycle::binds_in_flight`] outstanding).
    pub(super) async fn bind_later<'a, W: ClusterWrites>(
        &mut self,
        writes: &'a W,
        work: &mut Work<'a>,
        member: Member,
        placement: Placement,
    ) {
        let (pod, pending) = &member;
        self.assume(&mut work.snapshot, pod, pending, &placement, work.clock.now);
        work.binds.push(
            async move {
                let result = writes.bind(&member.0, &placement).await;
                BindDone {
                    member,
                    placement,
                    result,
                }
            }
            .boxed(),
        );
        // Polling the set sends the new request; answers already in are
        // handled now rather than at the cycle's end.
        self.reap_answered(writes, work).await;
        while work.binds.len() >= self.binds_in_flight {
            let Some(done) = work.binds.next().await else {
                break;
            };
            self.bound(writes, work, done).await;
        }
    }

    /// Handles every binding already answered, without waiting.
    pub(super) async fn reap_answered<'a, W: ClusterWrites>(
        &mut self,
        writes: &'a W,
        work: &mut Work<'a>,
    ) {
        while let Some(Some(done)) = work.binds.next().now_or_never() {
            self.bound(writes, work, done).await;
        }
    }

    /// Waits for every binding still outstanding: the cycle's last step.
    pub(super) async fn await_binds<'a, W: ClusterWrites>(
        &mut self,
        writes: &'a W,
        work: &mut Work<'a>,
    ) {
        while let Some(done) = work.binds.next().await {
            self.bound(writes, work, done).await;
        }
    }

    /// A binding's answer: the pod is scheduled, or its assumption is
    /// taken back and it backs off.
    async fn bound<W: ClusterWrites>(&mut self, writes: &W, work: &mut Work<'_>, done: BindDone) {
        let BindDone {
            member: (pod, pending),
            placement: p,
            result,
        } = done;
        let outcome = match result {
            Ok(()) => scheduled(p),
            Err(e) => {
                warn!(error = %e, "binding failed: its GPUs are free again");
                self.unassume(&mut work.snapshot, &pod_key(&pod));
                Outcome::BindFailed(e)
            }
        };
        self.finish(writes, work, &pod, Some(&pending), outcome)
            .await;
    }

    /// Binds every pod, one after another, its GPUs written by the same
    /// request, then says so in an event: a gang's members. A member whose
    /// binding fails after others succeeded cannot undo theirs: it is retried
    /// alone. Returns whether every pod was bound.
    pub(super) async fn bind_all<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        all: Vec<(Member, Placement)>,
    ) -> bool {
        let mut all_bound = true;
        for ((pod, pending), p) in all {
            let outcome = match writes.bind(&pod, &p).await {
                Ok(()) => {
                    self.assume(&mut work.snapshot, &pod, &pending, &p, work.clock.now);
                    scheduled(p)
                }
                Err(e) => {
                    warn!(error = %e, "binding failed");
                    all_bound = false;
                    Outcome::BindFailed(e)
                }
            };
            self.finish(writes, work, &pod, Some(&pending), outcome)
                .await;
        }
        all_bound
    }
}

/// A bound pod's outcome, logged.
fn scheduled(p: Placement) -> Outcome {
    info!(pod = %p.pod, node = %p.node, gpus = %p.assigned_gpus(), score = p.score, "scheduled");
    Outcome::Scheduled(Box::new(p))
}
