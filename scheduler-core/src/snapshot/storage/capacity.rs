//! CSI storage capacity, as kube-scheduler's VolumeBinding reads it for a
//! claim to provision: where a CSIDriver says `storageCapacity: true`, a
//! node can take a new volume of a class only if some CSIStorageCapacity
//! of that class reaches the node (`nodeTopology`) and holds the claim's
//! size (`maximumVolumeSize` when set, else `capacity`). Drivers that
//! publish nothing, and claims without a size, are not checked.

use super::from_k8s::bytes;
use super::{Storage, StorageError};
use crate::pod_constraints::LabelSelector;
use gputopo_api::k8s_openapi::api::storage::v1::{CSIDriver, CSIStorageCapacity};
use std::collections::BTreeSet;

/// The CSI drivers that publish capacity, and what they publish.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StorageCapacity {
    /// CSIDriver names with `spec.storageCapacity: true`.
    pub drivers: BTreeSet<String>,
    pub entries: Vec<CapacityEntry>,
}

/// One CSIStorageCapacity.
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityEntry {
    pub class: String,
    /// `maximumVolumeSize`, else `capacity`, in bytes; `None`: neither set
    /// (holds nothing).
    pub limit_bytes: Option<i64>,
    /// `nodeTopology`; absent reaches no node.
    pub node_topology: Option<LabelSelector>,
}

impl StorageCapacity {
    /// The capacities that could hold a new volume of `class` of
    /// `request_bytes` made by `provisioner`, node aside; `None` when the
    /// claim is not checked (its driver publishes nothing, or it has no size).
    pub fn rooms(
        &self,
        provisioner: &str,
        class: &str,
        request_bytes: i64,
    ) -> Option<Vec<&CapacityEntry>> {
        (request_bytes != 0 && self.drivers.contains(provisioner)).then(|| {
            self.entries
                .iter()
                .filter(|e| e.class == class && e.limit_bytes.is_some_and(|l| l >= request_bytes))
                .collect()
        })
    }
}

impl CapacityEntry {
    /// Whether the capacity is a node's whose labels `label` reads.
    pub fn reaches<'l>(&self, label: impl Fn(&str) -> Option<&'l str>) -> bool {
        self.node_topology
            .as_ref()
            .is_some_and(|s| s.matches_by(label))
    }
}

impl Storage {
    /// Reads the drivers' published capacity into `self`; the objects that
    /// cannot be read are returned (and left out).
    pub fn read_capacity<'a>(
        &mut self,
        drivers: impl IntoIterator<Item = &'a CSIDriver>,
        capacities: impl IntoIterator<Item = &'a CSIStorageCapacity>,
    ) -> Vec<StorageError> {
        let (capacity, errors) = storage_capacity(drivers, capacities);
        self.capacity = capacity;
        errors
    }
}

/// The capacity the volume plugins read; every object that cannot be read
/// is returned as an error beside what could be.
fn storage_capacity<'a>(
    drivers: impl IntoIterator<Item = &'a CSIDriver>,
    capacities: impl IntoIterator<Item = &'a CSIStorageCapacity>,
) -> (StorageCapacity, Vec<StorageError>) {
    let mut out = StorageCapacity {
        drivers: drivers
            .into_iter()
            .filter(|d| d.spec.storage_capacity == Some(true))
            .filter_map(|d| d.metadata.name.clone())
            .collect(),
        entries: Vec::new(),
    };
    let mut errors = Vec::new();
    for c in capacities {
        match entry(c) {
            Ok(e) => out.entries.push(e),
            Err(e) => errors.push(e),
        }
    }
    (out, errors)
}

fn entry(c: &CSIStorageCapacity) -> Result<CapacityEntry, StorageError> {
    let name = format!(
        "{}/{}",
        c.metadata.namespace.as_deref().unwrap_or_default(),
        c.metadata.name.as_deref().unwrap_or_default()
    );
    let err = |field: &str, detail: String| StorageError {
        kind: "CSIStorageCapacity",
        name: name.clone(),
        field: field.to_string(),
        detail,
    };
    let (field, quantity) = match (&c.maximum_volume_size, &c.capacity) {
        (Some(q), _) => ("maximumVolumeSize", Some(q)),
        (None, q) => ("capacity", q.as_ref()),
    };
    let limit_bytes = quantity.map(|q| bytes(q, field, &err)).transpose()?;
    let node_topology = c
        .node_topology
        .as_ref()
        .map(|s| LabelSelector::from_k8s(s, "nodeTopology"))
        .transpose()
        .map_err(|e| err(&e.field, e.detail))?;
    Ok(CapacityEntry {
        class: c.storage_class_name.clone(),
        limit_bytes,
        node_topology,
    })
}
