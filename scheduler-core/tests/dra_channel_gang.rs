//! A gang whose members each carry an IMEX channel claim, as NVIDIA's
//! ComputeDomain controller's workload template gives every pod its own:
//! a node publishes one channel (`channel-0`), so two members cannot share
//! a node even where its GPUs would hold both. The gang rule alone packs
//! two 4-GPU members on one 8-GPU node; the claims send them one per node.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::*;
use gputopo_api::GpuTopology;
use gputopo_api::k8s_openapi::api::core::v1::Node;
use gputopo_api::k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::{DraConfig, DraInventory, DraPod, hold_snapshot};
use gputopo_scheduler_core::dra_schedule::{ClaimGangDecision, schedule_claim_gang};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::snapshot::SnapshotBuilder;
use gputopo_scheduler_core::snapshot::from_k8s::node_input;
use gputopo_topology::dra_slice::{compute_domain_resource_slice, nvidia_resource_slice};
use serde_json::json;

const NODES: [&str; 2] = ["a100-a", "a100-b"];

fn dra_node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "128", "memory": "1Ti", "pods": "110"}}
    }))
    .expect("a node")
}

/// Two DGX A100s (the recorded topology under two names), every member's
/// claims, and the members read.
fn gang(with_channel: bool) -> Gang {
    let config = SchedulerConfig::default();
    let facts = gputopo_topology::dra_slice::DriverFacts::for_product(DGX_A100.product, "40Gi")
        .expect("known");
    let mut topologies = Vec::new();
    let mut slices: Vec<ResourceSlice> = Vec::new();
    let trust = ReadingTrust::at("2026-01-01T00:10:00Z".parse().expect("a time"));
    let mut builder = SnapshotBuilder::new(&config);
    for name in NODES {
        let mut spec = topology_spec(&DGX_A100);
        for g in &mut spec.gpus {
            g.uuid = Some(format!("GPU-{name}-{}", g.index));
        }
        let topo = GpuTopology::new(name, spec.clone());
        builder.node(node_input(&dra_node(name), Some(&topo), trust).expect("a node input"));
        for s in [
            nvidia_resource_slice(name, &spec, &facts),
            compute_domain_resource_slice(name),
        ] {
            slices.push(serde_json::from_value(s).expect("a slice"));
        }
        topologies.push(topo);
    }
    let snapshot = builder.build().expect("a snapshot");
    let mut inventory = DraInventory::build(
        &DraConfig::default(),
        &slices,
        &topologies,
        &[] as &[ResourceClaim],
    );
    hold_snapshot(&mut inventory, &snapshot);
    let mut members = Vec::new();
    let mut claims = Vec::new();
    for i in 0..2 {
        let gpu_claim = claim(&format!("gpus-{i}"), json!({"requests": [gpus("gpus", 4)]}));
        let imex = claim(
            &format!("imex-{i}"),
            json!({"requests": [channel("channel")]}),
        );
        let mut uses = vec![format!("gpus-{i}")];
        if with_channel {
            uses.push(format!("imex-{i}"));
        }
        let uses: Vec<&str> = uses.iter().map(String::as_str).collect();
        let p = pod(
            &format!("worker-{i}"),
            &uses,
            json!({"gputopo.dev/gang": "train", "gputopo.dev/gang-size": "2"}),
        );
        let all = [gpu_claim, imex];
        let dra = DraPod::from_pod(
            &p,
            |_, name| {
                all.iter()
                    .find(|c| c.metadata.name.as_deref() == Some(name))
            },
            &classes(),
        )
        .expect("read");
        members.push(PendingPod::from_k8s(&p).expect("a pod"));
        claims.push(dra);
    }
    Gang {
        members,
        claims,
        inventory,
        config,
        snapshot,
    }
}

struct Gang {
    members: Vec<PendingPod>,
    claims: Vec<DraPod>,
    inventory: DraInventory,
    config: SchedulerConfig,
    snapshot: gputopo_scheduler_core::snapshot::Snapshot,
}

impl Gang {
    fn nodes(&self) -> Vec<String> {
        let decision = schedule_claim_gang(
            &self.snapshot,
            &self.inventory,
            &self.members,
            &self.claims,
            &self.config,
        );
        let ClaimGangDecision::Placed(placed) = decision else {
            panic!("the gang fits: {decision:?}")
        };
        for p in &placed {
            assert_eq!(p.fit.gpus().len(), 4);
        }
        placed.iter().map(|p| p.placement.node.clone()).collect()
    }
}

#[test]
fn without_channels_the_gang_rule_packs_both_members_on_one_node() {
    let nodes = gang(false).nodes();
    assert_eq!(nodes[0], nodes[1], "one 8-GPU node holds both: {nodes:?}");
}

#[test]
fn members_with_their_own_channel_claims_go_one_per_node() {
    let g = gang(true);
    let decision = schedule_claim_gang(&g.snapshot, &g.inventory, &g.members, &g.claims, &g.config);
    let ClaimGangDecision::Placed(placed) = decision else {
        panic!("the gang fits: {decision:?}")
    };
    let nodes: Vec<&str> = placed.iter().map(|p| p.placement.node.as_str()).collect();
    assert_ne!(nodes[0], nodes[1], "{nodes:?}");
    for p in &placed {
        let channel = &p.fit.claims[1].devices[0];
        assert_eq!(
            (
                channel.device.driver.as_str(),
                channel.device.device.as_str()
            ),
            ("compute-domain.nvidia.com", "channel-0")
        );
        assert_eq!(
            channel.device.pool, p.placement.node,
            "the member's own node's channel"
        );
    }
}
