//! Every driver's claims: a pod's IMEX channel (NVIDIA's ComputeDomain
//! driver) and RDMA NICs (dranet) allocated in the same decision as its
//! GPUs, `matchAttribute` across drivers, NICs closest to the chosen GPUs,
//! and pods that ask no GPU at all. Slices as the drivers' sources build
//! them (`topology::dra_slice`), for the recorded DGX A100.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::*;
use gputopo_api::GpuRequest;
use gputopo_api::k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use gputopo_scheduler_core::dra::{
    DeviceId, DraConfig, DraFit, DraInventory, DraPod, NodeReason, PCIE_ROOT,
};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use serde_json::json;

fn inventory(slices: &[ResourceSlice], claims: &[ResourceClaim]) -> DraInventory {
    let topologies: Vec<_> = MACHINES.iter().map(|m| topology(m)).collect();
    DraInventory::build(&DraConfig::default(), slices, &topologies, claims)
}

fn dgx_inventory(claims: &[ResourceClaim]) -> DraInventory {
    inventory(&all_slices(&DGX_A100), claims)
}

fn read_pod(uses: &[&str], claims: &[ResourceClaim]) -> DraPod {
    let pod = pod("trainer", uses, json!({}));
    DraPod::from_pod(
        &pod,
        |ns, name| {
            claims.iter().find(|c| {
                c.metadata.namespace.as_deref() == Some(ns)
                    && c.metadata.name.as_deref() == Some(name)
            })
        },
        &classes(),
    )
    .expect("the claims are read")
}

fn fit_on(
    inv: &DraInventory,
    node: &str,
    uses: &[&str],
    claims: &[ResourceClaim],
) -> Result<DraFit, NodeReason> {
    let dra = read_pod(uses, claims);
    let shape = MACHINES
        .iter()
        .find(|m| m.node == node)
        .map(|m| NodeShape::from_spec(&topology_spec(m)).expect("a shape"));
    let request = SetRequest::from_gpu_request(&GpuRequest::default());
    dra.fit(inv, node, shape.as_ref(), &request)
}

/// The claim's devices with the value of `attribute` on each.
fn attribute_of(inv: &DraInventory, fit: &DraFit, claim: usize, attribute: &str) -> Vec<String> {
    fit.claims[claim]
        .devices
        .iter()
        .map(|d| {
            let (_, device) = inv.find(&d.device).expect("a published device");
            device
                .attribute(attribute)
                .and_then(|a| a.string.clone())
                .unwrap_or_default()
        })
        .collect()
}

