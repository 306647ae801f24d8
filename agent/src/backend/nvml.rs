//! The NVML discovery backend.
//!
//! NVML sits behind [`NvmlSource`], whose one job is to take a [`NvmlAnswers`]
//! snapshot: the raw answers gputopo needs, as plain serde data. [`RealNvml`]
//! asks the driver (once: NVIDIA's device plugin measured ~600 ms per GPU pair
//! for NVLink queries, so the snapshot is cached and nothing else in the agent
//! calls NVML again); [`RecordedNvml`] replays a snapshot stored in a recording
//! (`crate::backend::recording`). [`facts_from_answers`] turns a snapshot into
//! [`NodeFacts`], the same way for both.
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
//! # Optional and must-have answers
//!
//! A query that answers NotSupported/NotFound (or whose symbol this driver
//! lacks) leaves its field `None`. Any other failure of an optional query also
//! leaves it `None` and adds a line naming the call and GPU to
//! [`NvmlAnswers::warnings`]. Only the device count and the device handles are
//! must-haves: their failure is an error naming the call (and device index).

use crate::backend::sysfs::{
    SysfsSource, bits_from_mask, canonical_pci_bus_id, format_cpulist, parse_cpulist,
};
use crate::facts::{GpuFacts, NodeFacts, NvLinkFact, PairFact, RemoteEnd};
use gputopo_api::{GpuFabric, LinkClass, LinkType, TopologySource};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::OnceLock;

/// NVML's link index bound (`NVML_NVLINK_MAX_LINKS`): 18 on Hopper/Blackwell.
pub const MAX_NVLINKS: u32 = nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS;

/// The fabric status text when the GPU registered with the fabric manager.
pub const FABRIC_STATUS_SUCCESS: &str = "Success";

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
// The snapshot

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

impl From<nvml_wrapper::enum_wrappers::device::TopologyLevel> for TopologyLevel {
    fn from(level: nvml_wrapper::enum_wrappers::device::TopologyLevel) -> Self {
        use nvml_wrapper::enum_wrappers::device::TopologyLevel as W;
        match level {
            W::Internal => TopologyLevel::Internal,
            W::Single => TopologyLevel::Single,
            W::Multiple => TopologyLevel::Multiple,
            W::HostBridge => TopologyLevel::HostBridge,
            W::Node => TopologyLevel::Node,
            W::System => TopologyLevel::System,
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

const NIL_UUID: &str = "00000000-0000-0000-0000-000000000000";

// ---------------------------------------------------------------------------
// Sources

/// Where NVML answers come from: the real library or a recording.
pub trait NvmlSource {
    /// All answers, taken once.
    fn snapshot(&self) -> Result<NvmlAnswers, NvmlError>;

    /// What `NodeFacts.source` should say for facts built from this source.
    fn topology_source(&self) -> TopologySource {
        TopologySource::Nvml
    }
}

/// The NVML library, loaded at run time (`libnvidia-ml.so.1`).
pub struct RealNvml {
    nvml: nvml_wrapper::Nvml,
    cache: OnceLock<NvmlAnswers>,
}

impl std::fmt::Debug for RealNvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealNvml")
            .field("snapshot_taken", &self.cache.get().is_some())
            .finish()
    }
}

impl RealNvml {
    /// Loads `libnvidia-ml.so.1` and initializes NVML. On a machine without the
    /// driver this is [`NvmlError::Unavailable`] (`NVML not available: …`), never a panic.
    pub fn init() -> Result<RealNvml, NvmlError> {
        Self::from_init(nvml_wrapper::Nvml::init())
    }

    /// As [`RealNvml::init`], with the library at a given path (drivers
    /// installed outside the loader path, e.g. `/run/nvidia/driver/...`).
    pub fn init_with_library(path: &Path) -> Result<RealNvml, NvmlError> {
        Self::from_init(
            nvml_wrapper::Nvml::builder()
                .lib_path(path.as_os_str())
                .init(),
        )
    }

