//! One request's candidate devices on one node: the published devices that
//! match every selector, are free (no other claim, no scheduler hold) and
//! untainted for the request; GPUs on the node's topology as a GPU mask,
//! other drivers' devices as a list; or why there are too few.

use super::capacity;
use super::cel::{CelEnv, DeviceValue};
use super::claim::{ClaimPlan, Mode, RequestPlan};
use super::device::{DeviceId, DraDevice};
use super::error::{CelError, NodeReason};
use super::inventory::DraInventory;
use super::node_devices::NodeDevices;
use gputopo_api::k8s_openapi::api::resource::v1::DeviceToleration;

/// What a request takes on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Takes {
    /// GPUs of the topology: chosen with the pod's GPU set. A request whose
    /// selectors match any GPU here takes GPUs only.
    Gpus,
    /// Other drivers' devices: chosen after the GPU set, closest to it.
    Others,
}

/// One request of an unallocated claim, as matched on this node.
pub(super) struct Candidates {
    pub(super) claim: usize,
    pub(super) request: usize,
    pub(super) mode: Mode,
    pub(super) takes: Takes,
    /// Candidate GPUs (`Takes::Gpus`).
    pub(super) mask: u32,
    /// Candidate devices, indices into the node's devices (`Takes::Others`).
    pub(super) others: Vec<usize>,
}

impl Candidates {
    /// How many candidates it has.
    fn count(&self) -> u32 {
        match self.takes {
            Takes::Gpus => self.mask.count_ones(),
            Takes::Others => self.others.len() as u32,
        }
    }
}

/// Whether every `NoSchedule`/`NoExecute` taint of the device is tolerated.
fn tolerated(device: &DraDevice, tolerations: &[DeviceToleration]) -> bool {
    device
        .taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|t| {
            tolerations.iter().any(|tol| {
                let key_ok = tol
                    .key
                    .as_deref()
                    .is_none_or(|k| k.is_empty() || k == t.key);
                let effect_ok = tol
                    .effect
                    .as_deref()
                    .is_none_or(|e| e.is_empty() || e == t.effect);
                let value_ok = match tol.operator.as_deref() {
                    Some("Exists") => true,
                    _ => tol.value.as_deref().unwrap_or("") == t.value.as_deref().unwrap_or(""),
                };
                let key_required = tol.key.as_deref().is_none_or(str::is_empty)
                    && tol.operator.as_deref() != Some("Exists");
                key_ok && effect_ok && value_ok && !key_required
            })
        })
}

pub(super) fn all_unavailable(
    claim: &ClaimPlan,
    ri: usize,
    devices: &NodeDevices,
    gpu: u32,
    why: &'static str,
) -> NodeReason {
    NodeReason::AllDeviceUnavailable {
        claim: claim.key.clone(),
        request: claim.requests[ri].name.clone(),
        device: Box::new(
            devices
                .device_on(gpu)
                .map(|d| d.id.clone())
                .unwrap_or_else(|| DeviceId {
                    driver: String::new(),
                    pool: String::new(),
                    device: format!("gpu {gpu}"),
                }),
        ),
        why,
    }
}

