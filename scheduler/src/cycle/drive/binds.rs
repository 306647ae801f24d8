//! The bind pipeline: a placed pod is assumed at once (the snapshot and the
//! assume cache hold its GPUs, so no later decision can promise them
//! again), its binding is sent, and the next pod is decided while the API
//! server answers. At most [`Cycle::with_binds_in_flight`] bindings are
//! outstanding; the cycle waits for the rest before it ends, so a cycle's
//! report holds every outcome it started.
//!
//! A binding that fails takes its assumption back out of the snapshot and
//! the assume cache, and the pod backs off (a 404 ends it: the pod is gone;
//! `steps/binds.rs` decides both). Gang members are bound through
//! [`Cycle::bind_all`], one after another and awaited: a crash between two
//! leaves a prefix bound, which the next leader completes or undoes by the
//! partly-bound-gang rule.
//!
//! Dropping the cycle (a lost lease) drops the bindings not yet answered;
//! any the API server already accepted are seen bound by the next leader's
//! watch, and those it did not stay pending: nothing is promised twice,
//! because the promise is the binding itself.

use super::super::work::{Member, Work};
use super::super::{ClusterWrites, Cycle, WriteError};
use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use gputopo_scheduler_core::schedule::Placement;

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
    /// for the answer (beyond keeping at most the limit outstanding).
    pub(super) async fn bind_later<'a, W: ClusterWrites>(
        &mut self,
        writes: &'a W,
        work: &mut Work<'a>,
        binds: &mut InFlight<'a>,
        member: Member,
        placement: Placement,
    ) {
        self.bind_sent(work, &member, &placement);
        binds.push(
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
        while let Some(Some(done)) = binds.next().now_or_never() {
            self.bound(writes, work, done).await;
        }
        while binds.len() >= self.binds_in_flight {
            let Some(done) = binds.next().await else {
                break;
            };
            self.bound(writes, work, done).await;
        }
    }

    /// Waits for every binding still outstanding: the cycle's last step.
    pub(super) async fn await_binds<'a, W: ClusterWrites>(
        &mut self,
        writes: &'a W,
        work: &mut Work<'a>,
        binds: &mut InFlight<'a>,
    ) {
        while let Some(done) = binds.next().await {
            self.bound(writes, work, done).await;
        }
    }

    /// A binding's answer, handed to [`Cycle::bind_answered`].
    async fn bound<W: ClusterWrites>(&mut self, writes: &W, work: &mut Work<'_>, done: BindDone) {
        let BindDone {
            member,
            placement,
            result,
        } = done;
        let outcome = self.bind_answered(work, &member, placement, result);
        let (pod, pending) = member;
        self.finish(writes, work, &pod, Some(&pending), outcome)
            .await;
    }

    /// Binds every pod, one after another, its GPUs written by the same
    /// request: a gang's members (see [`Cycle::member_bound`]).
    pub(super) async fn bind_all<W: ClusterWrites>(
        &mut self,
        writes: &W,
        work: &mut Work<'_>,
        all: Vec<(Member, Placement)>,
    ) {
        for (member, p) in all {
            let result = writes.bind(&member.0, &p).await;
            let outcome = self.member_bound(work, &member, p, result);
            let (pod, pending) = member;
            self.finish(writes, work, &pod, Some(&pending), outcome)
                .await;
        }
    }
}
