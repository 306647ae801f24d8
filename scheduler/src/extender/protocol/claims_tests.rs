//! The extender's filter, prioritize and bind for pods whose GPUs come
//! through DRA, against literal objects: DGX-1 and PCIe nodes whose GPUs
//! NVIDIA's DRA driver publishes, and a DGX-1 with the device plugin.

use super::*;
use gputopo_api::GpuTopology;
use gputopo_api::keys::RESOURCE_GPU;
use gputopo_scheduler_core::dra::{
    DraConfig, DraInventory, DraPod, extended_claim, extended_resource_class, hold_snapshot,
};
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::snapshot::SnapshotBuilder;
use gputopo_scheduler_core::snapshot::from_k8s::node_input;
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::dra_slice::{DriverFacts, nvidia_resource_slice};
use gputopo_topology::normalize::normalize;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

const DGX1: &str = "nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt";
const PCIE: &str = "nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt";

fn topology(name: &str, fixture: &str) -> GpuTopology {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(fixture);
    let text = std::fs::read_to_string(&file).expect("the fixture");
    let facts = facts_from_topo(&text).expect("the fixture parses");
    GpuTopology::new(name, normalize(name, &facts).expect("it normalizes"))
}

fn node(name: &str, device_plugin: bool) -> Node {
    let mut allocatable = json!({"cpu": "64", "memory": "512Gi", "pods": "110"});
    if device_plugin {
        allocatable["nvidia.com/gpu"] = json!("8");
    }
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": allocatable}
    }))
    .expect("a node")
}

fn class(name: &str, extended: Option<&str>) -> DeviceClass {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
            "extendedResourceName": extended,
        }
    }))
    .expect("a class")
}

/// dra-dgx1 and dra-pcie (DRA only) and plugin-dgx1 (the device plugin).
struct World {
    snapshot: Snapshot,
    inventory: Arc<DraInventory>,
    classes: Vec<DeviceClass>,
}

fn world() -> World {
    let config = SchedulerConfig::default();
    let trust = ReadingTrust::at("2026-01-01T00:10:00Z".parse().expect("a time"));
    let mut b = SnapshotBuilder::new(&config);
    let mut topologies = Vec::new();
    let mut slices: Vec<ResourceSlice> = Vec::new();
    for (name, fixture, product, plugin) in [
        ("dra-dgx1", DGX1, "Tesla V100-SXM2-32GB", false),
        ("dra-pcie", PCIE, "NVIDIA GeForce RTX 4090", false),
        ("plugin-dgx1", DGX1, "Tesla V100-SXM2-32GB", true),
    ] {
        let t = topology(name, fixture);
        b.node(node_input(&node(name, plugin), Some(&t), trust).expect("node input"));
        if !plugin {
            let mut facts = DriverFacts::for_product(product, "32Gi").expect("known");
            facts.publish_index = true;
            slices.push(
                serde_json::from_value(nvidia_resource_slice(name, &t.spec, &facts))
                    .expect("a slice"),
            );
        }
        topologies.push(t);
    }
    let snapshot = b.build().expect("snapshot");
    let no_claims: [ResourceClaim; 0] = [];
    let mut inventory =
        DraInventory::build(&DraConfig::default(), &slices, &topologies, &no_claims);
    hold_snapshot(&mut inventory, &snapshot);
    World {
        snapshot,
        inventory: Arc::new(inventory),
        classes: vec![
            class("gpu.nvidia.com", None),
            class("gpu-extended", Some(RESOURCE_GPU)),
        ],
    }
}

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).expect("a pod")
}

fn claim_pod(annotations: Value) -> (Pod, ResourceClaim) {
    let claim: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "pair", "namespace": "ml", "uid": "uid-pair"},
        "spec": {"devices": {"requests": [
            {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}}
    }))
    .expect("a claim");
    let pod = pod(json!({
        "metadata": {"name": "train", "namespace": "ml", "uid": "uid-1", "annotations": annotations},
        "spec": {
            "resourceClaims": [{"name": "gpus", "resourceClaimName": "pair"}],
            "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}]
        }
    }));
    (pod, claim)
}

impl World {
    fn claims(&self, pod: &Pod, claim: &ResourceClaim) -> PodClaims {
        let dra = DraPod::from_pod(pod, |_, _| Some(claim), &self.classes).expect("read");
        PodClaims::Claims {
            dra,
            inventory: self.inventory.clone(),
        }
    }

    fn extended(&self, pod: &Pod) -> PodClaims {
        let class = extended_resource_class(&self.classes, RESOURCE_GPU).expect("a class");
        let ext = extended_claim(pod, RESOURCE_GPU, class, &self.classes, None)
            .expect("the pod asks for GPUs")
            .expect("a valid special claim");
        PodClaims::Extended {
            dra: ext.dra,
            inventory: self.inventory.clone(),
        }
    }
}

/// kube-scheduler's bind of `pod` to `node`.
fn bind_request(pod: &Pod, node: &str) -> BindingRequest {
    BindingRequest {
        namespace: "ml".into(),
        name: pod.metadata.name.clone().expect("a name"),
        uid: pod.metadata.uid.clone().expect("a uid"),
        node: node.into(),
    }
}

