//! Whole network domains left free over a run, per tier: the figure behind
//! the scheduler's `gputopo_free_domains{tier}`, and what the domain-fit
//! part of `gputopo`'s score keeps up (whole racks, leaves and spines for
//! the gangs that need one).
//!
//! The domains are the cluster snapshot's (the configured network tiers
//! read from the nodes' labels, a domain named by every tier down to it);
//! whether a domain is free is read from the engine's own books, so every
//! policy is measured alike. A domain is free when it has GPUs and every
//! one of them is wholly free. Trace clusters (openb CSV nodes) carry no
//! tier labels: they have no domains and the figure is left out.

use super::{SimCluster, WholeDomainsFree, World};
use std::collections::HashMap;

/// One tier's domains: per domain, the cluster's GPU nodes in it.
struct Tier {
    key: String,
    domains: Vec<Vec<usize>>,
}

/// The cluster's domains, read once per run.
pub(super) struct Domains {
    tiers: Vec<Tier>,
}

/// The samples taken over a run, per tier of [`Domains`].
#[derive(Default)]
pub(super) struct DomainBooks {
    at_start: Vec<u64>,
    sums: Vec<u64>,
    mins: Vec<u64>,
    at_end: Vec<u64>,
    samples: u64,
}

impl Domains {
    pub(super) fn of(cluster: &SimCluster) -> Domains {
        let index: HashMap<&str, usize> = cluster
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let snapshot = &cluster.snapshot;
        let keys = snapshot.tiers().keys();
        let mut tiers: Vec<Tier> = keys
            .iter()
            .map(|key| Tier {
                key: key.clone(),
                domains: Vec::new(),
            })
            .collect();
        for (_, domain) in snapshot.domains() {
            let nodes: Vec<usize> = domain
                .nodes()
                .iter()
                .filter_map(|&id| index.get(snapshot.node(id).name()).copied())
                .filter(|&i| cluster.nodes[i].gpus > 0)
                .collect();
            if let Some(tier) = tiers.get_mut(domain.tier())
                && !nodes.is_empty()
            {
                tier.domains.push(nodes);
            }
        }
        tiers.retain(|t| !t.domains.is_empty());
        Domains { tiers }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.tiers.is_empty()
    }

    /// Per tier, its domains whose every GPU is wholly free now.
    pub(super) fn free(&self, world: &World<'_>) -> Vec<u64> {
        let whole = |i: usize| world.state.gpu_left[i].iter().all(|&l| l >= 1000);
        self.tiers
            .iter()
            .map(|t| {
                t.domains
                    .iter()
                    .filter(|nodes| nodes.iter().all(|&i| whole(i)))
                    .count() as u64
            })
            .collect()
    }

    /// The books at the start of a run.
    pub(super) fn open(&self, world: &World<'_>) -> DomainBooks {
        let free = self.free(world);
        DomainBooks {
            at_start: free.clone(),
            sums: vec![0; free.len()],
            mins: free.clone(),
            at_end: free,
            samples: 0,
        }
    }

    /// One sample, just after an arrival.
    pub(super) fn sample(&self, world: &World<'_>, books: &mut DomainBooks) {
        if self.is_empty() {
            return;
        }
        for (t, free) in self.free(world).into_iter().enumerate() {
            books.sums[t] += free;
            books.mins[t] = books.mins[t].min(free);
        }
        books.samples += 1;
    }

    /// At the last arrival.
    pub(super) fn close(&self, world: &World<'_>, books: &mut DomainBooks) {
        if !self.is_empty() {
            books.at_end = self.free(world);
        }
    }

    /// The figures per tier, outermost first; empty without domains.
    pub(super) fn summary(&self, books: &DomainBooks) -> Vec<WholeDomainsFree> {
        self.tiers
            .iter()
            .enumerate()
            .map(|(t, tier)| WholeDomainsFree {
                tier: tier.key.clone(),
                domains: tier.domains.len() as u64,
                at_start: books.at_start[t],
                mean: if books.samples > 0 {
                    let mean = books.sums[t] as f64 / books.samples as f64;
                    (mean * 10_000.0).round() / 10_000.0
                } else {
                    books.at_start[t] as f64
                },
                min: books.mins[t],
                at_end: books.at_end[t],
            })
            .collect()
    }
}
