//! One pod's decision: filter every node, score the feasible ones, take the
//! best (ties to the node whose name sorts first), and say why; or, when no
//! node fits, count the reasons over all nodes into one message in
//! kube-scheduler's style.
//!
//! Gang members are placed together by the `gang` module; `schedule` decides
//! a single pod and does not look at its gang.
//!
//! # Cost
//!
//! Per node: the filter (integer compares and one cached GPU-set lookup) and
//! the score (a few float operations); nothing is allocated and no string is
//! formatted until the winner is known. When no node fits, a second pass
//! builds the typed reasons.

use crate::config::SchedulerConfig;
use crate::filter::{FilterReason, Fit, PodContext, Rejection};
use crate::pod::{PendingPod, PodError};
use crate::score::{ScoreParts, Scorer, bottleneck_text};
use crate::snapshot::{BoundPodInput, GpuHolding, NodeId, SharedHold, Snapshot};
use crate::volumes::VolumePlan;
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_api::{GpuShare, LinkClass};
use std::collections::HashMap;

/// What the scheduler decided for one pod.
// One per decision, moved to its caller and read, never kept in bulk:
// boxing the placement would cost an allocation per decision for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Placed(Placement),
    Unschedulable(Unschedulable),
}

impl Decision {
    pub fn placement(&self) -> Option<&Placement> {
        match self {
            Decision::Placed(p) => Some(p),
            Decision::Unschedulable(_) => None,
        }
    }

    pub fn unschedulable(&self) -> Option<&Unschedulable> {
        match self {
            Decision::Placed(_) => None,
            Decision::Unschedulable(u) => Some(u),
        }
    }
}

/// A node and GPUs for the pod, with the reasons.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    /// `namespace/name`.
    pub pod: String,
    pub node: String,
    pub node_id: NodeId,
    /// GPUs held whole, sorted; for a shared pod, the one GPU it shares.
    pub gpus: Vec<u32>,
    /// UUIDs of `gpus`, in the same order, when the topology names every one.
    pub gpu_uuids: Vec<String>,
    /// A shared pod's part of its GPU.
    pub shared: Option<SharedHold>,
    /// The set's ring hop or weakest pair; `None` for one GPU, a shared
    /// pod, a pod without GPUs, or a node without `GpuTopology`.
    pub bottleneck: Option<LinkClass>,
    /// Whether the node has a usable `GpuTopology`.
    pub topology_known: bool,
    /// The GPUs were counted, not chosen: pods on the node hold GPUs that
    /// neither their record nor the node's report names, so which are free
    /// is not known. `gpus` are stand-ins for the count and are not written
    /// on the pod; the kubelet (or device plugin) picks among the free ones.
    pub by_count: bool,
    /// 0–100.
    pub score: u8,
    pub parts: ScoreParts,
    /// Why this node and these GPUs, for the `Scheduled` event.
    pub explanation: String,
    /// Nodes that passed the filter.
    pub feasible_nodes: usize,
    /// What to write for the pod's waiting claims before the binding.
    pub volumes: VolumePlan,
}

impl Placement {
    /// Whether the placement names GPUs the pod should get: whole or
    /// shared GPUs, not counted ones.
    pub fn names_gpus(&self) -> bool {
        !self.gpus.is_empty() && !self.by_count
    }

    /// `0,1,2,3`: the `gputopo.dev/assigned-gpus` annotation.
    pub fn assigned_gpus(&self) -> String {
        join(&self.gpus)
    }

    /// The `gputopo.dev/assigned-gpu-uuids` annotation, when every UUID is known.
    pub fn assigned_gpu_uuids(&self) -> Option<String> {
        (!self.gpu_uuids.is_empty() && self.gpu_uuids.len() == self.gpus.len())
            .then(|| self.gpu_uuids.join(","))
    }

