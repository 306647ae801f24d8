//! Cluster snapshot files (`fixtures/clusters/*.yaml`): a compact,
//! hand-writable description of nodes, their topologies, the pods bound to
//! them and PodGroups; or a `kind: List` of Kubernetes objects as `kubectl get
//! nodes,pods,gputopologies,podgroups -A -o yaml` prints them (with
//! `resourceslices,resourceclaims,deviceclasses` for pods whose GPUs come
//! through Dynamic Resource Allocation).
//!
//! ```yaml
//! tiers: gputopo                  # a preset (gputopo, topograph, aws, each +gpu-clique)
//!                                 # or a list of label keys, outermost first
//! topologyManagerPolicy: none     # for nodes without gputopo.dev/topology-manager-policy
//! topologies:                     # named once, used by many nodes
//!   dgx1: {file: ../nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt}
//!   h100: {file: ../recorded/hgx-h100-8gpu-nvswitch-nvml.yaml}
//!   custom: {spec: {nodeName: x, source: fixture, ...}}   # a GpuTopology spec inline
//! nodes:
//!   - name: dgx1-{i:02}           # {i} is 1..=count; {i:02} pads to two digits
//!     count: 4
//!     topology: dgx1
//!     labels: {gputopo.dev/spine: s1, gputopo.dev/leaf: leaf-1}
//!     taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
//!     allocatable: {cpu: 80, memory: 512Gi}   # nvidia.com/gpu defaults to the GPU count;
//!                                             # cpu, memory, pods default to unlimited
//! pods:                           # pods already bound
//!   - name: train-{i}
//!     count: 2
//!     node: dgx1-{i:02}
//!     gpus: [0, 1, 2, 3]          # held whole; or gpuCount: 4 (indices unknown)
//!     annotations: {gputopo.dev/workload: training}
//!     requests: {cpu: 16, memory: 128Gi}
//!   - {name: chat, node: dgx1-03, share: "0.25", gpus: [5]}   # gpu-share on GPU 5
//! podGroups:
//!   - {name: llm, minMember: 8, scheduleTimeoutSeconds: 300}
//! ```
//!
//! File paths are relative to the cluster file. The loader reads files; the
//! scheduler core only ever sees specs. A file describes at most
//! [`MAX_NODES`] nodes and [`MAX_PODS`] bound pods, counts included.

mod list;
mod names;
mod reports;

pub use reports::{GpuHeld, NodeReport};

use crate::topology::{self, TopologyFileError};
use gputopo_api::GpuTopology;
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_api::k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_api::keys::pod as pod_keys;
use gputopo_api::{GpuRequest, GpuTopologySpec};
use gputopo_scheduler_core::config::{NetworkTiers, SchedulerConfig, TopologyManagerPolicy};
use gputopo_scheduler_core::pod_constraints::PodConstraints;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::selector::{Taint, TaintEffect};
use gputopo_scheduler_core::snapshot::{
    BoundPodInput, GpuHolding, NodeInput, PodGroup, Snapshot, SnapshotBuilder,
};
use list::load_list;
pub use names::NameTemplateError;
use names::expand;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A cluster file that could not be used; names the file and the place in it.
#[derive(Debug, thiserror::Error)]
pub enum ClusterFileError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {at}: {message}")]
    Invalid {
        path: PathBuf,
        at: String,
        message: String,
    },
    #[error("{path}: topology {name:?}: {source}")]
    Topology {
        path: PathBuf,
        name: String,
        source: Box<TopologyFileError>,
    },
}

/// A loaded cluster: the snapshot and the configuration it was built with.
pub struct Cluster {
    pub snapshot: Snapshot,
    pub config: SchedulerConfig,
    /// What nodes report about held GPUs (a `kind: List` with GpuTopology
    /// statuses only; the compact format has no such reports).
    pub reports: Vec<NodeReport>,
    /// Dynamic Resource Allocation's objects (a `kind: List` only).
    pub dra: ClusterDra,
    /// Pods without a node (a `kind: List` only): a gang member's fellows.
    pub pending: Vec<Pod>,
}

/// The ResourceSlices, ResourceClaims and DeviceClasses of a `kind: List`,
/// with its `GpuTopology` objects the devices are placed on.
#[derive(Default)]
pub struct ClusterDra {
    pub slices: Vec<ResourceSlice>,
    pub claims: Vec<ResourceClaim>,
    pub classes: Vec<DeviceClass>,
    pub topologies: Vec<GpuTopology>,
}

