//! Changing a built snapshot one pod at a time: [`Snapshot::add_pod`],
//! [`Snapshot::remove_pod`], and the GPU charging they rest on.

use super::amounts::{amounts, share_amounts};
use super::node::{bit_indices, used_gpus};
use super::{
    Amounts, BoundPod, BoundPodInput, GpuHolding, Node, PodId, SharedHold, SharedUse, Snapshot,
    SnapshotError, SnapshotWarning,
};
use crate::gpuset::MAX_GPUS;
use gputopo_api::{GpuShare, WorkloadKind};

impl Snapshot {
    /// Adds a bound pod (a placement being tried, a pod the watch just saw).
    /// Oddities (a GPU already held, GPUs of unknown index) are recorded in
    /// [`Snapshot::warnings`]; a pod on a node the snapshot lacks is an error.
    pub fn add_pod(&mut self, pod: BoundPodInput) -> Result<PodId, SnapshotError> {
        self.insert_pod(pod)
    }

    /// Removes a bound pod (an eviction being tried, a pod that finished) and
    /// gives it back. The node's GPU masks are recomputed from the pods left.
    pub fn remove_pod(&mut self, id: PodId) -> Option<BoundPod> {
        let pod = self.pods.get_mut(id.0 as usize)?.take()?;
        self.affinity_pods.remove(&id);
        self.index_labels(id, &pod, false);
        self.pod_index
            .remove(&(pod.namespace.clone(), pod.name.clone()));
        let node_index = pod.node.0 as usize;
        let requested = amounts(&pod.requests, &mut self.strings);
        let before = used_gpus(&self.nodes[node_index]);
        let remaining: Vec<PodId> = self.nodes[node_index]
            .pods
            .iter()
            .copied()
            .filter(|&p| p != id)
            .collect();
        let mut held = 0u32;
        let mut stand_in = 0u32;
        let mut shared = vec![SharedUse::default(); self.nodes[node_index].gpus.shared.len()];
        for p in &remaining {
            if let Some(other) = self.pod(*p) {
                held |= other.gpus;
                stand_in |= other.stand_in;
                if let Some(h) = other.shared
                    && let Some(slot) = shared.get_mut(h.gpu as usize)
                {
                    slot.add(&h);
                }
            }
        }
        let node = &mut self.nodes[node_index];
        node.pods = remaining;
        node.gpus.held = held;
        node.gpus.stand_in = stand_in;
        node.gpus.shared_mask = shared
            .iter()
            .enumerate()
            .filter(|(_, s)| s.pods > 0)
            .fold(0, |m, (i, _)| m | (1 << i));
        node.gpus.shared = shared.into_boxed_slice();
        node.requested.subtract(&requested);
        if let Some(count) = node.workload_pods_mut(pod.workload()) {
            *count = count.saturating_sub(1);
        }
        self.settle_node(node_index, before);
        Some(pod)
    }

