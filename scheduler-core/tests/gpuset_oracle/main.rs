//! The GPU-set choice checked against an independent brute-force oracle, and on
//! real node shapes written out by hand from the recorded `nvidia-smi topo -m`
//! matrices under `fixtures/nvidia/`.
//!
//! The oracle shares no code with the crate: it enumerates every k-subset, finds
//! each subset's best ring by depth-first search over the orders of its GPUs
//! (a permutation enumeration, cut where it cannot beat the best found), and
//! ranks sets by the documented order: bottleneck, NUMA nodes, leftover (sizes
//! 8, 4, 2: best ring of the GPUs left, then how many subsets reach it), lower
//! index list.
//!
//! One test binary; the modules split it by what they hold: test topologies
//! (`topo`), named real node shapes (`shapes`), the oracle (`oracle`), random
//! cases against it (`properties`), fixed XGMI and 16-GPU shapes
//! (`xgmi_and_16_gpus`), hand-checked choices on real shapes (`real_shapes`),
//! the shape API around the choice (`shape_api`) and the heuristic
//! (`heuristic`).

mod heuristic;
mod oracle;
mod properties;
mod real_shapes;
mod shape_api;
mod shapes;
mod topo;
mod xgmi_and_16_gpus;
