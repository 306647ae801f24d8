//! The names the DRA model is written in: a published device
//! ([`DraDevice`]: its attributes, capacity, taints and GPU index), how an
//! allocation names a device ([`DeviceId`]) and how a claim is keyed
//! ([`claim_key`]). Everything else in `dra` reads these.

use super::counters::Consumption;
use gputopo_api::k8s_openapi::api::resource::v1::{
    DeviceAttribute, DeviceCapacity, DeviceTaint, ResourceClaim,
};
use std::collections::BTreeMap;
use std::fmt;

/// `namespace/name` of a claim.
pub fn claim_key(claim: &ResourceClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or("default"),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}

/// A device as an allocation names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// One published device on a node.
#[derive(Clone, Debug, PartialEq)]
pub struct DraDevice {
    pub id: DeviceId,
    /// Its driver is one of the configured GPU drivers ([`super::DraConfig`]):
    /// the device is a GPU placed on the topology, or not allocated by
    /// gputopo. Other drivers' devices (IMEX channels, NICs) are allocated
    /// as upstream's structured allocator does.
    pub gpu_driver: bool,
    /// The GPU index in the node's `GpuTopology`; `None` for another
    /// driver's device, or a GPU driver's device the topology does not know
    /// (a warning says why), which is never allocated.
    pub gpu: Option<u32>,
    /// As published: names without a domain belong to the driver's domain.
    pub attributes: BTreeMap<String, DeviceAttribute>,
    pub capacity: BTreeMap<String, DeviceCapacity>,
    pub taints: Vec<DeviceTaint>,
    /// What it consumes from its pool's counter sets (partitionable devices).
    pub consumes: Vec<Consumption>,
    /// A GPU driver's device that is not a whole GPU (`type` `mig`,
    /// `vfio`…): allocated beside the GPU set, like other drivers' devices.
    pub partition: bool,
    /// For a partition, the GPU it is part of (its `parentUUID` on the
    /// topology): held from whole-GPU use while the partition is allocated.
    pub parent_gpu: Option<u32>,
    /// `allowMultipleAllocations`: shared by claims up to its capacities,
    /// allocated beside the GPU set like other drivers' devices.
    pub multi: bool,
    /// `bindingConditions` and `bindingFailureConditions` (KEP-5007):
    /// copied into the allocation result; the pod binds once the driver
    /// has set every binding condition `True` (see `dra::binding`).
    pub binding_conditions: Vec<String>,
    pub binding_failure_conditions: Vec<String>,
}

impl DraDevice {
    /// A device of a driver gputopo does not place by topology: allocated
    /// outside the GPU set.
    pub fn is_other(&self) -> bool {
        !self.gpu_driver || self.partition || self.multi
    }

    /// An attribute by fully qualified name (`gpu.nvidia.com/productName`,
    /// `resource.kubernetes.io/pcieRoot`), as upstream looks it up: the exact
    /// name, else the bare name when the domain is the device's driver.
    pub fn attribute(&self, qualified: &str) -> Option<&DeviceAttribute> {
        if let Some(a) = self.attributes.get(qualified) {
            return Some(a);
        }
        let (domain, name) = qualified.split_once('/')?;
        (domain == self.id.driver)
            .then(|| self.attributes.get(name))
            .flatten()
    }

    pub(super) fn string_attribute(&self, name: &str) -> Option<&str> {
        self.attribute(&format!("{}/{name}", self.id.driver))
            .and_then(|a| a.string.as_deref())
    }

    pub(super) fn int_attribute(&self, name: &str) -> Option<i64> {
        self.attribute(&format!("{}/{name}", self.id.driver))
            .and_then(|a| a.int)
    }
}
