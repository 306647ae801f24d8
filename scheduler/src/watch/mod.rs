//! The reflectors both modes keep (Pods, Nodes, Namespaces, `GpuTopology`, and for the
//! secondary scheduler the gang objects: both PodGroups, JobSets,
//! LeaderWorkerSets, and DRA's ResourceSlices, ResourceClaims,
//! DeviceClasses and DeviceTaintRules): a store per kind, a callback per event saying whether
//! it may change what a decision sees, and the bootstrap both modes share
//! (is the resource served, wait for every first list).

use crate::change_feed::{ChangeFeed, ChangedObjects, Drained, changed_objects};
use crate::checked::{Checked, InvalidObject, InvalidObjectsGauge, InvalidReport};
use crate::claims::DraObjects;
use crate::gangs::{GangApis, GangObjects, JobSet, LeaderWorkerSet, PodGroup, UpstreamPodGroup};
use crate::storage_objects::{StorageObjects, StorageStores};
use crate::trim::{trim_meta, trim_node, trim_pod};
use crate::workload_objects::WorkloadObjects;
use futures::future::BoxFuture;
use gputopo_api::GpuTopology;
use gputopo_ops::Readiness;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ReplicationController, Service};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::Store;
use std::sync::Arc;

mod follow;
mod reflect;
pub use follow::{RECHECK, Served};
pub use reflect::{always, pod_changes_cluster, reflect};
use reflect::{optional, owned};

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
    /// Their labels are what inter-pod terms' `namespaceSelector`s match.
    pub namespaces: Store<Namespace>,
    /// The owners whose selectors give spread's default constraints; each
    /// empty when not watched (the extender).
    services: Store<Service>,
    replica_sets: Store<ReplicaSet>,
    stateful_sets: Store<StatefulSet>,
    replication_controllers: Store<ReplicationController>,
    /// Claims, volumes and classes for the volume plugins; `None` when
    /// not watched (the extender).
    storage: Option<StorageStores>,
    topologies: Store<Checked<GpuTopology>>,
    topologies_served: Served,
    /// The gang objects; each empty when not watched (the extender) or
    /// not served.
    groups: Store<Checked<PodGroup>>,
    upstream_groups: Store<Checked<UpstreamPodGroup>>,
    jobsets: Store<Checked<JobSet>>,
    leader_worker_sets: Store<Checked<LeaderWorkerSet>>,
    /// Whether each gang kind is served now: PodGroup, the upstream
    /// PodGroup, JobSet, LeaderWorkerSet.
    gang_served: [Served; 4],
    /// `resource.k8s.io/v1`: the secondary scheduler allocates claims from
    /// them; the extender judges claims' fit per node (both modes).
    dra: DraStores,
    invalid: InvalidReport,
    /// What changed since the cycle last drained them (`change_feed.rs`).
    pod_changes: ChangeFeed<Pod>,
    node_changes: ChangeFeed<Node>,
    topology_changes: ChangeFeed<Checked<GpuTopology>>,
    /// The unreadable `GpuTopology` objects by name, as of the last read.
    invalid_topologies: std::sync::Mutex<std::collections::BTreeMap<String, InvalidObject>>,
}

/// The `resource.k8s.io/v1` stores (each empty where not served).
struct DraStores {
    slices: Store<Checked<ResourceSlice>>,
    claims: Store<Checked<ResourceClaim>>,
    classes: Store<Checked<DeviceClass>>,
    taint_rules: Store<Checked<DeviceTaintRule>>,
}

