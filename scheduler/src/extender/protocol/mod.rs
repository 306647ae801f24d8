//! kube-scheduler's extender HTTP API v1 (`k8s.io/kube-scheduler/extender/v1`)
//! as Rust types, and the pure translation between it and scheduler-core:
//! no I/O, no clock, so every answer can be checked against literal JSON.
//!
//! The Go types have no JSON tags, so the fields are spelled as the Go
//! fields are (`Pod`, `NodeNames`, `FailedNodes`, `Host`, `Score`, ...);
//! kube-scheduler writes exactly those. Go decodes field names without
//! regard to case, so the lowerCamel spellings are accepted too.
//!
//! - **filter** ([`filter`]): scheduler-core's filter for the pod on each
//!   named node. A node it rejects goes to `FailedNodes` with the reason's
//!   node-independent phrase (`too few free GPUs`, `no 4-GPU set with NV2`),
//!   which kube-scheduler counts into its `FailedScheduling` message
//!   (`0/5 nodes are available: 1 no 4-GPU set with NV24, ...`); to
//!   `FailedAndUnresolvableNodes` when evicting pods could not help (see
//!   [`gputopo_scheduler_core::node_fit::NodeRejection::resolvable`]), so
//!   kube-scheduler's preemption leaves that node alone.
//! - **prioritize** ([`prioritize`]): scheduler-core's node score, 0–100,
//!   rounded to 0–10 ([`extender_score`]).
//! - **claims** ([`PodClaims`], `claims.rs`): a pod whose GPUs come through
//!   DRA is filtered and scored by its claims' fit on each node's free
//!   devices; kube-scheduler allocates the devices itself.
//! - **bind** ([`plan_binding`]): the GPU set on the node kube-scheduler
//!   chose, posted as the binding ([`binding`]) whose annotations carry
//!   the GPUs: the API server copies them onto the pod as it binds it.
//!   Only for the pod of the request's uid, and only when its
//!   `schedulerName` is one this extender serves.

mod claims;

pub use crate::annotations::{assignment_annotations, bottleneck_text};
use crate::binding::{PodIdentity, pod_binding};
pub use claims::PodClaims;
use claims::{Judge, Verdict};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::node_fit::{NodeJudge, PlaceError};
use gputopo_scheduler_core::pod::{PendingPod, PodError};
use gputopo_scheduler_core::schedule::Placement;
use gputopo_scheduler_core::snapshot::Snapshot;
use k8s_openapi::api::core::v1::{Binding, Pod};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The verbs' paths under the extender's address: the `filterVerb`,
/// `prioritizeVerb` and `bindVerb` of the KubeSchedulerConfiguration are
/// `filter`, `prioritize` and `bind`, and its `urlPrefix` is the address.
pub const FILTER_PATH: &str = "/filter";
pub const PRIORITIZE_PATH: &str = "/prioritize";
pub const BIND_PATH: &str = "/bind";

/// `MaxExtenderPriority`: kube-scheduler multiplies an extender's score by
/// 100 / 10 and by the extender's `weight`.
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

/// `FailedNodes` text for a node the extender's caches do not know yet.
pub const NODE_NOT_CACHED: &str = "node(s) not yet in gputopo's node cache";

const ARGS_SHAPE: &str = r#"kube-scheduler's ExtenderArgs: {"Pod": {...}, "NodeNames": ["node-1", ...]} (nodeCacheCapable: true) or {"Pod": {...}, "Nodes": {"items": [...]}}"#;
const BINDING_SHAPE: &str = r#"kube-scheduler's ExtenderBindingArgs: {"PodName": "...", "PodNamespace": "...", "PodUID": "...", "Node": "..."}"#;

/// A request body that cannot be used: the HTTP layer answers 400 with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("invalid {what} at {path}: {message}; expected {expected}")]
    Invalid {
        what: &'static str,
        /// The field path, `Pod.spec.containers[0]`; `.` for the body itself.
        path: String,
        message: String,
        expected: &'static str,
    },
    #[error("{what} has no {field}; expected {expected}")]
    Missing {
        what: &'static str,
        field: &'static str,
        expected: &'static str,
    },
}

