//! The `GpuTopology` custom resource (`gputopo.dev/v1alpha1`): one per node.

use crate::link::{LinkClass, LinkType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_core::CustomResourceExt;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the agent observed about one node's GPUs and how they are wired.
///
/// The agent is this object's only writer. A field the source cannot know
/// (the UUID in a bare `nvidia-smi topo -m` text, say) is null, never invented.
// Each printcolumn repeats `type_`; clippy reads the repeats as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "gputopo.dev",
    version = "v1alpha1",
    kind = "GpuTopology",
    plural = "gputopologies",
    singular = "gputopology",
    shortname = "gtopo",
    category = "gputopo",
    status = "GpuTopologyStatus",
    derive = "PartialEq",
    doc = "How the GPUs of one node are wired, as its gputopo-agent discovered them. Cluster-scoped; the name is the node's.",
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".spec.summary.gpuCount"),
    printcolumn(name = "Vendor", type_ = "string", json_path = ".spec.vendor"),
    printcolumn(
        name = "Product",
        type_ = "string",
        json_path = ".spec.summary.product"
    ),
    printcolumn(
        name = "Interconnect",
        type_ = "string",
        json_path = ".spec.summary.interconnect"
    ),
    // The weakest pair, so a partial mesh reads SYS or PIX rather than
    // nothing (p2pLevel is null unless every pair has NVLink).
    printcolumn(
        name = "P2P",
        type_ = "string",
        json_path = ".spec.summary.p2pBottleneck"
    ),
    printcolumn(
        name = "Island",
        type_ = "integer",
        json_path = ".spec.summary.largestIsland"
    ),
    printcolumn(
        name = "Degraded",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Degraded\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GpuTopologySpec {
    pub node_name: String,
    pub source: TopologySource,
    /// Who made the GPUs; decides the extended resource pods ask for
    /// (`nvidia.com/gpu`, `amd.com/gpu`). Absent (objects written before it
    /// existed, or a source that cannot tell) reads as NVIDIA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<GpuVendor>,
    pub driver_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<String>,
    /// At most [`MAX_GPUS_PER_NODE`]: the API server refuses more, so a
    /// hostile or broken writer cannot make every reader walk a huge list.
    #[schemars(length(max = 64))]
    pub gpus: Vec<GpuInfo>,
    /// One entry per unordered GPU pair, `a < b`, sorted by `(a, b)`.
    #[schemars(length(max = 2016))]
    pub links: Vec<GpuLink>,
    #[schemars(length(max = 256))]
    pub nics: Vec<Nic>,
    /// Connected components of the graph of GPU-to-GPU fabric links (NVLink;
    /// XGMI, where they are AMD hives), each sorted; a GPU without such a link
    /// is an island of one.
    pub islands: Vec<Vec<u32>>,
    pub summary: TopologySummary,
}

/// Which discovery backend produced the object.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TopologySource {
    Nvml,
    NvidiaSmi,
    Fixture,
    /// The AMD SMI library (`libamd_smi.so`), live.
    AmdSmi,
    /// Saved text of AMD's tools: `rocm-smi --showtopo`, `amd-smi topology`.
    RocmSmi,
}

/// The most GPUs a `GpuTopology` may list (the CRD's `maxItems`; the
/// scheduler's GPU sets index at most 32 per node).
pub const MAX_GPUS_PER_NODE: usize = 64;

/// The GPUs' maker. NVIDIA is the default: objects and pods that name no
/// vendor are read as NVIDIA, as before AMD support.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GpuVendor {
    #[default]
    Nvidia,
    Amd,
}

impl GpuVendor {
    pub fn as_str(self) -> &'static str {
        match self {
            GpuVendor::Nvidia => "nvidia",
            GpuVendor::Amd => "amd",
        }
    }

    /// The extended resource the vendor's device plugin advertises.
    pub fn resource(self) -> &'static str {
        match self {
            GpuVendor::Nvidia => crate::keys::RESOURCE_GPU,
            GpuVendor::Amd => crate::keys::RESOURCE_GPU_AMD,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuInfo {
    /// The GPU's index as the node enumerates it (NVML / nvidia-smi order).
    #[schemars(range(max = 63))]
    pub index: u32,
    pub uuid: Option<String>,
    pub product: Option<String>,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: Option<u64>,
    pub pci_bus_id: Option<String>,
    pub numa_node: Option<i32>,
    /// A cpulist such as `0-31,64-95`.
    pub cpu_affinity: Option<String>,
    pub mig_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<GpuFabric>,
}

/// Membership in a multi-node NVLink domain (GB200/GB300 NVL72).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuFabric {
    pub cluster_uuid: Option<String>,
    pub clique_id: Option<u32>,
}