    fn from_init(
        result: Result<nvml_wrapper::Nvml, nvml_wrapper::error::NvmlError>,
    ) -> Result<RealNvml, NvmlError> {
        match result {
            Ok(nvml) => Ok(RealNvml {
                nvml,
                cache: OnceLock::new(),
            }),
            Err(e) => Err(NvmlError::Unavailable {
                reason: unavailable_reason(&e),
            }),
        }
    }
}

/// The reason text after `NVML not available: `.
fn unavailable_reason(e: &nvml_wrapper::error::NvmlError) -> String {
    use nvml_wrapper::error::NvmlError as W;
    match e {
        // libloading's own text names the file: "libnvidia-ml.so.1: cannot open shared object file: ...".
        W::LibloadingError(inner) => format!("cannot load the NVML library: {inner}"),
        W::FailedToLoadSymbol(s) => format!("nvmlInit_v2 is missing from the library: {s}"),
        other => format!("nvmlInit_v2 failed: {other}"),
    }
}

impl NvmlSource for RealNvml {
    fn snapshot(&self) -> Result<NvmlAnswers, NvmlError> {
        if let Some(answers) = self.cache.get() {
            return Ok(answers.clone());
        }
        let answers = live::snapshot(&self.nvml)?;
        Ok(self.cache.get_or_init(|| answers).clone())
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

// ---------------------------------------------------------------------------
// Answers -> facts

/// Snapshots `src` and builds facts; `source` is `src.topology_source()`.
pub fn facts_from_nvml(
    src: &dyn NvmlSource,
    sysfs: &dyn SysfsSource,
) -> Result<NodeFacts, NvmlError> {
    facts_from_answers(&src.snapshot()?, sysfs, src.topology_source())
}

/// Turns a snapshot (plus sysfs, for what NVML lacks) into [`NodeFacts`].
/// Pure: no NVML, no clock; sysfs is whatever `sysfs` answers.
pub fn facts_from_answers(
    answers: &NvmlAnswers,
    sysfs: &dyn SysfsSource,
    source: TopologySource,
) -> Result<NodeFacts, NvmlError> {
    let mut devices: Vec<&DeviceAnswers> = answers.devices.iter().collect();
    devices.sort_by_key(|d| d.index);
    for w in devices.windows(2) {
        if w[0].index == w[1].index {
            return Err(NvmlError::Inconsistent {
                what: format!("two devices have index {}", w[0].index),
            });
        }
    }

    // Canonical bus id -> GPU index, to resolve NVLink remote ends.
    let mut by_bus: HashMap<String, u32> = HashMap::new();
    for d in &devices {
        let Some(bus) = d.pci_bus_id.as_deref() else {
            continue;
        };
        let bus = canonical_or_lower(bus);
        if let Some(other) = by_bus.insert(bus.clone(), d.index) {
            return Err(NvmlError::Inconsistent {
                what: format!("GPUs {other} and {} both have PCI bus id {bus}", d.index),
            });
        }
    }

    let gpus: Vec<GpuFacts> = devices
        .iter()
        .map(|d| gpu_facts(d, sysfs, &by_bus))
        .collect();

    // Per GPU (in `devices` order): direct links to each peer, active switch
    // links, and whether the driver gave remote ids at all (see the module docs).
    struct LinkCounts {
        direct: BTreeMap<u32, u32>,
        switch: u32,
        knows_remotes: bool,
    }
    let counts: Vec<LinkCounts> = devices
        .iter()
        .map(|d| {
            let mut c = LinkCounts {
                direct: BTreeMap::new(),
                switch: 0,
                knows_remotes: false,
            };
            for link in d.nvlinks.iter().flatten().filter(|l| l.active) {
                let remote_gpu = link
                    .remote_pci_bus_id
                    .as_deref()
                    .and_then(|bus| by_bus.get(&canonical_or_lower(bus)).copied());
                c.knows_remotes |= link.remote_pci_bus_id.is_some();
                match link.remote_device_type {
                    Some(RemoteDeviceType::Switch) => c.switch += 1,
                    Some(RemoteDeviceType::Ibmnpu) => {}
                    Some(RemoteDeviceType::Gpu | RemoteDeviceType::Unknown) | None => {
                        if let Some(peer) = remote_gpu.filter(|p| *p != d.index) {
                            *c.direct.entry(peer).or_default() += 1;
                        }
                    }
                }
            }
            c
        })
        .collect();

    let known: HashSet<u32> = devices.iter().map(|d| d.index).collect();
    let mut ancestors: HashMap<(u32, u32), TopologyLevel> = HashMap::new();
    for p in &answers.pairs {
        if p.a == p.b {
            return Err(NvmlError::Inconsistent {
                what: format!("pair entry joins GPU {} to itself", p.a),
            });
        }
        if !known.contains(&p.a) || !known.contains(&p.b) {
            return Err(NvmlError::Inconsistent {
                what: format!(
                    "pair entry {}-{} names a GPU with no device entry",
                    p.a, p.b
                ),
            });
        }
        let key = (p.a.min(p.b), p.a.max(p.b));
        if let Some(level) = p.common_ancestor
            && ancestors.insert(key, level).is_some_and(|old| old != level)
        {
            return Err(NvmlError::Inconsistent {
                what: format!(
                    "pair {}-{} has two different common ancestors",
                    key.0, key.1
                ),
            });
        }
    }

    let mut gpu_pairs = Vec::new();
    for (i, (da, ca)) in devices.iter().zip(&counts).enumerate() {
        for (db, cb) in devices[i + 1..].iter().zip(&counts[i + 1..]) {
            let (a, b) = (da.index, db.index);
            let ab = ca.direct.get(&b).copied().unwrap_or(0);
            let ba = cb.direct.get(&a).copied().unwrap_or(0);
            let direct = match (ca.knows_remotes, cb.knows_remotes) {
                (true, true) => ab.min(ba),
                (true, false) => ab,
                (false, true) => ba,
                (false, false) => 0,
            };
            let switched = if ca.switch > 0 && cb.switch > 0 {
                ca.switch.min(cb.switch)
            } else {
                0
            };
            let nvlinks = direct + switched;
            let class = if nvlinks > 0 {
                LinkClass::Nv(nvlinks)
            } else {
                match ancestors.get(&(a, b)) {
                    Some(level) => LinkClass::new(level.link_type(), 0),
                    None => return Err(NvmlError::UnknownPath { a, b }),
                }
            };
            gpu_pairs.push(PairFact::new(a, b, class));
        }
    }

    Ok(NodeFacts {
        source,
        driver_version: answers.driver_version.clone(),
        cuda_version: answers.cuda_driver_version.and_then(cuda_version_text),
        gpus,
        gpu_pairs,
        nics: Vec::new(),
    })
}

fn gpu_facts(
    d: &DeviceAnswers,
    sysfs: &dyn SysfsSource,
    by_bus: &HashMap<String, u32>,
) -> GpuFacts {
    let bus = d.pci_bus_id.as_deref().map(canonical_or_lower);
    let nvml_numa = d
        .memory_affinity
        .as_deref()
        .and_then(|list| parse_cpulist(list).ok())
        .and_then(|nodes| match nodes.as_slice() {
            [one] => i32::try_from(*one).ok(),
            _ => None,
        });
    let numa_node = nvml_numa.or_else(|| bus.as_deref().and_then(|b| sysfs.numa_node(b)));
    let nvml_cpus = d
        .cpu_affinity
        .as_deref()
        .and_then(|list| parse_cpulist(list).ok())
        .filter(|cpus| !cpus.is_empty())
        .map(format_cpulist);
    let cpu_affinity = nvml_cpus.or_else(|| bus.as_deref().and_then(|b| sysfs.local_cpulist(b)));
    GpuFacts {
        index: d.index,
        uuid: d.uuid.clone(),
        product: d.name.clone(),
        memory_mib: d.memory_mib,
        pci_bus_id: bus,
        numa_node,
        cpu_affinity,
        mig_enabled: d.mig_mode.map(|m| m.current),
        fabric: d.fabric.as_ref().and_then(gpu_fabric),
        nvlinks: d.nvlinks.as_ref().map(|links| {
            links
                .iter()
                .map(|l| NvLinkFact {
                    link: l.link,
                    active: l.active,
                    speed_gbps: None,
                    remote: remote_end(l, by_bus),
                })
                .collect()
        }),
    }
}

fn remote_end(link: &NvLinkAnswer, by_bus: &HashMap<String, u32>) -> Option<RemoteEnd> {
    let bus = link.remote_pci_bus_id.as_deref().map(canonical_or_lower);
    match link.remote_device_type {
        Some(RemoteDeviceType::Switch) => Some(RemoteEnd::Nvswitch { pci_bus_id: bus }),
        Some(RemoteDeviceType::Ibmnpu) => Some(RemoteEnd::Cpu { pci_bus_id: bus }),
        Some(RemoteDeviceType::Gpu) => bus.map(|pci_bus_id| RemoteEnd::Gpu { pci_bus_id }),
        Some(RemoteDeviceType::Unknown) | None => bus
            .filter(|b| by_bus.contains_key(b))
            .map(|pci_bus_id| RemoteEnd::Gpu { pci_bus_id }),
    }
}

/// A fabric membership worth publishing: registration completed and a real
/// (non-nil) cluster UUID, as GPU Feature Discovery requires for its clique label.
fn gpu_fabric(f: &FabricAnswer) -> Option<GpuFabric> {
    if f.state != FabricState::Completed || f.status != FABRIC_STATUS_SUCCESS {
        return None;
    }
    let cluster_uuid = f.cluster_uuid.clone().filter(|u| u != NIL_UUID);
    cluster_uuid.as_ref()?;
    Some(GpuFabric {
        cluster_uuid,
        clique_id: f.clique_id,
    })
}

/// `12040` → `12.4`, as nvidia-smi's "CUDA Version".
pub fn cuda_version_text(v: i32) -> Option<String> {
    (v > 0).then(|| format!("{}.{}", v / 1000, (v % 1000) / 10))
}

fn canonical_or_lower(bus: &str) -> String {
    canonical_pci_bus_id(bus).unwrap_or_else(|| bus.trim().to_ascii_lowercase())
}

/// A 16-byte UUID as `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

// ---------------------------------------------------------------------------
// The live snapshot: the only code that calls NVML.

mod live {
    use super::*;
    use nvml_wrapper::error::{NvmlError as W, nvml_try};
    use nvml_wrapper::{Device, Nvml};
    use nvml_wrapper_sys::bindings as sys;

    /// Words in the CPU/NUMA masks we ask for: 64 × 64 = 4096 CPUs.
    const MASK_WORDS: usize = 64;

    /// Whether an error means "this GPU/driver has no such answer" (→ `None`, quietly).
    fn absent(e: &W) -> bool {
        matches!(
            e,
            W::NotSupported | W::NotFound | W::FunctionNotFound | W::FailedToLoadSymbol(_)
        )
    }

    /// `Some` on success; `None` on "absent"; `None` plus a warning otherwise.
    fn optional<T>(
        result: Result<T, W>,
        call: &str,
        what: &str,
        warnings: &mut Vec<String>,
    ) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) if absent(&e) => None,
            Err(e) => {
                warnings.push(format!("{call} ({what}): {e}"));
                None
            }
        }
    }

