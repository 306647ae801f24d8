//! The side-by-side benchmark's parts (see `gputopo-sidebyside.rs`).

pub mod analyze;
pub mod audit;
pub mod cluster;
pub mod progress;
pub mod run;
pub mod topo;
pub mod which;
pub mod workload;