    pub(crate) fn insert_pod(&mut self, input: BoundPodInput) -> Result<PodId, SnapshotError> {
        let key = format!("{}/{}", input.namespace, input.name);
        let Some(node_id) = self.node_id(&input.node) else {
            return Err(SnapshotError::UnknownNode {
                pod: key,
                node: input.node,
            });
        };
        let index_key = (input.namespace.clone(), input.name.clone());
        if self.pod_index.contains_key(&index_key) {
            return Err(SnapshotError::DuplicatePod { pod: key });
        }
        if let Some(value) = input.unreadable_assignment {
            self.warnings.push(SnapshotWarning::UnreadableAssignment {
                pod: key.clone(),
                value,
            });
        }
        let request = match input.request {
            Ok(r) => Some(r),
            Err(error) => {
                self.warnings.push(SnapshotWarning::BadRequest {
                    pod: key.clone(),
                    error,
                });
                None
            }
        };
        let node_index = node_id.0 as usize;
        let node_name = input.node;
        let mut gpus = 0u32;
        // GPUs charged for ones whose indices nobody told: counted, never
        // handed out by index while the pod holds them.
        let mut stand_in = 0u32;
        let mut shared = None;
        match input.holding {
            GpuHolding::None => {}
            GpuHolding::Whole(indices) => {
                (gpus, stand_in) =
                    self.charge_listed(node_index, indices, input.requests.gpus, &key, &node_name);
            }
            GpuHolding::Unknown(count) => {
                gpus = self.charge_highest_free(node_index, 0, count, &key, &node_name);
                stand_in = gpus;
                if count > 0 {
                    self.warnings.push(SnapshotWarning::UnknownGpus {
                        pod: key.clone(),
                        node: node_name.clone(),
                        count,
                        charged: list(gpus),
                    });
                }
            }
            GpuHolding::Shared { gpu, share } => {
                shared = self.shared_hold(node_index, gpu, share, &key, &node_name);
            }
        }

        let requested = amounts(&input.requests, &mut self.strings);
        let workload = request.as_ref().and_then(|r| r.workload);
        // An id a node's re-inserted pods left (`clear_node_pods`) first:
        // no one holds it, and the kept snapshot does not grow with churn.
        let reused = self.reusable_pod_ids.pop();
        let pod_id = reused.unwrap_or(PodId(self.pods.len() as u32));
        self.charge_node(
            node_index,
            pod_id,
            (gpus, stand_in),
            shared,
            &requested,
            workload,
        );
        let pod = Some(BoundPod {
            namespace: input.namespace,
            name: input.name,
            node: node_id,
            requests: input.requests,
            gpus,
            stand_in,
            shared,
            request,
            priority: input.priority,
            start_time: input.start_time,
            constraints: input.constraints,
            terminating: input.terminating,
        });
        if pod
            .as_ref()
            .is_some_and(|p| !p.constraints.affinity.is_empty())
        {
            self.affinity_pods.insert(pod_id);
        }
        if let Some(p) = &pod {
            self.index_labels(pod_id, p, true);
        }
        match reused.and_then(|id| self.pods.get_mut(id.0 as usize)) {
            Some(slot) => *slot = pod,
            None => self.pods.push(pod),
        }
        self.pod_index.insert(index_key, pod_id);
        Ok(pod_id)
    }

    /// The GPUs a pod's record lists, charged whole: indices the node lacks
    /// and GPUs already held are warned about; a record naming fewer GPUs
    /// than the pod requests (edited, or naming GPUs the node lacks) never
    /// lowers the count, the rest charged to the highest free GPUs (stand-ins,
    /// returned second).
    fn charge_listed(
        &mut self,
        node_index: usize,
        indices: Vec<u32>,
        requested_gpus: i64,
        key: &str,
        node_name: &str,
    ) -> (u32, u32) {
        let present = self.nodes[node_index].gpus.present;
        let mut gpus = 0u32;
        let taken = {
            let g = &self.nodes[node_index].gpus;
            g.held | g.shared_mask
        };
        for gpu in indices {
            if gpu >= MAX_GPUS || present & (1 << gpu) == 0 {
                self.warnings.push(SnapshotWarning::GpuNotOnNode {
                    pod: key.to_string(),
                    node: node_name.to_string(),
                    gpu,
                });
                continue;
            }
            if taken & (1 << gpu) != 0 {
                self.warnings.push(SnapshotWarning::GpuHeldTwice {
                    pod: key.to_string(),
                    node: node_name.to_string(),
                    gpu,
                });
            }
            gpus |= 1 << gpu;
        }
        // A record naming fewer GPUs than the pod holds (edited, or
        // naming GPUs the node lacks) never lowers the count.
        let requested = u32::try_from(requested_gpus).unwrap_or(0);
        let short = requested.saturating_sub(gpus.count_ones());
        if short > 0 {
            let extra = self.charge_highest_free(node_index, gpus, short, key, node_name);
            self.warnings.push(SnapshotWarning::ShortAssignment {
                pod: key.to_string(),
                node: node_name.to_string(),
                listed: gpus.count_ones(),
                requested,
                charged: list(extra),
            });
            gpus |= extra;
            return (gpus, extra);
        }
        (gpus, 0)
    }

