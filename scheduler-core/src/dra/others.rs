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

use super::candidates::{Candidates, Takes};
use super::claim::Mode;
use super::counters::Counters;
use super::device::DraDevice;
use super::inventory::NodeDevices;
use gputopo_api::LinkType;
use std::collections::{BTreeSet, HashMap, HashSet};

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
/// requests distinct devices closest to `chosen`, all within their pools'
/// counters (`counters`, less what the chosen GPUs consume). `None` when
/// the requests cannot all be given such devices.
pub(super) fn choose(
    devices: &NodeDevices,
    counters: &Counters,
    chosen: u32,
    cands: &[Candidates],
    others: &[Vec<usize>],
) -> Option<Vec<Vec<usize>>> {
    let mut out = vec![Vec::new(); cands.len()];
    let mut taken = BTreeSet::new();
    let mut ledger = counters.clone();
    let mut gpus = chosen;
    while gpus != 0 {
        let gpu = gpus.trailing_zeros();
        gpus &= gpus - 1;
        if let Some(d) = devices.device_on(gpu) {
            ledger.consume(&d.id.driver, &d.id.pool, &d.consumes);
        }
    }
    for (i, c) in cands.iter().enumerate() {
        if c.takes == Takes::Others && c.mode == Mode::All {
            for &d in &others[i] {
                let device = &devices.devices[d];
                if !taken.insert(d)
                    || !ledger.fits(&device.id.driver, &device.id.pool, &device.consumes)
                {
                    return None;
                }
                ledger.consume(&device.id.driver, &device.id.pool, &device.consumes);
            }
            out[i] = others[i].clone();
        }
    }
    // Slots in request order, each with its candidates closest first.
    let mut slots: Vec<(usize, Vec<usize>)> = Vec::new();
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
            slots.push((i, list.clone()));
        }
    }
    let shares_counters = slots
        .iter()
        .flat_map(|(_, list)| list)
        .any(|&d| !devices.devices[d].consumes.is_empty());
    let owner = if shares_counters {
        let mut search = CounterSearch {
            devices,
            slots: &slots,
            steps: 0,
        };
        let mut picked = Vec::with_capacity(slots.len());
        search
            .assign(0, &mut ledger, &mut taken, &mut picked)
            .then(|| picked.into_iter().enumerate().collect::<Vec<_>>())?
    } else {
        match_slots(&slots)?
    };
    for (slot, device) in owner {
        out[slots[slot].0].push(device);
    }
    for list in &mut out {
        list.sort_unstable();
    }
    Some(out)
}

/// The most devices tried in one search for slots whose devices share
/// counters, before the node is given up as too large a search.
const MAX_COUNTER_STEPS: u32 = 100_000;

/// Slots whose devices consume shared counters (MIG partitions): a
/// depth-first search in slot order, each slot trying its devices closest
/// first, keeping the counters' sums within their values as upstream's
/// allocator does.
struct CounterSearch<'a> {
    devices: &'a NodeDevices,
    slots: &'a [(usize, Vec<usize>)],
    steps: u32,
}

impl CounterSearch<'_> {
    fn assign(
        &mut self,
        slot: usize,
        ledger: &mut Counters,
        taken: &mut BTreeSet<usize>,
        picked: &mut Vec<usize>,
    ) -> bool {
        if slot == self.slots.len() {
            return true;
        }
        for &d in &self.slots[slot].1 {
            self.steps += 1;
            if self.steps > MAX_COUNTER_STEPS {
                return false;
            }
            let device = &self.devices.devices[d];
            let (driver, pool) = (&device.id.driver, &device.id.pool);
            if taken.contains(&d) || !ledger.fits(driver, pool, &device.consumes) {
                continue;
            }
            let before = ledger.clone();
            ledger.consume(driver, pool, &device.consumes);
            taken.insert(d);
            picked.push(d);
            if self.assign(slot + 1, ledger, taken, picked) {
                return true;
            }
            picked.pop();
            taken.remove(&d);
            *ledger = before;
        }
        false
    }
}

/// A device per slot, each from the slot's list, all distinct: slots in
/// order, each taking the first free device of its list, and only where
/// none is free moving earlier slots along an augmenting path (Kuhn's
/// algorithm), so earlier slots keep their choices where they can. As
/// `(slot, device)` pairs, or `None` when no such assignment exists.
fn match_slots(slots: &[(usize, Vec<usize>)]) -> Option<Vec<(usize, usize)>> {
    let mut owner: HashMap<usize, usize> = HashMap::new();
    for slot in 0..slots.len() {
        let mut visited = HashSet::new();
        if !augment(slot, slots, &mut owner, &mut visited) {
            return None;
        }
    }
    let mut pairs: Vec<(usize, usize)> = owner.into_iter().map(|(d, s)| (s, d)).collect();
    pairs.sort_unstable();
    Some(pairs)
}

fn augment(
    slot: usize,
    slots: &[(usize, Vec<usize>)],
    owner: &mut HashMap<usize, usize>,
    visited: &mut HashSet<usize>,
) -> bool {
    let list = &slots[slot].1;
    if let Some(&d) = list.iter().find(|d| !owner.contains_key(d)) {
        owner.insert(d, slot);
        return true;
    }
    for &d in list {
        if !visited.insert(d) {
            continue;
        }
        let Some(&other) = owner.get(&d) else {
            continue;
        };
        if augment(other, slots, owner, visited) {
            owner.insert(d, slot);
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::match_slots;

    #[test]
    fn a_later_slot_moves_an_earlier_one_along_an_augmenting_path() {
        // Slot 0 prefers device 1, slot 1 can only take device 1.
        let slots = vec![(0, vec![1, 2]), (1, vec![1])];
        assert_eq!(match_slots(&slots), Some(vec![(0, 2), (1, 1)]));
    }

    #[test]
    fn too_few_distinct_devices_is_none() {
        let slots = vec![(0, vec![1]), (1, vec![1])];
        assert_eq!(match_slots(&slots), None);
    }

    #[test]
    fn each_slot_keeps_its_first_choice_where_nothing_competes() {
        let slots = vec![(0, vec![5, 1]), (0, vec![5, 1]), (1, vec![7])];
        assert_eq!(match_slots(&slots), Some(vec![(0, 5), (1, 1), (2, 7)]));
    }
}
