//! The `pods/binding` object, the same in both modes: the pod's identity
//! and its placement in, one `Binding` out (node and GPU annotations in one
//! request, so the API server copies the GPUs onto the pod as it binds it).
//! The secondary scheduler (`kube_writes.rs`) and the extender
//! (`extender/protocol`) both post what [`pod_binding`] builds.

use crate::annotations::assignment_annotations;
use gputopo_scheduler_core::schedule::Placement;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

/// The pod a binding names: with the uid, the API server refuses the
/// binding for a pod of the same name created anew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodIdentity<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: Option<&'a str>,
}

impl<'a> PodIdentity<'a> {
    /// The pod's own identity (namespace `default` when it names none, as
    /// the API server defaults it).
    pub fn of(pod: &'a Pod) -> PodIdentity<'a> {
        PodIdentity {
            namespace: pod.metadata.namespace.as_deref().unwrap_or("default"),
            name: pod.metadata.name.as_deref().unwrap_or_default(),
            uid: pod.metadata.uid.as_deref(),
        }
    }
}

/// The binding of `pod` to `placement.node`, carrying the placement's GPU
/// annotations. A pod that holds no GPU gets none: an empty
/// `gputopo.dev/assigned-gpus` tells nothing, and devices kube-scheduler
/// allocated through DRA are the claims' to record, not ours. Nor does one
/// given GPUs by count: an index written there could be a GPU another pod
/// holds.
pub fn pod_binding(pod: &PodIdentity<'_>, placement: &Placement) -> Binding {
    let annotations = binding_annotations(placement);
    Binding {
        metadata: ObjectMeta {
            name: Some(pod.name.to_string()),
            namespace: Some(pod.namespace.to_string()),
            uid: pod.uid.map(str::to_string),
            annotations,
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(placement.node.clone()),
            ..ObjectReference::default()
        },
    }
}

/// The annotations [`pod_binding`] carries for `placement`: its GPU
/// record, or none (see there).
pub fn binding_annotations(placement: &Placement) -> Option<BTreeMap<String, String>> {
    placement
        .names_gpus()
        .then(|| assignment_annotations(placement))
}

#[cfg(test)]
mod tests;
