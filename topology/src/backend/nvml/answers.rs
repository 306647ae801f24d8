//! The snapshot: everything gputopo asks NVML, as plain serde data.

use gputopo_api::LinkType;
use serde::{Deserialize, Serialize};

/// The fabric status text when the GPU registered with the fabric manager.
pub const FABRIC_STATUS_SUCCESS: &str = "Success";

/// Everything gputopo asks NVML, answered once. This is exactly what a
/// recording stores under `nvml:`; `None` means NVML did not say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NvmlAnswers {
    /// `nvmlSystemGetDriverVersion`, e.g. `580.126.20`.
    #[serde(default)]
    pub driver_version: Option<String>,
    /// `nvmlSystemGetCudaDriverVersion_v2` as NVML gives it: 1000 × major +
    /// 10 × minor (`13000` is CUDA 13.0).
    #[serde(default)]
    pub cuda_driver_version: Option<i32>,
    /// `nvmlSystemGetNVMLVersion`.
    #[serde(default)]
    pub nvml_version: Option<String>,
    /// One entry per device handle, in NVML index order.
    pub devices: Vec<DeviceAnswers>,
    /// One entry per unordered pair `a < b`.
    #[serde(default)]
    pub pairs: Vec<PairAnswer>,
    /// Optional queries that failed with something other than "not supported".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// NVML's answers about one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceAnswers {
    /// `nvmlDeviceGetIndex` order: the index passed to `nvmlDeviceGetHandleByIndex_v2`.
    pub index: u32,
    #[serde(default)]
    pub uuid: Option<String>,
    /// `nvmlDeviceGetName`, e.g. `NVIDIA H100 80GB HBM3`.
    #[serde(default)]
    pub name: Option<String>,
    /// Total framebuffer, MiB (`nvmlDeviceGetMemoryInfo`).
    #[serde(default, rename = "memoryMiB")]
    pub memory_mib: Option<u64>,
    /// Canonical `00000000:17:00.0`.
    #[serde(default)]
    pub pci_bus_id: Option<String>,
    /// `nvmlDeviceGetNumaNodeId`: the NUMA node of the GPU's memory on coherent
    /// platforms (nvidia-smi's "GPU NUMA ID"); recorded, not used as the GPU's node.
    #[serde(default)]
    pub numa_node_id: Option<u32>,
    /// NUMA nodes near the GPU, a nodelist (`0`, `0-3`), from
    /// `nvmlDeviceGetMemoryAffinity` with scope NODE.
    #[serde(default)]
    pub memory_affinity: Option<String>,
    /// CPUs near the GPU, a cpulist, from `nvmlDeviceGetCpuAffinity`.
    #[serde(default)]
    pub cpu_affinity: Option<String>,
    #[serde(default)]
    pub mig_mode: Option<MigModeAnswer>,
    /// The links NVML knows for this GPU; `None` when it reports none (no NVLink).
    #[serde(default)]
    pub nvlinks: Option<Vec<NvLinkAnswer>>,
    #[serde(default)]
    pub fabric: Option<FabricAnswer>,
    /// Why the GPU stopped answering NVML (GPU_IS_LOST, no handle any
    /// more), when it did. The live NVML reads it every scan; a recording
    /// may set it to replay a GPU falling off the bus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<String>,
    /// The GPU's MIG devices (`nvmlDeviceGetMigDeviceHandleByIndex`) while
    /// MIG mode is on: how a MIG UUID the kubelet names finds its GPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_devices: Vec<MigDeviceAnswer>,
    /// Critical XID errors the driver reported for this GPU
    /// (`nvmlEventTypeXidCriticalError`), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xid_errors: Vec<u64>,
}

/// One MIG device of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigDeviceAnswer {
    /// `nvmlDeviceGetUUID` of the MIG device handle: `MIG-…`.
    pub uuid: String,
}

/// `nvmlDeviceGetMigMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigModeAnswer {
    pub current: bool,
    pub pending: bool,
}

/// One NVLink of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NvLinkAnswer {
    pub link: u32,
    /// `nvmlDeviceGetNvLinkState`.
    pub active: bool,
    /// `nvmlDeviceGetNvLinkRemotePciInfo_v2`, canonical form.
    #[serde(default)]
    pub remote_pci_bus_id: Option<String>,
    /// `nvmlDeviceGetNvLinkRemoteDeviceType` (R450+).
    #[serde(default)]
    pub remote_device_type: Option<RemoteDeviceType>,
}

/// What NVML says is at the far end of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RemoteDeviceType {
    Gpu,
    /// An IBM POWER9 NPU: NVLink to the CPU.
    Ibmnpu,
    Switch,
    Unknown,
}

/// NVML's common PCIe ancestor of two GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TopologyLevel {
    Internal,
    Single,
    Multiple,
    HostBridge,
    Node,
    System,
}

impl TopologyLevel {
    /// The `nvidia-smi topo -m` class of this level (see the module docs).
    pub fn link_type(self) -> LinkType {
        match self {
            TopologyLevel::Internal | TopologyLevel::Single => LinkType::Pix,
            TopologyLevel::Multiple => LinkType::Pxb,
            TopologyLevel::HostBridge => LinkType::Phb,
            TopologyLevel::Node => LinkType::Node,
            TopologyLevel::System => LinkType::Sys,
        }
    }
}

/// The common ancestor of GPUs `a < b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PairAnswer {
    pub a: u32,
    pub b: u32,
    #[serde(default)]
    pub common_ancestor: Option<TopologyLevel>,
}

/// `nvmlDeviceGetGpuFabricInfoV`: membership in an NVLink fabric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FabricAnswer {
    pub state: FabricState,
    /// [`FABRIC_STATUS_SUCCESS`], or NVML's error text for the registration.
    pub status: String,
    /// The cluster UUID as `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`; all zeros on
    /// single-node NVSwitch systems.
    #[serde(default)]
    pub cluster_uuid: Option<String>,
    #[serde(default)]
    pub clique_id: Option<u32>,
    #[serde(default)]
    pub health_mask: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FabricState {
    NotSupported,
    NotStarted,
    InProgress,
    Completed,
}
