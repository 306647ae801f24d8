//! Discovery backends. Each turns what it can see into [`crate::facts::NodeFacts`].

pub mod nvidia_smi;
pub mod nvml;
pub mod recording;
pub mod sysfs;
