//! The `gputopo` and `gputopo-flat` policies: scheduler-core's
//! `gang::place_gang` for every gang, and the single-pod rule emulated
//! with scheduler-core's GPU-set picker (see the module docs of [`super`]).

use super::engine::{Members, Policy, View};
use super::fabric::{Fabric, LEAF, RACK, SPINE};
use super::workload::{Unit, UnitKind};
use gputopo_api::Collective;
use gputopo_scheduler_core::gang::{GangCluster, GangNode, GangSpec, Slice, place_gang};
use gputopo_scheduler_core::gpuset::SetRequest;

/// gputopo with the gangs' structure (`structured`) or without it (flat).
pub struct Gputopo {
    structured: bool,
    cluster: GangCluster,
    /// `GangNode::id` (the node's place in host name order, as a
    /// snapshot's ids follow names) → node.
    by_id: Vec<usize>,
}

impl Gputopo {
    pub fn new(fabric: &Fabric, structured: bool) -> Gputopo {
        let mut by_id = vec![0usize; fabric.nodes()];
        let nodes = (0..fabric.nodes())
            .map(|n| {
                let id = if std::env::var("RACKS_GANG_IDS").is_ok() {
                    n
                } else {
                    fabric.host_rank[n] as usize
                };
                by_id[id] = n;
                GangNode::new(
                    id,
                    vec![
                        Some(format!("spine-{:02}", fabric.spine_of(n))),
                        Some(format!("leaf-{:02}", fabric.leaf_of(n))),
                        Some(format!("rack-{:02}", fabric.node_rack[n])),
                    ],
                    fabric.shape.clone(),
                    fabric.full(),
                )
            })
            .collect();
        Gputopo {
            structured,
            cluster: GangCluster {
                tier_names: vec![
                    "gputopo.dev/spine".into(),
                    "gputopo.dev/leaf".into(),
                    "nvidia.com/gpu.clique".into(),
                ],
                nodes,
            },
            by_id,
        }
    }

    fn gang(&mut self, unit: &Unit, view: &View<'_>) -> Option<Members> {
        for (node, free) in self.cluster.nodes.iter_mut().zip(view.free) {
            node.free = *free;
        }
        let mut spec =
            GangSpec::uniform(unit.members, SetRequest::new(unit.gpus, Collective::Ring));
        if let (true, UnitKind::Structured { slice, preferred }) = (self.structured, unit.kind) {
            spec = spec.preferring(preferred).sliced(vec![Slice {
                size: slice,
                tier: RACK,
                required: true,
            }]);
        }
        if std::env::var("RACKS_MULTI_CONSOLIDATED").is_ok() {
            spec = spec.with_strategy(gputopo_api::PlacementStrategy::Consolidated);
        }
        let placed = place_gang(&spec, &self.cluster).ok()?;
        Some(
            placed
                .members
                .iter()
                .map(|m| (self.by_id[m.node], m.gpus))
                .collect(),
        )
    }

    /// One pod: the GPU set from the picker on each node that has room;
    /// the node by best fit (fewest GPUs left free on it), then, for
    /// `gputopo`, domain fit (a partly used rack, leaf, spine before an
    /// untouched one, the fullest first), then host name.
    fn pod(&self, unit: &Unit, view: &View<'_>) -> Option<Members> {
        let fabric = view.fabric;
        let picker = fabric
            .shape
            .picker(&SetRequest::new(unit.gpus, Collective::Ring));
        let fits = self
            .structured
            .then(|| DomainFit::of(fabric, view.free, unit.gpus));
        let mut best: Option<((u32, i64, u32), usize, u32)> = None;
        for (node, &free) in view.free.iter().enumerate() {
            if free.count_ones() < unit.gpus {
                continue;
            }
            let Ok(pick) = picker.pick(free) else {
                continue;
            };
            let left = free.count_ones() - unit.gpus;
            let domain = fits.as_ref().map_or(0, |f| f.value(fabric, node));
            let tie = if std::env::var("RACKS_POD_TIE").is_ok() {
                node as u32
            } else {
                fabric.host_rank[node]
            };
            let key = if std::env::var("RACKS_POD_DOMAIN_FIRST").is_ok() {
                (0, -domain, left * 1_000_000 + tie)
            } else {
                (left, -domain, tie)
            };
            if best.as_ref().is_none_or(|b| key < b.0) {
                best = Some((key, node, pick.gpus));
            }
        }
        best.map(|(_, node, gpus)| vec![(node, gpus)])
    }
}

impl Policy for Gputopo {
    fn name(&self) -> &'static str {
        if self.structured {
            "gputopo"
        } else {
            "gputopo-flat"
        }
    }

    fn place(&mut self, unit: &Unit, view: &View<'_>) -> Option<Members> {
        match unit.kind {
            UnitKind::Pod => self.pod(unit, view),
            _ => self.gang(unit, view),
        }
    }

    fn propose(&mut self, unit: &Unit, view: &View<'_>, now: &[u32]) -> Option<Members> {
        if std::env::var("RACKS_PROPOSE_FREE").is_err() {
            return self.place(unit, view);
        }
        let per_gpu = 100 / view.fabric.size.gpus_per_node as i32;
        for (node, free) in self.cluster.nodes.iter_mut().zip(now) {
            node.node_score = per_gpu * free.count_ones() as i32;
        }
        let placed = self.place(unit, view);
        for node in &mut self.cluster.nodes {
            node.node_score = 0;
        }
        placed
    }
}

/// The domain-fit rule, per tier: a domain none of whose GPUs is taken
/// scores 0; a partly used one `0.5 + 0.5·(1 − f/F)`, `f` its GPUs left
/// free after the pod, `F` the most GPUs a domain of that tier has. A
/// node's value is the mean over its tiers weighted 1, 2, 4 (spine, leaf,
/// rack), so the rack counts more than the others together. The same
/// formula as scheduler-core's `score/domain_fit.rs` (in review).
struct DomainFit {
    /// Per tier, per domain: (GPUs, free GPUs).
    tiers: [Vec<(u32, u32)>; 3],
    largest: [u32; 3],
    taking: u32,
}

impl DomainFit {
    fn of(fabric: &Fabric, free: &[u32], taking: u32) -> DomainFit {
        let per_node = fabric.size.gpus_per_node;
        let tier = |t: usize| -> Vec<(u32, u32)> {
            let gpus = fabric.sum_by(t, |_| per_node);
            let left = fabric.sum_by(t, |n| free[n].count_ones());
            gpus.into_iter().zip(left).collect()
        };
        let tiers = [tier(SPINE), tier(LEAF), tier(RACK)];
        let largest = [0, 1, 2].map(|t| tiers[t].iter().map(|d| d.0).max().unwrap_or(0));
        DomainFit {
            tiers,
            largest,
            taking,
        }
    }

    /// The node's value × 1,000,000, as an integer (exact comparisons).
    fn value(&self, fabric: &Fabric, node: usize) -> i64 {
        let (mut sum, mut weights) = (0.0, 0.0);
        for t in [SPINE, LEAF, RACK] {
            let (gpus, left) = self.tiers[t][fabric.domain(node, t)];
            let w = f64::from(1u32 << t);
            let v = if left == gpus {
                0.0
            } else {
                let after = left.saturating_sub(self.taking);
                0.5 + 0.5 * (1.0 - f64::from(after) / f64::from(self.largest[t].max(gpus)))
            };
            sum += w * v;
            weights += w;
        }
        (sum / weights * 1e6).round() as i64
    }
}
