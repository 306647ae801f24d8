//! The reflectors both modes keep (Pods, Nodes, `GpuTopology`, PodGroups):
//! a store per kind, and a callback per event saying whether it may change
//! what a decision sees.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tracing::warn;

/// Starts a reflector for `api` feeding a store; every event calls
/// `on_event(changes(&event))`. Watch errors are logged and retried with
/// kube-runtime's default backoff.
pub fn reflect<K>(
    api: Api<K>,
    what: &'static str,
    on_event: impl Fn(bool) + Send + 'static,
    changes: fn(&watcher::Event<K>) -> bool,
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(e) => on_event(changes(&e)),
                Err(e) => warn!(watch = what, error = %e, "watch error; retrying with backoff"),
            }
        }
    });
    store
}

/// Whether a pod event may change the cluster a decision sees: a pending
/// pod's update frees and takes nothing; a bound one's (finished, resized)
/// or any deletion may.
pub fn pod_changes_cluster(e: &watcher::Event<Pod>) -> bool {
    match e {
        watcher::Event::Apply(p) => p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty()),
        _ => true,
    }
}

pub fn always<K>(_: &watcher::Event<K>) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "n"},
            "spec": {"nodeName": node, "containers": []}
        }))
        .expect("a pod")
    }

    #[test]
    fn only_bound_pods_and_deletions_change_the_cluster() {
        assert!(!pod_changes_cluster(&watcher::Event::Apply(pod(None))));
        assert!(pod_changes_cluster(&watcher::Event::Apply(pod(Some("n1")))));
        assert!(pod_changes_cluster(&watcher::Event::Delete(pod(None))));
        assert!(pod_changes_cluster(&watcher::Event::InitDone));
    }
}
