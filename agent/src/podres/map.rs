//! The kubelet's answer → `status.allocations`: which containers hold which
//! of this node's GPUs. Pure: the answer and the node's GPUs in, the
//! allocations and the device IDs that match no GPU out.
//!
//! Device IDs, as the device plugins name them:
//!
//! - NVIDIA (`NVIDIA/k8s-device-plugin`): the GPU's UUID `GPU-…` (form
//!   `whole`); a MIG device's UUID `MIG-…` (form `mig`), found on its GPU
//!   through NVML's MIG devices, or, from drivers before R470, read from the
//!   UUID itself (`MIG-GPU-<gpu uuid>/<gi>/<ci>`); a shared replica under
//!   time-slicing or MPS `<uuid>::<n>` (form `replica`, of a GPU or of a
//!   MIG device: `device` says which).
//! - AMD (`ROCm/k8s-device-plugin`): the GPU's PCI address `0000:c1:00.0`
//!   (form `whole`).
//!
//! GPU resources are `nvidia.com/gpu` (and its renamed shared forms
//! `nvidia.com/gpu.*`), `nvidia.com/mig-*`, `amd.com/gpu`, and any
//! resource `GetAllocatableResources` lists with a device that is one of
//! this node's GPUs. Other resources are not read.

use super::{DevicesAnswer, KubeletAnswer};
use gputopo_api::{DeviceForm, GpuAllocation, GpuHolder, GpuTopologySpec};
use gputopo_topology::pci::canonical_pci_bus_id;
use std::collections::{BTreeMap, BTreeSet};

/// The CRD's bounds (api/src/topology.rs): longer lists or IDs would make
/// the API server refuse the whole status.
pub const MAX_DEVICE_ID: usize = 253;
pub const MAX_PER_GPU: usize = 256;
pub const MAX_UNKNOWN: usize = 256;

/// One GPU of this node, as the kubelet's device IDs can name it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeGpu {
    pub index: u32,
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    /// Its MIG devices' UUIDs.
    pub mig: Vec<String>,
}

/// This node's GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeGpus {
    pub gpus: Vec<NodeGpu>,
}

/// Why a device ID matches none of this node's GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownReason {
    /// A GPU UUID no GPU here has.
    NoSuchGpu,
    /// A MIG UUID no GPU here lists among its MIG devices (or the source,
    /// not NVML, cannot list them).
    NoSuchMig,
    /// A PCI address no GPU here sits at.
    NoSuchPciAddress,
    /// Neither a GPU or MIG UUID, a replica of one (`<uuid>::<n>`), nor a PCI address.
    Unrecognized,
    /// Longer than the GpuTopology's `device` field holds (253).
    TooLong,
}

impl UnknownReason {
    pub fn says(self) -> &'static str {
        match self {
            UnknownReason::NoSuchGpu => "no GPU on this node has this UUID",
            UnknownReason::NoSuchMig => {
                "no GPU on this node lists this MIG device (NVML lists MIG devices; other sources cannot)"
            }
            UnknownReason::NoSuchPciAddress => "no GPU on this node sits at this PCI address",
            UnknownReason::Unrecognized => {
                "not a GPU UUID (GPU-…), MIG UUID (MIG-…), replica (<uuid>::<n>) or PCI address"
            }
            UnknownReason::TooLong => "longer than the 253 characters a GpuTopology holds",
        }
    }
}

/// A GPU resource's device ID that matches none of this node's GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownDevice {
    pub device: String,
    pub resource: String,
    pub reason: UnknownReason,
}

/// The mapping's result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mapped {
    /// By GPU index; GPUs nobody holds are left out.
    pub allocations: Vec<GpuAllocation>,
    /// Sorted by device ID, each once, at most [`MAX_UNKNOWN`].
    pub unknown: Vec<UnknownDevice>,
    /// What the CRD's bounds left out, said for a warning.
    pub left_out: Vec<String>,
}

impl Mapped {
    pub fn unknown_ids(&self) -> Vec<String> {
        self.unknown.iter().map(|u| u.device.clone()).collect()
    }
}

impl NodeGpus {
    /// The GPUs of `spec`, with the MIG devices NVML listed for each index.
    pub fn new(spec: &GpuTopologySpec, mig: &BTreeMap<u32, Vec<String>>) -> NodeGpus {
        NodeGpus {
            gpus: spec
                .gpus
                .iter()
                .map(|g| NodeGpu {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    pci_bus_id: g.pci_bus_id.as_deref().and_then(canonical_pci_bus_id),
                    mig: mig.get(&g.index).cloned().unwrap_or_default(),
                })
                .collect(),
        }
    }

    fn by_uuid(&self, uuid: &str) -> Option<u32> {
        self.gpus
            .iter()
            .find(|g| {
                g.uuid
                    .as_deref()
                    .is_some_and(|u| u.eq_ignore_ascii_case(uuid))
            })
            .map(|g| g.index)
    }

