//! Which watched objects changed since the cycle last read them, so that a
//! cycle reads what changed instead of comparing every object
//! (`live_cluster.rs`), as kube-scheduler's cache is fed by its informers'
//! event handlers.
//!
//! The watch task records the key of each object it applied to its store,
//! after applying it; the cycle drains the keys and reads each from the
//! store. A drained key therefore reads the store's newest version, and a
//! change applied after the drain is recorded for the next one: nothing is
//! missed, at worst read twice. A relist (the watch starting over, its
//! first list included) may have changed anything: the next drain says so,
//! and the cycle compares every object, as on its first pass.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use crate::checked::Checked;
use gputopo_api::GpuTopology;

/// What the cycle is told changed since it last read the objects: per
/// key, the object now, or `None` where it is gone. Only nodes,
/// `GpuTopology` objects and pods, the kinds that grow with the cluster.
#[derive(Clone, Debug, Default)]
pub struct ChangedObjects {
    /// By name.
    pub nodes: Vec<(String, Option<Arc<Node>>)>,
    /// By name; an object that cannot be read counts as gone.
    pub topologies: Vec<(String, Option<Arc<GpuTopology>>)>,
    /// By `namespace/name`.
    pub pods: Vec<(String, Option<Arc<Pod>>)>,
}

/// One kind's keys changed since the last drain (see the module docs).
pub struct ChangeFeed<K: Resource<DynamicType = ()>> {
    recorded: Arc<Mutex<Recorded<K>>>,
}

impl<K: Resource<DynamicType = ()>> Clone for ChangeFeed<K> {
    fn clone(&self) -> Self {
        ChangeFeed {
            recorded: self.recorded.clone(),
        }
    }
}

struct Recorded<K: Resource<DynamicType = ()>> {
    /// The watch listed again since the last drain (or was never drained).
    everything: bool,
    keys: HashSet<ObjectRef<K>>,
}

/// What a drain found.
#[derive(Debug)]
pub enum Drained<K: Resource<DynamicType = ()>> {
    /// Anything may have changed: compare every object.
    Everything,
    /// These keys changed: each with the store's object now, `None` where
    /// it is gone.
    Keys(Vec<(ObjectRef<K>, Option<Arc<K>>)>),
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Default for ChangeFeed<K> {
    fn default() -> Self {
        ChangeFeed {
            recorded: Arc::new(Mutex::new(Recorded {
                everything: true,
                keys: HashSet::new(),
            })),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> ChangeFeed<K> {
    /// Records what `event` changed; called after the store applied it.
    pub fn record(&self, event: &watcher::Event<K>) {
        let mut recorded = self.recorded.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                if !recorded.everything {
                    recorded.keys.insert(ObjectRef::from_obj(o));
                }
            }
            watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => {
                recorded.everything = true;
                recorded.keys.clear();
            }
        }
    }

    /// The keys recorded since the last drain, read from `store`.
    pub fn drain(&self, store: &Store<K>) -> Drained<K> {
        let (everything, keys) = {
            let mut recorded = self.recorded.lock().unwrap_or_else(PoisonError::into_inner);
            let keys = std::mem::take(&mut recorded.keys);
            (std::mem::replace(&mut recorded.everything, false), keys)
        };
        if everything {
            return Drained::Everything;
        }
        Drained::Keys(
            keys.into_iter()
                .map(|k| {
                    let now = store.get(&k);
                    (k, now)
                })
                .collect(),
        )
    }
}

/// `namespace/name`, as `cluster.rs` names a pod (`pod_key`).
fn pod_key(r: &ObjectRef<Pod>) -> String {
    format!("{}/{}", r.namespace.as_deref().unwrap_or("default"), r.name)
}

/// The three feeds' drains as one [`ChangedObjects`]; `None` when any of
/// them says everything may have changed.
pub fn changed_objects(
    nodes: Drained<Node>,
    topologies: Drained<Checked<GpuTopology>>,
    pods: Drained<Pod>,
) -> Option<ChangedObjects> {
    let (Drained::Keys(nodes), Drained::Keys(topologies), Drained::Keys(pods)) =
        (nodes, topologies, pods)
    else {
        return None;
    };
    Some(ChangedObjects {
        nodes: nodes.into_iter().map(|(k, n)| (k.name, n)).collect(),
        topologies: topologies
            .into_iter()
            .map(|(k, t)| (k.name, t.and_then(|t| t.value.as_ref().ok().cloned())))
            .collect(),
        pods: pods.into_iter().map(|(k, p)| (pod_key(&k), p)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use serde_json::json;

    fn pod(name: &str, node: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"nodeName": node, "containers": []}
        }))
        .expect("a pod")
    }

    /// Applies `event` to the store, then records it, as `watch::reflect`
    /// does.
    fn apply(
        writer: &mut reflector::store::Writer<Pod>,
        feed: &ChangeFeed<Pod>,
        event: watcher::Event<Pod>,
    ) {
        writer.apply_watcher_event(&event);
        feed.record(&event);
    }

    /// A watch's (re)list holding only `pod`.
    fn list(writer: &mut reflector::store::Writer<Pod>, feed: &ChangeFeed<Pod>, pod: Pod) {
        apply(writer, feed, watcher::Event::Init);
        apply(writer, feed, watcher::Event::InitApply(pod));
        apply(writer, feed, watcher::Event::InitDone);
    }

    fn keys(d: Drained<Pod>) -> Vec<(String, Option<String>)> {
        let Drained::Keys(mut keys) = d else {
            panic!("expected keys, got everything");
        };
        keys.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        keys.into_iter()
            .map(|(k, p)| {
                let node = p.and_then(|p| p.spec.as_ref()?.node_name.clone());
                (k.name, node)
            })
            .collect()
    }

    #[test]
    fn the_first_drain_and_one_after_a_relist_say_everything() {
        let (store, mut writer) = reflector::store();
        let feed = ChangeFeed::default();
        list(&mut writer, &feed, pod("a", None));
        assert!(matches!(feed.drain(&store), Drained::Everything));
        assert_eq!(keys(feed.drain(&store)), vec![]);
        apply(&mut writer, &feed, watcher::Event::Apply(pod("b", None)));
        apply(&mut writer, &feed, watcher::Event::Init);
        apply(&mut writer, &feed, watcher::Event::InitDone);
        assert!(
            matches!(feed.drain(&store), Drained::Everything),
            "a relist may have changed anything, the keys before it included"
        );
    }

    #[test]
    fn a_drain_names_each_changed_key_once_with_the_object_the_store_holds_now() {
        let (store, mut writer) = reflector::store();
        let feed = ChangeFeed::default();
        list(&mut writer, &feed, pod("gone", None));
        let _ = feed.drain(&store);
        apply(&mut writer, &feed, watcher::Event::Apply(pod("a", None)));
        apply(
            &mut writer,
            &feed,
            watcher::Event::Apply(pod("a", Some("n1"))),
        );
        apply(
            &mut writer,
            &feed,
            watcher::Event::Delete(pod("gone", None)),
        );
        assert_eq!(
            keys(feed.drain(&store)),
            vec![
                ("a".to_string(), Some("n1".to_string())),
                ("gone".to_string(), None)
            ]
        );
        assert_eq!(keys(feed.drain(&store)), vec![], "drained once");
    }
}
