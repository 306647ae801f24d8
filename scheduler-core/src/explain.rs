//! Every node's verdict for one pod, as `gputopo explain` prints it: the chosen
//! node, the other feasible nodes with their scores and GPU sets, and each
//! rejected node with its reason. Built by the same filter and score as
//! [`crate::schedule::schedule`], so the first row is always the node it picks.

use crate::config::SchedulerConfig;
use crate::filter::{FilterReason, PodContext};
use crate::pod::PendingPod;
use crate::schedule::{self, Candidate, Decision, describe_fit, invalid};
use crate::score::{ScoreParts, Scorer};
use crate::snapshot::{NodeId, Snapshot};
use gputopo_api::LinkClass;
use gputopo_api::k8s_openapi::api::core::v1::Pod;

/// A node's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The node the pod goes to.
    Chosen,
    /// Passed the filter, scored lower.
    Feasible,
    /// Failed the filter.
    Rejected,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Chosen => "chosen",
            Verdict::Feasible => "feasible",
            Verdict::Rejected => "rejected",
        }
    }

    /// The verdict of the feasible node at `rank` (0 the best): the best is chosen.
    pub(crate) fn feasible_at(rank: usize) -> Verdict {
        if rank == 0 {
            Verdict::Chosen
        } else {
            Verdict::Feasible
        }
    }
}

/// One node's row.
#[derive(Clone, Debug, PartialEq)]
pub struct ExplainRow {
    pub node: String,
    pub verdict: Verdict,
    /// 0–100 for a feasible node.
    pub score: Option<u8>,
    pub parts: Option<ScoreParts>,
    /// The GPUs the pod would get there.
    pub gpus: Vec<u32>,
    pub bottleneck: Option<LinkClass>,
    /// Feasible: the GPU set and the score's parts; rejected: the reason.
    pub reason: String,
    pub filter_reason: Option<FilterReason>,
    /// For a pod with ResourceClaims: the devices its claims would get
    /// there, in the claims' order (empty otherwise).
    pub devices: Vec<RowDevice>,
}

impl ExplainRow {
    /// A rejected node's row: no score, no GPUs, the reason said.
    pub(crate) fn rejected(
        node: String,
        reason: String,
        filter_reason: Option<FilterReason>,
    ) -> ExplainRow {
        ExplainRow {
            node,
            verdict: Verdict::Rejected,
            score: None,
            parts: None,
            gpus: Vec::new(),
            bottleneck: None,
            reason,
            filter_reason,
            devices: Vec::new(),
        }
    }
}

/// One device a claim would get on a row's node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowDevice {
    /// The claim, `namespace/name`.
    pub claim: String,
    /// The claim's request the device serves.
    pub request: String,
    /// `driver/pool/device`, as the claim's allocation names it.
    pub device: String,
    /// The GPU index on the node's topology.
    pub gpu: Option<u32>,
}

/// The decision and every node's row: the chosen node first, then feasible
/// nodes by score (best first, ties by name), then rejected nodes by name.
#[derive(Clone, Debug, PartialEq)]
pub struct Explanation {
    pub pod: String,
    pub decision: Decision,
    pub rows: Vec<ExplainRow>,
}

impl Explanation {
    /// The explanation of `pod`: the `feasible` rows (best first), then the
    /// `rejected` ones.
    pub(crate) fn of_rows(
        pod: &PendingPod,
        decision: Decision,
        mut feasible: Vec<ExplainRow>,
        mut rejected: Vec<ExplainRow>,
    ) -> Explanation {
        feasible.append(&mut rejected);
        Explanation {
            pod: pod.key(),
            decision,
            rows: feasible,
        }
    }
}

/// Explains `pod` on `snapshot`.
pub fn explain(snapshot: &Snapshot, pod: &PendingPod, config: &SchedulerConfig) -> Explanation {
    let ctx = PodContext::new(snapshot, pod, config);
    let scorer = Scorer::with_preferences(&ctx);
    let mut feasible: Vec<Candidate> = Vec::new();
    let mut rejected: Vec<ExplainRow> = Vec::new();
    for (i, node) in snapshot.nodes.iter().enumerate() {
        let id = NodeId(i as u32);
        match ctx.filter(i) {
            Ok(fit) => feasible.push(Candidate {
                node: id,
                fit,
                parts: scorer.score(&ctx, i, &fit),
            }),
            Err(rejection) => {
                let reason = ctx.reason(id, rejection);
                rejected.push(ExplainRow::rejected(
                    node.name.to_string(),
                    reason.to_string(),
                    Some(reason),
                ));
            }
        }
    }
    // Best first; equal totals keep node order (the sort is stable), as `schedule` does.
    feasible.sort_by(|a, b| b.parts.total.total_cmp(&a.parts.total));
    let decision = match feasible.first() {
        Some(best) => Decision::Placed(schedule::placement(
            &ctx,
            *best,
            feasible.get(1).copied(),
            feasible.len(),
        )),
        None => Decision::Unschedulable(schedule::unschedulable(&ctx)),
    };
    let rows: Vec<ExplainRow> = feasible
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (gpus, bottleneck, _, text) = describe_fit(&ctx, c.node, &c.fit);
            ExplainRow {
                node: snapshot.node(c.node).name().to_string(),
                verdict: Verdict::feasible_at(i),
                score: Some(c.parts.score()),
                parts: Some(c.parts),
                gpus,
                bottleneck,
                reason: format!("{text}; {}", c.parts),
                filter_reason: None,
                devices: Vec::new(),
            }
        })
        .collect();
    Explanation::of_rows(pod, decision, rows, rejected)
}

/// Reads `pod` and explains it; a malformed pod gives no rows and an
/// `Unschedulable` decision naming the key.
pub fn explain_pod(snapshot: &Snapshot, pod: &Pod, config: &SchedulerConfig) -> Explanation {
    match PendingPod::from_k8s(pod) {
        Ok(pending) => explain(snapshot, &pending, config),
        Err(error) => {
            let u = invalid(&error);
            Explanation {
                pod: u.pod.clone(),
                decision: Decision::Unschedulable(u),
                rows: Vec::new(),
            }
        }
    }
}
