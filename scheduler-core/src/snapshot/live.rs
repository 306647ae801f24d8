//! A snapshot kept up to date change by change instead of rebuilt: what a
//! scheduler's watch events feed. A pod added, changed or gone, or a node's
//! kubelet reading of who holds which GPU, touches only that node: its pods
//! are taken off and inserted again in the canonical order
//! (`node_pods.rs`), microseconds whatever the cluster's size. Anything that
//! moves nodes or domains (a node added, removed or relabelled, a topology
//! or PodGroup changed) marks the snapshot stale, and the next read builds
//! it whole, as [`SnapshotBuilder::build`] would.
//!
//! The promise, property-tested: after any sequence of changes,
//! [`LiveSnapshot::snapshot`] equals a fresh build of the same inputs.

use super::node_pods::{NodeReports, orphan_warnings};
use super::{
    BoundPodInput, NodeInput, PodGroup, Snapshot, SnapshotBuilder, SnapshotError, Storage,
    WorkloadSelectors,
};
use crate::config::SchedulerConfig;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// `(namespace, name)`.
type PodKey = (String, String);

/// How the snapshot has been kept up to date (for metrics and benches).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Whole builds: the first, and after each change that moved nodes.
    pub full_builds: u64,
    /// Changes made on one node in place: its pods inserted again (a pod
    /// or a GPU reading changed) or its images replaced.
    pub node_updates: u64,
    /// Changes that changed nothing the snapshot holds (a node's status
    /// heartbeat, a pod rewritten with the same binding).
    pub unchanged: u64,
}

/// See the module docs.
#[derive(Clone, Debug)]
pub struct LiveSnapshot {
    config: SchedulerConfig,
    nodes: BTreeMap<String, NodeInput>,
    pods: HashMap<PodKey, BoundPodInput>,
    /// Each node name's pods (also for names no node has yet).
    pods_by_node: HashMap<String, BTreeSet<PodKey>>,
    groups: BTreeMap<PodKey, PodGroup>,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    workload_selectors: Arc<WorkloadSelectors>,
    storage: Arc<Storage>,
    /// `None`: stale, built whole on the next read.
    built: Option<Snapshot>,
    counts: LiveCounts,
}

impl LiveSnapshot {
    /// An empty cluster, read with `config`'s network tiers and spot instance types.
    pub fn new(config: &SchedulerConfig) -> LiveSnapshot {
        LiveSnapshot {
            config: config.clone(),
            nodes: BTreeMap::new(),
            pods: HashMap::new(),
            pods_by_node: HashMap::new(),
            groups: BTreeMap::new(),
            namespaces: BTreeMap::new(),
            workload_selectors: Arc::default(),
            storage: Arc::default(),
            built: None,
            counts: LiveCounts::default(),
        }
    }

    pub fn counts(&self) -> LiveCounts {
        self.counts
    }

    /// Adds or replaces a node. A change to what its kubelet reports alone
    /// (`gpu_allocations`, `allocations_observed_at`, `images`) touches
    /// that node; any other change makes the snapshot stale.
    pub fn set_node(&mut self, node: NodeInput) {
        let name = node.name.clone();
        match self.nodes.get(&name) {
            Some(old) if *old == node => {
                // Kept all the same: it may hold the newest object's spec,
                // letting the one it replaces go.
                self.nodes.insert(name, node);
                self.counts.unchanged += 1;
            }
            Some(old) if same_but_reading(old, &node) => {
                let images_changed = old.images != node.images;
                let reading_changed = old.gpu_allocations != node.gpu_allocations
                    || old.allocations_observed_at != node.allocations_observed_at;
                self.nodes.insert(name.clone(), node);
                if images_changed {
                    self.update_images(&name);
                }
                // The pods are inserted again only for a new GPU reading.
                if reading_changed {
                    self.update_node(&name);
                }
            }
            _ => {
                self.nodes.insert(name, node);
                self.built = None;
            }
        }
    }

    /// Removes a node (its pods stay, named as on an unknown node, until
    /// they go too).
    pub fn remove_node(&mut self, name: &str) {
        if self.nodes.remove(name).is_some() {
            self.built = None;
        }
    }

    /// Adds or replaces a bound pod (by namespace and name).
    pub fn set_pod(&mut self, pod: BoundPodInput) {
        let key = (pod.namespace.clone(), pod.name.clone());
        let old_node = match self.pods.get(&key) {
            Some(old) if *old == pod => {
                self.counts.unchanged += 1;
                return;
            }
            Some(old) => Some(old.node.clone()),
            None => None,
        };
        let node = pod.node.clone();
        if let Some(old) = &old_node
            && *old != node
            && let Some(set) = self.pods_by_node.get_mut(old)
        {
            set.remove(&key);
        }
        self.pods_by_node
            .entry(node.clone())
            .or_default()
            .insert(key.clone());
        self.pods.insert(key, pod);
        if let Some(old) = old_node.filter(|o| *o != node) {
            self.update_node(&old);
        }
        self.update_node(&node);
    }

    /// Removes a bound pod (deleted, finished, or no longer holding anything).
    pub fn remove_pod(&mut self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        let Some(old) = self.pods.remove(&key) else {
            return;
        };
        if let Some(set) = self.pods_by_node.get_mut(&old.node) {
            set.remove(&key);
            if set.is_empty() {
                self.pods_by_node.remove(&old.node);
            }
        }
        self.update_node(&old.node);
    }

    /// Adds or replaces a PodGroup (the snapshot becomes stale).
    pub fn set_pod_group(&mut self, group: PodGroup) {
        let key = (group.namespace.clone(), group.name.clone());
        if self.groups.get(&key) != Some(&group) {
            self.groups.insert(key, group);
            self.built = None;
        }
    }

