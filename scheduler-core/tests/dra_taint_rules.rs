//! `DeviceTaintRule`s applied to the inventory as upstream's slice tracker
//! applies them for kube-scheduler (`resourceslice/tracker`): the
//! selector's driver, pool and device must match where set, an empty
//! selector taints every device and a rule without one none (1.37's
//! tracker), `NoSchedule` keeps untolerating claims off and `None` keeps
//! nobody off.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::*;
use gputopo_api::k8s_openapi::api::resource::v1::{DeviceTaintRule, ResourceClaim};
use gputopo_scheduler_core::dra::{DraConfig, DraFit, DraInventory, NodeReason};
use serde_json::{Value, json};

fn rule(selector: Option<Value>, effect: &str) -> DeviceTaintRule {
    let mut spec =
        json!({"taint": {"key": "gputopo.dev/maintenance", "value": "hbm", "effect": effect}});
    if let Some(s) = selector {
        spec["deviceSelector"] = s;
    }
    serde_json::from_value(
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
        "metadata": {"name": "r"}, "spec": spec}),
    )
    .expect("a rule")
}

fn fit(rules: &[DeviceTaintRule], devices: Value) -> Result<DraFit, NodeReason> {
    let m = &DGX_A100;
    let claims: Vec<ResourceClaim> = vec![claim("c", devices)];
    let mut inv = DraInventory::build(&DraConfig::default(), &[slice(m)], &[topology(m)], &claims);
    inv.apply_taint_rules(rules);
    fit_on_machine(m, &inv, &["c"], &claims, &classes())
}

fn devices(fit: &DraFit) -> Vec<String> {
    let mut d: Vec<String> = fit.claims[0]
        .written_results()
        .iter()
        .map(|r| r.device.clone())
        .collect();
    d.sort();
    d
}

fn on_gpu_3() -> Value {
    json!({"driver": "gpu.nvidia.com", "pool": DGX_A100.node, "device": "gpu-3"})
}

#[test]
fn a_rule_naming_a_device_keeps_claims_off_it() {
    let all = json!({"requests": [gpus("gpus", 8)]});
    match fit(&[rule(Some(on_gpu_3()), "NoSchedule")], all.clone()) {
        Err(NodeReason::TooFewDevices {
            wanted: 8,
            tainted: 1,
            ..
        }) => {}
        other => panic!("eight GPUs with one tainted: {other:?}"),
    }
    let seven = fit(
        &[rule(Some(on_gpu_3()), "NoExecute")],
        json!({"requests": [gpus("gpus", 7)]}),
    )
    .expect("seven fit");
    assert!(
        !devices(&seven).contains(&"gpu-3".to_string()),
        "{:?}",
        devices(&seven)
    );
    // Effect None is information only.
    fit(&[rule(Some(on_gpu_3()), "None")], all).expect("None keeps nobody off");
}

#[test]
fn a_rule_of_another_driver_pool_or_device_taints_nothing_here() {
    let all = json!({"requests": [gpus("gpus", 8)]});
    for selector in [
        json!({"driver": "dra.net", "device": "gpu-3"}),
        json!({"pool": "another-node"}),
        json!({"device": "gpu-9"}),
    ] {
        fit(&[rule(Some(selector.clone()), "NoSchedule")], all.clone())
            .unwrap_or_else(|e| panic!("{selector}: {e:?}"));
    }
}

#[test]
fn a_rule_without_a_selector_taints_nothing() {
    fit(
        &[rule(None, "NoSchedule")],
        json!({"requests": [gpus("gpus", 8)]}),
    )
    .expect("no selector, no device");
}

#[test]
fn an_empty_selector_taints_every_device() {
    {
        let selector = Some(json!({}));
        let one = json!({"requests": [gpus("gpus", 1)]});
        match fit(&[rule(selector.clone(), "NoSchedule")], one) {
            Err(NodeReason::TooFewDevices { tainted: 8, .. }) => {}
            other => panic!("{selector:?}: {other:?}"),
        }
        let tolerating = json!({"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "count": 2,
            "tolerations": [{"key": "gputopo.dev/maintenance", "operator": "Equal", "value": "hbm"}]}}]});
        let f = fit(&[rule(selector.clone(), "NoSchedule")], tolerating).expect("tolerated");
        assert_eq!(devices(&f).len(), 2);
        let tolerations = &f.claims[0].written_results()[0].tolerations;
        assert!(
            tolerations.as_ref().is_some_and(|t| t.len() == 1),
            "written with the result"
        );
    }
}
