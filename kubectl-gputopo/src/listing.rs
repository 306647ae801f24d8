//! Every kind the secondary scheduler watches (`gputopo_scheduler::watch`),
//! listed once and trimmed as its watches trim them, so that what it
//! decides from here is what the scheduler decides from. Custom resources
//! are read one object at a time ([`Checked`]): an object gputopo cannot
//! read is left out and named in the warnings, as the scheduler does. A
//! kind the API server does not serve (404) is empty and marked not
//! served, as the watches mark it.

use gputopo_api::GpuTopology;
use gputopo_scheduler::assignment_record::RecordKeeper;
use gputopo_scheduler::checked::{Checked, InvalidObject};
use gputopo_scheduler::claims::DraObjects;
use gputopo_scheduler::cluster::{Objects, ReadingTrust, build_snapshot, pod_key};
use gputopo_scheduler::gangs::{
    GangApis, GangObjects, JobSet, LeaderWorkerSet, PodGroup, UpstreamPodGroup,
};
use gputopo_scheduler::storage_objects::StorageObjects;
use gputopo_scheduler::trim::{trim_meta, trim_node, trim_pod};
use gputopo_scheduler::workload_objects::WorkloadObjects;
use gputopo_scheduler::{Settings, cluster::AssumeCache};
use gputopo_scheduler_core::snapshot::{Snapshot, SnapshotError};
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;

/// A list the API server refused.
#[derive(Debug, thiserror::Error)]
#[error("listing {what}: {source}")]
pub struct ListError {
    pub what: &'static str,
    #[source]
    pub source: kube::Error,
}

/// The cluster as the scheduler's watches would hold it now.
#[derive(Debug, Default)]
pub struct Cluster {
    /// As listed: the cycle keeps each pod's GPU record itself.
    pub pods: Vec<Arc<Pod>>,
    pub nodes: Vec<Arc<Node>>,
    pub namespaces: Vec<Arc<Namespace>>,
    pub topologies: Vec<Arc<GpuTopology>>,
    pub workloads: WorkloadObjects,
    pub storage: StorageObjects,
    pub gangs: GangObjects,
    pub dra: DraObjects,
    /// Objects left out (unreadable) and kinds not served.
    pub warnings: Vec<String>,
}

/// Every object of `K`, trimmed by `trim`.
async fn list<K>(
    client: &kube::Client,
    what: &'static str,
    trim: fn(&mut K),
) -> Result<Vec<Arc<K>>, ListError>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
{
    let items = Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| ListError { what, source })?
        .items;
    Ok(items
        .into_iter()
        .map(|mut o| {
            trim(&mut o);
            Arc::new(o)
        })
        .collect())
}

/// The readable objects of a kind that may not be served; whether it is.
async fn list_checked<K>(
    client: &kube::Client,
    what: &'static str,
    invalid: &mut Vec<InvalidObject>,
) -> Result<(Vec<Arc<K>>, bool), ListError>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
{
    match Api::<Checked<K>>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            let items: Vec<Arc<Checked<K>>> = list.items.into_iter().map(Arc::new).collect();
            let (ok, bad) = Checked::split(&items);
            invalid.extend(bad);
            Ok((ok, true))
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok((Vec::new(), false)),
        Err(source) => Err(ListError { what, source }),
    }
}

impl Cluster {
    /// Lists every kind, one request each.
    pub async fn list(client: &kube::Client) -> Result<Cluster, ListError> {
        let mut invalid = Vec::new();
        let mut warnings = Vec::new();
        let (topologies, served) =
            list_checked::<GpuTopology>(client, "GpuTopology", &mut invalid).await?;
        if !served {
            warnings.push("gputopologies.gputopo.dev is not served (CRD not installed): every node is read as having no topology".to_string());
        }
        let gangs = list_gangs(client, &mut invalid).await?;
        let dra = DraObjects {
            slices: list_checked::<ResourceSlice>(client, "ResourceSlice", &mut invalid)
                .await?
                .0,
            claims: list_checked::<ResourceClaim>(client, "ResourceClaim", &mut invalid)
                .await?
                .0,
            classes: list_checked::<DeviceClass>(client, "DeviceClass", &mut invalid)
                .await?
                .0,
            taint_rules: list_checked::<DeviceTaintRule>(client, "DeviceTaintRule", &mut invalid)
                .await?
                .0,
        };
        warnings.extend(invalid.iter().map(|bad| format!("left out: {bad}")));
        Ok(Cluster {
            pods: list(client, "Pod", trim_pod).await?,
            nodes: list(client, "Node", trim_node).await?,
            namespaces: list(client, "Namespace", trim_meta).await?,
            topologies,
            workloads: WorkloadObjects {
                services: list::<Service>(client, "Service", trim_meta).await?,
                replica_sets: list::<ReplicaSet>(client, "ReplicaSet", trim_meta).await?,
                stateful_sets: list::<StatefulSet>(client, "StatefulSet", trim_meta).await?,
                replication_controllers: list::<ReplicationController>(
                    client,
                    "ReplicationController",
                    trim_meta,
                )
                .await?,
            },
            storage: list_storage(client).await?,
            gangs,
            dra,
            warnings,
        })
    }

