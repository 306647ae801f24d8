//! `gputopo explain` for a gang member: the gang's own decision over the
//! members the cluster file holds pending (the pod explained among them),
//! as the scheduler would make it: where each member goes and which of the
//! gang's constraints held at which tier, or why the gang waits.

use crate::cluster::Cluster;
use gputopo_api::GangRef;
use gputopo_scheduler_core::gang_schedule::{GangDecision, schedule_gang};
use gputopo_scheduler_core::pod::PendingPod;
use serde::Serialize;

/// The gang's decision, for the report.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangReport {
    /// How the members name the gang (`gputopo.dev/gang train`, `JobSet x`).
    pub gang: String,
    /// The members decided on, `namespace/name`, in the file's order.
    pub members: Vec<String>,
    /// `true` when every member is placed.
    pub placed: bool,
    /// Placed: each member's node and GPUs, in `members` order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<(String, Vec<u32>)>,
    /// The gang's explanation (placed) or why it waits.
    pub message: String,
}

/// The gang `pod` belongs to, decided over its pending fellows in
/// `cluster`; `None` for a pod of no gang.
pub fn gang_report(cluster: &Cluster, pending: &PendingPod) -> Option<GangReport> {
    let gang = pending.request.gang.as_ref()?;
    let mut members = vec![pending.clone()];
    for other in &cluster.pending {
        let Ok(p) = PendingPod::from_k8s(other) else {
            continue;
        };
        let same = p.namespace == pending.namespace && p.request.gang.as_ref() == Some(gang);
        if same && p.name != pending.name {
            members.push(p);
        }
    }
    let keys: Vec<String> = members.iter().map(PendingPod::key).collect();
    let report = match schedule_gang(&cluster.snapshot, &members, &cluster.config) {
        GangDecision::Placed(placements) => GangReport {
            gang: describe(gang),
            placed: true,
            nodes: placements
                .iter()
                .map(|p| (p.node.clone(), p.gpus.clone()))
                .collect(),
            message: placements
                .first()
                .map(|p| p.explanation.clone())
                .unwrap_or_default(),
            members: keys,
        },
        GangDecision::Waiting { message } => GangReport {
            gang: describe(gang),
            placed: false,
            nodes: Vec::new(),
            message,
            members: keys,
        },
    };
    Some(report)
}

impl GangReport {
    /// `gang …: N members placed` then one line per member, or why it waits.
    pub fn text(&self) -> String {
        let n = self.members.len();
        if !self.placed {
            return format!(
                "{} ({n} members in the file): waits: {}\n",
                self.gang, self.message
            );
        }
        let mut out = format!(
            "{} ({n} members in the file): placed\n  {}\n",
            self.gang, self.message
        );
        for (member, (node, gpus)) in self.members.iter().zip(&self.nodes) {
            let gpus: Vec<String> = gpus.iter().map(u32::to_string).collect();
            out.push_str(&format!("  {member} -> {node} GPUs {}\n", gpus.join(",")));
        }
        out
    }
}

fn describe(gang: &GangRef) -> String {
    match gang {
        GangRef::PodGroup { name } => format!("gang PodGroup {name} (scheduling.x-k8s.io)"),
        GangRef::Annotation { name, size } => {
            format!("gang {name} (gputopo.dev/gang, size {size})")
        }
        GangRef::SchedulingGroup { name } => format!("gang PodGroup {name} (scheduling.k8s.io)"),
        GangRef::JobSet { name, .. } => format!("gang JobSet {name}"),
        GangRef::LeaderWorkerSet { name, group, .. } => {
            format!("gang LeaderWorkerSet {name} group {group}")
        }
    }
}
