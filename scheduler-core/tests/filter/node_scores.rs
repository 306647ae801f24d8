//! kube-scheduler's NodeResourcesBalancedAllocation and ImageLocality unit
//! scenarios (Kubernetes 1.37, `noderesources/balanced_allocation_test.go`
//! and `imagelocality/image_locality_test.go`), written again: the same
//! nodes, pods and expected 0–100 scores, read off each node's score parts.

use crate::common::snapshot_with;
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_scheduler_core::config::{BalancedResources, SchedulerConfig};
use gputopo_scheduler_core::node_fit::{NodeJudge, NodeVerdict};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::score::ScoreParts;
use gputopo_scheduler_core::snapshot::from_k8s::bound_pod_input;
use gputopo_scheduler_core::snapshot::{BoundPodInput, NodeImage, NodeInput};
use serde_json::{Value, json};

const MB: i64 = 1024 * 1024;

/// Upstream's `makeNode`: cpu in millicores, memory in bytes, optionally GPUs.
fn node(name: &str, cpu_milli: i64, memory: i64, gpus: Option<i64>) -> NodeInput {
    let mut allocatable = Resources::unlimited();
    allocatable.cpu_milli = cpu_milli;
    allocatable.memory = memory;
    allocatable.pods = 32;
    allocatable.gpus = gpus.unwrap_or(0);
    NodeInput {
        name: name.into(),
        allocatable,
        ..NodeInput::default()
    }
}

/// A pod with one container per request list (upstream's `.Req(..).Req(..)`).
fn k8s_pod(name: &str, node: Option<&str>, requests: &[Value]) -> Pod {
    let containers: Vec<Value> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| json!({"name": format!("c{i}"), "resources": {"requests": r, "limits": r}}))
        .collect();
    let mut spec = json!({"containers": containers});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
    .expect("a pod")
}

fn bound(name: &str, node: &str, requests: &[Value]) -> BoundPodInput {
    bound_pod_input(&k8s_pod(name, Some(node), requests))
        .expect("readable")
        .expect("bound")
}

fn parts(
    config: &SchedulerConfig,
    nodes: Vec<NodeInput>,
    pods: Vec<BoundPodInput>,
    pod: &PendingPod,
) -> Vec<ScoreParts> {
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    let snapshot = snapshot_with(config, nodes, pods);
    let judge = NodeJudge::new(&snapshot, pod, config).deciding_alone();
    names
        .iter()
        .map(|n| match judge.judge(n) {
            NodeVerdict::Fits { parts, .. } => parts,
            other => panic!("{n}: {other:?}"),
        })
        .collect()
}

fn points(part: Option<f64>) -> Option<i64> {
    part.map(|p| (p * 100.0).round() as i64)
}

fn balanced(
    config: &SchedulerConfig,
    nodes: Vec<NodeInput>,
    pods: Vec<BoundPodInput>,
    requests: &[Value],
) -> Vec<Option<i64>> {
    let pod = PendingPod::from_k8s(&k8s_pod("incoming", None, requests)).expect("a pod");
    parts(config, nodes, pods, &pod)
        .iter()
        .map(|p| points(p.balanced_allocation))
        .collect()
}

fn cpu(c: &str) -> Value {
    json!({"cpu": c})
}

fn cpu_mem(c: &str, m: &str) -> Value {
    json!({"cpu": c, "memory": m})
}

#[test]
fn balanced_allocation_skips_a_pod_requesting_nothing() {
    let got = balanced(
        &SchedulerConfig::default(),
        vec![
            node("node1", 4000, 10000, None),
            node("node2", 4000, 10000, None),
        ],
        vec![],
        &[json!({})],
    );
    assert_eq!(got, [None, None]);
}

