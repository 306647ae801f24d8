//! Snapshot inputs from Kubernetes objects (`k8s-openapi` `Node` and `Pod`,
//! the `GpuTopology` custom resource). Pure functions over data: the
//! scheduler's watch and the command line's files both go through here.

use super::WorkloadSelectors;
use super::input::{BoundPodInput, GpuHolding, NodeImage, NodeInput};
use super::topology_spec::TopologySpec;
use crate::pod::{PodError, parse_index_list, pod_key};
use crate::pod_constraints::LabelSelector;
use crate::pod_constraints::{NodeFeatures, PodConstraints};
use crate::reported::{ReadingState, ReadingTrust};
use crate::resources::{Resources, pod_requests};
use crate::selector::Taint;
use gputopo_api::k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use gputopo_api::k8s_openapi::api::core::v1::{Node, Pod, ReplicationController, Service};
use gputopo_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use gputopo_api::keys::pod as pod_keys;
use gputopo_api::{GpuRequest, GpuTopology};
use std::sync::Arc;

/// A Kubernetes object that cannot be read into a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    #[error("a {kind} without metadata.name")]
    MissingName { kind: &'static str },
    #[error("node {node}: {source}")]
    Quantity {
        node: String,
        source: crate::resources::QuantityError,
    },
    #[error("node {node}: {source}")]
    Taint {
        node: String,
        source: crate::selector::SelectorError,
    },
    #[error(transparent)]
    Pod(#[from] PodError),
}

/// A node with its `GpuTopology` (the object whose name is the node's), if
/// any. The allocations the node reports come along only while its reading
/// of the kubelet is fresh under `trust` (see [`crate::reported`]).
pub fn node_input(
    node: &Node,
    topology: Option<&GpuTopology>,
    trust: ReadingTrust,
) -> Result<NodeInput, ConvertError> {
    let spec = topology.map(|t| TopologySpec::from(t.spec.clone()));
    node_input_with(node, topology, spec, trust)
}

/// [`node_input`] holding the watched object's spec instead of a copy.
pub fn node_input_shared(
    node: &Node,
    topology: Option<&Arc<GpuTopology>>,
    trust: ReadingTrust,
) -> Result<NodeInput, ConvertError> {
    let spec = topology.map(|t| TopologySpec::shared(t.clone()));
    node_input_with(node, topology.map(AsRef::as_ref), spec, trust)
}

fn node_input_with(
    node: &Node,
    topology: Option<&GpuTopology>,
    topology_spec: Option<TopologySpec>,
    trust: ReadingTrust,
) -> Result<NodeInput, ConvertError> {
    let name = node
        .metadata
        .name
        .clone()
        .ok_or(ConvertError::MissingName { kind: "Node" })?;
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(|a| {
            Resources::allocatable(
                a.iter().map(|(k, v)| (k.as_str(), v.0.as_str())),
                "status.allocatable",
            )
        })
        .transpose()
        .map_err(|source| ConvertError::Quantity {
            node: name.clone(),
            source,
        })?
        .unwrap_or_else(Resources::unlimited);
    let spec = node.spec.as_ref();
    let taints = spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(Taint::from_k8s)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| ConvertError::Taint {
            node: name.clone(),
            source,
        })?;
    // Allocations count only with a fresh reading of the kubelet: an object
    // without one says nothing about who holds what, and an old one may no
    // longer hold.
    let status = topology.and_then(|t| t.status.as_ref());
    let (gpu_allocations, allocations_observed_at) = match (status, trust.state(status)) {
        (Some(status), ReadingState::Fresh { observed_at }) => {
            (status.allocations.clone(), Some(observed_at))
        }
        _ => (Vec::new(), None),
    };
    let images = node
        .status
        .as_ref()
        .and_then(|s| s.images.as_ref())
        .into_iter()
        .flatten()
        .map(|i| NodeImage {
            names: i.names.clone().unwrap_or_default(),
            size_bytes: i.size_bytes.unwrap_or(0),
        })
        .collect();
    let declared_features = NodeFeatures::declared(
        node.status
            .as_ref()
            .and_then(|s| s.declared_features.as_ref())
            .into_iter()
            .flatten()
            .map(String::as_str),
    );
    Ok(NodeInput {
        labels: node.metadata.labels.clone().unwrap_or_default(),
        images,
        declared_features,
        taints,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        allocatable,
        topology: topology_spec,
        gpu_allocations,
        allocations_observed_at,
        name,
    })
}

