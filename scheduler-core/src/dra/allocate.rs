//! One pod's claims on one node: the candidate devices of each request, the
//! pod's whole GPU set chosen by the topology objective, the split of that set
//! over the requests, and the `AllocationResult`s to write.

use super::candidates::{Candidates, all_unavailable, candidates};
use super::cel::{CelEnv, DeviceValue};
use super::claim::{ClaimPlan, DraPod, Mode};
use super::constraint::constraint_combinations;
use super::device::DeviceId;
use super::error::NodeReason;
use super::inventory::{DraInventory, NodeDevices};
use super::matching::split;
use crate::gpuset::{NodeShape, SetPick, SetRequest, constrained_subsets};
use gputopo_api::k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
};
use gputopo_api::k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult, DeviceToleration,
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
    pub fn fit(
        &self,
        inventory: &DraInventory,
        node: &str,
        shape: Option<&NodeShape>,
        request: &SetRequest,
    ) -> Result<DraFit, NodeReason> {
        let (fixed, existing) = self.existing_allocations(inventory, node)?;
        let pending = self.claims.iter().any(|c| c.allocated.is_none());
        let drivers = || inventory.config.drivers.join(", ");
        let no_devices;
        let devices = match inventory.node(node) {
            Some(d) => d,
            None if pending => return Err(NodeReason::NoDevices { drivers: drivers() }),
            None => {
                no_devices = NodeDevices {
                    node: node.to_string(),
                    devices: Vec::new(),
                    mapping: super::inventory::GpuMapping::NoTopology,
                    unusable_pools: Vec::new(),
                };
                &no_devices
            }
        };
        if pending && devices.devices.is_empty() {
            return Err(NodeReason::NoDevices { drivers: drivers() });
        }
        let Some(shape) = shape else {
            return Err(NodeReason::NoTopology);
        };
        if pending && devices.devices.iter().all(|d| d.gpu.is_none()) {
            return Err(NodeReason::NoTopology);
        }
        let (cands, all_fixed) = self.request_candidates(inventory, devices, fixed)?;
        let fixed = fixed | all_fixed;
        let (pick, per) = self.best_split(devices, shape, request, fixed, &cands)?;
        Ok(DraFit {
            node: node.to_string(),
            pick,
            fixed,
            claims: self.allocations(node, devices, existing, &cands, &per),
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
                let gpu = if inventory.config.handles(&r.driver) {
                    match inventory.node(node).and_then(|n| n.device(&id)) {
                        Some(d) => d.gpu,
                        None => {
                            return Err(match inventory.find(&id) {
                                Some((other, _)) => NodeReason::ClaimElsewhere {
                                    claim: claim.key.clone(),
                                    node: other.to_string(),
                                },
                                None => NodeReason::ClaimDevicesMissing {
                                    claim: claim.key.clone(),
                                    device: Box::new(id),
                                },
                            });
                        }
                    }
                } else {
                    None
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
                if c.mode == Mode::All {
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
    /// (`fixed` GPUs included), and per candidate request the GPUs of the set
    /// it gets; or the first reason a combination failed.
    fn best_split(
        &self,
        devices: &NodeDevices,
        shape: &NodeShape,
        request: &SetRequest,
        fixed: u32,
        cands: &[Candidates],
    ) -> Result<(SetPick, Vec<u32>), NodeReason> {
        let combos = constraint_combinations(self, devices, cands)?;
        let mut best: Option<(SetPick, Vec<u32>)> = None;
        let mut first_error: Option<NodeReason> = None;
        let mut too_few = None;
        for masks in combos {
            let count_reqs: Vec<usize> = (0..cands.len())
                .filter(|&i| matches!(cands[i].mode, Mode::Count(_)))
                .collect();
            let counts: Vec<u32> = count_reqs
                .iter()
                .map(|&i| match cands[i].mode {
                    Mode::Count(n) => n,
                    Mode::All => 0,
                })
                .collect();
            let req_masks: Vec<u32> = count_reqs.iter().map(|&i| masks[i]).collect();
            if let Some(i) = (0..counts.len()).find(|&i| req_masks[i].count_ones() < counts[i]) {
                too_few.get_or_insert(count_reqs[i]);
                continue;
            }
            // `All` requests under a constraint keep only the devices of this value.
            if cands
                .iter()
                .enumerate()
                .any(|(i, c)| c.mode == Mode::All && masks[i] != c.mask)
            {
                continue;
            }
            match solve(shape, request, fixed, &counts, &req_masks) {
                Ok((pick, splits)) => {
                    let mut per = vec![0u32; cands.len()];
                    for (j, &i) in count_reqs.iter().enumerate() {
                        per[i] = splits[j];
                    }
                    for (i, c) in cands.iter().enumerate() {
                        if c.mode == Mode::All {
                            per[i] = c.mask;
                        }
                    }
                    if best.as_ref().is_none_or(|(b, _)| better(&pick, b)) {
                        best = Some((pick, per));
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let Some(best) = best else {
            if let Some(e) = first_error {
                return Err(e);
            }
            let i = too_few.unwrap_or(0);
            return Err(match self.claims[cands[i].claim].constraints.first() {
                Some(c) => NodeReason::ConstraintUnsatisfiable {
                    claim: self.claims[cands[i].claim].key.clone(),
                    attribute: c.attribute.clone(),
                },
                None => NodeReason::NoSplit { gpus: request.gpus },
            });
        };
        Ok(best)
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
        per: &[u32],
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
                let mut gpus = per[i];
                while gpus != 0 {
                    let gpu = gpus.trailing_zeros();
                    gpus &= gpus - 1;
                    let Some(d) = devices.device_on(gpu) else {
                        continue;
                    };
                    results.push(result_for(&plan.name, &d.id, &plan.tolerations));
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

fn result_for(
    request: &str,
    id: &DeviceId,
    tolerations: &[DeviceToleration],
) -> DeviceRequestAllocationResult {
    DeviceRequestAllocationResult {
        request: request.to_string(),
        driver: id.driver.clone(),
        pool: id.pool.clone(),
        device: id.device.clone(),
        tolerations: (!tolerations.is_empty()).then(|| tolerations.to_vec()),
        ..DeviceRequestAllocationResult::default()
    }
}

/// `metadata.name In [node]`: how upstream pins an allocation of node-local devices.
pub fn pin(node: &str) -> NodeSelector {
    NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".to_string(),
                operator: "In".to_string(),
                values: Some(vec![node.to_string()]),
            }]),
        }],
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