    /// The GPU a shared pod uses (its recorded one, else the lowest GPU not
    /// held whole with room for the share) and what it takes of it; `None`
    /// when the recorded GPU is not on the node or none has room.
    fn shared_hold(
        &mut self,
        node_index: usize,
        gpu: Option<u32>,
        share: GpuShare,
        key: &str,
        node_name: &str,
    ) -> Option<SharedHold> {
        let present = self.nodes[node_index].gpus.present;
        let mut shared = None;
        let mut warnings = Vec::new();
        let node = &self.nodes[node_index];
        let memory = |g: u32| self.gpu_memory(node, g);
        let chosen = match gpu {
            Some(g) if g < MAX_GPUS && present & (1 << g) != 0 => {
                if node.gpus.held & (1 << g) != 0 {
                    warnings.push(SnapshotWarning::GpuHeldTwice {
                        pod: key.to_string(),
                        node: node_name.to_string(),
                        gpu: g,
                    });
                }
                Some(g)
            }
            Some(g) => {
                warnings.push(SnapshotWarning::GpuNotOnNode {
                    pod: key.to_string(),
                    node: node_name.to_string(),
                    gpu: g,
                });
                None
            }
            // Not told which: the lowest GPU not held whole with room for it.
            None => (0..MAX_GPUS)
                .filter(|&g| (present & !node.gpus.held) & (1 << g) != 0)
                .find(|&g| {
                    let used = node.gpus.shared_use(g);
                    share_amounts(share, memory(g))
                        .is_some_and(|(m, _)| used.milli.saturating_add(m) <= 1000)
                }),
        };
        if let Some(g) = chosen {
            let (milli, memory_mib) = share_amounts(share, memory(g)).unwrap_or((0, 0));
            shared = Some(SharedHold {
                gpu: g,
                milli,
                memory_mib,
            });
        }
        self.warnings.extend(warnings);
        shared
    }

    /// Adds a placed pod's GPUs, share, requests and workload to its node,
    /// then the node's scan row and its domains' GPU counts.
    fn charge_node(
        &mut self,
        node_index: usize,
        pod_id: PodId,
        (gpus, stand_in): (u32, u32),
        shared: Option<SharedHold>,
        requested: &Amounts,
        workload: Option<WorkloadKind>,
    ) {
        let before = used_gpus(&self.nodes[node_index]);
        let node = &mut self.nodes[node_index];
        node.gpus.held |= gpus;
        node.gpus.stand_in |= stand_in;
        if let Some(h) = shared {
            let n = node
                .gpus
                .present
                .checked_ilog2()
                .map_or(0, |top| top as usize + 1);
            if node.gpus.shared.len() < n {
                let mut grown = node.gpus.shared.to_vec();
                grown.resize(n, SharedUse::default());
                node.gpus.shared = grown.into_boxed_slice();
            }
            if let Some(slot) = node.gpus.shared.get_mut(h.gpu as usize) {
                slot.add(&h);
                node.gpus.shared_mask |= 1 << h.gpu;
            }
        }
        node.requested.add(requested);
        node.pods.push(pod_id);
        if let Some(count) = node.workload_pods_mut(workload) {
            *count = count.saturating_add(1);
        }
        self.settle_node(node_index, before);
    }

    /// After a node's pods changed (it used `before` GPUs): its scan row and
    /// its domains' GPU counts.
    fn settle_node(&mut self, node_index: usize, before: u32) {
        let after = used_gpus(&self.nodes[node_index]);
        self.refresh(node_index);
        self.shift_domain_usage(node_index, before, after);
    }

    /// Charges `count` GPUs of a node to a pod whose indices are not known:
    /// the highest free ones outside `taken` (a warning where too few are
    /// free). Returns the GPUs charged.
    fn charge_highest_free(
        &mut self,
        node_index: usize,
        taken: u32,
        count: u32,
        pod: &str,
        node: &str,
    ) -> u32 {
        let mut free = self.nodes[node_index].gpus.free() & !taken;
        let mut charged = 0u32;
        let mut left = count;
        while left > 0 && free != 0 {
            let top = 31 - free.leading_zeros();
            charged |= 1 << top;
            free &= !(1 << top);
            left -= 1;
        }
        if left > 0 {
            self.warnings.push(SnapshotWarning::TooFewGpus {
                pod: pod.to_string(),
                node: node.to_string(),
                count: left,
            });
        }
        charged
    }

    /// A GPU's memory on a node, when its topology gives it.
    pub(crate) fn gpu_memory(&self, node: &Node, gpu: u32) -> Option<u64> {
        self.shape_entry(node)
            .and_then(|s| s.memory_mib.get(gpu as usize).copied().flatten())
    }
}

/// `0,1,2`.
fn list(mask: u32) -> String {
    bit_indices(mask)
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