/// A pod that holds resources on a node: bound (`spec.nodeName`) and not
/// finished. `Ok(None)` for a pending or completed pod.
///
/// Its GPUs: `gputopo.dev/assigned-gpus` when present (with `gpu-share`, the
/// one GPU shared); otherwise its `nvidia.com/gpu` request of unknown indices,
/// which the snapshot resolves from the node's `GpuTopology` status. A
/// malformed GPU request or `assigned-gpus` record is kept as a snapshot
/// warning and its GPUs still count (an unreadable record as GPUs of
/// unknown indices): anyone who may edit their own pod's annotations must
/// not make the scheduler forget what it holds. A malformed quantity is an
/// error (requests are immutable once the pod exists).
pub fn bound_pod_input(pod: &Pod) -> Result<Option<BoundPodInput>, ConvertError> {
    let Some(spec) = &pod.spec else {
        return Ok(None);
    };
    let Some(node) = spec.node_name.clone().filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Ok(None);
    }
    let key = pod_key(pod);
    if pod.metadata.name.is_none() {
        return Err(ConvertError::MissingName { kind: "Pod" });
    }
    let requests = pod_requests(spec).map_err(|source| PodError::Quantity {
        pod: key.clone(),
        source,
    })?;
    let request = GpuRequest::from_pod(pod);
    let record = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(pod_keys::ASSIGNED_GPUS));
    let (assigned, unreadable_assignment) = match record.map(|v| (v, parse_index_list(v))) {
        None => (None, None),
        Some((_, Some(list))) => (Some(list), None),
        Some((v, None)) => (None, Some(v.clone())),
    };
    let share = request.as_ref().ok().and_then(|r| r.gpu_share);
    let holding = match (share, assigned) {
        (Some(share), assigned) => GpuHolding::Shared {
            gpu: assigned.and_then(|a| a.first().copied()),
            share,
        },
        (None, Some(list)) if !list.is_empty() => GpuHolding::Whole(list),
        (None, _) if requests.gpus > 0 => {
            GpuHolding::Unknown(u32::try_from(requests.gpus).unwrap_or(u32::MAX))
        }
        (None, _) => GpuHolding::None,
    };
    let (namespace, name) = key.split_once('/').unwrap_or(("default", ""));
    // A bound pod's rules were checked when it was admitted; one the API
    // took that this reading refuses is kept without rules rather than
    // dropped, so its resources and GPUs still count.
    let constraints =
        PodConstraints::shared_from_k8s(namespace, pod.metadata.labels.as_ref(), spec)
            .unwrap_or_else(|_| PodConstraints::none());
    Ok(Some(BoundPodInput {
        constraints,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        node,
        requests,
        holding,
        request,
        priority: spec.priority.unwrap_or(0),
        unreadable_assignment,
        start_time: pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0),
    }))
}

/// The selectors of Services, ReplicaSets, StatefulSets and
/// ReplicationControllers. A Service without a selector selects no pod; a
/// controller's selector that cannot be read selects nothing here, as an
/// unparsable selector does upstream.
pub fn workload_selectors<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    replica_sets: impl IntoIterator<Item = &'a ReplicaSet>,
    stateful_sets: impl IntoIterator<Item = &'a StatefulSet>,
    replication_controllers: impl IntoIterator<Item = &'a ReplicationController>,
) -> WorkloadSelectors {
    let mut w = WorkloadSelectors::default();
    for s in services {
        if let Some(sel) = s.spec.as_ref().and_then(|s| s.selector.clone()) {
            w.services.insert(key(&s.metadata), sel);
        }
    }
    for rs in replica_sets {
        if let Ok(sel) = LabelSelector::from_k8s(&rs.spec.selector, "spec.selector") {
            w.replica_sets.insert(key(&rs.metadata), sel);
        }
    }
    for ss in stateful_sets {
        if let Ok(sel) = LabelSelector::from_k8s(&ss.spec.selector, "spec.selector") {
            w.stateful_sets.insert(key(&ss.metadata), sel);
        }
    }
    for rc in replication_controllers {
        if let Some(sel) = rc.spec.as_ref().and_then(|s| s.selector.clone()) {
            w.replication_controllers.insert(key(&rc.metadata), sel);
        }
    }
    w
}

/// `(namespace, name)` of a namespaced object (`default` when unset, as
/// `kubectl apply` does).
fn key(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}
