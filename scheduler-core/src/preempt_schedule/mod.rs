//! Preemption on the cluster snapshot: for a pod or a gang that cannot fit,
//! which running pods to evict so that a *usable* GPU set frees up, chosen by
//! [`crate::preempt::propose`] under its rules (never equal or higher
//! priority, inference before training, protected training last, fewest
//! GPU-hours lost, gangs whole).
//!
//! A node is a candidate when the preemptor passes the predicates eviction
//! cannot change (unschedulable, `spec.nodeName`, taints, selector and
//! required affinity) and its `GpuTopology` is known. Where its host ports,
//! exclusive disks, topology spread or inter-pod affinity refuse the
//! preemptor as the node is, the lower-priority pods whose eviction lets
//! them admit it are that node's *rule victims* (`rules.rs`, as
//! kube-scheduler's DefaultPreemption picks them): any member placed there
//! evicts them besides the GPU victims. Once the search has chosen, the
//! rules are judged again with every victim gone, so an eviction is never
//! counted as making room that a rule would still refuse (a victim the
//! preemptor's required affinity needs, a spread it would skew); a node
//! that fails is left out and the search runs again. CPU and memory are
//! not part of the GPU proposal: the freed node is filtered in full again
//! when the preemptor is scheduled after the evictions, as kube-scheduler's
//! nominated pods are. A pod asking no whole GPU is preempted for as
//! kube-scheduler would (`without_gpus.rs`).

use crate::config::SchedulerConfig;
use crate::filter::PodContext;
use crate::gang::{GangNode, Within};
use crate::pod::PendingPod;
use crate::preempt::{
    PreemptCluster, PreemptNoFit, PreemptNode, PreemptionPolicy, Preemptor, Proposal, Victim,
    propose,
};
use crate::snapshot::{BoundPod, NodeId, PodId, Snapshot};
use gputopo_api::k8s_openapi::jiff::Timestamp;
use rules::{MAX_CANDIDATES, MAX_RULE_NODES, NodeCheck, victims_on_node};
use std::collections::{BTreeSet, HashSet};
use std::time::SystemTime;

mod mixed;
mod rules;
mod structured;
mod without_gpus;

