//! Building a [`Snapshot`] from plain inputs: the inputs, [`SnapshotBuilder`]
//! and its node-by-node then pod-by-pod order (one node is made in
//! `build_node.rs`; its pods go in through `pod_changes.rs`), and the small
//! conversions building and later pod changes share.

use super::build_node::BuildState;
use super::chunked::Chunked;
use super::intern::{Interner, Sym};
use super::node_pods::{NodeReports, orphan_warnings};
use super::topology_spec::TopologySpec;
use super::{Amounts, Node, NodeId, PodGroup, Signals, Snapshot, SnapshotError};
use crate::config::{NetworkTiers, SchedulerConfig};
use crate::resources::Resources;
use crate::selector::Taint;
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_api::{GpuAllocation, GpuRequest, GpuShare, RequestError};
use std::collections::BTreeMap;

/// A node as the snapshot is built from it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeInput {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// In the node's order: the first untolerated one is the one reported.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `status.allocatable`; see [`Resources::allocatable`] for absent resources.
    pub allocatable: Resources,
    /// The node's `GpuTopology` spec, if the agent published one (shared
    /// with the watched object where it came from one).
    pub topology: Option<TopologySpec>,
    /// The `GpuTopology` status allocations: which pods (`namespace/name`) hold each GPU.
    pub gpu_allocations: Vec<GpuAllocation>,
    /// When the kubelet was read for `gpu_allocations`: a pod's reported
    /// GPUs count only if it had started by then (an older reading may name
    /// an earlier pod of the same name). `None`: the allocations are not used.
    pub allocations_observed_at: Option<Timestamp>,
}

impl Default for NodeInput {
    /// A node with no name, labels or taints, allocatable [`Resources::unlimited`].
    fn default() -> NodeInput {
        NodeInput {
            name: String::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            unschedulable: false,
            allocatable: Resources::unlimited(),
            topology: None,
            gpu_allocations: Vec::new(),
            allocations_observed_at: None,
        }
    }
}

/// What GPUs a bound pod holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum GpuHolding {
    /// No GPU (a CPU pod, or one using only MIG slices or other devices).
    #[default]
    None,
    /// These GPUs whole.
    Whole(Vec<u32>),
    /// This many GPUs whole, which ones not known (bound by another scheduler).
    Unknown(u32),
    /// Part of one GPU; `gpu` is `None` when not known.
    Shared { gpu: Option<u32>, share: GpuShare },
}

/// A pod bound to a node, as the snapshot is built from it.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundPodInput {
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// Effective requests (see [`crate::resources::pod_requests`]).
    pub requests: Resources,
    pub holding: GpuHolding,
    /// The pod's parsed GPU request; an error is kept as a warning.
    pub request: Result<GpuRequest, RequestError>,
    pub priority: i32,
    pub start_time: Option<Timestamp>,
    /// A `gputopo.dev/assigned-gpus` value that is not an index list: the
    /// pod is counted with GPUs of unknown indices and this is a warning.
    pub unreadable_assignment: Option<String>,
}

impl BoundPodInput {
    /// A pod on `node` requesting `requests` and holding `holding`, default request.
    pub fn new(namespace: &str, name: &str, node: &str) -> BoundPodInput {
        BoundPodInput {
            namespace: namespace.to_string(),
            name: name.to_string(),
            node: node.to_string(),
            requests: Resources {
                pods: 1,
                ..Resources::default()
            },
            holding: GpuHolding::None,
            request: Ok(GpuRequest::default()),
            priority: 0,
            start_time: None,
            unreadable_assignment: None,
        }
    }
}

/// Collects inputs, then builds a [`Snapshot`].
#[derive(Clone, Debug)]
pub struct SnapshotBuilder {
    tiers: NetworkTiers,
    spot_instance_types: Vec<String>,
    nodes: Vec<NodeInput>,
    pods: Vec<BoundPodInput>,
    groups: Vec<PodGroup>,
}

impl SnapshotBuilder {
    /// Reads `config.tiers` and `config.spot_instance_types`.
    pub fn new(config: &SchedulerConfig) -> SnapshotBuilder {
        SnapshotBuilder {
            tiers: config.tiers.clone(),
            spot_instance_types: config.spot_instance_types.clone(),
            nodes: Vec::new(),
            pods: Vec::new(),
            groups: Vec::new(),
        }
    }

    pub fn node(&mut self, node: NodeInput) -> &mut SnapshotBuilder {
        self.nodes.push(node);
        self
    }

    pub fn pod(&mut self, pod: BoundPodInput) -> &mut SnapshotBuilder {
        self.pods.push(pod);
        self
    }

    pub fn pod_group(&mut self, group: PodGroup) -> &mut SnapshotBuilder {
        self.groups.push(group);
        self
    }

