//! A pod with claims judged node by node ([`DraJudge`]) and explained
//! ([`explain_claims`]): the explanation's first row is the node
//! [`schedule_claims`] picks, feasible rows name the devices, and a node
//! whose devices cannot hold the claims says why.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::*;
use gputopo_api::k8s_openapi::api::core::v1::Node;
use gputopo_api::k8s_openapi::api::resource::v1::ResourceClaim;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::{DraConfig, DraInventory, DraPod, NodeReason, hold_snapshot};
use gputopo_scheduler_core::dra_schedule::{
    DraDecision, DraJudge, DraRejection, explain_claims, review_allocation, schedule_claims,
};
use gputopo_scheduler_core::explain::Verdict;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::schedule::Decision;
use gputopo_scheduler_core::snapshot::from_k8s::node_input;
use gputopo_scheduler_core::snapshot::{NodeId, Snapshot, SnapshotBuilder};
use serde_json::json;

/// A node whose GPUs only DRA publishes (no `nvidia.com/gpu` allocatable).
fn dra_node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "128", "memory": "1Ti", "pods": "110"}}
    }))
    .expect("a node")
}

struct World {
    snapshot: Snapshot,
    inventory: DraInventory,
    claims: Vec<ResourceClaim>,
    config: SchedulerConfig,
}

/// The three recorded machines as DRA nodes; `claims` every claim there is.
fn world(claims: Vec<ResourceClaim>) -> World {
    let config = SchedulerConfig::default();
    let topologies: Vec<_> = MACHINES.iter().map(|m| topology(m)).collect();
    let trust = ReadingTrust::at("2026-01-01T00:10:00Z".parse().expect("a time"));
    let mut builder = SnapshotBuilder::new(&config);
    for (m, t) in MACHINES.iter().zip(&topologies) {
        builder.node(node_input(&dra_node(m.node), Some(t), trust).expect("a node input"));
    }
    let snapshot = builder.build().expect("a snapshot");
    let slices: Vec<_> = MACHINES.iter().map(|m| slice(m)).collect();
    let mut inventory = DraInventory::build(&DraConfig::default(), &slices, &topologies, &claims);
    hold_snapshot(&mut inventory, &snapshot);
    World {
        snapshot,
        inventory,
        claims,
        config,
    }
}

impl World {
    /// The pod using `uses` of the world's claims, read.
    fn pod(&self, uses: &[&str]) -> (PendingPod, DraPod) {
        let pod = pod("trainer", uses, json!({}));
        let dra = DraPod::from_pod(
            &pod,
            |ns, name| {
                self.claims.iter().find(|c| {
                    c.metadata.namespace.as_deref() == Some(ns)
                        && c.metadata.name.as_deref() == Some(name)
                })
            },
            &classes(),
        )
        .expect("the claims are read");
        (PendingPod::from_k8s(&pod).expect("a pod"), dra)
    }
}

#[test]
fn the_explanation_leads_with_the_decision_and_names_the_devices() {
    let w = world(vec![claim("quad", json!({"requests": [gpus("gpus", 4)]}))]);
    let (pod, dra) = w.pod(&["quad"]);
    let DraDecision::Placed(placed) =
        schedule_claims(&w.snapshot, &w.inventory, &dra, &pod, &w.config)
    else {
        panic!("four GPUs fit")
    };
    let e = explain_claims(&w.snapshot, &w.inventory, &dra, &pod, &w.config);
    assert_eq!(e.pod, "default/trainer");
    let Decision::Placed(p) = &e.decision else {
        panic!("placed: {:?}", e.decision)
    };
    assert_eq!(*p, placed.placement, "explain and schedule agree");
    assert_eq!(e.rows.len(), 3, "{:#?}", e.rows);
    let chosen = &e.rows[0];
    assert_eq!(chosen.verdict, Verdict::Chosen);
    assert_eq!(chosen.node, placed.placement.node);
    assert_eq!(chosen.gpus, placed.placement.gpus);
    let device = format!(
        "quad: gpu.nvidia.com/{}/gpu-{}",
        chosen.node, chosen.gpus[0]
    );
    assert!(chosen.reason.contains(&device), "{}", chosen.reason);
    let gpus: Vec<u32> = chosen.devices.iter().filter_map(|d| d.gpu).collect();
    assert_eq!(gpus, chosen.gpus, "{:#?}", chosen.devices);
    for d in &chosen.devices {
        assert_eq!(
            (d.claim.as_str(), d.request.as_str()),
            ("default/quad", "gpus")
        );
        let gpu = d.gpu.expect("on the topology");
        assert_eq!(
            d.device,
            format!("gpu.nvidia.com/{}/gpu-{gpu}", chosen.node)
        );
    }
    assert!(
        e.rows[1..].iter().all(|r| r.verdict == Verdict::Feasible),
        "{:#?}",
        e.rows
    );
    // Best first: no later row has a wider bottleneck than the chosen one.
    assert!(
        e.rows[1..]
            .iter()
            .all(|r| r.bottleneck <= chosen.bottleneck),
        "{:#?}",
        e.rows
    );
}

