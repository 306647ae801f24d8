//! From the watched objects to what one scheduling cycle decides on: the
//! pods waiting for this scheduler, the gangs they form, and the
//! [`Snapshot`]. Pure functions over the objects, plus the assume cache.
//!
//! # The assume cache
//!
//! A pod this scheduler has bound is not in its pod store until the watch
//! delivers the binding. Until then it is *assumed*: its placement is added
//! to every snapshot, so the next decision does not hand out its GPUs again
//! (kube-scheduler's assume cache does the same). An assumed pod is
//! forgotten once the store shows it bound (its own annotations then say
//! which GPUs it holds), once it is gone, or when its uid changes.

use crate::gangs::GangObjects;
use gputopo_api::GpuTopology;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::gpuset::stranded_free_gpus;
use gputopo_scheduler_core::reported::ReadingState;
pub use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::snapshot::from_k8s::{bound_pod_input, node_input};
use gputopo_scheduler_core::snapshot::{BoundPodInput, Snapshot, SnapshotBuilder, SnapshotError};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// `namespace/name`.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// Whether `pod` waits for one of `names` to place it: its scheduler is
/// one of them, it has no node, it is not being deleted and not finished,
/// and no scheduling gate holds it (Kueue and others gate pods until they
/// admit them; a gated pod is not placed, reserved for, counted in a
/// gang's quorum or a reason to preempt).
pub fn is_pending_for(pod: &Pod, names: &[String]) -> bool {
    is_unbound_for(pod, names) && !is_gated(pod)
}

/// The node a preemptor waits on (`status.nominatedNodeName`), if any.
pub fn nominated_node(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Whether a scheduling gate (`spec.schedulingGates`) holds `pod` back.
pub fn is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// [`is_pending_for`] whether gated or not.
pub fn is_unbound_for(pod: &Pod, names: &[String]) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    let ours = spec
        .scheduler_name
        .as_deref()
        .is_some_and(|n| names.iter().any(|m| m == n));
    let unbound = spec.node_name.as_deref().is_none_or(str::is_empty);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    ours && unbound
        && pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// A pod placed by this scheduler and not yet seen bound.
#[derive(Clone, Debug)]
pub struct Assumed {
    pub uid: Option<String>,
    pub input: BoundPodInput,
    pub since: Instant,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct AssumeCache {
    pods: HashMap<String, Assumed>,
}

impl AssumeCache {
    pub fn assume(&mut self, key: String, assumed: Assumed) {
        self.pods.insert(key, assumed);
    }

    pub fn contains(&self, key: &str) -> bool {
        self.pods.contains_key(key)
    }

    /// Forgets an assumption whose binding failed.
    pub fn forget(&mut self, key: &str) {
        self.pods.remove(key);
    }

    /// The node an assumed pod was bound to.
    pub fn node_of(&self, key: &str) -> Option<&str> {
        self.pods.get(key).map(|a| a.input.node.as_str())
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Forgets the pods the store shows bound, gone, or replaced; returns
    /// how many were forgotten.
    pub fn reconcile(&mut self, pods: &HashMap<String, Arc<Pod>>) -> usize {
        let before = self.pods.len();
        self.pods.retain(|key, a| match pods.get(key) {
            None => false,
            Some(p) => {
                let bound = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|n| !n.is_empty());
                !bound && p.metadata.uid == a.uid
            }
        });
        before - self.pods.len()
    }

    fn inputs(&self) -> impl Iterator<Item = &BoundPodInput> {
        self.pods.values().map(|a| &a.input)
    }

    /// Each assumed pod's `namespace/name` and placement.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &BoundPodInput)> {
        self.pods.iter().map(|(k, a)| (k.as_str(), &a.input))
    }
}

/// The watched objects, as one cycle reads them. With a change list
/// (`changed`), `nodes`, `topologies` and `pods` are not read (the daemon
/// leaves them empty): the cycle keeps every object it was given or told
/// of (`live_cluster.rs`).
pub struct Objects<'a> {
    pub nodes: &'a [Arc<Node>],
    pub topologies: &'a [Arc<GpuTopology>],
    pub pods: &'a [Arc<Pod>],
    /// Their labels, for inter-pod terms' `namespaceSelector`s.
    pub namespaces: &'a [Arc<Namespace>],
    /// Services and controllers: spread's default constraints.
    pub workloads: &'a crate::workload_objects::WorkloadObjects,
    /// Claims, volumes and classes: the volume plugins.
    pub storage: &'a crate::storage_objects::StorageObjects,
    pub gangs: &'a GangObjects,
    pub dra: &'a crate::claims::DraObjects,
    /// Which nodes, topologies and pods changed since the cycle was last
    /// given objects (`change_feed.rs`); `None`: anything may have, so
    /// the three lists hold every object, each compared with what the
    /// cycle last read.
    pub changed: Option<&'a crate::change_feed::ChangedObjects>,
}

