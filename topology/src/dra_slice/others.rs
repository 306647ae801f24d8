//! The slices of drivers that publish devices beside the GPUs.
//!
//! * NVIDIA's ComputeDomain driver (`compute-domain.nvidia.com`,
//!   `cmd/compute-domain-kubelet-plugin`): one node-local slice, pool named
//!   after the node, with `channel-0` (the IMEX channel a workload pod's
//!   claim takes) and `daemon-0` (the IMEX daemon's), each with the driver's
//!   attributes `type` (`channel` / `daemon`) and `id` (int). The driver
//!   enumerates 2048 channels but publishes channel 0 only.
//! * dranet (`dra.net`, kubernetes-sigs/dranet), for RDMA NICs: one
//!   node-local slice, pool named after the node, one device per NIC named
//!   after its PCI address (`pci-0000-8a-00-0`), with `dra.net/ifName`,
//!   `dra.net/pciAddress`, `dra.net/rdma`, `dra.net/rdmaDevice` (the RDMA
//!   name, `mlx5_0`), `dra.net/numaNode` where known, and the standard
//!   `resource.kubernetes.io/pcieRoot` and `resource.kubernetes.io/numaNode`.
//!   A NIC's PCIe root is the root of the GPUs it reaches through PCIe
//!   switches only (PIX, PXB), else its NUMA node's, else a root of its own.

use super::{node_local_slice, pcie_root};
use gputopo_api::{GpuTopologySpec, LinkType};
use serde_json::{Value, json};

/// NVIDIA's ComputeDomain driver name.
pub const COMPUTE_DOMAIN_DRIVER: &str = "compute-domain.nvidia.com";

/// dranet's driver name.
pub const NIC_DRIVER: &str = "dra.net";

/// The ComputeDomain driver's slice for `node`: `channel-0` and `daemon-0`.
pub fn compute_domain_resource_slice(node: &str) -> Value {
    let device = |kind: &str| {
        json!({
            "name": format!("{kind}-0"),
            "attributes": {"type": {"string": kind}, "id": {"int": 0}},
        })
    };
    node_local_slice(
        node,
        COMPUTE_DOMAIN_DRIVER,
        vec![device("channel"), device("daemon")],
    )
}

/// dranet's slice for `node`: one device per NIC of `spec`; `None` when
/// the topology knows no NIC.
pub fn nic_resource_slice(node: &str, spec: &GpuTopologySpec) -> Option<Value> {
    if spec.nics.is_empty() {
        return None;
    }
    let devices = spec
        .nics
        .iter()
        .enumerate()
        .map(|(i, nic)| {
            // Synthetic but stable: bus 0x80 + i on domain 0.
            let address = format!("0000:{:02x}:00.0", 0x80 + i);
            let close_gpu = nic
                .gpu_links
                .iter()
                .find(|l| matches!(l.link_type, LinkType::Pix | LinkType::Pxb))
                .and_then(|l| spec.gpus.iter().find(|g| g.index == l.gpu));
            let root = match (close_gpu, nic.numa_node) {
                (Some(g), _) => pcie_root(g.index, g.pci_bus_id.as_deref(), g.numa_node),
                (None, Some(n)) => pcie_root(0, None, Some(n)),
                (None, None) => format!("pci0001:{i:02x}"),
            };
            let mut attributes = json!({
                "dra.net/ifName": {"string": format!("ib{i}")},
                "dra.net/pciAddress": {"string": address},
                "dra.net/rdma": {"bool": true},
                "dra.net/rdmaDevice": {"string": nic.name},
                "resource.kubernetes.io/pcieRoot": {"string": root},
            });
            if let Some(n) = nic.numa_node {
                attributes["dra.net/numaNode"] = json!({"int": n});
                attributes["resource.kubernetes.io/numaNode"] = json!({"int": n});
            }
            json!({
                "name": format!("pci-{}", address.replace([':', '.'], "-")),
                "attributes": attributes,
            })
        })
        .collect();
    Some(node_local_slice(node, NIC_DRIVER, devices))
}
