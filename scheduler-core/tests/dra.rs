//! Dynamic Resource Allocation, the pure part: ResourceSlices as NVIDIA's
//! driver publishes them for recorded machines, claims as users write them,
//! and the exact devices gputopo allocates.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::*;
use gputopo_api::k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use gputopo_api::{GpuRequest, LinkClass};
use gputopo_scheduler_core::dra::{
    DraConfig, DraFit, DraInventory, DraPod, DraWarning, GpuMapping, NodeReason,
};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use serde_json::json;

struct Cluster {
    inventory: DraInventory,
    machines: Vec<&'static Machine>,
}

fn cluster_with(slices: Vec<ResourceSlice>, claims: &[ResourceClaim]) -> Cluster {
    let topologies: Vec<_> = MACHINES.iter().map(|m| topology(m)).collect();
    Cluster {
        inventory: DraInventory::build(&DraConfig::default(), &slices, &topologies, claims),
        machines: MACHINES.to_vec(),
    }
}

/// The three recorded machines; `claims` are every claim in the cluster.
fn cluster(claims: &[ResourceClaim]) -> Cluster {
    cluster_with(MACHINES.iter().map(|m| slice(m)).collect(), claims)
}

impl Cluster {
    /// The pod (using `uses` of `claims`) placed on `node`.
    fn fit(
        &self,
        node: &str,
        uses: &[&str],
        claims: &[ResourceClaim],
        annotations: serde_json::Value,
    ) -> Result<DraFit, NodeReason> {
        let pod = pod("trainer", uses, annotations);
        let dra = DraPod::from_pod(
            &pod,
            |ns, name| {
                claims.iter().find(|c| {
                    c.metadata.namespace.as_deref() == Some(ns)
                        && c.metadata.name.as_deref() == Some(name)
                })
            },
            &classes(),
        )
        .expect("the claims are read");
        let m = self
            .machines
            .iter()
            .find(|m| m.node == node)
            .expect("a machine");
        let shape = NodeShape::from_spec(&topology_spec(m)).expect("a shape");
        let request =
            SetRequest::from_gpu_request(&GpuRequest::from_pod(&pod).expect("annotations"));
        dra.fit(&self.inventory, node, Some(&shape), &request)
    }
}

