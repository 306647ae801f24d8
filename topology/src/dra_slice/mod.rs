//! The ResourceSlices DRA drivers publish for a node, built from the
//! node's `GpuTopology` spec. Simulated nodes (tests, the demo, the side by
//! side) publish these where a real node runs the drivers.
//!
//! Here, NVIDIA's GPU driver (`gpu.nvidia.com`, `cmd/gpu-kubelet-plugin`,
//! `GpuInfo.GetDevice()`): one node-local slice, pool named after the node,
//! one device `gpu-<index>` per GPU with the attributes `type`, `uuid`,
//! `productName`, `brand`, `architecture`, `cudaComputeCapability`,
//! `driverVersion`, `cudaDriverVersion`, `resource.kubernetes.io/pciBusID`,
//! `resource.kubernetes.io/pcieRoot` and the capacity `memory`. Beside it,
//! in `mig.rs`, the same driver with dynamic MIG (partitionable devices and
//! shared counters), and in `others.rs`, NVIDIA's ComputeDomain driver
//! (IMEX channels) and a NIC driver (dranet). Apart from the simulations,
//! `links.rs` builds the slice the agent itself publishes on real nodes:
//! gputopo's link devices, the wiring as attributes plain DRA users match.

mod links;
mod mig;
mod others;

pub use links::{LINK_DRIVER, link_devices, link_resource_slice};

pub use mig::{A100_40GB_MIG, MigProfile, nvidia_mig_resource_slices};
pub use others::{
    COMPUTE_DOMAIN_DRIVER, NIC_DRIVER, compute_domain_resource_slice, nic_resource_slice,
};

use gputopo_api::{GpuInfo, GpuTopologySpec};
use serde_json::{Value, json};

/// NVIDIA's DRA driver name.
pub const NVIDIA_DRA_DRIVER: &str = "gpu.nvidia.com";

/// How the driver describes a machine's GPUs beyond its topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverFacts {
    pub product: String,
    pub architecture: String,
    /// `8.0.0`: a semantic version, as the driver publishes it.
    pub compute_capability: String,
    /// Per-GPU memory as a quantity (`40Gi`).
    pub memory: String,
    /// Publish `index` and `minor` too (driver versions before v25.8 did).
    pub publish_index: bool,
}

impl DriverFacts {
    /// The facts for a product NVIDIA's datasheets name (architecture and
    /// compute capability by product family); `None` for one not known.
    pub fn for_product(product: &str, memory: &str) -> Option<DriverFacts> {
        let upper = product.to_ascii_uppercase();
        let (architecture, cc) = [
            ("B200", "Blackwell", "10.0.0"),
            ("H200", "Hopper", "9.0.0"),
            ("H100", "Hopper", "9.0.0"),
            ("L40", "Ada Lovelace", "8.9.0"),
            ("RTX 4090", "Ada Lovelace", "8.9.0"),
            ("A100", "Ampere", "8.0.0"),
            ("A30", "Ampere", "8.0.0"),
            ("A40", "Ampere", "8.6.0"),
            ("A10", "Ampere", "8.6.0"),
            ("T4", "Turing", "7.5.0"),
            ("V100", "Volta", "7.0.0"),
        ]
        .into_iter()
        .find(|(family, _, _)| upper.contains(family))
        .map(|(_, a, c)| (a, c))?;
        Some(DriverFacts {
            product: product.to_string(),
            architecture: architecture.to_string(),
            compute_capability: cc.to_string(),
            memory: memory.to_string(),
            publish_index: false,
        })
    }
}

/// The slice (`resource.k8s.io/v1` JSON) for node `node` with `spec`.
pub fn nvidia_resource_slice(node: &str, spec: &GpuTopologySpec, facts: &DriverFacts) -> Value {
    let devices: Vec<Value> = spec.gpus.iter().map(|g| gpu_device(g, facts)).collect();
    node_local_slice(node, NVIDIA_DRA_DRIVER, devices)
}

/// The name of `driver`'s one slice for `node`.
pub fn slice_name(node: &str, driver: &str) -> String {
    format!("{node}-{driver}-0")
}

