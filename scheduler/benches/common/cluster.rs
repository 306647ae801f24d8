//! A cluster of DGX A100 nodes (from the fixture's `nvidia-smi topo -m`,
//! spread over leaves of 100 and spines of 1,000) with two bound pods each
//! and one pending: the watched objects a cycle is handed. Shared by the
//! `cycle` bench and the `cycle_memory` example.

use gputopo_api::GpuTopology;
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::normalize::normalize;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;
use std::sync::Arc;

pub struct Cluster {
    pub nodes: Vec<Arc<Node>>,
    pub topologies: Vec<Arc<GpuTopology>>,
    pub pods: Vec<Arc<Pod>>,
}

pub fn pod(name: &str, node: Option<&str>, gpus: &str) -> Pod {
    let annotations = match node {
        Some(_) => json!({"gputopo.dev/assigned-gpus": gpus}),
        None => json!({}),
    };
    let count = gpus.split(',').count();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "jobs", "uid": format!("uid-{name}"),
            "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": annotations},
        "spec": {
            "schedulerName": "gputopo-scheduler",
            "nodeName": node,
            "containers": [{"name": "main", "resources": {
                "requests": {"cpu": "8", "memory": "64Gi"},
                "limits": {"nvidia.com/gpu": count.to_string()}}}]
        },
        "status": {"phase": if node.is_some() { "Running" } else { "Pending" }}
    }))
    .expect("a pod")
}

pub fn cluster(size: usize) -> Cluster {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt"
    );
    let text = std::fs::read_to_string(path).expect("the DGX A100 fixture");
    let spec = normalize("dgx-a100", &facts_from_topo(&text).expect("parses")).expect("normal");
    let mut c = Cluster {
        nodes: Vec::new(),
        topologies: Vec::new(),
        pods: Vec::new(),
    };
    for i in 0..size {
        let name = format!("gpu-{i:05}");
        c.nodes.push(Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {
                    "gputopo.dev/spine": format!("spine-{}", i / 1000),
                    "gputopo.dev/leaf": format!("leaf-{}", i / 100)}},
                "status": {"allocatable": {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"}}
            }))
            .expect("a node"),
        ));
        let mut s = spec.clone();
        s.node_name.clone_from(&name);
        c.topologies.push(Arc::new(GpuTopology::new(&name, s)));
        c.pods
            .push(Arc::new(pod(&format!("{name}-a"), Some(&name), "0,1")));
        c.pods
            .push(Arc::new(pod(&format!("{name}-b"), Some(&name), "4,5,6,7")));
    }
    c.pods.push(Arc::new(pod("pending", None, "0,1,2,3")));
    c
}