    pub fn remove_pod_group(&mut self, namespace: &str, name: &str) {
        if self
            .groups
            .remove(&(namespace.to_string(), name.to_string()))
            .is_some()
        {
            self.built = None;
        }
    }

    /// Adds or replaces a namespace's labels; the kept snapshot takes the
    /// new labels without a rebuild (they are read per decision).
    pub fn set_namespace(&mut self, name: &str, labels: BTreeMap<String, String>) {
        if self.namespaces.get(name) == Some(&labels) {
            self.counts.unchanged += 1;
            return;
        }
        self.namespaces.insert(name.to_string(), labels);
        self.share_namespaces();
    }

    pub fn remove_namespace(&mut self, name: &str) {
        if self.namespaces.remove(name).is_some() {
            self.share_namespaces();
        }
    }

    /// Replaces the Services' and controllers' selectors; the kept
    /// snapshot takes them without a rebuild.
    pub fn set_workload_selectors(&mut self, selectors: WorkloadSelectors) {
        if *self.workload_selectors == selectors {
            self.counts.unchanged += 1;
            return;
        }
        self.workload_selectors = Arc::new(selectors);
        if let Some(snapshot) = self.built.as_mut() {
            snapshot.workload_selectors = Arc::clone(&self.workload_selectors);
        }
    }

    /// Replaces the claims, volumes and classes; the kept snapshot takes
    /// them without a rebuild.
    pub fn set_storage(&mut self, storage: Storage) {
        if *self.storage == storage {
            self.counts.unchanged += 1;
            return;
        }
        self.storage = Arc::new(storage);
        if let Some(snapshot) = self.built.as_mut() {
            snapshot.storage = Arc::clone(&self.storage);
        }
    }

    fn share_namespaces(&mut self) {
        if let Some(snapshot) = self.built.as_mut() {
            snapshot.namespaces = Arc::new(self.namespaces.clone());
        }
    }

    /// The snapshot as of every change so far, built whole only when stale.
    pub fn snapshot(&mut self) -> Result<&Snapshot, SnapshotError> {
        let snapshot = match self.built.take() {
            Some(s) => s,
            None => {
                self.counts.full_builds += 1;
                self.fresh()?
            }
        };
        Ok(self.built.insert(snapshot))
    }

    /// A snapshot of the same inputs built from scratch: what
    /// [`LiveSnapshot::snapshot`] must equal.
    pub fn fresh(&self) -> Result<Snapshot, SnapshotError> {
        let mut b = SnapshotBuilder::new(&self.config);
        for n in self.nodes.values() {
            b.node(n.clone());
        }
        for p in self.pods.values() {
            b.pod(p.clone());
        }
        for g in self.groups.values() {
            b.pod_group(g.clone());
        }
        for (name, labels) in &self.namespaces {
            b.namespace(name, labels.clone());
        }
        b.workload_selectors((*self.workload_selectors).clone());
        b.storage((*self.storage).clone());
        b.build()
    }

    /// `name`'s images replaced, when the snapshot is built.
    fn update_images(&mut self, name: &str) {
        let (Some(snapshot), Some(input)) = (self.built.as_mut(), self.nodes.get(name)) else {
            return;
        };
        if let Some(id) = snapshot.node_id(name) {
            self.counts.node_updates += 1;
            snapshot.set_node_images(id, &input.images);
        }
    }

    /// `name`'s pods inserted again, when the snapshot is built (a stale
    /// one is built whole later anyway).
    fn update_node(&mut self, name: &str) {
        let Some(snapshot) = self.built.as_mut() else {
            return;
        };
        self.counts.node_updates += 1;
        let (Some(id), Some(input)) = (snapshot.node_id(name), self.nodes.get(name)) else {
            // Pods on a node the snapshot lacks are only named.
            let orphans = self
                .pods_by_node
                .iter()
                .filter(|(node, _)| !self.nodes.contains_key(*node))
                .flat_map(|(_, keys)| keys.iter().filter_map(|k| self.pods.get(k)));
            snapshot.warning_parts.orphans = orphan_warnings(orphans);
            snapshot.rejoin_warnings();
            return;
        };
        let reports = NodeReports::new(&input.gpu_allocations, input.allocations_observed_at);
        let pods: Vec<BoundPodInput> = self
            .pods_by_node
            .get(name)
            .into_iter()
            .flatten()
            .filter_map(|k| self.pods.get(k).cloned())
            .collect();
        snapshot.clear_node_pods(id);
        match snapshot.insert_node_pods(id, pods, &reports) {
            // Rejoining walks every warning: only when this node's changed.
            Ok(warnings) => {
                if snapshot.set_pod_warnings(id, warnings) {
                    snapshot.rejoin_warnings();
                }
            }
            Err(_) => self.built = None,
        }
    }
}

/// Whether two inputs of one node differ at most in what the kubelet
/// reports: the GPU reading and the images (every other field named, so
/// that a new one cannot be missed).
fn same_but_reading(a: &NodeInput, b: &NodeInput) -> bool {
    let NodeInput {
        name,
        labels,
        taints,
        unschedulable,
        allocatable,
        topology,
        gpu_allocations: _,
        allocations_observed_at: _,
        images: _,
        declared_features,
    } = a;
    *name == b.name
        && *labels == b.labels
        && *taints == b.taints
        && *unschedulable == b.unschedulable
        && *allocatable == b.allocatable
        && *topology == b.topology
        && *declared_features == b.declared_features
}
