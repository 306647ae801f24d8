//! Bound pods by label (`key=value`), so that a selector's candidates are
//! read from an index instead of every bound pod: topology spread counts
//! and inter-pod affinity tables look at the few pods a selector's `In`
//! requirement names (most selectors are `matchLabels`), not the cluster.
//! Shared between copies of a snapshot like the pods themselves.

use super::{BoundPod, PodId, Snapshot};
use crate::pod_constraints::LabelSelector;
use crate::selector::SelectorOperator;

/// `(key, value)` → the bound pods carrying that label.
pub(crate) type LabelIndex = imbl::HashMap<(String, String), imbl::OrdSet<PodId>>;

impl Snapshot {
    /// Indexes (`add`) or unindexes a bound pod's labels.
    pub(super) fn index_labels(&mut self, id: PodId, pod: &BoundPod, add: bool) {
        for (k, v) in &pod.constraints.labels {
            let key = (k.clone(), v.clone());
            let mut set = self.pods_by_label.get(&key).cloned().unwrap_or_default();
            if add {
                set.insert(id);
            } else {
                set.remove(&id);
            }
            if set.is_empty() {
                self.pods_by_label.remove(&key);
            } else {
                self.pods_by_label.insert(key, set);
            }
        }
    }

    /// The bound pods that may match any of `selectors` (an absent one
    /// matches nothing), sorted, each once; `None` when one of them has no
    /// `In` requirement to look up, and every pod must be looked at.
    /// Callers still match each candidate.
    pub(crate) fn selector_candidates<'s>(
        &self,
        selectors: impl IntoIterator<Item = Option<&'s LabelSelector>>,
    ) -> Option<Vec<PodId>> {
        let mut out: Vec<PodId> = Vec::new();
        for selector in selectors.into_iter().flatten() {
            // The `In` requirement naming the fewest pods narrows best.
            let narrowest = selector
                .requirements
                .iter()
                .filter_map(|r| match &r.operator {
                    SelectorOperator::In(values) => Some((&r.key, values)),
                    _ => None,
                })
                .map(|(key, values)| {
                    let sets: Vec<&imbl::OrdSet<PodId>> = values
                        .iter()
                        .filter_map(|v| self.pods_by_label.get(&(key.clone(), v.clone())))
                        .collect();
                    (sets.iter().map(|s| s.len()).sum::<usize>(), sets)
                })
                .min_by_key(|(n, _)| *n)?;
            for set in narrowest.1 {
                out.extend(set.iter().copied());
            }
        }
        out.sort_unstable();
        out.dedup();
        Some(out)
    }

    /// `ids`' pods (candidates from [`Snapshot::selector_candidates`]),
    /// or every bound pod where there are none to narrow to.
    pub(crate) fn pods_or_all<'a>(
        &'a self,
        ids: Option<&'a [PodId]>,
    ) -> Box<dyn Iterator<Item = (PodId, &'a BoundPod)> + 'a> {
        match ids {
            Some(ids) => Box::new(ids.iter().filter_map(|&id| self.pod(id).map(|p| (id, p)))),
            None => Box::new(self.pods()),
        }
    }
}