/// `ExtenderArgs` as sent.
#[derive(Clone, Debug, Deserialize)]
pub struct ExtenderArgs {
    #[serde(rename = "Pod", alias = "pod", default)]
    pub pod: Option<Box<Pod>>,
    /// Only when the extender is not `nodeCacheCapable`.
    #[serde(rename = "Nodes", alias = "nodes", default)]
    pub nodes: Option<NodeList>,
    /// Only when the extender is `nodeCacheCapable`.
    #[serde(rename = "NodeNames", alias = "nodeNames", default)]
    pub node_names: Option<Vec<String>>,
}

/// A `v1.NodeList`, its items kept as sent so that they go back unchanged.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct NodeList {
    #[serde(default)]
    pub items: Option<Vec<Value>>,
}

/// The candidate nodes, in the form they came in (and go back in).
#[derive(Clone, Debug, PartialEq)]
pub enum Candidates {
    /// `NodeNames` (nodeCacheCapable: true).
    Names(Vec<String>),
    /// `Nodes`: each node's name and the object as sent.
    Objects(Vec<(String, Value)>),
}

impl Candidates {
    pub fn names(&self) -> Vec<&str> {
        match self {
            Candidates::Names(n) => n.iter().map(String::as_str).collect(),
            Candidates::Objects(o) => o.iter().map(|(n, _)| n.as_str()).collect(),
        }
    }
}

/// A filter or prioritize request, checked.
#[derive(Clone, Debug)]
pub struct ExtenderRequest {
    pub pod: Pod,
    pub candidates: Candidates,
}

impl ExtenderRequest {
    /// `namespace/name` of the pod.
    pub fn pod_key(&self) -> String {
        crate::cluster::pod_key(&self.pod)
    }
}

/// Reads a filter or prioritize body.
pub fn decode_args(body: &[u8]) -> Result<ExtenderRequest, RequestError> {
    let args: ExtenderArgs = decode(body, "ExtenderArgs", ARGS_SHAPE)?;
    let missing = |field| RequestError::Missing {
        what: "ExtenderArgs",
        field,
        expected: ARGS_SHAPE,
    };
    let pod = *args.pod.ok_or_else(|| missing("Pod"))?;
    if pod.metadata.name.as_deref().is_none_or(str::is_empty) {
        return Err(RequestError::Invalid {
            what: "ExtenderArgs",
            path: "Pod.metadata.name".into(),
            message: "missing or empty".into(),
            expected: ARGS_SHAPE,
        });
    }
    let candidates = match (args.node_names, args.nodes) {
        (Some(names), _) => Candidates::Names(names),
        (None, Some(list)) => {
            let items = list.items.unwrap_or_default();
            let mut named = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let Some(name) = item
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                else {
                    return Err(RequestError::Invalid {
                        what: "ExtenderArgs",
                        path: format!("Nodes.items[{i}].metadata.name"),
                        message: "missing or empty".into(),
                        expected: ARGS_SHAPE,
                    });
                };
                named.push((name.to_string(), item));
            }
            Candidates::Objects(named)
        }
        (None, None) => return Err(missing("NodeNames (nor Nodes)")),
    };
    Ok(ExtenderRequest { pod, candidates })
}

fn decode<T: serde::de::DeserializeOwned>(
    body: &[u8],
    what: &'static str,
    expected: &'static str,
) -> Result<T, RequestError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        RequestError::Invalid {
            what,
            path,
            message: e.inner().to_string(),
            expected,
        }
    })?;
    de.end().map_err(|e| RequestError::Invalid {
        what,
        path: ".".into(),
        message: e.to_string(),
        expected,
    })?;
    Ok(value)
}

/// `ExtenderFilterResult`. Every field is written, as Go writes them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ExtenderFilterResult {
    #[serde(rename = "Nodes")]
    pub nodes: Option<NodeList>,
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<String>>,
    #[serde(rename = "FailedNodes")]
    pub failed_nodes: BTreeMap<String, String>,
    #[serde(rename = "FailedAndUnresolvableNodes")]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    #[serde(rename = "Error")]
    pub error: String,
}

impl ExtenderFilterResult {
    /// A failed filter: kube-scheduler reports `error` for the pod and retries it.
    pub fn error(error: String) -> ExtenderFilterResult {
        ExtenderFilterResult {
            error,
            ..ExtenderFilterResult::default()
        }
    }
}

/// One entry of `HostPriorityList`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostPriority {
    #[serde(rename = "Host")]
    pub host: String,
    #[serde(rename = "Score")]
    pub score: i64,
}

