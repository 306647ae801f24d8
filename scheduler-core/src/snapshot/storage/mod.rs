//! The cluster's storage as the volume plugins read it: PersistentVolume
//! Claims, PersistentVolumes, StorageClasses and CSINodes, each reduced to what
//! binding and placement need (`from_k8s.rs` reads the API objects), and
//! the CSI drivers' published capacity (`capacity.rs`).
//! A snapshot holds one behind an `Arc`; the scheduler replaces it whole
//! when a watched object changes.

mod capacity;
mod from_k8s;

pub use capacity::{CapacityEntry, StorageCapacity};
pub use from_k8s::{SELECTED_NODE, StorageError, storage};

use crate::pod_constraints::{LabelSelector, MigratedVolume};
use crate::selector::NodeAffinity;
use std::collections::{BTreeMap, BTreeSet};

/// The provisioner of classes whose volumes are made by hand (local PVs):
/// a claim of such a class can only bind to an existing volume.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// Claims by namespace and name, volumes and classes by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Storage {
    /// Whether these are the cluster's (the secondary scheduler watches
    /// them). When not (the default: the extender, which leaves volumes
    /// to kube-scheduler), decisions do not judge volumes at all.
    pub watched: bool,
    pub claims: BTreeMap<(String, String), Claim>,
    pub volumes: BTreeMap<String, Volume>,
    pub classes: BTreeMap<String, StorageClass>,
    /// Per node, per CSI driver, how many of its volumes the node can have
    /// attached (CSINode `allocatable.count`); a driver absent has no limit.
    pub attach_limits: BTreeMap<String, BTreeMap<String, u32>>,
    /// Per node, the in-tree plugins its CSINode lists as migrated to CSI
    /// (their volumes count against the CSI driver's limit there).
    pub migrated_plugins: BTreeMap<String, BTreeSet<String>>,
    /// What CSI drivers publish of their free space, for claims to provision.
    pub capacity: StorageCapacity,
}

/// `spec.accessModes` entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AccessMode {
    ReadWriteOnce,
    ReadOnlyMany,
    ReadWriteMany,
    ReadWriteOncePod,
}

/// One PersistentVolumeClaim.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Claim {
    pub uid: String,
    /// `spec.volumeName`: the volume it is bound (or pre-bound) to.
    pub volume_name: Option<String>,
    /// The class (`spec.storageClassName`, or the beta annotation); `""`
    /// asks a volume of no class.
    pub class: String,
    pub access_modes: BTreeSet<AccessMode>,
    /// `spec.resources.requests.storage`, in bytes.
    pub request_bytes: i64,
    /// `spec.selector` on volumes' labels; `None` selects every volume.
    pub selector: Option<LabelSelector>,
    /// `spec.volumeMode: Block`.
    pub block: bool,
    /// `volume.kubernetes.io/selected-node`: a provisioner is making its
    /// volume for that node.
    pub selected_node: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

/// One PersistentVolume.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Volume {
    pub labels: BTreeMap<String, String>,
    /// `spec.nodeAffinity.required`: the nodes that can reach it.
    pub node_affinity: Option<NodeAffinity>,
    /// `spec.claimRef` as namespace and name.
    pub claim_ref: Option<(String, String)>,
    /// `spec.storageClassName` (or the beta annotation); `""` for none.
    pub class: String,
    /// `spec.capacity.storage`, in bytes.
    pub capacity_bytes: i64,
    pub access_modes: BTreeSet<AccessMode>,
    pub block: bool,
    /// `spec.csi`: the driver and the volume's handle.
    pub csi: Option<(String, String)>,
    /// An in-tree source CSI migration moves to a driver.
    pub migrated: Option<MigratedVolume>,
    /// `status.phase` is `Available`.
    pub available: bool,
    pub deleting: bool,
}

/// One StorageClass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StorageClass {
    pub provisioner: String,
    /// `volumeBindingMode: WaitForFirstConsumer`: claims bind once a pod
    /// using them has a node.
    pub wait_for_first_consumer: bool,
    /// `allowedTopologies`, ORed terms of ANDed `key In values`; empty
    /// allows every node.
    pub allowed_topologies: Vec<Vec<(String, Vec<String>)>>,
}

impl Storage {
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Claim> {
        self.claims.get(&(namespace.to_string(), name.to_string()))
    }
}

/// What the scheduler writes for the pod's waiting claims once it has a
/// node, before binding the pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumePlan {
    /// `(claim, volume)`: the volume's `claimRef` is set to the claim.
    pub binds: Vec<(String, String)>,
    /// Claims to annotate with `volume.kubernetes.io/selected-node`.
    pub provisions: Vec<String>,
}

impl VolumePlan {
    pub fn is_empty(&self) -> bool {
        self.binds.is_empty() && self.provisions.is_empty()
    }
}

impl super::Snapshot {
    /// Takes `plan`'s writes for a pod in `namespace` placed on `node` as
    /// done, until the watched objects say so: each chosen volume is
    /// claimed (no later decision picks it again) and each claim to
    /// provision is tied to the node.
    pub fn assume_volumes(&mut self, namespace: &str, plan: &VolumePlan, node: &str) {
        if plan.is_empty() {
            return;
        }
        let storage = std::sync::Arc::make_mut(&mut self.storage);
        for (claim, volume) in &plan.binds {
            if let Some(v) = storage.volumes.get_mut(volume) {
                v.claim_ref = Some((namespace.to_string(), claim.clone()));
                v.available = false;
            }
            if let Some(c) = storage
                .claims
                .get_mut(&(namespace.to_string(), claim.clone()))
            {
                c.volume_name = Some(volume.clone());
            }
        }
        for claim in &plan.provisions {
            if let Some(c) = storage
                .claims
                .get_mut(&(namespace.to_string(), claim.clone()))
            {
                c.selected_node = Some(node.to_string());
            }
        }
    }
}