/// The connection between GPUs `a < b`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.a < self.b", "message": "a link joins GPUs a < b (each unordered pair once)"}
]))]
pub struct GpuLink {
    #[schemars(range(max = 63))]
    pub a: u32,
    #[schemars(range(max = 63))]
    pub b: u32,
    #[serde(rename = "type")]
    pub link_type: LinkType,
    /// Bonded NVLinks; 0 unless `type` is `NV`. At most
    /// [`crate::MAX_BONDED_NVLINKS`]: no GPU has more.
    #[schemars(range(max = 18))]
    pub nvlinks: u32,
    /// Hops between the two GPUs as the AMD driver counts them (1: a direct
    /// XGMI link); omitted where the source does not say (NVIDIA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hops: Option<u32>,
    /// The AMD driver's relative link weight (lower is closer: 15 for one
    /// XGMI hop); omitted where the source does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u64>,
    /// The theoretical XGMI bandwidth range AMD SMI reports for a direct link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<LinkBandwidth>,
}

/// Minimum and maximum bandwidth of a link, MB/s, as AMD SMI reports them
/// (`amdsmi_get_minmax_bandwidth_between_processors`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinkBandwidth {
    #[serde(rename = "minMBps")]
    pub min_mbps: u64,
    #[serde(rename = "maxMBps")]
    pub max_mbps: u64,
}

impl GpuLink {
    /// A link with only its type and NVLink count known (every NVIDIA source).
    pub fn new(a: u32, b: u32, link_type: LinkType, nvlinks: u32) -> GpuLink {
        GpuLink {
            a,
            b,
            link_type,
            nvlinks,
            hops: None,
            weight: None,
            bandwidth: None,
        }
    }

    pub fn class(&self) -> LinkClass {
        LinkClass::of(self.link_type, self.nvlinks, self.hops)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Nic {
    /// The RDMA device name, e.g. `mlx5_0`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<i32>,
    pub gpu_links: Vec<NicGpuLink>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NicGpuLink {
    pub gpu: u32,
    #[serde(rename = "type")]
    pub link_type: LinkType,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologySummary {
    pub gpu_count: u32,
    /// The product when every GPU is the same model; null on mixed or unknown nodes.
    pub product: Option<String>,
    /// `NV<k>`: the largest k such that every GPU pair is joined directly by at
    /// least k NVLinks; null when some pair has no NVLink or there are fewer than two GPUs.
    pub p2p_level: Option<String>,
    /// The weakest connection between any two GPUs, as a link class: `NV4`,
    /// `XGMI`, `XGMI-ROUTED`, `PIX`, `PXB`, `PHB`, `NODE` or `SYS`; what
    /// the P2P printer column shows. Equal to `p2pLevel` where that is set;
    /// null with fewer than two GPUs, and on objects written before it
    /// existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p2p_bottleneck: Option<String>,
    pub all_to_all_nvlink: bool,
    pub largest_island: u32,
    /// Distinct NUMA nodes the GPUs sit on; null when no GPU's NUMA node is known.
    pub numa_nodes: Option<u32>,
    /// How the GPUs are joined (gputopo addition: the `gputopo.dev/interconnect` label's value).
    pub interconnect: Interconnect,
}

/// The shape of a node's GPU interconnect.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Interconnect {
    /// Every GPU reaches every other at full bandwidth through NVSwitch.
    Nvswitch,
    /// Direct NVLinks between GPUs, not all pairs equal (DGX-1 cube-mesh, 4-GPU HGX boards).
    NvlinkMesh,
    /// NVLink bridges joining pairs (or small groups) of PCIe cards.
    NvlinkBridge,
    /// No NVLink at all.
    Pcie,
    /// AMD GPUs joined by XGMI (Infinity Fabric) in one or more hives.
    Xgmi,
}

impl Interconnect {
    pub fn as_str(self) -> &'static str {
        match self {
            Interconnect::Nvswitch => "nvswitch",
            Interconnect::NvlinkMesh => "nvlink-mesh",
            Interconnect::NvlinkBridge => "nvlink-bridge",
            Interconnect::Pcie => "pcie",
            Interconnect::Xgmi => "xgmi",
        }
    }
}

/// Conditions and the current per-GPU allocation (read from the kubelet).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuTopologyStatus {
    /// `Degraded`: a GPU has fewer active NVLinks than its peers or its product should.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Which pods hold each GPU, as of `podResources.observedAt` (GPUs nobody
    /// holds are left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub allocations: Vec<GpuAllocation>,
    /// The agent's reading of the kubelet's PodResources API; absent when the
    /// agent does not read it (then `allocations` says nothing either way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_resources: Option<PodResourcesReading>,
}

/// Which pods hold one GPU, as the kubelet's pod-resources API reports.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuAllocation {
    #[schemars(range(max = 63))]
    pub gpu: u32,
    /// `namespace/name` of each pod holding this GPU, whole or in part.
    #[schemars(length(max = 256))]
    pub pods: Vec<String>,
    /// Each container holding this GPU or part of it, with the device the
    /// kubelet names (empty from agents before the holders were published).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub holders: Vec<GpuHolder>,
}

