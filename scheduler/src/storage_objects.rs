//! PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes,
//! CSIDrivers and CSIStorageCapacities, as the secondary scheduler watches
//! them: read into scheduler-core's `Storage` each cycle, for the volume
//! plugins. The extender watches none (and its
//! decisions judge no volume: kube-scheduler does).

use gputopo_scheduler_core::snapshot::{Storage, StorageError, storage};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use kube::runtime::reflector::Store;
use std::sync::Arc;

/// The watched storage objects; `watched` false where not watched.
#[derive(Clone, Debug, Default)]
pub struct StorageObjects {
    pub watched: bool,
    pub claims: Vec<Arc<PersistentVolumeClaim>>,
    pub volumes: Vec<Arc<PersistentVolume>>,
    pub classes: Vec<Arc<StorageClass>>,
    pub csi_nodes: Vec<Arc<CSINode>>,
    pub csi_drivers: Vec<Arc<CSIDriver>>,
    pub capacities: Vec<Arc<CSIStorageCapacity>>,
}

/// The storage kinds' stores (the secondary scheduler's watches).
pub(crate) struct StorageStores {
    pub(crate) claims: Store<PersistentVolumeClaim>,
    pub(crate) volumes: Store<PersistentVolume>,
    pub(crate) classes: Store<StorageClass>,
    pub(crate) csi_nodes: Store<CSINode>,
    pub(crate) csi_drivers: Store<CSIDriver>,
    pub(crate) capacities: Store<CSIStorageCapacity>,
}

impl StorageStores {
    /// What the stores hold now.
    pub(crate) fn objects(&self) -> StorageObjects {
        StorageObjects {
            watched: true,
            claims: self.claims.state(),
            volumes: self.volumes.state(),
            classes: self.classes.state(),
            csi_nodes: self.csi_nodes.state(),
            csi_drivers: self.csi_drivers.state(),
            capacities: self.capacities.state(),
        }
    }
}

/// Not watched: for the extender and tests.
pub static NO_STORAGE: StorageObjects = StorageObjects {
    watched: false,
    claims: Vec::new(),
    volumes: Vec::new(),
    classes: Vec::new(),
    csi_nodes: Vec::new(),
    csi_drivers: Vec::new(),
    capacities: Vec::new(),
};

impl StorageObjects {
    /// Whether `other` holds the very same objects (the stores hand back
    /// the same `Arc` for an object that did not change).
    pub fn same_objects(&self, other: &StorageObjects) -> bool {
        self.watched == other.watched
            && same_arcs(&self.claims, &other.claims)
            && same_arcs(&self.volumes, &other.volumes)
            && same_arcs(&self.classes, &other.classes)
            && same_arcs(&self.csi_nodes, &other.csi_nodes)
            && same_arcs(&self.csi_drivers, &other.csi_drivers)
            && same_arcs(&self.capacities, &other.capacities)
    }

    /// What the volume plugins read, and the objects that could not be read.
    pub fn storage(&self) -> (Storage, Vec<StorageError>) {
        if !self.watched {
            return (Storage::default(), Vec::new());
        }
        let (mut read, mut errors) = storage(
            self.claims.iter().map(AsRef::as_ref),
            self.volumes.iter().map(AsRef::as_ref),
            self.classes.iter().map(AsRef::as_ref),
            self.csi_nodes.iter().map(AsRef::as_ref),
        );
        errors.extend(read.read_capacity(
            self.csi_drivers.iter().map(AsRef::as_ref),
            self.capacities.iter().map(AsRef::as_ref),
        ));
        (read, errors)
    }
}

/// Whether two lists hold the same objects, pointer for pointer.
pub fn same_arcs<T>(a: &[Arc<T>], b: &[Arc<T>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
}

/// The warning that names an object left out.
pub fn storage_warning(e: &StorageError) -> String {
    format!("{e}; left out: pods mounting it wait")
}
