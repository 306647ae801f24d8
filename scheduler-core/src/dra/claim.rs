//! A pod's ResourceClaims read into what gputopo allocates: per claim its
//! requests (class and claim selectors compiled, count or all), its
//! `matchAttribute` constraints, its configuration (passed through), or the
//! allocation it already has.

use super::cel::{CelEnv, DeviceValue, Selector};
use super::device::claim_key;
use super::error::{ClaimError, ClaimErrorKind};
use gputopo_api::k8s_openapi::api::core::v1::{NodeSelector, Pod};
use gputopo_api::k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, DeviceClass, DeviceConstraint, DeviceRequest,
    DeviceRequestAllocationResult, DeviceToleration, ExactDeviceRequest, ResourceClaim,
};
use std::collections::{BTreeMap, BTreeSet};

/// The most devices one claim's allocation holds (`AllocationResultsMaxSize`).
pub const MAX_DEVICES_PER_CLAIM: u64 = 32;

/// The names of the ResourceClaims a pod uses, in `spec.resourceClaims`
/// order: `resourceClaimName`, or for a template the claim the resource
/// claim controller created (`status.resourceClaimStatuses`). An entry whose
/// status names no claim needs none and is skipped; one whose claim is not
/// created yet is an error (the pod waits).
pub fn pod_claim_names(pod: &Pod) -> Result<Vec<String>, ClaimError> {
    let object = format!("Pod {}", crate::pod::pod_key(pod));
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    let mut names = Vec::new();
    for (i, entry) in pod
        .spec
        .iter()
        .flat_map(|s| s.resource_claims.iter().flatten())
        .enumerate()
    {
        let field = format!("spec.resourceClaims[{i}]");
        if let Some(name) = &entry.resource_claim_name {
            names.push(name.clone());
        } else if entry.resource_claim_template_name.is_some() {
            let status = statuses
                .into_iter()
                .flatten()
                .find(|s| s.name == entry.name)
                .ok_or_else(|| {
                    ClaimError::new(&object, &field, ClaimErrorKind::TemplateClaimPending)
                })?;
            names.extend(status.resource_claim_name.clone());
        } else {
            return Err(ClaimError::new(
                &object,
                field,
                ClaimErrorKind::NoClaimSource,
            ));
        }
    }
    Ok(names)
}

impl RequestPlan {
    /// Whether the request's class selects any of `devices` (a selector
    /// failing on a device is no match here): how a request for GPUs is
    /// told from one for another driver's devices before any node is seen.
    pub fn class_selects_any(&self, env: &CelEnv, devices: &[DeviceValue]) -> bool {
        devices.iter().any(|d| {
            self.selectors[..self.class_selectors]
                .iter()
                .all(|s| s.matches(env, d).unwrap_or(false))
        })
    }
}

/// How many devices a request takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `allocationMode: ExactCount` (the default) with `count` (default 1).
    Count(u32),
    /// `allocationMode: All`: every matching device of the node, at least one.
    All,
}

/// One `spec.devices.requests[i]` of a claim, ready to match devices.
#[derive(Clone, Debug)]
pub struct RequestPlan {
    pub name: String,
    /// `spec.devices.requests[i]`.
    pub field: String,
    pub class: String,
    pub mode: Mode,
    /// The class's selectors, then the request's: all must match.
    pub selectors: Vec<Selector>,
    /// How many of `selectors` are the class's.
    pub class_selectors: usize,
    pub tolerations: Vec<DeviceToleration>,
}

/// A `matchAttribute` constraint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchConstraint {
    /// Fully qualified attribute name.
    pub attribute: String,
    /// Indices into the claim's requests it applies to (all when the constraint names none).
    pub requests: Vec<usize>,
    /// `spec.devices.constraints[i]`.
    pub field: String,
}

