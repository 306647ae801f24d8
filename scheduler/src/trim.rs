//! What the watches drop from an object before storing it: the fields the
//! scheduler never reads, which are most of a watched pod's or node's
//! memory on a real cluster. kube-scheduler's informers drop
//! `managedFields`; this goes further, because every write this scheduler
//! makes is a patch or a subresource (a binding, an eviction, a status
//! patch), never a whole object written back from the store, so nothing
//! dropped here can be lost in the API.
//!
//! The tests check that what a cycle derives from a pod (its request, its
//! holding once bound, whether it is pending) is the same trimmed or not.

use k8s_openapi::api::core::v1::{Container, EphemeralVolumeSource, Node, Pod, Volume};
use kube::ResourceExt;

/// Written by `kubectl apply`: a whole copy of the object as applied.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Any object: `managedFields` and `kubectl apply`'s copy.
pub fn trim_meta<K: ResourceExt>(o: &mut K) {
    o.meta_mut().managed_fields = None;
    o.annotations_mut().remove(LAST_APPLIED);
}

/// A pod: besides [`trim_meta`], its volumes but the claims it mounts
/// (each kept as its name and claim only), each container's environment,
/// command, mounts, probes and hooks, and the containers' statuses. Kept:
/// everything a decision, a gang or the accounting reads (resources,
/// claims, affinity, tolerations, priority, gates, node, phase,
/// conditions, nominated node, start time, owners, labels and the other
/// annotations).
pub fn trim_pod(pod: &mut Pod) {
    trim_meta(pod);
    if let Some(spec) = pod.spec.as_mut() {
        spec.volumes = spec
            .volumes
            .take()
            .map(claim_volumes)
            .filter(|v| !v.is_empty());
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            trim_container(c);
        }
    }
    if let Some(status) = pod.status.as_mut() {
        status.container_statuses = None;
        status.init_container_statuses = None;
        status.ephemeral_container_statuses = None;
    }
}

/// The volumes that mount a PersistentVolumeClaim (what the volume plugins
/// read), each reduced to its name and claim.
fn claim_volumes(volumes: Vec<Volume>) -> Vec<Volume> {
    volumes
        .into_iter()
        .filter_map(|v| {
            let claim = v.persistent_volume_claim;
            let ephemeral = v.ephemeral.map(|_| EphemeralVolumeSource::default());
            (claim.is_some() || ephemeral.is_some()).then(|| Volume {
                name: v.name,
                persistent_volume_claim: claim,
                ephemeral,
                ..Volume::default()
            })
        })
        .collect()
}

fn trim_container(c: &mut Container) {
    c.env = None;
    c.env_from = None;
    c.command = None;
    c.args = None;
    c.volume_mounts = None;
    c.volume_devices = None;
    c.liveness_probe = None;
    c.readiness_probe = None;
    c.startup_probe = None;
    c.lifecycle = None;
}

