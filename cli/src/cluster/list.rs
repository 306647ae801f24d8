//! A cluster as a `kind: List` of Kubernetes objects (Nodes, Pods,
//! GpuTopologies, PodGroups, DRA's ResourceSlices, ResourceClaims and
//! DeviceClasses, what inter-pod affinity and topology spread read:
//! Namespaces, Services, ReplicaSets, StatefulSets, ReplicationControllers,
//! and what the volume plugins read: PersistentVolumeClaims,
//! PersistentVolumes, StorageClasses, CSINodes), as `kubectl get ... -o yaml` prints
//! them. As the scheduler watches the storage kinds, a pod's claims are
//! judged against those in the List: a claim missing from it is missing.

use super::reports::node_reports;
use super::{Cluster, ClusterDra, ClusterFileError, Overrides, apply_overrides, invalid};
use gputopo_api::GpuTopology;
use gputopo_api::k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use gputopo_api::k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use gputopo_api::k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSIStorageCapacity, StorageClass,
};
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::snapshot::from_k8s::{bound_pod_input, node_input, workload_selectors};
use gputopo_scheduler_core::snapshot::{PodGroup, SnapshotBuilder, storage};
use std::collections::BTreeMap;
use std::path::Path;

/// A `kind: List` of Nodes, Pods, GpuTopologies, PodGroups, ResourceSlices,
/// ResourceClaims and DeviceClasses.
pub(super) fn load_list(
    path: &Path,
    value: &serde_yaml::Value,
    overrides: &Overrides,
) -> Result<Cluster, ClusterFileError> {
    let mut config = SchedulerConfig::default();
    apply_overrides(path, &mut config, overrides)?;
    let items = value
        .get("items")
        .and_then(|i| i.as_sequence())
        .ok_or_else(|| invalid(path, "items", "a List needs items"))?;
    let mut nodes: Vec<Node> = Vec::new();
    let mut topologies: BTreeMap<String, GpuTopology> = BTreeMap::new();
    let mut pods: Vec<(usize, Pod)> = Vec::new();
    let mut dra = ClusterDra::default();
    let mut owners = Owners::default();
    let mut volumes = Volumes::default();
    let mut builder = SnapshotBuilder::new(&config);
    for (i, item) in items.iter().enumerate() {
        let at = format!("items[{i}]");
        let kind = item.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        let parse_err = |e: serde_yaml::Error| invalid(path, &at, e);
        match kind {
            "Node" => nodes.push(serde_yaml::from_value(item.clone()).map_err(parse_err)?),
            "Pod" => pods.push((i, serde_yaml::from_value(item.clone()).map_err(parse_err)?)),
            "GpuTopology" => {
                let t: GpuTopology = serde_yaml::from_value(item.clone()).map_err(parse_err)?;
                let name = t
                    .metadata
                    .name
                    .clone()
                    .unwrap_or_else(|| t.spec.node_name.clone());
                topologies.insert(name, t);
            }
            "PodGroup" => {
                builder.pod_group(pod_group(path, &at, item)?);
            }
            "ResourceSlice" => dra
                .slices
                .push(serde_yaml::from_value(item.clone()).map_err(parse_err)?),
            "ResourceClaim" => dra
                .claims
                .push(serde_yaml::from_value(item.clone()).map_err(parse_err)?),
            "DeviceClass" => dra
                .classes
                .push(serde_yaml::from_value(item.clone()).map_err(parse_err)?),
            "Namespace" => {
                let n: Namespace = serde_yaml::from_value(item.clone()).map_err(parse_err)?;
                let name = n
                    .metadata
                    .name
                    .clone()
                    .ok_or_else(|| invalid(path, &at, "a Namespace without metadata.name"))?;
                builder.namespace(&name, n.metadata.labels.unwrap_or_default());
            }
            other if read_side(&mut owners, &mut volumes, other, item).map_err(parse_err)? => {}
            other => {
                return Err(invalid(
                    path,
                    &format!("{at}.kind"),
                    format!(
                        "{other:?} is not read; accepted: Node, Pod, GpuTopology, PodGroup, ResourceSlice, ResourceClaim, DeviceClass, Namespace, Service, ReplicaSet, StatefulSet, ReplicationController, PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode"
                    ),
                ));
            }
        }
    }
    // As the scheduler does: a stale reading is not believed.
    let trust = ReadingTrust::at(overrides.now.unwrap_or_else(Timestamp::now));
    for node in &nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let input = node_input(node, topologies.get(&name), trust)
            .map_err(|e| invalid(path, &format!("Node {name}"), e))?;
        builder.node(input);
    }
    let reports = node_reports(&topologies, pods.iter().map(|(_, p)| p), trust);
    let mut pending = Vec::new();
    for (i, pod) in &pods {
        match bound_pod_input(pod).map_err(|e| invalid(path, &format!("items[{i}]"), e))? {
            Some(input) => {
                builder.pod(input);
            }
            None if unbound(pod) => pending.push(pod.clone()),
            None => {}
        }
    }
    builder.workload_selectors(workload_selectors(
        &owners.services,
        &owners.replica_sets,
        &owners.stateful_sets,
        &owners.replication_controllers,
    ));
    let (mut read, mut unreadable) = storage(
        &volumes.claims,
        &volumes.volumes,
        &volumes.classes,
        &volumes.csi_nodes,
    );
    unreadable.extend(read.read_capacity(&volumes.drivers, &volumes.capacities));
    if let Some(e) = unreadable.first() {
        return Err(invalid(path, &format!("{} {}", e.kind, e.name), e));
    }
    builder.storage(read);
    let snapshot = builder
        .build()
        .map_err(|e| invalid(path, "(snapshot)", e))?;
    dra.topologies = topologies.into_values().collect();
    Ok(Cluster {
        snapshot,
        config,
        reports,
        dra,
        pending,
    })
}