#[test]
fn a_node_whose_devices_are_taken_is_rejected_with_the_devices_reason() {
    let taken: Vec<(&str, String)> = (0..8).map(|g| ("gpus", format!("gpu-{g}"))).collect();
    let taken: Vec<(&str, &str)> = taken.iter().map(|(r, d)| (*r, d.as_str())).collect();
    let elsewhere = allocated(
        claim("elsewhere", json!({"requests": [gpus("gpus", 8)]})),
        "dgx-a100",
        &taken,
    );
    let w = world(vec![
        elsewhere,
        claim("quad", json!({"requests": [gpus("gpus", 4)]})),
    ]);
    let (pod, dra) = w.pod(&["quad"]);
    let e = explain_claims(&w.snapshot, &w.inventory, &dra, &pod, &w.config);
    let a100 = e
        .rows
        .iter()
        .find(|r| r.node == "dgx-a100")
        .expect("a row per node");
    assert_eq!(a100.verdict, Verdict::Rejected);
    assert!(a100.gpus.is_empty());
    assert!(a100.filter_reason.is_none(), "not a node predicate");
    assert!(a100.reason.contains("quad"), "{}", a100.reason);
    let Decision::Placed(p) = &e.decision else {
        panic!("another node takes it: {:?}", e.decision)
    };
    assert_ne!(p.node, "dgx-a100");

    let judged = dra.judged(&pod, &w.inventory);
    let judge = DraJudge::new(&w.snapshot, &w.inventory, &dra, &judged, &w.config);
    let id = w.snapshot.node_id("dgx-a100").expect("the node");
    match judge.judge(id) {
        Err(r @ DraRejection::Devices(NodeReason::TooFewDevices { busy: 8, .. })) => {
            assert!(r.resolvable(), "evicting the holder frees the devices");
            assert_eq!(
                r.summaries(),
                vec!["too few free devices for default/quad request gpus"]
            );
        }
        other => panic!("too few devices, 8 busy: {other:?}"),
    }
}

#[test]
fn a_claim_no_node_holds_is_unschedulable_with_counted_reasons() {
    let w = world(vec![claim("huge", json!({"requests": [gpus("gpus", 16)]}))]);
    let (pod, dra) = w.pod(&["huge"]);
    let e = explain_claims(&w.snapshot, &w.inventory, &dra, &pod, &w.config);
    let Decision::Unschedulable(u) = &e.decision else {
        panic!("16 GPUs fit no 8-GPU node: {:?}", e.decision)
    };
    assert!(
        u.message.starts_with("0/3 nodes are available: 3 "),
        "{}",
        u.message
    );
    assert!(e.rows.iter().all(|r| r.verdict == Verdict::Rejected));
    let DraDecision::Unschedulable { message, .. } =
        schedule_claims(&w.snapshot, &w.inventory, &dra, &pod, &w.config)
    else {
        panic!("unschedulable")
    };
    assert_eq!(message, u.message, "explain and schedule agree");
}

#[test]
fn a_special_claim_is_not_served_on_a_device_plugin_node() {
    let w = world(vec![claim("pair", json!({"requests": [gpus("gpus", 2)]}))]);
    let mut plugin_node = dra_node("plugin-node");
    plugin_node
        .status
        .as_mut()
        .and_then(|s| s.allocatable.as_mut())
        .expect("allocatable")
        .insert(
            "nvidia.com/gpu".into(),
            gputopo_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity("8".into()),
        );
    let trust = ReadingTrust::at("2026-01-01T00:10:00Z".parse().expect("a time"));
    let mut builder = SnapshotBuilder::new(&w.config);
    builder.node(node_input(&plugin_node, None, trust).expect("a node input"));
    let snapshot = builder.build().expect("a snapshot");
    let (pod, dra) = w.pod(&["pair"]);
    let judged = dra.judged(&pod, &w.inventory);
    let judge = DraJudge::new(&snapshot, &w.inventory, &dra, &judged, &w.config).extended_only();
    let rejection = judge.judge(NodeId(0)).expect_err("a device plugin node");
    assert_eq!(rejection, DraRejection::DevicePluginNode);
    assert!(!rejection.resolvable());
    assert_eq!(
        rejection.summaries(),
        vec!["GPUs served by a device plugin"]
    );
}