impl DraStores {
    async fn start(
        client: &kube::Client,
        on_event: &(impl Fn(bool) + Clone + Send + 'static),
        readiness: &Readiness,
    ) -> DraStores {
        const NO_DRA: &str = "resource.k8s.io/v1 is not served (Kubernetes 1.34+); pods with ResourceClaims wait until it is";
        let (slices, _) =
            optional(client, true, "ResourceSlice", NO_DRA, on_event, readiness).await;
        let (claims, _) =
            optional(client, true, "ResourceClaim", NO_DRA, on_event, readiness).await;
        let (classes, _) = optional(client, true, "DeviceClass", NO_DRA, on_event, readiness).await;
        let (taint_rules, _) = optional(
            client,
            true,
            "DeviceTaintRule",
            "devicetaintrules.resource.k8s.io/v1 is not served (the DRADeviceTaintRules feature, Kubernetes 1.37); only taints in ResourceSlices are honoured until it is",
            on_event,
            readiness,
        )
        .await;
        DraStores {
            slices,
            claims,
            classes,
            taint_rules,
        }
    }
}

impl Watches {
    /// Starts the reflectors; every event calls `on_event(changed)`. A
    /// custom resource the API server does not serve gets an empty store
    /// (and a log line saying what that means) until it is served, and is
    /// watched from then on (`follow.rs`).
    /// While the API server cannot be reached this waits (with backoff,
    /// saying so in `readiness`) rather than fail: a process that exits
    /// would only crash-loop until it is back. `secondary`: the secondary
    /// scheduler's own kinds too (the gang objects), which the extender
    /// leaves to kube-scheduler. DRA's kinds are watched in both modes.
    pub async fn start(
        client: &kube::Client,
        secondary: bool,
        on_event: impl Fn(bool) + Clone + Send + 'static,
        invalid: InvalidObjectsGauge,
        readiness: &Readiness,
    ) -> Watches {
        let (pod_changes, node_changes, topology_changes): (
            ChangeFeed<Pod>,
            ChangeFeed<Node>,
            ChangeFeed<Checked<GpuTopology>>,
        ) = Default::default();
        let (topologies, topologies_served) = follow::follow(
            follow::Follow {
                api: Api::<Checked<GpuTopology>>::all(client.clone()),
                what: "GpuTopology",
                missing: "the API server does not serve gputopologies.gputopo.dev (CRD not installed); every node is treated as having no topology until it is",
                changes: always,
                feed: Some(topology_changes.clone()),
                trim: trim_meta,
            },
            on_event.clone(),
            readiness,
        )
        .await;
        let (groups, groups_served) = optional(
            client,
            secondary,
            "PodGroup",
            "podgroups.scheduling.x-k8s.io is not served; gangs of scheduler-plugins PodGroups wait until its CRD is installed",
            &on_event,
            readiness,
        )
        .await;
        let (upstream_groups, upstream_served) = optional(
            client,
            secondary,
            "PodGroup (scheduling.k8s.io)",
            "podgroups.scheduling.k8s.io/v1beta1 is not served (the GenericWorkload feature, Kubernetes 1.35+); pods naming one in spec.schedulingGroup wait until it is enabled",
            &on_event,
            readiness,
        )
        .await;
        let (jobsets, jobsets_served) = optional(
            client,
            secondary,
            "JobSet",
            "jobsets.jobset.x-k8s.io is not served; JobSet pods wait for their JobSet until JobSet is installed",
            &on_event,
            readiness,
        )
        .await;
        let (leader_worker_sets, lws_served) = optional(
            client,
            secondary,
            "LeaderWorkerSet",
            "leaderworkersets.leaderworkerset.x-k8s.io is not served; LeaderWorkerSet groups are sized from their pods' annotation",
            &on_event,
            readiness,
        )
        .await;
        let dra = DraStores::start(client, &on_event, readiness).await;
        let owner = |what: &'static str| (secondary, what);
        Watches {
            services: owned(client, owner("Service"), &on_event),
            replica_sets: owned(client, owner("ReplicaSet"), &on_event),
            stateful_sets: owned(client, owner("StatefulSet"), &on_event),
            replication_controllers: owned(client, owner("ReplicationController"), &on_event),
            storage: secondary.then(|| StorageStores {
                claims: owned(client, owner("PersistentVolumeClaim"), &on_event),
                volumes: owned(client, owner("PersistentVolume"), &on_event),
                classes: owned(client, owner("StorageClass"), &on_event),
                csi_nodes: owned(client, owner("CSINode"), &on_event),
                csi_drivers: owned(client, owner("CSIDriver"), &on_event),
                capacities: owned(client, owner("CSIStorageCapacity"), &on_event),
            }),
            pods: reflect(
                Api::all(client.clone()),
                "Pod",
                on_event.clone(),
                pod_changes_cluster,
                Some(&pod_changes),
                trim_pod,
            ),
            namespaces: reflect(
                Api::all(client.clone()),
                "Namespace",
                on_event.clone(),
                always,
                None,
                trim_meta,
            ),
            nodes: reflect(
                Api::all(client.clone()),
                "Node",
                on_event,
                always,
                Some(&node_changes),
                trim_node,
            ),
            topologies,
            topologies_served,
            groups,
            upstream_groups,
            jobsets,
            leader_worker_sets,
            gang_served: [groups_served, upstream_served, jobsets_served, lws_served],
            dra,
            invalid: InvalidReport::new(invalid),
            pod_changes,
            node_changes,
            topology_changes,
            invalid_topologies: Default::default(),
        }
    }

