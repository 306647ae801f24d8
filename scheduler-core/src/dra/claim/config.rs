//! A claim's `matchAttribute` constraints (request names resolved, a
//! subrequest's `<request>/<subrequest>` included) and the configuration
//! its allocation carries, as upstream builds it for the requests chosen.

use super::{MatchConstraint, RequestPlan};
use crate::dra::error::{ClaimError, ClaimErrorKind};
use gputopo_api::k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, DeviceClaimConfiguration, DeviceClassConfiguration,
    DeviceConstraint,
};
use std::collections::BTreeMap;

/// One `matchAttribute` constraint of a claim, its request names resolved
/// to indices (none named: every request). `alternatives[i]` are request
/// `i`'s plans (one, or its `firstAvailable` subrequests).
pub(super) fn match_constraint(
    object: &str,
    i: usize,
    c: &DeviceConstraint,
    alternatives: &[Vec<RequestPlan>],
) -> Result<MatchConstraint, ClaimError> {
    let field = format!("spec.devices.constraints[{i}]");
    if c.distinct_attribute.is_some() {
        return Err(ClaimError::new(
            object,
            format!("{field}.distinctAttribute"),
            ClaimErrorKind::DistinctAttribute,
        ));
    }
    let Some(attribute) = &c.match_attribute else {
        return Err(ClaimError::new(object, field, ClaimErrorKind::NoConstraint));
    };
    if !attribute.contains('/') {
        return Err(ClaimError::new(
            object,
            format!("{field}.matchAttribute"),
            ClaimErrorKind::UnqualifiedAttribute(attribute.clone()),
        ));
    }
    let names = c.requests.clone().unwrap_or_default();
    let mut requests = Vec::new();
    for (j, n) in names.iter().enumerate() {
        // `<request>` covers each of its subrequests; `<request>/<sub>` only that one.
        let (main, sub) = match n.split_once('/') {
            Some((main, _)) => (main, Some(n.clone())),
            None => (n.as_str(), None),
        };
        let index = alternatives
            .iter()
            .position(|plans| {
                plans.iter().any(|p| {
                    p.name.split('/').next() == Some(main)
                        && sub.as_ref().is_none_or(|s| *s == p.name)
                })
            })
            .ok_or_else(|| {
                ClaimError::new(
                    object,
                    format!("{field}.requests[{j}]"),
                    ClaimErrorKind::UnknownRequest(n.clone()),
                )
            })?;
        requests.push((index, sub));
    }
    if requests.is_empty() {
        requests = (0..alternatives.len()).map(|i| (i, None)).collect();
    }
    Ok(MatchConstraint {
        attribute: attribute.clone(),
        requests,
        field,
    })
}

/// Upstream's `status.allocation.devices.config` for the chosen `requests`:
/// the configs of each used class once, tagged with the requests using it;
/// then the claim's configs that name no request or a chosen request (a
/// config naming `<request>` applies to its chosen subrequest too); a
/// config that applies to every request loses its `requests` (empty means
/// all).
pub(super) fn allocation_config(
    requests: &[RequestPlan],
    claim_config: &[DeviceClaimConfiguration],
    class_config: &BTreeMap<String, Vec<DeviceClassConfiguration>>,
) -> Vec<DeviceAllocationConfiguration> {
    let mut out: Vec<DeviceAllocationConfiguration> = Vec::new();
    let mut class_ranges: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for r in requests {
        if let Some(&(start, end)) = class_ranges.get(r.class.as_str()) {
            for c in &mut out[start..end] {
                c.requests.get_or_insert_with(Vec::new).push(r.name.clone());
            }
            continue;
        }
        let start = out.len();
        for c in class_config.get(&r.class).into_iter().flatten() {
            out.push(DeviceAllocationConfiguration {
                opaque: c.opaque.clone(),
                requests: Some(vec![r.name.clone()]),
                source: "FromClass".to_string(),
            });
        }
        class_ranges.insert(r.class.as_str(), (start, out.len()));
    }
    for c in claim_config {
        let names = c.requests.clone().unwrap_or_default();
        let chosen = |n: &String| {
            requests
                .iter()
                .any(|r| r.name == *n || r.name.split_once('/').is_some_and(|(m, _)| m == n))
        };
        if names.is_empty() || names.iter().any(chosen) {
            out.push(DeviceAllocationConfiguration {
                opaque: c.opaque.clone(),
                requests: c.requests.clone(),
                source: "FromClaim".to_string(),
            });
        }
    }
    for c in &mut out {
        if c.requests
            .as_ref()
            .is_some_and(|r| r.len() == requests.len())
        {
            c.requests = None;
        }
    }
    out
}
