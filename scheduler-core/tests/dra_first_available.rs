//! `firstAvailable` (prioritized lists, GA in 1.36): the subrequests tried
//! in order on each node, the first that fits taken and named
//! `<request>/<subrequest>` in the allocation, configs following the chosen
//! subrequest's class, and nodes that give a preferred subrequest ranked
//! above nodes that give a later one (upstream's prioritized-list score),
//! before the GPU set's quality.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::*;
use gputopo_api::GpuRequest;
use gputopo_api::k8s_openapi::api::core::v1::Node;
use gputopo_api::k8s_openapi::api::resource::v1::ResourceClaim;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::{DraConfig, DraFit, DraInventory, DraPod, hold_snapshot};
use gputopo_scheduler_core::dra_schedule::{DraDecision, schedule_claims};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::snapshot::SnapshotBuilder;
use gputopo_scheduler_core::snapshot::from_k8s::node_input;
use serde_json::{Value, json};

/// Eight GPUs, or failing that two time-sliced ones (a class with a config).
fn big_or_small() -> ResourceClaim {
    claim(
        "prio",
        json!({"requests": [{"name": "gpus", "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 8},
            {"name": "small", "deviceClassName": "gpu-timesliced", "count": 2},
        ]}]}),
    )
}

/// `gpu-<i>` of `node` allocated to a claim of its own.
fn busy(node: &str, gpu: u32) -> ResourceClaim {
    let mut c = allocated(
        claim("x", json!({"requests": [gpus("r", 1)]})),
        node,
        &[("r", &format!("gpu-{gpu}"))],
    );
    c.metadata.name = Some(format!("busy-{node}-{gpu}"));
    c
}

fn read(claims: &[ResourceClaim]) -> (PendingPod, DraPod) {
    let pod = pod("trainer", &["prio"], json!({}));
    let dra = read_claims(&pod, claims, &classes());
    (PendingPod::from_k8s(&pod).expect("a pod"), dra)
}

fn fit_on(node: &str, all: &[ResourceClaim]) -> DraFit {
    let slices: Vec<_> = MACHINES.iter().map(|m| slice(m)).collect();
    let topologies: Vec<_> = MACHINES.iter().map(|m| topology(m)).collect();
    let inv = DraInventory::build(&DraConfig::default(), &slices, &topologies, all);
    let (_, dra) = read(all);
    let m = MACHINES.iter().find(|m| m.node == node).expect("a machine");
    let shape = NodeShape::from_spec(&topology_spec(m)).expect("a shape");
    let request = SetRequest::from_gpu_request(&GpuRequest::default());
    dra.fit(&inv, node, Some(&shape), &request)
        .expect("a subrequest fits")
}

fn requests(fit: &DraFit) -> Vec<String> {
    fit.claims[0]
        .devices
        .iter()
        .map(|d| d.request.clone())
        .collect()
}

fn written_config(fit: &DraFit) -> Value {
    let allocation = fit.claims[0].allocation.as_ref().expect("written");
    serde_json::to_value(&allocation.devices.as_ref().expect("devices").config).expect("json")
}

#[test]
fn the_first_subrequest_that_fits_is_taken_and_named_with_its_request() {
    let fit = fit_on("dgx-a100", &[big_or_small()]);
    assert_eq!(requests(&fit), vec!["gpus/big"; 8]);
    assert_eq!(fit.preference, 8);
    assert_eq!(
        written_config(&fit),
        Value::Null,
        "the big class has no config"
    );

    // One GPU taken: eight no longer fit, two time-sliced ones do.
    let fit = fit_on("dgx-a100", &[big_or_small(), busy("dgx-a100", 3)]);
    assert_eq!(requests(&fit), vec!["gpus/small"; 2]);
    assert_eq!(fit.preference, 7);
    let config = written_config(&fit);
    assert_eq!(config[0]["source"], "FromClass");
    assert_eq!(
        config[0]["requests"],
        Value::Null,
        "the one request's config names no request: {config}"
    );
    assert_eq!(
        config[0]["opaque"]["parameters"]["kind"], "GpuConfig",
        "the chosen subrequest's class config: {config}"
    );
}

#[test]
fn the_filter_counts_the_fewest_gpus_any_subrequest_takes() {
    let (_, dra) = read(&[big_or_small()]);
    let slices: Vec<_> = MACHINES.iter().map(|m| slice(m)).collect();
    let topologies: Vec<_> = MACHINES.iter().map(|m| topology(m)).collect();
    let inv = DraInventory::build(
        &DraConfig::default(),
        &slices,
        &topologies,
        &[] as &[ResourceClaim],
    );
    assert_eq!(dra.counted_gpus(&inv), 2);
}

fn dra_node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "128", "memory": "1Ti", "pods": "110"}}
    }))
    .expect("a node")
}

#[test]
fn a_node_giving_the_preferred_subrequest_beats_a_better_wired_one_giving_a_later() {
    // The DGX A100 has one GPU taken: only the two-GPU fallback fits there,
    // on an NV12 pair. The other 8-GPU nodes still give all eight.
    let all = [big_or_small(), busy("dgx-a100", 3)];
    let config = SchedulerConfig::default();
    let topologies: Vec<_> = MACHINES.iter().map(|m| topology(m)).collect();
    let trust = ReadingTrust::at("2026-01-01T00:10:00Z".parse().expect("a time"));
    let mut builder = SnapshotBuilder::new(&config);
    for (m, t) in MACHINES.iter().zip(&topologies) {
        builder.node(node_input(&dra_node(m.node), Some(t), trust).expect("a node input"));
    }
    let snapshot = builder.build().expect("a snapshot");
    let slices: Vec<_> = MACHINES.iter().map(|m| slice(m)).collect();
    let mut inv = DraInventory::build(&DraConfig::default(), &slices, &topologies, &all);
    hold_snapshot(&mut inv, &snapshot);
    let (pod, dra) = read(&all);
    let DraDecision::Placed(placed) = schedule_claims(&snapshot, &inv, &dra, &pod, &config) else {
        panic!("it fits somewhere")
    };
    assert_ne!(placed.placement.node, "dgx-a100");
    assert_eq!(requests(&placed.fit), vec!["gpus/big"; 8]);
}
