//! NodeVolumeLimits for CSI drivers: a node takes the pod only if, per
//! driver, the distinct volumes its pods use plus the pod's new ones stay
//! within the node's CSINode `allocatable.count` (or, where the CSINode
//! gives none, the Node's legacy `attachable-volumes-csi-<driver>`
//! allocatable, as upstream still reads it). A bound claim's volume is
//! its driver and handle; a claim still waiting counts once under its
//! class's provisioner (upstream's stand-in until it is provisioned). An
//! in-tree volume (inline, or a PersistentVolume's source) counts under the
//! CSI driver CSI migration gives it, on nodes whose CSINode lists its
//! plugin as migrated, as upstream's CSILimits counts it.

use crate::pod::PendingPod;
use crate::pod_constraints::{MigratedVolume, PodConstraints};
use crate::snapshot::{NodeId, NodeRef, Snapshot, Storage};
use std::collections::{BTreeMap, BTreeSet};

/// `(driver, volume)`: one attachable volume.
type Attachable = (String, String);

/// Whether the pod's volumes fit the node's attach limits.
pub(super) fn within_limits(snapshot: &Snapshot, pod: &PendingPod, index: usize) -> bool {
    let storage = snapshot.storage();
    let node = snapshot.node(NodeId(index as u32));
    let limits = node_limits(storage, &node);
    if limits.is_empty() {
        return true;
    }
    let here = Here {
        storage,
        migrated: storage.migrated_plugins.get(node.name()),
    };
    let new: BTreeSet<Attachable> = here
        .of_pod(&pod.namespace, &pod.name, &pod.constraints)
        .filter(|(driver, _)| limits.contains_key(driver))
        .collect();
    if new.is_empty() {
        return true;
    }
    let attached: BTreeSet<Attachable> = node
        .pods()
        .flat_map(|(_, p)| {
            here.of_pod(&p.namespace, &p.name, &p.constraints)
                .collect::<Vec<_>>()
        })
        .collect();
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    for (driver, _) in attached.union(&new) {
        *counts.entry(driver.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .all(|(driver, n)| limits.get(*driver).is_none_or(|limit| n <= limit))
}

/// Per CSI driver, how many volumes the node may have attached: its
/// CSINode's `allocatable.count`, over upstream's legacy fallback, the
/// Node's `attachable-volumes-csi-<driver>` allocatable.
fn node_limits(storage: &Storage, node: &NodeRef<'_>) -> BTreeMap<String, u32> {
    let mut limits: BTreeMap<String, u32> = node
        .allocatable()
        .extended
        .iter()
        .filter_map(|(name, count)| {
            let driver = name.strip_prefix(LEGACY_LIMIT_PREFIX)?;
            Some((
                driver.to_string(),
                u32::try_from(*count).unwrap_or(u32::MAX),
            ))
        })
        .collect();
    if let Some(csi) = storage.attach_limits.get(node.name()) {
        limits.extend(csi.iter().map(|(d, n)| (d.clone(), *n)));
    }
    limits
}

/// The Node allocatable key upstream still reads a driver's limit from.
const LEGACY_LIMIT_PREFIX: &str = "attachable-volumes-csi-";

/// What one node makes of pods' volumes: the cluster's storage and the
/// in-tree plugins the node migrated to CSI.
struct Here<'a> {
    storage: &'a Storage,
    migrated: Option<&'a BTreeSet<String>>,
}

impl Here<'_> {
    /// A pod's attachable volumes: its claims' and its inline in-tree
    /// volumes the node migrated.
    fn of_pod<'p>(
        &'p self,
        namespace: &'p str,
        name: &'p str,
        constraints: &'p PodConstraints,
    ) -> impl Iterator<Item = Attachable> + 'p {
        let claims = constraints
            .claims
            .iter()
            .filter_map(move |c| self.of_claim(namespace, &c.claim_name(name)));
        let inline = constraints
            .migrated
            .iter()
            .filter_map(|m| self.of_migrated(m));
        claims.chain(inline)
    }

    /// An in-tree volume, under its CSI driver where the node migrated its
    /// plugin; nothing to count elsewhere.
    fn of_migrated(&self, m: &MigratedVolume) -> Option<Attachable> {
        self.migrated
            .is_some_and(|plugins| plugins.contains(m.plugin))
            .then(|| (m.driver.to_string(), m.handle.clone()))
    }

    /// The claim's attachable volume, if it has (or will have) a CSI one.
    fn of_claim(&self, namespace: &str, claim: &str) -> Option<Attachable> {
        let c = self.storage.claim(namespace, claim)?;
        match &c.volume_name {
            Some(v) => {
                let volume = self.storage.volumes.get(v)?;
                volume
                    .csi
                    .clone()
                    .or_else(|| self.of_migrated(volume.migrated.as_ref()?))
            }
            None => {
                let class = self.storage.classes.get(&c.class)?;
                let provisioner = &class.provisioner;
                // An in-tree provisioner stands for its CSI driver where
                // the node migrated it, and counts nowhere else.
                let driver = match MigratedVolume::driver_of(provisioner) {
                    Some(driver) => {
                        self.migrated?.contains(provisioner).then_some(driver)?;
                        driver.to_string()
                    }
                    None => provisioner.clone(),
                };
                Some((driver, format!("{namespace}/{claim}")))
            }
        }
    }
}