/// One claim of the pod.
#[derive(Clone, Debug)]
pub struct ClaimPlan {
    /// `namespace/name`.
    pub key: String,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub requests: Vec<RequestPlan>,
    pub constraints: Vec<MatchConstraint>,
    /// `status.allocation.devices.config` to write, as upstream builds it:
    /// each used class's config once (`FromClass`), then the claim's own
    /// (`FromClaim`); a config for every request has no `requests`.
    pub config: Vec<DeviceAllocationConfiguration>,
    /// The allocation it already has (a claim shared through `reservedFor`):
    /// its devices are fixed and the pod must go where they are.
    pub allocated: Option<Allocated>,
}

/// An existing allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct Allocated {
    pub results: Vec<DeviceRequestAllocationResult>,
    pub node_selector: Option<NodeSelector>,
}

impl Allocated {
    /// The node a `metadata.name In [node]` selector pins, as upstream writes it.
    pub fn pinned_node(&self) -> Option<&str> {
        let terms = &self.node_selector.as_ref()?.node_selector_terms;
        terms.iter().find_map(|t| {
            t.match_fields.iter().flatten().find_map(|r| {
                (r.key == "metadata.name" && r.operator == "In")
                    .then(|| r.values.as_ref()?.first().map(String::as_str))
                    .flatten()
            })
        })
    }
}

/// The pod's claims, read.
#[derive(Clone, Debug)]
pub struct DraPod {
    /// `namespace/name`.
    pub pod: String,
    pub claims: Vec<ClaimPlan>,
}

impl DraPod {
    /// Reads the pod's claims (`claims` in `pod_claim_names` order) with the
    /// cluster's DeviceClasses. A claim gputopo cannot honour exactly is an
    /// error naming the field; an already-allocated claim is taken as it is.
    pub fn new<'a>(
        pod: &str,
        claims: &[&ResourceClaim],
        classes: impl IntoIterator<Item = &'a DeviceClass>,
    ) -> Result<DraPod, ClaimError> {
        let classes: BTreeMap<&str, &DeviceClass> = classes
            .into_iter()
            .filter_map(|c| Some((c.metadata.name.as_deref()?, c)))
            .collect();
        let claims = claims
            .iter()
            .map(|c| ClaimPlan::new(c, &classes))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(DraPod {
            pod: pod.to_string(),
            claims,
        })
    }

    /// Resolves the pod's claims with `lookup(namespace, name)` and reads them.
    pub fn from_pod<'a, 'c>(
        pod: &Pod,
        lookup: impl Fn(&str, &str) -> Option<&'a ResourceClaim>,
        classes: impl IntoIterator<Item = &'c DeviceClass>,
    ) -> Result<DraPod, ClaimError> {
        let key = crate::pod::pod_key(pod);
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut claims = Vec::new();
        for name in pod_claim_names(pod)? {
            let claim = lookup(namespace, &name).ok_or_else(|| {
                ClaimError::new(
                    &format!("Pod {key}"),
                    "spec.resourceClaims",
                    ClaimErrorKind::ClaimNotFound(format!("{namespace}/{name}")),
                )
            })?;
            claims.push(claim);
        }
        DraPod::new(&key, &claims, classes)
    }

    /// Whether the pod uses any claim.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }
}