/// Times the search runs again after the rules refused a node it chose.
const RULE_RETRIES: usize = 3;

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
    /// With the chosen victims gone, the pod's own rules still refuse the
    /// nodes the search chose (and those chosen instead).
    #[error(
        "evicting the victims would still leave {nodes} refusing the pod's own rules (an affinity to an evicted pod, a spread the move would skew)"
    )]
    RulesStillRefuse { nodes: String },
    /// A pod asking no whole GPU: no node tried admits it even with its
    /// lower-priority pods gone.
    #[error(
        "{pod}: no node admits it even with its lower-priority pods evicted ({tried} node(s) with such pods tried, at most {})",
        rules::MAX_RULE_NODES
    )]
    NoRoomWithoutGpus { pod: String, tried: usize },
    /// A gang of members asking different GPU sets: the evictions found
    /// group by group would still not let the whole gang be placed.
    #[error(
        "evicting the {victims} pod(s) found for the gang's members, group by group, would still not place the whole gang: {why}"
    )]
    MixedGangUnmet { victims: usize, why: String },
    /// The gang's structure cannot be read on this cluster's tiers.
    #[error(transparent)]
    Structure(#[from] crate::gang_schedule::structure::StructureError),
    /// The room the cheapest evictions free would still not hold the gang
    /// with its structure (its slices, its required domain).
    #[error(
        "no eviction is proposed: the room the cheapest evictions free would not hold the gang with its structure ({why})"
    )]
    StructureUnmet { why: String },
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
    if mixed::is_mixed(snapshot, members, config) {
        return mixed::propose(snapshot, members, config, policy, now, spared);
    }
    let ctx = PodContext::new(snapshot, first, config);
    let spared = Spared::new(snapshot, spared);
    let Some(request) = ctx.set_request().copied() else {
        if members.len() == 1 {
            return without_gpus::propose(snapshot, first, config, policy, now, &spared);
        }
        return Err(PreemptionError::NoWholeGpus { pod: first.key() });
    };
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
    let nodes = candidate_nodes(&ctx, first, &spared, now_st);
    let structured = structured::read(snapshot, members)?;
    let mut preemptor = Preemptor {
        priority: first.priority,
        request,
        members: members.len() as u32,
        within: structured
            .as_ref()
            .map_or(Within::Anywhere, |(_, within)| within.clone()),
    };
    let mut narrowed = false;
    let mut unmet: Option<String> = None;
    let mut left_out: BTreeSet<usize> = BTreeSet::new();
    let still_refusing = |left_out: &BTreeSet<usize>| PreemptionError::RulesStillRefuse {
        nodes: left_out
            .iter()
            .map(|&i| snapshot.node(NodeId(i as u32)).name().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    };
    for _ in 0..=RULE_RETRIES {
        let cluster = PreemptCluster {
            tier_names: snapshot.tiers().keys().to_vec(),
            nodes: nodes
                .iter()
                .filter(|n| !left_out.contains(&n.node.id))
                .cloned()
                .collect(),
        };
        let proposal = match propose(&preemptor, &cluster, policy, now_st) {
            Ok(proposal) => proposal,
            // Without the nodes the rules refused, nothing is left: say why.
            Err(_) if !left_out.is_empty() => return Err(still_refusing(&left_out)),
            // The narrower search for the slices found nothing either: the
            // first proposal's reason stands.
            Err(_) if narrowed => {
                return Err(PreemptionError::StructureUnmet {
                    why: unmet.take().unwrap_or_default(),
                });
            }
            Err(e) => return Err(e.into()),
        };
        let refusing = nodes_still_refusing(snapshot, first, config, &proposal);
        if refusing.is_empty() {
            let Some((structure, _)) = &structured else {
                return Ok(plan_of(snapshot, proposal));
            };
            match structured::room_breaks(snapshot, members, config, &proposal) {
                None => return Ok(plan_of(snapshot, proposal)),
                Some(why) => match structured::slice_scope(structure, snapshot) {
                    Some(scope) if !narrowed && preemptor.within == Within::Anywhere => {
                        preemptor.within = scope;
                        narrowed = true;
                        unmet = Some(why);
                        continue;
                    }
                    _ => return Err(PreemptionError::StructureUnmet { why }),
                },
            }
        }
        left_out.extend(refusing);
    }
    Err(still_refusing(&left_out))
}

/// The nodes of `proposal` whose rules refuse `pod` once every victim is gone.
fn nodes_still_refusing(
    snapshot: &Snapshot,
    pod: &PendingPod,
    config: &SchedulerConfig,
    proposal: &Proposal,
) -> Vec<usize> {
    if proposal.victims.is_empty() {
        return Vec::new();
    }
    let mut after = snapshot.clone();
    for v in &proposal.victims {
        after.remove_pod(PodId(v.id as u32));
    }
    let ctx = PodContext::new(&after, pod, config);
    proposal
        .members
        .iter()
        .map(|m| m.node)
        .filter(|&i| !ctx.pod_rules_admit(i))
        .collect()
}

/// Who preemption may not touch: the pods whose eviction a budget refused,
/// and every member of their gangs.
pub(crate) struct Spared {
    pods: BTreeSet<String>,
    gangs: HashSet<String>,
}

impl Spared {
    fn new(snapshot: &Snapshot, pods: &BTreeSet<String>) -> Spared {
        let gangs = snapshot
            .pods()
            .filter(|(_, p)| pods.contains(&p.key()))
            .filter_map(|(_, p)| gang_of(p))
            .collect();
        Spared {
            pods: pods.clone(),
            gangs,
        }
    }

