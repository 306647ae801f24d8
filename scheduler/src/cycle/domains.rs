//! Network domains as the cycle reads them from the snapshot: where the
//! rest of a partly bound gang should go (the domains its bound members
//! share), and how full each domain is and how many are whole and free
//! (for the metrics). Pure.

use super::{DomainUse, FreeDomains};
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

/// Per tier, outermost first, its domains with GPUs and every one free.
pub fn free_domains(snapshot: &Snapshot) -> Vec<FreeDomains> {
    snapshot
        .tiers()
        .keys()
        .iter()
        .zip(snapshot.free_domains())
        .map(|(tier, count)| FreeDomains {
            tier: tier.clone(),
            count,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputopo_scheduler_core::config::SchedulerConfig;
    use gputopo_scheduler_core::resources::Resources;
    use gputopo_scheduler_core::snapshot::{BoundPodInput, GpuHolding, NodeInput, SnapshotBuilder};

    /// A node of `gpus` GPUs (no `GpuTopology`: GPUs `0..gpus`) in `spine`/`leaf`.
    fn node(name: &str, spine: &str, leaf: &str, gpus: u32) -> NodeInput {
        NodeInput {
            name: name.into(),
            labels: [("gputopo.dev/spine", spine), ("gputopo.dev/leaf", leaf)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            allocatable: Resources::allocatable([("nvidia.com/gpu", &gpus.to_string()[..])], "t")
                .expect("valid"),
            ..NodeInput::default()
        }
    }

    #[test]
    fn free_domains_are_counted_per_tier_key() {
        let mut b = SnapshotBuilder::new(&SchedulerConfig::default());
        b.node(node("a", "s1", "l1", 8));
        b.node(node("b", "s1", "l2", 8));
        b.node(node("c", "s2", "l3", 8));
        b.node(node("cpu", "s3", "l4", 0));
        let mut p = BoundPodInput::new("ml", "p", "b");
        p.requests.gpus = 1;
        p.holding = GpuHolding::Whole(vec![0]);
        b.pod(p);
        let snapshot = b.build().expect("builds");
        let count = |tier: &str| {
            free_domains(&snapshot)
                .into_iter()
                .find(|f| f.tier == tier)
                .map(|f| f.count)
        };
        // s2 is whole, s1 holds b's pod, s3 has no GPUs; l1 and l3 are whole.
        assert_eq!(count("gputopo.dev/spine"), Some(1));
        assert_eq!(count("gputopo.dev/leaf"), Some(2));
        assert_eq!(free_domains(&snapshot).len(), 2);
    }
}
