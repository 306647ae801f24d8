//! The cycle's first stage: from the objects to the snapshot and the pods
//! due. Reconciles what the cycle holds with what the watch shows (assumed
//! pods seen bound, gangs no longer waiting, lapsed reservations and
//! nominations), makes the queue hold exactly the pending pods and, when
//! any is due, builds the snapshot every decision of the cycle reads, with
//! every hold applied. Pure: no `async`, no API.

use super::Cycle;
use super::queue::QueuedPod;
use super::{Clock, NOMINATION_TTL};
use crate::cluster::{Objects, ReadingTrust, nominated_node, pod_key};
use gputopo_scheduler_core::dra::DraInventory;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::{Decision, schedule};
use gputopo_scheduler_core::snapshot::{Snapshot, SnapshotError};
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;
use tracing::{debug, warn};

/// What the cycle works on once prepared.
pub struct Prepared {
    /// Every pod, by `namespace/name`.
    pub by_key: crate::live_cluster::PodsByKey,
    /// The pods due now, in the queue's order.
    pub ready: Vec<QueuedPod>,
    /// The cluster as the decisions see it: bound and assumed pods, the
    /// GPUs allocated to ResourceClaims, other gangs' reservations and
    /// other preemptors' nominations.
    pub snapshot: Snapshot,
    /// The DRA devices; `None` when no DRA object exists.
    pub inventory: Option<DraInventory>,
}

/// Why a cycle could not be prepared; its due pods back off.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    #[error("building the cluster snapshot: {0}")]
    Snapshot(#[from] SnapshotError),
}

impl Cycle {
    /// Reconciles the assume cache with the pods, makes the queue hold
    /// exactly the pending pods, and, when any is due, builds the snapshot.
    /// `Ok(None)`: nothing is due. `Err`: the snapshot cannot be built; the
    /// due pods back off.
    pub fn prepare(
        &mut self,
        objects: &Objects<'_>,
        clock: Clock,
    ) -> Result<Option<Prepared>, PrepareError> {
        self.observe(objects, clock);
        self.prepare_observed(objects, clock)
    }

    /// Reads what changed in `objects` (all of them without a change
    /// list): first in every cycle, whether or not a pod is due, since a
    /// change list is handed over once.
    pub fn observe(&mut self, objects: &Objects<'_>, clock: Clock) {
        self.live.observe(objects, self.reading_trust(clock));
    }

    fn reading_trust(&self, clock: Clock) -> ReadingTrust {
        ReadingTrust {
            now: clock.wall,
            max_age: self.settings.accounting.reported_allocations_max_age,
        }
    }

    /// [`Self::prepare`] after [`Self::observe`].
    pub(super) fn prepare_observed(
        &mut self,
        objects: &Objects<'_>,
        clock: Clock,
    ) -> Result<Option<Prepared>, PrepareError> {
        let now = clock.now;
        let by_key = self.live.pods().clone();
        let forgotten = self.holds.assumed_mut().reconcile(&by_key);
        if forgotten > 0 {
            debug!(forgotten, "assumed pods now seen bound");
        }
        let (pending_keys, pending): (HashSet<&str>, Vec<Arc<Pod>>) = self
            .live
            .pending()
            .filter(|(k, _)| !self.holds.assumed().contains(k))
            .map(|(k, p)| (k, p.clone()))
            .unzip();
        let pending_keys: HashSet<String> = pending_keys.into_iter().map(str::to_string).collect();
        self.queue.sync(pending.iter().map(|p| QueuedPod::of(p)));
        self.clocks.sync(&pending, clock);
        let clocks = &self.clocks;
        self.holds
            .prune(now, |k| clocks.is_waiting(k), |k| pending_keys.contains(k));
        let ready = self.queue.ready(now);
        if ready.is_empty() {
            return Ok(None);
        }
        self.live.sync_cluster_objects(objects);
        let (mut snapshot, warnings) = match self.live.snapshot(self.holds.assumed()) {
            Ok(s) => s,
            Err(e) => {
                for q in &ready {
                    self.queue.retry_later(&q.key, now);
                }
                return Err(e.into());
            }
        };
        let mut warnings: HashSet<String> = warnings.into_iter().collect();
        self.holds.claims_mut().reconcile(objects.dra);
        let assumed = self.holds.claims();
        let inventory = (!objects.dra.is_empty()).then(|| {
            let topologies: Vec<_> = self.live.topologies().cloned().collect();
            let mut inventory = objects.dra.inventory(&self.settings.dra, &topologies);
            assumed.mark_busy(&mut inventory);
            warnings.extend(inventory.warnings.iter().map(ToString::to_string));
            warnings.extend(hold_claimed(&mut snapshot, &inventory));
            inventory
        });
        for w in self.written.warnings(warnings) {
            warn!(warning = %w, "snapshot");
        }
        self.holds.apply_reservations(&mut snapshot);
        self.read_back_nominations(&pending, &snapshot, now);
        self.holds.apply_nominations(&mut snapshot);
        Ok(Some(Prepared {
            by_key,
            ready,
            snapshot,
            inventory,
        }))
    }

    /// A preemptor nominated by an earlier leader (its
    /// `status.nominatedNodeName`) that this process holds no nomination
    /// for: once its node has room for it, the GPUs it would get there are
    /// held for it, so that a pod of lower priority decided first (the
    /// preemptor may be backing off) cannot take what the evictions freed.
    fn read_back_nominations(&mut self, pending: &[Arc<Pod>], snapshot: &Snapshot, now: Instant) {
        for pod in pending {
            let Some(node) = nominated_node(pod) else {
                continue;
            };
            let key = pod_key(pod);
            if self.holds.nominations().get(&key).is_some() {
                continue;
            }
            let Ok(mut pinned) = PendingPod::from_k8s(pod) else {
                continue;
            };
            pinned.node_name = Some(node.to_string());
            let name = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref());
            let (core, _) = self.settings.profile_for(name.unwrap_or_default());
            if let Decision::Placed(p) = schedule(snapshot, &pinned, core) {
                debug!(pod = %key, node, gpus = %p.assigned_gpus(), "nomination read back");
                self.holds
                    .nominate_until(&pinned, node, &p.gpus, now + NOMINATION_TTL);
            }
        }
    }
}

/// On a DRA node the claims are the truth: the GPUs allocated to a claim
/// are held in the snapshot (a placeholder per claim and node, never a
/// preemption victim) unless a pod already holds them there (one this
/// scheduler bound, whose annotations name them). Returns warnings.
fn hold_claimed(snapshot: &mut Snapshot, inventory: &DraInventory) -> Vec<String> {
    let mut warnings = Vec::new();
    for (node, claims) in inventory.busy_gpus() {
        for (claim, mask) in claims {
            let (namespace, name) = claim.split_once('/').unwrap_or(("default", claim));
            let placeholder = format!("resourceclaim:{name}");
            if let Err(e) = snapshot.hold_free_gpus(namespace, &placeholder, node, mask) {
                warnings.push(format!("ResourceClaim {claim}: {e}"));
            }
        }
    }
    warnings
}
