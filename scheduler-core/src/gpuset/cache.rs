//! Answers by (free mask, request), so identical nodes cost a lookup.
//!
//! Two layers:
//!
//! * nodes of up to 8 GPUs asking without constraints (after canonicalisation,
//!   see `Query`) read a dense table indexed by (collective, k, free mask):
//!   `2 · (n + 1) · 2^n` lazily filled cells, 4,608 at n = 8, each holding a
//!   whole answer (96 bytes: ≈ 440 KiB per 8-GPU shape), so a hit is an
//!   atomic load and a copy: no lock, no decoding.
//! * everything else goes through a `Mutex<HashMap>` of at most
//!   [`MAX_CACHED`] answers; when full it is cleared (answers are cheap to
//!   recompute, and a clear bounds memory without tracking recency).

use super::query::{Outcome, Query, collective_index};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

/// The most answers the hash layer of one shape keeps before it is cleared.
pub const MAX_CACHED: usize = 1 << 16;
/// Nodes up to this many GPUs get the dense, lock-free layer.
pub const MAX_DENSE_GPUS: u32 = 8;

pub(crate) struct ChoiceCache {
    n: u32,
    dense: Option<Box<[OnceLock<Outcome>]>>,
    map: Mutex<HashMap<Query, Outcome>>,
}

impl ChoiceCache {
    pub(crate) fn new(n: u32) -> ChoiceCache {
        let dense = (n <= MAX_DENSE_GPUS).then(|| {
            let cells = (2 * (n as usize + 1)) << n;
            (0..cells).map(|_| OnceLock::new()).collect()
        });
        ChoiceCache {
            n,
            dense,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Where the dense cells of `query`'s (collective, k) start, if it has them;
    /// the cell of a free mask is this plus the mask.
    pub(crate) fn dense_row(&self, query: &Query) -> Option<usize> {
        if self.dense.is_none() || !query.is_unconstrained() || query.k > self.n {
            return None;
        }
        let row = collective_index(query.collective) * (self.n as usize + 1) + query.k as usize;
        Some(row << self.n)
    }

    /// The dense cell at `index` (a row start plus a free mask of listed GPUs).
    pub(crate) fn dense_cell(&self, index: usize) -> Option<&OnceLock<Outcome>> {
        self.dense.as_ref().and_then(|cells| cells.get(index))
    }

    /// The cached answer to `query`, computing and storing it on a miss.
    pub(crate) fn get_or_compute(
        &self,
        query: &Query,
        compute: impl FnOnce() -> Outcome,
    ) -> Outcome {
        if let Some(row) = self.dense_row(query)
            && let Some(cell) = self.dense_cell(row | query.free as usize)
        {
            return *cell.get_or_init(compute);
        }
        if let Some(hit) = self.lock().get(query) {
            return *hit;
        }
        // Compute outside the lock: a slow miss must not stall other threads.
        let outcome = compute();
        let mut map = self.lock();
        if map.len() >= MAX_CACHED {
            map.clear();
        }
        map.insert(*query, outcome);
        outcome
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Query, Outcome>> {
        // The map holds plain values; a panic elsewhere cannot leave it inconsistent.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers held in the hash layer (the dense layer is not counted).
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dense layer's memory is cells × this; keep it near the documented 96 bytes.
    #[test]
    fn cells_stay_small() {
        assert!(size_of::<OnceLock<super::Outcome>>() <= 96);
    }
}
