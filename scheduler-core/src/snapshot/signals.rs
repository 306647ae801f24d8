//! Cluster-wide facts that switch score parts on or off, gathered once the
//! nodes are in.

use super::{GpuKind, Snapshot};
use crate::gpuset::MAX_GPUS;
use crate::selector::TaintEffect;

/// Cluster-wide facts that decide whether a score part applies at all.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Signals {
    /// Some node has a price.
    pub(crate) priced: bool,
    pub(crate) cost_min: f32,
    pub(crate) cost_max: f32,
    /// Some node is spot capacity.
    pub(crate) spot: bool,
    /// Some node has a `PreferNoSchedule` taint.
    pub(crate) prefer_no_schedule: bool,
    /// The oldest and newest known GPU generation (0 when none is known).
    pub(crate) generation_min: u8,
    pub(crate) generation_max: u8,
    /// Some node has GPUs, and some node has none (the keep-GPUs-free part).
    pub(crate) gpu_nodes: bool,
    pub(crate) gpuless_nodes: bool,
    /// The most GPUs any node lists (or counts, where its `GpuTopology`
    /// cannot be read).
    pub(crate) most_gpus: u32,
}

impl Snapshot {
    pub(super) fn update_signals(&mut self) {
        let mut s = Signals {
            cost_min: f32::INFINITY,
            cost_max: f32::NEG_INFINITY,
            ..Signals::default()
        };
        for n in self.nodes.iter() {
            if let Some(c) = n.cost_per_hour {
                s.priced = true;
                s.cost_min = s.cost_min.min(c);
                s.cost_max = s.cost_max.max(c);
            }
            s.spot |= n.spot;
            if matches!(n.gpus.kind, GpuKind::None) {
                s.gpuless_nodes = true;
            } else {
                s.gpu_nodes = true;
                let listed = n.gpus.present.count_ones();
                let counted = n.allocatable.gpus.clamp(0, i64::from(MAX_GPUS)) as u32;
                s.most_gpus = s.most_gpus.max(listed.max(counted));
            }
            if let Some(g) = n.generation {
                s.generation_min = if s.generation_min == 0 {
                    g
                } else {
                    s.generation_min.min(g)
                };
                s.generation_max = s.generation_max.max(g);
            }
        }
        s.prefer_no_schedule = self
            .taint_sets
            .iter()
            .flatten()
            .any(|t| t.effect == TaintEffect::PreferNoSchedule);
        if !s.priced {
            s.cost_min = 0.0;
            s.cost_max = 0.0;
        }
        self.signals = s;
    }
}
