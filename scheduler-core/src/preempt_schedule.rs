//! Preemption on the cluster snapshot: for a pod or a gang that cannot fit,
//! which running pods to evict so that a *usable* GPU set frees up, chosen by
//! [`crate::preempt::propose`] under its rules (never equal or higher
//! priority, inference before training, protected training last, fewest
//! GPU-hours lost, gangs whole).
//!
//! A node is a candidate when the preemptor passes the predicates eviction
//! cannot change (unschedulable, `spec.nodeName`, taints, selector and
//! required affinity), its host ports, topology spread and inter-pod
//! affinity admit it as it is (evictions here free GPUs; they are never
//! made for a rule that would still refuse the node), and its
//! `GpuTopology` is known. CPU and memory are not
//! part of the proposal: the freed node is filtered in full again when the
//! preemptor is scheduled after the evictions, as kube-scheduler's nominated
//! pods are.

use crate::config::SchedulerConfig;
use crate::filter::PodContext;
use crate::gang::{GangNode, Within};
use crate::pod::PendingPod;
use crate::preempt::{
    PreemptCluster, PreemptNoFit, PreemptNode, PreemptionPolicy, Preemptor, Victim, propose,
};
use crate::snapshot::{NodeId, Snapshot};
use gputopo_api::k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeSet, HashSet};
use std::time::SystemTime;

/// Who to evict, and where the preemptor's members go afterwards.
#[derive(Clone, Debug, PartialEq)]
pub struct PreemptionPlan {
    /// `namespace/name` of every pod to evict (all members of an evicted gang).
    pub victims: Vec<String>,
    /// Per preemptor member, in order: the node and the GPUs it will get.
    pub members: Vec<(String, Vec<u32>)>,
    /// GPU-hours of work the evictions lose.
    pub gpu_hours_lost: f64,
    pub explanation: String,
}

/// Why no preemption is proposed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PreemptionError {
    #[error("nothing to place")]
    NoMembers,
    #[error("{pod} asks for no whole GPU: preemption frees whole GPUs")]
    NoWholeGpus { pod: String },
    #[error(
        "gang members {first} and {other} ask for different GPU sets; preemption for a gang needs members that ask the same"
    )]
    MembersDiffer { first: String, other: String },
    /// The search found no evictions that would free a usable GPU set.
    #[error(transparent)]
    NoFit(#[from] PreemptNoFit),
}

fn system_time(t: Timestamp) -> SystemTime {
    SystemTime::from(t)
}

/// Proposes the cheapest evictions for `members` (one pod, or a gang whose
/// members ask the same); `Err` says why none would help.
pub fn propose_preemption(
    snapshot: &Snapshot,
    members: &[PendingPod],
    config: &SchedulerConfig,
    policy: &PreemptionPolicy,
    now: Timestamp,
) -> Result<PreemptionPlan, PreemptionError> {
    propose_preemption_sparing(snapshot, members, config, policy, now, &BTreeSet::new())
}

/// [`propose_preemption`], never choosing a pod of `spared` (`namespace/name`)
/// nor any member of a gang one of them belongs to: the scheduler passes the
/// pods whose eviction the API server refused (a PodDisruptionBudget), so
/// that the next proposal works around them.
pub fn propose_preemption_sparing(
    snapshot: &Snapshot,
    members: &[PendingPod],
    config: &SchedulerConfig,
    policy: &PreemptionPolicy,
    now: Timestamp,
    spared: &BTreeSet<String>,
) -> Result<PreemptionPlan, PreemptionError> {
    let first = members.first().ok_or(PreemptionError::NoMembers)?;
    let ctx = PodContext::new(snapshot, first, config);
    let request = ctx
        .set_request()
        .copied()
        .ok_or_else(|| PreemptionError::NoWholeGpus { pod: first.key() })?;
    for m in &members[1..] {
        let other = PodContext::new(snapshot, m, config);
        if other.set_request().copied() != Some(request) {
            return Err(PreemptionError::MembersDiffer {
                first: first.key(),
                other: m.key(),
            });
        }
    }
    let now_st = system_time(now);
    let gang_of = |p: &crate::snapshot::BoundPod| {
        p.request
            .as_ref()
            .and_then(|r| r.gang.as_ref())
            .map(|g| format!("{}/{}", p.namespace, g.name()))
    };
    // A gang is evicted whole or not at all: sparing one member spares all.
    let spared_gangs: HashSet<String> = snapshot
        .pods()
        .filter(|(_, p)| spared.contains(&p.key()))
        .filter_map(|(_, p)| gang_of(p))
        .collect();
    let mut nodes = Vec::new();
    for i in 0..snapshot.len() {
        let node = snapshot.node(NodeId(i as u32));
        let Some(shape) = node.shape() else { continue };
        if !ctx.admits(i) || !ctx.pod_rules_admit(i) {
            continue;
        }
        let victims = node
            .pods()
            .filter(|(_, p)| p.gpus != 0 && p.priority < first.priority)
            .filter(|(_, p)| {
                !spared.contains(&p.key()) && gang_of(p).is_none_or(|g| !spared_gangs.contains(&g))
            })
            .map(|(id, p)| {
                let request = p.request.as_ref();
                Victim {
                    id: id.0 as usize,
                    name: p.key(),
                    priority: p.priority,
                    workload: p.workload(),
                    gpus: p.gpus,
                    // A pod that has not started has lost no work.
                    start: p.start_time.map_or(now_st, system_time),
                    checkpoint: request.and_then(|r| r.checkpoint_time).map(system_time),
                    expected_completion: request
                        .and_then(|r| r.expected_completion)
                        .map(system_time),
                    gang: gang_of(p),
                }
            })
            .collect();
        nodes.push(PreemptNode {
            node: GangNode::of(&node, shape),
            victims,
        });
    }
    let cluster = PreemptCluster {
        tier_names: snapshot.tiers().keys().to_vec(),
        nodes,
    };
    let preemptor = Preemptor {
        priority: first.priority,
        request,
        members: members.len() as u32,
        within: Within::Anywhere,
    };
    let proposal = propose(&preemptor, &cluster, policy, now_st)?;
    Ok(PreemptionPlan {
        victims: proposal.victims.iter().map(|v| v.name.clone()).collect(),
        members: proposal
            .members
            .iter()
            .map(|m| {
                let node = snapshot.node(NodeId(m.node as u32)).name().to_string();
                (node, crate::snapshot::bit_indices(m.gpus))
            })
            .collect(),
        gpu_hours_lost: proposal.cost.gpu_hours(),
        explanation: proposal.explanation,
    })
}
