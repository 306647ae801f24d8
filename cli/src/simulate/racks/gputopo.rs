//! The gputopo policies: scheduler-core's `gang::place_gang` for every
//! gang, scheduler-core's `schedule` for single pods (`pods.rs`); see the
//! module docs of [`super`].

use super::engine::{Members, Policy, View};
use super::fabric::{Fabric, LEAF, RACK};
use super::pods::{PodScheduler, TIERS};
use super::workload::{Unit, UnitKind};
use crate::simulate::SimError;
use gputopo_api::Collective;
use gputopo_scheduler_core::gang::{GangCluster, GangNode, GangSpec, Slice, place_gang};
use gputopo_scheduler_core::gpuset::SetRequest;

/// How a single pod's node is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodRule {
    /// scheduler-core's `schedule` with its default weights, the
    /// domain-fit part among them (`gputopo`).
    DomainFit,
    /// scheduler-core's `schedule` with the domain-fit part off
    /// (`weights.domainFit: 0`; `gputopo-flat`).
    Plain,
    /// Investigation, emulated with the GPU-set picker: best fit on the
    /// node, then a partly used rack before an untouched one, a partly used
    /// leaf before an untouched one, then the rack's name: one stable order
    /// of racks instead of the fullest first (`gputopo-stable`).
    Stable,
}

/// gputopo with the gangs' structure (`structured`) or without it (flat).
pub struct Gputopo {
    name: &'static str,
    structured: bool,
    pods: Option<PodScheduler>,
    cluster: GangCluster,
    /// `GangNode::id` (the node's place in host name order, as a
    /// snapshot's ids follow names) → node.
    by_id: Vec<usize>,
}

impl Gputopo {
    pub fn new(
        name: &'static str,
        fabric: &Fabric,
        structured: bool,
        pod_rule: PodRule,
    ) -> Result<Gputopo, SimError> {
        let mut by_id = vec![0usize; fabric.nodes()];
        let nodes = (0..fabric.nodes())
            .map(|n| {
                let id = fabric.host_rank[n] as usize;
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
        let pods = match pod_rule {
            PodRule::DomainFit => Some(PodScheduler::new(fabric, true)?),
            PodRule::Plain => Some(PodScheduler::new(fabric, false)?),
            PodRule::Stable => None,
        };
        Ok(Gputopo {
            name,
            structured,
            pods,
            cluster: GangCluster {
                tier_names: TIERS.iter().map(|t| t.to_string()).collect(),
                nodes,
            },
            by_id,
        })
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
        let placed = place_gang(&spec, &self.cluster).ok()?;
        Some(
            placed
                .members
                .iter()
                .map(|m| (self.by_id[m.node], m.gpus))
                .collect(),
        )
    }

    /// [`PodRule::Stable`]: the GPU set from scheduler-core's picker on
    /// each node with room; the node by the rule's order.
    fn stable(unit: &Unit, view: &View<'_>) -> Option<Members> {
        let fabric = view.fabric;
        let picker = fabric
            .shape
            .picker(&SetRequest::new(unit.gpus, Collective::Ring));
        let full = fabric.full();
        let untouched = |tier: usize| -> Vec<bool> {
            let used = fabric.sum_by(tier, |n| u32::from(view.free[n] != full));
            used.into_iter().map(|u| u == 0).collect()
        };
        let (rack_untouched, leaf_untouched) = (untouched(RACK), untouched(LEAF));
        let mut best: Option<([u32; 5], usize, u32)> = None;
        for (node, &free) in view.free.iter().enumerate() {
            if free.count_ones() < unit.gpus {
                continue;
            }
            let Ok(pick) = picker.pick(free) else {
                continue;
            };
            let rack = fabric.node_rack[node];
            let key = [
                free.count_ones() - unit.gpus,
                u32::from(rack_untouched[rack]),
                u32::from(leaf_untouched[fabric.leaf_of(node)]),
                rack as u32,
                fabric.host_rank[node],
            ];
            if best.as_ref().is_none_or(|b| key < b.0) {
                best = Some((key, node, pick.gpus));
            }
        }
        best.map(|(_, node, gpus)| vec![(node, gpus)])
    }
}

impl Policy for Gputopo {
    fn name(&self) -> &'static str {
        self.name
    }

    fn place(&mut self, unit: &Unit, view: &View<'_>) -> Option<Members> {
        match (unit.kind, &mut self.pods) {
            (UnitKind::Pod, Some(pods)) => pods.place(view.fabric, unit, view.free),
            (UnitKind::Pod, None) => Gputopo::stable(unit, view),
            _ => self.gang(unit, view),
        }
    }
}
