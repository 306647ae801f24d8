//! The cycle's snapshot kept from one cycle to the next
//! ([`LiveSnapshot`]) instead of built whole from the stores every time.
//! Each cycle hands over the watched objects; an object the store still
//! holds as the same `Arc` (the reflector replaces it on every change) is
//! skipped after a pointer compare, so only what changed since the last
//! cycle is read again: a pod bound or gone re-reads one node, not the
//! cluster. A node, its `GpuTopology` or whether its kubelet reading is
//! still believed changed: that node is given again (its labels or topology
//! changing rebuilds the snapshot whole; see `LiveSnapshot`).
//!
//! The pods this scheduler has bound and the watch has not shown yet (the
//! assume cache) count as bound here too, until the watched pod is bound
//! (it takes over) or the assumption is dropped.
//!
//! What it returns equals [`crate::cluster::build_snapshot`] of the same
//! objects (`tests` below), warnings included as a set.

use crate::cluster::{
    AssumeCache, Objects, ReadingTrust, node_left_out, pod_left_out, stale_reading_warning,
};
use gputopo_api::GpuTopology;
use gputopo_scheduler_core::accounting::ReadingState;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::snapshot::kube::{bound_pod_input, node_input};
use gputopo_scheduler_core::snapshot::{
    BoundPodInput, LiveCounts, LiveSnapshot, PodGroup, Snapshot, SnapshotError,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A node as last given to the live snapshot.
#[derive(Debug)]
struct FedNode {
    node: Arc<Node>,
    topology: Option<Arc<GpuTopology>>,
    reading: ReadingKey,
    seen: u64,
}

/// What of a [`ReadingState`] the snapshot depends on (not a stale
/// reading's age, which grows every cycle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadingKey {
    NotReported,
    Fresh(k8s_openapi::jiff::Timestamp),
    Stale(k8s_openapi::jiff::Timestamp),
}

impl From<ReadingState> for ReadingKey {
    fn from(state: ReadingState) -> ReadingKey {
        match state {
            ReadingState::NotReported => ReadingKey::NotReported,
            ReadingState::Fresh { observed_at } => ReadingKey::Fresh(observed_at),
            ReadingState::Stale { observed_at, .. } => ReadingKey::Stale(observed_at),
        }
    }
}

/// A watched pod as last read.
#[derive(Debug)]
struct FedPod {
    pod: Arc<Pod>,
    /// `namespace/name`.
    key: String,
    seen: u64,
}

/// See the module docs.
#[derive(Debug)]
pub struct LiveCluster {
    live: LiveSnapshot,
    nodes: HashMap<String, FedNode>,
    /// By uid (by `namespace/name` for a pod without one).
    pods: HashMap<String, FedPod>,
    /// `namespace/name` to the uid key of the watched pod bound under it.
    bound_keys: HashMap<String, String>,
    /// The assumed pods given, by `namespace/name`.
    assumed: HashMap<String, BoundPodInput>,
    groups: BTreeMap<(String, String), PodGroup>,
    /// Objects left out or read with a caveat, by object: stable texts.
    object_warnings: BTreeMap<String, String>,
    pass: u64,
}

impl LiveCluster {
    pub fn new(config: &SchedulerConfig) -> LiveCluster {
        LiveCluster {
            live: LiveSnapshot::new(config),
            nodes: HashMap::new(),
            pods: HashMap::new(),
            bound_keys: HashMap::new(),
            assumed: HashMap::new(),
            groups: BTreeMap::new(),
            object_warnings: BTreeMap::new(),
            pass: 0,
        }
    }

    pub fn counts(&self) -> LiveCounts {
        self.live.counts()
    }

    /// Brings the snapshot up to `objects` and `assumed`, and returns a copy
    /// for the cycle to work on (its assumptions and holds are its own) with
    /// the warnings, as [`crate::cluster::build_snapshot`] does.
    pub fn sync(
        &mut self,
        objects: &Objects<'_>,
        assumed: &AssumeCache,
        trust: ReadingTrust,
    ) -> Result<(Snapshot, Vec<String>), SnapshotError> {
        self.pass += 1;
        self.sync_nodes(objects, trust);
        let touched = self.sync_pods(objects.pods);
        self.sync_assumed(assumed, touched);
        self.sync_groups(objects);
        let snapshot = self.live.snapshot()?.clone();
        let mut warnings: Vec<String> = self.object_warnings.values().cloned().collect();
        warnings.extend(snapshot.warnings().iter().map(ToString::to_string));
        Ok((snapshot, warnings))
    }