    /// The objects as one cycle reads them (no change list: all of them).
    pub fn objects(&self) -> Objects<'_> {
        Objects {
            nodes: &self.nodes,
            topologies: &self.topologies,
            pods: &self.pods,
            namespaces: &self.namespaces,
            workloads: &self.workloads,
            storage: &self.storage,
            gangs: &self.gangs,
            dra: &self.dra,
            changed: None,
        }
    }

    /// The pods as the scheduler reads them: each bound pod with the GPU
    /// record it keeps (the status record before the annotations, which
    /// anyone allowed to edit the pod may change); notes on records not
    /// believed.
    pub fn kept_pods(&self) -> (Vec<Arc<Pod>>, Vec<String>) {
        let mut keeper = RecordKeeper::default();
        let mut notes = Vec::new();
        let pods = self
            .pods
            .iter()
            .map(|p| {
                let observed = keeper.observe(&pod_key(p), p);
                notes.extend(observed.findings.iter().map(|f| f.message()));
                observed.pod
            })
            .collect();
        (pods, notes)
    }

    /// The snapshot the scheduler would build now (nothing assumed), with
    /// its warnings.
    pub fn snapshot(
        &self,
        settings: &Settings,
        now: Timestamp,
    ) -> Result<(Snapshot, Vec<String>), SnapshotError> {
        let (pods, mut notes) = self.kept_pods();
        let objects = Objects {
            pods: &pods,
            ..self.objects()
        };
        let trust = ReadingTrust {
            now,
            max_age: settings.accounting.reported_allocations_max_age,
        };
        let (mut snapshot, warnings) =
            build_snapshot(&objects, &AssumeCache::default(), &settings.core, trust)?;
        notes.extend(warnings);
        if !self.dra.is_empty() {
            notes.extend(self.hold_claimed(&mut snapshot, settings));
        }
        Ok((snapshot, notes))
    }

    /// The GPUs allocated to ResourceClaims held in `snapshot`, as the
    /// cycle holds them (a placeholder `resourceclaim:<name>` per claim and
    /// node, unless a pod holds them already); warnings.
    fn hold_claimed(&self, snapshot: &mut Snapshot, settings: &Settings) -> Vec<String> {
        let inventory = self.dra.inventory(&settings.dra, &self.topologies);
        let mut warnings: Vec<String> =
            inventory.warnings.iter().map(ToString::to_string).collect();
        for (node, claims) in inventory.busy_gpus() {
            for (claim, mask) in claims {
                let (namespace, name) = claim.split_once('/').unwrap_or(("default", claim));
                let placeholder = format!("resourceclaim:{name}");
                if let Err(e) = snapshot.hold_free_gpus(namespace, &placeholder, node, mask) {
                    warnings.push(format!("ResourceClaim {claim}: {e}"));
                }
            }
        }
        warnings
    }

    /// The pod `namespace/name`, as listed.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&Arc<Pod>> {
        self.pods.iter().find(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && p.metadata.name.as_deref() == Some(name)
        })
    }

    /// The `GpuTopology` of node `name`.
    pub fn topology(&self, name: &str) -> Option<&Arc<GpuTopology>> {
        self.topologies
            .iter()
            .find(|t| t.metadata.name.as_deref() == Some(name))
    }
}

async fn list_gangs(
    client: &kube::Client,
    invalid: &mut Vec<InvalidObject>,
) -> Result<GangObjects, ListError> {
    let (pod_groups, pod_groups_served) =
        list_checked::<PodGroup>(client, "PodGroup", invalid).await?;
    let (upstream_groups, upstream_served) =
        list_checked::<UpstreamPodGroup>(client, "PodGroup.scheduling.k8s.io", invalid).await?;
    let (jobsets, jobsets_served) = list_checked::<JobSet>(client, "JobSet", invalid).await?;
    let (leader_worker_sets, lws_served) =
        list_checked::<LeaderWorkerSet>(client, "LeaderWorkerSet", invalid).await?;
    Ok(GangObjects {
        pod_groups,
        upstream_groups,
        jobsets,
        leader_worker_sets,
        served: GangApis {
            pod_groups: pod_groups_served,
            upstream_groups: upstream_served,
            jobsets: jobsets_served,
            leader_worker_sets: lws_served,
        },
    })
}

async fn list_storage(client: &kube::Client) -> Result<StorageObjects, ListError> {
    Ok(StorageObjects {
        watched: true,
        claims: list::<PersistentVolumeClaim>(client, "PersistentVolumeClaim", trim_meta).await?,
        volumes: list::<PersistentVolume>(client, "PersistentVolume", trim_meta).await?,
        classes: list::<StorageClass>(client, "StorageClass", trim_meta).await?,
        csi_nodes: list::<CSINode>(client, "CSINode", trim_meta).await?,
        csi_drivers: list::<CSIDriver>(client, "CSIDriver", trim_meta).await?,
        capacities: list::<CSIStorageCapacity>(client, "CSIStorageCapacity", trim_meta).await?,
    })
}
