//! A node's bound pods as one unit: inserted in a canonical order (pods
//! whose GPUs are known first, then by namespace and name), so that where a
//! pod's GPUs are charged (unknown indices, a short record, a share without
//! its GPU) never depends on the order the pods were listed or changed in.
//! [`SnapshotBuilder::build`](super::SnapshotBuilder::build) inserts every
//! node's pods this way, and [`super::LiveSnapshot`] does it again for one
//! node when one of its pods changes: the two agree by construction.

use super::input::{BoundPodInput, GpuHolding};
use super::node::{bit_indices, used_gpus};
use super::{NodeId, Snapshot, SnapshotError, SnapshotWarning};
use crate::reported::{ReportedGpus, reported_gpus};
use gputopo_api::GpuAllocation;
use gputopo_api::k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;

/// What a node's kubelet reported its pods hold, when the reading counts.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeReports {
    observed_at: Option<Timestamp>,
    by_pod: HashMap<String, ReportedGpus>,
}

impl NodeReports {
    pub(crate) fn new(
        allocations: &[GpuAllocation],
        observed_at: Option<Timestamp>,
    ) -> NodeReports {
        let by_pod = if observed_at.is_some() {
            reported_gpus(allocations)
                .into_iter()
                .map(|(pod, r)| (pod.to_string(), r))
                .collect()
        } else {
            HashMap::new()
        };
        NodeReports {
            observed_at,
            by_pod,
        }
    }

    /// What the kubelet reports a pod holds is what it holds, whatever
    /// the pod's annotation asked for; a reading from before the pod
    /// started is about another pod of the same name.
    fn correct(&self, mut pod: BoundPodInput) -> BoundPodInput {
        let read_after_start = match (self.observed_at, pod.start_time) {
            (Some(read), Some(started)) => started <= read,
            _ => false,
        };
        if read_after_start
            && let Some(r) = self.by_pod.get(&format!("{}/{}", pod.namespace, pod.name))
        {
            pod.holding = apply_reported(*r, std::mem::take(&mut pod.holding));
        }
        pod
    }
}

/// The warnings for `pods`, bound to nodes the snapshot lacks, by pod name.
pub(crate) fn orphan_warnings<'a>(
    pods: impl IntoIterator<Item = &'a BoundPodInput>,
) -> Vec<SnapshotWarning> {
    let mut orphans: Vec<&BoundPodInput> = pods.into_iter().collect();
    orphans.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    orphans
        .into_iter()
        .map(|p| SnapshotWarning::UnknownNode {
            pod: format!("{}/{}", p.namespace, p.name),
            node: p.node.clone(),
        })
        .collect()
}

/// A pod's holding, corrected by what the kubelet reports it holds.
fn apply_reported(reported: ReportedGpus, holding: GpuHolding) -> GpuHolding {
    match holding {
        GpuHolding::Shared { share, gpu } => GpuHolding::Shared {
            gpu: if reported.any.count_ones() == 1 {
                Some(reported.any.trailing_zeros())
            } else {
                gpu
            },
            share,
        },
        GpuHolding::Whole(_) | GpuHolding::Unknown(_) if reported.whole != 0 => {
            GpuHolding::Whole(bit_indices(reported.whole))
        }
        // MIG slices and devices other than whole GPUs are not whole GPUs.
        other => other,
    }
}

impl Snapshot {
    /// Inserts `pods`, all bound to `node`, in the canonical order, after
    /// correcting them by `reports`. Returns the warnings their insertion
    /// raised, for the node's part of [`super::WarningParts`] (they are not
    /// left in [`Snapshot::warnings`]: [`Snapshot::rejoin_warnings`] lists
    /// them).
    pub(crate) fn insert_node_pods(
        &mut self,
        node: NodeId,
        pods: impl IntoIterator<Item = BoundPodInput>,
        reports: &NodeReports,
    ) -> Result<Vec<SnapshotWarning>, SnapshotError> {
        let mut pods: Vec<BoundPodInput> = pods.into_iter().map(|p| reports.correct(p)).collect();
        pods.sort_by(|a, b| {
            let unknown = |p: &BoundPodInput| matches!(p.holding, GpuHolding::Unknown(_));
            (unknown(a), &a.namespace, &a.name).cmp(&(unknown(b), &b.namespace, &b.name))
        });
        let first = self.warnings.len();
        for pod in pods {
            debug_assert_eq!(self.node_id(&pod.node), Some(node));
            match self.insert_pod(pod) {
                Ok(_) => {}
                Err(SnapshotError::DuplicatePod { pod }) => {
                    self.warnings.push(SnapshotWarning::DuplicatePod { pod })
                }
                Err(other) => return Err(other),
            }
        }
        Ok(self.warnings.split_off(first))
    }

    /// [`Snapshot::warnings`] listed again from its parts: the nodes', each
    /// node's pods' in node order, then pods on unknown nodes.
    pub(crate) fn rejoin_warnings(&mut self) {
        let parts = &self.warning_parts;
        self.warnings = parts
            .nodes
            .iter()
            .chain(parts.pods.values().flatten())
            .chain(&parts.orphans)
            .cloned()
            .collect();
    }

    /// Sets the warnings of `node`'s pods; returns whether they changed.
    pub(crate) fn set_pod_warnings(
        &mut self,
        node: NodeId,
        warnings: Vec<SnapshotWarning>,
    ) -> bool {
        let parts = &mut self.warning_parts.pods;
        if parts.get(&node.0).map_or(&[][..], Vec::as_slice) == warnings.as_slice() {
            return false;
        }
        if warnings.is_empty() {
            parts.remove(&node.0);
        } else {
            parts.insert(node.0, warnings);
        }
        true
    }

    /// Takes every pod off `node`: its GPUs, resources and workload counts
    /// are as if none were bound. (Its pods' warnings are the caller's.)
    pub(crate) fn clear_node_pods(&mut self, node: NodeId) {
        let index = node.0 as usize;
        let before = used_gpus(&self.nodes[index]);
        for id in std::mem::take(&mut self.nodes[index].pods) {
            if let Some(pod) = self.pods.get_mut(id.0 as usize).and_then(Option::take) {
                self.affinity_pods.remove(&id);
                self.index_labels(id, &pod, false);
                self.pod_index.remove(&(pod.namespace, pod.name));
                self.reusable_pod_ids.push(id);
            }
        }
        let n = &mut self.nodes[index];
        n.gpus.held = 0;
        n.gpus.stand_in = 0;
        n.gpus.shared_mask = 0;
        n.gpus.shared = Box::default();
        n.requested = Default::default();
        n.training_pods = 0;
        n.inference_pods = 0;
        self.refresh(index);
        self.shift_domain_usage(index, before, 0);
    }
}