impl ClaimPlan {
    fn new(
        claim: &ResourceClaim,
        classes: &BTreeMap<&str, &DeviceClass>,
    ) -> Result<ClaimPlan, ClaimError> {
        let key = claim_key(claim);
        let object = format!("ResourceClaim {key}");
        let (namespace, name) = key.split_once('/').unwrap_or(("default", ""));
        let mut plan = ClaimPlan {
            key: key.clone(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: claim.metadata.uid.clone(),
            requests: Vec::new(),
            constraints: Vec::new(),
            config: Vec::new(),
            allocated: None,
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(ClaimError::new(
                &object,
                "metadata.deletionTimestamp",
                ClaimErrorKind::Deleting,
            ));
        }
        let status = claim.status.as_ref();
        if status
            .and_then(|s| s.reserved_for.as_ref())
            .is_some_and(|r| r.len() >= 256)
        {
            return Err(ClaimError::new(
                &object,
                "status.reservedFor",
                ClaimErrorKind::ReservedForFull,
            ));
        }
        if let Some(allocation) = status.and_then(|s| s.allocation.as_ref()) {
            plan.allocated = Some(Allocated {
                results: allocation
                    .devices
                    .as_ref()
                    .and_then(|d| d.results.clone())
                    .unwrap_or_default(),
                node_selector: allocation.node_selector.clone(),
            });
            return Ok(plan);
        }
        let devices = claim
            .spec
            .as_ref()
            .and_then(|s| s.devices.clone())
            .unwrap_or_default();
        let requests = devices.requests.unwrap_or_default();
        if requests.is_empty() {
            return Err(ClaimError::new(
                &object,
                "spec.devices.requests",
                ClaimErrorKind::NoRequests,
            ));
        }
        let mut total: u64 = 0;
        let mut seen = BTreeSet::new();
        for (i, request) in requests.iter().enumerate() {
            if !seen.insert(request.name.clone()) {
                return Err(ClaimError::new(
                    &object,
                    format!("spec.devices.requests[{i}].name"),
                    ClaimErrorKind::DuplicateRequest(request.name.clone()),
                ));
            }
            let request = request_plan(&object, i, request, classes)?;
            if let Mode::Count(n) = request.mode {
                total += u64::from(n);
            }
            plan.requests.push(request);
        }
        if total > MAX_DEVICES_PER_CLAIM {
            return Err(ClaimError::new(
                &object,
                "spec.devices.requests",
                ClaimErrorKind::TooManyDevices(total),
            ));
        }
        for (i, c) in devices.constraints.iter().flatten().enumerate() {
            let constraint = match_constraint(&object, i, c, &plan.requests)?;
            plan.constraints.push(constraint);
        }
        plan.config =
            allocation_config(&plan.requests, &devices.config.unwrap_or_default(), classes);
        Ok(plan)
    }
}

/// One request of a claim read: what gputopo cannot honour exactly refused
/// with the field named, its count or `All`, and its class's and its own
/// selectors compiled.
fn request_plan(
    object: &str,
    i: usize,
    request: &DeviceRequest,
    classes: &BTreeMap<&str, &DeviceClass>,
) -> Result<RequestPlan, ClaimError> {
    let field = format!("spec.devices.requests[{i}]");
    if request
        .first_available
        .as_ref()
        .is_some_and(|f| !f.is_empty())
    {
        return Err(ClaimError::new(
            object,
            format!("{field}.firstAvailable"),
            ClaimErrorKind::FirstAvailable,
        ));
    }
    let Some(exactly) = &request.exactly else {
        return Err(ClaimError::new(object, field, ClaimErrorKind::NoExactly));
    };
    let ex = format!("{field}.exactly");
    if exactly.admin_access == Some(true) {
        return Err(ClaimError::new(
            object,
            format!("{ex}.adminAccess"),
            ClaimErrorKind::AdminAccess,
        ));
    }
    if exactly.capacity.is_some() {
        return Err(ClaimError::new(
            object,
            format!("{ex}.capacity"),
            ClaimErrorKind::Capacity,
        ));
    }
    let mode = request_mode(object, &ex, exactly)?;
    if exactly.device_class_name.is_empty() {
        return Err(ClaimError::new(
            object,
            format!("{ex}.deviceClassName"),
            ClaimErrorKind::NoDeviceClass,
        ));
    }
    let class = classes
        .get(exactly.device_class_name.as_str())
        .ok_or_else(|| {
            ClaimError::new(
                object,
                format!("{ex}.deviceClassName"),
                ClaimErrorKind::DeviceClassNotFound(exactly.device_class_name.clone()),
            )
        })?;
    let class_object = format!("DeviceClass {}", exactly.device_class_name);
    let mut selectors = Vec::new();
    for (j, s) in class
        .spec
        .iter()
        .flat_map(|s| s.selectors.iter().flatten())
        .enumerate()
    {
        let field = format!("spec.selectors[{j}]");
        let cel = s
            .cel
            .as_ref()
            .ok_or_else(|| ClaimError::new(&class_object, &field, ClaimErrorKind::NoCel))?;
        selectors.push(Selector::compile(
            &cel.expression,
            &class_object,
            format!("{field}.cel.expression"),
        )?);
    }
    let class_selectors = selectors.len();
    for (j, s) in exactly.selectors.iter().flatten().enumerate() {
        let field = format!("{ex}.selectors[{j}]");
        let cel = s
            .cel
            .as_ref()
            .ok_or_else(|| ClaimError::new(object, &field, ClaimErrorKind::NoCel))?;
        selectors.push(Selector::compile(
            &cel.expression,
            object,
            format!("{field}.cel.expression"),
        )?);
    }
    Ok(RequestPlan {
        name: request.name.clone(),
        field,
        class: exactly.device_class_name.clone(),
        mode,
        selectors,
        class_selectors,
        tolerations: exactly.tolerations.clone().unwrap_or_default(),
    })
}

/// `allocationMode` and `count` of a request (`ExactCount` by default).
fn request_mode(object: &str, ex: &str, exactly: &ExactDeviceRequest) -> Result<Mode, ClaimError> {
    Ok(match exactly.allocation_mode.as_deref() {
        None | Some("") | Some("ExactCount") => {
            let count = exactly.count.unwrap_or(1);
            if !(1..=MAX_DEVICES_PER_CLAIM as i64).contains(&count) {
                return Err(ClaimError::new(
                    object,
                    format!("{ex}.count"),
                    ClaimErrorKind::Count(count),
                ));
            }
            Mode::Count(count as u32)
        }
        Some("All") => {
            if exactly.count.is_some() {
                return Err(ClaimError::new(
                    object,
                    format!("{ex}.count"),
                    ClaimErrorKind::CountWithAll,
                ));
            }
            Mode::All
        }
        Some(other) => {
            return Err(ClaimError::new(
                object,
                format!("{ex}.allocationMode"),
                ClaimErrorKind::AllocationMode(other.to_string()),
            ));
        }
    })
}

/// One `matchAttribute` constraint of a claim, its request names resolved
/// to indices (none named: every request).
fn match_constraint(
    object: &str,
    i: usize,
    c: &DeviceConstraint,
    requests: &[RequestPlan],
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
    let mut indices = Vec::new();
    for (j, n) in names.iter().enumerate() {
        let index = requests.iter().position(|r| &r.name == n).ok_or_else(|| {
            ClaimError::new(
                object,
                format!("{field}.requests[{j}]"),
                ClaimErrorKind::UnknownRequest(n.clone()),
            )
        })?;
        indices.push(index);
    }
    if indices.is_empty() {
        indices = (0..requests.len()).collect();
    }
    Ok(MatchConstraint {
        attribute: attribute.clone(),
        requests: indices,
        field,
    })
}

/// Upstream's `status.allocation.devices.config`: the configs of each used
/// class once, tagged with the requests using it; then the claim's configs
/// that name no request or a request of the claim; a config that applies to
/// every request loses its `requests` (empty means all).
fn allocation_config(
    requests: &[RequestPlan],
    claim_config: &[gputopo_api::k8s_openapi::api::resource::v1::DeviceClaimConfiguration],
    classes: &BTreeMap<&str, &DeviceClass>,
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
        if let Some(class) = classes.get(r.class.as_str()) {
            for c in class.spec.iter().flat_map(|s| s.config.iter().flatten()) {
                out.push(DeviceAllocationConfiguration {
                    opaque: c.opaque.clone(),
                    requests: Some(vec![r.name.clone()]),
                    source: "FromClass".to_string(),
                });
            }
        }
        class_ranges.insert(r.class.as_str(), (start, out.len()));
    }
    for c in claim_config {
        let names = c.requests.clone().unwrap_or_default();
        if names.is_empty() || requests.iter().any(|r| names.contains(&r.name)) {
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