/// One container's hold on a GPU, as the kubelet reports it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuHolder {
    /// `namespace/name` of the pod.
    #[schemars(length(max = 317))]
    pub pod: String,
    #[schemars(length(max = 253))]
    pub container: String,
    /// The extended resource the device came from (`nvidia.com/gpu`,
    /// `nvidia.com/mig-1g.10gb`, `amd.com/gpu`).
    #[schemars(length(max = 253))]
    pub resource: String,
    /// The device ID the kubelet reports (a GPU or MIG UUID, a PCI address,
    /// a shared replica's `<uuid>::<n>`).
    #[schemars(length(max = 253))]
    pub device: String,
    pub form: DeviceForm,
}

/// How a device a container holds relates to the GPU.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceForm {
    /// The whole GPU.
    Whole,
    /// A MIG instance on the GPU.
    Mig,
    /// One replica of a GPU shared by time-slicing or MPS.
    Replica,
}

impl DeviceForm {
    /// The value as the object spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceForm::Whole => "whole",
            DeviceForm::Mig => "mig",
            DeviceForm::Replica => "replica",
        }
    }
}

/// What the agent last read from the kubelet's PodResources API.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodResourcesReading {
    /// When `allocations` was read. Older than a few scans means the agent
    /// or the kubelet stopped answering: the scheduler then falls back to
    /// the pods' annotations.
    pub observed_at: Time,
    /// Why the latest attempt failed, when it did; `allocations` is then
    /// the last successful reading, of `observedAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub last_error: Option<String>,
    /// GPU device IDs the kubelet named that match none of this node's GPUs
    /// (left out of `allocations`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub unknown_devices: Vec<String>,
}

/// The condition type the agent sets when NVLinks are missing or down.
pub const CONDITION_DEGRADED: &str = "Degraded";
/// The condition type the agent sets on nodes whose GPUs report a multi-node
/// NVLink fabric: `True` when they are all in one clique (the node is labelled
/// `nvidia.com/gpu.clique`), `False` when they disagree or have not finished
/// registering. Absent on nodes without such a fabric.
pub const CONDITION_GPU_FABRIC_READY: &str = "GpuFabricReady";

impl GpuTopologySpec {
    /// The vendor, NVIDIA when the object does not say (see `vendor`).
    pub fn vendor_or_default(&self) -> GpuVendor {
        self.vendor.unwrap_or(GpuVendor::Nvidia)
    }

    /// The link between two distinct GPUs, in either order.
    pub fn link(&self, x: u32, y: u32) -> Option<&GpuLink> {
        let (a, b) = if x < y { (x, y) } else { (y, x) };
        self.links
            .binary_search_by(|l| (l.a, l.b).cmp(&(a, b)))
            .ok()
            .map(|i| &self.links[i])
    }
}

/// The CustomResourceDefinition YAML generated from these types, as `gputopo crd` prints it.
pub fn crd_yaml() -> String {
    let crd = GpuTopology::crd();
    let body = serde_yaml::to_string(&crd).expect("a CRD always serializes to YAML");
    format!(
        "# Generated by `gputopo crd` from api/src/topology.rs. Do not edit by hand.\n---\n{body}"
    )
}

#[cfg(test)]
mod tests {
    use super::DeviceForm;

    #[test]
    fn a_device_form_reads_as_the_object_spells_it() {
        for form in [DeviceForm::Whole, DeviceForm::Mig, DeviceForm::Replica] {
            assert_eq!(serde_json::to_value(form).unwrap(), form.as_str());
        }
    }
}
