//! Pods whose GPUs come through ResourceClaims: the claim is written
//! (allocation and reservation) before the binding, on devices the
//! snapshot has free; a failed binding releases what was written; a claim
//! gputopo cannot honour is refused naming the field; devices another
//! scheduler allocated are busy.

use super::fake::Write;
use super::fixtures::{World, pod, topology};
use super::{Harness, binds};
use crate::config::Settings;
use crate::cycle::{Outcome, WriteErrorKind, WriteOp};
use gputopo_topology::dra_slice::{DriverFacts, nvidia_resource_slice};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use serde_json::{Value, json};
use std::sync::Arc;

/// `World::dgx(count, count)` with NVIDIA's DRA driver publishing every
/// node's GPUs (by `index`: the fixture's topology names no UUID) and its
/// `gpu.nvidia.com` DeviceClass.
pub(super) fn dra_world(count: usize) -> World {
    let mut w = World::dgx(count, count);
    let mut facts =
        DriverFacts::for_product("NVIDIA A100-SXM4-40GB", "40Gi").expect("a known product");
    facts.publish_index = true;
    for i in 1..=count {
        let name = format!("n{i}");
        let slice: ResourceSlice =
            serde_json::from_value(nvidia_resource_slice(&name, &topology(&name).spec, &facts))
                .expect("a slice");
        w.dra.slices.push(Arc::new(slice));
    }
    let class: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}
    }))
    .expect("a class");
    w.dra.classes.push(Arc::new(class));
    w
}

pub(super) fn claim(name: &str, request: Value) -> ResourceClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}")},
        "spec": {"devices": {"requests": [request]}}
    }))
    .expect("a claim")
}

