//! NodeVolumeLimits for CSI drivers: a node takes the pod only if, per
//! driver, the distinct volumes its pods use plus the pod's new ones stay
//! within the node's CSINode `allocatable.count`. A bound claim's volume is
//! its driver and handle; a claim still waiting counts once under its
//! class's provisioner (upstream's stand-in until it is provisioned).

use crate::pod::PendingPod;
use crate::snapshot::{NodeId, Snapshot, Storage};
use std::collections::{BTreeMap, BTreeSet};

/// `(driver, volume)`: one attachable volume.
type Attachable = (String, String);

/// Whether the pod's volumes fit the node's attach limits.
pub(super) fn within_limits(snapshot: &Snapshot, pod: &PendingPod, index: usize) -> bool {
    let storage = snapshot.storage();
    let node = snapshot.node(NodeId(index as u32));
    let Some(limits) = storage.attach_limits.get(node.name()) else {
        return true;
    };
    if limits.is_empty() {
        return true;
    }
    let new: BTreeSet<Attachable> = pod
        .constraints
        .claims
        .iter()
        .filter_map(|c| attachable(storage, &pod.namespace, &c.claim_name(&pod.name)))
        .filter(|(driver, _)| limits.contains_key(driver))
        .collect();
    if new.is_empty() {
        return true;
    }
    let attached: BTreeSet<Attachable> = node
        .pods()
        .flat_map(|(_, p)| {
            p.constraints
                .claims
                .iter()
                .filter_map(|c| attachable(storage, &p.namespace, &c.claim_name(&p.name)))
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

/// The claim's attachable volume, if it has (or will have) a CSI one.
fn attachable(storage: &Storage, namespace: &str, claim: &str) -> Option<Attachable> {
    let c = storage.claim(namespace, claim)?;
    match &c.volume_name {
        Some(v) => storage.volumes.get(v)?.csi.clone(),
        None => {
            let class = storage.classes.get(&c.class)?;
            Some((class.provisioner.clone(), format!("{namespace}/{claim}")))
        }
    }
}
