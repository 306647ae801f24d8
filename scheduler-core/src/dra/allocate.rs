//! One pod's claims on one node: the candidate devices of each request, the
//! pod's whole GPU set chosen by the topology objective, the split of that set
//! over the requests, other drivers' devices closest to it, and the
//! `AllocationResult`s to write.

use super::candidates::{Candidates, Takes, all_unavailable, candidates};
use super::cel::{CelEnv, DeviceValue};
use super::claim::{Alternatives, ClaimPlan, DraPod, Mode};
use super::constraint::{Combination, constraint_combinations};
use super::device::DeviceId;
use super::error::NodeReason;
use super::inventory::DraInventory;
use super::matching::split;
use super::node_devices::NodeDevices;
use super::others;
pub use super::results::pin;
use super::results::{result_for, share};
use crate::gpuset::{NodeShape, SetPick, SetRequest, constrained_subsets};
use gputopo_api::k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult,
};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// The pod's claims placed on one node.
#[derive(Clone, Debug, PartialEq)]
pub struct DraFit {
    pub node: String,
    /// The pod's whole GPU set (fixed and chosen), with its bottleneck, NUMA
    /// span, leftover and 0–100 score, for the node score and the event.
    pub pick: SetPick,
    /// GPUs the pod had no choice about: already-allocated claims and
    /// `allocationMode: All` requests.
    pub fixed: u32,
    /// One per claim, in the pod's order.
    pub claims: Vec<ClaimAllocation>,
    /// Upstream's prioritized-list score before normalizing: per
    /// `firstAvailable` request, 8 minus the chosen subrequest's index (0
    /// without `firstAvailable`). Nodes that give the preferred
    /// subrequests win.
    pub preference: u32,
}

impl DraFit {
    /// The pod's GPU indices, sorted: the `gputopo.dev/assigned-gpus` value.
    pub fn gpus(&self) -> Vec<u32> {
        self.pick.gpu_indices()
    }

    /// Claims to write (those not allocated yet).
    pub fn to_write(&self) -> impl Iterator<Item = &ClaimAllocation> {
        self.claims.iter().filter(|c| c.allocation.is_some())
    }

    /// `claim: driver/pool/device, ...`: the devices, for the `Scheduled` event.
    pub fn devices_text(&self) -> String {
        let devices: Vec<String> = self
            .claims
            .iter()
            .flat_map(|c| {
                c.devices
                    .iter()
                    .map(move |d| format!("{}: {}", c.name, d.device))
            })
            .collect();
        devices.join(", ")
    }
}

/// What one claim gets.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimAllocation {
    /// `namespace/name`.
    pub key: String,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    /// Request by request, GPUs ascending within a request.
    pub devices: Vec<AssignedDevice>,
    /// `status.allocation` to write; `None` when the claim was allocated already.
    pub allocation: Option<AllocationResult>,
}

impl ClaimAllocation {
    /// The results this decision writes (none for a claim allocated already).
    pub fn written_results(&self) -> &[DeviceRequestAllocationResult] {
        self.allocation
            .as_ref()
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_deref())
            .unwrap_or_default()
    }
}

/// One device of a claim's allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignedDevice {
    pub request: String,
    pub device: DeviceId,
    /// Its GPU index; `None` for a device of an existing allocation that the
    /// topology does not know.
    pub gpu: Option<u32>,
}

