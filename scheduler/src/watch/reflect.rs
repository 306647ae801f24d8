//! How one kind is watched: whether the API server serves it, a
//! reflector with its backoff and event filter, the stores of optional
//! kinds (`follow.rs`; empty where not watched) and of the kinds only the secondary
//! scheduler keeps.

use super::follow::{Follow, RECHECK, Served, follow, watch_until_gone};
use crate::change_feed::ChangeFeed;
use crate::checked::Checked;
use crate::trim::trim_meta;
use gputopo_ops::Readiness;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use tracing::warn;

/// A watch of a kind gputopo can do without: an empty store when `watch`
/// is false (the kind is not this mode's), else the kind followed as the
/// API server serves it or not (`follow.rs`), saying `missing` while not.
pub(super) async fn optional<K>(
    client: &kube::Client,
    watch: bool,
    what: &'static str,
    missing: &'static str,
    on_event: &(impl Fn(bool) + Clone + Send + 'static),
    readiness: &Readiness,
) -> (Store<Checked<K>>, Served)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::Scope: Send + Sync,
{
    if !watch {
        return (empty_store(), Served::always());
    }
    let f = Follow {
        api: Api::<Checked<K>>::all(client.clone()),
        what,
        missing,
        changes: always,
        feed: None,
        trim: trim_meta,
    };
    follow(f, on_event.clone(), readiness).await
}

/// A built-in kind's watch when `watch.0` (the secondary scheduler), else
/// an empty store. Changes wake the cycle: they change default spreading
/// or what a pod's volumes need.
pub(super) fn owned<K>(
    client: &kube::Client,
    (watch, what): (bool, &'static str),
    on_event: &(impl Fn(bool) + Clone + Send + 'static),
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::Scope: Send + Sync,
{
    if watch {
        reflect(
            Api::all(client.clone()),
            what,
            on_event.clone(),
            always,
            None,
            trim_meta,
        )
    } else {
        empty_store()
    }
}

/// An empty, synced store, for a resource not watched.
pub(super) fn empty_store<K>() -> Store<K>
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
/// [`watch_backoff`].
pub fn reflect<K>(
    api: Api<K>,
    what: &'static str,
    on_event: impl Fn(bool) + Send + 'static,
    changes: fn(&watcher::Event<K>) -> bool,
    feed: Option<&ChangeFeed<K>>,
    trim: fn(&mut K),
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
    let (store, mut writer) = reflector::store();
    // Stored without what the scheduler never reads (`trim.rs`); the same
    // loop as a followed kind's, which a built-in kind never leaves.
    let f = Follow {
        api,
        what,
        missing: "",
        changes,
        feed: feed.cloned(),
        trim,
    };
    tokio::spawn(async move {
        let mut on_event = on_event;
        loop {
            on_event = watch_until_gone(&f, &mut writer, on_event).await;
            warn!(
                watch = what,
                "the API server answered 404 for {what}; watching again"
            );
            tokio::time::sleep(RECHECK).await;
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
    use super::super::follow::watch_backoff;
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    #[tokio::test]
    async fn watch_retries_start_within_a_second_and_never_wait_past_ten() {
        let mut backoff = watch_backoff();
        let delays: Vec<Duration> = (0..12).map(|_| backoff.next().expect("no limit")).collect();
        assert!(delays[0] <= Duration::from_secs(1), "{delays:?}");
        // 5 s at most, and the jitter adds at most as much again.
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(10)),
            "{delays:?}"
        );
        assert!(
            delays[11] >= Duration::from_secs(5),
            "it does grow: {delays:?}"
        );
    }

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
