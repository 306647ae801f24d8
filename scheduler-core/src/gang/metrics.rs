//! Cluster-level placement measures (beyond the per-node `gpuset` ones):
//! the domains each gang spans, and a cluster fragmentation summary.

use super::TierSpan;
use super::domain::Tree;
use crate::gpuset::{LEFTOVER_SIZES, NodeShape, full_nvlink_slots, stranded_free_gpus};

/// Free GPUs stranded for one request size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stranded {
    pub size: u32,
    /// Free GPUs in no free `size`-set of their node's best quality
    /// ([`stranded_free_gpus`]), summed over nodes.
    pub gpus: u32,
}

/// How usable the cluster's free GPUs still are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragmentationSummary {
    pub nodes: u32,
    /// Free whole GPUs (listed, MIG disabled).
    pub free_gpus: u32,
    /// Per size 8, 4, 2.
    pub stranded: Vec<Stranded>,
    /// Disjoint fully NVLink-connected 8-GPU sets still free ([`full_nvlink_slots`]).
    pub full_nvlink_slots_8: u32,
    /// Nodes whose free GPUs are all of the node's GPUs.
    pub empty_nodes: u32,
}

impl FragmentationSummary {
    /// The stranded count for `size` (0 for a size not measured).
    pub fn stranded(&self, size: u32) -> u32 {
        self.stranded
            .iter()
            .find(|s| s.size == size)
            .map_or(0, |s| s.gpus)
    }

    /// Stranded free GPUs for `size` as a fraction of the free GPUs (0 when none are free).
    pub fn stranded_fraction(&self, size: u32) -> f64 {
        if self.free_gpus == 0 {
            0.0
        } else {
            f64::from(self.stranded(size)) / f64::from(self.free_gpus)
        }
    }
}

/// Sums the per-node measures over `(shape, free mask)` pairs.
pub fn fragmentation<'a>(
    nodes: impl IntoIterator<Item = (&'a NodeShape, u32)>,
) -> FragmentationSummary {
    let mut summary = FragmentationSummary {
        nodes: 0,
        free_gpus: 0,
        stranded: LEFTOVER_SIZES
            .iter()
            .map(|&size| Stranded { size, gpus: 0 })
            .collect(),
        full_nvlink_slots_8: 0,
        empty_nodes: 0,
    };
    for (shape, free) in nodes {
        let whole = shape.gpus_mask() & !shape.mig_mask();
        let usable = free & whole;
        summary.nodes += 1;
        summary.free_gpus += usable.count_ones();
        if usable == whole && whole != 0 {
            summary.empty_nodes += 1;
        }
        for s in &mut summary.stranded {
            s.gpus += stranded_free_gpus(shape, usable, s.size);
        }
        summary.full_nvlink_slots_8 += full_nvlink_slots(shape, usable, 8);
    }
    summary
}

/// The domains per tier (outermost first) spanned by a gang whose members run
/// on nodes with these tier paths, under the same label rules as placement
/// (see the `gang` module docs).
pub fn gang_spans<'a>(
    tier_names: &[String],
    member_paths: impl IntoIterator<Item = &'a [Option<String>]>,
) -> Vec<TierSpan> {
    let paths: Vec<&[Option<String>]> = member_paths.into_iter().collect();
    let tree = Tree::build(tier_names, paths.iter().enumerate().map(|(i, p)| (i, *p)));
    let mut leaves = tree.node_leaf.clone();
    leaves.sort_unstable();
    leaves.dedup();
    tree.tier_spans(&leaves)
}

/// Lowest-tier domains spanned, per gang, summarised.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpanSummary {
    pub gangs: u32,
    pub mean_leaves: f64,
    pub max_leaves: u32,
    /// Gangs spanning more than one domain at the outermost tier.
    pub across_outer: u32,
}

/// Summarises [`gang_spans`] results, one per gang.
pub fn span_summary<'a>(gangs: impl IntoIterator<Item = &'a [TierSpan]>) -> SpanSummary {
    let mut summary = SpanSummary {
        gangs: 0,
        mean_leaves: 0.0,
        max_leaves: 0,
        across_outer: 0,
    };
    let mut total = 0u64;
    for spans in gangs {
        let leaves = spans.last().map_or(1, |s| s.domains.len()) as u32;
        summary.gangs += 1;
        total += u64::from(leaves);
        summary.max_leaves = summary.max_leaves.max(leaves);
        if spans.first().is_some_and(|s| s.domains.len() > 1) {
            summary.across_outer += 1;
        }
    }
    if summary.gangs > 0 {
        summary.mean_leaves = total as f64 / f64::from(summary.gangs);
    }
    summary
}
