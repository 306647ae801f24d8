//! One pod whose GPUs come through ResourceClaims, decided over the whole
//! cluster: every predicate and score of [`crate::schedule::schedule`] for
//! the node, and [`DraPod::fit`] for the devices.
//!
//! The node filter and score see the pod as asking for the claims' GPU
//! count (so packing, fragmentation and network-domain scores mean what
//! they mean for a device-plugin pod); the GPUs themselves are the claims'
//! fit on that node, which honours the selectors and constraints. Nodes are
//! ranked by the quality of that set first (bottleneck, NUMA span,
//! leftover: the design's order), then by the node score, then by name.

use super::allocate::DraFit;
use super::claim::{DraPod, Mode};
use super::devices::DraInventory;
use crate::config::{SchedulerConfig, TopologyManagerPolicy};
use crate::filter::PodContext;
use crate::gpuset::SetRequest;
use crate::pod::PendingPod;
use crate::schedule::{Placement, message_from_counts};
use crate::score::{ScoreParts, Scorer};
use crate::snapshot::{NodeId, Snapshot};
use std::cmp::Ordering;
use std::collections::HashMap;

/// The node, the GPUs and the claims' allocations for one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct DraPlacement {
    /// As for a device-plugin pod: node, GPU indices (and UUIDs), score,
    /// explanation; what the binding's annotations carry.
    pub placement: Placement,
    /// What to write to each claim.
    pub fit: DraFit,
}

/// What the scheduler decided for a pod with claims.
#[derive(Clone, Debug, PartialEq)]
pub enum DraDecision {
    Placed(Box<DraPlacement>),
    /// No node can take it now: the `FailedScheduling` message, node
    /// reasons counted in kube-scheduler's style.
    Unschedulable {
        message: String,
    },
}

impl DraPod {
    /// GPUs the pod's unallocated `ExactCount` requests take: what the node
    /// filter checks free GPUs against. (`All` requests and allocated claims
    /// take fixed devices, checked by [`DraPod::fit`].)
    pub fn counted_gpus(&self) -> u32 {
        self.claims
            .iter()
            .filter(|c| c.allocated.is_none())
            .flat_map(|c| &c.requests)
            .map(|r| match r.mode {
                Mode::Count(n) => n,
                Mode::All => 0,
            })
            .fold(0u32, u32::saturating_add)
    }

    /// `pod` as the node filter and the gang rule see it: asking for the
    /// claims' GPU count, whole, and not for the device plugin's resource.
    pub fn judged(&self, pod: &PendingPod) -> PendingPod {
        let mut judged = pod.clone();
        judged.request.gpus = self.counted_gpus();
        judged.request.gpu_share = None;
        judged.requests.gpus = 0;
        judged
    }
}

/// Decides `pod` (its node constraints and `gputopo.dev/*` annotations)
/// with `dra` (its claims) on `snapshot` and `inventory`. The inventory's
/// held GPUs ([`DraInventory::hold`]) must mirror the snapshot's: the
/// caller sets them (see `hold_snapshot`).
pub fn schedule_claims(
    snapshot: &Snapshot,
    inventory: &DraInventory,
    dra: &DraPod,
    pod: &PendingPod,
    config: &SchedulerConfig,
) -> DraDecision {
    decide(snapshot, inventory, dra, pod, config, false)
}

/// [`schedule_claims`] for a pod's special claim (KEP-5004, see
/// `extended.rs`): only nodes whose GPUs are not the node's allocatable
/// resource (no device plugin) are considered, as upstream serves an
/// extended resource through DRA only where no device plugin does.
pub fn schedule_extended(
    snapshot: &Snapshot,
    inventory: &DraInventory,
    dra: &DraPod,
    pod: &PendingPod,
    config: &SchedulerConfig,
) -> DraDecision {
    decide(snapshot, inventory, dra, pod, config, true)
}