/// `ExtenderBindingResult`: an empty `Error` means bound.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExtenderBindingResult {
    #[serde(rename = "Error")]
    pub error: String,
}

/// The `FailedScheduling` message part for an unreadable pod.
fn invalid_pod_message(e: &PodError) -> String {
    format!("invalid {}: {e}", e.key())
}

/// Filters the candidates; see the module documentation. `pod_claims`:
/// what the pod's DRA claims are judged by (see [`claims`]).
pub fn filter(
    snapshot: &Snapshot,
    config: &SchedulerConfig,
    request: &ExtenderRequest,
    pod_claims: &PodClaims,
) -> ExtenderFilterResult {
    let names = request.candidates.names();
    let mut result = ExtenderFilterResult::default();
    let mut passed: Vec<&str> = Vec::new();
    match PendingPod::from_k8s(&request.pod) {
        // The pod must be fixed: no node, and no eviction, helps.
        Err(e) => {
            let message = invalid_pod_message(&e);
            for name in &names {
                result
                    .failed_and_unresolvable_nodes
                    .insert((*name).to_string(), message.clone());
            }
        }
        Ok(pending) => {
            let judged = claims::judged_pod(&pending, pod_claims);
            let judge = Judge::new(snapshot, config, &pending, &judged, pod_claims);
            for name in &names {
                match judge.judge(name) {
                    Verdict::Fits(_) => passed.push(name),
                    Verdict::Fails { text, resolvable } => {
                        let into = if resolvable {
                            &mut result.failed_nodes
                        } else {
                            &mut result.failed_and_unresolvable_nodes
                        };
                        into.insert((*name).to_string(), text);
                    }
                    Verdict::Unknown => {
                        result
                            .failed_nodes
                            .insert((*name).to_string(), NODE_NOT_CACHED.into());
                    }
                }
            }
        }
    }
    match &request.candidates {
        Candidates::Names(_) => {
            result.node_names = Some(passed.iter().map(|n| n.to_string()).collect());
        }
        Candidates::Objects(objects) => {
            let items = objects
                .iter()
                .filter(|(n, _)| passed.contains(&n.as_str()))
                .map(|(_, o)| o.clone())
                .collect();
            result.nodes = Some(NodeList { items: Some(items) });
        }
    }
    result
}

/// scheduler-core's 0–100 node score on kube-scheduler's 0–10 extender
/// scale, rounded to the nearest (95 and up is 10, below 5 is 0).
pub fn extender_score(score: u8) -> i64 {
    ((i64::from(score.min(100)) + 5) / 10).clamp(0, MAX_EXTENDER_PRIORITY)
}

/// Scores the candidates: a node the filter would now reject, or does not
/// know, scores 0; so does every node for an unreadable pod.
pub fn prioritize(
    snapshot: &Snapshot,
    config: &SchedulerConfig,
    request: &ExtenderRequest,
    pod_claims: &PodClaims,
) -> Vec<HostPriority> {
    let names = request.candidates.names();
    let pending = PendingPod::from_k8s(&request.pod).ok();
    let judged = pending
        .as_ref()
        .map(|p| (p, claims::judged_pod(p, pod_claims)));
    let judge = judged
        .as_ref()
        .map(|(p, j)| Judge::new(snapshot, config, p, j, pod_claims));
    names
        .into_iter()
        .map(|name| HostPriority {
            host: name.to_string(),
            score: match judge.as_ref().map(|j| j.judge(name)) {
                Some(Verdict::Fits(score)) => extender_score(score),
                _ => 0,
            },
        })
        .collect()
}

/// `ExtenderBindingArgs` as sent.
#[derive(Clone, Debug, Deserialize)]
pub struct ExtenderBindingArgs {
    #[serde(rename = "PodName", alias = "podName", default)]
    pub pod_name: String,
    #[serde(rename = "PodNamespace", alias = "podNamespace", default)]
    pub pod_namespace: String,
    #[serde(rename = "PodUID", alias = "podUID", alias = "podUid", default)]
    pub pod_uid: String,
    #[serde(rename = "Node", alias = "node", default)]
    pub node: String,
}

/// A bind request, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingRequest {
    pub namespace: String,
    pub name: String,
    /// Required: a bind names the very pod it is for, never one that
    /// happens to carry the name.
    pub uid: String,
    pub node: String,
}

