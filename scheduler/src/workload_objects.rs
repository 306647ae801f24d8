//! Services, ReplicaSets, StatefulSets and ReplicationControllers, as the
//! secondary scheduler watches them: only their selectors matter, which
//! give a pod that states no topology spread constraint the default ones
//! kube-scheduler would apply (`WorkloadSelectors` in scheduler-core).

use gputopo_scheduler_core::pod_constraints::LabelSelector;
use gputopo_scheduler_core::snapshot::WorkloadSelectors;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ReplicationController, Service};
use kube::ResourceExt;
use std::sync::Arc;

/// The watched owners (empty where not watched: the extender).
#[derive(Clone, Debug, Default)]
pub struct WorkloadObjects {
    pub services: Vec<Arc<Service>>,
    pub replica_sets: Vec<Arc<ReplicaSet>>,
    pub stateful_sets: Vec<Arc<StatefulSet>>,
    pub replication_controllers: Vec<Arc<ReplicationController>>,
}

/// No owners: for the extender, which leaves scoring to kube-scheduler, and tests.
pub static NO_WORKLOADS: WorkloadObjects = WorkloadObjects {
    services: Vec::new(),
    replica_sets: Vec::new(),
    stateful_sets: Vec::new(),
    replication_controllers: Vec::new(),
};

impl WorkloadObjects {
    /// Their selectors. A selector the API server took but this cannot
    /// read selects nothing here, as an unparsable selector does upstream.
    pub fn selectors(&self) -> WorkloadSelectors {
        let mut w = WorkloadSelectors::default();
        for s in &self.services {
            if let Some(sel) = s.spec.as_ref().and_then(|s| s.selector.clone()) {
                w.services.insert(key(s.as_ref()), sel);
            }
        }
        for rs in &self.replica_sets {
            if let Ok(sel) = LabelSelector::from_k8s(&rs.spec.selector, "spec.selector") {
                w.replica_sets.insert(key(rs.as_ref()), sel);
            }
        }
        for ss in &self.stateful_sets {
            if let Ok(sel) = LabelSelector::from_k8s(&ss.spec.selector, "spec.selector") {
                w.stateful_sets.insert(key(ss.as_ref()), sel);
            }
        }
        for rc in &self.replication_controllers {
            if let Some(sel) = rc.spec.as_ref().and_then(|s| s.selector.clone()) {
                w.replication_controllers.insert(key(rc.as_ref()), sel);
            }
        }
        w
    }
}

/// `(namespace, name)` of a namespaced object.
fn key<K: ResourceExt>(o: &K) -> (String, String) {
    (o.namespace().unwrap_or_default(), o.name_any())
}
