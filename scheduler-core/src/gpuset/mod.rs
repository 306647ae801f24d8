//! The exact GPU-set choice inside one node (docs/contract.md, "Choosing GPUs inside a node").
//!
//! # What is chosen
//!
//! Among the free GPUs that meet the hard constraints, the `k`-set that is best on
//! this order, each rule breaking the ties of the one before:
//!
//! 1. **Bottleneck**, higher better. `ring`: the weakest hop of the best ring (a
//!    Hamiltonian cycle through the set, as NCCL builds for all-reduce); two GPUs
//!    form the ring of their one link; one GPU has no hop, which counts as the best
//!    possible quality (reported as `bottleneck: None`). `all-to-all`: the weakest
//!    pair. Classes order as `LinkClass` does: `SYS < NODE < PHB < PXB < PIX <
//!    NV1 < … < NV18`.
//! 2. **NUMA nodes** spanned, fewer better. GPUs whose NUMA node is unknown count
//!    together as one more node, so a node that reports none is neutral here.
//! 3. **Leftover**, better connected better: see [`Leftover`]. For the free whole
//!    GPUs left (listed, MIG disabled, not chosen) and each size 8, 4, 2 in turn:
//!    the best ring bottleneck of any subset of that size (none if fewer are left),
//!    then how many subsets reach it. Keeping the best big slot whole comes first,
//!    then keeping more ways to place it. A single-GPU or odd-sized request thus
//!    takes the GPUs that are worst connected to the rest: with NVLink-bridged pairs
//!    and one GPU of a pair busy, a 1-GPU request takes the orphan, not half of an
//!    intact pair (k8s-device-plugin#1193). The leftover is judged by the ring
//!    objective whatever this request's collective: ring is the default.
//! 4. **Lower indices**: the lexicographically lower sorted index list.
//!
//! No secondary "sum of ring hops" criterion is applied; the order above is the
//! whole order, so an independent oracle can check it.
//!
//! # Hard constraints, and why nothing fits
//!
//! Checked in this order; the first that leaves no candidate is the
//! [`NoFitReason`]: too few free GPUs; too few without MIG (MIG-enabled GPUs are
//! left out unless `allow_mig`; unknown MIG mode counts as disabled); too few with
//! the per-GPU memory (unknown memory never qualifies); no NUMA node holding `k`
//! eligible GPUs (`single_numa_node`: unknown-NUMA GPUs belong to no node and are
//! never chosen); no set whose every pair has at least `min_nvlink_level` NVLinks.
//!
//! # Exact for up to 16 GPUs, and cheap per node
//!
//! A [`NodeShape`] is built once per distinct topology (a [`ShapeCatalog`] shares
//! it between nodes). For `n ≤ 16` it tabulates, for every subset, the ring
//! bottleneck (max–min DP over Hamiltonian paths, `O(2^n · n²)`), the weakest pair
//! and the leftover measure (sum-over-subsets, `O(3 · 2^n · n)`), plus the NUMA
//! count: about 0.7 MiB at n = 16, a few KiB at n = 8. A query then ranks each of
//! the `C(m, k)` candidate sets with a few table lookups. Answers are cached per
//! shape by canonical (free mask, request): lock-free dense cells for nodes of up
//! to 8 GPUs without constraints (every free mask × size × collective, ≈ 440 KiB
//! per 8-GPU shape), a bounded hash map otherwise; a hit is a copy of the answer. Nodes above 16 GPUs use the documented heuristic
//! ([`heuristic`]) whose gap to the optimum [`heuristic::heuristic_gap`] measures.
//!
//! # Score
//!
//! `score = round(70·q + 20·l + 10·u)`, 0–100, where
//! * `q = rank(bottleneck) / rank(best bottleneck of any k whole GPUs of the empty
//!   node)` (`LinkClass::rank`, SYS = 1 … PIX = 5, XGMI-ROUTED = 6, XGMI = 7, NV18 = 25), 1 for a single GPU;
//! * `l` = mean over the sizes 8, 4, 2 that the GPUs left could still hold
//!   (at least that many left, and the free GPUs before placement had such a set)
//!   of `rank(best ring left) / rank(best ring before placement)`; 1 if no size applies;
//! * `u = (fewest NUMA nodes k GPUs of this node can span) / (NUMA nodes spanned)`.
//!
//! Each ratio is clamped to `0..=1`. A set as good as the node allows that leaves
//! the rest as connected as before scores 100.
//!
//! # Fragmentation
//!
//! [`stranded_free_gpus`] and [`full_nvlink_slots`] measure what the free GPUs of a
//! node can still serve.

mod cache;
mod choose;
mod constrained;
mod exact;
mod explain;
pub mod heuristic;
mod mask;
mod quality;
mod query;
mod request;
mod shape;
mod stranded;
mod tables;

pub use cache::{MAX_CACHED, MAX_DENSE_GPUS};
pub use choose::Picker;
pub use constrained::{MAX_CONSTRAINED_SUBSETS, constrained_subsets};
pub use heuristic::{GapReport, heuristic_gap};
pub use request::{
    DecidedBy, GpuSetChoice, Leftover, LeftoverSlot, Method, NoFitReason, SetPick, SetRequest,
};
pub use shape::{LinkMatrixKey, MAX_GPUS, NodeShape, ShapeCatalog, ShapeError, ShapeKey};
pub use stranded::{full_nvlink_slots, stranded_free_gpus};
pub use tables::{LEFTOVER_SIZES, MAX_EXACT_GPUS};

/// Chooses the GPU set for `request` among `free` on `shape`; see [`NodeShape::choose`].
pub fn choose(
    shape: &NodeShape,
    free: u32,
    request: &SetRequest,
) -> Result<GpuSetChoice, NoFitReason> {
    shape.choose(free, request)
}
