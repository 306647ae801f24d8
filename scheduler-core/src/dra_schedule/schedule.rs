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

use super::judge::{DraJudge, rank};
use crate::config::SchedulerConfig;
use crate::dra::DraFit;
use crate::dra::DraInventory;
use crate::dra::{CelEnv, DeviceValue, DraPod, Mode, RequestPlan};
use crate::pod::PendingPod;
use crate::schedule::{Placement, message_from_counts};
use crate::score::ScoreParts;
use crate::selector::NodeAffinity;
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
        /// Nodes where evicting pods could make room (their rejection is
        /// resolvable): where preemption may look, and nowhere else.
        preemptible: Vec<String>,
    },
}

impl DraPod {
    /// GPUs the pod's unallocated `ExactCount` requests take: what the node
    /// filter checks free GPUs against. A request counts when its class
    /// selects GPUs (one of `inventory`'s GPU samples); requests for other
    /// drivers' devices (channels, NICs) do not. (`All` requests and
    /// allocated claims take fixed devices, checked by [`DraPod::fit`].)
    pub fn counted_gpus(&self, inventory: &DraInventory) -> u32 {
        let env = CelEnv::default();
        let samples: Vec<DeviceValue> = inventory
            .gpu_samples()
            .iter()
            .filter_map(|d| DeviceValue::new(&env, d).ok())
            .collect();
        let gpus = |r: &RequestPlan| match r.mode {
            Mode::Count(n) if !r.admin_access && r.class_selects_any(&env, &samples) => n,
            _ => 0,
        };
        self.claims
            .iter()
            .filter(|c| c.allocated.is_none())
            .flat_map(|c| {
                c.requests
                    .iter()
                    .enumerate()
                    .map(|(i, r)| match c.first_available.get(&i) {
                        // The fewest any subrequest takes: the filter must not
                        // refuse a node where a later one fits.
                        Some(subs) => subs.iter().map(gpus).min().unwrap_or(0),
                        None => gpus(r),
                    })
            })
            .fold(0u32, u32::saturating_add)
    }

    /// `pod` as preemption sees it: [`DraPod::judged`], kept to the nodes
    /// where its claims could fit once victims are gone (`preemptible`,
    /// from [`DraDecision::Unschedulable`]): a node without the pod's
    /// NICs or channel is no place to nominate it.
    pub fn judged_for_preemption(
        &self,
        pod: &PendingPod,
        inventory: &DraInventory,
        preemptible: Vec<String>,
    ) -> PendingPod {
        let mut judged = self.judged(pod, inventory);
        judged.affinity = Some(NodeAffinity::restricted_to(
            judged.affinity.as_ref(),
            preemptible,
        ));
        judged
    }

    /// `pod` as the node filter and the gang rule see it: asking for the
    /// claims' GPU count, whole, and not for the device plugin's resource.
    pub fn judged(&self, pod: &PendingPod, inventory: &DraInventory) -> PendingPod {
        let mut judged = pod.clone();
        judged.request.gpus = self.counted_gpus(inventory);
        judged.request.gpu_share = None;
        judged.requests.gpus = 0;
        // Its devices come through claims, whatever count they show.
        judged.resource_claims = true;
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
/// `dra/extended.rs`): only nodes whose GPUs are not the node's allocatable
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
    let judged = dra.judged(pod, inventory);
    let mut judge = DraJudge::new(snapshot, inventory, dra, &judged, config).deciding_alone();
    if dra_nodes_only {
        judge = judge.extended_only();
    }
    let mut best: Option<(DraFit, ScoreParts, NodeId)> = None;
    let mut feasible = 0usize;
    let mut phrases: HashMap<String, usize> = HashMap::new();
    let mut preemptible = Vec::new();
    for i in 0..snapshot.len() {
        let id = NodeId(i as u32);
        match judge.judge(id) {
            Ok((fit, parts)) => {
                feasible += 1;
                // Nodes come in name order: a tie keeps the first.
                let wins = best
                    .as_ref()
                    .is_none_or(|(b, bp, _)| rank(&fit, &parts, b, bp) == Ordering::Greater);
                if wins {
                    best = Some((fit, parts, id));
                }
            }
            Err(rejection) => {
                if rejection.resolvable() {
                    preemptible.push(snapshot.node(id).name().to_string());
                }
                for phrase in rejection.summaries() {
                    *phrases.entry(phrase).or_default() += 1;
                }
            }
        }
    }
    let Some((fit, parts, id)) = best else {
        return DraDecision::Unschedulable {
            message: message_from_counts(snapshot.len(), phrases),
            preemptible,
        };
    };
    let context = format!("best of {feasible} feasible of {} nodes", snapshot.len());
    let placement = judge.placement(id, &fit, parts, feasible, &context);
    DraDecision::Placed(Box::new(DraPlacement { placement, fit }))
}