/// Builds the snapshot: every node (with the `GpuTopology` of its name),
/// every pod holding resources on a node, whoever bound it, the assumed
/// pods, the PodGroups. A node's reported allocations count only while its
/// reading is fresh (`trust`). An object that cannot be read is left out and
/// named in the returned warnings; the snapshot's own warnings follow.
pub fn build_snapshot(
    objects: &Objects<'_>,
    assumed: &AssumeCache,
    config: &SchedulerConfig,
    trust: ReadingTrust,
) -> Result<(Snapshot, Vec<String>), SnapshotError> {
    let mut warnings = Vec::new();
    let topologies: HashMap<&str, &GpuTopology> = objects
        .topologies
        .iter()
        .filter_map(|t| Some((t.metadata.name.as_deref()?, t.as_ref())))
        .collect();
    let mut builder = SnapshotBuilder::new(config);
    for node in objects.nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let topology = topologies.get(name).copied();
        match node_input(node, topology, trust) {
            Ok(input) => {
                let status = topology.and_then(|t| t.status.as_ref());
                warnings.extend(stale_reading_warning(name, trust.state(status), trust));
                builder.node(input);
            }
            Err(e) => warnings.push(node_left_out(&e)),
        }
    }
    for pod in objects.pods {
        match bound_pod_input(pod) {
            Ok(Some(input)) => {
                builder.pod(input);
            }
            Ok(None) => {}
            Err(e) => warnings.push(pod_left_out(&e)),
        }
    }
    for input in assumed.inputs() {
        builder.pod(input.clone());
    }
    for group in &objects.gangs.pod_groups {
        if let Some(g) = group.to_core() {
            builder.pod_group(g);
        }
    }
    for (name, labels) in namespace_labels(objects.namespaces) {
        builder.namespace(&name, labels);
    }
    builder.workload_selectors(objects.workloads.selectors());
    let (storage, unreadable) = objects.storage.storage();
    warnings.extend(
        unreadable
            .iter()
            .map(crate::storage_objects::storage_warning),
    );
    builder.storage(storage);
    let snapshot = builder.build()?;
    warnings.extend(snapshot.warnings().iter().map(ToString::to_string));
    Ok((snapshot, warnings))
}

/// Each namespace's name and labels.
pub fn namespace_labels(
    namespaces: &[Arc<Namespace>],
) -> impl Iterator<Item = (String, std::collections::BTreeMap<String, String>)> + '_ {
    namespaces.iter().filter_map(|n| {
        let name = n.metadata.name.clone()?;
        Some((name, n.metadata.labels.clone().unwrap_or_default()))
    })
}

/// The warning for a node whose kubelet reading is too old to count, if it
/// is. Stable text: the cycle logs a warning once, when new.
pub fn stale_reading_warning(
    name: &str,
    state: ReadingState,
    trust: ReadingTrust,
) -> Option<String> {
    let ReadingState::Stale { observed_at, .. } = state else {
        return None;
    };
    // The agent writes the epoch until its first reading succeeds (a node
    // without a reachable kubelet, such as a kwok one): no date to give.
    if observed_at == k8s_openapi::jiff::Timestamp::UNIX_EPOCH {
        return Some(format!(
            "node {name}: its agent has not read the kubelet's allocations yet (its GpuTopology's status.podResources.lastError says why): the pods' assigned-gpus count instead"
        ));
    }
    Some(format!(
        "node {name}: its kubelet allocations were read at {observed_at}, more than {} ago: the pods' assigned-gpus count instead",
        humantime::format_duration(trust.max_age)
    ))
}