/// `pair` allocated to `devices` of the PCIe box, as kube-scheduler's
/// first-fit allocator might; reviewed against an inventory without it.
fn review_pair(devices: &[u32]) -> Option<gputopo_scheduler_core::dra_schedule::AllocationReview> {
    let names: Vec<String> = devices.iter().map(|g| format!("gpu-{g}")).collect();
    let results: Vec<(&str, &str)> = names.iter().map(|n| ("gpus", n.as_str())).collect();
    let pair = allocated(
        claim("pair", json!({"requests": [gpus("gpus", 2)]})),
        PCIE_2SOCKET.node,
        &results,
    );
    // The inventory leaves the pod's own claim out, as at the bind.
    let w = world(Vec::new());
    let pod = pod("trainer", &["pair"], json!({}));
    let pending = PendingPod::from_k8s(&pod).expect("a pod");
    review_allocation(
        &w.snapshot,
        &w.inventory,
        &[&pair],
        &classes(),
        &pending,
        &w.config,
    )
}

#[test]
fn an_allocation_across_the_sockets_is_reviewed_against_gputopos_pair() {
    let review = review_pair(&[0, 7]).expect("GPUs 0 and 7 cross the sockets");
    assert_eq!(review.node, PCIE_2SOCKET.node);
    assert_eq!(review.allocated.gpu_indices(), vec![0, 7]);
    assert_eq!(review.allocated.numa_nodes, 2);
    assert_eq!(review.best.numa_nodes, 1, "{review:?}");
    assert!(
        review.allocated.bottleneck < review.best.bottleneck,
        "{review:?}"
    );
    let message = review.message();
    assert!(
        message.starts_with("kube-scheduler allocated GPUs 0,7 (bottleneck SYS, 2 NUMA nodes; devices pair: gpu.nvidia.com/rtx4090-pcie/gpu-0, pair: gpu.nvidia.com/rtx4090-pcie/gpu-7) on node rtx4090-pcie where gputopo would have chosen GPUs "),
        "{message}"
    );
    // gputopo's own pair, allocated, is nothing to report.
    let best = review.best.gpu_indices();
    assert_eq!(review_pair(&best), None, "{best:?}");
}

#[test]
fn one_device_is_nothing_to_review() {
    let one = allocated(
        claim("one", json!({"requests": [gpus("gpus", 1)]})),
        PCIE_2SOCKET.node,
        &[("gpus", "gpu-3")],
    );
    let w = world(Vec::new());
    let pod = pod("trainer", &["one"], json!({}));
    let pending = PendingPod::from_k8s(&pod).expect("a pod");
    assert_eq!(
        review_allocation(
            &w.snapshot,
            &w.inventory,
            &[&one],
            &classes(),
            &pending,
            &w.config
        ),
        None
    );
}

#[test]
fn preemption_may_look_only_where_evictions_could_free_the_claims_devices() {
    // Every GPU is another claim's; no node publishes a NIC.
    let names: Vec<String> = (0..8).map(|i| format!("gpu-{i}")).collect();
    let devices: Vec<(&str, &str)> = names.iter().map(|n| ("r", n.as_str())).collect();
    let mut claims: Vec<ResourceClaim> = MACHINES
        .iter()
        .map(|m| {
            let mut c = allocated(
                claim("theirs", json!({"requests": [gpus("r", 8)]})),
                m.node,
                &devices,
            );
            c.metadata.name = Some(format!("theirs-{}", m.node));
            c
        })
        .collect();
    claims.push(claim("eight", json!({"requests": [gpus("gpus", 8)]})));
    claims.push(claim(
        "nic",
        json!({"requests": [{"name": "nic", "exactly": {"deviceClassName": "dranet-rdma"}}]}),
    ));
    let w = world(claims);
    let (pinned, dra) = w.pod(&["eight"]);
    let DraDecision::Unschedulable { preemptible, .. } =
        schedule_claims(&w.snapshot, &w.inventory, &dra, &pinned, &w.config)
    else {
        panic!("the DGX-1's GPUs are taken")
    };
    assert!(
        preemptible.len() == 3,
        "evicting the holders frees eight GPUs anywhere: {preemptible:?}"
    );
    let (pod, dra) = w.pod(&["nic"]);
    let DraDecision::Unschedulable { preemptible, .. } =
        schedule_claims(&w.snapshot, &w.inventory, &dra, &pod, &w.config)
    else {
        panic!("no NIC anywhere")
    };
    assert!(
        preemptible.is_empty(),
        "no eviction makes a NIC: {preemptible:?}"
    );
    let judged = dra.judged_for_preemption(&pod, &w.inventory, preemptible);
    assert!(
        !judged
            .affinity
            .as_ref()
            .expect("restricted")
            .matches("dgx1-v100", &Default::default()),
        "preemption sees no node"
    );
}