impl DraPod {
    /// Places the pod's claims on `node`. `shape` is the node's topology
    /// (`None` without `GpuTopology`), `request` the pod's GPU-set request
    /// from its `gputopo.dev/*` annotations with the node's `single_numa_node`
    /// (`request.gpus` is ignored: the claims say how many).
    ///
    /// With `firstAvailable`, the combinations of subrequests are tried in
    /// upstream's order and the first that fits wins (each judged with the
    /// topology objective).
    pub fn fit(
        &self,
        inventory: &DraInventory,
        node: &str,
        shape: Option<&NodeShape>,
        request: &SetRequest,
    ) -> Result<DraFit, NodeReason> {
        let variants = match &self.alternatives {
            Alternatives::None => return self.fit_exact(inventory, node, shape, request),
            Alternatives::TooMany => return Err(NodeReason::SearchTooLarge),
            Alternatives::Tried(variants) => variants,
        };
        let mut first_error = None;
        for v in variants {
            match v.pod.fit_exact(inventory, node, shape, request) {
                Ok(mut fit) => {
                    fit.preference = v.preference;
                    return Ok(fit);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.unwrap_or(NodeReason::SearchTooLarge))
    }

    /// [`DraPod::fit`] for the requests as they are (no alternatives tried).
    fn fit_exact(
        &self,
        inventory: &DraInventory,
        node: &str,
        shape: Option<&NodeShape>,
        request: &SetRequest,
    ) -> Result<DraFit, NodeReason> {
        let (fixed, existing) = self.existing_allocations(inventory, node)?;
        let pending = self.claims.iter().any(|c| c.allocated.is_none());
        let no_devices;
        let devices = match inventory.node(node) {
            Some(d) if !(pending && d.devices.is_empty()) => d,
            _ if pending => return Err(NodeReason::NoDevices),
            _ => {
                no_devices = NodeDevices::empty(node);
                &no_devices
            }
        };
        let (cands, all_fixed) = self.request_candidates(inventory, devices, fixed)?;
        let fixed = fixed | all_fixed;
        let wants_gpus = fixed != 0 || cands.iter().any(|c| c.takes == Takes::Gpus);
        let shape = match shape {
            Some(shape) if wants_gpus && devices.devices.iter().any(|d| d.gpu.is_some()) => {
                Some(shape)
            }
            _ if wants_gpus => return Err(NodeReason::NoTopology),
            _ => None,
        };
        let node_view = NodeView {
            devices,
            inventory,
            shape,
        };
        let best = self.best_split(&node_view, request, fixed, &cands)?;
        Ok(DraFit {
            node: node.to_string(),
            pick: best.pick,
            fixed,
            claims: self.allocations(node, devices, existing, &cands, &best),
            preference: 0,
        })
    }

    /// The devices of the pod's already-allocated claims, by claim index, and
    /// the GPUs they fix; or why those claims cannot be used on `node`.
    fn existing_allocations(
        &self,
        inventory: &DraInventory,
        node: &str,
    ) -> Result<(u32, BTreeMap<usize, Vec<AssignedDevice>>), NodeReason> {
        let mut fixed = 0u32;
        let mut existing: BTreeMap<usize, Vec<AssignedDevice>> = BTreeMap::new();
        for (ci, claim) in self.claims.iter().enumerate() {
            let Some(allocated) = &claim.allocated else {
                continue;
            };
            if let Some(pinned) = allocated.pinned_node()
                && pinned != node
            {
                return Err(NodeReason::ClaimElsewhere {
                    claim: claim.key.clone(),
                    node: pinned.to_string(),
                });
            }
            let mut devices = Vec::new();
            for r in &allocated.results {
                let id = DeviceId {
                    driver: r.driver.clone(),
                    pool: r.pool.clone(),
                    device: r.device.clone(),
                };
                // A device published on another node pins the claim there;
                // one published nowhere (a GPU driver's device gone, or a
                // device reachable from many nodes, which gputopo does not
                // read) is judged by the allocation's node selector alone.
                let gpu = match inventory.node(node).and_then(|n| n.device(&id)) {
                    Some(d) => d.gpu,
                    None => match inventory.find(&id) {
                        Some((other, _)) => {
                            return Err(NodeReason::ClaimElsewhere {
                                claim: claim.key.clone(),
                                node: other.to_string(),
                            });
                        }
                        None if inventory.config.handles(&r.driver) => {
                            return Err(NodeReason::ClaimDevicesMissing {
                                claim: claim.key.clone(),
                                device: Box::new(id),
                            });
                        }
                        None => None,
                    },
                };
                fixed |= gpu.map_or(0, |g| 1 << g);
                devices.push(AssignedDevice {
                    request: r.request.clone(),
                    device: id,
                    gpu,
                });
            }
            existing.insert(ci, devices);
        }
        Ok((fixed, existing))
    }

    /// Every pending request's candidates on the node, and the GPUs its
    /// `All` requests take (no other request of the pod may share them).
    fn request_candidates(
        &self,
        inventory: &DraInventory,
        devices: &NodeDevices,
        fixed: u32,
    ) -> Result<(Vec<Candidates>, u32), NodeReason> {
        let env = CelEnv::default();
        let values = devices
            .devices
            .iter()
            .map(|d| DeviceValue::new(&env, d))
            .collect::<Vec<_>>();
        let mut cands: Vec<Candidates> = Vec::new();
        let mut all_fixed = 0u32;
        for (ci, claim) in self.claims.iter().enumerate() {
            if claim.allocated.is_some() {
                continue;
            }
            for (ri, _) in claim.requests.iter().enumerate() {
                let c = candidates(inventory, devices, &env, &values, claim, ci, ri)?;
                if c.mode == Mode::All && c.takes == Takes::Gpus {
                    if c.mask & (all_fixed | fixed) != 0 {
                        let gpu = (c.mask & (all_fixed | fixed)).trailing_zeros();
                        return Err(all_unavailable(
                            claim,
                            ri,
                            devices,
                            gpu,
                            "taken by another claim or request of this pod",
                        ));
                    }
                    all_fixed |= c.mask;
                }
                cands.push(c);
            }
        }
        Ok((cands, all_fixed))
    }

    /// The best whole GPU set over the constraints' value combinations
    /// (`fixed` GPUs included), with per candidate request the GPUs of the
    /// set it gets and the other drivers' devices closest to that set; or
    /// the first reason a combination failed.
    fn best_split(
        &self,
        node: &NodeView<'_>,
        request: &SetRequest,
        fixed: u32,
        cands: &[Candidates],
    ) -> Result<Split, NodeReason> {
        let combos = constraint_combinations(self, node.devices, cands)?;
        let mut best: Option<Split> = None;
        let mut first_error: Option<NodeReason> = None;
        let mut too_few = None;
        for combo in combos {
            match self.split_one(node, request, fixed, cands, &combo) {
                Ok(split) => {
                    if best.as_ref().is_none_or(|b| better(&split.pick, &b.pick)) {
                        best = Some(split);
                    }
                }
                Err(SplitFailure::TooFew(i)) => {
                    too_few.get_or_insert(i);
                }
                Err(SplitFailure::Skip) => {}
                Err(SplitFailure::Node(e)) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let Some(best) = best else {
            if let Some(e) = first_error {
                return Err(e);
            }
            let i = too_few.unwrap_or(0);
            let claim = cands.get(i).map(|c| &self.claims[c.claim]);
            return Err(
                match claim.and_then(|c| Some((c, c.constraints.first()?))) {
                    Some((claim, c)) => NodeReason::ConstraintUnsatisfiable {
                        claim: claim.key.clone(),
                        attribute: c.attribute.clone(),
                    },
                    None => NodeReason::NoSplit { gpus: request.gpus },
                },
            );
        };
        Ok(best)
    }

    /// One combination of constraint values: the GPU set, its split, and
    /// the other devices; or why this combination fails.
    fn split_one(
        &self,
        node: &NodeView<'_>,
        request: &SetRequest,
        fixed: u32,
        cands: &[Candidates],
        combo: &Combination,
    ) -> Result<Split, SplitFailure> {
        let count_reqs: Vec<usize> = (0..cands.len())
            .filter(|&i| cands[i].takes == Takes::Gpus && matches!(cands[i].mode, Mode::Count(_)))
            .collect();
        let count = |i: usize| match cands[i].mode {
            Mode::Count(n) => n,
            Mode::All => 0,
        };
        let counts: Vec<u32> = count_reqs.iter().map(|&i| count(i)).collect();
        let req_masks: Vec<u32> = count_reqs.iter().map(|&i| combo.masks[i]).collect();
        if let Some(j) = (0..counts.len()).find(|&j| req_masks[j].count_ones() < counts[j]) {
            return Err(SplitFailure::TooFew(count_reqs[j]));
        }
        for (i, c) in cands.iter().enumerate() {
            match (c.takes, c.mode) {
                // `All` requests under a constraint keep only the devices of this value.
                (Takes::Gpus, Mode::All) if combo.masks[i] != c.mask => {
                    return Err(SplitFailure::Skip);
                }
                (Takes::Others, Mode::All) if combo.others[i] != c.others => {
                    return Err(SplitFailure::Skip);
                }
                (Takes::Others, Mode::Count(n)) if (combo.others[i].len() as u32) < n => {
                    return Err(SplitFailure::TooFew(i));
                }
                _ => {}
            }
        }
        let (pick, splits) = match node.shape {
            Some(shape) => {
                solve(shape, request, fixed, &counts, &req_masks).map_err(SplitFailure::Node)?
            }
            None => (SetPick::empty(), Vec::new()),
        };
        let mut gpus = vec![0u32; cands.len()];
        for (j, &i) in count_reqs.iter().enumerate() {
            gpus[i] = splits[j];
        }
        for (i, c) in cands.iter().enumerate() {
            if c.takes == Takes::Gpus && c.mode == Mode::All {
                gpus[i] = c.mask;
            }
        }
        let asks: Vec<&BTreeMap<String, i128>> = cands
            .iter()
            .map(|c| &self.claims[c.claim].requests[c.request].capacity)
            .collect();
        let others = others::choose(
            node.devices,
            node.inventory,
            pick.gpus,
            cands,
            &asks,
            &combo.others,
        )
        .ok_or(SplitFailure::Node(NodeReason::NotDistinct))?;
        Ok(Split { pick, gpus, others })
    }

    /// One allocation per claim, in the pod's order: an allocated claim as it
    /// is; a pending one with the devices on its requests' GPUs (`per`) and
    /// the `AllocationResult` to write, pinned to `node`.
    fn allocations(
        &self,
        node: &str,
        devices: &NodeDevices,
        mut existing: BTreeMap<usize, Vec<AssignedDevice>>,
        cands: &[Candidates],
        split: &Split,
    ) -> Vec<ClaimAllocation> {
        let mut claims = Vec::with_capacity(self.claims.len());
        for (ci, claim) in self.claims.iter().enumerate() {
            if let Some(devices) = existing.remove(&ci) {
                claims.push(allocation(claim, devices, None));
                continue;
            }
            let mut assigned = Vec::new();
            let mut results = Vec::new();
            for (i, c) in cands.iter().enumerate().filter(|(_, c)| c.claim == ci) {
                let plan = &claim.requests[c.request];
                for &d in &split.others[i] {
                    let d = &devices.devices[d];
                    let mut result = result_for(&plan.name, d, &plan.tolerations);
                    if plan.admin_access {
                        result.admin_access = Some(true);
                    } else if d.multi {
                        share(&mut result, d, &plan.capacity, &claim.key, results.len());
                    }
                    results.push(result);
                    assigned.push(AssignedDevice {
                        request: plan.name.clone(),
                        device: d.id.clone(),
                        gpu: None,
                    });
                }
                let mut gpus = split.gpus[i];
                while gpus != 0 {
                    let gpu = gpus.trailing_zeros();
                    gpus &= gpus - 1;
                    let Some(d) = devices.device_on(gpu) else {
                        continue;
                    };
                    results.push(result_for(&plan.name, d, &plan.tolerations));
                    assigned.push(AssignedDevice {
                        request: plan.name.clone(),
                        device: d.id.clone(),
                        gpu: Some(gpu),
                    });
                }
            }
            let written = AllocationResult {
                allocation_timestamp: None,
                devices: Some(DeviceAllocationResult {
                    config: (!claim.config.is_empty()).then(|| claim.config.clone()),
                    results: Some(results),
                }),
                node_selector: Some(pin(node)),
            };
            claims.push(allocation(claim, assigned, Some(written)));
        }
        claims
    }
}

/// One node as a decision sees it: its devices, the inventory (counters,
/// shared devices' use), and its topology where the pod asks GPUs.
struct NodeView<'a> {
    devices: &'a NodeDevices,
    inventory: &'a DraInventory,
    shape: Option<&'a NodeShape>,
}

/// One combination's answer: the pod's GPU set and, per candidate request,
/// its GPUs and its other drivers' devices.
struct Split {
    pick: SetPick,
    gpus: Vec<u32>,
    others: Vec<Vec<usize>>,
}

/// Why one combination of constraint values gives no split.
enum SplitFailure {
    /// Candidate request `i` has too few devices with these values.
    TooFew(usize),
    /// Not a candidate (an `All` request losing devices to a constraint, or
    /// other devices that cannot be made distinct).
    Skip,
    Node(NodeReason),
}

fn allocation(
    claim: &ClaimPlan,
    devices: Vec<AssignedDevice>,
    allocation: Option<AllocationResult>,
) -> ClaimAllocation {
    ClaimAllocation {
        key: claim.key.clone(),
        namespace: claim.namespace.clone(),
        name: claim.name.clone(),
        uid: claim.uid.clone(),
        devices,
        allocation,
    }
}

/// The pod's GPU set: `fixed` plus, for each count request, its count from
/// its mask; chosen by the topology objective over the whole set.
fn solve(
    shape: &NodeShape,
    request: &SetRequest,
    fixed: u32,
    counts: &[u32],
    masks: &[u32],
) -> Result<(SetPick, Vec<u32>), NodeReason> {
    let k: u32 = counts.iter().sum();
    let total = k + fixed.count_ones();
    let set_request = SetRequest {
        gpus: total,
        ..*request
    };
    let union = masks.iter().fold(0u32, |m, &x| m | x) & !fixed;
    let uniform = masks.windows(2).all(|w| w[0] == w[1]);
    let pick = if fixed == 0 && uniform {
        shape
            .pick(union, &set_request)
            .map_err(NodeReason::NoGpuSet)?
    } else {
        if constrained_subsets(union.count_ones(), k).is_none() {
            return Err(NodeReason::SearchTooLarge);
        }
        let mut accept = |set: u32| split(set & !fixed, counts, masks).is_some();
        shape
            .pick_constrained(union, fixed, &set_request, &mut accept)
            .map_err(NodeReason::NoGpuSet)?
            .ok_or(NodeReason::NoSplit { gpus: total })?
    };
    let splits =
        split(pick.gpus & !fixed, counts, masks).ok_or(NodeReason::NoSplit { gpus: total })?;
    Ok((pick, splits))
}

/// The design's order on whole sets: bottleneck, fewer NUMA nodes, better
/// leftover, lower indices.
fn better(a: &SetPick, b: &SetPick) -> bool {
    let quality = |p: &SetPick| (p.bottleneck.is_none(), p.bottleneck);
    quality(a)
        .cmp(&quality(b))
        .then(b.numa_nodes.cmp(&a.numa_nodes))
        .then(a.leftover.cmp_connectivity(&b.leftover))
        .then_with(|| b.gpu_indices().cmp(&a.gpu_indices()))
        == Ordering::Greater
}
