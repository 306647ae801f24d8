//! MIG partitions through partitionable devices (shared counters), as
//! NVIDIA's driver publishes them with dynamic MIG on 1.35+: a counters
//! slice and one slice per GPU (`topology::dra_slice::mig`), for the
//! recorded DGX A100. Partitions are allocated within their GPU's counters;
//! a partition in use keeps its GPU from whole-GPU requests; a pod asking a
//! whole GPU and a partition gets them on different GPUs.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::*;
use gputopo_api::GpuRequest;
use gputopo_api::k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use gputopo_scheduler_core::dra::{DraConfig, DraFit, DraInventory, NodeReason};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use gputopo_topology::dra_slice::{A100_40GB_MIG, DriverFacts, nvidia_mig_resource_slices};
use serde_json::{Value, json};

fn mig_slices() -> Vec<ResourceSlice> {
    let facts = DriverFacts::for_product(DGX_A100.product, "40Gi").expect("known");
    nvidia_mig_resource_slices(
        DGX_A100.node,
        &topology_spec(&DGX_A100),
        &facts,
        A100_40GB_MIG,
    )
    .into_iter()
    .map(|v| serde_json::from_value(v).expect("a slice"))
    .collect()
}

fn mig_class() -> DeviceClass {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "mig.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression":
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}}]},
    }))
    .expect("a class")
}

/// A request of `count` partitions of `profile`.
fn migs(name: &str, profile: &str, count: u32) -> Value {
    json!({"name": name, "exactly": {"deviceClassName": "mig.nvidia.com", "count": count,
        "selectors": [{"cel": {"expression":
            format!("device.attributes['gpu.nvidia.com'].profile == '{profile}'")}}]}})
}

fn inventory(claims: &[ResourceClaim]) -> DraInventory {
    DraInventory::build(
        &DraConfig::default(),
        &mig_slices(),
        &[topology(&DGX_A100)],
        claims,
    )
}

fn fit(inv: &DraInventory, uses: &[&str], claims: &[ResourceClaim]) -> Result<DraFit, NodeReason> {
    let pod = pod("trainer", uses, json!({}));
    let mut classes = classes();
    classes.push(mig_class());
    let dra = read_claims(&pod, claims, &classes);
    let shape = NodeShape::from_spec(&topology_spec(&DGX_A100)).expect("a shape");
    let request = SetRequest::from_gpu_request(&GpuRequest::default());
    dra.fit(inv, DGX_A100.node, Some(&shape), &request)
}

fn names(fit: &DraFit, claim: usize) -> Vec<String> {
    fit.claims[claim]
        .devices
        .iter()
        .map(|d| d.device.device.clone())
        .collect()
}

/// `claim` holding `devices` of the node's GPU driver pool.
fn holding(name: &str, devices: &[&str]) -> ResourceClaim {
    let pairs: Vec<(&str, &str)> = devices.iter().map(|d| ("r", *d)).collect();
    allocated(
        claim(name, json!({"requests": [gpus("r", 1)]})),
        DGX_A100.node,
        &pairs,
    )
}

#[test]
fn the_pool_is_read_whole_and_partitions_are_not_warnings() {
    let inv = inventory(&[]);
    let node = inv.node(DGX_A100.node).expect("published");
    assert!(node.unusable_pools.is_empty(), "{:?}", node.unusable_pools);
    let whole = node.devices.iter().filter(|d| d.gpu.is_some()).count();
    let parts = node.devices.iter().filter(|d| d.partition).count();
    assert_eq!((whole, parts), (8, 8 * 13));
    assert!(
        node.devices
            .iter()
            .filter(|d| d.partition)
            .all(|d| d.parent_gpu.is_some())
    );
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
}

#[test]
fn seven_small_partitions_fill_one_gpu_and_an_eighth_goes_to_another() {
    let claims = [claim(
        "small",
        json!({"requests": [migs("m", "1g.5gb", 8)]}),
    )];
    let f = fit(&inventory(&[]), &["small"], &claims).expect("it fits");
    let mut parents: Vec<String> = names(&f, 0)
        .iter()
        .map(|n| n.split("-mig-").next().unwrap_or_default().to_string())
        .collect();
    parents.sort();
    parents.dedup();
    assert_eq!(
        parents.len(),
        2,
        "seven on one GPU, one on another: {:?}",
        names(&f, 0)
    );
    assert!(f.gpus().is_empty(), "partitions are not whole GPUs");
}

#[test]
fn a_partition_in_use_keeps_its_gpu_from_whole_gpu_requests() {
    let taken = holding("taken", &["gpu-0-mig-1g5gb-19-0"]);
    let inv = inventory(std::slice::from_ref(&taken));
    let claims = [
        taken.clone(),
        claim("eight", json!({"requests": [gpus("gpus", 8)]})),
        claim("seven", json!({"requests": [gpus("gpus", 7)]})),
    ];
    let err = fit(&inv, &["eight"], &claims).expect_err("GPU 0 is partitioned");
    assert!(
        matches!(err, NodeReason::TooFewDevices { busy: 1, .. }),
        "{err}"
    );
    let seven = fit(&inv, &["seven"], &claims).expect("seven whole GPUs");
    assert!(!seven.gpus().contains(&0), "{:?}", seven.gpus());
    let held = inv.busy_gpus();
    let on_node = held.get(DGX_A100.node).expect("held");
    assert!(
        on_node.iter().any(|(_, mask)| mask & 1 == 1),
        "the partitioned GPU is held in the snapshot: {on_node:?}"
    );
}

#[test]
fn partitions_on_one_gpu_stay_within_its_memory_slices() {
    let same_gpu = |extra: Value| {
        let mut requests = vec![migs("big", "3g.20gb", 2)];
        requests.extend(extra.as_array().cloned().unwrap_or_default());
        claim(
            "parts",
            json!({"requests": requests,
                "constraints": [{"matchAttribute": "gpu.nvidia.com/parentUUID"}]}),
        )
    };
    let two = [same_gpu(json!([]))];
    let f = fit(&inventory(&[]), &["parts"], &two).expect("two 3g.20gb on one GPU");
    let mut placed = names(&f, 0);
    placed.sort();
    assert!(
        placed[0].ends_with("-9-0") && placed[1].ends_with("-9-4"),
        "placements 0 and 4: {placed:?}"
    );
    let three = [same_gpu(json!([migs("small", "2g.10gb", 1)]))];
    assert!(
        fit(&inventory(&[]), &["parts"], &three).is_err(),
        "no memory slice is left for a 2g.10gb beside two 3g.20gb"
    );
}

#[test]
fn whole_gpus_and_a_partition_in_one_pod_land_on_different_gpus() {
    let claims = [
        claim("whole", json!({"requests": [gpus("gpus", 7)]})),
        claim("part", json!({"requests": [migs("m", "1g.5gb", 1)]})),
    ];
    let f = fit(&inventory(&[]), &["whole", "part"], &claims).expect("it fits");
    let free: Vec<u32> = (0..8).filter(|g| !f.gpus().contains(g)).collect();
    let part = &names(&f, 1)[0];
    assert!(
        part.starts_with(&format!("gpu-{}-mig-", free[0])),
        "partition {part} is on the one GPU not taken whole ({free:?})"
    );
}
