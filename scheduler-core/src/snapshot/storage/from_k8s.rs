//! Reading claims, volumes and classes from the API objects. A bad
//! quantity or selector is an error naming the object and the field, not a
//! silent default: a claim read wrongly would bind the wrong volume.

use super::{AccessMode, Claim, Storage, StorageClass, Volume};
use crate::pod_constraints::{LabelSelector, MIGRATED_PLUGINS, MigratedVolume};
use crate::resources::parse_amount;
use crate::selector::NodeAffinity;
use gputopo_api::k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use gputopo_api::k8s_openapi::api::storage::v1::{CSINode, StorageClass as K8sStorageClass};
use gputopo_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::{BTreeMap, BTreeSet};

/// The class annotation older objects carry instead of the field.
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// Set on a claim by kube-scheduler (and gputopo) for its provisioner.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// An object that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {name}: {field}: {detail}")]
pub struct StorageError {
    pub kind: &'static str,
    /// `namespace/name` for claims.
    pub name: String,
    pub field: String,
    pub detail: String,
}

/// The storage the volume plugins read (`watched`); every object that
/// cannot be read is returned as an error beside what could be.
pub fn storage<'a>(
    claims: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
    classes: impl IntoIterator<Item = &'a K8sStorageClass>,
    csi_nodes: impl IntoIterator<Item = &'a CSINode>,
) -> (Storage, Vec<StorageError>) {
    let mut out = Storage {
        watched: true,
        ..Storage::default()
    };
    let mut errors = Vec::new();
    for c in claims {
        let key = (
            c.metadata.namespace.clone().unwrap_or_default(),
            c.metadata.name.clone().unwrap_or_default(),
        );
        match claim(c, &format!("{}/{}", key.0, key.1)) {
            Ok(claim) => {
                out.claims.insert(key, claim);
            }
            Err(e) => errors.push(e),
        }
    }
    for v in volumes {
        let name = v.metadata.name.clone().unwrap_or_default();
        match volume(v, &name) {
            Ok(volume) => {
                out.volumes.insert(name, volume);
            }
            Err(e) => errors.push(e),
        }
    }
    for c in classes {
        out.classes.insert(
            c.metadata.name.clone().unwrap_or_default(),
            StorageClass {
                provisioner: c.provisioner.clone(),
                wait_for_first_consumer: c.volume_binding_mode.as_deref()
                    == Some("WaitForFirstConsumer"),
                allowed_topologies: c
                    .allowed_topologies
                    .iter()
                    .flatten()
                    .map(|t| {
                        t.match_label_expressions
                            .iter()
                            .flatten()
                            .map(|e| (e.key.clone(), e.values.clone()))
                            .collect()
                    })
                    .collect(),
            },
        );
    }
    for n in csi_nodes {
        let limits = n
            .spec
            .drivers
            .iter()
            .filter_map(|d| {
                let count = d.allocatable.as_ref()?.count?;
                Some((d.name.clone(), u32::try_from(count).unwrap_or(0)))
            })
            .collect();
        let node = n.metadata.name.clone().unwrap_or_default();
        let migrated: BTreeSet<String> = n
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MIGRATED_PLUGINS))
            .into_iter()
            .flat_map(|list| list.split(','))
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        if !migrated.is_empty() {
            out.migrated_plugins.insert(node.clone(), migrated);
        }
        out.attach_limits.insert(node, limits);
    }
    (out, errors)
}