    /// The pod as bound by this placement, to add to a snapshot
    /// ([`Snapshot::add_pod`]) before the next decision.
    pub fn bound_pod(&self, pod: &PendingPod) -> BoundPodInput {
        let holding = match (pod.request.gpu_share, self.gpus.first()) {
            (Some(share), gpu) => GpuHolding::Shared {
                gpu: gpu.copied(),
                share,
            },
            (None, _) if self.by_count => {
                GpuHolding::Unknown(u32::try_from(self.gpus.len()).unwrap_or(u32::MAX))
            }
            (None, _) if !self.gpus.is_empty() => GpuHolding::Whole(self.gpus.clone()),
            (None, _) => GpuHolding::None,
        };
        BoundPodInput {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            node: self.node.clone(),
            requests: pod.requests.clone(),
            holding,
            request: Ok(pod.request.clone()),
            priority: pod.priority,
            start_time: None,
            unreadable_assignment: None,
            constraints: pod.constraints.clone(),
            terminating: false,
        }
    }
}

/// No node can take the pod now.
#[derive(Clone, Debug, PartialEq)]
pub struct Unschedulable {
    /// `namespace/name`.
    pub pod: String,
    /// The `FailedScheduling` message: `0/64 nodes are available: 40 too few
    /// free GPUs, 24 no 4-GPU set with NV12.`, or the pod's own error.
    pub message: String,
    /// Every node's reason, in node-name order (empty when the pod itself is invalid).
    pub rejections: Vec<NodeRejection>,
    /// The pod's spec or annotations are malformed: the error names the key.
    pub invalid_pod: Option<PodError>,
}

/// Why one node was rejected.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRejection {
    pub node: String,
    pub reason: FilterReason,
}

/// A feasible node as the loop keeps it.
#[derive(Clone, Copy)]
pub(crate) struct Candidate {
    pub(crate) node: NodeId,
    pub(crate) fit: Fit,
    pub(crate) parts: ScoreParts,
}

/// Decides `pod` on `snapshot`; see the module docs.
pub fn schedule(snapshot: &Snapshot, pod: &PendingPod, config: &SchedulerConfig) -> Decision {
    let ctx = PodContext::new(snapshot, pod, config);
    // A pod with preferences is scored against the feasible nodes as a
    // whole (kube-scheduler normalises over them): they are collected first.
    let (scorer, all): (Scorer, Box<dyn Iterator<Item = (usize, Fit)>>) = if Scorer::prefers(&ctx) {
        let collected: Vec<(usize, Fit)> = feasible(&ctx).collect();
        (
            Scorer::over(&ctx, &collected),
            Box::new(collected.into_iter()),
        )
    } else {
        (Scorer::alone(&ctx), Box::new(feasible(&ctx)))
    };
    // Only (node, total) is kept in the loop; the winner's fit and parts are
    // computed again once it is known, so no node pays for copying them.
    let mut best: Option<(usize, f64)> = None;
    let mut runner_up: Option<(usize, f64)> = None;
    let mut feasible = 0usize;
    for (i, fit) in all {
        feasible += 1;
        let total = scorer.score(&ctx, i, &fit).total;
        match best {
            Some((_, b)) if total <= b => {
                if runner_up.is_none_or(|(_, r)| total > r) {
                    runner_up = Some((i, total));
                }
            }
            _ => {
                runner_up = best;
                best = Some((i, total));
            }
        }
    }
    let candidate = |(i, _): (usize, f64)| {
        let fit = ctx.filter(i).ok()?;
        Some(Candidate {
            node: NodeId(i as u32),
            fit,
            parts: scorer.score(&ctx, i, &fit),
        })
    };
    match best.and_then(candidate) {
        Some(best) => Decision::Placed(placement(
            &ctx,
            best,
            runner_up.and_then(candidate),
            feasible,
        )),
        None => Decision::Unschedulable(unschedulable(&ctx)),
    }
}

/// The nodes the pod's filter admits, with their fits. Feasibility does not
/// depend on the order predicates run in, only the reported reason does
/// (that is the second pass): nodes with too few free GPUs are skipped
/// first, from a byte per node.
pub(crate) fn feasible<'c>(ctx: &'c PodContext<'_>) -> impl Iterator<Item = (usize, Fit)> + 'c {
    let whole = ctx.whole_gpus();
    ctx.snapshot
        .free_counts
        .iter()
        .enumerate()
        .filter(move |&(_, &free)| u32::from(free) >= whole)
        .filter_map(|(i, _)| ctx.filter(i).ok().map(|fit| (i, fit)))
}

/// Reads `pod` and decides it; a malformed pod is `Unschedulable` with the
/// error (naming the key) as its message, never a panic.
pub fn schedule_pod(snapshot: &Snapshot, pod: &Pod, config: &SchedulerConfig) -> Decision {
    match PendingPod::from_k8s(pod) {
        Ok(pending) => schedule(snapshot, &pending, config),
        Err(error) => Decision::Unschedulable(invalid(&error)),
    }
}

