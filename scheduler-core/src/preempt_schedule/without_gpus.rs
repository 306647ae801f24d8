//! Preemption for a pod that asks no whole GPU (a cpu pod whose host port a
//! lower-priority pod holds, a shared-GPU pod, a pod kept out by another's
//! anti-affinity): kube-scheduler's DefaultPreemption. On each node the
//! filter could admit, the fewest, least important lower-priority pods
//! whose eviction lets the whole filter pass (`rules.rs`); among nodes,
//! the one whose most important victim matters least, then the smallest
//! sum of victims' priorities, then the fewest victims, then the name.
//! A victim in a gang takes its whole gang with it, as every eviction here.

use super::rules::{MAX_CANDIDATES, MAX_RULE_NODES, NodeCheck, victims_on_node};
use super::{PreemptionError, PreemptionPlan, Spared, system_time, victim};
use crate::config::SchedulerConfig;
use crate::filter::PodContext;
use crate::pod::PendingPod;
use crate::preempt::PreemptionPolicy;
use crate::snapshot::{NodeId, PodId, Snapshot};
use gputopo_api::k8s_openapi::jiff::Timestamp;

/// How a node's victims rank: less is better.
type Rank = (i32, i64, usize);

pub(super) fn propose(
    snapshot: &Snapshot,
    pod: &PendingPod,
    config: &SchedulerConfig,
    policy: &PreemptionPolicy,
    now: Timestamp,
    spared: &Spared,
) -> Result<PreemptionPlan, PreemptionError> {
    let ctx = PodContext::new(snapshot, pod, config);
    let mut best: Option<(Rank, usize, Vec<PodId>)> = None;
    let mut tried = 0usize;
    for i in 0..snapshot.len() {
        if tried >= MAX_RULE_NODES {
            break;
        }
        if !ctx.admits(i) || ctx.filter(i).is_ok() {
            continue;
        }
        let node = snapshot.node(NodeId(i as u32));
        let candidates: Vec<PodId> = node
            .pods()
            .filter(|(_, p)| p.priority < pod.priority && spared.allows(p))
            .map(|(id, _)| id)
            .collect();
        if candidates.is_empty() || candidates.len() > MAX_CANDIDATES {
            continue;
        }
        tried += 1;
        let Some(on_node) =
            victims_on_node(snapshot, pod, config, i, &candidates, NodeCheck::Filter)
        else {
            continue;
        };
        let Some(victims) = spared.with_gangs(snapshot, &on_node, pod.priority) else {
            continue;
        };
        let rank = rank(snapshot, &victims);
        if best.as_ref().is_none_or(|(b, _, _)| rank < *b) {
            best = Some((rank, i, victims));
        }
    }
    let Some((_, index, victims)) = best else {
        return Err(PreemptionError::NoRoomWithoutGpus {
            pod: pod.key(),
            tried,
        });
    };
    let node = snapshot.node(NodeId(index as u32)).name().to_string();
    let now = system_time(now);
    let priced: Vec<_> = victims
        .iter()
        .filter_map(|&id| snapshot.pod(id).map(|p| victim(id, p, now)))
        .collect();
    let names: Vec<String> = priced.iter().map(|v| v.name.clone()).collect();
    let seconds: u64 = priced
        .iter()
        .map(|v| policy.loss(v, v.gpus.count_ones(), now))
        .sum();
    Ok(PreemptionPlan {
        explanation: format!(
            "on {node}, evicting {} lets the pod's rules and requests pass (the fewest, least important lower-priority pods, as kube-scheduler's DefaultPreemption)",
            names.join(", ")
        ),
        victims: names,
        members: vec![(node, Vec::new())],
        gpu_hours_lost: seconds as f64 / 3600.0,
    })
}

/// The most important victim's priority, the sum of priorities, the count.
fn rank(snapshot: &Snapshot, victims: &[PodId]) -> Rank {
    let priorities = victims
        .iter()
        .filter_map(|&id| snapshot.pod(id))
        .map(|p| p.priority);
    (
        priorities.clone().max().unwrap_or(i32::MIN),
        priorities.map(i64::from).sum(),
        victims.len(),
    )
}