fn claim(c: &PersistentVolumeClaim, name: &str) -> Result<Claim, StorageError> {
    let err = |field: &str, detail: String| StorageError {
        kind: "PersistentVolumeClaim",
        name: name.to_string(),
        field: field.to_string(),
        detail,
    };
    let spec = c.spec.clone().unwrap_or_default();
    let annotations = c.metadata.annotations.clone().unwrap_or_default();
    let request_bytes = match spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
    {
        Some(q) => bytes(q, "spec.resources.requests.storage", &err)?,
        None => 0,
    };
    let selector = spec
        .selector
        .as_ref()
        .map(|s| LabelSelector::from_k8s(s, "spec.selector"))
        .transpose()
        .map_err(|e| err(&e.field, e.detail))?;
    Ok(Claim {
        uid: c.metadata.uid.clone().unwrap_or_default(),
        volume_name: spec.volume_name.filter(|v| !v.is_empty()),
        class: class(&annotations, spec.storage_class_name.as_deref()),
        access_modes: access_modes(spec.access_modes.as_deref(), &|d| {
            err("spec.accessModes", d)
        })?,
        request_bytes,
        selector,
        block: spec.volume_mode.as_deref() == Some("Block"),
        selected_node: annotations.get(SELECTED_NODE).cloned(),
        deleting: c.metadata.deletion_timestamp.is_some(),
    })
}

fn volume(v: &PersistentVolume, name: &str) -> Result<Volume, StorageError> {
    let err = |field: &str, detail: String| StorageError {
        kind: "PersistentVolume",
        name: name.to_string(),
        field: field.to_string(),
        detail,
    };
    let spec = v.spec.clone().unwrap_or_default();
    let annotations = v.metadata.annotations.clone().unwrap_or_default();
    let capacity_bytes = match spec.capacity.as_ref().and_then(|c| c.get("storage")) {
        Some(q) => bytes(q, "spec.capacity.storage", &err)?,
        None => 0,
    };
    let node_affinity = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .map(NodeAffinity::from_k8s)
        .transpose()
        .map_err(|e| err("spec.nodeAffinity.required", e.to_string()))?;
    Ok(Volume {
        labels: v.metadata.labels.clone().unwrap_or_default(),
        node_affinity,
        claim_ref: spec.claim_ref.as_ref().map(|r| {
            (
                r.namespace.clone().unwrap_or_default(),
                r.name.clone().unwrap_or_default(),
            )
        }),
        class: class(&annotations, spec.storage_class_name.as_deref()),
        capacity_bytes,
        access_modes: access_modes(spec.access_modes.as_deref(), &|d| {
            err("spec.accessModes", d)
        })?,
        block: spec.volume_mode.as_deref() == Some("Block"),
        csi: spec
            .csi
            .as_ref()
            .map(|c| (c.driver.clone(), c.volume_handle.clone())),
        migrated: MigratedVolume::persistent(&spec),
        available: v.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available"),
        deleting: v.metadata.deletion_timestamp.is_some(),
    })
}

/// The beta annotation wins over the field, as upstream's helpers read it.
fn class(annotations: &BTreeMap<String, String>, field: Option<&str>) -> String {
    annotations
        .get(BETA_CLASS)
        .map(String::as_str)
        .or(field)
        .unwrap_or_default()
        .to_string()
}

fn access_modes(
    modes: Option<&[String]>,
    err: &dyn Fn(String) -> StorageError,
) -> Result<BTreeSet<AccessMode>, StorageError> {
    modes
        .unwrap_or_default()
        .iter()
        .map(|m| match m.as_str() {
            "ReadWriteOnce" => Ok(AccessMode::ReadWriteOnce),
            "ReadOnlyMany" => Ok(AccessMode::ReadOnlyMany),
            "ReadWriteMany" => Ok(AccessMode::ReadWriteMany),
            "ReadWriteOncePod" => Ok(AccessMode::ReadWriteOncePod),
            other => Err(err(format!(
                "{other:?} is not an access mode; accepted: ReadWriteOnce | ReadOnlyMany | ReadWriteMany | ReadWriteOncePod"
            ))),
        })
        .collect()
}

pub(super) fn bytes(
    q: &Quantity,
    field: &str,
    err: &dyn Fn(&str, String) -> StorageError,
) -> Result<i64, StorageError> {
    parse_amount(field, "storage", &q.0)
        .map_err(|e| err(field, format!("{:?}: {}", e.value, e.reason)))
}
