//! A node's published devices as the inventory holds them ([`NodeDevices`]:
//! the devices, how they were matched to the topology, its wiring), and
//! what reading them left out ([`DraWarning`]). Below both the inventory
//! and the placement on the topology, which fill it.

use super::counters::Counters;
use super::device::{DeviceId, DraDevice};
use gputopo_api::Nic;
use std::collections::BTreeMap;
use std::fmt;

/// How a node's devices were matched to its GPU indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuMapping {
    /// The device's `uuid` attribute equals the topology GPU's UUID.
    Uuid,
    /// The topology has no UUIDs: the device's `index` attribute (published
    /// by NVIDIA's driver before v25.8; current versions do not).
    Index,
    /// No `GpuTopology` for the node: nothing is placed.
    NoTopology,
}

/// The devices of one node, from complete and valid pools of node-local slices.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeDevices {
    pub node: String,
    /// Sorted by id.
    pub devices: Vec<DraDevice>,
    pub mapping: GpuMapping,
    /// Pools of this node not used, with why (`driver/pool: reason`).
    pub unusable_pools: Vec<String>,
    /// What the node's `GpuTopology` says about where its GPUs and NICs sit:
    /// how other drivers' devices are put close to the pod's GPUs.
    pub wiring: Wiring,
    /// The counter sets of the node's pools (node-local, so a decision on
    /// this node copies only these), less what allocated devices consume.
    pub counters: Counters,
}

/// The node's GPU NUMA nodes and NIC links from its `GpuTopology`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Wiring {
    /// NUMA node per GPU index, where known.
    pub gpu_numa: BTreeMap<u32, i64>,
    pub nics: Vec<Nic>,
}

impl NodeDevices {
    /// A node that publishes nothing.
    pub fn empty(node: &str) -> NodeDevices {
        NodeDevices {
            node: node.to_string(),
            devices: Vec::new(),
            mapping: GpuMapping::NoTopology,
            unusable_pools: Vec::new(),
            wiring: Wiring::default(),
            counters: Counters::default(),
        }
    }

    /// The device placed on `gpu`.
    pub fn device_on(&self, gpu: u32) -> Option<&DraDevice> {
        self.devices.iter().find(|d| d.gpu == Some(gpu))
    }

    pub fn device(&self, id: &DeviceId) -> Option<&DraDevice> {
        self.devices
            .binary_search_by(|d| d.id.cmp(id))
            .ok()
            .map(|i| &self.devices[i])
    }
}

/// Something the inventory left out, for the snapshot's warnings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DraWarning {
    /// A device the node's topology does not know: it is never allocated.
    UnplacedDevice {
        node: String,
        device: DeviceId,
        reason: UnplacedReason,
    },
    /// The node's topology names no UUID: devices were matched by their `index` attribute.
    IndexFallback { node: String },
    /// A slice gputopo does not read (not node-local).
    UnsupportedSlice { slice: String, reason: String },
    /// A pool that is incomplete or invalid: its devices are not used.
    UnusablePool { pool: String, reason: String },
}

impl fmt::Display for DraWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DraWarning::UnplacedDevice {
                node,
                device,
                reason,
            } => write!(
                f,
                "node {node}: DRA device {device} is not placed on the topology ({reason}); gputopo does not allocate it"
            ),
            DraWarning::IndexFallback { node } => write!(
                f,
                "node {node}: its GpuTopology names no GPU UUID, so DRA devices were matched to GPUs by their `index` attribute"
            ),
            DraWarning::UnsupportedSlice { slice, reason } => {
                write!(f, "ResourceSlice {slice} is not used: {reason}")
            }
            DraWarning::UnusablePool { pool, reason } => {
                write!(f, "resource pool {pool} is not used: {reason}")
            }
        }
    }
}

/// Why a device is not placed on a GPU index of the node's topology.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnplacedReason {
    #[error("the node has no GpuTopology")]
    NoTopology,
    #[error("no uuid attribute")]
    NoUuid,
    #[error("uuid {uuid} is not in the node's GpuTopology")]
    UnknownUuid { uuid: String },
    #[error("no index attribute, and the GpuTopology names no UUID to match")]
    NoIndex,
    #[error("index {index} is not in the node's GpuTopology")]
    UnknownIndex { index: i64 },
    #[error("GPU {gpu} is already another device's")]
    GpuTaken { gpu: u32 },
}