    /// The nodes, `GpuTopology` objects and pods changed since the last
    /// call; `None` when anything may have (the first call, a relist).
    pub fn changed(&self) -> Option<ChangedObjects> {
        let topologies = self.topology_changes.drain(&self.topologies);
        if let Drained::Keys(keys) = &topologies {
            let mut invalid = self
                .invalid_topologies
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (key, now) in keys {
                match now.as_ref().and_then(|t| t.value.as_ref().err()) {
                    Some(bad) => invalid.insert(key.name.clone(), bad.clone()),
                    None => invalid.remove(&key.name),
                };
            }
        }
        changed_objects(
            self.node_changes.drain(&self.nodes),
            topologies,
            self.pod_changes.drain(&self.pods),
        )
    }

    /// The `GpuTopology` objects that cannot be read, kept from the change
    /// lists (see [`Self::topologies`] for what is returned).
    pub fn invalid_topologies(&self) -> Vec<InvalidObject> {
        let bad: Vec<InvalidObject> = self
            .invalid_topologies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        self.invalid.observe("GpuTopology", &bad)
    }

    /// Whether the API server serves `GpuTopology` now.
    pub fn topologies_served(&self) -> bool {
        self.topologies_served.now()
    }

    /// The `GpuTopology` objects gputopo can use, and those newly found
    /// unusable (each logged once and counted in the gauge).
    pub fn topologies(&self) -> (Vec<Arc<GpuTopology>>, Vec<InvalidObject>) {
        let (ok, bad) = Checked::split(&self.topologies.state());
        *self
            .invalid_topologies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            bad.iter().map(|b| (b.name.clone(), b.clone())).collect();
        (ok, self.invalid.observe("GpuTopology", &bad))
    }

    /// The Services and controllers, for spread's default constraints.
    pub fn workloads(&self) -> WorkloadObjects {
        WorkloadObjects {
            services: self.services.state(),
            replica_sets: self.replica_sets.state(),
            stateful_sets: self.stateful_sets.state(),
            replication_controllers: self.replication_controllers.state(),
        }
    }

    /// Claims, volumes, classes, CSINodes, CSIDrivers and capacities, for
    /// the volume plugins.
    pub fn storage(&self) -> StorageObjects {
        self.storage
            .as_ref()
            .map_or_else(StorageObjects::default, StorageStores::objects)
    }

    /// The gang objects gputopo can use, and those newly found unusable.
    pub fn gangs(&self) -> (GangObjects, Vec<InvalidObject>) {
        let mut invalid = Vec::new();
        let gangs = GangObjects {
            pod_groups: self.usable("PodGroup", &self.groups, &mut invalid),
            upstream_groups: self.usable(
                "PodGroup.scheduling.k8s.io",
                &self.upstream_groups,
                &mut invalid,
            ),
            jobsets: self.usable("JobSet", &self.jobsets, &mut invalid),
            leader_worker_sets: self.usable(
                "LeaderWorkerSet",
                &self.leader_worker_sets,
                &mut invalid,
            ),
            served: GangApis {
                pod_groups: self.gang_served[0].now(),
                upstream_groups: self.gang_served[1].now(),
                jobsets: self.gang_served[2].now(),
                leader_worker_sets: self.gang_served[3].now(),
            },
        };
        (gangs, invalid)
    }

