//! A pod's ResourceClaims read into what gputopo allocates: per claim its
//! requests (class and claim selectors compiled, count or all; a
//! `firstAvailable` request's subrequests in order), its `matchAttribute`
//! constraints, its configuration (passed through), or the allocation it
//! already has. Requests are read in `request.rs`, constraints and
//! configuration in `config.rs`.

mod config;
mod request;

use super::cel::{CelEnv, DeviceValue, Selector};
use super::device::claim_key;
use super::error::{ClaimError, ClaimErrorKind};
use gputopo_api::k8s_openapi::api::core::v1::{NodeSelector, Pod};
use gputopo_api::k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, DeviceClaimConfiguration, DeviceClass, DeviceClassConfiguration,
    DeviceRequestAllocationResult, DeviceToleration, ResourceClaim,
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

/// One `spec.devices.requests[i]` of a claim (or one subrequest of its
/// `firstAvailable`), ready to match devices.
#[derive(Clone, Debug)]
pub struct RequestPlan {
    /// The request's name; `<request>/<subrequest>` for a subrequest, as
    /// the allocation result names it.
    pub name: String,
    /// `spec.devices.requests[i]`.
    pub field: String,
    pub class: String,
    pub mode: Mode,
    /// The class's selectors, then the request's: all must match.
    pub selectors: Vec<Selector>,
    /// How many of `selectors` are the class's.
    pub class_selectors: usize,
    /// `capacity.requests`: what it consumes of a shared device (or asks a
    /// whole device to have), in base units.
    pub capacity: BTreeMap<String, i128>,
    pub tolerations: Vec<DeviceToleration>,
    /// `adminAccess: true`: devices in use by other claims are candidates
    /// too, and taking one takes nothing from them (monitoring access, as
    /// upstream); allocated beside the GPU set, outside the topology
    /// objective, and not counted as GPUs the pod consumes.
    pub admin_access: bool,
}

/// A `matchAttribute` constraint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchConstraint {
    /// Fully qualified attribute name.
    pub attribute: String,
    /// The claim's requests it applies to (all when the constraint names
    /// none): the index, and the subrequest (`<request>/<subrequest>`)
    /// when it names one, in which case it applies only when that one is
    /// chosen.
    pub requests: Vec<(usize, Option<String>)>,
    /// `spec.devices.constraints[i]`.
    pub field: String,
}

impl MatchConstraint {
    /// Whether it applies to request `index` as `plan` (the chosen
    /// subrequest, where it has several).
    pub fn covers(&self, index: usize, plan: &RequestPlan) -> bool {
        self.requests
            .iter()
            .any(|(i, sub)| *i == index && sub.as_ref().is_none_or(|s| *s == plan.name))
    }
}

/// One claim of the pod.
#[derive(Clone, Debug)]
pub struct ClaimPlan {
    /// `namespace/name`.
    pub key: String,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    /// The requests as chosen: a `firstAvailable` request as its first
    /// subrequest until [`DraPod::with_choice`] picks another.
    pub requests: Vec<RequestPlan>,
    /// Per request with `firstAvailable`, its subrequests in order.
    pub first_available: BTreeMap<usize, Vec<RequestPlan>>,
    pub constraints: Vec<MatchConstraint>,
    /// `status.allocation.devices.config` to write, as upstream builds it:
    /// each used class's config once (`FromClass`), then the claim's own
    /// (`FromClaim`); a config for every request has no `requests`.
    pub config: Vec<DeviceAllocationConfiguration>,
    /// The claim's own configs and its classes', to build `config` again
    /// for another choice of subrequests.
    claim_config: Vec<DeviceClaimConfiguration>,
    class_config: BTreeMap<String, Vec<DeviceClassConfiguration>>,
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
    /// Its `firstAvailable` combinations, expanded once when read (not per
    /// node).
    pub alternatives: Alternatives,
}

/// Upstream's most subrequests per `firstAvailable`
/// (`FirstAvailableDeviceRequestMaxSize`), which its score counts down from.
const FIRST_AVAILABLE_MAX: u32 = 8;

/// The most combinations of subrequests tried per node.
pub const MAX_CHOICES: usize = 512;

/// A pod's `firstAvailable` combinations.
#[derive(Clone, Debug, Default)]
pub enum Alternatives {
    /// No pending claim has `firstAvailable`: the requests are as read.
    #[default]
    None,
    /// The combinations in upstream's order, each as a pod of `exactly`
    /// requests.
    Tried(Vec<Variant>),
    /// More than [`MAX_CHOICES`] combinations: not searched.
    TooMany,
}

