//! CSI storage capacity, as kube-scheduler's VolumeBinding reads it for a
//! claim to provision: where a CSIDriver says `storageCapacity: true`, a
//! node can take a new volume of a class only if some CSIStorageCapacity
//! of that class reaches the node (`nodeTopology`) and holds the claim's
//! size (`maximumVolumeSize` when set, else `capacity`). Drivers that
//! publish nothing, and claims without a size, are not checked.

use super::StorageError;
use crate::pod_constraints::{LabelSelector, selector_matches};
use crate::resources::parse_amount;
use gputopo_api::k8s_openapi::api::storage::v1::{CSIDriver, CSIStorageCapacity};
use std::collections::{BTreeMap, BTreeSet};

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
    /// Whether a new volume of `class` (made by `provisioner`) of
    /// `request_bytes` fits on a node whose labels `labels` gives (read
    /// only when the driver publishes capacity).
    pub fn enough(
        &self,
        provisioner: &str,
        class: &str,
        request_bytes: i64,
        labels: impl FnOnce() -> BTreeMap<String, String>,
    ) -> bool {
        if request_bytes == 0 || !self.drivers.contains(provisioner) {
            return true;
        }
        let labels = labels();
        self.entries.iter().any(|e| {
            e.class == class
                && e.limit_bytes.is_some_and(|l| l >= request_bytes)
                && selector_matches(e.node_topology.as_ref(), &labels)
        })
    }
}

/// The capacity the volume plugins read; every object that cannot be read
/// is returned as an error beside what could be.
pub fn storage_capacity<'a>(
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
    let limit_bytes = quantity
        .map(|q| {
            parse_amount(field, "storage", &q.0)
                .map_err(|e| err(field, format!("{:?}: {}", e.value, e.reason)))
        })
        .transpose()?;
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
