//! What the choice pipeline passes between its parts: a request canonicalised
//! for one shape ([`Query`], the cache's key), a search's winner
//! ([`Winner`]) and the cached answer ([`Outcome`]). Below the searches
//! (`exact.rs`, `heuristic.rs`), the cache and the pipeline (`choose.rs`).

use super::request::{DecidedBy, NoFitReason, SetPick};
use super::tables::LeftoverKey;
use gputopo_api::Collective;

/// A request reduced to what changes its answer on this shape: a constraint
/// that removes nothing on this shape is dropped, so more queries share the
/// cache (and the dense layer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Query {
    /// Free listed GPUs.
    pub(crate) free: u32,
    pub(crate) k: u32,
    pub(crate) collective: Collective,
    pub(crate) min_nvlink_level: Option<u32>,
    pub(crate) min_memory_mib: Option<u64>,
    pub(crate) allow_mig: bool,
    pub(crate) single_numa_node: bool,
}

impl Query {
    pub(crate) fn is_unconstrained(&self) -> bool {
        self.min_nvlink_level.is_none()
            && self.min_memory_mib.is_none()
            && !self.allow_mig
            && !self.single_numa_node
    }
}

/// What the cache stores: the whole answer, so a hit is a copy.
pub(crate) type Outcome = Result<SetPick, NoFitReason>;

/// What a search returns: the best set on the full order and how it won.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Winner {
    pub(crate) gpus: u32,
    pub(crate) quality: u8,
    pub(crate) numa_nodes: u8,
    pub(crate) leftover: LeftoverKey,
    pub(crate) decided_by: DecidedBy,
    pub(crate) runner_up: u32,
    pub(crate) candidates: u32,
}

/// 0 for ring, 1 for all-to-all: the index of per-collective tables.
pub(crate) fn collective_index(collective: Collective) -> usize {
    match collective {
        Collective::Ring => 0,
        Collective::AllToAll => 1,
    }
}