    /// The GPU a device ID names, and how; or why none.
    pub fn resolve(&self, id: &str) -> Result<(u32, DeviceForm), UnknownReason> {
        if id.len() > MAX_DEVICE_ID {
            return Err(UnknownReason::TooLong);
        }
        let (base, replica) = match id.split_once("::") {
            Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                (base, true)
            }
            Some(_) => return Err(UnknownReason::Unrecognized),
            None => (id, false),
        };
        let form = |own| if replica { DeviceForm::Replica } else { own };
        if let Some(rest) = strip_prefix_ignore_case(base, "MIG-") {
            let index = match strip_prefix_ignore_case(rest, "GPU-") {
                // MIG-GPU-<gpu uuid>/<gi>/<ci> (drivers before R470).
                Some(_) => rest.split('/').next().and_then(|gpu| self.by_uuid(gpu)),
                None => self
                    .gpus
                    .iter()
                    .find(|g| g.mig.iter().any(|m| m.eq_ignore_ascii_case(base)))
                    .map(|g| g.index),
            };
            return index
                .map(|i| (i, form(DeviceForm::Mig)))
                .ok_or(UnknownReason::NoSuchMig);
        }
        if strip_prefix_ignore_case(base, "GPU-").is_some() {
            return self
                .by_uuid(base)
                .map(|i| (i, form(DeviceForm::Whole)))
                .ok_or(UnknownReason::NoSuchGpu);
        }
        if let Some(bus) = canonical_pci_bus_id(base) {
            return self
                .gpus
                .iter()
                .find(|g| g.pci_bus_id.as_deref() == Some(bus.as_str()))
                .map(|g| (g.index, form(DeviceForm::Whole)))
                .ok_or(UnknownReason::NoSuchPciAddress);
        }
        Err(UnknownReason::Unrecognized)
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Whether a resource name is a GPU device plugin's.
pub fn is_gpu_resource_name(name: &str) -> bool {
    name == "nvidia.com/gpu"
        || name.starts_with("nvidia.com/gpu.")
        || name.starts_with("nvidia.com/mig-")
        || name == "amd.com/gpu"
}

/// The resources whose devices are GPUs (see the module docs).
fn gpu_resources(answer: &KubeletAnswer, gpus: &NodeGpus) -> BTreeSet<String> {
    let allocatable = answer.allocatable.iter().flat_map(|a| &a.devices);
    let named = answer
        .list
        .pod_resources
        .iter()
        .flat_map(|p| &p.containers)
        .flat_map(|c| &c.devices)
        .chain(allocatable.clone())
        .filter(|d| is_gpu_resource_name(&d.resource_name));
    let holding_gpus =
        allocatable.filter(|d| d.device_ids.iter().any(|id| gpus.resolve(id).is_ok()));
    named
        .chain(holding_gpus)
        .map(|d: &DevicesAnswer| d.resource_name.clone())
        .collect()
}

/// Maps the kubelet's answer onto `gpus`. A pod holding a GPU through two
/// containers is one pod and two holders; the same device listed twice for
/// one container is one holder.
pub fn map_answer(answer: &KubeletAnswer, gpus: &NodeGpus) -> Mapped {
    let resources = gpu_resources(answer, gpus);
    // gpu → (pods, (pod, container, resource, device) → form)
    type Holders = BTreeMap<(String, String, String, String), DeviceForm>;
    let mut per_gpu: BTreeMap<u32, (BTreeSet<String>, Holders)> = BTreeMap::new();
    let mut unknown: BTreeMap<String, UnknownDevice> = BTreeMap::new();
    let mut note_unknown = |device: &str, resource: &str, reason| {
        unknown
            .entry(device.to_string())
            .or_insert_with(|| UnknownDevice {
                device: device.to_string(),
                resource: resource.to_string(),
                reason,
            });
    };
    for pod in &answer.list.pod_resources {
        let pod_name = format!("{}/{}", pod.namespace, pod.name);
        for c in &pod.containers {
            for d in c
                .devices
                .iter()
                .filter(|d| resources.contains(&d.resource_name))
            {
                for id in &d.device_ids {
                    match gpus.resolve(id) {
                        Ok((gpu, form)) => {
                            let (pods, holders) = per_gpu.entry(gpu).or_default();
                            pods.insert(pod_name.clone());
                            let key = (
                                pod_name.clone(),
                                c.name.clone(),
                                d.resource_name.clone(),
                                id.clone(),
                            );
                            holders.insert(key, form);
                        }
                        Err(reason) => note_unknown(id, &d.resource_name, reason),
                    }
                }
            }
        }
    }
    for d in answer
        .allocatable
        .iter()
        .flat_map(|a| &a.devices)
        .filter(|d| resources.contains(&d.resource_name))
    {
        for id in &d.device_ids {
            if let Err(reason) = gpus.resolve(id) {
                note_unknown(id, &d.resource_name, reason);
            }
        }
    }

    let mut left_out = Vec::new();
    let allocations = per_gpu
        .into_iter()
        .map(|(gpu, (pods, holders))| {
            if pods.len() > MAX_PER_GPU || holders.len() > MAX_PER_GPU {
                left_out.push(format!(
                    "GPU {gpu}: {} pods and {} holders, of which the first {MAX_PER_GPU} of each are published",
                    pods.len(),
                    holders.len()
                ));
            }
            GpuAllocation {
                gpu,
                pods: pods.into_iter().take(MAX_PER_GPU).collect(),
                holders: holders
                    .into_iter()
                    .take(MAX_PER_GPU)
                    .map(|((pod, container, resource, device), form)| GpuHolder {
                        pod,
                        container,
                        resource,
                        device,
                        form,
                    })
                    .collect(),
            }
        })
        .collect();
    if unknown.len() > MAX_UNKNOWN {
        left_out.push(format!(
            "{} unknown device IDs, of which the first {MAX_UNKNOWN} are published",
            unknown.len()
        ));
    }
    Mapped {
        allocations,
        unknown: unknown.into_values().take(MAX_UNKNOWN).collect(),
        left_out,
    }
}