/// One combination of subrequests.
#[derive(Clone, Debug)]
pub struct Variant {
    /// Upstream's prioritized-list score before normalizing: per
    /// `firstAvailable` request, 8 minus the chosen subrequest's index.
    pub preference: u32,
    /// The pod with those subrequests in place of their requests.
    pub pod: DraPod,
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
        let mut read = DraPod {
            pod: pod.to_string(),
            claims,
            alternatives: Alternatives::None,
        };
        read.alternatives = read.expand();
        Ok(read)
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
            first_available: BTreeMap::new(),
            constraints: Vec::new(),
            config: Vec::new(),
            claim_config: Vec::new(),
            class_config: BTreeMap::new(),
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
        let mut alternatives = Vec::with_capacity(requests.len());
        for (i, request) in requests.iter().enumerate() {
            if !seen.insert(request.name.clone()) {
                return Err(ClaimError::new(
                    &object,
                    format!("spec.devices.requests[{i}].name"),
                    ClaimErrorKind::DuplicateRequest(request.name.clone()),
                ));
            }
            let plans = request::request_plans(&object, i, request, classes)?;
            // The most any subrequest takes counts against the claim's limit.
            total += plans
                .iter()
                .map(|p| match p.mode {
                    Mode::Count(n) => u64::from(n),
                    Mode::All => 0,
                })
                .max()
                .unwrap_or(0);
            plan.requests.push(plans[0].clone());
            if request
                .first_available
                .as_ref()
                .is_some_and(|f| !f.is_empty())
            {
                plan.first_available.insert(i, plans.clone());
            }
            alternatives.push(plans);
        }
        if total > MAX_DEVICES_PER_CLAIM {
            return Err(ClaimError::new(
                &object,
                "spec.devices.requests",
                ClaimErrorKind::TooManyDevices(total),
            ));
        }
        for (i, c) in devices.constraints.iter().flatten().enumerate() {
            let constraint = config::match_constraint(&object, i, c, &alternatives)?;
            plan.constraints.push(constraint);
        }
        plan.claim_config = devices.config.unwrap_or_default();
        for r in alternatives.iter().flatten() {
            if let Some(class) = classes.get(r.class.as_str()) {
                let configs = class.spec.iter().flat_map(|s| s.config.clone()).flatten();
                plan.class_config
                    .entry(r.class.clone())
                    .or_insert_with(|| configs.collect());
            }
        }
        plan.config =
            config::allocation_config(&plan.requests, &plan.claim_config, &plan.class_config);
        Ok(plan)
    }
}

/// One subrequest chosen for a `firstAvailable` request: claim, request,
/// subrequest (its index in the list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Choice {
    claim: usize,
    request: usize,
    subrequest: usize,
}

impl DraPod {
    /// The pod's `firstAvailable` combinations, each as its own pod.
    fn expand(&self) -> Alternatives {
        let pending = |c: &ClaimPlan| c.allocated.is_none() && !c.first_available.is_empty();
        if !self.claims.iter().any(pending) {
            return Alternatives::None;
        }
        let choices = self.choices();
        if choices.len() > MAX_CHOICES {
            return Alternatives::TooMany;
        }
        let variants = choices
            .iter()
            .map(|choice| Variant {
                preference: choice
                    .iter()
                    .map(|c| FIRST_AVAILABLE_MAX.saturating_sub(c.subrequest as u32))
                    .sum(),
                pod: self.with_choice(choice),
            })
            .collect();
        Alternatives::Tried(variants)
    }

    /// Every combination of subrequests, in the order upstream's allocator
    /// tries them (claim by claim, request by request, each request's
    /// subrequests in order, the first request varying slowest).
    fn choices(&self) -> Vec<Vec<Choice>> {
        let axes: Vec<(usize, usize, usize)> = self
            .claims
            .iter()
            .enumerate()
            .filter(|(_, c)| c.allocated.is_none())
            .flat_map(|(ci, c)| {
                c.first_available
                    .iter()
                    .map(move |(&ri, s)| (ci, ri, s.len()))
            })
            .collect();
        let mut out = vec![Vec::new()];
        for (claim, request, n) in axes {
            out = out
                .into_iter()
                .flat_map(|prefix: Vec<Choice>| {
                    (0..n).map(move |subrequest| {
                        let mut next = prefix.clone();
                        next.push(Choice {
                            claim,
                            request,
                            subrequest,
                        });
                        next
                    })
                })
                .collect();
        }
        out
    }

    /// The pod with `choice`'s subrequests in place of their requests.
    fn with_choice(&self, choice: &[Choice]) -> DraPod {
        let mut pod = self.clone();
        for c in choice {
            let claim = &mut pod.claims[c.claim];
            if let Some(plan) = claim
                .first_available
                .get(&c.request)
                .and_then(|subs| subs.get(c.subrequest))
            {
                claim.requests[c.request] = plan.clone();
            }
        }
        for claim in &mut pod.claims {
            claim.config = config::allocation_config(
                &claim.requests,
                &claim.claim_config,
                &claim.class_config,
            );
        }
        pod
    }
}
