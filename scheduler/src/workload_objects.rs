//! Services, ReplicaSets, StatefulSets and ReplicationControllers, as the
//! secondary scheduler watches them: only their selectors matter, which
//! give a pod that states no topology spread constraint the default ones
//! kube-scheduler would apply (`WorkloadSelectors` in scheduler-core).

use gputopo_scheduler_core::snapshot::WorkloadSelectors;
use gputopo_scheduler_core::snapshot::from_k8s::workload_selectors;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ReplicationController, Service};
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
    /// Whether `other` holds the very same objects.
    pub fn same_objects(&self, other: &WorkloadObjects) -> bool {
        use crate::storage_objects::same_arcs;
        same_arcs(&self.services, &other.services)
            && same_arcs(&self.replica_sets, &other.replica_sets)
            && same_arcs(&self.stateful_sets, &other.stateful_sets)
            && same_arcs(
                &self.replication_controllers,
                &other.replication_controllers,
            )
    }

    /// Their selectors.
    pub fn selectors(&self) -> WorkloadSelectors {
        workload_selectors(
            self.services.iter().map(AsRef::as_ref),
            self.replica_sets.iter().map(AsRef::as_ref),
            self.stateful_sets.iter().map(AsRef::as_ref),
            self.replication_controllers.iter().map(AsRef::as_ref),
        )
    }
}
