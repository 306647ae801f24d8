//! Matching one affinity term against one pod, with the namespace rules
//! kube-scheduler applies once per decision: a term's `namespaceSelector`
//! is resolved against the namespaces it knows (an empty selector selects
//! every namespace, known or not; any other selects only namespaces whose
//! labels it matches), and a term's topology key and a node's value for it
//! are read as interned symbols.

use crate::pod_constraints::{AffinityTerm, selector_matches};
use crate::snapshot::Snapshot;
use crate::snapshot::intern::Sym;
use std::collections::BTreeMap;

/// Whether `term` selects a pod in `namespace` with `labels`.
pub(super) fn selects(
    term: &AffinityTerm,
    snapshot: &Snapshot,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    in_namespace(term, snapshot, namespace) && selector_matches(term.selector.as_ref(), labels)
}

fn in_namespace(term: &AffinityTerm, snapshot: &Snapshot, namespace: &str) -> bool {
    if term.namespaces.iter().any(|n| n == namespace) {
        return true;
    }
    match &term.namespace_selector {
        None => false,
        Some(s) if s.requirements.is_empty() => true,
        Some(s) => snapshot
            .namespace_labels(namespace)
            .is_some_and(|l| s.matches(l)),
    }
}

/// A `(topology key, value)` pair, interned.
pub(super) type Pair = (Sym, Sym);

/// The pair of `key` on the node at `index`; `None` when the node lacks
/// the key (or no node has it: the key was never interned).
pub(super) fn pair(snapshot: &Snapshot, index: usize, key: Option<Sym>) -> Option<Pair> {
    let key = key?;
    snapshot.label_sym(index, key).map(|v| (key, v))
}

/// Counts (or weights) per topology pair, as dense tables: one per key,
/// indexed by the value's symbol. A decision has few keys (the hostname,
/// a zone) and asks once per node, so a lookup is an index, not a hash.
pub(super) struct PairTable<T> {
    /// Table length: the snapshot's interned strings.
    width: usize,
    by_key: Vec<(Sym, Vec<T>)>,
    /// Whether any pair was added.
    touched: bool,
}

impl<T: Copy + Default + std::ops::AddAssign> PairTable<T> {
    pub(super) fn new(snapshot: &Snapshot) -> PairTable<T> {
        PairTable {
            width: snapshot.interned_strings(),
            by_key: Vec::new(),
            touched: false,
        }
    }

    pub(super) fn add(&mut self, (key, value): Pair, amount: T) {
        let slot = match self.by_key.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.by_key.push((key, vec![T::default(); self.width]));
                self.by_key.len() - 1
            }
        };
        if let Some(v) = self.by_key[slot].1.get_mut(value.0 as usize) {
            self.touched = true;
            *v += amount;
        }
    }

    pub(super) fn get(&self, (key, value): Pair) -> T {
        self.by_key
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, values)| values.get(value.0 as usize).copied())
            .unwrap_or_default()
    }

    /// Whether no pair was ever added.
    pub(super) fn is_empty(&self) -> bool {
        !self.touched
    }

    /// The sum over the table's keys of the node at `index`'s pairs.
    pub(super) fn node_sum(&self, snapshot: &Snapshot, index: usize) -> T {
        let mut sum = T::default();
        for (key, values) in &self.by_key {
            if let Some(v) = snapshot
                .label_sym(index, *key)
                .and_then(|value| values.get(value.0 as usize))
            {
                sum += *v;
            }
        }
        sum
    }
}
