//! A set's quality on a [`NodeShape`]: its ring bottleneck or weakest pair,
//! and the best any `k` whole GPUs of the empty node reach. Exact from the
//! shape's tables up to 16 GPUs, from the documented heuristic above; so this
//! sits above both `shape.rs` and `heuristic.rs`.

use super::heuristic;
use super::mask::{for_each_k_subset, low_bits};
use super::query::collective_index;
use super::shape::NodeShape;
use super::tables::NONE;
use gputopo_api::{Collective, LinkClass};

impl NodeShape {
    /// The ring bottleneck of `set`: the weakest hop of its best Hamiltonian
    /// cycle. `None` for fewer than two GPUs (no hop). Exact for nodes of up to
    /// 16 GPUs and for sets of up to 10 GPUs; otherwise the bottleneck of the
    /// best ring the greedy construction finds (a lower bound).
    pub fn ring_bottleneck(&self, set: u32) -> Option<LinkClass> {
        let set = set & low_bits(self.gpu_count());
        self.tables.class(heuristic::ring_level(&self.tables, set))
    }

    /// The best quality (level) any `k` whole GPUs of the empty node reach.
    /// `NONE` when the node has fewer than `k` whole GPUs.
    pub(crate) fn best_empty_level(&self, k: u32, collective: Collective) -> u8 {
        let row = &self.best_empty[collective_index(collective)];
        let Some(cell) = row.get(k as usize) else {
            return NONE;
        };
        *cell.get_or_init(|| {
            let pool = self.whole_gpus;
            if k > pool.count_ones() {
                return NONE;
            }
            if self.is_exact() {
                let mut best = NONE;
                for_each_k_subset(pool, k, |s| {
                    best = best.max(self.quality_level(s, collective));
                });
                best
            } else {
                heuristic::best_level(self, pool, k, collective)
            }
        })
    }

    /// The quality level of a set: ring bottleneck or weakest pair.
    pub(crate) fn quality_level(&self, set: u32, collective: Collective) -> u8 {
        match collective {
            Collective::Ring => heuristic::ring_level(&self.tables, set),
            Collective::AllToAll => self.tables.all_to_all_level(set),
        }
    }
}