pub(super) fn gpus(count: u32) -> Value {
    json!({"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}})
}

/// A pending pod using the claim `claim` and no extended resource.
pub(super) fn claim_pod(name: &str, claim: &str) -> Pod {
    let mut p = pod(name, 0, None, 0);
    let spec = p.spec.as_mut().expect("spec");
    spec.containers[0].resources =
        Some(serde_json::from_value(json!({"claims": [{"name": "gpus"}]})).expect("resources"));
    spec.resource_claims = Some(vec![
        serde_json::from_value(json!({"name": "gpus", "resourceClaimName": claim}))
            .expect("a pod claim"),
    ]);
    p
}

fn reserves(writes: &[Write]) -> Vec<(String, bool, bool)> {
    writes
        .iter()
        .filter_map(|w| match w {
            Write::ReserveClaim {
                claim,
                allocated,
                ok,
                ..
            } => Some((claim.clone(), *allocated, *ok)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_claim_is_allocated_on_free_devices_then_the_pod_is_bound() {
    let mut w = dra_world(2);
    // n1 half full with a device-plugin pod on GPUs 0-3: packing prefers
    // n1, and its devices gpu-0..3 are not free for the claim.
    w.add(pod("busy", 4, Some("n1"), 0));
    w.dra.claims.push(Arc::new(claim("train", gpus(4))));
    w.add(claim_pod("ddp", "train"));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    assert_eq!(reserves(&writes), [("ml/train".to_string(), true, true)]);
    let reserve_at = writes
        .iter()
        .position(|w| matches!(w, Write::ReserveClaim { .. }))
        .expect("a claim write");
    let bind_at = writes
        .iter()
        .position(|w| matches!(w, Write::Bind { .. }))
        .expect("a binding");
    assert!(
        reserve_at < bind_at,
        "the claim is written before the binding"
    );
    let Some(Outcome::Scheduled(p)) = report.outcome("ml/ddp") else {
        panic!("not scheduled: {:?}", report.outcomes);
    };
    assert_eq!(p.node, "n1", "packed beside the busy pod");
    assert_eq!(
        p.gpus,
        [4, 5, 6, 7],
        "the GPUs the device-plugin pod does not hold"
    );
    assert!(
        p.explanation.contains("train: gpu.nvidia.com/n1/gpu-4"),
        "{}",
        p.explanation
    );
    assert_eq!(binds(&writes).len(), 1);
}

#[test]
fn devices_another_scheduler_allocated_are_busy_for_every_pod() {
    let mut w = dra_world(1);
    // kube-scheduler allocated gpu-0..5 of n1 to a claim of its own pod.
    let mut other = claim("theirs", gpus(6));
    other.status = Some(
        serde_json::from_value(json!({"allocation": {
            "devices": {"results": (0..6).map(|i| json!({
                "request": "gpus", "driver": "gpu.nvidia.com", "pool": "n1", "device": format!("gpu-{i}")
            })).collect::<Vec<_>>()},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}
        }}))
        .expect("a status"),
    );
    w.dra.claims.push(Arc::new(other));
    w.dra.claims.push(Arc::new(claim("mine", gpus(4))));
    w.add(claim_pod("dra", "mine"))
        .add(pod("plugin", 4, None, 0));
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty(), "{writes:?}");
    for pod in ["ml/dra", "ml/plugin"] {
        let Some(Outcome::Unschedulable { message }) = report.outcome(pod) else {
            panic!("{pod}: {:?}", report.outcomes);
        };
        assert!(message.starts_with("0/1 nodes are available"), "{message}");
    }
    // Two are free: a 2-GPU claim fits there.
    h.world.dra.claims.push(Arc::new(claim("pair", gpus(2))));
    h.world.add(claim_pod("small", "pair"));
    h.advance(std::time::Duration::from_secs(1));
    let (report, _) = h.cycle();
    let Some(Outcome::Scheduled(p)) = report.outcome("ml/small") else {
        panic!("{:?}", report.outcomes);
    };
    assert_eq!(p.gpus, [6, 7]);
}

#[test]
fn a_failed_binding_releases_the_claim_it_allocated() {
    let mut w = dra_world(1);
    w.dra.claims.push(Arc::new(claim("train", gpus(2))));
    w.add(claim_pod("ddp", "train"));
    let mut h = Harness::new(w, Settings::default());
    h.writes
        .fail_once(WriteOp::Bind, "ml/ddp", WriteErrorKind::Conflict);
    let (report, writes) = h.cycle();
    assert!(matches!(
        report.outcome("ml/ddp"),
        Some(Outcome::BindFailed(_))
    ));
    let released: Vec<_> = writes
        .iter()
        .filter_map(|w| match w {
            Write::ReleaseClaim {
                claim, deallocate, ..
            } => Some((claim.as_str(), *deallocate)),
            _ => None,
        })
        .collect();
    assert_eq!(released, [("ml/train", true)]);
}

#[test]
fn a_refused_claim_write_binds_nothing() {
    let mut w = dra_world(1);
    w.dra.claims.push(Arc::new(claim("train", gpus(2))));
    w.add(claim_pod("ddp", "train"));
    let mut h = Harness::new(w, Settings::default());
    h.writes
        .fail_once(WriteOp::ClaimReserve, "ml/train", WriteErrorKind::Conflict);
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty());
    let Some(Outcome::BindFailed(e)) = report.outcome("ml/ddp") else {
        panic!("{:?}", report.outcomes);
    };
    assert_eq!(e.op, WriteOp::ClaimReserve);
}

#[test]
fn a_claim_gputopo_cannot_honour_is_refused_naming_the_field() {
    let mut w = dra_world(1);
    let request = json!({"name": "gpus", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "count": 1, "allocationMode": "Every"}});
    w.dra.claims.push(Arc::new(claim("every", request)));
    w.add(claim_pod("debug", "every"));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty() && reserves(&writes).is_empty());
    let Some(Outcome::Invalid { message }) = report.outcome("ml/debug") else {
        panic!("{:?}", report.outcomes);
    };
    assert!(
        message.contains("spec.devices.requests[0].exactly.allocationMode"),
        "{message}"
    );
    assert!(message.contains("accepted"), "{message}");
}

#[test]
fn a_pod_whose_template_claim_is_not_created_yet_waits() {
    let mut w = dra_world(1);
    let mut p = claim_pod("ddp", "unused");
    p.spec.as_mut().expect("spec").resource_claims = Some(vec![
        serde_json::from_value(json!({"name": "gpus", "resourceClaimTemplateName": "four"}))
            .expect("a pod claim"),
    ]);
    w.add(p);
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty());
    let Some(Outcome::Unschedulable { message }) = report.outcome("ml/ddp") else {
        panic!("{:?}", report.outcomes);
    };
    assert!(
        message.contains("waiting for its ResourceClaim"),
        "{message}"
    );
}

#[test]
fn a_claim_shared_by_two_pods_is_allocated_once_and_both_go_to_its_devices() {
    let mut w = dra_world(2);
    w.dra.claims.push(Arc::new(claim("shared", gpus(2))));
    w.add(claim_pod("reader-a", "shared"))
        .add(claim_pod("reader-b", "shared"));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    // Allocated for the first, only reserved for the second.
    assert_eq!(
        reserves(&writes),
        [
            ("ml/shared".to_string(), true, true),
            ("ml/shared".to_string(), false, true)
        ]
    );
    let placed: Vec<(String, Vec<u32>)> = ["ml/reader-a", "ml/reader-b"]
        .iter()
        .map(|k| match report.outcome(k) {
            Some(Outcome::Scheduled(p)) => (p.node.clone(), p.gpus.clone()),
            other => panic!("{k}: {other:?}"),
        })
        .collect();
    assert_eq!(placed[0], placed[1], "the same node and devices");
    // The next cycle still places other pods around them.
    h.world.dra.claims.push(Arc::new(claim("other", gpus(6))));
    h.world.add(claim_pod("big", "other"));
    h.advance(std::time::Duration::from_secs(1));
    let (report, _) = h.cycle();
    let Some(Outcome::Scheduled(p)) = report.outcome("ml/big") else {
        panic!("{:?}", report.outcomes);
    };
    if p.node == placed[0].0 {
        assert!(p.gpus.iter().all(|g| !placed[0].1.contains(g)), "{p:?}");
    }
}

