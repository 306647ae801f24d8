//! Discovery backends. Each turns what it can see into [`crate::facts::NodeFacts`].
//!
//! All of them pure here: `nvidia_smi` reads saved texts, `nvml` turns NVML's
//! answers (from any [`nvml::NvmlSource`]; the live one is in the agent) into
//! facts, `sysfs` reads a sysfs tree under a root or a recorded copy of it,
//! `recording` reads, writes and replays recordings.

pub mod amd_smi;
pub mod nvidia_smi;
pub mod nvml;
pub mod pcie_path;
pub mod recording;
pub mod sysfs;
