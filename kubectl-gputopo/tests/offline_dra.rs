//! A pod whose GPUs come through a ResourceClaim, over the recorded DRA
//! cluster `fixtures/clusters/dra-list.yaml` (no API server): `explain`
//! judges each node with the claim's devices, as `gputopo explain` does on
//! the same file, and `nodes` shows the GPUs other claims hold.

use gputopo_scheduler::Settings;
use k8s_openapi::jiff::Timestamp;
use kubectl_gputopo::listing::Cluster;
use kubectl_gputopo::settings::Loaded;
use kubectl_gputopo::view::View;
use kubectl_gputopo::{explain, nodes};
use serde_json::Value;
use std::sync::Arc;

fn fixture(path: &str) -> Value {
    let file = format!("{}/../fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    serde_yaml::from_str(&std::fs::read_to_string(&file).expect("the fixture")).expect("YAML")
}

fn typed<T: serde::de::DeserializeOwned>(v: &Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v.clone()).expect("an object"))
}

async fn view() -> View {
    let mut cluster = Cluster::default();
    for item in fixture("clusters/dra-list.yaml")["items"]
        .as_array()
        .expect("items")
    {
        match item["kind"].as_str() {
            Some("Node") => cluster.nodes.push(typed(item)),
            Some("GpuTopology") => cluster.topologies.push(typed(item)),
            Some("ResourceSlice") => cluster.dra.slices.push(typed(item)),
            Some("ResourceClaim") => cluster.dra.claims.push(typed(item)),
            Some("DeviceClass") => cluster.dra.classes.push(typed(item)),
            other => panic!("a kind the test does not read: {other:?}"),
        }
    }
    cluster
        .pods
        .push(typed(&fixture("clusters/pods/dra-pair.yaml")));
    let settings = Loaded {
        settings: Settings::default(),
        from: "test".into(),
    };
    View::of(cluster, settings, Timestamp::now())
        .await
        .expect("a snapshot")
}

#[tokio::test]
async fn a_claim_pods_nodes_are_judged_with_its_devices() {
    let view = view().await;
    let report = explain::report(&view, "ml", "trainer").expect("the pod");
    let pending = report.pending.as_ref().expect("pending");
    assert_eq!(pending.nodes_note, None);
    let verdicts: Vec<(&str, &str)> = pending
        .nodes
        .iter()
        .map(|n| (n.node.as_str(), n.verdict.as_str()))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("pcie-a", "chosen"),
            ("pcie-b", "feasible"),
            ("pcie-c", "rejected")
        ],
        "{pending:#?}"
    );
    assert_eq!(pending.nodes[0].gpus, [0, 1]);
    // The cycle's own decision agrees: the bridged pair on pcie-a.
    assert_eq!(pending.decision.result, "scheduled", "{pending:#?}");
    assert_eq!(pending.decision.node.as_deref(), Some("pcie-a"));
    assert_eq!(pending.decision.gpus, [0, 1]);
}

#[tokio::test]
async fn nodes_show_the_gpus_other_claims_hold() {
    let view = view().await;
    let report = nodes::report(&view, Some("pcie-c")).expect("pcie-c");
    let node = &report.nodes[0];
    let held: Vec<&[String]> = node.gpus.iter().map(|g| g.held_by.as_slice()).collect();
    let claim = ["ml/resourceclaim:other-c".to_string()];
    assert_eq!(
        held,
        [&claim[..], &claim[..], &claim[..], &[][..]],
        "{node:#?}"
    );
    assert_eq!(node.free_gpus, [3]);
}
