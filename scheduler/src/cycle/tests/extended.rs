//! Plain `nvidia.com/gpu` pods served through DRA where a DeviceClass
//! declares `extendedResourceName: nvidia.com/gpu` (KEP-5004): on a node
//! without the device plugin's resource the pod's special claim is
//! created, allocated and recorded in the pod's status before the binding;
//! device-plugin nodes keep serving it as before; a failed binding deletes
//! the claim it created.

use super::Harness;
use super::claims::dra_world;
use super::fake::Write;
use super::fixtures::{World, pod};
use crate::config::Settings;
use crate::cycle::{Outcome, WriteErrorKind, WriteOp};
use k8s_openapi::api::resource::v1::DeviceClass;
use serde_json::json;
use std::sync::Arc;

/// `dra_world(count)` plus the class serving `nvidia.com/gpu`; the nodes
/// named in `dra_only` lose their device plugin's `nvidia.com/gpu`.
fn extended_world(count: usize, dra_only: &[&str]) -> World {
    let mut w = dra_world(count);
    let class: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": "gpu-extended"},
        "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
            "extendedResourceName": "nvidia.com/gpu"
        }
    }))
    .expect("a class");
    w.dra.classes.push(Arc::new(class));
    for node in &mut w.nodes {
        if dra_only.contains(&node.metadata.name.as_deref().unwrap_or_default()) {
            let n = Arc::make_mut(node);
            if let Some(a) = n.status.as_mut().and_then(|s| s.allocatable.as_mut()) {
                a.remove("nvidia.com/gpu");
            }
        }
    }
    w
}

fn kinds(writes: &[Write]) -> Vec<&'static str> {
    writes
        .iter()
        .filter_map(|w| match w {
            Write::CreateClaim { ok: true, .. } => Some("create"),
            Write::ReserveClaim { ok: true, .. } => Some("allocate"),
            Write::ExtendedClaimStatus { .. } => Some("pod status"),
            Write::Bind { ok: true, .. } => Some("bind"),
            Write::DeleteClaim { .. } => Some("delete"),
            Write::ReleaseClaim { .. } => Some("release"),
            _ => None,
        })
        .collect()
}

#[test]
fn a_plain_gpu_pod_on_a_dra_node_gets_its_special_claim_before_the_binding() {
    let mut w = extended_world(1, &["n1"]);
    w.add(pod("plain", 4, None, 0));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    assert_eq!(kinds(&writes), ["create", "allocate", "pod status", "bind"]);
    let status = writes
        .iter()
        .find_map(|w| match w {
            Write::ExtendedClaimStatus {
                claim, requests, ..
            } => Some((claim, requests)),
            _ => None,
        })
        .expect("the pod's status");
    assert_eq!(status.0, "plain-extended-resources-x1");
    assert_eq!(
        status.1,
        &["c:nvidia.com/gpu:container-0-request-0".to_string()]
    );
    let Some(Outcome::Scheduled(p)) = report.outcome("ml/plain") else {
        panic!("{:?}", report.outcomes);
    };
    assert_eq!(p.gpus.len(), 4);
}

#[test]
fn device_plugin_nodes_keep_serving_and_dra_nodes_take_what_they_cannot() {
    // n1 has the device plugin, n2 DRA only; n1 has six GPUs busy.
    let mut w = extended_world(2, &["n2"]);
    w.add(pod("busy", 6, Some("n1"), 0));
    w.add(pod("one", 1, None, 0));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    // One GPU: a tie on set quality; packing prefers the fuller n1, through
    // the device plugin, no claim.
    let Some(Outcome::Scheduled(p)) = report.outcome("ml/one") else {
        panic!("{:?}", report.outcomes);
    };
    assert_eq!(p.node, "n1");
    assert_eq!(kinds(&writes), ["bind"]);
    // Four: only n2 has room, through DRA.
    h.world.add(pod("four", 4, None, 0));
    h.advance(std::time::Duration::from_secs(1));
    let (report, writes) = h.cycle();
    let Some(Outcome::Scheduled(p)) = report.outcome("ml/four") else {
        panic!("{:?}", report.outcomes);
    };
    assert_eq!(p.node, "n2");
    assert_eq!(kinds(&writes), ["create", "allocate", "pod status", "bind"]);
}

#[test]
fn a_failed_binding_deletes_the_special_claim_it_created() {
    let mut w = extended_world(1, &["n1"]);
    w.add(pod("plain", 2, None, 0));
    let mut h = Harness::new(w, Settings::default());
    h.writes
        .fail_once(WriteOp::Bind, "ml/plain", WriteErrorKind::Unavailable);
    let (report, writes) = h.cycle();
    assert!(matches!(
        report.outcome("ml/plain"),
        Some(Outcome::BindFailed(_))
    ));
    assert_eq!(
        kinds(&writes),
        ["create", "allocate", "pod status", "release", "delete"]
    );
}
