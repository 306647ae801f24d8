//! `gputopo explain` for a pod whose GPUs come through ResourceClaims: every
//! node's verdict by [`DraJudge`], so the first row is always the node
//! [`super::schedule_claims`] picks, and each feasible row names the devices
//! the claims would get there.

use super::judge::{DraJudge, DraRejection, rank};
use crate::config::SchedulerConfig;
use crate::dra::DraInventory;
use crate::dra::DraPod;
use crate::explain::{ExplainRow, Explanation, RowDevice, Verdict};
use crate::pod::PendingPod;
use crate::schedule::{Decision, NodeRejection, Unschedulable, message_from_counts};
use crate::snapshot::{NodeId, Snapshot};
use std::collections::HashMap;

/// Explains `pod` with its claims `dra` on `snapshot` and `inventory` (whose
/// held GPUs mirror the snapshot's: see [`crate::dra::hold_snapshot`]). An
/// unschedulable decision's `rejections` are the node-predicate ones: a
/// node whose devices fall short has its reason in its row, not a
/// `FilterReason`.
pub fn explain_claims(
    snapshot: &Snapshot,
    inventory: &DraInventory,
    dra: &DraPod,
    pod: &PendingPod,
    config: &SchedulerConfig,
) -> Explanation {
    let judged = dra.judged(pod, inventory);
    let judge = DraJudge::new(snapshot, inventory, dra, &judged, config).deciding_alone();
    let mut feasible = Vec::new();
    let mut rejected = Vec::new();
    let mut phrases: HashMap<String, usize> = HashMap::new();
    let mut node_rejections = Vec::new();
    for i in 0..snapshot.len() {
        let id = NodeId(i as u32);
        match judge.judge(id) {
            Ok((fit, parts)) => feasible.push((id, fit, parts)),
            Err(rejection) => {
                for phrase in rejection.summaries() {
                    *phrases.entry(phrase).or_default() += 1;
                }
                let name = snapshot.node(id).name().to_string();
                let filter_reason = match &rejection {
                    DraRejection::Node(r) => {
                        node_rejections.push(NodeRejection {
                            node: name.clone(),
                            reason: r.reason.clone(),
                        });
                        Some(r.reason.clone())
                    }
                    DraRejection::Devices(_) | DraRejection::DevicePluginNode => None,
                };
                rejected.push(ExplainRow::rejected(
                    name,
                    rejection.to_string(),
                    filter_reason,
                ));
            }
        }
    }
    // Best first; the sort is stable, so a tie keeps node order, as the decision does.
    feasible.sort_by(|(_, a, ap), (_, b, bp)| rank(b, bp, a, ap));
    let decision = match feasible.first() {
        Some((id, fit, parts)) => {
            let context = format!(
                "best of {} feasible of {} nodes",
                feasible.len(),
                snapshot.len()
            );
            Decision::Placed(judge.placement(*id, fit, *parts, feasible.len(), &context))
        }
        None => Decision::Unschedulable(Unschedulable {
            pod: pod.key(),
            message: message_from_counts(snapshot.len(), phrases),
            rejections: node_rejections,
            invalid_pod: None,
        }),
    };
    let rows: Vec<ExplainRow> = feasible
        .iter()
        .enumerate()
        .map(|(i, (id, fit, parts))| ExplainRow {
            node: snapshot.node(*id).name().to_string(),
            verdict: Verdict::feasible_at(i),
            score: Some(parts.score()),
            parts: Some(*parts),
            gpus: fit.gpus(),
            bottleneck: fit.pick.bottleneck,
            reason: judge.describe(*id, fit, parts),
            filter_reason: None,
            devices: fit
                .claims
                .iter()
                .flat_map(|c| {
                    c.devices.iter().map(|d| RowDevice {
                        claim: c.key.clone(),
                        request: d.request.clone(),
                        device: d.device.to_string(),
                        gpu: d.gpu,
                    })
                })
                .collect(),
        })
        .collect();
    Explanation::of_rows(pod, decision, rows, rejected)
}
