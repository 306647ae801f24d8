//! The pod being scheduled: its GPU request, resource requests and the node
//! constraints any second scheduler must honour, read from a `k8s-openapi`
//! `Pod` (or built by hand in tests and the simulator).

use crate::pod_constraints::PodConstraints;
use crate::resources::{QuantityError, Resources, pod_requests};
use crate::selector::{NodeAffinity, PreferredNodeTerm, SelectorError, Toleration};
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_api::{GpuRequest, RequestError};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A pod waiting for a node.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingPod {
    pub namespace: String,
    pub name: String,
    /// The `nvidia.com/gpu` limit and `gputopo.dev/` annotations.
    pub request: GpuRequest,
    /// Effective resource requests, one `pods` included.
    pub requests: Resources,
    /// `spec.nodeSelector`: every pair must be a label of the node.
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity; `None` when the pod sets none.
    pub affinity: Option<NodeAffinity>,
    /// Preferred node affinity, scored.
    pub preferred_node_affinity: Vec<PreferredNodeTerm>,
    /// Labels, host ports, inter-pod affinity and topology spread.
    pub constraints: Arc<PodConstraints>,
    pub tolerations: Vec<Toleration>,
    /// `spec.nodeName`: the pod may only go there.
    pub node_name: Option<String>,
    /// `spec.priority`; 0 when unset.
    pub priority: i32,
    /// The owner with `controller: true`, for spread's default constraints.
    pub controller: Option<Controller>,
    /// One per init container, container and image volume, in that order:
    /// the image as ImageLocality looks it up ([`normalized_image`]).
    pub images: Vec<String>,
    /// The pod names ResourceClaims (`spec.resourceClaims`): devices, GPUs
    /// perhaps, that its GPU request does not show; the score's
    /// keep-GPUs-free part leaves such a pod alone.
    pub resource_claims: bool,
}

/// A pod's controlling owner, from its `ownerReferences`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Controller {
    /// `apps/v1`, `v1`, …
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl Controller {
    /// The reference marked `controller: true`, if any.
    pub fn of(pod: &Pod) -> Option<Controller> {
        pod.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| Controller {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
            })
    }
}

/// Why a pod cannot be considered at all: its spec or annotations are malformed.
/// Every variant names the pod, the key or field, and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    #[error("pod {pod}: {source}")]
    Request { pod: String, source: RequestError },
    #[error("pod {pod}: {source}")]
    Quantity { pod: String, source: QuantityError },
    #[error("pod {pod}: {source}")]
    Selector { pod: String, source: SelectorError },
}

impl PodError {
    /// The annotation key or spec field that is wrong.
    pub fn key(&self) -> &str {
        match self {
            PodError::Request { source, .. } => source.key(),
            PodError::Quantity { source, .. } => &source.field,
            PodError::Selector { source, .. } => &source.field,
        }
    }
}

impl PendingPod {
    /// A pod with `request` and nothing else: `request.gpus` GPUs (as its
    /// `nvidia.com/gpu` request, or `amd.com/gpu` for an AMD request), one
    /// `pods`, no constraints.
    pub fn new(namespace: &str, name: &str, request: GpuRequest) -> PendingPod {
        let mut requests = Resources {
            pods: 1,
            ..Resources::default()
        };
        requests.set(request.vendor.resource(), i64::from(request.gpus));
        PendingPod {
            namespace: namespace.to_string(),
            name: name.to_string(),
            request,
            requests,
            node_selector: BTreeMap::new(),
            affinity: None,
            preferred_node_affinity: Vec::new(),
            constraints: PodConstraints::none(),
            tolerations: Vec::new(),
            node_name: None,
            priority: 0,
            controller: None,
            images: Vec::new(),
            resource_claims: false,
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Reads a pod. The namespace defaults to `default`, as `kubectl apply` does.
    pub fn from_k8s(pod: &Pod) -> Result<PendingPod, PodError> {
        let key = pod_key(pod);
        let request = GpuRequest::from_pod(pod).map_err(|source| PodError::Request {
            pod: key.clone(),
            source,
        })?;
        let (namespace, name) = key
            .split_once('/')
            .map(|(n, m)| (n.to_string(), m.to_string()))
            .unwrap_or_default();
        let Some(spec) = &pod.spec else {
            let mut p = PendingPod::new(&namespace, &name, request);
            p.requests.gpus = 0;
            return Ok(p);
        };
        let requests = pod_requests(spec).map_err(|source| PodError::Quantity {
            pod: key.clone(),
            source,
        })?;
        let selector_err = |source| PodError::Selector {
            pod: key.clone(),
            source,
        };
        let affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(NodeAffinity::from_k8s)
            .transpose()
            .map_err(selector_err)?;
        let preferred_node_affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref()
            })
            .map(PreferredNodeTerm::from_k8s)
            .transpose()
            .map_err(selector_err)?
            .unwrap_or_default();
        let constraints =
            PodConstraints::shared_from_k8s(&namespace, pod.metadata.labels.as_ref(), spec)
                .map_err(selector_err)?;
        let tolerations = spec
            .tolerations
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| Toleration::from_k8s(t, i))
            .collect::<Result<Vec<_>, _>>()
            .map_err(selector_err)?;
        Ok(PendingPod {
            namespace,
            name,
            request,
            requests,
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            affinity,
            preferred_node_affinity,
            constraints,
            tolerations,
            node_name: spec.node_name.clone().filter(|n| !n.is_empty()),
            priority: spec.priority.unwrap_or(0),
            controller: Controller::of(pod),
            images: pod_images(spec),
            resource_claims: spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()),
        })
    }
}

/// The images a pod pulls, one per init container, container and image
/// volume (as kube-scheduler's ImageLocality counts them), normalised.
fn pod_images(spec: &gputopo_api::k8s_openapi::api::core::v1::PodSpec) -> Vec<String> {
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .map(|c| c.image.as_deref().unwrap_or(""));
    let volumes = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.image.as_ref())
        .map(|i| i.reference.as_deref().unwrap_or(""));
    containers.chain(volumes).map(normalized_image).collect()
}

/// An image name as nodes report it: `:latest` added when the name has no
/// tag (no `:` after its last `/`), as kube-scheduler normalises it.
pub fn normalized_image(name: &str) -> String {
    let tagged = match (name.rfind(':'), name.rfind('/')) {
        (Some(colon), Some(slash)) => colon > slash,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if tagged {
        name.to_string()
    } else {
        format!("{name}:latest")
    }
}

/// `namespace/name` of a k8s pod, `default` when it names no namespace.
pub(crate) fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// A `gputopo.dev/assigned-gpus` value, `0,1,2,3` (spaces allowed, empty allowed) as indices; `None` if malformed.
pub fn parse_index_list(value: &str) -> Option<Vec<u32>> {
    let value = value.trim();
    if value.is_empty() {
        return Some(Vec::new());
    }
    value
        .split(',')
        .map(|t| {
            let t = t.trim();
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            t.parse::<u32>().ok().filter(|&i| i < 32)
        })
        .collect()
}
