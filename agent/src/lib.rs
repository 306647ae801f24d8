//! gputopo-agent as a library: discovery backends, the normalizer, link health
//! and labels. The binary (`src/main.rs`) is a thin CLI over this.
//!
//! Data flows one way: a backend fills [`facts::NodeFacts`], [`normalize`]
//! makes `GpuTopology.spec` of it, [`health`] judges the NVLinks, [`labels`]
//! and [`object`] shape what is published.

pub mod backend;
pub mod daemon;
pub mod discover;
pub mod facts;
pub mod health;
pub mod labels;
pub mod normalize;
pub mod object;
pub mod parse;
pub mod pci;
pub mod publish;
pub mod serve;
