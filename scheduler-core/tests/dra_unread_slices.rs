//! Slices reachable from many nodes (`allNodes`, `nodeSelector`: devices
//! attached over a fabric) are not allocated by gputopo yet. A request only
//! such devices could serve is refused saying so, not as if nothing matched.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::*;
use gputopo_api::k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
use gputopo_scheduler_core::dra::{DraConfig, DraInventory, DraWarning, NodeReason};
use serde_json::json;

fn fabric_slice(selection: serde_json::Value) -> ResourceSlice {
    let mut spec = json!({
        "driver": "fabric.example.com",
        "pool": {"name": "rack-1", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "accel-0"}, {"name": "accel-1"}],
    });
    for (k, v) in selection.as_object().expect("an object") {
        spec[k] = v.clone();
    }
    serde_json::from_value(
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "rack-1-fabric"}, "spec": spec}),
    )
    .expect("a slice")
}

fn fabric_class() -> DeviceClass {
    serde_json::from_value(json!({"metadata": {"name": "fabric"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'fabric.example.com'"}}]}}))
    .expect("a class")
}

#[test]
fn a_request_only_many_node_slices_serve_is_refused_naming_them() {
    let m = &DGX_A100;
    for selection in [
        json!({"allNodes": true}),
        json!({"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "rack", "operator": "In", "values": ["rack-1"]}]}]}}),
    ] {
        let claims = [claim(
            "accel",
            json!({"requests": [
            {"name": "accel", "exactly": {"deviceClassName": "fabric", "count": 1}}]}),
        )];
        let inv = DraInventory::build(
            &DraConfig::default(),
            &[slice(m), fabric_slice(selection.clone())],
            &[topology(m)],
            &claims,
        );
        assert!(
            inv.warnings
                .iter()
                .any(|w| matches!(w, DraWarning::UnsupportedSlice { .. })),
            "{selection}: warned"
        );
        let mut all = classes();
        all.push(fabric_class());
        let err =
            fit_on_machine(m, &inv, &["accel"], &claims, &all).expect_err("not allocated yet");
        assert!(
            matches!(
                err,
                NodeReason::TooFewDevices {
                    matching: 0,
                    elsewhere: 2,
                    ..
                }
            ),
            "{selection}: {err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains(
                "2 (devices that match are published in ResourceSlices reachable from many nodes"
            ),
            "{text}"
        );
        assert!(
            err.summary()
                .contains("which gputopo does not allocate yet"),
            "{}",
            err.summary()
        );
    }
}

#[test]
fn a_request_for_node_local_devices_is_told_nothing_of_them() {
    let m = &DGX_A100;
    let claims = [claim("nine", json!({"requests": [gpus("gpus", 9)]}))];
    let inv = DraInventory::build(
        &DraConfig::default(),
        &[slice(m), fabric_slice(json!({"allNodes": true}))],
        &[topology(m)],
        &claims,
    );
    let err = fit_on_machine(m, &inv, &["nine"], &claims, &classes()).expect_err("eight GPUs");
    assert!(
        matches!(err, NodeReason::TooFewDevices { elsewhere: 0, .. }),
        "{err:?}"
    );
    assert!(!err.to_string().contains("many nodes"), "{err}");
}