/// The decision for a pod that cannot be read.
pub(crate) fn invalid(error: &PodError) -> Unschedulable {
    let pod = match error {
        PodError::Request { pod, .. }
        | PodError::Quantity { pod, .. }
        | PodError::Selector { pod, .. } => pod.clone(),
    };
    Unschedulable {
        pod,
        message: error.to_string(),
        rejections: Vec::new(),
        invalid_pod: Some(error.clone()),
    }
}

pub(crate) fn unschedulable(ctx: &PodContext<'_>) -> Unschedulable {
    let mut rejections = Vec::with_capacity(ctx.snapshot.len());
    // The message counts phrases, and a phrase depends only on the rejection
    // (never on the node), so each distinct rejection is phrased once: per
    // rejection, how many nodes and where in `rejections` the first one is.
    let mut distinct: HashMap<Rejection, (usize, usize)> = HashMap::new();
    for (i, node) in ctx.snapshot.nodes.iter().enumerate() {
        let Err(rejection) = ctx.filter(i) else {
            continue;
        };
        distinct.entry(rejection).or_insert((0, rejections.len())).0 += 1;
        rejections.push(NodeRejection {
            node: node.name.to_string(),
            reason: ctx.reason(NodeId(i as u32), rejection),
        });
    }
    let mut phrases: HashMap<String, usize> = HashMap::new();
    for (count, first) in distinct.into_values() {
        if let Some(r) = rejections.get(first) {
            for phrase in r.reason.summaries() {
                *phrases.entry(phrase).or_default() += count;
            }
        }
    }
    Unschedulable {
        pod: ctx.pod.key(),
        message: message_from_counts(ctx.snapshot.len(), phrases),
        rejections,
        invalid_pod: None,
    }
}

/// `0/64 nodes are available: 40 too few free GPUs, 24 no 4-GPU set with NV12.`
///
/// Each reason's [`FilterReason::summaries`] counted over the nodes, most
/// frequent first, equal counts by text. (kube-scheduler sorts the
/// `"<count> <reason>"` strings as text, which puts `24 …` before `40 …` and
/// `10 …` before `9 …`; the contract's example orders by count, and so does
/// this.) With no node at all: `no nodes available to schedule pods`.
pub fn failed_scheduling_message<'a>(
    total_nodes: usize,
    reasons: impl IntoIterator<Item = &'a FilterReason>,
) -> String {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for reason in reasons {
        for summary in reason.summaries() {
            *counts.entry(summary).or_default() += 1;
        }
    }
    message_from_counts(total_nodes, counts)
}

/// The message from phrase counts; see [`failed_scheduling_message`].
pub(crate) fn message_from_counts(total_nodes: usize, counts: HashMap<String, usize>) -> String {
    if total_nodes == 0 {
        return "no nodes available to schedule pods".to_string();
    }
    let mut sorted: Vec<(String, usize)> = counts.into_iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let parts: Vec<String> = sorted
        .iter()
        .map(|(text, count)| format!("{count} {text}"))
        .collect();
    if parts.is_empty() {
        format!("0/{total_nodes} nodes are available.")
    } else {
        format!("0/{total_nodes} nodes are available: {}.", parts.join(", "))
    }
}

pub(crate) fn placement(
    ctx: &PodContext<'_>,
    best: Candidate,
    runner_up: Option<Candidate>,
    feasible: usize,
) -> Placement {
    let snapshot = ctx.snapshot;
    let node = snapshot.node(best.node);
    let inner = &snapshot.nodes[best.node.0 as usize];
    let (gpus, mut bottleneck, shared, mut set_text) = describe_fit(ctx, best.node, &best.fit);
    let by_count = shared.is_none() && !gpus.is_empty() && inner.gpus.stand_in != 0;
    if by_count {
        // A gang's search chose a set by index; on this node no index holds.
        bottleneck = None;
        set_text = by_count_text(snapshot, best.node, gpus.len());
    }
    let topology_known = node.shape().is_some();
    let gpu_uuids = node.gpu_uuids(&gpus);
    let score = best.parts.score();
    let mut explanation = format!(
        "node {}: {set_text}; node score {score} ({}); best of {feasible} feasible of {} nodes",
        inner.name,
        best.parts,
        snapshot.len()
    );
    if let Some(r) = runner_up {
        explanation.push_str(&format!(
            "; next best {} at {}",
            snapshot.node(r.node).name(),
            r.parts.score()
        ));
    }
    Placement {
        pod: ctx.pod.key(),
        node: inner.name.to_string(),
        node_id: best.node,
        gpus,
        gpu_uuids,
        shared,
        bottleneck,
        topology_known,
        by_count,
        score,
        parts: best.parts,
        explanation,
        feasible_nodes: feasible,
        volumes: ctx.volume_plan(best.node.0 as usize),
    }
}