/// One node-local slice of `driver`, its pool named after the node.
pub(crate) fn node_local_slice(node: &str, driver: &str, devices: Vec<Value>) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node, driver)},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    })
}

/// The attributes every device of GPU `g` carries (the GPU's and its MIG
/// partitions'), `type` aside.
fn common_attributes(g: &GpuInfo, facts: &DriverFacts) -> Value {
    let brand = if facts.product.contains("GeForce") {
        "GeForce"
    } else {
        "Nvidia"
    };
    let mut attributes = json!({
        "productName": {"string": facts.product},
        "brand": {"string": brand},
        "architecture": {"string": facts.architecture},
        "cudaComputeCapability": {"version": facts.compute_capability},
        "driverVersion": {"version": "570.133.20"},
        "cudaDriverVersion": {"version": "12.8.0"},
        "resource.kubernetes.io/pcieRoot": {"string": pcie_root(g.index, g.pci_bus_id.as_deref(), g.numa_node)},
    });
    if let Some(bus) = &g.pci_bus_id {
        attributes["resource.kubernetes.io/pciBusID"] = json!({"string": standard_bus_id(bus)});
    }
    attributes
}

/// The whole GPU `g` as the driver publishes it.
fn gpu_device(g: &GpuInfo, facts: &DriverFacts) -> Value {
    let mut attributes = common_attributes(g, facts);
    attributes["type"] = json!({"string": "gpu"});
    if let Some(uuid) = &g.uuid {
        attributes["uuid"] = json!({"string": uuid});
    }
    if facts.publish_index {
        attributes["index"] = json!({"int": g.index});
        attributes["minor"] = json!({"int": g.index});
    }
    json!({
        "name": format!("gpu-{}", g.index),
        "attributes": attributes,
        "capacity": {"memory": {"value": facts.memory}},
    })
}

/// The PCIe root complex a GPU hangs off: from its PCI bus id when known
/// (`pci<domain>:<bus rounded down to the root port's range>`), else one
/// root per NUMA node, else one per four GPUs.
pub(crate) fn pcie_root(index: u32, bus: Option<&str>, numa: Option<i32>) -> String {
    match (bus, numa) {
        (Some(bus), _) => {
            let b = u32::from_str_radix(bus.split(':').nth(1).unwrap_or("0"), 16).unwrap_or(0);
            format!("pci0000:{:02x}", b & 0xc0)
        }
        (None, Some(n)) => format!("pci0000:{:02x}", n.clamp(0, 15) * 0x10),
        (None, None) => format!("pci0000:{:02x}", index / 4 * 0x80),
    }
}

/// `0000:06:00.0`: the 4-digit domain form of `resource.kubernetes.io/pciBusID`.
pub(crate) fn standard_bus_id(bus: &str) -> String {
    let (domain, rest) = bus.split_once(':').unwrap_or(("0000", bus));
    let domain = &domain[domain.len().saturating_sub(4)..];
    format!("{domain}:{rest}").to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_get_their_architecture_and_unknown_ones_none() {
        let a100 = DriverFacts::for_product("NVIDIA A100-SXM4-40GB", "40Gi").expect("known");
        assert_eq!(
            (a100.architecture.as_str(), a100.compute_capability.as_str()),
            ("Ampere", "8.0.0")
        );
        let h100 = DriverFacts::for_product("NVIDIA H100 80GB HBM3", "80Gi").expect("known");
        assert_eq!(h100.architecture, "Hopper");
        assert!(DriverFacts::for_product("Radeon Instinct MI250X", "64Gi").is_none());
    }

    #[test]
    fn bus_ids_take_the_four_digit_domain() {
        assert_eq!(standard_bus_id("00000000:07:00.0"), "0000:07:00.0");
        assert_eq!(pcie_root(0, Some("00000000:47:00.0"), None), "pci0000:40");
        assert_eq!(pcie_root(5, None, Some(1)), "pci0000:10");
        assert_eq!(pcie_root(5, None, None), "pci0000:80");
    }
}
