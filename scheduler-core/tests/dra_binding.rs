//! Binding conditions (KEP-5007): where a pod's claims stand, read from
//! the claims as the driver updates them, at an injected wall time.

use gputopo_api::k8s_openapi::api::resource::v1::ResourceClaim;
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_scheduler_core::dra::{
    BINDING_TIMEOUT_SECONDS, BindingState, binding_state, fresh_state,
};
use serde_json::{Value, json};

const ALLOCATED_AT: &str = "2026-11-29T12:00:00Z";

fn result(device: &str, conditions: Value) -> Value {
    json!({"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n1", "device": device,
        "bindingConditions": conditions, "bindingFailureConditions": ["attach-failed"]})
}

fn claim(results: Vec<Value>, reported: Vec<(&str, &str)>) -> ResourceClaim {
    let devices: Vec<Value> = reported
        .iter()
        .map(|(device, condition)| {
            json!({"driver": "gpu.nvidia.com", "pool": "n1", "device": device,
            "conditions": [{"type": condition, "status": "True", "reason": "R", "message": "",
                "lastTransitionTime": ALLOCATED_AT}]})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "c", "namespace": "ml"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"allocationTimestamp": ALLOCATED_AT, "devices": {"results": results}},
            "devices": devices},
    }))
    .expect("a claim")
}

fn at(seconds_after: i64) -> Timestamp {
    let t: Timestamp = ALLOCATED_AT.parse().expect("a time");
    Timestamp::from_second(t.as_second() + seconds_after).expect("in range")
}

#[test]
fn a_claim_binds_once_every_condition_of_every_device_is_true() {
    let two = || {
        vec![
            result("gpu-0", json!(["attached"])),
            result("gpu-1", json!(["attached", "fabric-ready"])),
        ]
    };
    let waiting = binding_state(
        &claim(two(), vec![("gpu-0", "attached"), ("gpu-1", "attached")]),
        at(5),
    );
    match waiting {
        BindingState::Waiting(m) => assert!(
            m.contains("gpu.nvidia.com/n1/gpu-1 (fabric-ready)") && !m.contains("gpu-0"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    let all = claim(
        two(),
        vec![
            ("gpu-0", "attached"),
            ("gpu-1", "attached"),
            ("gpu-1", "fabric-ready"),
        ],
    );
    // Two conditions of one device reported as two entries: only the first entry counts.
    assert!(matches!(
        binding_state(&all, at(5)),
        BindingState::Waiting(_)
    ));
    let mut one_entry = claim(two(), vec![("gpu-0", "attached"), ("gpu-1", "attached")]);
    let devices = &mut one_entry
        .status
        .as_mut()
        .expect("status")
        .devices
        .as_mut()
        .expect("devices")[1];
    let mut second = devices.conditions.as_ref().expect("conditions")[0].clone();
    second.type_ = "fabric-ready".into();
    devices
        .conditions
        .as_mut()
        .expect("conditions")
        .push(second);
    assert_eq!(binding_state(&one_entry, at(5)), BindingState::Ready);
}

#[test]
fn a_failure_condition_or_a_wait_past_the_timeout_gives_the_devices_up() {
    let failed = claim(
        vec![result("gpu-0", json!(["attached"]))],
        vec![("gpu-0", "attach-failed")],
    );
    match binding_state(&failed, at(1)) {
        BindingState::Failed(m) => assert!(m.contains("gpu-0 reports attach-failed"), "{m}"),
        other => panic!("{other:?}"),
    }
    let slow = claim(vec![result("gpu-0", json!(["attached"]))], vec![]);
    assert!(matches!(
        binding_state(&slow, at(BINDING_TIMEOUT_SECONDS)),
        BindingState::Waiting(_)
    ));
    match binding_state(&slow, at(BINDING_TIMEOUT_SECONDS + 1)) {
        BindingState::Failed(m) => {
            assert!(m.contains("not ready 600 s after the allocation"), "{m}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn devices_without_conditions_never_wait() {
    let plain = claim(
        vec![
            json!({"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}),
        ],
        vec![],
    );
    assert_eq!(binding_state(&plain, at(10_000)), BindingState::Ready);
    let results = plain
        .status
        .and_then(|s| s.allocation)
        .and_then(|a| a.devices)
        .and_then(|d| d.results)
        .expect("results");
    assert_eq!(fresh_state(&results), BindingState::Ready);
    let waits: Vec<_> =
        serde_json::from_value(json!([result("gpu-3", json!(["attached"]))])).expect("results");
    assert!(matches!(fresh_state(&waits), BindingState::Waiting(m) if m.contains("gpu-3")));
    // Failure dominates waiting, waiting dominates ready.
    let w = BindingState::Waiting("w".into());
    let f = BindingState::Failed("f".into());
    assert_eq!(BindingState::Ready.and(w.clone()), w);
    assert_eq!(w.clone().and(f.clone()), f);
}
