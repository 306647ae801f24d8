//! Giving each slot of the requests for other devices one device of its
//! list: distinct exclusive devices by augmenting paths where nothing else
//! binds them ([`match_slots`]); a depth-first search over a [`Ledger`]
//! where devices consume shared counters (MIG partitions) or are shared up
//! to their capacities (`allowMultipleAllocations`).

use super::capacity::{self, Amounts};
use super::counters::Counters;
use super::device::DraDevice;
use super::inventory::DraInventory;
use super::node_devices::NodeDevices;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// One device wanted by a request: its candidates in order of preference
/// and what it asks of a shared device's capacity.
pub(super) struct Slot<'a> {
    /// The candidate request (index into the decision's candidates).
    pub(super) request: usize,
    /// Node device indices, best first.
    pub(super) devices: Vec<usize>,
    pub(super) ask: &'a Amounts,
}

/// Counters and shared capacity as a decision takes devices.
#[derive(Clone)]
pub(super) struct Ledger<'a> {
    inventory: &'a DraInventory,
    pub(super) counters: Counters,
    /// Per node device index, the capacity this decision takes of it.
    shares: BTreeMap<usize, Amounts>,
}

impl<'a> Ledger<'a> {
    /// A ledger for a decision on the node `devices` (its counters copied:
    /// a node's pools are its own).
    pub(super) fn new(inventory: &'a DraInventory, devices: &NodeDevices) -> Ledger<'a> {
        Ledger {
            inventory,
            counters: devices.counters.clone(),
            shares: BTreeMap::new(),
        }
    }

    /// Whether device `d` is shared already (by allocations or this decision).
    fn in_use(&self, d: usize, device: &DraDevice) -> bool {
        self.shares.contains_key(&d) || self.inventory.shared(&device.id).is_some()
    }

    pub(super) fn fits(&self, d: usize, device: &DraDevice, ask: &Amounts) -> bool {
        let counters_ok = || {
            self.counters
                .fits(&device.id.driver, &device.id.pool, &device.consumes)
        };
        if !device.multi {
            return counters_ok();
        }
        let Some(taking) = capacity::consumed(device, ask) else {
            return false;
        };
        let mut in_use = self
            .inventory
            .shared(&device.id)
            .cloned()
            .unwrap_or_default();
        if let Some(mine) = self.shares.get(&d) {
            capacity::add(&mut in_use, mine);
        }
        // As upstream, a shared device already in use skips the counter check.
        capacity::fits(device, Some(&in_use), &taking) && (self.in_use(d, device) || counters_ok())
    }

    pub(super) fn take(&mut self, d: usize, device: &DraDevice, ask: &Amounts) {
        let first = !self.in_use(d, device);
        if first {
            self.counters
                .consume(&device.id.driver, &device.id.pool, &device.consumes);
        }
        if device.multi
            && let Some(taking) = capacity::consumed(device, ask)
        {
            capacity::add(self.shares.entry(d).or_default(), &taking);
        }
    }
}

/// The most devices tried in one ledger search before the node is given up
/// as too large a search.
const MAX_LEDGER_STEPS: u32 = 100_000;

/// A depth-first search in slot order, each slot trying its devices best
/// first, keeping counters and shared capacity within their values as
/// upstream's allocator does.
pub(super) struct LedgerSearch<'a, 's> {
    devices: &'a NodeDevices,
    slots: &'a [Slot<'s>],
    steps: u32,
}

impl<'a, 's> LedgerSearch<'a, 's> {
    pub(super) fn new(devices: &'a NodeDevices, slots: &'a [Slot<'s>]) -> Self {
        LedgerSearch {
            devices,
            slots,
            steps: 0,
        }
    }

    /// `(slot, device)` pairs, or `None` when no assignment keeps within the ledger.
    pub(super) fn run(
        mut self,
        mut ledger: Ledger<'_>,
        mut taken: BTreeSet<usize>,
    ) -> Option<Vec<(usize, usize)>> {
        let mut picked = Vec::with_capacity(self.slots.len());
        self.assign(0, &mut ledger, &mut taken, &mut picked)
            .then(|| picked.into_iter().enumerate().collect())
    }

    fn assign(
        &mut self,
        slot: usize,
        ledger: &mut Ledger<'_>,
        taken: &mut BTreeSet<usize>,
        picked: &mut Vec<usize>,
    ) -> bool {
        let Some(s) = self.slots.get(slot) else {
            return true;
        };
        for &d in &s.devices {
            self.steps += 1;
            if self.steps > MAX_LEDGER_STEPS {
                return false;
            }
            let device = &self.devices.devices[d];
            // A request takes a shared device once (upstream tries
            // combinations within a request, not repeats).
            let again = picked
                .iter()
                .enumerate()
                .any(|(j, &p)| p == d && self.slots[j].request == s.request);
            if again || taken.contains(&d) || !ledger.fits(d, device, s.ask) {
                continue;
            }
            let before = ledger.clone();
            ledger.take(d, device, s.ask);
            if !device.multi {
                taken.insert(d);
            }
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
pub(super) fn match_slots(slots: &[Slot<'_>]) -> Option<Vec<(usize, usize)>> {
    let lists: Vec<&[usize]> = slots.iter().map(|s| s.devices.as_slice()).collect();
    match_lists(&lists)
}

fn match_lists(lists: &[&[usize]]) -> Option<Vec<(usize, usize)>> {
    let mut owner: HashMap<usize, usize> = HashMap::new();
    for slot in 0..lists.len() {
        let mut visited = HashSet::new();
        if !augment(slot, lists, &mut owner, &mut visited) {
            return None;
        }
    }
    let mut pairs: Vec<(usize, usize)> = owner.into_iter().map(|(d, s)| (s, d)).collect();
    pairs.sort_unstable();
    Some(pairs)
}

fn augment(
    slot: usize,
    lists: &[&[usize]],
    owner: &mut HashMap<usize, usize>,
    visited: &mut HashSet<usize>,
) -> bool {
    let list = lists[slot];
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
        if augment(other, lists, owner, visited) {
            owner.insert(d, slot);
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::match_lists;

    #[test]
    fn a_later_slot_moves_an_earlier_one_along_an_augmenting_path() {
        // Slot 0 prefers device 1, slot 1 can only take device 1.
        let lists: [&[usize]; 2] = [&[1, 2], &[1]];
        assert_eq!(match_lists(&lists), Some(vec![(0, 2), (1, 1)]));
    }

    #[test]
    fn too_few_distinct_devices_is_none() {
        let lists: [&[usize]; 2] = [&[1], &[1]];
        assert_eq!(match_lists(&lists), None);
    }

    #[test]
    fn each_slot_keeps_its_first_choice_where_nothing_competes() {
        let lists: [&[usize]; 3] = [&[5, 1], &[5, 1], &[7]];
        assert_eq!(match_lists(&lists), Some(vec![(0, 5), (1, 1), (2, 7)]));
    }
}