/// Tiers as a preset name or a list of label keys.
#[derive(Deserialize)]
#[serde(untagged)]
enum TiersEntry {
    Preset(String),
    Keys(Vec<String>),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClusterFile {
    #[serde(default)]
    tiers: Option<TiersEntry>,
    #[serde(default)]
    topology_manager_policy: Option<String>,
    #[serde(default)]
    spot_instance_types: Vec<String>,
    #[serde(default)]
    topologies: BTreeMap<String, TopologyEntry>,
    #[serde(default)]
    nodes: Vec<NodeEntry>,
    #[serde(default)]
    pods: Vec<PodEntry>,
    #[serde(default)]
    pod_groups: Vec<PodGroupEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TopologyEntry {
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    spec: Option<GpuTopologySpec>,
}

/// A quantity written as a string or a bare number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Amount {
    Text(String),
    Int(i64),
    Float(f64),
}

impl Amount {
    fn text(&self) -> String {
        match self {
            Amount::Text(s) => s.clone(),
            Amount::Int(i) => i.to_string(),
            Amount::Float(f) => f.to_string(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeEntry {
    name: String,
    #[serde(default)]
    count: Option<u32>,
    #[serde(default)]
    topology: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    taints: Vec<TaintEntry>,
    #[serde(default)]
    allocatable: BTreeMap<String, Amount>,
    #[serde(default)]
    unschedulable: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TaintEntry {
    key: String,
    #[serde(default)]
    value: Option<String>,
    effect: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PodEntry {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    count: Option<u32>,
    node: String,
    #[serde(default)]
    gpus: Option<Vec<u32>>,
    #[serde(default)]
    gpu_count: Option<u32>,
    #[serde(default)]
    share: Option<String>,
    #[serde(default)]
    requests: BTreeMap<String, Amount>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    priority: Option<i32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PodGroupEntry {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    min_member: u32,
    #[serde(default)]
    schedule_timeout_seconds: Option<u32>,
}

/// The most nodes a cluster file may describe: twice the 5,000 one
/// Kubernetes cluster supports, so that a slip in a `count` is an error
/// rather than billions of nodes built.
pub const MAX_NODES: u64 = 10_000;
/// The most bound pods a cluster file may describe: the 150,000 one
/// Kubernetes cluster supports.
pub const MAX_PODS: u64 = 150_000;
/// The widest `{i:0N}` padding: a DNS label's 63 characters.
pub const MAX_PADDING: usize = 63;

/// What the command line may override.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--tiers`: a preset or comma-separated label keys.
    pub tiers: Option<String>,
    /// `--now`: the moment nodes' kubelet readings are judged at (their
    /// age); the clock when not given.
    pub now: Option<Timestamp>,
}

/// Reads a cluster file.
pub fn load(path: &Path, overrides: &Overrides) -> Result<Cluster, ClusterFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ClusterFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let value: serde_yaml::Value =
        serde_yaml::from_str(&text).map_err(|e| invalid(path, "(document)", e))?;
    if value.get("kind").and_then(|k| k.as_str()) == Some("List") {
        return load_list(path, &value, overrides);
    }
    let file: ClusterFile = crate::topology::deserialize(path, &text).map_err(|e| match e {
        TopologyFileError::Document { path, at, message } => {
            ClusterFileError::Invalid { path, at, message }
        }
        other => invalid(path, "(document)", other),
    })?;
    let config = file_config(path, &file, overrides)?;
    let topologies = file_topologies(path, &file)?;
    check_copies(path, "nodes", file.nodes.iter().map(|e| e.count), MAX_NODES)?;
    check_copies(path, "pods", file.pods.iter().map(|e| e.count), MAX_PODS)?;
    let mut builder = SnapshotBuilder::new(&config);
    for (n, entry) in file.nodes.iter().enumerate() {
        add_nodes(
            path,
            &format!("nodes[{n}]"),
            entry,
            &topologies,
            &mut builder,
        )?;
    }
    for (p, entry) in file.pods.iter().enumerate() {
        let at = format!("pods[{p}]");
        for i in 1..=entry.count.unwrap_or(1) {
            let pod = pod_input(path, &at, entry, i)?;
            builder.pod(pod);
        }
    }
    for (g, entry) in file.pod_groups.iter().enumerate() {
        if entry.min_member == 0 {
            return Err(invalid(
                path,
                &format!("podGroups[{g}].minMember"),
                "must be at least 1",
            ));
        }
        builder.pod_group(PodGroup {
            namespace: entry.namespace.clone().unwrap_or_else(|| "default".into()),
            name: entry.name.clone(),
            min_member: entry.min_member,
            schedule_timeout_seconds: entry.schedule_timeout_seconds,
        });
    }
    let snapshot = builder
        .build()
        .map_err(|e| invalid(path, "(snapshot)", e))?;
    Ok(Cluster {
        snapshot,
        config,
        reports: Vec::new(),
        dra: ClusterDra::default(),
        pending: Vec::new(),
    })
}
/// The scheduler configuration the file and the command line give.
fn file_config(
    path: &Path,
    file: &ClusterFile,
    overrides: &Overrides,
) -> Result<SchedulerConfig, ClusterFileError> {
    let mut config = SchedulerConfig::default();
    if let Some(tiers) = &file.tiers {
        config.tiers = match tiers {
            TiersEntry::Preset(name) => NetworkTiers::preset(name),
            TiersEntry::Keys(keys) => NetworkTiers::new(keys.clone()),
        }
        .map_err(|e| invalid(path, "tiers", e))?;
    }
    apply_overrides(path, &mut config, overrides)?;
    if let Some(policy) = &file.topology_manager_policy {
        config.default_topology_manager_policy = policy
            .parse::<TopologyManagerPolicy>()
            .map_err(|e| invalid(path, "topologyManagerPolicy", e))?;
    }
    config.spot_instance_types = file.spot_instance_types.clone();
    Ok(config)
}

/// The file's named topologies, each from its file or given inline.
fn file_topologies<'f>(
    path: &Path,
    file: &'f ClusterFile,
) -> Result<BTreeMap<&'f str, GpuTopologySpec>, ClusterFileError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut topologies: BTreeMap<&str, GpuTopologySpec> = BTreeMap::new();
    for (name, entry) in &file.topologies {
        let spec = match (&entry.file, &entry.spec) {
            (Some(f), None) => {
                topology::load(&dir.join(f)).map_err(|source| ClusterFileError::Topology {
                    path: path.to_path_buf(),
                    name: name.clone(),
                    source: Box::new(source),
                })?
            }
            (None, Some(spec)) => spec.clone(),
            _ => {
                return Err(invalid(
                    path,
                    &format!("topologies.{name}"),
                    "give exactly one of file or spec",
                ));
            }
        };
        topologies.insert(name, spec);
    }
    Ok(topologies)
}

/// The nodes of one `nodes[]` entry (`count` copies), at `at`.
fn add_nodes(
    path: &Path,
    at: &str,
    entry: &NodeEntry,
    topologies: &BTreeMap<&str, GpuTopologySpec>,
    builder: &mut SnapshotBuilder,
) -> Result<(), ClusterFileError> {
    let spec = match &entry.topology {
        Some(t) => Some(topologies.get(t.as_str()).cloned().ok_or_else(|| {
            invalid(
                path,
                &format!("{at}.topology"),
                format!(
                    "no topology named {t:?}; defined: {}",
                    topologies.keys().copied().collect::<Vec<_>>().join(", ")
                ),
            )
        })?),
        None => None,
    };
    let texts = amounts(&entry.allocatable);
    let mut allocatable = Resources::allocatable(
        texts.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        &format!("{at}.allocatable"),
    )
    .map_err(|e| invalid(path, at, e))?;
    if !entry.allocatable.contains_key("nvidia.com/gpu")
        && let Some(spec) = &spec
    {
        allocatable.gpus = spec.gpus.len() as i64;
    }
    let mut taints = Vec::with_capacity(entry.taints.len());
    for (t, taint) in entry.taints.iter().enumerate() {
        let effect = TaintEffect::parse(&taint.effect).ok_or_else(|| {
            invalid(
                path,
                &format!("{at}.taints[{t}].effect"),
                format!(
                    "{:?} is not valid; accepted: NoSchedule | PreferNoSchedule | NoExecute",
                    taint.effect
                ),
            )
        })?;
        taints.push(Taint::new(
            &taint.key,
            taint.value.as_deref().unwrap_or(""),
            effect,
        ));
    }
    for i in 1..=entry.count.unwrap_or(1) {
        let name = expand(&entry.name, i, entry.count)
            .map_err(|e| invalid(path, &format!("{at}.name"), e))?;
        let mut spec = spec.clone();
        if let Some(s) = spec.as_mut() {
            s.node_name.clone_from(&name);
        }
        builder.node(NodeInput {
            name,
            labels: entry.labels.clone(),
            taints: taints.clone(),
            unschedulable: entry.unschedulable,
            allocatable: allocatable.clone(),
            topology: spec.map(Into::into),
            gpu_allocations: Vec::new(),
            allocations_observed_at: None,
            images: Vec::new(),
            // A cluster file's nodes declare no kubelet features.
            declared_features: Default::default(),
        });
    }
    Ok(())
}

fn pod_input(
    path: &Path,
    at: &str,
    entry: &PodEntry,
    i: u32,
) -> Result<BoundPodInput, ClusterFileError> {
    let name =
        expand(&entry.name, i, entry.count).map_err(|e| invalid(path, &format!("{at}.name"), e))?;
    let node =
        expand(&entry.node, i, entry.count).map_err(|e| invalid(path, &format!("{at}.node"), e))?;
    let mut annotations = entry.annotations.clone();
    if let Some(share) = &entry.share {
        annotations.insert(pod_keys::GPU_SHARE.into(), share.clone());
    }
    let whole = match (&entry.gpus, entry.gpu_count, &entry.share) {
        (Some(_), Some(_), _) => {
            return Err(invalid(
                path,
                at,
                "give gpus (indices) or gpuCount, not both",
            ));
        }
        (Some(list), None, None) => list.len() as u32,
        (None, Some(n), None) => n,
        (_, _, Some(_)) => 0,
        (None, None, None) => 0,
    };
    let texts = amounts(&entry.requests);
    let mut requests = Resources::from_list(
        texts.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        &format!("{at}.requests"),
    )
    .map_err(|e| invalid(path, at, e))?;
    if !entry.requests.contains_key("nvidia.com/gpu") {
        requests.gpus = i64::from(whole);
    }
    requests.pods = 1;
    let request = GpuRequest::parse(Some(whole), &annotations, &entry.labels);
    let share = request.as_ref().ok().and_then(|r| r.gpu_share);
    if entry.share.is_some() && share.is_none() {
        // The share did not parse: say so here, not as a warning later.
        if let Err(e) = &request {
            return Err(invalid(path, &format!("{at}.share"), e));
        }
    }
    let holding = match (share, &entry.gpus, entry.gpu_count) {
        (Some(share), gpus, _) => GpuHolding::Shared {
            gpu: gpus.as_ref().and_then(|g| g.first().copied()),
            share,
        },
        (None, Some(list), _) => GpuHolding::Whole(list.clone()),
        (None, None, Some(n)) => GpuHolding::Unknown(n),
        (None, None, None) => GpuHolding::None,
    };
    Ok(BoundPodInput {
        namespace: entry.namespace.clone().unwrap_or_else(|| "default".into()),
        name,
        node,
        requests,
        holding,
        request,
        priority: entry.priority.unwrap_or(0),
        start_time: None,
        unreadable_assignment: None,
        constraints: if entry.labels.is_empty() {
            PodConstraints::none()
        } else {
            std::sync::Arc::new(PodConstraints {
                labels: entry.labels.clone(),
                ..PodConstraints::default()
            })
        },
        terminating: false,
    })
}

/// Refuses entries whose `count`s add up to more than `max` copies.
fn check_copies(
    path: &Path,
    what: &str,
    counts: impl Iterator<Item = Option<u32>>,
    max: u64,
) -> Result<(), ClusterFileError> {
    let mut total = 0u64;
    for (n, count) in counts.enumerate() {
        total += u64::from(count.unwrap_or(1));
        if total > max {
            return Err(invalid(
                path,
                &format!("{what}[{n}].count"),
                format!(
                    "the {what} number {total} with this entry's copies, more than {max}; \
                     accepted: counts adding up to at most {max} {what}"
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) fn apply_overrides(
    path: &Path,
    config: &mut SchedulerConfig,
    overrides: &Overrides,
) -> Result<(), ClusterFileError> {
    if let Some(tiers) = &overrides.tiers {
        config.tiers = if tiers.contains('/') {
            NetworkTiers::new(tiers.split(',').map(|s| s.trim().to_string()))
        } else {
            NetworkTiers::preset(tiers)
        }
        .map_err(|e| invalid(path, "--tiers", e))?;
    }
    Ok(())
}

/// A resource map's amounts as quantity strings.
fn amounts(map: &BTreeMap<String, Amount>) -> Vec<(String, String)> {
    map.iter().map(|(k, v)| (k.clone(), v.text())).collect()
}

pub(crate) fn invalid(path: &Path, at: &str, message: impl std::fmt::Display) -> ClusterFileError {
    ClusterFileError::Invalid {
        path: path.to_path_buf(),
        at: at.to_string(),
        message: message.to_string(),
    }
}

/// Reads a Pod (YAML or JSON) from a file.
pub fn load_pod(path: &Path) -> Result<Pod, ClusterFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ClusterFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    crate::topology::deserialize(path, &text).map_err(|e| match e {
        TopologyFileError::Document { path, at, message } => {
            ClusterFileError::Invalid { path, at, message }
        }
        other => invalid(path, "(document)", other),
    })
}

#[cfg(test)]
mod tests;
