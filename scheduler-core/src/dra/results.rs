//! What a claim's `status.allocation` lists per device: the request, the
//! device, tolerations, and for a share of a shared device its consumed
//! capacity and share id; and the node selector that pins node-local
//! devices.

use super::device::DraDevice;
use gputopo_api::k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
};
use gputopo_api::k8s_openapi::api::resource::v1::{
    DeviceRequestAllocationResult, DeviceToleration,
};
use gputopo_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

pub(super) fn result_for(
    request: &str,
    device: &DraDevice,
    tolerations: &[DeviceToleration],
) -> DeviceRequestAllocationResult {
    let id = &device.id;
    let listed = |c: &Vec<String>| (!c.is_empty()).then(|| c.clone());
    DeviceRequestAllocationResult {
        request: request.to_string(),
        driver: id.driver.clone(),
        pool: id.pool.clone(),
        device: id.device.clone(),
        tolerations: (!tolerations.is_empty()).then(|| tolerations.to_vec()),
        binding_conditions: listed(&device.binding_conditions),
        binding_failure_conditions: listed(&device.binding_failure_conditions),
        ..DeviceRequestAllocationResult::default()
    }
}

/// A share of a shared device (`allowMultipleAllocations`): every
/// capacity's consumed amount, as upstream writes them, and a share id,
/// a UUID derived from the claim, the device and the result's place, so
/// the same decision writes the same id.
pub(super) fn share(
    result: &mut DeviceRequestAllocationResult,
    device: &DraDevice,
    ask: &BTreeMap<String, i128>,
    claim: &str,
    index: usize,
) {
    let consumed = super::capacity::consumed(device, ask).unwrap_or_default();
    result.consumed_capacity = Some(
        consumed
            .into_iter()
            .map(|(name, amount)| (name, Quantity(amount.to_string())))
            .collect(),
    );
    let seed = format!("{claim}/{}/{index}", device.id);
    result.share_id = Some(uuid_from(&seed));
}

/// A version-4-shaped UUID from two hashes of `seed`.
fn uuid_from(seed: &str) -> String {
    use std::hash::{Hash, Hasher};
    let half = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, seed).hash(&mut h);
        h.finish()
    };
    let bits = (u128::from(half(1)) << 64 | u128::from(half(2))) & !(0xf000u128 << 64)
        | (0x4000u128 << 64);
    let bits = bits & !(0xc000u128 << 48) | (0x8000u128 << 48);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
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