    pub(super) fn snapshot(nvml: &Nvml) -> Result<NvmlAnswers, NvmlError> {
        let mut warnings = Vec::new();
        let count = nvml.device_count().map_err(|e| NvmlError::System {
            call: "nvmlDeviceGetCount_v2",
            reason: e.to_string(),
        })?;
        let driver_version = optional(
            nvml.sys_driver_version(),
            "nvmlSystemGetDriverVersion",
            "system",
            &mut warnings,
        );
        let cuda_driver_version = optional(
            nvml.sys_cuda_driver_version(),
            "nvmlSystemGetCudaDriverVersion_v2",
            "system",
            &mut warnings,
        );
        let nvml_version = optional(
            nvml.sys_nvml_version(),
            "nvmlSystemGetNVMLVersion",
            "system",
            &mut warnings,
        );

        let mut handles = Vec::new();
        for index in 0..count {
            let device = nvml.device_by_index(index).map_err(|e| NvmlError::Device {
                call: "nvmlDeviceGetHandleByIndex_v2",
                index,
                reason: e.to_string(),
            })?;
            handles.push((index, device));
        }

        let devices = handles
            .iter()
            .map(|(index, device)| device_answers(nvml, *index, device, &mut warnings))
            .collect();

        let mut pairs = Vec::new();
        for (i, (a, da)) in handles.iter().enumerate() {
            for (b, db) in &handles[i + 1..] {
                let level = optional(
                    common_ancestor(nvml, da, db),
                    "nvmlDeviceGetTopologyCommonAncestor",
                    &format!("GPUs {a} and {b}"),
                    &mut warnings,
                );
                pairs.push(PairAnswer {
                    a: *a,
                    b: *b,
                    common_ancestor: level,
                });
            }
        }

        Ok(NvmlAnswers {
            driver_version,
            cuda_driver_version,
            nvml_version,
            devices,
            pairs,
            warnings,
        })
    }