/// `claim` allocated `device` of `driver` on `node`'s pool.
fn allocated_to(mut claim: ResourceClaim, driver: &str, node: &str, device: &str) -> ResourceClaim {
    claim.status = Some(
        serde_json::from_value(json!({"allocation": {
            "devices": {"results": [{"request": "r", "driver": driver, "pool": node, "device": device}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        }}))
        .expect("a valid status"),
    );
    claim
}

fn id(driver: &str, device: &str) -> DeviceId {
    DeviceId {
        driver: driver.into(),
        pool: "dgx-a100".into(),
        device: device.into(),
    }
}

#[test]
fn gpus_nics_on_their_pcie_root_and_an_imex_channel_are_allocated_together() {
    let claims = [
        claim(
            "train",
            json!({
                "requests": [gpus("gpus", 2), nics("nics", 2)],
                "constraints": [{"matchAttribute": PCIE_ROOT}],
            }),
        ),
        claim("imex", json!({"requests": [channel("channel")]})),
    ];
    let inv = dgx_inventory(&[]);
    let fit = fit_on(&inv, "dgx-a100", &["train", "imex"], &claims).expect("it fits");

    let train = &fit.claims[0];
    let kinds: Vec<(&str, &str)> = train
        .devices
        .iter()
        .map(|d| (d.request.as_str(), d.device.driver.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("gpus", "gpu.nvidia.com"),
            ("gpus", "gpu.nvidia.com"),
            ("nics", "dra.net"),
            ("nics", "dra.net")
        ]
    );
    let roots = attribute_of(&inv, &fit, 0, PCIE_ROOT);
    assert!(
        roots.iter().all(|r| !r.is_empty() && *r == roots[0]),
        "every device of the claim on one PCIe root: {roots:?}"
    );
    assert_eq!(fit.gpus().len(), 2, "the NICs are not GPUs");

    let imex = &fit.claims[1];
    assert_eq!(
        imex.devices
            .iter()
            .map(|d| d.device.clone())
            .collect::<Vec<_>>(),
        [id("compute-domain.nvidia.com", "channel-0")]
    );
    let written = imex.allocation.as_ref().expect("written");
    let results = written
        .devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .expect("results");
    assert_eq!(results[0].request, "channel");
    assert_eq!(results[0].driver, "compute-domain.nvidia.com");
    assert!(written.node_selector.is_some(), "pinned to the node");
}

#[test]
fn without_a_constraint_a_nic_goes_to_the_switch_of_the_chosen_gpus() {
    // GPUs 0 and 1 are taken, so the pair lands elsewhere; first fit would
    // give mlx5_0 (GPU 0's switch), gputopo a NIC on the new pair's switch.
    let busy = allocated_to(
        claim("other", json!({"requests": [gpus("r", 2)]})),
        "gpu.nvidia.com",
        "dgx-a100",
        "gpu-0",
    );
    let mut busy2 = allocated_to(
        claim("other2", json!({"requests": [gpus("r", 1)]})),
        "gpu.nvidia.com",
        "dgx-a100",
        "gpu-1",
    );
    busy2.metadata.name = Some("other2".into());
    let claims = [
        claim("pair", json!({"requests": [gpus("gpus", 2)]})),
        claim("net", json!({"requests": [nics("nic", 1)]})),
    ];
    let inv = dgx_inventory(&[busy, busy2]);
    let fit = fit_on(&inv, "dgx-a100", &["pair", "net"], &claims).expect("it fits");
    let gpus = fit.gpus();
    assert!(!gpus.contains(&0) && !gpus.contains(&1), "{gpus:?}");
    let gpu_roots = attribute_of(&inv, &fit, 0, PCIE_ROOT);
    let nic_root = attribute_of(&inv, &fit, 1, PCIE_ROOT);
    assert!(
        gpu_roots.contains(&nic_root[0]),
        "NIC on root {nic_root:?}, GPUs {gpus:?} on {gpu_roots:?}"
    );
}

#[test]
fn the_channel_is_one_per_node_so_a_second_pod_is_refused_naming_it() {
    let taken = allocated_to(
        claim("first", json!({"requests": [channel("r")]})),
        "compute-domain.nvidia.com",
        "dgx-a100",
        "channel-0",
    );
    let claims = [
        claim("gpu", json!({"requests": [gpus("gpus", 1)]})),
        claim("imex", json!({"requests": [channel("channel")]})),
    ];
    let inv = dgx_inventory(&[taken]);
    let err = fit_on(&inv, "dgx-a100", &["gpu", "imex"], &claims).expect_err("no channel");
    match &err {
        NodeReason::TooFewDevices {
            claim,
            request,
            matching,
            busy,
            ..
        } => {
            assert_eq!(
                (claim.as_str(), request.as_str()),
                ("default/imex", "channel")
            );
            assert_eq!((*matching, *busy), (1, 1));
        }
        other => panic!("{other}"),
    }
    assert!(
        err.to_string().contains("1 allocated to other claims"),
        "{err}"
    );
}

#[test]
fn a_pod_asking_only_a_channel_fits_a_node_without_gpus_and_counts_no_gpu() {
    let cpu_node: ResourceSlice = serde_json::from_value(
        gputopo_topology::dra_slice::compute_domain_resource_slice("cpu-1"),
    )
    .expect("a slice");
    let inv = inventory(&[cpu_node], &[]);
    let claims = [claim("imex", json!({"requests": [channel("channel")]}))];
    let dra = read_pod(&["imex"], &claims);
    assert_eq!(dra.counted_gpus(&inv), 0);
    let request = SetRequest::from_gpu_request(&GpuRequest::default());
    let fit = dra.fit(&inv, "cpu-1", None, &request).expect("it fits");
    assert!(fit.gpus().is_empty());
    assert_eq!(fit.claims[0].devices[0].device.device, "channel-0");
    assert!(
        inv.warnings.is_empty(),
        "other drivers' devices are not GPUs left unplaced: {:?}",
        inv.warnings
    );
}

#[test]
fn only_requests_whose_class_selects_gpus_count_as_gpus() {
    let claims = [
        claim(
            "train",
            json!({"requests": [gpus("gpus", 2), nics("nics", 2)]}),
        ),
        claim("imex", json!({"requests": [channel("channel")]})),
    ];
    let dra = read_pod(&["train", "imex"], &claims);
    assert_eq!(dra.counted_gpus(&dgx_inventory(&[])), 2);
}

#[test]
fn a_pcie_root_no_free_nic_shares_with_free_gpus_refuses_the_node() {
    // Every NIC that shares a root with a GPU is taken; the storage NICs
    // (mlx5_4, 5, 10, 11) sit on roots of their own.
    let nic_slice = nic_slice(&DGX_A100).expect("NICs");
    let busy: Vec<ResourceClaim> = nic_slice
        .spec
        .devices
        .iter()
        .flatten()
        .filter(|d| {
            let name = d
                .attributes
                .as_ref()
                .and_then(|a| a.get("dra.net/rdmaDevice"));
            let name = name.and_then(|a| a.string.as_deref()).unwrap_or_default();
            !["mlx5_4", "mlx5_5", "mlx5_10", "mlx5_11"].contains(&name)
        })
        .map(|d| {
            let mut c = allocated_to(
                claim("x", json!({"requests": [nics("r", 1)]})),
                "dra.net",
                "dgx-a100",
                &d.name,
            );
            c.metadata.name = Some(format!("held-{}", d.name));
            c
        })
        .collect();
    assert_eq!(busy.len(), 8);
    let claims = [claim(
        "train",
        json!({
            "requests": [gpus("gpus", 1), nics("nics", 1)],
            "constraints": [{"matchAttribute": PCIE_ROOT}],
        }),
    )];
    let inv = dgx_inventory(&busy);
    let err = fit_on(&inv, "dgx-a100", &["train"], &claims).expect_err("no shared root");
    assert!(
        matches!(&err, NodeReason::ConstraintUnsatisfiable { attribute, .. } if attribute == PCIE_ROOT),
        "{err}"
    );

    // Without the constraint a storage NIC will do.
    let loose = [claim(
        "train",
        json!({"requests": [gpus("gpus", 1), nics("nics", 1)]}),
    )];
    let fit = fit_on(&inv, "dgx-a100", &["train"], &loose).expect("it fits");
    assert_eq!(fit.claims[0].devices.len(), 2);
}

#[test]
fn a_shared_channel_claim_allocated_on_another_node_pins_the_pod_there() {
    let shared = allocated_to(
        claim("imex", json!({"requests": [channel("channel")]})),
        "compute-domain.nvidia.com",
        "dgx1-v100",
        "channel-0",
    );
    let mut slices = all_slices(&DGX_A100);
    slices.extend(all_slices(&DGX1_V100));
    let inv = inventory(&slices, std::slice::from_ref(&shared));
    let err =
        fit_on(&inv, "dgx-a100", &["imex"], std::slice::from_ref(&shared)).expect_err("elsewhere");
    assert_eq!(
        err,
        NodeReason::ClaimElsewhere {
            claim: "default/imex".into(),
            node: "dgx1-v100".into()
        }
    );
    let fit =
        fit_on(&inv, "dgx1-v100", &["imex"], std::slice::from_ref(&shared)).expect("its own node");
    assert!(fit.to_write().next().is_none(), "nothing to allocate");
}