    /// Whether `p` may be evicted as far as budgets go.
    pub(crate) fn allows(&self, p: &BoundPod) -> bool {
        !self.pods.contains(&p.key()) && gang_of(p).is_none_or(|g| !self.gangs.contains(&g))
    }

    /// `victims` with every other member of their gangs, sorted; `None`
    /// when one of those may not go (spared, or not of lower priority).
    pub(crate) fn with_gangs(
        &self,
        snapshot: &Snapshot,
        victims: &[PodId],
        priority: i32,
    ) -> Option<Vec<PodId>> {
        let gangs: HashSet<String> = victims
            .iter()
            .filter_map(|&id| snapshot.pod(id).and_then(gang_of))
            .collect();
        let mut all: Vec<PodId> = victims.to_vec();
        for (id, p) in snapshot.pods() {
            if gang_of(p).is_some_and(|g| gangs.contains(&g)) {
                if !self.allows(p) || p.priority >= priority {
                    return None;
                }
                all.push(id);
            }
        }
        all.sort_unstable();
        all.dedup();
        Some(all)
    }
}

/// `namespace/gang` of a pod in a gang.
fn gang_of(p: &BoundPod) -> Option<String> {
    p.request
        .as_ref()
        .and_then(|r| r.gang.as_ref())
        .map(|g| format!("{}/{}", p.namespace, g.name()))
}

/// The nodes the GPU search may use, each with its lower-priority pods
/// holding GPUs and, where the pod rules refuse the preemptor as the node
/// is, its rule victims (required).
fn candidate_nodes(
    ctx: &PodContext<'_>,
    first: &PendingPod,
    spared: &Spared,
    now: SystemTime,
) -> Vec<PreemptNode> {
    let snapshot = ctx.snapshot;
    let mut nodes = Vec::new();
    let mut rule_nodes = 0usize;
    for i in 0..snapshot.len() {
        let node = snapshot.node(NodeId(i as u32));
        let Some(shape) = node.shape() else { continue };
        if !ctx.admits(i) {
            continue;
        }
        let lower: Vec<PodId> = node
            .pods()
            .filter(|(_, p)| p.priority < first.priority && spared.allows(p))
            .map(|(id, _)| id)
            .collect();
        let required: Vec<PodId> = if ctx.pod_rules_admit(i) {
            Vec::new()
        } else {
            if rule_nodes >= MAX_RULE_NODES || lower.len() > MAX_CANDIDATES {
                continue;
            }
            rule_nodes += 1;
            match victims_on_node(snapshot, first, ctx.config, i, &lower, NodeCheck::Rules) {
                Some(v) => v,
                None => continue,
            }
        };
        let victims: Vec<Victim> = node
            .pods()
            .filter(|(id, p)| required.contains(id) || (p.gpus != 0 && lower.contains(id)))
            .map(|(id, p)| victim(id, p, now))
            .collect();
        let required = victims
            .iter()
            .enumerate()
            .filter(|(_, v)| required.contains(&PodId(v.id as u32)))
            .map(|(k, _)| k)
            .collect();
        nodes.push(PreemptNode {
            node: GangNode::of(&node, shape),
            victims,
            required,
        });
    }
    nodes
}

/// The plan a proposal makes, by name.
fn plan_of(snapshot: &Snapshot, proposal: Proposal) -> PreemptionPlan {
    PreemptionPlan {
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
    }
}

/// A bound pod as the GPU search prices it.
fn victim(id: PodId, p: &BoundPod, now: SystemTime) -> Victim {
    let request = p.request.as_ref();
    Victim {
        id: id.0 as usize,
        name: p.key(),
        priority: p.priority,
        workload: p.workload(),
        gpus: p.gpus,
        // A pod that has not started has lost no work.
        start: p.start_time.map_or(now, system_time),
        checkpoint: request.and_then(|r| r.checkpoint_time).map(system_time),
        expected_completion: request.and_then(|r| r.expected_completion).map(system_time),
        gang: gang_of(p),
    }
}