fn devices(fit: &DraFit, claim: usize) -> Vec<(String, String)> {
    fit.claims[claim]
        .devices
        .iter()
        .map(|d| (d.request.clone(), d.device.device.clone()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn all_pairs_nvlink(m: &Machine, gpus: &[u32]) -> bool {
    let shape = NodeShape::from_spec(&topology_spec(m)).expect("a shape");
    let mask = gpus.iter().fold(0u32, |acc, g| acc | 1 << g);
    matches!(shape.all_to_all_bottleneck(mask), Some(LinkClass::Nv(_)))
}

#[test]
fn devices_are_placed_on_the_topology_by_uuid() {
    let c = cluster(&[]);
    let node = c.inventory.node("dgx1-v100").expect("published");
    assert_eq!(node.mapping, GpuMapping::Uuid);
    let placed: Vec<(String, Option<u32>)> = node
        .devices
        .iter()
        .map(|d| (d.id.device.clone(), d.gpu))
        .collect();
    assert_eq!(placed.len(), 8);
    assert!(
        placed
            .iter()
            .all(|(name, gpu)| *name == format!("gpu-{}", gpu.expect("placed")))
    );
    assert_eq!(
        c.inventory.node("dgx-a100").map(|n| n.mapping),
        Some(GpuMapping::Uuid)
    );
}

#[test]
fn a_topology_without_uuids_maps_by_index_and_says_so() {
    let c = cluster(&[]);
    let node = c.inventory.node("rtx4090-pcie").expect("published");
    assert_eq!(node.mapping, GpuMapping::Index);
    assert!(node.devices.iter().all(|d| d.gpu.is_some()));
    assert!(c.inventory.warnings.contains(&DraWarning::IndexFallback {
        node: "rtx4090-pcie".into()
    }));
    // Two GPUs on the PCIe box: a PHB pair on one socket.
    let claims = [claim("pair", json!({"requests": [gpus("gpus", 2)]}))];
    let fit = c
        .fit("rtx4090-pcie", &["pair"], &claims, json!({}))
        .expect("fits");
    assert_eq!(fit.pick.bottleneck, Some(LinkClass::Phb));
    assert_eq!(fit.pick.numa_nodes, 1);
}

#[test]
fn a_device_the_topology_does_not_know_is_named_and_never_allocated() {
    let mut s = slice_json(&DGX1_V100);
    s["spec"]["devices"][0]["attributes"]["uuid"] = json!({"string": "GPU-not-on-this-node"});
    let c = cluster_with(vec![serde_json::from_value(s).expect("a slice")], &[]);
    let unplaced: Vec<String> = c
        .inventory
        .warnings
        .iter()
        .filter_map(|w| match w {
            DraWarning::UnplacedDevice { device, reason, .. } => {
                Some(format!("{device}: {reason}"))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        unplaced,
        [
            "gpu.nvidia.com/dgx1-v100/gpu-0: uuid GPU-not-on-this-node is not in the node's GpuTopology"
        ]
    );
    let claims = [claim("eight", json!({"requests": [gpus("gpus", 8)]}))];
    let err = c
        .fit("dgx1-v100", &["eight"], &claims, json!({}))
        .expect_err("7 usable");
    assert!(
        matches!(
            err,
            NodeReason::TooFewDevices {
                matching: 8,
                unplaced: 1,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn four_gpus_on_a_dgx1_are_an_nvlink_quad() {
    let c = cluster(&[]);
    let claims = [claim("quad", json!({"requests": [gpus("gpus", 4)]}))];
    let fit = c
        .fit("dgx1-v100", &["quad"], &claims, json!({}))
        .expect("fits");
    assert_eq!(fit.gpus(), [0, 1, 2, 3]);
    assert!(all_pairs_nvlink(&DGX1_V100, &fit.gpus()));
    assert_eq!(
        devices(&fit, 0),
        pairs(&[
            ("gpus", "gpu-0"),
            ("gpus", "gpu-1"),
            ("gpus", "gpu-2"),
            ("gpus", "gpu-3")
        ])
    );
    let written =
        serde_json::to_value(fit.claims[0].allocation.as_ref().expect("to write")).expect("json");
    assert_eq!(
        written,
        json!({
            "devices": {"results": [
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "dgx1-v100", "device": "gpu-0"},
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "dgx1-v100", "device": "gpu-1"},
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "dgx1-v100", "device": "gpu-2"},
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "dgx1-v100", "device": "gpu-3"},
            ]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["dgx1-v100"]}]}]},
        })
    );
}

#[test]
fn a_busy_device_is_excluded_and_the_other_quad_is_taken() {
    let other = allocated(
        claim("other", json!({"requests": [gpus("gpus", 1)]})),
        "dgx1-v100",
        &[("gpus", "gpu-0")],
    );
    let c = cluster(std::slice::from_ref(&other));
    let claims = [claim("quad", json!({"requests": [gpus("gpus", 4)]})), other];
    let fit = c
        .fit("dgx1-v100", &["quad"], &claims, json!({}))
        .expect("fits");
    assert_eq!(fit.gpus(), [4, 5, 6, 7]);
    assert!(all_pairs_nvlink(&DGX1_V100, &fit.gpus()));
}

#[test]
fn allocation_mode_all_takes_every_matching_gpu() {
    let c = cluster(&[]);
    let all = json!({"requests": [{"name": "all", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}]});
    let claims = [claim("node", all)];
    let fit = c
        .fit("dgx-a100", &["node"], &claims, json!({}))
        .expect("fits");
    assert_eq!(fit.gpus(), (0..8).collect::<Vec<_>>());
    assert_eq!(fit.claims[0].devices.len(), 8);
    assert_eq!(fit.pick.bottleneck, Some(LinkClass::Nv(12)));
}

#[test]
fn a_cel_selector_on_product_and_memory() {
    let c = cluster(&[]);
    let big_a100 = json!({"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "count": 2,
        "selectors": [{"cel": {"expression":
            "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100') && device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}}]}}]});
    let claims = [claim("big", big_a100)];
    let fit = c
        .fit("dgx-a100", &["big"], &claims, json!({}))
        .expect("an A100 with 40Gi");
    assert_eq!(fit.gpus().len(), 2);
    let err = c
        .fit("dgx1-v100", &["big"], &claims, json!({}))
        .expect_err("no A100 here");
    assert_eq!(
        err.to_string(),
        "default/big request gpus wants 2 device(s); 0 match its class and selectors here"
    );
    assert_eq!(
        err.summary(),
        "too few free devices for default/big request gpus"
    );
}

#[test]
fn semver_attributes_compare_as_versions() {
    let c = cluster(&[]);
    let recent = json!({"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "count": 1,
        "selectors": [{"cel": {"expression":
            "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0')) && device.attributes['gpu.nvidia.com'].cudaComputeCapability.major() >= 8"}}]}}]});
    let claims = [claim("recent", recent)];
    assert!(c.fit("dgx-a100", &["recent"], &claims, json!({})).is_ok());
    assert!(matches!(
        c.fit("dgx1-v100", &["recent"], &claims, json!({})),
        Err(NodeReason::TooFewDevices { matching: 0, .. })
    ));
}

#[test]
fn match_attribute_keeps_a_pair_on_one_pcie_root() {
    // GPU 0 busy: the pair must not straddle roots; on the DGX A100 each
    // NUMA node's two GPUs share a root.
    let other = allocated(
        claim("other", json!({"requests": [gpus("gpus", 1)]})),
        "dgx-a100",
        &[("gpus", "gpu-0")],
    );
    let c = cluster(std::slice::from_ref(&other));
    let pair = json!({"requests": [gpus("gpus", 2)],
        "constraints": [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]});
    let claims = [claim("pair", pair), other];
    let fit = c
        .fit("dgx-a100", &["pair"], &claims, json!({}))
        .expect("fits");
    let node = c.inventory.node("dgx-a100").expect("published");
    let roots: Vec<_> = fit.claims[0]
        .devices
        .iter()
        .map(|d| {
            node.device(&d.device)
                .and_then(|d| d.attribute("resource.kubernetes.io/pcieRoot"))
                .cloned()
        })
        .collect();
    assert_eq!(roots.len(), 2);
    assert_eq!(roots[0], roots[1]);
    assert!(!fit.gpus().contains(&0));
    assert_eq!(fit.pick.numa_nodes, 1);
}

#[test]
fn match_attribute_on_product_name_across_two_requests() {
    let c = cluster(&[]);
    let two = json!({"requests": [gpus("a", 1), gpus("b", 1)],
        "constraints": [{"matchAttribute": "gpu.nvidia.com/productName", "requests": ["a", "b"]}]});
    let claims = [claim("same-model", two)];
    let fit = c
        .fit("dgx1-v100", &["same-model"], &claims, json!({}))
        .expect("fits");
    // One pair for both requests: the best pair of a DGX-1 is a doubled
    // NVLink (0-3), not the lowest indices.
    assert_eq!(fit.pick.bottleneck, Some(LinkClass::Nv(2)));
    assert_eq!(devices(&fit, 0), pairs(&[("a", "gpu-0"), ("b", "gpu-3")]));
}

#[test]
fn a_constraint_on_an_attribute_no_device_has_is_refused_with_the_field() {
    let c = cluster(&[]);
    let odd = json!({"requests": [gpus("gpus", 2)],
        "constraints": [{"matchAttribute": "gpu.nvidia.com/nvlinkDomain"}]});
    let claims = [claim("odd", odd)];
    let err = c
        .fit("dgx-a100", &["odd"], &claims, json!({}))
        .expect_err("refused");
    assert_eq!(
        err,
        NodeReason::ConstraintAttributeMissing {
            claim: "default/odd".into(),
            field: "spec.devices.constraints[0].matchAttribute".into(),
            attribute: "gpu.nvidia.com/nvlinkDomain".into(),
        }
    );
}

#[test]
fn two_requests_in_one_claim_are_one_gpu_set() {
    // Request b must come from the second socket's root: the whole set of
    // four is still the best NVLink quad that can hold it (4-7).
    let c = cluster(&[]);
    let split = json!({"requests": [
        gpus("a", 2),
        {"name": "b", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2,
            "selectors": [{"cel": {"expression":
                "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:80'"}}]}},
    ]});
    let claims = [claim("split", split)];
    let fit = c
        .fit("dgx1-v100", &["split"], &claims, json!({}))
        .expect("fits");
    assert_eq!(fit.gpus(), [4, 5, 6, 7]);
    assert!(all_pairs_nvlink(&DGX1_V100, &fit.gpus()));
    assert_eq!(
        devices(&fit, 0),
        pairs(&[
            ("a", "gpu-4"),
            ("a", "gpu-5"),
            ("b", "gpu-6"),
            ("b", "gpu-7")
        ])
    );
}

#[test]
fn two_claims_in_one_pod_are_one_gpu_set() {
    let c = cluster(&[]);
    let claims = [
        claim("first", json!({"requests": [gpus("gpus", 2)]})),
        claim("second", json!({"requests": [gpus("gpus", 2)]})),
    ];
    let fit = c
        .fit("dgx1-v100", &["first", "second"], &claims, json!({}))
        .expect("fits");
    assert_eq!(fit.gpus(), [0, 1, 2, 3]);
    assert_eq!(
        devices(&fit, 0),
        pairs(&[("gpus", "gpu-0"), ("gpus", "gpu-1")])
    );
    assert_eq!(
        devices(&fit, 1),
        pairs(&[("gpus", "gpu-2"), ("gpus", "gpu-3")])
    );
    assert_eq!(fit.to_write().count(), 2);
}

#[test]
fn an_allocated_shared_claim_is_honoured() {
    let shared = allocated(
        claim("shared", json!({"requests": [gpus("gpus", 2)]})),
        "dgx1-v100",
        &[("gpus", "gpu-4"), ("gpus", "gpu-5")],
    );
    let c = cluster(std::slice::from_ref(&shared));
    let claims = [
        shared.clone(),
        claim("more", json!({"requests": [gpus("gpus", 2)]})),
    ];

    let err = c
        .fit("dgx-a100", &["shared"], &claims, json!({}))
        .expect_err("elsewhere");
    assert_eq!(
        err,
        NodeReason::ClaimElsewhere {
            claim: "default/shared".into(),
            node: "dgx1-v100".into()
        }
    );

    let fit = c
        .fit("dgx1-v100", &["shared"], &claims, json!({}))
        .expect("there");
    assert_eq!(fit.gpus(), [4, 5]);
    assert_eq!(
        fit.to_write().count(),
        0,
        "nothing to allocate, only reservedFor"
    );

    // With a second claim, the pod's four GPUs are the quad around the fixed pair.
    let fit = c
        .fit("dgx1-v100", &["shared", "more"], &claims, json!({}))
        .expect("there");
    assert_eq!(fit.gpus(), [4, 5, 6, 7]);
    assert_eq!(fit.fixed, 0b0011_0000);
    assert_eq!(
        devices(&fit, 1),
        pairs(&[("gpus", "gpu-6"), ("gpus", "gpu-7")])
    );
}

#[test]
fn annotations_still_apply_min_nvlink_level() {
    let c = cluster(&[]);
    let claims = [claim("quad", json!({"requests": [gpus("gpus", 4)]}))];
    let err = c
        .fit(
            "dgx1-v100",
            &["quad"],
            &claims,
            json!({"gputopo.dev/min-nvlink-level": "2"}),
        )
        .expect_err("no NV2 quad on a DGX-1");
    assert!(matches!(err, NodeReason::NoGpuSet(_)), "{err}");
    assert_eq!(err.summary(), "no 4-GPU set with NV2");
}

#[test]
fn class_configuration_is_passed_through() {
    let c = cluster(&[]);
    let claims = [claim(
        "ts",
        json!({"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu-timesliced", "count": 1}}]}),
    )];
    let fit = c
        .fit("dgx-a100", &["ts"], &claims, json!({}))
        .expect("fits");
    let written =
        serde_json::to_value(fit.claims[0].allocation.as_ref().expect("to write")).expect("json");
    assert_eq!(
        written["devices"]["config"],
        json!([{"source": "FromClass", "opaque": {"driver": "gpu.nvidia.com", "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing"}}}}])
    );
}

