//! Consumable capacity: a device with `allowMultipleAllocations` shared by
//! claims up to its capacity, amounts rounded by its `requestPolicy`, each
//! share written with its consumed capacity and a share id; a whole
//! device's capacity as a filter. A NIC of dranet's shape with a bandwidth
//! capacity stands for any shared device.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::*;
use gputopo_api::GpuRequest;
use gputopo_api::k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use gputopo_scheduler_core::dra::{DraConfig, DraFit, DraInventory, NodeReason};
use gputopo_scheduler_core::gpuset::SetRequest;
use serde_json::{Value, json};

const NODE: &str = "net-1";
const GI: i128 = 1 << 30;

fn shared_nic() -> ResourceSlice {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "net-1-dra.net-0"},
        "spec": {
            "driver": "dra.net",
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [{
                "name": "pci-0000-80-00-0",
                "allowMultipleAllocations": true,
                "attributes": {"dra.net/rdma": {"bool": true}},
                "capacity": {"bandwidth": {"value": "100Gi", "requestPolicy": {
                    "default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}}}},
            }],
        },
    }))
    .expect("a slice")
}

fn bandwidth(name: &str, amount: &str) -> Value {
    json!({"name": name, "exactly": {"deviceClassName": "dranet-rdma",
        "capacity": {"requests": {"bandwidth": amount}}}})
}

fn fit(claims: &[ResourceClaim], uses: &[&str]) -> Result<DraFit, NodeReason> {
    let inv = DraInventory::build(&DraConfig::default(), &[shared_nic()], [], claims);
    let pod = pod("p", uses, json!({}));
    let dra = read_claims(&pod, claims, &classes());
    dra.fit(
        &inv,
        NODE,
        None,
        &SetRequest::from_gpu_request(&GpuRequest::default()),
    )
}

/// The claim as written: its allocation set from the fit.
fn written(mut claim: ResourceClaim, fit: &DraFit) -> ResourceClaim {
    let allocation = fit.claims[0].allocation.clone().expect("allocated");
    claim.status =
        Some(serde_json::from_value(json!({"allocation": allocation})).expect("a status"));
    claim
}

fn consumed(fit: &DraFit) -> (i128, String) {
    let result = &fit.claims[0].written_results()[0];
    let amount = result.consumed_capacity.as_ref().expect("consumed")["bandwidth"]
        .0
        .clone();
    (
        amount.parse().expect("an integer"),
        result.share_id.clone().expect("a share id"),
    )
}

#[test]
fn a_shared_device_serves_claims_until_its_capacity_is_spent() {
    let mut claims = Vec::new();
    let mut shares = Vec::new();
    // 35Gi rounds up to 40Gi (min 10Gi, step 10Gi): two fit in 100Gi, a third does not.
    for i in 0..3 {
        let c = claim(
            &format!("c{i}"),
            json!({"requests": [bandwidth("net", "35Gi")]}),
        );
        claims.push(c.clone());
        let uses = [format!("c{i}")];
        let result = fit(&claims, &[uses[0].as_str()]);
        if i < 2 {
            let f = result.expect("it fits");
            let (amount, share) = consumed(&f);
            assert_eq!(amount, 40 * GI, "rounded up to the step");
            assert_eq!(share.len(), 36, "a UUID: {share}");
            shares.push(share);
            *claims.last_mut().expect("it") = written(c, &f);
        } else {
            let err = result.expect_err("80Gi of 100Gi taken");
            assert!(
                matches!(err, NodeReason::TooFewDevices { short: 1, .. }),
                "{err}"
            );
            assert!(
                err.to_string().contains("without the capacity asked"),
                "{err}"
            );
        }
    }
    assert_ne!(shares[0], shares[1], "each share its own id");
}

#[test]
fn one_pod_shares_a_device_between_its_requests_within_the_capacity() {
    let both = [claim(
        "both",
        json!({"requests": [bandwidth("a", "40Gi"), bandwidth("b", "40Gi")]}),
    )];
    let f = fit(&both, &["both"]).expect("80Gi of 100Gi");
    assert_eq!(f.claims[0].devices.len(), 2);
    assert_eq!(f.claims[0].devices[0].device, f.claims[0].devices[1].device);
    let too_much = [claim(
        "too-much",
        json!({"requests": [bandwidth("a", "60Gi"), bandwidth("b", "60Gi")]}),
    )];
    assert!(fit(&too_much, &["too-much"]).is_err(), "120Gi of 100Gi");
}

#[test]
fn a_capacity_the_device_lacks_or_its_policy_refuses_is_short() {
    for (amount, asked) in [("150Gi", "bandwidth"), ("1Gi", "memory")] {
        let c = [claim(
            "c",
            json!({"requests": [{"name": "net", "exactly": {"deviceClassName": "dranet-rdma",
                "capacity": {"requests": {asked: amount}}}}]}),
        )];
        let err = fit(&c, &["c"]).expect_err("short");
        assert!(
            matches!(err, NodeReason::TooFewDevices { short: 1, .. }),
            "{asked}: {err}"
        );
    }
}
