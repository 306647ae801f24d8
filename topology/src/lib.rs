//! gputopo-topology: what is pure in discovering how a node's GPUs are wired.
//!
//! Text, recordings and NVML answers in; `GpuTopology.spec`, its link health
//! and the node labels out. Nothing here loads the NVML library, talks to
//! Kubernetes or needs an async runtime: the agent (`gputopo-agent`) adds the
//! live NVML and the publishing, the CLI (`gputopo`) and the test environment
//! use this crate alone.
//!
//! Data flows one way: a backend fills [`facts::NodeFacts`], [`normalize`]
//! makes `GpuTopology.spec` of it, [`health`] judges the NVLinks, [`labels`]
//! and [`object`] shape what is published. [`discover`] is the one entry point
//! over the sources that are files (saved `nvidia-smi` outputs, recordings).

pub mod backend;
pub mod clique;
pub mod discover;
pub mod dra_slice;
pub mod facts;
pub mod health;
pub mod labels;
pub mod normalize;
pub mod object;
pub mod parse;
pub mod pci;
