//! The reflectors both modes keep (Pods, Nodes, `GpuTopology`, and for the
//! secondary scheduler PodGroups): a store per kind, a callback per event
//! saying whether it may change what a decision sees, and the bootstrap
//! both modes share (is the CRD served, wait for every first list).

use crate::checked::{Checked, InvalidObject, InvalidObjectsGauge, InvalidReport};
use crate::podgroup::PodGroup;
use backon::{ExponentialBuilder, Retryable};
use futures::StreamExt;
use futures::future::BoxFuture;
use gputopo_api::GpuTopology;
use gputopo_ops::Readiness;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Resource;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// Why the watches could not start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("the {what} watch ended before its first list completed")]
    Ended { what: &'static str },
}

/// The stores a mode decides from. Custom resources are stored
/// [`Checked`]: one object gputopo cannot read never fails a list (so a
/// restart still becomes ready); it is skipped and reported.
pub struct Watches {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    topologies: Store<Checked<GpuTopology>>,
    /// Empty when not watched (the extender) or not served.
    groups: Store<Checked<PodGroup>>,
    invalid: InvalidReport,
}

impl Watches {
    /// Starts the reflectors; every event calls `on_event(changed)`. A
    /// custom resource the API server does not serve gets an empty store
    /// (and a log line saying what that means) until a restart.
    /// While the API server cannot be reached this waits (with backoff,
    /// saying so in `readiness`) rather than fail: a process that exits
    /// would only crash-loop until it is back.
    pub async fn start(
        client: &kube::Client,
        pod_groups: bool,
        on_event: impl Fn(bool) + Clone + Send + 'static,
        invalid: InvalidObjectsGauge,
        readiness: &Readiness,
    ) -> Watches {
        let topologies = Api::<Checked<GpuTopology>>::all(client.clone());
        let topologies = if served(&topologies, "GpuTopology", readiness).await {
            reflect(topologies, "GpuTopology", on_event.clone(), always)
        } else {
            warn!(
                "the API server does not serve gputopologies.gputopo.dev (CRD not installed); every node is treated as having no topology until a restart"
            );
            empty_store()
        };
        let groups = Api::<Checked<PodGroup>>::all(client.clone());
        let groups = if !pod_groups {
            empty_store()
        } else if served(&groups, "PodGroup", readiness).await {
            reflect(groups, "PodGroup", on_event.clone(), always)
        } else {
            info!(
                "the API server does not serve podgroups.scheduling.x-k8s.io; gangs are read from gputopo.dev/gang annotations only (restart after installing the CRD)"
            );
            empty_store()
        };
        Watches {
            pods: reflect(
                Api::all(client.clone()),
                "Pod",
                on_event.clone(),
                pod_changes_cluster,
            ),
            nodes: reflect(Api::all(client.clone()), "Node", on_event, always),
            topologies,
            groups,
            invalid: InvalidReport::new(invalid),
        }
    }

    /// The `GpuTopology` objects gputopo can use, and those newly found
    /// unusable (each logged once and counted in the gauge).
    pub fn topologies(&self) -> (Vec<Arc<GpuTopology>>, Vec<InvalidObject>) {
        let (ok, bad) = Checked::split(&self.topologies.state());
        (ok, self.invalid.observe("GpuTopology", &bad))
    }

    /// The PodGroups gputopo can use, and those newly found unusable.
    pub fn groups(&self) -> (Vec<Arc<PodGroup>>, Vec<InvalidObject>) {
        let (ok, bad) = Checked::split(&self.groups.state());
        (ok, self.invalid.observe("PodGroup", &bad))
    }

    /// Waits until every watch has listed, saying which one it waits for
    /// in `readiness`, then turns ready.
    pub async fn synced(&self, readiness: &Readiness) -> Result<(), WatchError> {
        let waits: [(&'static str, BoxFuture<'_, Result<(), _>>); 4] = [
            ("Pod", Box::pin(self.pods.wait_until_ready())),
            ("Node", Box::pin(self.nodes.wait_until_ready())),
            ("GpuTopology", Box::pin(self.topologies.wait_until_ready())),
            ("PodGroup", Box::pin(self.groups.wait_until_ready())),
        ];
        for (what, ready) in waits {
            readiness.set_not_ready(format!("waiting for the {what} watch to sync"));
            ready.await.map_err(|_| WatchError::Ended { what })?;
        }
        readiness.set_ready();
        Ok(())
    }
}

/// Whether the API server serves `api`'s resource (its CRD is installed);
/// asks again, with backoff up to 30 s, until it answers.
async fn served<K>(api: &Api<K>, what: &'static str, readiness: &Readiness) -> bool
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let probe = || async {
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    };
    let backoff = ExponentialBuilder::default()
        .with_max_delay(Duration::from_secs(30))
        .with_jitter()
        .without_max_times();
    probe
        .retry(backoff)
        .notify(|e, wait| {
            warn!(what, error = %e, ?wait, "asking the API server whether it serves {what}; retrying");
            readiness.set_not_ready(format!(
                "cannot reach the API server (asking whether it serves {what}): {e}"
            ));
        })
        .await
        .unwrap_or(false)
}

/// An empty, synced store, for a resource not watched.
fn empty_store<K>() -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

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
