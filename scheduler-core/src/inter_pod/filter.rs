//! The InterPodAffinity filter, as kube-scheduler's: counts per topology
//! pair, made once per decision (its PreFilter), then three checks per node
//! in upstream's order: the pod's required affinity, its required
//! anti-affinity, and the bound pods' required anti-affinity against it.

use super::AffinityRefusal;
use super::terms::{PairTable, pair, selects};
use crate::pod::PendingPod;
use crate::pod_constraints::{AffinityTerm, selector_matches};
use crate::snapshot::intern::Sym;
use crate::snapshot::{BoundPod, Snapshot};

/// The pod's required terms and the bound pods' required anti-affinity,
/// counted per topology pair.
pub(crate) struct AffinityFilter {
    /// Each required affinity term's key; `None`: no node has it.
    affinity_keys: Vec<Option<Sym>>,
    anti_keys: Vec<Option<Sym>>,
    /// Bound pods matching *all* the pod's affinity terms, per pair of
    /// each term's key on their node (upstream sums terms sharing a pair).
    affinity: PairTable<u32>,
    /// Bound pods matching each anti-affinity term, per pair.
    anti: PairTable<u32>,
    /// Bound pods whose required anti-affinity selects this pod, per pair.
    existing_anti: PairTable<u32>,
    /// The pod matches all its own affinity terms: the first pod of a
    /// group affine to itself may go where the terms' keys exist.
    self_affine: bool,
}

impl AffinityFilter {
    /// `None` when nothing can refuse a node: the pod has no required
    /// terms and no bound pod's required anti-affinity selects it.
    pub(crate) fn new(snapshot: &Snapshot, pod: &PendingPod) -> Option<AffinityFilter> {
        let rules = &pod.constraints.affinity;
        let existing_anti = existing_anti(snapshot, pod);
        if rules.required.is_empty() && rules.required_anti.is_empty() && existing_anti.is_empty() {
            return None;
        }
        let keys = |terms: &[AffinityTerm]| -> Vec<Option<Sym>> {
            terms
                .iter()
                .map(|t| snapshot.strings.get(&t.topology_key))
                .collect()
        };
        let mut filter = AffinityFilter {
            affinity_keys: keys(&rules.required),
            anti_keys: keys(&rules.required_anti),
            affinity: PairTable::new(snapshot),
            anti: PairTable::new(snapshot),
            existing_anti,
            self_affine: !rules.required.is_empty()
                && rules
                    .required
                    .iter()
                    .all(|t| selects(t, snapshot, &pod.namespace, &pod.constraints.labels)),
        };
        if !rules.required.is_empty() || !rules.required_anti.is_empty() {
            // A pod without labels matches only selectors that match no
            // labels (`NotIn`, `DoesNotExist`); most bound pods have none.
            let unlabelled_match = rules
                .required
                .iter()
                .chain(&rules.required_anti)
                .any(|t| selector_matches(t.selector.as_ref(), &Default::default()));
            let candidates = snapshot.selector_candidates(
                rules
                    .required
                    .iter()
                    .chain(&rules.required_anti)
                    .map(|t| t.selector.as_ref()),
            );
            for (_, bound) in snapshot.pods_or_all(candidates.as_deref()) {
                if unlabelled_match || !bound.constraints.labels.is_empty() {
                    filter.count_incoming(snapshot, pod, bound);
                }
            }
        }
        Some(filter)
    }

    /// One bound pod against the pod's required terms.
    fn count_incoming(&mut self, snapshot: &Snapshot, pod: &PendingPod, bound: &BoundPod) {
        let rules = &pod.constraints.affinity;
        let node = bound.node.0 as usize;
        let labels = &bound.constraints.labels;
        if !rules.required.is_empty()
            && rules
                .required
                .iter()
                .all(|t| selects(t, snapshot, &bound.namespace, labels))
        {
            for &key in &self.affinity_keys {
                if let Some(p) = pair(snapshot, node, key) {
                    self.affinity.add(p, 1);
                }
            }
        }
        for (t, &key) in rules.required_anti.iter().zip(&self.anti_keys) {
            if selects(t, snapshot, &bound.namespace, labels)
                && let Some(p) = pair(snapshot, node, key)
            {
                self.anti.add(p, 1);
            }
        }
    }

    /// Whether the node at `index` may take the pod.
    pub(crate) fn check(&self, snapshot: &Snapshot, index: usize) -> Result<(), AffinityRefusal> {
        if !self.affinity_keys.is_empty() {
            let mut pods_exist = true;
            for &key in &self.affinity_keys {
                let Some(p) = pair(snapshot, index, key) else {
                    // Every term's topology key must be on the node.
                    return Err(AffinityRefusal::AffinityRules);
                };
                if self.affinity.get(p) == 0 {
                    pods_exist = false;
                }
            }
            // No pod anywhere matches: the first of a self-affine group.
            let first_of_group = self.affinity.is_empty() && self.self_affine;
            if !(pods_exist || first_of_group) {
                return Err(AffinityRefusal::AffinityRules);
            }
        }
        if !self.anti.is_empty() {
            for &key in &self.anti_keys {
                if pair(snapshot, index, key).is_some_and(|p| self.anti.get(p) > 0) {
                    return Err(AffinityRefusal::AntiAffinityRules);
                }
            }
        }
        if !self.existing_anti.is_empty() && self.existing_anti.node_sum(snapshot, index) > 0 {
            return Err(AffinityRefusal::ExistingAntiAffinity);
        }
        Ok(())
    }
}

/// Per pair, the bound pods whose required anti-affinity terms select the
/// pod (a bound pod counts once per such term). Only pods with affinity
/// terms are read: a plain pod's decision pays for them alone.
fn existing_anti(snapshot: &Snapshot, pod: &PendingPod) -> PairTable<u32> {
    let mut counts = PairTable::new(snapshot);
    for (_, bound) in snapshot.affinity_pods() {
        for t in &bound.constraints.affinity.required_anti {
            if selects(t, snapshot, &pod.namespace, &pod.constraints.labels)
                && let Some(p) = pair(
                    snapshot,
                    bound.node.0 as usize,
                    snapshot.strings.get(&t.topology_key),
                )
            {
                counts.add(p, 1);
            }
        }
    }
    counts
}