    fn sync_nodes(&mut self, objects: &Objects<'_>, trust: ReadingTrust) {
        let topologies: HashMap<&str, &Arc<GpuTopology>> = objects
            .topologies
            .iter()
            .filter_map(|t| Some((t.metadata.name.as_deref()?, t)))
            .collect();
        for node in objects.nodes {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let topology = topologies.get(name).copied();
            let reading = trust.state(topology.and_then(|t| t.status.as_ref()));
            if let Some(fed) = self.nodes.get_mut(name)
                && Arc::ptr_eq(&fed.node, node)
                && same_arc(fed.topology.as_ref(), topology)
                && fed.reading == ReadingKey::from(reading)
            {
                fed.seen = self.pass;
                continue;
            }
            let warning = match node_input(node, topology.map(AsRef::as_ref), trust) {
                Ok(input) => {
                    self.live.set_node(input);
                    stale_reading_warning(name, reading, trust)
                }
                Err(e) => {
                    self.live.remove_node(name);
                    Some(node_left_out(&e))
                }
            };
            self.set_warning(format!("node {name}"), warning);
            self.nodes.insert(
                name.to_string(),
                FedNode {
                    node: node.clone(),
                    topology: topology.cloned(),
                    reading: reading.into(),
                    seen: self.pass,
                },
            );
        }
        let pass = self.pass;
        let gone: Vec<String> = self
            .nodes
            .extract_if(|_, f| f.seen != pass)
            .map(|(name, _)| name)
            .collect();
        for name in gone {
            self.set_warning(format!("node {name}"), None);
            self.live.remove_node(&name);
        }
    }

    /// Returns the `namespace/name` keys whose watched pod changed.
    fn sync_pods(&mut self, pods: &[Arc<Pod>]) -> Vec<String> {
        let mut touched = Vec::new();
        for pod in pods {
            let id = match pod.metadata.uid.as_deref() {
                Some(uid) => std::borrow::Cow::Borrowed(uid),
                None => std::borrow::Cow::Owned(crate::cluster::pod_key(pod)),
            };
            if let Some(fed) = self.pods.get_mut(id.as_ref())
                && Arc::ptr_eq(&fed.pod, pod)
            {
                fed.seen = self.pass;
                continue;
            }
            let key = crate::cluster::pod_key(pod);
            let (bound, warning) = match bound_pod_input(pod) {
                Ok(input) => (input.is_some(), None),
                Err(e) => (false, Some(pod_left_out(&e))),
            };
            self.set_warning(format!("pod {key}"), warning);
            touched.push(key.clone());
            let id = id.into_owned();
            if bound {
                self.bound_keys.insert(key.clone(), id.clone());
            } else if self.bound_keys.get(&key) == Some(&id) {
                self.bound_keys.remove(&key);
            }
            self.pods.insert(
                id,
                FedPod {
                    pod: pod.clone(),
                    key,
                    seen: self.pass,
                },
            );
        }
        let pass = self.pass;
        let gone: Vec<(String, FedPod)> = self.pods.extract_if(|_, f| f.seen != pass).collect();
        for (id, fed) in gone {
            self.set_warning(format!("pod {}", fed.key), None);
            if self.bound_keys.get(&fed.key) == Some(&id) {
                self.bound_keys.remove(&fed.key);
            }
            touched.push(fed.key);
        }
        touched
    }

    /// Gives the live snapshot each touched key's pod: the watched pod
    /// bound under it, else the assumed one, else none.
    fn sync_assumed(&mut self, assumed: &AssumeCache, mut touched: Vec<String>) {
        let now: HashMap<&str, &BoundPodInput> = assumed.entries().collect();
        for (key, input) in &now {
            if self.assumed.get(*key) != Some(*input) {
                touched.push((*key).to_string());
            }
        }
        let dropped: Vec<String> = self
            .assumed
            .keys()
            .filter(|k| !now.contains_key(k.as_str()))
            .cloned()
            .collect();
        touched.extend(dropped);
        self.assumed = now
            .into_iter()
            .map(|(k, i)| (k.to_string(), i.clone()))
            .collect();
        touched.sort();
        touched.dedup();
        for key in touched {
            // Read again from the pod (only for the keys touched) rather
            // than kept: the live snapshot holds the input already.
            let watched = self
                .bound_keys
                .get(&key)
                .and_then(|id| self.pods.get(id))
                .and_then(|f| bound_pod_input(&f.pod).ok().flatten());
            match watched.or_else(|| self.assumed.get(&key).cloned()) {
                Some(input) => self.live.set_pod(input),
                None => {
                    if let Some((namespace, name)) = key.split_once('/') {
                        self.live.remove_pod(namespace, name);
                    }
                }
            }
        }
    }

    fn sync_groups(&mut self, objects: &Objects<'_>) {
        let now: BTreeMap<(String, String), PodGroup> = objects
            .gangs
            .pod_groups
            .iter()
            .filter_map(|g| g.to_core())
            .map(|g| ((g.namespace.clone(), g.name.clone()), g))
            .collect();
        if now == self.groups {
            return;
        }
        for (namespace, name) in self.groups.keys() {
            if !now.contains_key(&(namespace.clone(), name.clone())) {
                self.live.remove_pod_group(namespace, name);
            }
        }
        for g in now.values() {
            self.live.set_pod_group(g.clone());
        }
        self.groups = now;
    }
}

impl LiveCluster {
    /// Sets (or with `None` clears) the warning about one object.
    fn set_warning(&mut self, object: String, warning: Option<String>) {
        match warning {
            Some(w) => {
                self.object_warnings.insert(object, w);
            }
            None => {
                self.object_warnings.remove(&object);
            }
        }
    }
}

fn same_arc<T>(a: Option<&Arc<T>>, b: Option<&Arc<T>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}
