//! Building a [`Snapshot`] from plain inputs (`input.rs`): [`SnapshotBuilder`]
//! and its node-by-node then pod-by-pod order (one node is made in
//! `build_node.rs`; its pods go in through `node_pods.rs` and
//! `pod_changes.rs`).

use super::build_node::BuildState;
use super::chunked::Chunked;
use super::input::{BoundPodInput, NodeInput};
use super::intern::Interner;
use super::node_pods::{NodeReports, orphan_warnings};
use super::{NodeId, PodGroup, Signals, Snapshot, SnapshotError, Storage, WorkloadSelectors};
use crate::config::{NetworkTiers, SchedulerConfig};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Collects inputs, then builds a [`Snapshot`].
#[derive(Clone, Debug)]
pub struct SnapshotBuilder {
    tiers: NetworkTiers,
    spot_instance_types: Vec<String>,
    nodes: Vec<NodeInput>,
    pods: Vec<BoundPodInput>,
    groups: Vec<PodGroup>,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    workload_selectors: WorkloadSelectors,
    storage: Storage,
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
            namespaces: BTreeMap::new(),
            workload_selectors: WorkloadSelectors::default(),
            storage: Storage::default(),
        }
    }

    /// The Services' and controllers' selectors (spread's defaults).
    pub fn workload_selectors(&mut self, selectors: WorkloadSelectors) -> &mut SnapshotBuilder {
        self.workload_selectors = selectors;
        self
    }

    /// Claims, volumes and classes (the volume plugins).
    pub fn storage(&mut self, storage: Storage) -> &mut SnapshotBuilder {
        self.storage = storage;
        self
    }

    /// A namespace and its labels (what `namespaceSelector`s match).
    pub fn namespace(
        &mut self,
        name: &str,
        labels: BTreeMap<String, String>,
    ) -> &mut SnapshotBuilder {
        self.namespaces.insert(name.to_string(), labels);
        self
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
            namespaces,
            workload_selectors,
            storage,
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
            affinity_pods: imbl::OrdSet::new(),
            pods_by_label: imbl::HashMap::new(),
            label_columns: Arc::default(),
            namespaces: Arc::new(namespaces),
            workload_selectors: Arc::new(workload_selectors),
            storage: Arc::new(storage),
            image_counts: Arc::default(),
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
            snapshot.count_images(NodeId(i as u32), true);
            snapshot.refresh(i);
        }
        snapshot.label_columns = Arc::new(snapshot.topology_columns());
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