fn bind(w: &World, pod: &Pod, node: &str, claims: &PodClaims) -> Result<Placement, PlanError> {
    plan_binding(
        &w.snapshot,
        &SchedulerConfig::default(),
        &["default-scheduler".to_string()],
        pod,
        &bind_request(pod, node),
        claims,
    )
}

fn request(pod: &Pod) -> ExtenderRequest {
    decode_args(
        &serde_json::to_vec(&json!({
            "Pod": pod,
            "NodeNames": ["dra-dgx1", "dra-pcie", "plugin-dgx1"]
        }))
        .expect("JSON"),
    )
    .expect("a request")
}

#[test]
fn a_claim_pods_nodes_are_filtered_by_its_claims_fit() {
    let w = world();
    let (pod, claim) = claim_pod(json!({"gputopo.dev/min-nvlink-level": "2"}));
    let claims = w.claims(&pod, &claim);
    let result = filter(
        &w.snapshot,
        &SchedulerConfig::default(),
        &request(&pod),
        &claims,
    );
    assert_eq!(
        result.node_names,
        Some(vec!["dra-dgx1".to_string()]),
        "{result:?}"
    );
    // The PCIe box has no NVLink pair, even empty; the plugin node
    // publishes no devices: evictions help neither.
    assert_eq!(
        result
            .failed_and_unresolvable_nodes
            .get("dra-pcie")
            .map(String::as_str),
        Some("no 2-GPU set with NV2"),
        "{result:?}"
    );
    assert_eq!(
        result
            .failed_and_unresolvable_nodes
            .get("plugin-dgx1")
            .map(String::as_str),
        Some("no DRA devices"),
        "{result:?}"
    );

    // Unjudged (no DRA objects), the same pod asks for no GPU: every node passes.
    let unjudged = filter(
        &w.snapshot,
        &SchedulerConfig::default(),
        &request(&pod),
        &PodClaims::Unjudged,
    );
    assert_eq!(unjudged.node_names.map(|n| n.len()), Some(3));
}

#[test]
fn a_claim_pod_scores_only_where_its_claims_fit() {
    let w = world();
    let (pod, claim) = claim_pod(json!({}));
    let claims = w.claims(&pod, &claim);
    let scores = prioritize(
        &w.snapshot,
        &SchedulerConfig::default(),
        &request(&pod),
        &claims,
    );
    let score = |host: &str| {
        scores
            .iter()
            .find(|s| s.host == host)
            .map(|s| s.score)
            .expect("a score per node")
    };
    assert!(score("dra-dgx1") > 0, "{scores:?}");
    assert!(score("dra-pcie") > 0, "{scores:?}");
    assert_eq!(score("plugin-dgx1"), 0, "no devices there: {scores:?}");
}

#[test]
fn a_plain_gpu_pod_is_judged_by_the_plugin_or_its_special_claim_node_by_node() {
    let w = world();
    let pod = pod(json!({
        "metadata": {"name": "plain", "namespace": "ml", "uid": "uid-2",
            "annotations": {"gputopo.dev/min-nvlink-level": "2"}},
        "spec": {"containers": [{"name": "main", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    }));
    let claims = w.extended(&pod);
    let result = filter(
        &w.snapshot,
        &SchedulerConfig::default(),
        &request(&pod),
        &claims,
    );
    // dra-dgx1 through DRA (no nvidia.com/gpu there), plugin-dgx1 through the plugin.
    assert_eq!(
        result.node_names,
        Some(vec!["dra-dgx1".to_string(), "plugin-dgx1".to_string()]),
        "{result:?}"
    );
    assert_eq!(
        result
            .failed_and_unresolvable_nodes
            .get("dra-pcie")
            .map(String::as_str),
        Some("no 2-GPU set with NV2"),
        "{result:?}"
    );
    // Without the DeviceClass the DRA nodes have no nvidia.com/gpu to give.
    let unjudged = filter(
        &w.snapshot,
        &SchedulerConfig::default(),
        &request(&pod),
        &PodClaims::Unjudged,
    );
    assert_eq!(unjudged.node_names, Some(vec!["plugin-dgx1".to_string()]));

    // The bind: devices are kube-scheduler's on a DRA node (no GPU
    // annotations), gputopo's on the plugin node.
    let bind = |node: &str| bind(&w, &pod, node, &claims).expect("placed");
    assert!(bind("dra-dgx1").gpus.is_empty());
    assert_eq!(bind("plugin-dgx1").gpus.len(), 2);
}

#[test]
fn a_claim_pods_bind_writes_no_gpus() {
    let w = world();
    let (pod, claim) = claim_pod(json!({}));
    let claims = w.claims(&pod, &claim);
    let placement = plan_binding(
        &w.snapshot,
        &SchedulerConfig::default(),
        &["default-scheduler".to_string()],
        &pod,
        &BindingRequest {
            namespace: "ml".into(),
            name: "train".into(),
            uid: "uid-1".into(),
            node: "dra-pcie".into(),
        },
        &claims,
    )
    .expect("placed");
    assert_eq!(placement.node, "dra-pcie");
    assert!(placement.gpus.is_empty());
    assert!(
        binding(
            &BindingRequest {
                namespace: "ml".into(),
                name: "train".into(),
                uid: "uid-1".into(),
                node: "dra-pcie".into(),
            },
            &placement
        )
        .metadata
        .annotations
        .is_none()
    );
}