/// Two DRA nodes and the annotated gang `gang` of `size` members, member
/// `i` with its own 8-GPU claim `c<i>`.
fn claim_gang_world(gang: &str, size: u32) -> World {
    let mut w = dra_world(2);
    for i in 0..size {
        w.dra
            .claims
            .push(Arc::new(claim(&format!("c{i}"), gpus(8))));
        w.add(claim_member(gang, size, i, &format!("c{i}")));
    }
    w
}

/// Member `i` of the annotated gang `gang` of `size`, its GPUs from claim `claim`.
fn claim_member(gang: &str, size: u32, i: u32, claim: &str) -> Pod {
    let p = claim_pod(&format!("{gang}-{i}"), claim);
    let p = super::fixtures::annotate(p, "gputopo.dev/gang", gang);
    super::fixtures::annotate(p, "gputopo.dev/gang-size", &size.to_string())
}

#[test]
fn a_gang_of_claim_pods_is_decided_as_one_and_every_claim_written_before_any_binding() {
    let w = claim_gang_world("ddp", 2);
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    let kinds: Vec<&str> = writes
        .iter()
        .filter_map(|w| match w {
            Write::ReserveClaim { ok: true, .. } => Some("claim"),
            Write::Bind { ok: true, .. } => Some("bind"),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, ["claim", "claim", "bind", "bind"], "{writes:?}");
    let nodes: std::collections::BTreeSet<String> = ["ml/ddp-0", "ml/ddp-1"]
        .iter()
        .map(|k| match report.outcome(k) {
            Some(Outcome::Scheduled(p)) => {
                assert_eq!(p.gpus.len(), 8);
                p.node.clone()
            }
            other => panic!("{k}: {other:?}"),
        })
        .collect();
    assert_eq!(nodes.len(), 2, "one member per node");
}

#[test]
fn a_claim_gang_that_cannot_fit_whole_writes_nothing() {
    let w = claim_gang_world("big", 3);
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    assert!(
        binds(&writes).is_empty() && reserves(&writes).is_empty(),
        "all or nothing: {writes:?}"
    );
    assert!(
        matches!(
            report.outcome("ml/big-0"),
            Some(Outcome::Unschedulable { .. })
        ),
        "{:?}",
        report.outcomes
    );
}

#[test]
fn a_failed_claim_write_in_a_gang_releases_every_claim_and_binds_none() {
    let w = claim_gang_world("ddp", 2);
    let mut h = Harness::new(w, Settings::default());
    h.writes
        .fail_once(WriteOp::ClaimReserve, "ml/c1", WriteErrorKind::Conflict);
    let (_, writes) = h.cycle();
    assert!(binds(&writes).is_empty(), "{writes:?}");
    let released: Vec<&str> = writes
        .iter()
        .filter_map(|w| match w {
            Write::ReleaseClaim { claim, .. } => Some(claim.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(released, ["ml/c0"]);
}

#[test]
fn a_claim_pod_short_of_devices_no_eviction_frees_is_not_nominated() {
    // n1 publishes one NIC, held by another claim; the snapshot's GPUs are
    // free, so the GPU count the pod is judged by fits without eviction.
    let mut w = dra_world(1);
    let nic: ResourceSlice = serde_json::from_value(json!({
        "metadata": {"name": "n1-dra.net"},
        "spec": {"driver": "dra.net", "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "nic-0", "attributes": {"dra.net/rdma": {"bool": true}}}]}
    }))
    .expect("a slice");
    w.dra.slices.push(Arc::new(nic));
    let class: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": "nic"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'dra.net'"}}]}
    }))
    .expect("a class");
    w.dra.classes.push(Arc::new(class));
    let mut theirs = claim(
        "theirs",
        json!({"name": "n", "exactly": {"deviceClassName": "nic"}}),
    );
    theirs.status = Some(
        serde_json::from_value(json!({"allocation": {"devices": {"results": [
            {"request": "n", "driver": "dra.net", "pool": "n1", "device": "nic-0"}]}}}))
        .expect("a status"),
    );
    w.dra.claims.push(Arc::new(theirs));
    let mut both = claim("both", gpus(1));
    both.spec
        .as_mut()
        .expect("spec")
        .devices
        .as_mut()
        .expect("devices")
        .requests
        .as_mut()
        .expect("requests")
        .push(
            serde_json::from_value(json!({"name": "nic", "exactly": {"deviceClassName": "nic"}}))
                .expect("a request"),
        );
    w.dra.claims.push(Arc::new(both));
    w.add(claim_pod("ddp", "both"));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    let Some(Outcome::Unschedulable { message }) = report.outcome("ml/ddp") else {
        panic!("not unschedulable: {:?}", report.outcomes);
    };
    assert!(message.contains("too few free devices"), "{message}");
    assert!(
        message.contains("evicting pods frees nothing the claims lack"),
        "{message}"
    );
    assert!(
        !writes.iter().any(|w| matches!(w, Write::Nominate { .. })),
        "{writes:?}"
    );
}
