//! The plain inputs a [`Snapshot`](super::Snapshot) is built and changed
//! from: a node ([`NodeInput`]) and a pod bound to one ([`BoundPodInput`],
//! with the GPUs it holds, [`GpuHolding`]). `from_k8s.rs` makes them from
//! Kubernetes objects; tests and the simulator write them by hand.

use super::topology_spec::TopologySpec;
use crate::pod_constraints::{NodeFeatures, PodConstraints};
use crate::resources::Resources;
use crate::selector::Taint;
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_api::{GpuAllocation, GpuRequest, GpuShare, RequestError};
use std::collections::BTreeMap;
use std::sync::Arc;

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
    /// `status.images`: what ImageLocality scores by.
    pub images: Vec<NodeImage>,
    /// `status.declaredFeatures`, as far as a pod can require them.
    pub declared_features: NodeFeatures,
}

/// One image a node holds (`status.images[]`): every name it goes by
/// (tags and digests) and its size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeImage {
    pub names: Vec<String>,
    pub size_bytes: i64,
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
            images: Vec::new(),
            declared_features: NodeFeatures::default(),
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
    /// Labels, host ports, inter-pod affinity and spread.
    pub constraints: Arc<PodConstraints>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
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
            constraints: PodConstraints::none(),
            terminating: false,
        }
    }
}
