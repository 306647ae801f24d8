//! The pods bound to this node that are awaiting admission and carry
//! gputopo's choice: a kube-runtime reflector over pods with
//! `spec.nodeName=<node>`, read at every `GetPreferredAllocation`, and a
//! fresh list of them when that view has no assignment for the request (the
//! kubelet watches pods too, and may admit one before this view has it).

use crate::choose::{AssignedPod, PodRef};
use futures::StreamExt;
use futures::future::BoxFuture;
use gputopo_api::keys::pod::ASSIGNED_GPUS;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing::warn;

/// The assignments of the pods awaiting admission on this node.
pub trait AssignedPods: Send + Sync + 'static {
    /// The assignments in the watched view (no request to the API server).
    fn assigned(&self) -> Vec<AssignedPod>;
    /// Whether the view has read the pods once (readiness waits for it).
    fn synced(&self) -> bool;
    /// The assignments as the API server has them now (a consistent list): what
    /// the kubelet has seen is in it, even when the view lags behind.
    fn fresh(&self) -> BoxFuture<'_, Result<Vec<AssignedPod>, kube::Error>>;
}

/// A pod's assignment, when it is one: bound to `node`, not being deleted, not
/// yet started (phase `Pending` or unset), with `gputopo.dev/assigned-gpus`.
/// A started pod's GPUs are allocated, so they are never `available` again
/// until it ends; leaving it out only keeps the list short.
pub fn assigned_pod(pod: &Pod, node: &str) -> Option<AssignedPod> {
    let meta = &pod.metadata;
    if meta.deletion_timestamp.is_some() {
        return None;
    }
    let on_node = pod.spec.as_ref()?.node_name.as_deref() == Some(node);
    let pending = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_none_or(|p| p == "Pending");
    if !on_node || !pending {
        return None;
    }
    let assigned = meta.annotations.as_ref()?.get(ASSIGNED_GPUS)?;
    Some(AssignedPod {
        pod: PodRef {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
        },
        created: meta.creation_timestamp.as_ref().map(|t| t.0),
        assigned: assigned.clone(),
    })
}

/// A reflector of this node's pods.
pub struct PodWatch {
    node: String,
    api: Api<Pod>,
    store: Store<Pod>,
    synced: Arc<AtomicBool>,
}

impl PodWatch {
    /// Starts watching pods with `spec.nodeName=<node>` in every namespace;
    /// watch errors are logged and retried with kube-runtime's backoff.
    pub fn start(client: kube::Client, node: &str) -> PodWatch {
        let api: Api<Pod> = Api::all(client);
        let config = watcher::Config::default().fields(&on_node(node));
        let (store, writer) = reflector::store();
        let synced = Arc::new(AtomicBool::new(false));
        let stream = reflector::reflector(writer, watcher(api.clone(), config).default_backoff());
        let flag = synced.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => flag.store(true, Ordering::SeqCst),
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "pod watch error; retrying with backoff"),
                }
            }
        });
        PodWatch {
            node: node.to_string(),
            api,
            store,
            synced,
        }
    }
}

fn on_node(node: &str) -> String {
    format!("spec.nodeName={node}")
}

impl AssignedPods for PodWatch {
    fn assigned(&self) -> Vec<AssignedPod> {
        self.store
            .state()
            .iter()
            .filter_map(|p| assigned_pod(p, &self.node))
            .collect()
    }

    fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    fn fresh(&self) -> BoxFuture<'_, Result<Vec<AssignedPod>, kube::Error>> {
        Box::pin(async move {
            // No resourceVersion: a consistent read, never an older cache.
            let pods = self
                .api
                .list(&ListParams::default().fields(&on_node(&self.node)))
                .await?;
            Ok(pods
                .items
                .iter()
                .filter_map(|p| assigned_pod(p, &self.node))
                .collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: &str, phase: Option<&str>, assigned: Option<&str>, deleting: bool) -> Pod {
        let mut annotations = serde_json::Map::new();
        if let Some(a) = assigned {
            annotations.insert(ASSIGNED_GPUS.into(), json!(a));
        }
        let mut meta = json!({"name": "p", "namespace": "ml", "uid": "u1",
            "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": annotations});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:01:00Z");
        }
        serde_json::from_value(json!({
            "metadata": meta,
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase}
        }))
        .expect("a pod")
    }

    #[test]
    fn only_pending_annotated_pods_of_this_node_claim() {
        let c = assigned_pod(&pod("n1", Some("Pending"), Some("0,3"), false), "n1").expect("claim");
        assert_eq!(c.assigned, "0,3");
        assert_eq!(c.pod.to_string(), "ml/p");
        assert_eq!(c.created.unwrap().as_second(), 1_767_225_600);
        assert!(assigned_pod(&pod("n1", None, Some("1"), false), "n1").is_some());
        assert!(assigned_pod(&pod("n2", Some("Pending"), Some("1"), false), "n1").is_none());
        assert!(assigned_pod(&pod("n1", Some("Running"), Some("1"), false), "n1").is_none());
        assert!(assigned_pod(&pod("n1", Some("Pending"), None, false), "n1").is_none());
        assert!(assigned_pod(&pod("n1", Some("Pending"), Some("1"), true), "n1").is_none());
    }
}