/// A pod waiting for a node (not finished, no node named).
fn unbound(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    node.is_none_or(str::is_empty) && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Reads an item of the owners' or the storage kinds into its list;
/// `false` for any other kind.
fn read_side(
    owners: &mut Owners,
    volumes: &mut Volumes,
    kind: &str,
    item: &serde_yaml::Value,
) -> Result<bool, serde_yaml::Error> {
    fn parse<T: serde::de::DeserializeOwned>(
        item: &serde_yaml::Value,
    ) -> Result<T, serde_yaml::Error> {
        serde_yaml::from_value(item.clone())
    }
    match kind {
        "Service" => owners.services.push(parse(item)?),
        "ReplicaSet" => owners.replica_sets.push(parse(item)?),
        "StatefulSet" => owners.stateful_sets.push(parse(item)?),
        "ReplicationController" => owners.replication_controllers.push(parse(item)?),
        "PersistentVolumeClaim" => volumes.claims.push(parse(item)?),
        "PersistentVolume" => volumes.volumes.push(parse(item)?),
        "StorageClass" => volumes.classes.push(parse(item)?),
        "CSINode" => volumes.csi_nodes.push(parse(item)?),
        "CSIDriver" => volumes.drivers.push(parse(item)?),
        "CSIStorageCapacity" => volumes.capacities.push(parse(item)?),
        _ => return Ok(false),
    }
    Ok(true)
}

/// The owners whose selectors give spread's default constraints.
#[derive(Default)]
struct Owners {
    services: Vec<Service>,
    replica_sets: Vec<ReplicaSet>,
    stateful_sets: Vec<StatefulSet>,
    replication_controllers: Vec<ReplicationController>,
}

/// What the volume plugins read.
#[derive(Default)]
struct Volumes {
    claims: Vec<PersistentVolumeClaim>,
    volumes: Vec<PersistentVolume>,
    classes: Vec<StorageClass>,
    csi_nodes: Vec<CSINode>,
    drivers: Vec<CSIDriver>,
    capacities: Vec<CSIStorageCapacity>,
}

/// A scheduler-plugins PodGroup item: its name, namespace, `minMember`
/// and `scheduleTimeoutSeconds`.
fn pod_group(
    path: &Path,
    at: &str,
    item: &serde_yaml::Value,
) -> Result<PodGroup, ClusterFileError> {
    let name = item
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str())
        .ok_or_else(|| invalid(path, at, "a PodGroup without metadata.name"))?;
    let namespace = item
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(|n| n.as_str())
        .unwrap_or("default");
    let spec = item.get("spec");
    let min_member = spec
        .and_then(|s| s.get("minMember"))
        .and_then(|m| m.as_u64())
        .and_then(|m| u32::try_from(m).ok())
        .filter(|&m| m > 0)
        .ok_or_else(|| {
            invalid(
                path,
                &format!("{at}.spec.minMember"),
                "a whole number of at least 1",
            )
        })?;
    Ok(PodGroup {
        namespace: namespace.to_string(),
        name: name.to_string(),
        min_member,
        schedule_timeout_seconds: spec
            .and_then(|s| s.get("scheduleTimeoutSeconds"))
            .and_then(|m| m.as_u64())
            .and_then(|m| u32::try_from(m).ok()),
    })
}