    /// The DRA objects gputopo can use, and those newly found unusable.
    pub fn dra(&self) -> (DraObjects, Vec<InvalidObject>) {
        let mut invalid = Vec::new();
        let dra = DraObjects {
            slices: self.usable("ResourceSlice", &self.dra.slices, &mut invalid),
            claims: self.usable("ResourceClaim", &self.dra.claims, &mut invalid),
            classes: self.usable("DeviceClass", &self.dra.classes, &mut invalid),
            taint_rules: self.usable("DeviceTaintRule", &self.dra.taint_rules, &mut invalid),
        };
        (dra, invalid)
    }

    /// The objects of `store` gputopo can use; those newly found unusable
    /// go to `invalid`.
    fn usable<K: Resource<DynamicType = ()> + Clone>(
        &self,
        kind: &str,
        store: &Store<Checked<K>>,
        invalid: &mut Vec<InvalidObject>,
    ) -> Vec<Arc<K>> {
        let (ok, bad) = Checked::split(&store.state());
        invalid.extend(self.invalid.observe(kind, &bad));
        ok
    }

    /// Waits until every watch has listed, saying which one it waits for
    /// in `readiness`, then turns ready.
    pub async fn synced(&self, readiness: &Readiness) -> Result<(), WatchError> {
        let mut waits: Vec<(&'static str, BoxFuture<'_, Result<(), _>>)> = vec![
            ("Service", Box::pin(self.services.wait_until_ready())),
            ("ReplicaSet", Box::pin(self.replica_sets.wait_until_ready())),
            (
                "StatefulSet",
                Box::pin(self.stateful_sets.wait_until_ready()),
            ),
            (
                "ReplicationController",
                Box::pin(self.replication_controllers.wait_until_ready()),
            ),
            ("Pod", Box::pin(self.pods.wait_until_ready())),
            ("Node", Box::pin(self.nodes.wait_until_ready())),
            ("Namespace", Box::pin(self.namespaces.wait_until_ready())),
            ("GpuTopology", Box::pin(self.topologies.wait_until_ready())),
            ("PodGroup", Box::pin(self.groups.wait_until_ready())),
            (
                "PodGroup (scheduling.k8s.io)",
                Box::pin(self.upstream_groups.wait_until_ready()),
            ),
            ("JobSet", Box::pin(self.jobsets.wait_until_ready())),
            (
                "LeaderWorkerSet",
                Box::pin(self.leader_worker_sets.wait_until_ready()),
            ),
            (
                "ResourceSlice",
                Box::pin(self.dra.slices.wait_until_ready()),
            ),
            (
                "ResourceClaim",
                Box::pin(self.dra.claims.wait_until_ready()),
            ),
            ("DeviceClass", Box::pin(self.dra.classes.wait_until_ready())),
            (
                "DeviceTaintRule",
                Box::pin(self.dra.taint_rules.wait_until_ready()),
            ),
        ];
        if let Some(s) = &self.storage {
            waits.push((
                "PersistentVolumeClaim",
                Box::pin(s.claims.wait_until_ready()),
            ));
            waits.push(("PersistentVolume", Box::pin(s.volumes.wait_until_ready())));
            waits.push(("StorageClass", Box::pin(s.classes.wait_until_ready())));
            waits.push(("CSINode", Box::pin(s.csi_nodes.wait_until_ready())));
            waits.push(("CSIDriver", Box::pin(s.csi_drivers.wait_until_ready())));
            waits.push((
                "CSIStorageCapacity",
                Box::pin(s.capacities.wait_until_ready()),
            ));
        }
        for (what, ready) in waits {
            readiness.set_not_ready(format!("waiting for the {what} watch to sync"));
            ready.await.map_err(|_| WatchError::Ended { what })?;
        }
        readiness.set_ready();
        Ok(())
    }
}