/// Whether every selector of the request matches the device; a CEL runtime
/// error is an error for the node, as upstream.
fn selected(
    env: &CelEnv,
    plan: &RequestPlan,
    devices: &NodeDevices,
    d: &DraDevice,
    value: &Result<DeviceValue, CelError>,
) -> Result<bool, NodeReason> {
    let value = value.as_ref().map_err(|e| NodeReason::CelRuntime {
        object: format!("ResourceSlice of {}", devices.node),
        field: "spec.devices".to_string(),
        device: Box::new(d.id.clone()),
        error: e.clone(),
    })?;
    for s in &plan.selectors {
        let m = s
            .matches(env, value)
            .map_err(|error| NodeReason::CelRuntime {
                object: s.object.clone(),
                field: s.field.clone(),
                device: Box::new(d.id.clone()),
                error,
            })?;
        if !m {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Consumable capacity: whether the device serves what the request asks
/// (a shared device beside what its allocations already consume).
fn serves_capacity(inventory: &DraInventory, plan: &RequestPlan, d: &DraDevice) -> bool {
    if !d.multi && plan.capacity.is_empty() {
        return true;
    }
    capacity::consumed(d, &plan.capacity).is_some_and(|taking| {
        let in_use = d.multi.then(|| inventory.shared(&d.id)).flatten();
        capacity::fits(d, in_use, &taking)
    })
}

/// On the way to refusing a request nothing on the node matches: how many
/// devices of slices gputopo does not read would, so that the refusal says
/// where they are (a request matching local devices is told about those).
fn unread_matching(
    inventory: &DraInventory,
    devices: &NodeDevices,
    env: &CelEnv,
    plan: &RequestPlan,
    matching: u32,
) -> u32 {
    if matching > 0 {
        return 0;
    }
    inventory
        .unread()
        .iter()
        .filter(|d| {
            let value = DeviceValue::new(env, d);
            value.is_ok() && selected(env, plan, devices, d, &value).unwrap_or(false)
        })
        .count() as u32
}

/// The candidate GPUs of one request on the node, or why there are too few.
pub(super) fn candidates(
    inventory: &DraInventory,
    devices: &NodeDevices,
    env: &CelEnv,
    values: &[Result<DeviceValue, CelError>],
    claim: &ClaimPlan,
    ci: usize,
    ri: usize,
) -> Result<Candidates, NodeReason> {
    let plan = &claim.requests[ri];
    let held = inventory.held_on(&devices.node);
    let (mut matching, mut busy, mut tainted, mut unplaced) = (0u32, 0u32, 0u32, 0u32);
    let mut short = 0u32;
    let mut mask = 0u32;
    let mut others = Vec::new();
    let mut matched_gpu = false;
    // Per kind taken: the first matching device that cannot be used, and why.
    let mut unusable_gpu: Option<(&DraDevice, &'static str)> = None;
    let mut unusable_other: Option<(&DraDevice, &'static str)> = None;
    for (i, (d, value)) in devices.devices.iter().zip(values).enumerate() {
        if !selected(env, plan, devices, d, value)? {
            continue;
        }
        matching += 1;
        matched_gpu |= d.gpu.is_some();
        if !serves_capacity(inventory, plan, d) {
            short += 1;
            continue;
        }
        let unusable = if d.is_other() {
            &mut unusable_other
        } else {
            &mut unusable_gpu
        };
        if plan.admin_access {
            // Busy or not, outside the topology objective.
            if tolerated(d, &plan.tolerations) {
                others.push(i);
            } else {
                tainted += 1;
                unusable_other.get_or_insert((d, "tainted"));
            }
        } else if inventory.is_busy(d) || d.gpu.is_some_and(|g| held & (1 << g) != 0) {
            busy += 1;
            unusable.get_or_insert((d, "allocated to another claim or held by the scheduler"));
        } else if !tolerated(d, &plan.tolerations) {
            tainted += 1;
            unusable.get_or_insert((d, "tainted"));
        } else if let Some(gpu) = d.gpu {
            mask |= 1 << gpu;
        } else if d.is_other() {
            others.push(i);
        } else {
            unplaced += 1;
            unusable.get_or_insert((d, "not on the node's GPU topology"));
        }
    }
    let takes = if plan.admin_access {
        Takes::Others
    } else if matched_gpu || others.is_empty() && unusable_other.is_none() {
        Takes::Gpus
    } else {
        Takes::Others
    };
    let (unusable, mask, others) = match takes {
        Takes::Gpus => (unusable_gpu, mask, Vec::new()),
        Takes::Others => (unusable_other, 0, others),
    };
    let found = Candidates {
        claim: ci,
        request: ri,
        mode: plan.mode,
        takes,
        mask,
        others,
    };
    let too_few = |wanted| NodeReason::TooFewDevices {
        claim: claim.key.clone(),
        request: plan.name.clone(),
        wanted,
        matching,
        busy,
        tainted,
        unplaced,
        short,
        elsewhere: unread_matching(inventory, devices, env, plan, matching),
    };
    match plan.mode {
        Mode::Count(n) if found.count() < n => Err(too_few(n)),
        Mode::All if matching == 0 => Err(too_few(1)),
        Mode::All if !devices.unusable_pools.is_empty() => Err(NodeReason::PoolNotReady {
            claim: claim.key.clone(),
            request: plan.name.clone(),
            pool: devices.unusable_pools[0].clone(),
        }),
        Mode::All => match unusable {
            Some((d, why)) => Err(NodeReason::AllDeviceUnavailable {
                claim: claim.key.clone(),
                request: plan.name.clone(),
                device: Box::new(d.id.clone()),
                why,
            }),
            None => Ok(found),
        },
        Mode::Count(_) => Ok(found),
    }
}