    fn device_answers(
        nvml: &Nvml,
        index: u32,
        d: &Device<'_>,
        warnings: &mut Vec<String>,
    ) -> DeviceAnswers {
        let what = format!("GPU {index}");
        let w = warnings;
        DeviceAnswers {
            index,
            uuid: optional(d.uuid(), "nvmlDeviceGetUUID", &what, w),
            name: optional(d.name(), "nvmlDeviceGetName", &what, w),
            memory_mib: optional(memory_total(nvml, d), "nvmlDeviceGetMemoryInfo", &what, w)
                .map(|bytes| bytes / (1024 * 1024)),
            pci_bus_id: optional(d.pci_info(), "nvmlDeviceGetPciInfo_v3", &what, w)
                .map(|p| canonical_or_lower(&p.bus_id)),
            numa_node_id: optional(d.numa_node_id(), "nvmlDeviceGetNumaNodeId", &what, w),
            memory_affinity: optional(memory_affinity(d), "nvmlDeviceGetMemoryAffinity", &what, w)
                .filter(|s| !s.is_empty()),
            cpu_affinity: optional(cpu_affinity(d), "nvmlDeviceGetCpuAffinity", &what, w)
                .filter(|s| !s.is_empty()),
            mig_mode: optional(d.mig_mode(), "nvmlDeviceGetMigMode", &what, w).map(|m| {
                MigModeAnswer {
                    current: m.current == sys::NVML_DEVICE_MIG_ENABLE,
                    pending: m.pending == sys::NVML_DEVICE_MIG_ENABLE,
                }
            }),
            nvlinks: nvlinks(nvml, index, d, w),
            fabric: optional(fabric(nvml, d), "nvmlDeviceGetGpuFabricInfoV", &what, w),
        }
    }

