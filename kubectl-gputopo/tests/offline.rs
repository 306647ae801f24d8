//! The reports over literal objects (no API server): two recorded DGX A100
//! nodes, a bound pod with its GPU record, a pod that fits nowhere, a gang
//! missing a member. `live.rs` runs the same against a real API server and
//! a running gputopo-scheduler.

use gputopo_api::GpuTopology;
use gputopo_scheduler::Settings;
use gputopo_testenv::fake_gpu_node;
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::normalize::normalize;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kubectl_gputopo::Scope;
use kubectl_gputopo::listing::Cluster;
use kubectl_gputopo::settings::Loaded;
use kubectl_gputopo::view::View;
use kubectl_gputopo::{explain, gangs, nodes, pending};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

const DGX_A100: &str = "nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt";

fn topology(name: &str) -> GpuTopology {
    let path = format!("{}/../fixtures/{DGX_A100}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("the fixture");
    let facts = facts_from_topo(&text).expect("the fixture parses");
    GpuTopology::new(name, normalize(name, &facts).expect("it normalizes"))
}

fn pod(name: &str, gpus: u32, annotations: &[(&str, &str)], node: Option<&str>) -> Arc<Pod> {
    let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    let mut spec = json!({
        "schedulerName": "gputopo-scheduler",
        "containers": [{"name": "main", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]
    });
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                "annotations": annotations,
                "creationTimestamp": Timestamp::now().to_string()},
            "spec": spec,
            "status": {"phase": if node.is_some() { "Running" } else { "Pending" }}
        }))
        .expect("a pod"),
    )
}

async fn view() -> View {
    let mut cluster = Cluster::default();
    for (name, leaf) in [("dgx-a", "leaf-1"), ("dgx-b", "leaf-2")] {
        let labels = BTreeMap::from([
            ("gputopo.dev/spine".to_string(), "spine-1".to_string()),
            ("gputopo.dev/leaf".to_string(), leaf.to_string()),
        ]);
        cluster
            .nodes
            .push(Arc::new(fake_gpu_node(name, 8, &labels)));
        cluster.topologies.push(Arc::new(topology(name)));
    }
    cluster.pods = vec![
        pod(
            "solo",
            2,
            &[
                ("gputopo.dev/assigned-gpus", "0,1"),
                ("scheduler.gputopo.dev/bottleneck", "NV12"),
            ],
            Some("dgx-a"),
        ),
        pod("huge", 16, &[], None),
        pod(
            "trio-0",
            1,
            &[("gputopo.dev/gang", "trio"), ("gputopo.dev/gang-size", "3")],
            None,
        ),
    ];
    let settings = Loaded {
        settings: Settings::default(),
        from: "test".into(),
    };
    View::of(cluster, settings, Timestamp::now())
        .await
        .expect("a snapshot")
}

#[tokio::test]
async fn why_pending_gives_each_pending_pod_the_cycles_reason() {
    let view = view().await;
    let report = pending::report(&view, &Scope::Namespace("ml".into()));
    let (group, line) = report.line("ml/huge").expect("huge is pending");
    assert_eq!(group.result, "unschedulable", "{report:#?}");
    assert!(
        line.message.starts_with("0/2 nodes are available"),
        "{}",
        line.message
    );
    let (group, line) = report.line("ml/trio-0").expect("trio-0 is pending");
    assert_eq!(group.result, "waiting");
    assert!(
        line.message.contains("1 of 3 members present"),
        "{}",
        line.message
    );
    assert!(
        report.line("ml/solo").is_none(),
        "a bound pod is not pending"
    );
    let text = report.text();
    assert!(
        text.contains("UNSCHEDULABLE") && text.contains("ml/huge"),
        "{text}"
    );
    assert!(
        pending::report(&view, &Scope::Namespace("other".into()))
            .groups
            .is_empty()
    );
}

#[tokio::test]
async fn nodes_show_who_holds_which_gpu() {
    let view = view().await;
    let report = nodes::report(&view, None).expect("GPU nodes");
    assert_eq!(report.nodes.len(), 2);
    let a = &report.nodes[0];
    assert_eq!(a.name, "dgx-a");
    assert_eq!(a.interconnect.as_deref(), Some("nvswitch"));
    assert_eq!(a.gpus[0].held_by, ["ml/solo"]);
    assert_eq!(a.gpus[1].held_by, ["ml/solo"]);
    assert!(a.gpus[2].held_by.is_empty());
    assert_eq!(a.free_gpus, [2, 3, 4, 5, 6, 7]);
    assert_eq!(
        a.domains
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        ["spine-1", "leaf-1"]
    );
    assert_eq!(report.nodes[1].free_gpus.len(), 8);
    assert!(nodes::report(&view, Some("nope")).is_err());
    let text = report.text();
    assert!(
        text.contains("ml/solo") && text.contains("nvswitch"),
        "{text}"
    );
}

#[tokio::test]
async fn explain_names_a_bound_pods_node_and_gpus_and_a_pending_pods_verdicts() {
    let view = view().await;
    let solo = explain::report(&view, "ml", "solo").expect("solo");
    let bound = solo.bound.as_ref().expect("bound");
    assert_eq!(bound.node, "dgx-a");
    assert_eq!(bound.gpus, [0, 1]);
    assert_eq!(bound.record.source, "annotations");
    assert_eq!(bound.record.bottleneck.as_deref(), Some("NV12"));
    assert_eq!(bound.weakest_link.as_deref(), Some("NV12"));
    assert!(solo.pending.is_none());

    let huge = explain::report(&view, "ml", "huge").expect("huge");
    let pending = huge.pending.as_ref().expect("pending");
    assert_eq!(pending.decision.result, "unschedulable");
    assert_eq!(pending.nodes.len(), 2);
    assert!(pending.nodes.iter().all(|n| n.verdict == "rejected"));
    assert!(explain::report(&view, "ml", "nope").is_err());
}

#[tokio::test]
async fn gangs_list_members_and_state() {
    let view = view().await;
    let report = gangs::report(&view, &Scope::All);
    assert_eq!(report.gangs.len(), 1, "{report:#?}");
    let trio = &report.gangs[0];
    assert_eq!(trio.gang, "gang ml/trio");
    assert_eq!((trio.size, trio.bound, trio.pending), (Some(3), 0, 1));
    assert_eq!(trio.state, "waiting");
    assert_eq!(trio.members[0].pod, "ml/trio-0");
    assert!(
        trio.verdict
            .as_deref()
            .is_some_and(|v| v.contains("waiting for the rest"))
    );
}
