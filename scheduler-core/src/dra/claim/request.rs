//! One `spec.devices.requests[i]` read: `exactly`, or `firstAvailable`'s
//! subrequests in order (each read as an `exactly` is, named
//! `<request>/<subrequest>` as upstream names its results). What gputopo
//! cannot honour exactly is refused with the field named.

use super::{Mode, RequestPlan};
use crate::dra::cel::Selector;
use crate::dra::claim::MAX_DEVICES_PER_CLAIM;
use crate::dra::error::{ClaimError, ClaimErrorKind};
use gputopo_api::k8s_openapi::api::resource::v1::{
    CapacityRequirements, DeviceClass, DeviceRequest, DeviceSelector, DeviceToleration,
};
use std::collections::BTreeMap;

/// The fields `exactly` and a `firstAvailable` subrequest share.
struct Wanted<'a> {
    /// `<request>` or `<request>/<subrequest>`.
    name: String,
    /// The path of the `exactly` or of the subrequest.
    field: String,
    class: &'a str,
    allocation_mode: Option<&'a str>,
    count: Option<i64>,
    selectors: &'a [DeviceSelector],
    tolerations: &'a [DeviceToleration],
    capacity: Option<&'a CapacityRequirements>,
}

/// The request's plans: one for `exactly`; for `firstAvailable` one per
/// subrequest, in order (the first is the preferred).
pub(super) fn request_plans(
    object: &str,
    i: usize,
    request: &DeviceRequest,
    classes: &BTreeMap<&str, &DeviceClass>,
) -> Result<Vec<RequestPlan>, ClaimError> {
    let field = format!("spec.devices.requests[{i}]");
    let subrequests = request.first_available.as_deref().unwrap_or_default();
    if !subrequests.is_empty() {
        if request.exactly.is_some() {
            return Err(ClaimError::new(
                object,
                field,
                ClaimErrorKind::ExactlyAndFirstAvailable,
            ));
        }
        let mut plans = Vec::with_capacity(subrequests.len());
        for (j, sub) in subrequests.iter().enumerate() {
            let wanted = Wanted {
                name: format!("{}/{}", request.name, sub.name),
                field: format!("{field}.firstAvailable[{j}]"),
                class: &sub.device_class_name,
                allocation_mode: sub.allocation_mode.as_deref(),
                count: sub.count,
                selectors: sub.selectors.as_deref().unwrap_or_default(),
                tolerations: sub.tolerations.as_deref().unwrap_or_default(),
                capacity: sub.capacity.as_ref(),
            };
            plans.push(plan(object, &field, wanted, classes)?);
        }
        return Ok(plans);
    }
    let Some(exactly) = &request.exactly else {
        return Err(ClaimError::new(object, field, ClaimErrorKind::NoExactly));
    };
    let ex = format!("{field}.exactly");
    let wanted = Wanted {
        name: request.name.clone(),
        field: ex,
        class: &exactly.device_class_name,
        allocation_mode: exactly.allocation_mode.as_deref(),
        count: exactly.count,
        selectors: exactly.selectors.as_deref().unwrap_or_default(),
        tolerations: exactly.tolerations.as_deref().unwrap_or_default(),
        capacity: exactly.capacity.as_ref(),
    };
    let mut plan = plan(object, &field, wanted, classes)?;
    // The API server admits it only in a namespace labelled
    // `resource.kubernetes.io/admin-access: "true"`.
    plan.admin_access = exactly.admin_access == Some(true);
    Ok(vec![plan])
}

/// One plan: its count or `All`, and its class's and its own selectors
/// compiled. `request_field` is `spec.devices.requests[i]`.
fn plan(
    object: &str,
    request_field: &str,
    wanted: Wanted<'_>,
    classes: &BTreeMap<&str, &DeviceClass>,
) -> Result<RequestPlan, ClaimError> {
    let ex = &wanted.field;
    let mut capacity = BTreeMap::new();
    for (name, q) in wanted
        .capacity
        .and_then(|c| c.requests.as_ref())
        .into_iter()
        .flatten()
    {
        let amount = gputopo_api::quantity::parse_bytes(&q.0).map_err(|e| {
            ClaimError::new(
                object,
                format!("{ex}.capacity.requests[{name}]"),
                ClaimErrorKind::CapacityQuantity(e.to_string()),
            )
        })?;
        capacity.insert(name.clone(), amount as i128);
    }
    let mode = request_mode(object, ex, wanted.allocation_mode, wanted.count)?;
    if wanted.class.is_empty() {
        return Err(ClaimError::new(
            object,
            format!("{ex}.deviceClassName"),
            ClaimErrorKind::NoDeviceClass,
        ));
    }
    let class = classes.get(wanted.class).ok_or_else(|| {
        ClaimError::new(
            object,
            format!("{ex}.deviceClassName"),
            ClaimErrorKind::DeviceClassNotFound(wanted.class.to_string()),
        )
    })?;
    let class_object = format!("DeviceClass {}", wanted.class);
    let mut selectors = Vec::new();
    for (j, s) in class
        .spec
        .iter()
        .flat_map(|s| s.selectors.iter().flatten())
        .enumerate()
    {
        selectors.push(compile(&class_object, &format!("spec.selectors[{j}]"), s)?);
    }
    let class_selectors = selectors.len();
    for (j, s) in wanted.selectors.iter().enumerate() {
        selectors.push(compile(object, &format!("{ex}.selectors[{j}]"), s)?);
    }
    Ok(RequestPlan {
        name: wanted.name,
        field: request_field.to_string(),
        class: wanted.class.to_string(),
        mode,
        selectors,
        class_selectors,
        tolerations: wanted.tolerations.to_vec(),
        capacity,
        admin_access: false,
    })
}

fn compile(object: &str, field: &str, s: &DeviceSelector) -> Result<Selector, ClaimError> {
    let cel = s
        .cel
        .as_ref()
        .ok_or_else(|| ClaimError::new(object, field, ClaimErrorKind::NoCel))?;
    Selector::compile(&cel.expression, object, format!("{field}.cel.expression"))
}

/// `allocationMode` and `count` (`ExactCount` by default).
fn request_mode(
    object: &str,
    ex: &str,
    allocation_mode: Option<&str>,
    count: Option<i64>,
) -> Result<Mode, ClaimError> {
    Ok(match allocation_mode {
        None | Some("") | Some("ExactCount") => {
            let count = count.unwrap_or(1);
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
            if count.is_some() {
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
