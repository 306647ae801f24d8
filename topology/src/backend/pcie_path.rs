//! NICs from sysfs, for the backends that ask the driver about GPUs only
//! (NVML): each RDMA device in `/sys/class/infiniband`, and how it reaches
//! each GPU, read off where both sit in the PCI tree, in `nvidia-smi topo
//! -m`'s words.
//!
//! A device's place is its path under `/sys/devices`:
//! `pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:04.0/0000:8a:00.0` is the
//! host bridge (root complex), a root port, a switch's upstream and
//! downstream ports, then the device. Two devices
//!
//! * under different host bridges: `NODE` on one NUMA node, else `SYS`
//!   (also when either NUMA node is unknown: the worst is assumed);
//! * sharing no bridge below the host bridge's root ports: `PHB`;
//! * sharing a switch, each at most one port below it: `PIX`;
//! * sharing a switch, one of them behind further bridges: `PXB`.

use crate::backend::sysfs::{SysfsNic, SysfsSource};
use crate::facts::{GpuFacts, NicFacts};
use gputopo_api::LinkType;

/// How two devices at sysfs paths `a` and `b` (NUMA nodes `numa_a`,
/// `numa_b`) reach each other over PCIe.
pub fn pcie_link(a: &str, numa_a: Option<i32>, b: &str, numa_b: Option<i32>) -> LinkType {
    let a: Vec<&str> = a.split('/').filter(|c| !c.is_empty()).collect();
    let b: Vec<&str> = b.split('/').filter(|c| !c.is_empty()).collect();
    // The bridges above each device (the device itself left out).
    let (up_a, up_b) = (
        &a[..a.len().saturating_sub(1)],
        &b[..b.len().saturating_sub(1)],
    );
    if up_a.first() != up_b.first() || up_a.is_empty() {
        return match (numa_a, numa_b) {
            (Some(x), Some(y)) if x == y => LinkType::Node,
            _ => LinkType::Sys,
        };
    }
    let shared = up_a.iter().zip(up_b).take_while(|(x, y)| x == y).count();
    // Host bridge and root port: nothing below them is shared.
    if shared <= 2 {
        return LinkType::Phb;
    }
    if up_a.len() - shared <= 1 && up_b.len() - shared <= 1 {
        LinkType::Pix
    } else {
        LinkType::Pxb
    }
}

/// The NICs sysfs lists, each with its link to every GPU of `gpus`; empty
/// when a GPU's or a NIC's place in the PCI tree is unknown (a NIC is only
/// worth publishing with every link known).
pub fn nic_facts(gpus: &[GpuFacts], sysfs: &dyn SysfsSource) -> Vec<NicFacts> {
    let places: Option<Vec<(u32, String, Option<i32>)>> = gpus
        .iter()
        .map(|g| {
            let bus = g.pci_bus_id.as_deref()?;
            Some((g.index, sysfs.pci_path(bus)?, g.numa_node))
        })
        .collect();
    let Some(places) = places else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for SysfsNic { name, pci_bus_id } in sysfs.rdma_nics() {
        let Some(path) = sysfs.pci_path(&pci_bus_id) else {
            return Vec::new();
        };
        let numa_node = sysfs.numa_node(&pci_bus_id);
        let gpu_links = places
            .iter()
            .map(|(index, gpu_path, gpu_numa)| {
                (*index, pcie_link(&path, numa_node, gpu_path, *gpu_numa))
            })
            .collect();
        out.push(NicFacts {
            name,
            numa_node,
            gpu_links,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: &str = "pci0000:80/0000:80:01.0/0000:81:00.0";

    #[test]
    fn link_types_follow_the_tree() {
        let gpu = format!("{SWITCH}/0000:82:00.0/0000:87:00.0");
        let nic_same_switch = format!("{SWITCH}/0000:82:04.0/0000:8a:00.0");
        let nic_same_port = format!("{SWITCH}/0000:82:00.0/0000:87:00.1");
        let nic_nested = format!("{SWITCH}/0000:82:08.0/0000:90:00.0/0000:91:00.0/0000:92:00.0");
        let other_root_port = "pci0000:80/0000:80:03.0/0000:a0:00.0";
        let other_host = "pci0000:c0/0000:c0:01.0/0000:c1:00.0";
        assert_eq!(
            pcie_link(&gpu, Some(1), &nic_same_switch, Some(1)),
            LinkType::Pix
        );
        assert_eq!(
            pcie_link(&gpu, Some(1), &nic_same_port, Some(1)),
            LinkType::Pix
        );
        assert_eq!(
            pcie_link(&gpu, Some(1), &nic_nested, Some(1)),
            LinkType::Pxb
        );
        assert_eq!(
            pcie_link(&gpu, Some(1), other_root_port, Some(1)),
            LinkType::Phb
        );
        assert_eq!(
            pcie_link(&gpu, Some(1), other_host, Some(1)),
            LinkType::Node
        );
        assert_eq!(pcie_link(&gpu, Some(1), other_host, Some(3)), LinkType::Sys);
        assert_eq!(
            pcie_link(&gpu, None, other_host, None),
            LinkType::Sys,
            "unknown: the worst"
        );
        // Symmetric.
        assert_eq!(
            pcie_link(&nic_nested, Some(1), &gpu, Some(1)),
            LinkType::Pxb
        );
        // A VM's flat bus: everything on the host bridge.
        assert_eq!(
            pcie_link(
                "pci0000:00/0000:00:05.0",
                None,
                "pci0000:00/0000:00:06.0",
                None
            ),
            LinkType::Phb
        );
    }
}
