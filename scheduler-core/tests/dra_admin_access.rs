//! Admin access (`exactly.adminAccess: true`, GA): a monitoring claim may
//! get a device other claims hold, and holds nothing itself, as upstream's
//! allocator has it (`deviceInUse` is skipped for admin requests; admin
//! results are not counted as allocated). The API server admits such a
//! claim only in a namespace labelled `resource.kubernetes.io/admin-access`.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::*;
use gputopo_api::k8s_openapi::api::resource::v1::ResourceClaim;
use gputopo_scheduler_core::dra::{DraConfig, DraFit, DraInventory, NodeReason};
use serde_json::json;

fn admin(count: u32) -> ResourceClaim {
    claim(
        "admin",
        json!({"requests": [{"name": "watch", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "count": count, "adminAccess": true}}]}),
    )
}

/// All eight GPUs of the DGX A100 held by another claim.
fn all_busy() -> ResourceClaim {
    let devices: Vec<(&str, String)> = (0..8).map(|g| ("r", format!("gpu-{g}"))).collect();
    let devices: Vec<(&str, &str)> = devices.iter().map(|(r, d)| (*r, d.as_str())).collect();
    allocated(
        claim("train", json!({"requests": [gpus("r", 8)]})),
        DGX_A100.node,
        &devices,
    )
}

fn fit(uses: &str, claims: &[ResourceClaim]) -> Result<DraFit, NodeReason> {
    let m = &DGX_A100;
    let inv = DraInventory::build(&DraConfig::default(), &[slice(m)], &[topology(m)], claims);
    fit_on_machine(m, &inv, &[uses], claims, &classes())
}

#[test]
fn an_admin_claim_gets_gpus_another_claim_holds() {
    let claims = [all_busy(), admin(2)];
    let f = fit("admin", &claims).expect("admin access ignores the other claim");
    let results = f.claims[0].written_results();
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .all(|r| r.admin_access == Some(true) && r.device.starts_with("gpu-"))
    );
    assert_ne!(
        results[0].device, results[1].device,
        "distinct devices within the claim"
    );
    // A claim without admin access finds the node full.
    let plain = claim("plain", json!({"requests": [gpus("r", 1)]}));
    match fit("plain", &[all_busy(), plain]) {
        Err(NodeReason::TooFewDevices { busy: 8, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_admin_allocation_holds_nothing_and_asks_no_gpu_of_the_node() {
    let watching = {
        let mut c = allocated(admin(1), DGX_A100.node, &[("watch", "gpu-0")]);
        let mut status = serde_json::to_value(c.status.take()).expect("json");
        status["allocation"]["devices"]["results"][0]["adminAccess"] = json!(true);
        c.status = Some(serde_json::from_value(status).expect("a status"));
        c
    };
    let eight = claim("train", json!({"requests": [gpus("r", 8)]}));
    fit("train", &[watching, eight]).expect("gpu-0 is free for a claim of its own");
    // The node filter counts no GPU for an admin request.
    let claims = [admin(4)];
    let dra = read_claims(&pod("p", &["admin"], json!({})), &claims, &classes());
    let m = &DGX_A100;
    let inv = DraInventory::build(&DraConfig::default(), &[slice(m)], &[topology(m)], &claims);
    assert_eq!(dra.counted_gpus(&inv), 0);
}
