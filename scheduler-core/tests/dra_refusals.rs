//! Claims gputopo cannot honour exactly are refused with an error naming
//! the field and what is accepted, never allocated wrongly.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::*;
use gputopo_api::k8s_openapi::api::resource::v1::ResourceClaim;
use gputopo_scheduler_core::dra::{ClaimError, ClaimErrorKind, DraPod, pod_claim_names};
use serde_json::json;

fn parse_error(claim: &ResourceClaim) -> ClaimError {
    DraPod::new("default/trainer", &[claim], &classes()).expect_err("refused")
}

#[test]
fn a_malformed_cel_expression_is_refused_naming_the_field() {
    let bad = claim(
        "bad",
        json!({"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu.nvidia.com",
        "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName =="}}]}}]}),
    );
    let err = parse_error(&bad);
    assert_eq!(
        err.field,
        "spec.devices.requests[0].exactly.selectors[0].cel.expression"
    );
    assert!(matches!(err.kind, ClaimErrorKind::CelSyntax(_)), "{err}");
}

/// Found by fuzzing (scripts/fuzz): 256 KiB of nested list brackets took
/// the CEL parser seconds before it gave up. Longer than the API server's
/// 10 KiB limit is refused before parsing; at the limit, it still reads.
#[test]
fn a_cel_expression_beyond_the_api_servers_limit_is_refused() {
    let nested = |bytes: usize| {
        let head = "device.attributes['gpu.nvidia.com'].architecture in ['Ampere',\n";
        let mut e = head.repeat(bytes / head.len() + 1);
        e.truncate(bytes);
        e
    };
    let with = |expression: String| {
        claim(
            "long",
            json!({"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": {"expression": expression}}]}}]}),
        )
    };
    let err = parse_error(&with(nested(256 * 1024)));
    assert_eq!(err.kind, ClaimErrorKind::CelTooLong(256 * 1024));
    assert!(err.to_string().contains("at most 10240"), "{err}");
    let padded = format!("{:<10240}", "device.driver == 'gpu.nvidia.com'");
    DraPod::new("default/trainer", &[&with(padded)], &classes())
        .expect("10 KiB is within the limit");
}

#[test]
fn an_unsupported_cel_function_is_refused_naming_it() {
    let bind = claim(
        "bind",
        json!({"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu.nvidia.com",
        "selectors": [{"cel": {"expression":
            "cel.bind(a, device.attributes['gpu.nvidia.com'], a.type == 'gpu')"}}]}}]}),
    );
    let err = parse_error(&bind);
    assert_eq!(err.kind, ClaimErrorKind::CelFunction("bind".into()));
}

#[test]
fn a_capacity_request_that_is_no_quantity_is_refused_naming_its_field() {
    let prioritized = claim(
        "prio",
        json!({"requests": [{"name": "gpus", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
        {"name": "small", "deviceClassName": "gpu.nvidia.com",
         "capacity": {"requests": {"memory": "ten gigabytes"}}}]}]}),
    );
    let err = parse_error(&prioritized);
    assert_eq!(
        err.field,
        "spec.devices.requests[0].firstAvailable[1].capacity.requests[memory]"
    );
    assert!(
        matches!(err.kind, ClaimErrorKind::CapacityQuantity(_)),
        "{err}"
    );
    assert!(err.to_string().contains("ten gigabytes"), "{err}");
}

#[test]
fn a_subrequest_of_an_unknown_class_is_refused_naming_its_field() {
    let prioritized = claim(
        "prio",
        json!({"requests": [{"name": "gpus", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
        {"name": "small", "deviceClassName": "no-such-class"}]}]}),
    );
    let err = parse_error(&prioritized);
    assert_eq!(
        err.field,
        "spec.devices.requests[0].firstAvailable[1].deviceClassName"
    );
    assert_eq!(
        err.kind,
        ClaimErrorKind::DeviceClassNotFound("no-such-class".into())
    );
}

#[test]
fn a_missing_device_class_is_refused() {
    let missing = claim(
        "missing",
        json!({"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu.example.com"}}]}),
    );
    let err = parse_error(&missing);
    assert_eq!(
        err.field,
        "spec.devices.requests[0].exactly.deviceClassName"
    );
    assert_eq!(
        err.kind,
        ClaimErrorKind::DeviceClassNotFound("gpu.example.com".into())
    );
}

#[test]
fn a_template_claim_not_created_yet_is_named() {
    let p: gputopo_api::k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "quad"}],
                 "containers": [{"name": "main"}]},
    }))
    .expect("a pod");
    let err = pod_claim_names(&p).expect_err("pending");
    assert_eq!(err.field, "spec.resourceClaims[0]");
    assert_eq!(err.kind, ClaimErrorKind::TemplateClaimPending);
}