#[test]
fn a_missing_attribute_without_has_is_a_runtime_error_as_upstream() {
    let c = cluster(&[]);
    let claims = [claim(
        "odd",
        json!({"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu.nvidia.com",
        "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].nvlinkDomain == 1"}}]}}]}),
    )];
    let err = c
        .fit("dgx-a100", &["odd"], &claims, json!({}))
        .expect_err("runtime error");
    assert!(
        matches!(&err, NodeReason::CelRuntime { field, .. }
        if field == "spec.devices.requests[0].exactly.selectors[0].cel.expression"),
        "{err}"
    );
    // With has(), a device lacking it simply does not match; a missing domain is an empty map.
    let claims = [claim(
        "odd",
        json!({"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu.nvidia.com",
        "selectors": [{"cel": {"expression":
            "!has(device.attributes['gpu.nvidia.com'].nvlinkDomain) && !has(device.attributes['dra.example.com'].x)"}}]}}]}),
    )];
    assert!(c.fit("dgx-a100", &["odd"], &claims, json!({})).is_ok());
}

#[test]
fn an_incomplete_pool_is_not_used() {
    let mut s = slice_json(&DGX_A100);
    s["spec"]["pool"]["resourceSliceCount"] = json!(2);
    let c = cluster_with(vec![serde_json::from_value(s).expect("a slice")], &[]);
    assert!(
        c.inventory
            .warnings
            .iter()
            .any(|w| matches!(w, DraWarning::UnusablePool { .. }))
    );
    let claims = [claim("one", json!({"requests": [gpus("gpus", 1)]}))];
    let err = c
        .fit("dgx-a100", &["one"], &claims, json!({}))
        .expect_err("no devices");
    assert!(matches!(err, NodeReason::NoDevices), "{err}");
}

