//! `matchAttribute` constraints as value combinations, and device taints.

use super::candidates::Candidates;
use super::claim::DraPod;
use super::error::NodeReason;
use super::node_devices::NodeDevices;
use gputopo_api::k8s_openapi::api::resource::v1::DeviceAttribute;
use std::collections::BTreeMap;

/// The most value combinations of `matchAttribute` constraints tried per node.
pub const MAX_CONSTRAINT_COMBINATIONS: usize = 4096;

/// A `matchAttribute` value, typed as upstream compares them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum AttrValue {
    Int(i64),
    Bool(bool),
    Str(String),
    Version(String),
}

fn attr_value(a: &DeviceAttribute) -> Option<AttrValue> {
    if let Some(v) = a.int {
        Some(AttrValue::Int(v))
    } else if let Some(v) = a.bool {
        Some(AttrValue::Bool(v))
    } else if let Some(v) = &a.string {
        Some(AttrValue::Str(v.clone()))
    } else {
        a.version.clone().map(AttrValue::Version)
    }
}

/// One combination of constraint values: each request's candidates kept
/// to the devices carrying those values.
pub(super) struct Combination {
    /// Per candidate request, its GPUs.
    pub(super) masks: Vec<u32>,
    /// Per candidate request, its other drivers' devices (node indices).
    pub(super) others: Vec<Vec<usize>>,
}

/// The devices carrying one value of a constrained attribute.
#[derive(Default)]
struct Carriers {
    gpus: u32,
    /// Node device indices, ascending.
    others: Vec<usize>,
}

/// Per combination of constraint values, each request's candidates
/// restricted to the devices carrying those values (GPUs and other
/// drivers' devices alike: a GPU and a NIC on one `pcieRoot`). Without
/// constraints, one combination: the candidates as they are.
pub(super) fn constraint_combinations(
    pod: &DraPod,
    devices: &NodeDevices,
    cands: &[Candidates],
) -> Result<Vec<Combination>, NodeReason> {
    let base = Combination {
        masks: cands.iter().map(|c| c.mask).collect(),
        others: cands.iter().map(|c| c.others.clone()).collect(),
    };
    // Per constraint: the candidate indices it covers, and per value its carriers.
    let mut axes: Vec<(Vec<usize>, Vec<Carriers>)> = Vec::new();
    for (ci, claim) in pod.claims.iter().enumerate() {
        for constraint in &claim.constraints {
            let covered: Vec<usize> = cands
                .iter()
                .enumerate()
                .filter(|(_, c)| {
                    c.claim == ci && constraint.covers(c.request, &claim.requests[c.request])
                })
                .map(|(i, _)| i)
                .collect();
            let value_of = |d: &super::device::DraDevice| {
                d.attribute(&constraint.attribute).and_then(attr_value)
            };
            let mut by_value: BTreeMap<AttrValue, Carriers> = BTreeMap::new();
            let mut gpus = covered.iter().fold(0u32, |m, &i| m | base.masks[i]);
            while gpus != 0 {
                let gpu = gpus.trailing_zeros();
                gpus &= gpus - 1;
                if let Some(v) = devices.device_on(gpu).and_then(value_of) {
                    by_value.entry(v).or_default().gpus |= 1 << gpu;
                }
            }
            let mut others: Vec<usize> = covered
                .iter()
                .flat_map(|&i| base.others[i].iter().copied())
                .collect();
            others.sort_unstable();
            others.dedup();
            for d in others {
                if let Some(v) = value_of(&devices.devices[d]) {
                    by_value.entry(v).or_default().others.push(d);
                }
            }
            if by_value.is_empty() {
                return Err(NodeReason::ConstraintAttributeMissing {
                    claim: claim.key.clone(),
                    field: format!("{}.matchAttribute", constraint.field),
                    attribute: constraint.attribute.clone(),
                });
            }
            axes.push((covered, by_value.into_values().collect()));
        }
    }
    let total = axes
        .iter()
        .try_fold(1usize, |n, (_, values)| n.checked_mul(values.len()))
        .filter(|&n| n <= MAX_CONSTRAINT_COMBINATIONS)
        .ok_or(NodeReason::SearchTooLarge)?;
    if axes.is_empty() {
        return Ok(vec![base]);
    }
    let mut out = Vec::with_capacity(total);
    for mut combo in 0..total {
        let mut masks = base.masks.clone();
        let mut others = base.others.clone();
        for (covered, values) in &axes {
            let value = &values[combo % values.len()];
            combo /= values.len();
            for &i in covered {
                masks[i] &= value.gpus;
                others[i].retain(|d| value.others.binary_search(d).is_ok());
            }
        }
        out.push(Combination { masks, others });
    }
    Ok(out)
}