    /// Total framebuffer bytes: the safe `_v2` call, or the v1 call on drivers
    /// older than R510 that lack `_v2`.
    fn memory_total(nvml: &Nvml, d: &Device<'_>) -> Result<u64, W> {
        match d.memory_info() {
            Ok(info) => Ok(info.total),
            Err(W::FailedToLoadSymbol(_)) => {
                let sym = nvml
                    .lib()
                    .nvmlDeviceGetMemoryInfo
                    .as_ref()
                    .map_err(|e| W::FailedToLoadSymbol(e.to_string()))?;
                let mut info = sys::nvmlMemory_t {
                    total: 0,
                    free: 0,
                    used: 0,
                };
                // SAFETY: `d` borrows the live `Nvml`, so its handle is valid;
                // `info` is a writable nvmlMemory_t, the type nvml.h declares for
                // this symbol, which nvml-wrapper-sys resolved with that signature.
                let rc = unsafe { sym(d.handle(), &mut info) };
                nvml_try(rc)?;
                Ok(info.total)
            }
            Err(e) => Err(e),
        }
    }

    #[cfg(target_os = "linux")]
    fn cpu_affinity(d: &Device<'_>) -> Result<String, W> {
        Ok(format_cpulist(bits_from_mask(&d.cpu_affinity(MASK_WORDS)?)))
    }

    #[cfg(target_os = "linux")]
    fn memory_affinity(d: &Device<'_>) -> Result<String, W> {
        let words = d.memory_affinity(MASK_WORDS, sys::NVML_AFFINITY_SCOPE_NODE)?;
        Ok(format_cpulist(bits_from_mask(&words)))
    }

    #[cfg(target_os = "linux")]
    fn common_ancestor(nvml: &Nvml, a: &Device<'_>, b: &Device<'_>) -> Result<TopologyLevel, W> {
        nvml.topology_common_ancestor(a, b).map(TopologyLevel::from)
    }

    // NVML's topology and affinity queries exist on Linux only; elsewhere
    // (a developer's laptop building the crate) they are "not supported".
    #[cfg(not(target_os = "linux"))]
    fn cpu_affinity(_: &Device<'_>) -> Result<String, W> {
        Err(W::NotSupported)
    }

    #[cfg(not(target_os = "linux"))]
    fn memory_affinity(_: &Device<'_>) -> Result<String, W> {
        Err(W::NotSupported)
    }

    #[cfg(not(target_os = "linux"))]
    fn common_ancestor(_: &Nvml, _: &Device<'_>, _: &Device<'_>) -> Result<TopologyLevel, W> {
        Err(W::NotSupported)
    }

    /// Every link NVML answers for: a link index it rejects (NotSupported,
    /// InvalidArg) does not exist on this GPU. `None` when no link answers.
    fn nvlinks(
        nvml: &Nvml,
        index: u32,
        d: &Device<'_>,
        warnings: &mut Vec<String>,
    ) -> Option<Vec<NvLinkAnswer>> {
        let mut links = Vec::new();
        for link in 0..MAX_NVLINKS {
            let what = format!("GPU {index} link {link}");
            let wrapper = d.link_wrapper_for(link);
            let active = match wrapper.is_active() {
                Ok(active) => active,
                Err(e) if absent(&e) || matches!(e, W::InvalidArg) => continue,
                Err(e) => {
                    warnings.push(format!("nvmlDeviceGetNvLinkState ({what}): {e}"));
                    continue;
                }
            };
            // The far end of a link that is down may not answer; that is no news.
            let mut quiet = Vec::new();
            let w = if active { &mut *warnings } else { &mut quiet };
            let remote_pci_bus_id = optional(
                wrapper.remote_pci_info(),
                "nvmlDeviceGetNvLinkRemotePciInfo_v2",
                &what,
                w,
            )
            .map(|p| canonical_or_lower(&p.bus_id));
            let remote_device_type = optional(
                remote_device_type(nvml, d, link),
                "nvmlDeviceGetNvLinkRemoteDeviceType",
                &what,
                w,
            );
            links.push(NvLinkAnswer {
                link,
                active,
                remote_pci_bus_id,
                remote_device_type,
            });
        }
        (!links.is_empty()).then_some(links)
    }

