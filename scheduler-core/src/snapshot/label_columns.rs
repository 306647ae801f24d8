//! Nodes' values of the topology keys pods' rules name most, as dense
//! columns ([`super::Snapshot::label_columns`]): inter-pod affinity and
//! spread look a node's hostname or zone up once per node per decision.

use super::Snapshot;
use super::intern::Sym;

/// A key and every node's value of it, in node order.
pub(crate) type Column = (Sym, Box<[Option<Sym>]>);

/// The topology keys whose per-node values are kept as columns.
const COLUMN_KEYS: [&str; 3] = [
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

impl Snapshot {
    /// Each [`COLUMN_KEYS`] key some node has, with every node's value.
    pub(super) fn topology_columns(&self) -> Vec<Column> {
        COLUMN_KEYS
            .iter()
            .filter_map(|k| self.strings.get(k))
            .map(|key| {
                let column = (0..self.nodes.len())
                    .map(|i| {
                        let labels = &self.nodes[i].labels;
                        labels
                            .binary_search_by_key(&key, |(k, _)| *k)
                            .ok()
                            .map(|j| labels[j].1)
                    })
                    .collect();
                (key, column)
            })
            .collect()
    }
}
