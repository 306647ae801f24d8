//! Victims the preemptor's own rules need gone: another pod's host port or
//! exclusive disk, an inter-pod anti-affinity (the preemptor's or a bound
//! pod's), a topology spread a node's pods hold over its skew. Chosen on one
//! node as kube-scheduler's DefaultPreemption chooses them: every
//! lower-priority candidate taken off; if the node then admits the
//! preemptor, each is given back, most important first (higher priority,
//! then the earlier start), and stays a victim only where the node would
//! refuse with it back.
//!
//! Each judgement builds the pod's decision context again on a copy of the
//! snapshot (the rules' per-decision tables count pods cluster-wide), so
//! the work is bounded: [`MAX_RULE_NODES`] nodes per proposal and
//! [`MAX_CANDIDATES`] candidates per node; beyond that a node is not tried.

use crate::config::SchedulerConfig;
use crate::filter::PodContext;
use crate::pod::PendingPod;
use crate::snapshot::{PodId, Snapshot};
use std::cmp::Reverse;

/// Nodes per proposal whose rule victims are looked for.
pub(crate) const MAX_RULE_NODES: usize = 16;
/// Lower-priority pods a node may hold for its rule victims to be looked for.
pub(crate) const MAX_CANDIDATES: usize = 16;

/// What must hold on the node once the victims are gone.
#[derive(Clone, Copy)]
pub(crate) enum NodeCheck {
    /// The pod rules only (host ports, disks, inter-pod, spread): the GPU
    /// search frees GPUs itself.
    Rules,
    /// The whole filter: a pod that asks no whole GPU.
    Filter,
}

impl NodeCheck {
    fn holds(
        self,
        snapshot: &Snapshot,
        pod: &PendingPod,
        config: &SchedulerConfig,
        index: usize,
    ) -> bool {
        let ctx = PodContext::new(snapshot, pod, config);
        match self {
            NodeCheck::Rules => ctx.pod_rules_admit(index),
            NodeCheck::Filter => ctx.filter(index).is_ok(),
        }
    }
}

/// The pods among `candidates` (lower-priority pods of node `index`) that
/// must go for `check` to hold there, fewest and least important; `None`
/// when even evicting all of them leaves the node refusing.
pub(crate) fn victims_on_node(
    snapshot: &Snapshot,
    pod: &PendingPod,
    config: &SchedulerConfig,
    index: usize,
    candidates: &[PodId],
    check: NodeCheck,
) -> Option<Vec<PodId>> {
    let holds_without = |removed: &[PodId]| {
        let mut trial = snapshot.clone();
        for &id in removed {
            trial.remove_pod(id);
        }
        check.holds(&trial, pod, config, index)
    };
    if !holds_without(candidates) {
        return None;
    }
    let mut order = candidates.to_vec();
    order.sort_by_key(|&id| {
        let p = snapshot.pod(id);
        let start = p.and_then(|p| p.start_time);
        (
            Reverse(p.map_or(i32::MIN, |p| p.priority)),
            start.is_none(),
            start,
            id,
        )
    });
    let mut victims: Vec<PodId> = Vec::new();
    for (k, &id) in order.iter().enumerate() {
        // `id` given back: gone are the victims so far and those not yet judged.
        let mut removed = victims.clone();
        removed.extend_from_slice(&order[k + 1..]);
        if !holds_without(&removed) {
            victims.push(id);
        }
    }
    Some(victims)
}