/// The warning for a node that cannot be read.
pub fn node_left_out(e: &impl std::fmt::Display) -> String {
    format!("node left out: {e}")
}

/// The warning for a bound pod that cannot be read.
pub fn pod_left_out(e: &impl std::fmt::Display) -> String {
    format!("bound pod left out: {e}")
}

/// GPU use over the snapshot, for the gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Held whole or shared, over listed.
    pub allocation_ratio: f64,
    /// Free GPUs no 8-GPU request could use, over free GPUs (nodes with a topology).
    pub fragmentation_ratio: f64,
}

pub fn usage(snapshot: &Snapshot) -> Usage {
    let (mut listed, mut used, mut free, mut stranded) = (0u64, 0u64, 0u64, 0u64);
    for node in snapshot.nodes() {
        listed += u64::from(node.gpus().count_ones());
        used += u64::from((node.held_gpus() | node.shared_gpus()).count_ones());
        if let Some(shape) = node.shape() {
            free += u64::from(node.free_gpus().count_ones());
            stranded += u64::from(stranded_free_gpus(shape, node.free_gpus(), 8));
        }
    }
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    Usage {
        allocation_ratio: ratio(used, listed),
        fragmentation_ratio: ratio(stranded, free),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("a pod")
    }

    #[test]
    fn pending_means_ours_unbound_and_alive() {
        let names = vec!["gputopo-scheduler".to_string()];
        let p = pod(json!({"metadata": {"name": "a", "namespace": "n"},
            "spec": {"schedulerName": "gputopo-scheduler", "containers": []}}));
        assert!(is_pending_for(&p, &names));
        let other = pod(json!({"metadata": {"name": "a"},
            "spec": {"schedulerName": "default-scheduler", "containers": []}}));
        assert!(!is_pending_for(&other, &names));
        let bound = pod(json!({"metadata": {"name": "a"},
            "spec": {"schedulerName": "gputopo-scheduler", "nodeName": "n1", "containers": []}}));
        assert!(!is_pending_for(&bound, &names));
        let done = pod(json!({"metadata": {"name": "a"},
            "spec": {"schedulerName": "gputopo-scheduler", "containers": []},
            "status": {"phase": "Failed"}}));
        assert!(!is_pending_for(&done, &names));
    }

    #[test]
    fn assumed_pods_are_forgotten_once_seen_bound_or_gone() {
        let mut cache = AssumeCache::default();
        let input = BoundPodInput::new("n", "a", "node-1");
        for key in ["n/a", "n/b", "n/c"] {
            cache.assume(
                key.into(),
                Assumed {
                    uid: Some("u1".into()),
                    input: input.clone(),
                    since: Instant::now(),
                },
            );
        }
        let unbound = Arc::new(pod(
            json!({"metadata": {"name": "a", "namespace": "n", "uid": "u1"},
            "spec": {"containers": []}}),
        ));
        let bound = Arc::new(pod(
            json!({"metadata": {"name": "b", "namespace": "n", "uid": "u1"},
            "spec": {"nodeName": "node-1", "containers": []}}),
        ));
        let store = HashMap::from([("n/a".to_string(), unbound), ("n/b".to_string(), bound)]);
        assert_eq!(cache.reconcile(&store), 2);
        assert!(cache.contains("n/a") && !cache.contains("n/b") && !cache.contains("n/c"));
    }

    #[test]
    fn a_node_never_read_is_not_dated_to_the_epoch() {
        let trust = ReadingTrust {
            now: "2026-11-29T12:00:00Z".parse().expect("a time"),
            max_age: std::time::Duration::from_secs(900),
        };
        let stale = |observed_at: k8s_openapi::jiff::Timestamp| ReadingState::Stale {
            observed_at,
            age: trust.now.duration_since(observed_at),
        };
        let never = stale_reading_warning(
            "kwok-1",
            stale(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            trust,
        )
        .expect("a warning");
        assert!(!never.contains("1970"), "{never}");
        assert!(never.contains("has not read the kubelet"), "{never}");
        let old =
            stale_reading_warning("n1", stale("2026-11-29T11:00:00Z".parse().unwrap()), trust)
                .expect("a warning");
        assert!(old.contains("read at 2026-11-29T11:00:00Z"), "{old}");
    }
}
