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
