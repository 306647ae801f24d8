//! `matchAttribute` constraints as value combinations, and device taints.

use super::candidates::Candidates;
use super::claim::DraPod;
use super::error::NodeReason;
use super::inventory::NodeDevices;
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

/// Per combination of constraint values, each request's candidate mask
/// restricted to the devices carrying those values. Without constraints,
/// one combination: the masks as they are.
pub(super) fn constraint_combinations(
    pod: &DraPod,
    devices: &NodeDevices,
    cands: &[Candidates],
) -> Result<Vec<Vec<u32>>, NodeReason> {
    let base: Vec<u32> = cands.iter().map(|c| c.mask).collect();
    // Per constraint: the candidate indices it covers, and per value the GPUs carrying it.
    let mut axes: Vec<(Vec<usize>, Vec<u32>)> = Vec::new();
    for (ci, claim) in pod.claims.iter().enumerate() {
        for constraint in &claim.constraints {
            let covered: Vec<usize> = cands
                .iter()
                .enumerate()
                .filter(|(_, c)| c.claim == ci && constraint.requests.contains(&c.request))
                .map(|(i, _)| i)
                .collect();
            let union = covered.iter().fold(0u32, |m, &i| m | base[i]);
            let mut by_value: BTreeMap<AttrValue, u32> = BTreeMap::new();
            let mut gpus = union;
            while gpus != 0 {
                let gpu = gpus.trailing_zeros();
                gpus &= gpus - 1;
                if let Some(v) = devices
                    .device_on(gpu)
                    .and_then(|d| d.attribute(&constraint.attribute))
                    .and_then(attr_value)
                {
                    *by_value.entry(v).or_default() |= 1 << gpu;
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
    let mut out = Vec::with_capacity(total);
    for mut combo in 0..total {
        let mut masks = base.clone();
        for (covered, values) in &axes {
            let value = values[combo % values.len()];
            combo /= values.len();
            for &i in covered {
                masks[i] &= value;
            }
        }
        out.push(masks);
    }
    Ok(out)
}