    /// The snapshot. Fails only on duplicate node or PodGroup names; anything
    /// else odd becomes a [`SnapshotWarning`](super::SnapshotWarning).
    pub fn build(self) -> Result<Snapshot, SnapshotError> {
        let SnapshotBuilder {
            tiers,
            spot_instance_types,
            mut nodes,
            pods,
            mut groups,
        } = self;
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = nodes.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(SnapshotError::DuplicateNode {
                name: w[0].name.clone(),
            });
        }
        groups.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        if let Some(w) = groups
            .windows(2)
            .find(|w| (&w[0].namespace, &w[0].name) == (&w[1].namespace, &w[1].name))
        {
            return Err(SnapshotError::DuplicatePodGroup {
                namespace: w[0].namespace.clone(),
                name: w[0].name.clone(),
            });
        }

        let mut snapshot = Snapshot {
            hot: Vec::with_capacity(nodes.len()),
            free_counts: Vec::with_capacity(nodes.len()),
            nodes: Chunked::default(),
            pods: Chunked::default(),
            pod_index: imbl::HashMap::new(),
            shapes: Vec::new(),
            shape_errors: Vec::new(),
            strings: Interner::default(),
            taint_sets: vec![Box::default()],
            domains: Vec::new(),
            tiers,
            pod_groups: groups,
            warnings: Vec::new(),
            warning_parts: Default::default(),
            reusable_pod_ids: Vec::new(),
            signals: Signals::default(),
        };
        let mut state = BuildState::default();
        let mut reports: Vec<NodeReports> = Vec::with_capacity(nodes.len());
        for (i, input) in nodes.into_iter().enumerate() {
            reports.push(NodeReports::new(
                &input.gpu_allocations,
                input.allocations_observed_at,
            ));
            let node =
                snapshot.make_node(NodeId(i as u32), input, &spot_instance_types, &mut state);
            snapshot.nodes.push(node);
            snapshot.refresh(i);
        }
        snapshot.update_signals();
        snapshot.warning_parts.nodes = std::mem::take(&mut snapshot.warnings);

        // Node by node, each node's pods in the canonical order
        // (`node_pods.rs`), so the same pods give the same snapshot in any
        // order; pods on nodes the snapshot lacks are named, by name.
        let mut by_node: Vec<Vec<BoundPodInput>> = vec![Vec::new(); snapshot.nodes.len()];
        let mut orphans: Vec<BoundPodInput> = Vec::new();
        for pod in pods {
            match snapshot.node_id(&pod.node) {
                Some(id) => by_node[id.0 as usize].push(pod),
                None => orphans.push(pod),
            }
        }
        for (i, pods) in by_node.into_iter().enumerate() {
            let id = NodeId(i as u32);
            let warnings = snapshot.insert_node_pods(id, pods, &reports[i])?;
            snapshot.set_pod_warnings(id, warnings);
        }
        snapshot.warning_parts.orphans = orphan_warnings(&orphans);
        snapshot.rejoin_warnings();
        Ok(snapshot)
    }
}

/// The indices of a mask's set bits, lowest first.
pub(crate) fn bit_indices(mask: u32) -> Vec<u32> {
    (0..32).filter(|i| mask & (1 << i) != 0).collect()
}

/// Interns `r`'s extended resource names: what a node's amounts are stored as.
pub(super) fn amounts(r: &Resources, strings: &mut Interner) -> Amounts {
    let mut extended: Vec<(Sym, i64)> = r
        .extended
        .iter()
        .filter(|(_, a)| *a != 0)
        .map(|(n, a)| (strings.intern(n), *a))
        .collect();
    extended.sort_unstable_by_key(|(s, _)| *s);
    Amounts {
        cpu_milli: r.cpu_milli,
        memory: r.memory,
        ephemeral_storage: r.ephemeral_storage,
        pods: r.pods,
        gpus: r.gpus,
        extended: extended.into_boxed_slice(),
    }
}

/// A pending pod's extended requests against the snapshot's names: `None`
/// for a name no node has (so no node can fit a non-zero request of it).
pub(crate) fn resolve_amounts(r: &Resources, strings: &Interner) -> Vec<(Option<u32>, i64, usize)> {
    r.extended
        .iter()
        .enumerate()
        .filter(|(_, (_, a))| *a > 0)
        .map(|(i, (n, a))| (strings.get(n).map(|s| s.0), *a, i))
        .collect()
}

/// A share's amounts on a GPU of `memory_mib`: `None` for a memory share on a
/// GPU whose memory is unknown (nothing can say it fits).
pub fn share_amounts(share: GpuShare, memory_mib: Option<u64>) -> Option<(u32, u64)> {
    match share {
        GpuShare::Milli(milli) => Some((
            milli,
            memory_mib.map_or(0, |m| m.saturating_mul(u64::from(milli)).div_ceil(1000)),
        )),
        GpuShare::MemoryMiB(mib) => {
            let total = memory_mib?;
            let milli = (mib.saturating_mul(1000)).div_ceil(total.max(1));
            Some((u32::try_from(milli).unwrap_or(u32::MAX), mib))
        }
    }
}

/// GPUs of a node held whole or in shared use.
pub(crate) fn used_gpus(node: &Node) -> u32 {
    ((node.gpus.held | node.gpus.shared_mask) & node.gpus.present).count_ones()
}
