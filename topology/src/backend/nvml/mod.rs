//! The NVML discovery backend.
//!
//! NVML sits behind [`NvmlSource`], which takes a [`NvmlAnswers`] snapshot:
//! the raw answers gputopo needs, as plain serde data, and reads the
//! [`DynamicAnswers`]: what changes while the node runs. The agent's
//! `RealNvml` (`agent/src/nvml/`, the only code that links `nvml-wrapper`)
//! asks the driver; the agent keeps the snapshot (NVIDIA's device plugin
//! measured ~600 ms per GPU pair for NVLink queries) and reads the dynamic
//! state every scan, laying it over the snapshot ([`dynamic::overlay`]).
//! [`RecordedNvml`] replays a snapshot stored in a recording
//! (`crate::backend::recording`). [`facts_from_answers`] turns a snapshot into
//! [`NodeFacts`](crate::facts::NodeFacts), the same way for both.
//!
//! Here: the sources and the error (this file), the snapshot's types
//! (`answers.rs`), the dynamic state (`dynamic.rs`), and answers → facts
//! (`facts.rs`).
//!
//! # How answers become links
//!
//! * PCIe path of a pair: `nvmlDeviceGetTopologyCommonAncestor`, mapped as
//!   nvidia-smi does: `Internal` (two GPUs on one board, K80) and `Single` →
//!   PIX, `Multiple` → PXB, `HostBridge` → PHB, `Node` → NODE, `System` → SYS.
//! * Direct NVLinks of a pair: the active links of GPU a whose remote PCI bus id
//!   is GPU b's. Both ends are counted and the smaller count wins (a link is
//!   only usable when up at both ends); a GPU whose driver gave no remote PCI ids
//!   at all is left out of that comparison. Where the remote device type is not
//!   known (drivers before R450 lack `nvmlDeviceGetNvLinkRemoteDeviceType`), a
//!   remote bus id that is one of this node's GPUs counts as a GPU.
//! * NVSwitch: links whose remote device type is `Switch` reach the node's
//!   switch fabric. Two GPUs that both have active switch links are joined by
//!   `min(active switch links of a, of b)` NVLinks, added to any direct links
//!   between them. This is how nvidia-smi reports NV18 on HGX H100 (18 links per
//!   GPU, all to NVSwitch) and NV16 for a GPU with two links down. The rule
//!   assumes one switch fabric per node, true of every HGX/DGX board so far.
//! * A pair with neither NVLink nor a known common ancestor is an error
//!   ([`NvmlError::UnknownPath`]): gputopo does not invent a path.
//!
//! # NUMA node
//!
//! A GPU's NUMA node is the one NVML's memory affinity
//! (`nvmlDeviceGetMemoryAffinity`, scope NODE; nvidia-smi's "NUMA Affinity"
//! column) names when it names exactly one, else sysfs's `numa_node`.
//! `nvmlDeviceGetNumaNodeId` is recorded (`numaNodeId`) but not used for it: it
//! is the NUMA node *of the GPU's own memory* on coherent platforms
//! (Grace Hopper/Blackwell, nvidia-smi's "GPU NUMA ID" column) and N/A on x86,
//! not the CPU node the scheduler needs. CPU affinity is NVML's
//! `nvmlDeviceGetCpuAffinity`, else sysfs's `local_cpulist`.
//!
//! # NICs
//!
//! NVML names no NIC. The RDMA devices come from sysfs
//! (`/sys/class/infiniband`), each linked to every GPU by where both sit in
//! the PCI tree (`backend::pcie_path`), in `topo -m`'s words; where a GPU's or
//! a NIC's place is unknown, no NIC is published rather than a guessed link.
//!
//! # Optional and must-have answers
//!
//! A query that answers NotSupported/NotFound (or whose symbol this driver
//! lacks) leaves its field `None`. Any other failure of an optional query also
//! leaves it `None` and adds a line naming the call and GPU to
//! [`NvmlAnswers::warnings`]. Only the device count and the device handles are
//! must-haves: their failure is an error naming the call (and device index).

mod answers;
pub mod dynamic;
mod facts;

pub use answers::{
    DeviceAnswers, FABRIC_STATUS_SUCCESS, FabricAnswer, FabricState, MigDeviceAnswer,
    MigModeAnswer, NvLinkAnswer, NvmlAnswers, PairAnswer, RemoteDeviceType, TopologyLevel,
};
pub use dynamic::{DeviceState, DynamicAnswers, LinkState};
pub use facts::{
    canonical_or_lower, cuda_version_text, facts_from_answers, facts_from_nvml, uuid_text,
};

use gputopo_api::TopologySource;

/// An NVML failure, naming the call and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvmlError {
    /// The library could not be loaded or initialized (no driver, no GPU).
    #[error("NVML not available: {reason}")]
    Unavailable { reason: String },
    /// A system-level must-have query failed.
    #[error("{call} failed: {reason}")]
    System { call: &'static str, reason: String },
    /// A per-device must-have query failed.
    #[error("{call} failed for GPU {index}: {reason}")]
    Device {
        call: &'static str,
        index: u32,
        reason: String,
    },
    /// Neither NVLink nor a PCIe common ancestor is known for a pair.
    #[error(
        "GPUs {a} and {b}: no active NVLink joins them and nvmlDeviceGetTopologyCommonAncestor gave no answer, so how they are connected is unknown"
    )]
    UnknownPath { a: u32, b: u32 },
    /// A snapshot (usually a hand-edited recording) contradicts itself.
    #[error("NVML answers are inconsistent: {what}")]
    Inconsistent { what: String },
}

// ---------------------------------------------------------------------------
// Sources

/// Where NVML answers come from: the real library or a recording.
pub trait NvmlSource {
    /// All answers, asked now (slow on the live NVML: callers keep them).
    fn snapshot(&self) -> Result<NvmlAnswers, NvmlError>;

    /// What changes while the node runs (link states, GPUs that stopped
    /// answering, MIG devices, critical XIDs), asked now, for the GPUs and
    /// links of `known` (this source's earlier snapshot). An error means NVML
    /// itself did not answer. By default, what [`NvmlSource::snapshot`]
    /// holds: how a recording replays it.
    fn dynamic_state(&self, known: &NvmlAnswers) -> Result<DynamicAnswers, NvmlError> {
        let _ = known;
        Ok(DynamicAnswers::from_answers(&self.snapshot()?))
    }

    /// What `NodeFacts.source` should say for facts built from this source.
    fn topology_source(&self) -> TopologySource {
        TopologySource::Nvml
    }
}

/// Answers replayed from a recording.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedNvml {
    pub answers: NvmlAnswers,
}

impl NvmlSource for RecordedNvml {
    fn snapshot(&self) -> Result<NvmlAnswers, NvmlError> {
        Ok(self.answers.clone())
    }

    fn topology_source(&self) -> TopologySource {
        TopologySource::Fixture
    }
}
