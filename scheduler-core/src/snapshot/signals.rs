//! Cluster-wide facts that switch score parts on or off, gathered once the
//! nodes are in.

use super::Snapshot;
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