#[test]
fn only_the_newest_generation_of_a_pool_counts() {
    let mut old = slice_json(&DGX_A100);
    old["metadata"]["name"] = json!("old");
    old["spec"]["devices"] = json!([]);
    let mut new = slice_json(&DGX_A100);
    new["spec"]["pool"]["generation"] = json!(2);
    let c = cluster_with(
        vec![
            serde_json::from_value(old).expect("a slice"),
            serde_json::from_value(new).expect("a slice"),
        ],
        &[],
    );
    assert_eq!(
        c.inventory.node("dgx-a100").map(|n| n.devices.len()),
        Some(8)
    );
}

#[test]
fn network_attached_slices_are_not_placed() {
    let mut s = slice_json(&DGX_A100);
    s["spec"]
        .as_object_mut()
        .expect("an object")
        .remove("nodeName");
    s["spec"]["allNodes"] = json!(true);
    let c = cluster_with(vec![serde_json::from_value(s).expect("a slice")], &[]);
    assert!(c.inventory.node("dgx-a100").is_none());
    assert!(c.inventory.warnings.iter().any(|w| matches!(w,
        DraWarning::UnsupportedSlice { reason, .. } if reason.starts_with("allNodes"))));
}

#[test]
fn the_constrained_pick_without_constraints_is_the_pick() {
    for m in MACHINES {
        let shape = NodeShape::from_spec(&topology_spec(m)).expect("a shape");
        for k in 1..=4u32 {
            for collective in [
                gputopo_api::Collective::Ring,
                gputopo_api::Collective::AllToAll,
            ] {
                let request = SetRequest::new(k, collective);
                for free in 0u32..256 {
                    let plain = shape.pick(free, &request).ok().map(|p| (p.gpus, p.score));
                    let constrained = shape
                        .pick_constrained(free, 0, &request, &mut |_| true)
                        .ok()
                        .flatten()
                        .map(|p| (p.gpus, p.score));
                    assert_eq!(plain, constrained, "{} k={k} free={free:#b}", m.node);
                }
            }
        }
    }
}