    /// `nvmlDeviceGetNvLinkRemoteDeviceType` through the raw symbol:
    /// nvml-wrapper 0.13's `NvLink::remote_device_type` passes a pointer to a
    /// temporary and always returns `Unknown`.
    fn remote_device_type(nvml: &Nvml, d: &Device<'_>, link: u32) -> Result<RemoteDeviceType, W> {
        let sym = nvml
            .lib()
            .nvmlDeviceGetNvLinkRemoteDeviceType
            .as_ref()
            .map_err(|e| W::FailedToLoadSymbol(e.to_string()))?;
        let mut kind: sys::nvmlIntNvLinkDeviceType_t =
            sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
        // SAFETY: `d` borrows the live `Nvml`, so its handle is valid; `kind` is a
        // writable nvmlIntNvLinkDeviceType_t as nvml.h declares; the symbol was
        // resolved by nvml-wrapper-sys with nvml.h's signature.
        let rc = unsafe { sym(d.handle(), link, &mut kind) };
        nvml_try(rc)?;
        Ok(match kind {
            sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_GPU => RemoteDeviceType::Gpu,
            sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_IBMNPU => {
                RemoteDeviceType::Ibmnpu
            }
            sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_SWITCH => {
                RemoteDeviceType::Switch
            }
            _ => RemoteDeviceType::Unknown,
        })
    }

    /// `nvmlDeviceGetGpuFabricInfoV` (v3, then v2 for drivers that reject v3),
    /// else the older `nvmlDeviceGetGpuFabricInfo`. nvml-wrapper 0.13 has no safe
    /// call for either.
    fn fabric(nvml: &Nvml, d: &Device<'_>) -> Result<FabricAnswer, W> {
        let lib = nvml.lib();
        if let Ok(sym) = lib.nvmlDeviceGetGpuFabricInfoV.as_ref() {
            // NVML_STRUCT_VERSION(GpuFabricInfo, v) = sizeof(struct) | v << 24.
            let v3 = std::mem::size_of::<sys::nvmlGpuFabricInfo_v3_t>() as u32 | 3 << 24;
            let v2 = std::mem::size_of::<sys::nvmlGpuFabricInfo_v2_t>() as u32 | 2 << 24;
            for version in [v3, v2] {
                // The v3 struct extends v2 at its end, so one buffer serves both.
                let mut info = sys::nvmlGpuFabricInfo_v3_t {
                    version,
                    clusterUuid: [0; 16],
                    status: 0,
                    cliqueId: 0,
                    state: 0,
                    healthMask: 0,
                    healthSummary: 0,
                };
                // SAFETY: `d` borrows the live `Nvml`, so its handle is valid;
                // `info` is a writable struct at least as large as the version
                // it declares; the symbol has nvml.h's signature.
                let rc = unsafe { sym(d.handle(), &mut info) };
                if rc == sys::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH && version == v3
                {
                    continue;
                }
                nvml_try(rc)?;
                return fabric_answer(
                    &info.clusterUuid,
                    info.status,
                    info.cliqueId,
                    info.state,
                    Some(info.healthMask),
                );
            }
        }
        let sym = lib
            .nvmlDeviceGetGpuFabricInfo
            .as_ref()
            .map_err(|e| W::FailedToLoadSymbol(e.to_string()))?;
        let mut info = sys::nvmlGpuFabricInfo_t {
            clusterUuid: [0; 16],
            status: 0,
            cliqueId: 0,
            state: 0,
        };
        // SAFETY: as above, with the legacy nvmlGpuFabricInfo_t.
        let rc = unsafe { sym(d.handle(), &mut info) };
        nvml_try(rc)?;
        fabric_answer(
            &info.clusterUuid,
            info.status,
            info.cliqueId,
            info.state,
            None,
        )
    }

