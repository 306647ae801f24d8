//! The cycle's view of the watched objects, kept from one cycle to the
//! next: every pod by key, the pending ones, and the snapshot
//! ([`LiveSnapshot`]) instead of built whole from the stores every time.
//!
//! Each cycle is told which nodes, topologies and pods changed
//! (`change_feed.rs`) and reads only those, plus the kubelet readings that
//! have aged past trust since (a reading ages without a change naming it).
//! Without that list (the first cycle, a relist, the tests' literal
//! objects) every object is compared by pointer with the last read: the
//! reflector replaces an object's `Arc` on every change, so an unchanged
//! one is skipped. A pod bound or gone re-reads one node, not the cluster;
//! a node, its `GpuTopology` or whether its kubelet reading is still
//! believed changed: that node is given again (its labels or topology
//! changing rebuilds the snapshot whole; see `LiveSnapshot`).
//!
//! The pods this scheduler has bound and the watch has not shown yet (the
//! assume cache) count as bound here too, until the watched pod is bound
//! (it takes over) or the assumption is dropped.
//!
//! What it returns equals [`crate::cluster::build_snapshot`] of the same
//! objects, warnings included as a set, whether read by change list or by
//! comparison (`cycle/tests/live.rs`).

use crate::assignment_record::{AssignmentRecord, RecordFinding, RecordKeeper};
use crate::change_feed::ChangedObjects;
use crate::cluster::{
    AssumeCache, Objects, ReadingTrust, is_pending_for, node_left_out, pod_key, pod_left_out,
    stale_reading_warning,
};
use crate::storage_objects::StorageObjects;
use crate::workload_objects::WorkloadObjects;
use gputopo_api::GpuTopology;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::reported::ReadingState;
use gputopo_scheduler_core::snapshot::from_k8s::{bound_pod_input, node_input_shared};
use gputopo_scheduler_core::snapshot::{
    BoundPodInput, LiveCounts, LiveSnapshot, PodGroup, Snapshot, SnapshotError,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// The prefix of the object-warning keys of unreadable storage objects.
const STORAGE_WARNING: &str = "storage:";

/// A node as last given to the live snapshot.
#[derive(Debug)]
struct FedNode {
    node: Arc<Node>,
    topology: Option<Arc<GpuTopology>>,
    reading: ReadingKey,
    /// When its fresh reading turns stale (a key of `turns_stale`).
    stale_after: Option<Timestamp>,
}

/// What of a [`ReadingState`] the snapshot depends on (not a stale
/// reading's age, which grows every cycle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadingKey {
    NotReported,
    Fresh(Timestamp),
    Stale(Timestamp),
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

/// Every watched pod by `namespace/name`: shared with the cycle's work
/// (gang assembly, preemption) without a copy; changed in place once the
/// cycle has let go of it.
pub type PodsByKey = Arc<HashMap<String, Arc<Pod>>>;

/// See the module docs.
#[derive(Debug)]
pub struct LiveCluster {
    live: LiveSnapshot,
    /// The scheduler names whose pods it places (for [`Self::pending`]).
    names: Vec<String>,
    /// Whether it has read the objects at least once: until then a change
    /// set cannot stand for them.
    synced: bool,
    /// The watched nodes and topologies by name, as last read.
    watched_nodes: BTreeMap<String, Arc<Node>>,
    topologies: BTreeMap<String, Arc<GpuTopology>>,
    /// The nodes given to the live snapshot.
    fed: HashMap<String, FedNode>,
    /// Fresh readings by when they turn stale: a reading ages without its
    /// object changing, so no change names it.
    turns_stale: BTreeSet<(Timestamp, String)>,
    pods: PodsByKey,
    /// The keys of the watched pods bound to a node.
    bound: HashSet<String>,
    /// The keys of the pods waiting for this scheduler, in key order.
    pending: BTreeSet<String>,
    /// The assumed pods given, by `namespace/name`.
    assumed: HashMap<String, BoundPodInput>,
    groups: BTreeMap<(String, String), PodGroup>,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// The owners and storage objects last read into the live snapshot:
    /// while the stores hand back the same objects, nothing is read again.
    workloads_read: WorkloadObjects,
    storage_read: StorageObjects,
    /// Objects left out or read with a caveat, by object: stable texts.
    object_warnings: BTreeMap<String, String>,
    /// The pod keys whose watched pod changed in this observation, given
    /// to the live snapshot at its end (not kept until a pod is due: a
    /// scheduler with nothing pending would hold every key other pods'
    /// churn names).
    touched: Vec<String>,
    /// Each bound pod's GPU record as first seen or written: the pods are
    /// read with it (`assignment_record`).
    records: RecordKeeper,
    /// The watched object of each pod read with another record than its
    /// annotations say (the pointer comparison is against what was
    /// watched, not the corrected copy).
    corrected: HashMap<String, Arc<Pod>>,
    /// What reading the records found, for the cycle to report.
    record_findings: Vec<(Arc<Pod>, RecordFinding)>,
}

impl LiveCluster {
    /// `names`: the scheduler names whose pods count as pending.
    pub fn new(config: &SchedulerConfig, names: Vec<String>) -> LiveCluster {
        LiveCluster {
            live: LiveSnapshot::new(config),
            names,
            synced: false,
            watched_nodes: BTreeMap::new(),
            topologies: BTreeMap::new(),
            fed: HashMap::new(),
            turns_stale: BTreeSet::new(),
            pods: Arc::default(),
            bound: HashSet::new(),
            pending: BTreeSet::new(),
            assumed: HashMap::new(),
            groups: BTreeMap::new(),
            namespaces: BTreeMap::new(),
            workloads_read: WorkloadObjects::default(),
            storage_read: StorageObjects::default(),
            object_warnings: BTreeMap::new(),
            touched: Vec::new(),
            records: RecordKeeper::default(),
            corrected: HashMap::new(),
            record_findings: Vec::new(),
        }
    }

    /// This scheduler bound `pod` with `record` (its binding's
    /// annotations): what it reads of the pod from now on.
    pub fn record_written(&mut self, pod: &Pod, record: AssignmentRecord) {
        self.records
            .wrote(&pod_key(pod), pod.metadata.uid.as_deref(), record);
    }

    /// What reading the pods' GPU records found since the last call.
    pub fn take_record_findings(&mut self) -> Vec<(Arc<Pod>, RecordFinding)> {
        std::mem::take(&mut self.record_findings)
    }

    pub fn counts(&self) -> LiveCounts {
        self.live.counts()
    }

    /// Every watched pod by `namespace/name`, as last read.
    pub fn pods(&self) -> &PodsByKey {
        &self.pods
    }

    /// Every watched node, by name, as last read.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<Node>> {
        self.watched_nodes.values()
    }

    pub fn node(&self, name: &str) -> Option<&Arc<Node>> {
        self.watched_nodes.get(name)
    }

    /// Every watched `GpuTopology` that could be read, by name, as last read.
    pub fn topologies(&self) -> impl Iterator<Item = &Arc<GpuTopology>> {
        self.topologies.values()
    }

    /// The pods waiting for this scheduler (unbound, not gated, not being
    /// deleted or finished), in key order.
    pub fn pending(&self) -> impl Iterator<Item = (&str, &Arc<Pod>)> {
        self.pending
            .iter()
            .filter_map(|k| Some((k.as_str(), self.pods.get(k)?)))
    }

    /// Reads what changed: only the objects `objects.changed` names (and
    /// readings that have aged past trust since), or, without it or before
    /// the first read, every object compared by pointer with the last read.
    /// Cheap where little changed; the snapshot is brought up to date
    /// later, by [`Self::snapshot`].
    pub fn observe(&mut self, objects: &Objects<'_>, trust: ReadingTrust) {
        match objects.changed {
            Some(changed) if self.synced => self.observe_changes(changed, trust),
            _ => self.observe_all(objects, trust),
        }
        self.synced = true;
        let touched = std::mem::take(&mut self.touched);
        self.give_pods(touched);
    }

    fn observe_changes(&mut self, changed: &ChangedObjects, trust: ReadingTrust) {
        let mut names: BTreeSet<String> = BTreeSet::new();
        for (name, node) in &changed.nodes {
            set_or_remove(&mut self.watched_nodes, name, node.as_ref());
            names.insert(name.clone());
        }
        for (name, topology) in &changed.topologies {
            set_or_remove(&mut self.topologies, name, topology.as_ref());
            names.insert(name.clone());
        }
        while let Some((at, _)) = self.turns_stale.first()
            && *at < trust.now
        {
            if let Some((_, name)) = self.turns_stale.pop_first() {
                names.insert(name);
            }
        }
        for name in names {
            self.feed_node(&name, trust);
        }
        for (key, pod) in &changed.pods {
            self.feed_pod(key, pod.as_ref());
        }
    }

    fn observe_all(&mut self, objects: &Objects<'_>, trust: ReadingTrust) {
        self.watched_nodes = objects
            .nodes
            .iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), n.clone()))
            .collect();
        self.topologies = objects
            .topologies
            .iter()
            .filter_map(|t| Some((t.metadata.name.clone()?, t.clone())))
            .collect();
        let names: BTreeSet<String> = self
            .watched_nodes
            .keys()
            .chain(self.fed.keys())
            .cloned()
            .collect();
        for name in names {
            self.feed_node(&name, trust);
        }
        let now: HashMap<String, &Arc<Pod>> =
            objects.pods.iter().map(|p| (pod_key(p), p)).collect();
        let gone: Vec<String> = self
            .pods
            .keys()
            .filter(|k| !now.contains_key(k.as_str()))
            .cloned()
            .collect();
        for key in gone {
            self.feed_pod(&key, None);
        }
        for (key, pod) in now {
            self.feed_pod(&key, Some(pod));
        }
    }

    /// Gives the live snapshot node `name` as the watched node and
    /// topology of that name say now, unless that is what it was given.
    fn feed_node(&mut self, name: &str, trust: ReadingTrust) {
        let Some(node) = self.watched_nodes.get(name).cloned() else {
            if let Some(fed) = self.fed.remove(name) {
                self.unschedule_staleness(name, fed.stale_after);
                self.set_warning(format!("node {name}"), None);
                self.live.remove_node(name);
            }
            return;
        };
        let topology = self.topologies.get(name).cloned();
        let reading = trust.state(topology.as_ref().and_then(|t| t.status.as_ref()));
        if let Some(fed) = self.fed.get(name)
            && Arc::ptr_eq(&fed.node, &node)
            && same_arc(fed.topology.as_ref(), topology.as_ref())
            && fed.reading == ReadingKey::from(reading)
        {
            return;
        }
        // The input holds the watched object's spec, not a copy.
        let warning = match node_input_shared(&node, topology.as_ref(), trust) {
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
        let stale_after = match reading {
            ReadingState::Fresh { observed_at } => SignedDuration::try_from(trust.max_age)
                .ok()
                .and_then(|age| observed_at.checked_add(age).ok()),
            _ => None,
        };
        let old = self.fed.insert(
            name.to_string(),
            FedNode {
                node,
                topology,
                reading: reading.into(),
                stale_after,
            },
        );
        self.unschedule_staleness(name, old.and_then(|o| o.stale_after));
        if let Some(at) = stale_after {
            self.turns_stale.insert((at, name.to_string()));
        }
    }

    fn unschedule_staleness(&mut self, name: &str, at: Option<Timestamp>) {
        if let Some(at) = at {
            self.turns_stale.remove(&(at, name.to_string()));
        }
    }

    /// Reads the pod under `key` as `pod` now (`None`: gone), unless it is
    /// the object last read.
    fn feed_pod(&mut self, key: &str, pod: Option<&Arc<Pod>>) {
        let pods = Arc::make_mut(&mut self.pods);
        let Some(watched) = pod else {
            self.records.forget(key);
            self.corrected.remove(key);
            if pods.remove(key).is_some() {
                self.bound.remove(key);
                self.pending.remove(key);
                self.set_warning(format!("pod {key}"), None);
                self.touched.push(key.to_string());
            }
            return;
        };
        let unchanged = match self.corrected.get(key) {
            Some(old) => Arc::ptr_eq(old, watched),
            None => pods.get(key).is_some_and(|old| Arc::ptr_eq(old, watched)),
        };
        if unchanged {
            return;
        }
        let observed = self.records.observe(key, watched);
        if Arc::ptr_eq(&observed.pod, watched) {
            self.corrected.remove(key);
        } else {
            self.corrected.insert(key.to_string(), watched.clone());
        }
        self.record_findings.extend(
            observed
                .findings
                .into_iter()
                .map(|f| (observed.pod.clone(), f)),
        );
        let pod = &observed.pod;
        pods.insert(key.to_string(), pod.clone());
        let (bound, warning) = match bound_pod_input(pod) {
            Ok(input) => (input.is_some(), None),
            Err(e) => (false, Some(pod_left_out(&e))),
        };
        if bound {
            self.bound.insert(key.to_string());
        } else {
            self.bound.remove(key);
        }
        if is_pending_for(pod, &self.names) {
            self.pending.insert(key.to_string());
        } else {
            self.pending.remove(key);
        }
        self.set_warning(format!("pod {key}"), warning);
        self.touched.push(key.to_string());
    }

    /// Brings the snapshot up to what was observed and `assumed`, and
    /// returns a copy for the cycle to work on (its assumptions and holds
    /// are its own) with the warnings, as
    /// [`crate::cluster::build_snapshot`] does.
    pub fn snapshot(
        &mut self,
        assumed: &AssumeCache,
    ) -> Result<(Snapshot, Vec<String>), SnapshotError> {
        self.sync_assumed(assumed);
        let snapshot = self.live.snapshot()?.clone();
        let mut warnings: Vec<String> = self.object_warnings.values().cloned().collect();
        warnings.extend(snapshot.warnings().iter().map(ToString::to_string));
        Ok((snapshot, warnings))
    }

    /// [`Self::observe`], the PodGroups, then [`Self::snapshot`].
    pub fn sync(
        &mut self,
        objects: &Objects<'_>,
        assumed: &AssumeCache,
        trust: ReadingTrust,
    ) -> Result<(Snapshot, Vec<String>), SnapshotError> {
        self.observe(objects, trust);
        self.sync_cluster_objects(objects);
        self.snapshot(assumed)
    }

    /// Gives the live snapshot the assumptions made or dropped since the
    /// last call.
    fn sync_assumed(&mut self, assumed: &AssumeCache) {
        let mut touched = Vec::new();
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
        self.give_pods(touched);
    }

    /// Gives the live snapshot each touched key's pod: the watched pod
    /// bound under it, else the assumed one, else none.
    fn give_pods(&mut self, mut touched: Vec<String>) {
        touched.sort();
        touched.dedup();
        for key in touched {
            // Read again from the pod (only for the keys touched) rather
            // than kept: the live snapshot holds the input already.
            let watched = self
                .bound
                .contains(&key)
                .then(|| self.pods.get(&key))
                .flatten()
                .and_then(|p| bound_pod_input(p).ok().flatten());
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

    /// The namespaces' labels (few; compared whole, the snapshot told only
    /// of a change).
    fn sync_namespaces(&mut self, objects: &Objects<'_>) {
        let now: BTreeMap<String, BTreeMap<String, String>> =
            crate::cluster::namespace_labels(objects.namespaces).collect();
        if now == self.namespaces {
            return;
        }
        for name in self.namespaces.keys() {
            if !now.contains_key(name) {
                self.live.remove_namespace(name);
            }
        }
        for (name, labels) in &now {
            if self.namespaces.get(name) != Some(labels) {
                self.live.set_namespace(name, labels.clone());
            }
        }
        self.namespaces = now;
    }

    /// What a decision reads beside nodes and pods, given whole each cycle:
    /// PodGroups, Namespaces, the owners' selectors, claims and volumes.
    pub fn sync_cluster_objects(&mut self, objects: &Objects<'_>) {
        self.sync_groups(objects);
        self.sync_namespaces(objects);
        if !objects.workloads.same_objects(&self.workloads_read) {
            self.live
                .set_workload_selectors(objects.workloads.selectors());
            self.workloads_read = objects.workloads.clone();
        }
        if !objects.storage.same_objects(&self.storage_read) {
            self.sync_storage(objects);
            self.storage_read = objects.storage.clone();
        }
    }

    /// Claims, volumes and classes (compared whole by the live snapshot);
    /// those that cannot be read are warnings until fixed.
    fn sync_storage(&mut self, objects: &Objects<'_>) {
        let (storage, unreadable) = objects.storage.storage();
        self.object_warnings
            .retain(|k, _| !k.starts_with(STORAGE_WARNING));
        for e in &unreadable {
            self.object_warnings.insert(
                format!("{STORAGE_WARNING}{}/{}", e.kind, e.name),
                crate::storage_objects::storage_warning(e),
            );
        }
        self.live.set_storage(storage);
    }

    /// The PodGroups (few; compared whole).
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

fn set_or_remove<T>(map: &mut BTreeMap<String, Arc<T>>, key: &str, value: Option<&Arc<T>>) {
    match value {
        Some(v) => {
            map.insert(key.to_string(), v.clone());
        }
        None => {
            map.remove(key);
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