/// What a by-count placement says: how many GPUs, and whose unnamed GPUs
/// make the node's free ones unknown.
fn by_count_text(snapshot: &Snapshot, node: NodeId, count: usize) -> String {
    format!(
        "{count} GPU(s) by count: which GPUs are free is not known ({} hold GPUs that neither their gputopo record nor the node's report names), so no index is written and the kubelet picks among the free ones",
        snapshot.stand_in_holders(node).join(", ")
    )
}

/// GPUs, bottleneck, shared hold and a sentence for a fit on a node.
pub(crate) fn describe_fit(
    ctx: &PodContext<'_>,
    node_id: NodeId,
    fit: &Fit,
) -> (Vec<u32>, Option<LinkClass>, Option<SharedHold>, String) {
    let node = ctx.snapshot.node(node_id);
    match fit {
        Fit::NoGpu => (Vec::new(), None, None, "no GPUs requested".to_string()),
        Fit::Whole(summary) => {
            let gpus = crate::snapshot::bit_indices(summary.gpus);
            let text = match (
                node.shape(),
                ctx.set_request(),
                ctx.full_pick(node_id.0 as usize),
            ) {
                (Some(shape), Some(request), Some(pick)) => {
                    let single_numa = node
                        .topology_manager_policy(ctx.config.default_topology_manager_policy)
                        == crate::config::TopologyManagerPolicy::SingleNumaNode;
                    let request = crate::gpuset::SetRequest {
                        single_numa_node: single_numa,
                        ..*request
                    };
                    shape.describe(&request, &pick).explanation
                }
                _ => format!("GPUs {}", join(&gpus)),
            };
            (gpus, summary.bottleneck, None, text)
        }
        Fit::WholeUnknown {
            gpus,
            by_count: true,
        } => {
            let list = crate::snapshot::bit_indices(*gpus);
            let text = by_count_text(ctx.snapshot, node_id, list.len());
            (list, None, None, text)
        }
        Fit::WholeUnknown {
            gpus,
            by_count: false,
        } => {
            let list = crate::snapshot::bit_indices(*gpus);
            let text = format!(
                "GPUs {}: the lowest free; bottleneck {} so any node with a GpuTopology is preferred",
                join(&list),
                bottleneck_text(None, false)
            );
            (list, None, None, text)
        }
        Fit::Shared {
            gpu,
            milli,
            memory_mib,
            fill,
        } => {
            let before = node.shared_use(*gpu);
            let share = match ctx.pod.request.gpu_share {
                Some(GpuShare::MemoryMiB(mib)) => format!("{mib} MiB"),
                _ => format!("{}‰", milli),
            };
            let memory = node.gpu_memory_mib(*gpu);
            let use_text = match memory {
                Some(total) if total > 0 => format!(
                    "memory in shared use {:.0} % -> {:.0} % (target {:.0}-{:.0} %)",
                    before.memory_mib as f64 * 100.0 / total as f64,
                    fill * 100.0,
                    ctx.config.memory_target.low * 100.0,
                    ctx.config.memory_target.high * 100.0
                ),
                _ => format!("shared use {}‰ -> {}‰", before.milli, before.milli + milli),
            };
            let text = format!(
                "GPU {gpu} shared ({share}, with {} other pod(s)); {use_text}",
                before.pods
            );
            (
                vec![*gpu],
                None,
                Some(SharedHold {
                    gpu: *gpu,
                    milli: *milli,
                    memory_mib: *memory_mib,
                }),
                text,
            )
        }
    }
}

fn join(list: &[u32]) -> String {
    list.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
