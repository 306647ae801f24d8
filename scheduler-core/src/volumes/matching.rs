//! Finding a volume for a waiting claim on one node, as upstream's
//! `FindMatchingVolume` does: a volume pre-bound to the claim wins if it is
//! big enough and reaches the node; otherwise the smallest available,
//! unclaimed volume of the claim's class, mode and access modes, with the
//! claim's selector on its labels, big enough and reachable from the node.
//! And whether a class may provision for the node.

use crate::snapshot::{Claim, NO_PROVISIONER, NodeRef, Storage, StorageClass, Volume};

/// The name of the volume the claim `namespace/name` would bind to on
/// `node`, skipping `taken` (chosen for the pod's other claims).
pub(super) fn find_volume<'s>(
    storage: &'s Storage,
    node: &NodeRef<'_>,
    (namespace, name): (&str, &str),
    claim: &Claim,
    taken: &[&str],
) -> Option<&'s str> {
    let reaches = |v: &Volume| {
        v.node_affinity
            .as_ref()
            .is_none_or(|a| node.matches_affinity(a))
    };
    let mut best: Option<(&str, &Volume)> = None;
    for (volume_name, v) in &storage.volumes {
        if v.deleting || v.block != claim.block || taken.contains(&volume_name.as_str()) {
            continue;
        }
        if v.claim_ref
            .as_ref()
            .is_some_and(|(ns, n)| ns == namespace && n == name)
        {
            // Pre-bound to this claim.
            if v.capacity_bytes < claim.request_bytes {
                continue;
            }
            return reaches(v).then_some(volume_name.as_str());
        }
        let fits = v.available
            && v.claim_ref.is_none()
            && claim.selector.as_ref().is_none_or(|s| s.matches(&v.labels))
            && v.class == claim.class
            && reaches(v)
            && claim.access_modes.is_subset(&v.access_modes)
            && v.capacity_bytes >= claim.request_bytes;
        if fits && best.is_none_or(|(_, b)| b.capacity_bytes > v.capacity_bytes) {
            best = Some((volume_name, v));
        }
    }
    best.map(|(n, _)| n)
}

/// Whether the class can provision a volume for `node`: it has a
/// provisioner, and its `allowedTopologies` (if any) match the node.
pub(super) fn class_admits(class: &StorageClass, node: &NodeRef<'_>) -> bool {
    class.provisioner != NO_PROVISIONER
        && (class.allowed_topologies.is_empty()
            || class.allowed_topologies.iter().any(|term| {
                term.iter().all(|(key, values)| {
                    node.label(key)
                        .is_some_and(|v| values.iter().any(|x| x == v))
                })
            }))
}
