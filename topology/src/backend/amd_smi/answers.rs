//! The snapshot: everything gputopo asks AMD SMI (or reads from its tools' text), as plain serde data.

use serde::{Deserialize, Serialize};

/// Everything gputopo asks AMD SMI, answered once: what a recording stores
/// under `amdSmi:`. `None` means the source did not say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AmdSmiAnswers {
    /// `amdsmi_get_gpu_driver_info` (amdgpu's version).
    #[serde(default)]
    pub driver_version: Option<String>,
    /// `amdsmi_get_lib_version`, `major.minor.release`.
    #[serde(default)]
    pub library_version: Option<String>,
    /// One entry per GPU, in the tool's enumeration order (`amd-smi`'s GPU ID,
    /// `rocm-smi`'s `GPU[i]`).
    pub devices: Vec<AmdDeviceAnswers>,
    /// One entry per unordered pair `a < b` the source described.
    #[serde(default)]
    pub pairs: Vec<AmdPairAnswer>,
    /// Optional queries that failed with something other than "not supported".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AmdDeviceAnswers {
    pub index: u32,
    /// `amdsmi_get_gpu_device_uuid`.
    #[serde(default)]
    pub uuid: Option<String>,
    /// `amdsmi_get_gpu_asic_info` market name, e.g. `AMD Instinct MI300X`.
    #[serde(default)]
    pub name: Option<String>,
    /// `amdsmi_get_gpu_memory_total` (VRAM), MiB.
    #[serde(default, rename = "memoryMiB")]
    pub memory_mib: Option<u64>,
    /// `amdsmi_get_gpu_device_bdf`, canonical `00000000:0c:00.0`.
    #[serde(default)]
    pub pci_bus_id: Option<String>,
    /// `amdsmi_topo_get_numa_node_number`; rocm-smi's `(Topology) Numa Node`.
    /// Negative (no NUMA) is stored as `None`.
    #[serde(default)]
    pub numa_node: Option<i32>,
}

/// The link type AMD's tools name (`amdsmi_io_link_type_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum AmdLinkType {
    Xgmi,
    Pcie,
}

/// What the source said about GPUs `a < b`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AmdPairAnswer {
    pub a: u32,
    pub b: u32,
    /// `amdsmi_topo_get_link_type` type; `None` when unknown.
    #[serde(default)]
    pub link_type: Option<AmdLinkType>,
    /// `amdsmi_topo_get_link_type` hops.
    #[serde(default)]
    pub hops: Option<u32>,
    /// `amdsmi_topo_get_link_weight`.
    #[serde(default)]
    pub weight: Option<u64>,
    /// `amdsmi_get_minmax_bandwidth_between_processors`, MB/s (XGMI, 1 hop only).
    #[serde(default, rename = "minBandwidthMBps")]
    pub min_bandwidth_mbps: Option<u64>,
    #[serde(default, rename = "maxBandwidthMBps")]
    pub max_bandwidth_mbps: Option<u64>,
}
