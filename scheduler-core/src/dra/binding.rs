//! Binding conditions (KEP-5007, beta and on by default in 1.37): a device
//! whose slice lists `bindingConditions` (a device attached over a fabric
//! when allocated, say) is allocated with them and its
//! `bindingFailureConditions` copied into the allocation result, and the
//! pod is bound only once the driver has set every binding condition
//! `True` in the claim's `status.devices`. A failure condition `True`, or a
//! wait longer than [`BINDING_TIMEOUT_SECONDS`] since the allocation,
//! gives the devices up: the claims are deallocated and the pod tried
//! again, as kube-scheduler's PreBind does.
//!
//! kube-scheduler waits inside one binding cycle; gputopo's cycle does not
//! block: the pod stays pending with its claims allocated and reserved,
//! and each later decision reads the claims as they stand
//! ([`binding_state`]).

use gputopo_api::k8s_openapi::api::resource::v1::{
    AllocatedDeviceStatus, DeviceRequestAllocationResult, ResourceClaim,
};
use gputopo_api::k8s_openapi::jiff::Timestamp;

/// How long a pod waits for its devices' binding conditions: upstream's
/// default `bindingTimeout` (the DynamicResources plugin's argument).
pub const BINDING_TIMEOUT_SECONDS: i64 = 600;

/// Where a pod's claims stand with their binding conditions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BindingState {
    /// No condition is outstanding: bind.
    #[default]
    Ready,
    /// Some device's conditions are not all `True` yet: keep waiting.
    Waiting(String),
    /// A failure condition is `True`, or the wait ran out: give the
    /// devices up.
    Failed(String),
}

impl BindingState {
    /// The state of several claims together: any failure, else any wait.
    pub fn and(self, other: BindingState) -> BindingState {
        match (self, other) {
            (f @ BindingState::Failed(_), _) | (_, f @ BindingState::Failed(_)) => f,
            (w @ BindingState::Waiting(_), _) | (_, w @ BindingState::Waiting(_)) => w,
            _ => BindingState::Ready,
        }
    }
}

/// Whether a result waits for conditions at all.
fn has_binding_conditions(r: &DeviceRequestAllocationResult) -> bool {
    r.binding_conditions.as_ref().is_some_and(|c| !c.is_empty())
}

/// The results of allocations just written: waiting for the driver when
/// any device has binding conditions (none can be `True` yet).
pub fn fresh_state<'a>(
    results: impl IntoIterator<Item = &'a DeviceRequestAllocationResult>,
) -> BindingState {
    let waiting: Vec<String> = results
        .into_iter()
        .filter(|r| has_binding_conditions(r))
        .map(device_text)
        .collect();
    if waiting.is_empty() {
        BindingState::Ready
    } else {
        BindingState::Waiting(format!(
            "waiting for the binding conditions of {}",
            waiting.join(", ")
        ))
    }
}

/// Where `claim` (allocated) stands at wall time `now`.
pub fn binding_state(claim: &ResourceClaim, now: Timestamp) -> BindingState {
    let Some(status) = claim.status.as_ref() else {
        return BindingState::Ready;
    };
    let Some(allocation) = status.allocation.as_ref() else {
        return BindingState::Ready;
    };
    let results = allocation
        .devices
        .as_ref()
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default();
    let mut pending = Vec::new();
    for r in results.iter().filter(|r| has_binding_conditions(r)) {
        let reported = status.devices.iter().flatten().find(|d| {
            d.driver == r.driver
                && d.pool == r.pool
                && d.device == r.device
                && d.share_id == r.share_id
        });
        let is_true = |condition: &str| reported.is_some_and(|d| condition_true(d, condition));
        if let Some(failed) = r
            .binding_failure_conditions
            .iter()
            .flatten()
            .find(|c| is_true(c))
        {
            return BindingState::Failed(format!(
                "device {} reports {failed}: its binding failed",
                device_text(r)
            ));
        }
        let missing: Vec<&str> = r
            .binding_conditions
            .iter()
            .flatten()
            .filter(|c| !is_true(c))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            pending.push(format!("{} ({})", device_text(r), missing.join(", ")));
        }
    }
    if pending.is_empty() {
        return BindingState::Ready;
    }
    let since = allocation.allocation_timestamp.as_ref().map(|t| t.0);
    if let Some(since) = since
        && now.as_second() - since.as_second() > BINDING_TIMEOUT_SECONDS
    {
        return BindingState::Failed(format!(
            "{} not ready {BINDING_TIMEOUT_SECONDS} s after the allocation",
            pending.join(", ")
        ));
    }
    BindingState::Waiting(format!(
        "waiting for the binding conditions of {}",
        pending.join(", ")
    ))
}

fn condition_true(d: &AllocatedDeviceStatus, condition: &str) -> bool {
    d.conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == condition && c.status == "True")
}

fn device_text(r: &DeviceRequestAllocationResult) -> String {
    format!("{}/{}/{}", r.driver, r.pool, r.device)
}
