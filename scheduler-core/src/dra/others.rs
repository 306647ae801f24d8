//! Other drivers' devices (IMEX channels, NICs, anything gputopo does not
//! place by topology) given to their requests once the pod's GPU set is
//! chosen: every request gets distinct devices from its candidates, as
//! upstream's allocator guarantees, and among the ways to do so each slot
//! takes the device closest to the chosen GPUs.
//!
//! Closeness, best first: the same `resource.kubernetes.io/pcieRoot` as a
//! chosen GPU; the `GpuTopology`'s link between the NIC and a chosen GPU
//! (PIX, PXB, PHB, NODE, SYS); the same NUMA node; unknown. Upstream's
//! allocator takes the first devices that fit; gputopo's choice satisfies
//! the same claims and prefers devices the GPUs reach without crossing the
//! CPU.

use super::assign::{Ledger, LedgerSearch, Slot, match_slots};
use super::candidates::{Candidates, Takes};
use super::capacity::Amounts;
use super::claim::Mode;
use super::device::DraDevice;
use super::inventory::DraInventory;
use super::node_devices::NodeDevices;
use gputopo_api::LinkType;
use std::collections::BTreeSet;

/// The standard attribute naming a device's PCIe root complex.
pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";

/// How close `device` is to the GPUs of `chosen` (lower is closer).
pub(super) fn closeness(devices: &NodeDevices, chosen: u32, device: &DraDevice) -> u8 {
    if chosen == 0 {
        return 0;
    }
    let gpus = || {
        (0..32u32)
            .filter(move |g| chosen & (1 << g) != 0)
            .filter_map(|g| devices.device_on(g).map(|d| (g, d)))
    };
    if let Some(root) = device
        .attribute(PCIE_ROOT)
        .and_then(|a| a.string.as_deref())
        && gpus()
            .any(|(_, g)| g.attribute(PCIE_ROOT).and_then(|a| a.string.as_deref()) == Some(root))
    {
        return 0;
    }
    if let Some(link) = nic_link(devices, chosen, device) {
        return link;
    }
    let numa = device
        .attribute(NUMA_NODE)
        .or_else(|| device.attribute(&format!("{}/numaNode", device.id.driver)))
        .and_then(|a| a.int);
    match numa {
        Some(n) if gpus().any(|(g, _)| devices.wiring.gpu_numa.get(&g) == Some(&n)) => 4,
        Some(_) if !devices.wiring.gpu_numa.is_empty() => 5,
        _ => 6,
    }
}

/// The standard attribute naming a device's NUMA node.
pub const NUMA_NODE: &str = "resource.kubernetes.io/numaNode";

/// The topology's best link from the NIC `device` is (a string attribute
/// equal to the NIC's RDMA name, `mlx5_0`) to a chosen GPU, ranked 1 (PIX)
/// to 5 (SYS).
fn nic_link(devices: &NodeDevices, chosen: u32, device: &DraDevice) -> Option<u8> {
    let names: Vec<&str> = device
        .attributes
        .values()
        .filter_map(|a| a.string.as_deref())
        .collect();
    let nic = devices
        .wiring
        .nics
        .iter()
        .find(|n| names.contains(&n.name.as_str()))?;
    nic.gpu_links
        .iter()
        .filter(|l| chosen & (1 << l.gpu) != 0)
        .map(|l| match l.link_type {
            LinkType::Pix => 1,
            LinkType::Pxb => 2,
            LinkType::Phb => 3,
            LinkType::Node => 4,
            _ => 5,
        })
        .min()
}

/// Per candidate request, the other drivers' devices it gets (node device
/// indices; empty for GPU requests): `All` requests every candidate, count
/// requests distinct devices closest to `chosen` (a shared device may serve
/// several), all within their pools' counters and shared devices'
/// capacities (`inventory`'s, less what the chosen GPUs consume). `asks`
/// is each candidate request's `capacity.requests`. `None` when the
/// requests cannot all be given such devices.
pub(super) fn choose(
    devices: &NodeDevices,
    inventory: &DraInventory,
    chosen: u32,
    cands: &[Candidates],
    asks: &[&Amounts],
    others: &[Vec<usize>],
) -> Option<Vec<Vec<usize>>> {
    let mut out = vec![Vec::new(); cands.len()];
    let mut taken = BTreeSet::new();
    let mut ledger = Ledger::new(inventory, devices);
    let mut gpus = chosen;
    while gpus != 0 {
        let gpu = gpus.trailing_zeros();
        gpus &= gpus - 1;
        if let Some(d) = devices.device_on(gpu) {
            ledger
                .counters
                .consume(&d.id.driver, &d.id.pool, &d.consumes);
        }
    }
    for (i, c) in cands.iter().enumerate() {
        if c.takes == Takes::Others && c.mode == Mode::All {
            for &d in &others[i] {
                let device = &devices.devices[d];
                if !device.multi && !taken.insert(d) || !ledger.fits(d, device, asks[i]) {
                    return None;
                }
                ledger.take(d, device, asks[i]);
            }
            out[i] = others[i].clone();
        }
    }
    // Slots in request order, each with its candidates closest first.
    let mut slots: Vec<Slot<'_>> = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        let Mode::Count(n) = c.mode else { continue };
        if c.takes != Takes::Others {
            continue;
        }
        let mut list: Vec<usize> = others[i]
            .iter()
            .copied()
            .filter(|d| !taken.contains(d))
            .collect();
        list.sort_by_key(|&d| (closeness(devices, chosen, &devices.devices[d]), d));
        for _ in 0..n {
            slots.push(Slot {
                request: i,
                devices: list.clone(),
                ask: asks[i],
            });
        }
    }
    let needs_ledger = slots.iter().flat_map(|s| &s.devices).any(|&d| {
        let device = &devices.devices[d];
        device.multi || !device.consumes.is_empty()
    });
    let owner = if needs_ledger {
        LedgerSearch::new(devices, &slots).run(ledger, taken)?
    } else {
        match_slots(&slots)?
    };
    for (slot, device) in owner {
        out[slots[slot].request].push(device);
    }
    for list in &mut out {
        list.sort_unstable();
        list.dedup();
    }
    Some(out)
}