/// A node: besides [`trim_meta`], its attached volumes. Its images stay:
/// the image-locality part of the score reads them.
pub fn trim_node(node: &mut Node) {
    trim_meta(node);
    if let Some(status) = node.status.as_mut() {
        status.volumes_attached = None;
        status.volumes_in_use = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::is_pending_for;
    use crate::cycle::queue::QueuedPod;
    use gputopo_scheduler_core::pod::PendingPod;
    use gputopo_scheduler_core::snapshot::from_k8s::bound_pod_input;
    use serde_json::json;

    /// A pod as a real workload writes it: everything filled in.
    fn full_pod(node: Option<&str>) -> Pod {
        let container = |name: &str| {
            json!({
                "name": name, "image": "trainer:1",
                "command": ["python"], "args": ["train.py"],
                "env": [{"name": "RANK", "value": "0"}],
                "envFrom": [{"configMapRef": {"name": "cfg"}}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "livenessProbe": {"exec": {"command": ["true"]}},
                "lifecycle": {"preStop": {"exec": {"command": ["true"]}}},
                "resources": {
                    "requests": {"cpu": "4", "memory": "32Gi"},
                    "limits": {"nvidia.com/gpu": "2"},
                    "claims": [{"name": "gpus"}]
                }
            })
        };
        serde_json::from_value(json!({
            "metadata": {
                "name": "w0", "namespace": "ml", "uid": "u1",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"jobset.sigs.k8s.io/jobset-name": "js"},
                "annotations": {
                    "gputopo.dev/assigned-gpus": "0,1",
                    "gputopo.dev/workload": "training",
                    LAST_APPLIED: "{\"kind\":\"Pod\"}"
                },
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j1", "controller": true}]
            },
            "spec": {
                "schedulerName": "gputopo-scheduler",
                "nodeName": node,
                "priority": 7,
                "nodeSelector": {"gputopo.dev/leaf": "leaf-1"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "resourceClaims": [{"name": "gpus", "resourceClaimName": "c1"}],
                "volumes": [
                    {"name": "data", "emptyDir": {}},
                    {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                        "accessModes": ["ReadWriteOnce"], "storageClassName": "template-class",
                        "resources": {"requests": {"storage": "1Gi"}}}}}}
                ],
                "initContainers": [container("init")],
                "containers": [container("main")]
            },
            "status": {
                "phase": if node.is_some() { "Running" } else { "Pending" },
                "startTime": "2026-01-01T00:01:00Z",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "main", "image": "trainer:1", "imageID": "x",
                    "ready": true, "restartCount": 0}]
            }
        }))
        .expect("a pod")
    }

    #[test]
    fn a_trimmed_pod_reads_the_same_to_the_scheduler() {
        let names = vec!["gputopo-scheduler".to_string()];
        for node in [None, Some("n1")] {
            let full = full_pod(node);
            let mut trimmed = full.clone();
            trim_pod(&mut trimmed);
            assert_eq!(
                PendingPod::from_k8s(&trimmed),
                PendingPod::from_k8s(&full),
                "{node:?}"
            );
            assert_eq!(
                bound_pod_input(&trimmed),
                bound_pod_input(&full),
                "{node:?}"
            );
            assert_eq!(
                is_pending_for(&trimmed, &names),
                is_pending_for(&full, &names)
            );
            assert_eq!(QueuedPod::of(&trimmed), QueuedPod::of(&full));
            assert_eq!(
                trimmed.spec.as_ref().map(|s| &s.resource_claims),
                full.spec.as_ref().map(|s| &s.resource_claims)
            );
            assert_eq!(
                trimmed.status.as_ref().map(|s| &s.conditions),
                full.status.as_ref().map(|s| &s.conditions)
            );
            assert_eq!(
                trimmed.metadata.owner_references,
                full.metadata.owner_references
            );
            assert_eq!(trimmed.metadata.labels, full.metadata.labels);
        }
    }

    #[test]
    fn trimming_drops_what_is_never_read() {
        let mut pod = full_pod(Some("n1"));
        trim_pod(&mut pod);
        let text = serde_json::to_string(&pod).expect("serializes");
        for gone in [
            "managedFields",
            "last-applied",
            "env",
            "volumeMounts",
            "livenessProbe",
            "containerStatuses",
            "emptyDir",
            "template-class",
            "train.py",
        ] {
            assert!(!text.contains(gone), "{gone} still in {text}");
        }
        assert!(text.contains("gputopo.dev/assigned-gpus"), "{text}");
        // The claims a pod mounts stay: the volume plugins read them.
        assert!(
            text.contains("checkpoints") && text.contains("scratch"),
            "{text}"
        );
        let mut node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"gputopo.dev/leaf": "l1"}},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8"},
                "images": [{"names": ["trainer:1"], "sizeBytes": 1}],
                "volumesInUse": ["v"]
            }
        }))
        .expect("a node");
        trim_node(&mut node);
        let status = node.status.as_ref().expect("status kept");
        assert!(status.volumes_in_use.is_none());
        assert!(
            status.images.is_some(),
            "images kept: image locality scores them"
        );
        assert!(status.allocatable.is_some(), "allocatable kept");
        assert!(node.metadata.labels.is_some(), "labels kept");
    }
}