    fn fabric_answer(
        cluster_uuid: &[u8; 16],
        status: sys::nvmlReturn_t,
        clique_id: u32,
        state: sys::nvmlGpuFabricState_t,
        health_mask: Option<u32>,
    ) -> Result<FabricAnswer, W> {
        let state = match u32::from(state) {
            sys::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED => FabricState::NotSupported,
            sys::NVML_GPU_FABRIC_STATE_NOT_STARTED => FabricState::NotStarted,
            sys::NVML_GPU_FABRIC_STATE_IN_PROGRESS => FabricState::InProgress,
            sys::NVML_GPU_FABRIC_STATE_COMPLETED => FabricState::Completed,
            other => return Err(W::UnexpectedVariant(other)),
        };
        let status = match nvml_try(status) {
            Ok(()) => FABRIC_STATUS_SUCCESS.to_string(),
            Err(e) => e.to_string(),
        };
        let registered = state == FabricState::Completed && status == FABRIC_STATUS_SUCCESS;
        Ok(FabricAnswer {
            state,
            status,
            cluster_uuid: registered.then(|| uuid_text(cluster_uuid)),
            clique_id: registered.then_some(clique_id),
            health_mask,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sysfs::{NoSysfs, RecordedSysfs, SysfsDevice};

    fn device(index: u32, bus: &str) -> DeviceAnswers {
        DeviceAnswers {
            index,
            pci_bus_id: Some(bus.to_string()),
            ..DeviceAnswers::default()
        }
    }

    fn link(
        link: u32,
        active: bool,
        remote: Option<&str>,
        kind: Option<RemoteDeviceType>,
    ) -> NvLinkAnswer {
        NvLinkAnswer {
            link,
            active,
            remote_pci_bus_id: remote.map(str::to_string),
            remote_device_type: kind,
        }
    }

    #[test]
    fn topology_levels_map_like_nvidia_smi() {
        use TopologyLevel::*;
        let got: Vec<LinkType> = [Internal, Single, Multiple, HostBridge, Node, System]
            .iter()
            .map(|l| l.link_type())
            .collect();
        assert_eq!(
            got,
            [
                LinkType::Pix,
                LinkType::Pix,
                LinkType::Pxb,
                LinkType::Phb,
                LinkType::Node,
                LinkType::Sys
            ]
        );
    }

    #[test]
    fn cuda_and_uuid_texts() {
        assert_eq!(cuda_version_text(12040).as_deref(), Some("12.4"));
        assert_eq!(cuda_version_text(13000).as_deref(), Some("13.0"));
        assert_eq!(cuda_version_text(0), None);
        let mut bytes = [0u8; 16];
        bytes[0] = 0xab;
        bytes[15] = 0x01;
        assert_eq!(uuid_text(&bytes), "ab000000-0000-0000-0000-000000000001");
    }

    #[test]
    fn nvml_memory_affinity_beats_sysfs_and_sysfs_fills_gaps() {
        let mut with_nvml = device(0, "00000000:18:00.0");
        with_nvml.memory_affinity = Some("1".into());
        with_nvml.cpu_affinity = Some("56-111,168-223".into());
        let mut wide = device(1, "00000000:2a:00.0");
        wide.memory_affinity = Some("0-3".into()); // several nodes: not one node
        let answers = NvmlAnswers {
            devices: vec![with_nvml, wide],
            pairs: vec![PairAnswer {
                a: 0,
                b: 1,
                common_ancestor: Some(TopologyLevel::System),
            }],
            ..NvmlAnswers::default()
        };
        let mut map = BTreeMap::new();
        for (bus, node, cpus) in [("0000:18:00.0", 0, "0-7"), ("0000:2a:00.0", 2, "16-23")] {
            map.insert(
                bus.to_string(),
                SysfsDevice {
                    numa_node: Some(node),
                    local_cpulist: Some(cpus.to_string()),
                },
            );
        }
        let facts =
            facts_from_answers(&answers, &RecordedSysfs::new(&map), TopologySource::Nvml).unwrap();
        assert_eq!(facts.gpus[0].numa_node, Some(1));
        assert_eq!(
            facts.gpus[0].cpu_affinity.as_deref(),
            Some("56-111,168-223")
        );
        assert_eq!(facts.gpus[1].numa_node, Some(2));
        assert_eq!(facts.gpus[1].cpu_affinity.as_deref(), Some("16-23"));

        let bare = facts_from_answers(&answers, &NoSysfs, TopologySource::Nvml).unwrap();
        assert_eq!(bare.gpus[1].numa_node, None, "unknown stays unknown");
    }

    #[test]
    fn direct_links_count_the_smaller_end_and_infer_gpus_without_device_type() {
        let (b0, b1) = ("00000000:06:00.0", "00000000:07:00.0");
        let mut g0 = device(0, b0);
        g0.nvlinks = Some(vec![
            link(0, true, Some(b1), None),
            link(1, true, Some(b1), None),
        ]);
        let mut g1 = device(1, b1);
        // GPU 1 sees only one of the two links up.
        g1.nvlinks = Some(vec![
            link(0, true, Some(b0), Some(RemoteDeviceType::Gpu)),
            link(1, false, Some(b0), Some(RemoteDeviceType::Gpu)),
        ]);
        let answers = NvmlAnswers {
            devices: vec![g0, g1],
            ..NvmlAnswers::default()
        };
        let facts = facts_from_answers(&answers, &NoSysfs, TopologySource::Nvml).unwrap();
        assert_eq!(facts.gpu_pairs[0].class(), LinkClass::Nv(1));
        assert_eq!(
            facts.gpus[0].nvlinks.as_ref().unwrap()[0].remote,
            Some(RemoteEnd::Gpu {
                pci_bus_id: b1.to_string()
            })
        );
    }

    #[test]
    fn a_pair_with_no_path_is_an_error_naming_it() {
        let answers = NvmlAnswers {
            devices: vec![device(0, "0000:06:00.0"), device(1, "0000:07:00.0")],
            ..NvmlAnswers::default()
        };
        let e = facts_from_answers(&answers, &NoSysfs, TopologySource::Nvml).unwrap_err();
        assert_eq!(e, NvmlError::UnknownPath { a: 0, b: 1 });
        assert!(e.to_string().starts_with("GPUs 0 and 1:"), "{e}");
    }

    #[test]
    fn inconsistent_answers_are_named() {
        let dup = NvmlAnswers {
            devices: vec![device(0, "0000:06:00.0"), device(0, "0000:07:00.0")],
            ..NvmlAnswers::default()
        };
        let e = facts_from_answers(&dup, &NoSysfs, TopologySource::Nvml).unwrap_err();
        assert!(e.to_string().contains("two devices have index 0"), "{e}");
        let same_bus = NvmlAnswers {
            devices: vec![device(0, "0000:06:00.0"), device(1, "00000000:06:00.0")],
            ..NvmlAnswers::default()
        };
        let e = facts_from_answers(&same_bus, &NoSysfs, TopologySource::Nvml).unwrap_err();
        assert!(
            e.to_string()
                .contains("both have PCI bus id 00000000:06:00.0"),
            "{e}"
        );
        let ghost = NvmlAnswers {
            devices: vec![device(0, "0000:06:00.0")],
            pairs: vec![PairAnswer {
                a: 0,
                b: 5,
                common_ancestor: None,
            }],
            ..NvmlAnswers::default()
        };
        let e = facts_from_answers(&ghost, &NoSysfs, TopologySource::Nvml).unwrap_err();
        assert!(e.to_string().contains("pair entry 0-5"), "{e}");
    }

    #[test]
    fn fabric_needs_completion_success_and_a_real_cluster() {
        let mut f = FabricAnswer {
            state: FabricState::Completed,
            status: FABRIC_STATUS_SUCCESS.into(),
            cluster_uuid: Some("5b1e7c1a-0000-4000-8000-000000000001".into()),
            clique_id: Some(32766),
            health_mask: None,
        };
        assert_eq!(
            gpu_fabric(&f),
            Some(GpuFabric {
                cluster_uuid: f.cluster_uuid.clone(),
                clique_id: Some(32766)
            })
        );
        f.cluster_uuid = Some(NIL_UUID.into());
        assert_eq!(gpu_fabric(&f), None, "single-node NVSwitch: nil cluster");
        f.cluster_uuid = Some("5b1e7c1a-0000-4000-8000-000000000001".into());
        f.state = FabricState::InProgress;
        assert_eq!(gpu_fabric(&f), None);
    }

    #[test]
    fn recorded_source_says_fixture() {
        let src = RecordedNvml {
            answers: NvmlAnswers::default(),
        };
        let facts = facts_from_nvml(&src, &NoSysfs).unwrap();
        assert_eq!(facts.source, TopologySource::Fixture);
        assert!(facts.gpus.is_empty() && facts.gpu_pairs.is_empty());
    }
}
