//! Finding a volume for a waiting claim, as upstream's `FindMatchingVolume`
//! does: a volume pre-bound to the claim wins if it is big enough and
//! reaches the node; otherwise the smallest available, unclaimed volume of
//! the claim's class, mode and access modes, with the claim's selector on
//! its labels, big enough and reachable from the node. What does not depend
//! on the node is sorted out once per decision ([`Candidates`]); a node
//! only checks reach. And whether a class may provision for a node.

use crate::snapshot::{Claim, NO_PROVISIONER, NodeRef, Storage, StorageClass, Volume};

/// One waiting claim's volumes, node aside.
pub(super) struct Candidates<'s> {
    /// Volumes pre-bound to the claim and big enough, in name order.
    prebound: Vec<(&'s str, &'s Volume)>,
    /// Available, unclaimed volumes that fit the claim, smallest first
    /// (ties in name order, as upstream keeps the first smallest).
    fitting: Vec<(&'s str, &'s Volume)>,
}

impl<'s> Candidates<'s> {
    /// The volumes of `storage` the claim `namespace/name` could bind to.
    pub(super) fn of(
        storage: &'s Storage,
        (namespace, name): (&str, &str),
        claim: &Claim,
    ) -> Candidates<'s> {
        let mut prebound = Vec::new();
        let mut fitting = Vec::new();
        for (volume_name, v) in &storage.volumes {
            if v.deleting || v.block != claim.block || v.capacity_bytes < claim.request_bytes {
                continue;
            }
            if v.claim_ref
                .as_ref()
                .is_some_and(|(ns, n)| ns == namespace && n == name)
            {
                prebound.push((volume_name.as_str(), v));
            } else if v.available
                && v.claim_ref.is_none()
                && v.class == claim.class
                && claim.selector.as_ref().is_none_or(|s| s.matches(&v.labels))
                && claim.access_modes.is_subset(&v.access_modes)
            {
                fitting.push((volume_name.as_str(), v));
            }
        }
        fitting.sort_by_key(|(_, v)| v.capacity_bytes);
        Candidates { prebound, fitting }
    }

    /// The volume the claim binds to on `node`, skipping `taken` (chosen
    /// for the pod's other claims). A pre-bound volume that does not reach
    /// the node leaves the claim without one there.
    pub(super) fn on(&self, node: &NodeRef<'_>, taken: &[&str]) -> Option<&'s str> {
        let reaches = |v: &Volume| {
            v.node_affinity
                .as_ref()
                .is_none_or(|a| node.matches_affinity(a))
        };
        if let Some((name, v)) = self.prebound.iter().find(|(n, _)| !taken.contains(n)) {
            return reaches(v).then_some(*name);
        }
        self.fitting
            .iter()
            .find(|(n, v)| !taken.contains(n) && reaches(v))
            .map(|(n, _)| *n)
    }
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