fn decide(
    snapshot: &Snapshot,
    inventory: &DraInventory,
    dra: &DraPod,
    pod: &PendingPod,
    config: &SchedulerConfig,
    dra_nodes_only: bool,
) -> DraDecision {
    let judged = dra.judged(pod);
    let ctx = PodContext::new(snapshot, &judged, config);
    let scorer = Scorer::new(&ctx);
    let base = SetRequest::from_gpu_request(&judged.request);
    let mut best: Option<(DraFit, ScoreParts, NodeId)> = None;
    let mut feasible = 0usize;
    let mut phrases: HashMap<String, usize> = HashMap::new();
    for (i, node) in snapshot.nodes().enumerate() {
        let id = NodeId(i as u32);
        if dra_nodes_only && node.allocatable().gpus > 0 {
            *phrases
                .entry("GPUs served by a device plugin".to_string())
                .or_default() += 1;
            continue;
        }
        let fit = match ctx.filter(i) {
            Ok(fit) => fit,
            Err(rejection) => {
                for phrase in ctx.reason(id, rejection).summaries() {
                    *phrases.entry(phrase).or_default() += 1;
                }
                continue;
            }
        };
        let request = SetRequest {
            single_numa_node: node.topology_manager_policy(config.default_topology_manager_policy)
                == TopologyManagerPolicy::SingleNumaNode,
            ..base
        };
        let shape = node.shape().map(|s| s.as_ref());
        match dra.fit(inventory, node.name(), shape, &request) {
            Ok(dra_fit) => {
                feasible += 1;
                let parts = scorer.score(&ctx, i, &fit);
                let wins = best
                    .as_ref()
                    .is_none_or(|(b, bp, _)| rank(&dra_fit, &parts, b, bp) == Ordering::Greater);
                if wins {
                    best = Some((dra_fit, parts, id));
                }
            }
            Err(reason) => {
                *phrases.entry(reason.summary()).or_default() += 1;
            }
        }
    }
    let Some((fit, parts, id)) = best else {
        return DraDecision::Unschedulable {
            message: message_from_counts(snapshot.len(), phrases),
        };
    };
    let node = snapshot.node(id);
    let gpus = fit.gpus();
    let set_text = match node.shape() {
        Some(shape) => {
            let request = SetRequest {
                gpus: fit.pick.gpu_count(),
                ..base
            };
            shape.describe(&request, &fit.pick).explanation
        }
        None => format!("GPUs {gpus:?}"),
    };
    let score = parts.score();
    let placement = Placement {
        pod: pod.key(),
        node: node.name().to_string(),
        node_id: id,
        gpu_uuids: node.gpu_uuids(&gpus),
        gpus,
        shared: None,
        bottleneck: fit.pick.bottleneck,
        topology_known: node.shape().is_some(),
        score,
        explanation: format!(
            "node {}: {set_text}; devices {}; node score {score} ({parts}); best of {feasible} feasible of {} nodes",
            node.name(),
            fit.devices_text(),
            snapshot.len()
        ),
        parts,
        feasible_nodes: feasible,
    };
    DraDecision::Placed(Box::new(DraPlacement { placement, fit }))
}

/// Sets every node's held GPUs in `inventory` to those `snapshot` does not
/// have free: bound and assumed pods, reservations, nominations. Called
/// before each decision, as the snapshot changes within a cycle.
pub fn hold_snapshot(inventory: &mut DraInventory, snapshot: &Snapshot) {
    for node in snapshot.nodes() {
        inventory.hold(node.name(), node.gpus() & !node.free_gpus());
    }
}

/// `a` (with node score `ap`) against `b`: the GPU set's quality first.
fn rank(a: &DraFit, ap: &ScoreParts, b: &DraFit, bp: &ScoreParts) -> Ordering {
    let quality = |f: &DraFit| {
        (
            f.pick.bottleneck.is_none(),
            f.pick.bottleneck,
            std::cmp::Reverse(f.pick.numa_nodes),
        )
    };
    quality(a)
        .cmp(&quality(b))
        .then(ap.total.total_cmp(&bp.total))
        // The node whose name sorts first wins a tie (nodes come in name order).
        .then(Ordering::Less)
}