#[test]
fn balanced_allocation_upstream_scenarios() {
    let config = SchedulerConfig::default();
    let pod = [cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000")];
    let existing = |nodes: [&str; 2]| {
        vec![
            bound("p1", nodes[0], &[cpu("1000m"), cpu("2000m")]),
            bound("p2", nodes[1], &pod),
        ]
    };
    // Nothing scheduled, differently sized nodes.
    let got = balanced(
        &config,
        vec![
            node("node1", 4000, 10000, None),
            node("node2", 6000, 10000, None),
        ],
        vec![],
        &pod,
    );
    assert_eq!(got, [Some(68), Some(75)]);
    // Pods scheduled with resources.
    let got = balanced(
        &config,
        vec![
            node("node1", 10000, 20000, None),
            node("node2", 10000, 20000, None),
        ],
        existing(["node1", "node2"]),
        &pod,
    );
    assert_eq!(got, [Some(73), Some(74)]);
    // Differently sized nodes.
    let got = balanced(
        &config,
        vec![
            node("node1", 10000, 20000, None),
            node("node2", 10000, 50000, None),
        ],
        existing(["node1", "node2"]),
        &pod,
    );
    assert_eq!(got, [Some(73), Some(70)]);
    // Nodes reaching the minimum and maximum score.
    let got = balanced(
        &config,
        vec![
            node("node1", 3000, 5000, None),
            node("node2", 3000, 5000, None),
        ],
        vec![bound("p1", "node1", &[cpu("1000m"), cpu("2000m")])],
        &[json!({"memory": "2000"}), json!({"memory": "3000"})],
    );
    assert_eq!(got, [Some(100), Some(50)]);
    // Requests at node capacity.
    let got = balanced(
        &config,
        vec![
            node("node1", 6000, 10000, None),
            node("node2", 6000, 10000, None),
        ],
        existing(["node1", "node2"]),
        &[cpu("1000m"), cpu("2000m")],
    );
    assert_eq!(got, [Some(62), Some(62)]);
}

#[test]
fn balanced_allocation_counts_a_scalar_resource_only_when_requested() {
    let config = SchedulerConfig {
        balanced_resources: BalancedResources::new(vec![
            "cpu".into(),
            "memory".into(),
            "nvidia.com/gpu".into(),
        ])
        .unwrap(),
        ..SchedulerConfig::default()
    };
    let gpu = |c: &str, m: &str, g: &str| json!({"cpu": c, "memory": m, "nvidia.com/gpu": g});
    let got = balanced(
        &config,
        vec![
            node("node1", 3500, 40000, Some(8)),
            node("node2", 3500, 40000, Some(8)),
        ],
        vec![
            bound(
                "p1",
                "node1",
                &[cpu_mem("1000m", "2000"), gpu("2000m", "3000", "3")],
            ),
            bound(
                "p2",
                "node2",
                &[cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000")],
            ),
        ],
        &[gpu("0", "0", "1")],
    );
    assert_eq!(got, [Some(75), Some(76)]);
    let got = balanced(
        &config,
        vec![
            node("node1", 3500, 40000, Some(8)),
            node("node2", 3500, 40000, None),
        ],
        vec![],
        &[cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000")],
    );
    assert_eq!(got, [Some(56), Some(56)]);
}

#[test]
fn balanced_resources_refuse_a_repeated_name() {
    let e = BalancedResources::new(vec!["cpu".into(), "cpu".into()]).unwrap_err();
    assert!(e.to_string().contains("resources[1]"), "{e}");
}

/// A node holding these images: each a list of names and a size in MB.
fn image_node(name: &str, images: &[(&[&str], i64)]) -> NodeInput {
    NodeInput {
        name: name.into(),
        images: images
            .iter()
            .map(|(names, mb)| NodeImage {
                names: names.iter().map(|n| (*n).to_string()).collect(),
                size_bytes: mb * MB,
            })
            .collect(),
        ..NodeInput::default()
    }
}

fn imaged_pod(spec: Value) -> PendingPod {
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).expect("a pod");
    PendingPod::from_k8s(&pod).expect("readable")
}

fn containers(images: &[&str]) -> Value {
    let c: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    json!({"containers": c})
}

fn locality(nodes: Vec<NodeInput>, pod: &PendingPod) -> Vec<Option<i64>> {
    parts(&SchedulerConfig::default(), nodes, vec![], pod)
        .iter()
        .map(|p| points(p.image_locality))
        .collect()
}

#[test]
fn image_locality_upstream_scenarios() {
    let n403002000 = |name| {
        image_node(
            name,
            &[
                (&["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
                (&["gcr.io/300:latest", "gcr.io/300:v1"], 300),
                (&["gcr.io/2000:latest"], 2000),
            ],
        )
    };
    let n25010 = |name| {
        image_node(
            name,
            &[
                (&["gcr.io/250:latest"], 250),
                (&["gcr.io/10:latest", "gcr.io/10:v1"], 10),
            ],
        )
    };
    let n60040900 = |name| {
        image_node(
            name,
            &[
                (&["gcr.io/600:latest"], 600),
                (&["gcr.io/40:latest"], 40),
                (&["gcr.io/900:latest"], 900),
            ],
        )
    };
    let n300600900 = |name| {
        image_node(
            name,
            &[
                (&["gcr.io/300:latest"], 300),
                (&["gcr.io/600:latest"], 600),
                (&["gcr.io/900:latest"], 900),
            ],
        )
    };
    let n400030 = |name| {
        image_node(
            name,
            &[(&["gcr.io/4000:latest"], 4000), (&["gcr.io/30:latest"], 30)],
        )
    };
    let n203040 = |name| {
        image_node(
            name,
            &[
                (&["gcr.io/20:latest"], 20),
                (&["gcr.io/30:latest"], 30),
                (&["gcr.io/40:latest"], 40),
            ],
        )
    };
    let empty = |name| image_node(name, &[]);

    let pod = imaged_pod(containers(&["gcr.io/40", "gcr.io/250"]));
    assert_eq!(
        locality(vec![n403002000("node1"), n25010("node2")], &pod),
        [Some(0), Some(5)],
        "two images spread on two nodes, prefer the larger image one"
    );
    let pod = imaged_pod(containers(&["gcr.io/40", "gcr.io/300"]));
    assert_eq!(
        locality(vec![n403002000("node1"), n25010("node2")], &pod),
        [Some(7), Some(0)],
        "two images on one node, prefer this node"
    );
    let min_max = imaged_pod(containers(&["gcr.io/10", "gcr.io/4000"]));
    assert_eq!(
        locality(vec![n400030("node1"), n25010("node2")], &min_max),
        [Some(100), Some(0)],
        "if exceed limit, use limit"
    );
    assert_eq!(
        locality(
            vec![n400030("node1"), n25010("node2"), empty("node3")],
            &min_max
        ),
        [Some(66), Some(0), Some(0)],
        "with a node holding no images"
    );
    let pod = imaged_pod(containers(&["gcr.io/300", "gcr.io/600", "gcr.io/900"]));
    assert_eq!(
        locality(
            vec![n60040900("node1"), n300600900("node2"), empty("node3")],
            &pod
        ),
        [Some(32), Some(36), Some(0)],
        "multiple large images, node2 preferred"
    );
    let pod = imaged_pod(containers(&["gcr.io/30", "gcr.io/40"]));
    assert_eq!(
        locality(vec![n203040("node1"), n400030("node2")], &pod),
        [Some(1), Some(0)],
        "multiple small images"
    );
    let mut spec = containers(&["gcr.io/30"]);
    spec["volumes"] = json!([{"name": "v", "image": {"reference": "gcr.io/300"}}]);
    assert_eq!(
        locality(
            vec![n300600900("node1"), n400030("node2")],
            &imaged_pod(spec)
        ),
        [Some(6), Some(0)],
        "an image volume counts as an image"
    );
    let pod = imaged_pod(containers(&["gcr.io/30", "gcr.io/300"]));
    assert_eq!(
        locality(vec![n300600900("node1"), n400030("node2")], &pod),
        [Some(6), Some(0)],
        "the same images as containers"
    );
    let mut spec = containers(&["gcr.io/30"]);
    spec["initContainers"] = json!([{"name": "i", "image": "gcr.io/300"}]);
    assert_eq!(
        locality(
            vec![n403002000("node1"), n203040("node2")],
            &imaged_pod(spec)
        ),
        [Some(6), Some(0)],
        "an init container's image counts"
    );
}

#[test]
fn image_locality_is_left_out_when_no_node_holds_the_images() {
    let pod = imaged_pod(containers(&["registry.example/trainer:v7"]));
    let got = locality(vec![image_node("a", &[(&["gcr.io/30:latest"], 30)])], &pod);
    assert_eq!(got, [None]);
}