impl BindingRequest {
    /// `namespace/name`.
    pub fn pod_key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Reads a bind body.
pub fn decode_binding(body: &[u8]) -> Result<BindingRequest, RequestError> {
    let args: ExtenderBindingArgs = decode(body, "ExtenderBindingArgs", BINDING_SHAPE)?;
    let missing = |field| RequestError::Missing {
        what: "ExtenderBindingArgs",
        field,
        expected: BINDING_SHAPE,
    };
    if args.pod_name.is_empty() {
        return Err(missing("PodName"));
    }
    if args.pod_namespace.is_empty() {
        return Err(missing("PodNamespace"));
    }
    if args.pod_uid.is_empty() {
        return Err(missing("PodUID"));
    }
    if args.node.is_empty() {
        return Err(missing("Node"));
    }
    Ok(BindingRequest {
        namespace: args.pod_namespace,
        name: args.pod_name,
        uid: args.pod_uid,
        node: args.node,
    })
}

/// Why a bind cannot go ahead, decided before any write.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "pod {pod} has uid {actual}, the binding names uid {asked}: not the same pod (deleted and created again, or a request not from kube-scheduler)"
    )]
    UidMismatch {
        pod: String,
        asked: String,
        actual: String,
    },
    #[error(
        "pod {pod} has schedulerName {scheduler_name}; this extender binds only pods of {} (--scheduler-name)",
        served.join(", ")
    )]
    NotServed {
        pod: String,
        scheduler_name: String,
        served: Vec<String>,
    },
    #[error("pod {pod} is already bound to node {node}")]
    AlreadyBound { pod: String, node: String },
    #[error("{}", invalid_pod_message(.0))]
    InvalidPod(PodError),
    #[error("{0}")]
    Place(PlaceError),
}

/// The `spec.schedulerName` the API server gives a pod that names none.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// The pod's `spec.schedulerName`, defaulted as the API server defaults it.
pub fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or(DEFAULT_SCHEDULER_NAME)
}

/// The placement for a bind request on exactly the node it names, `pod`
/// being the pod as the extender's cache has it. Only the pod the request
/// names by uid, and only when its `spec.schedulerName` is one of
/// `scheduler_names` (the profiles of the kube-scheduler that calls this
/// extender): the request alone cannot tell which profile sent it, so a
/// caller could otherwise bind any pending pod, whoever's it is.
pub fn plan_binding(
    snapshot: &Snapshot,
    config: &SchedulerConfig,
    scheduler_names: &[String],
    pod: &Pod,
    request: &BindingRequest,
    pod_claims: &PodClaims,
) -> Result<Placement, PlanError> {
    let key = request.pod_key();
    let actual = pod.metadata.uid.as_deref().unwrap_or("none");
    if request.uid != actual {
        return Err(PlanError::UidMismatch {
            pod: key,
            asked: request.uid.clone(),
            actual: actual.to_string(),
        });
    }
    let name = scheduler_name(pod);
    if !scheduler_names.iter().any(|n| n == name) {
        return Err(PlanError::NotServed {
            pod: key,
            scheduler_name: name.to_string(),
            served: scheduler_names.to_vec(),
        });
    }
    if let Some(node) = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
    {
        return Err(PlanError::AlreadyBound {
            pod: key,
            node: node.to_string(),
        });
    }
    let pending = PendingPod::from_k8s(pod).map_err(PlanError::InvalidPod)?;
    // kube-scheduler's DRA plugin has allocated the devices by now: the
    // node's other predicates still count, the GPUs are the claims'.
    let through_dra = match pod_claims {
        PodClaims::Unjudged => false,
        PodClaims::Claims { .. } => true,
        PodClaims::Extended { .. } => snapshot
            .node_id(&request.node)
            .is_some_and(|id| snapshot.node(id).allocatable().gpus == 0),
    };
    let pending = if through_dra {
        claims::without_gpus(&pending)
    } else {
        pending
    };
    NodeJudge::new(snapshot, &pending, config)
        .place_on(&request.node)
        .map_err(PlanError::Place)
}

/// The `pods/binding` object for a bind request: the one both modes post
/// ([`crate::binding::pod_binding`]), with the request's uid.
pub fn binding(request: &BindingRequest, placement: &Placement) -> Binding {
    let pod = PodIdentity {
        namespace: &request.namespace,
        name: &request.name,
        uid: Some(&request.uid),
    };
    pod_binding(&pod, placement)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
#[path = "claims_tests.rs"]
mod claims_tests;
