//! Network domains as the cycle reads them from the snapshot: where the
//! rest of a partly bound gang should go (the domains its bound members
//! share), and how full each domain is (for the metrics). Pure.

use super::DomainUse;
use gputopo_scheduler_core::snapshot::Snapshot;
use std::collections::{BTreeMap, BTreeSet};

/// Node selectors for the rest of a gang whose members are bound on
/// `nodes`, tightest first: every network domain they all share (leaf and
/// spine), then the outer ones only, then none. The rest goes where the
/// first placement would have put it: as close to its bound members as fits.
pub fn domain_selectors(snapshot: &Snapshot, nodes: &[String]) -> Vec<BTreeMap<String, String>> {
    let mut shared: Vec<(String, String)> = Vec::new();
    if !nodes.is_empty() {
        for key in snapshot.tiers().keys() {
            let values: BTreeSet<Option<&str>> = nodes
                .iter()
                .map(|n| {
                    snapshot
                        .node_id(n)
                        .and_then(|id| snapshot.node(id).label(key))
                })
                .collect();
            match values.into_iter().collect::<Vec<_>>()[..] {
                [Some(v)] => shared.push((key.clone(), v.to_string())),
                _ => break,
            }
        }
    }
    (0..=shared.len())
        .rev()
        .map(|n| shared[..n].iter().cloned().collect())
        .collect()
}

/// GPUs in use per network domain.
pub fn domain_use(snapshot: &Snapshot) -> Vec<DomainUse> {
    let tiers = snapshot.tiers().keys();
    snapshot
        .domains()
        .filter(|(_, d)| d.gpu_count() > 0)
        .map(|(_, d)| DomainUse {
            tier: tiers.get(d.tier()).cloned().unwrap_or_default(),
            domain: d.name().to_string(),
            ratio: f64::from(d.gpus_used()) / f64::from(d.gpu_count()),
        })
        .collect()
}
