//! Dynamic Resource Allocation's inputs (scheduler-core `dra/`): a
//! driver's ResourceSlice, a user's ResourceClaim with its CEL selectors and
//! constraints, a DeviceClass; then the inventory built, one pod fitted on
//! the slice's node, and the pod decided over every node as the scheduler
//! decides it (`schedule_claims`), explained as `gputopo explain` does, and
//! an allocation of the fitted devices reviewed as the extender reviews
//! kube-scheduler's.

use crate::mutate::texts;
use crate::run::Verdict;
use crate::seeds::{SPECS, fixture_texts};
use crate::value::Documents;
use gputopo_api::GpuTopology;
use gputopo_api::k8s_openapi::api::core::v1::{Node, Pod};
use gputopo_api::k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::{DraConfig, DraFit, DraInventory, DraPod, hold_snapshot, pin};
use gputopo_scheduler_core::dra_schedule::{
    DraDecision, explain_claims, review_allocation, schedule_claims,
};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::snapshot::from_k8s::node_input;
use gputopo_scheduler_core::snapshot::{Snapshot, SnapshotBuilder};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::{Arc, LazyLock};

/// Selectors as users write them, and CEL's corners.
const EXPRESSIONS: &[&str] = &[
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')",
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
    "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.0.0'))",
    "'uuid' in device.attributes['gpu.nvidia.com'] && device.attributes['gpu.nvidia.com'].uuid.matches('^GPU-')",
    "has(device.attributes['gpu.nvidia.com'].index) ? device.attributes['gpu.nvidia.com'].index < 4 : true",
    "[1, 2, 3].all(x, x > 0) && {'a': 1}.size() == 1",
    "device.attributes['gpu.nvidia.com'].architecture in ['Ampere', 'Hopper']",
];

const CEL_WORDS: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "'",
    "\"",
    "\\",
    "&&",
    "||",
    "!",
    "?",
    ":",
    ".",
    ",",
    "==",
    "device",
    "attributes",
    "capacity",
    "driver",
    "quantity(",
    "semver(",
    "has(",
    ".all(x, ",
    ".exists(",
    ".map(x, ",
    "size(",
    "int(",
    "uint(",
    "double(",
    "1e309",
    "-9223372036854775808",
    "18446744073709551615u",
    "b'\\xff'",
    "r'",
    "'''",
    "/",
    "%",
    "1/0",
];

/// The claim's devices, with one selector's expression to be filled in.
fn claim(expression: &str) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default", "uid": "uid-c"},
        "spec": {"devices": {
            "requests": [
                {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2,
                    "allocationMode": "ExactCount",
                    "selectors": [{"cel": {"expression": expression}}]}},
                {"name": "one", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
            ],
            "constraints": [{"requests": ["gpus", "one"],
                "matchAttribute": "resource.kubernetes.io/pcieRoot"}],
            "config": [{"requests": ["gpus"], "opaque": {"driver": "gpu.nvidia.com",
                "parameters": {"kind": "GpuConfig"}}}]
        }}
    })
}

fn class(expression: &str) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": expression}}]}
    })
}

static SLICES: LazyLock<Arc<[String]>> = LazyLock::new(|| fixture_texts("dra", &["yaml"]));
static SLICE_DOCUMENTS: LazyLock<Documents> = LazyLock::new(|| Documents::new(&SLICES));
static CLAIMS: LazyLock<Documents> = LazyLock::new(|| {
    let seeds: Vec<String> = EXPRESSIONS.iter().map(|e| claim(e).to_string()).collect();
    Documents::new(&seeds)
});

/// The topologies of the slices' nodes: the specs whose GPUs the slices
/// name (by UUID, or by index for the PCIe box), under the slices' names.
static TOPOLOGIES: LazyLock<Vec<GpuTopology>> = LazyLock::new(|| {
    let by_name = |part: &str| SPECS.iter().find(|s| s.node_name.contains(part)).cloned();
    let mut out = Vec::new();
    for (node, part) in [
        ("dgx-a100", "dgx-a100-mlx5"),
        ("dgx1-v100", "dgx1-v100-nvml"),
        ("rtx4090-pcie", "rtx4090-8gpu-pcie-2socket-vast"),
    ] {
        if let Some(mut spec) = by_name(part) {
            spec.node_name = node.to_string();
            if node == "dgx-a100" {
                for g in &mut spec.gpus {
                    g.uuid = Some(format!("GPU-a1000001-0000-4000-8000-{:012}", g.index));
                }
            }
            out.push(GpuTopology::new(node, spec));
        }
    }
    out
});

/// The topologies' nodes, GPUs published by DRA only (no device plugin).
static SNAPSHOT: LazyLock<Snapshot> = LazyLock::new(|| {
    let trust = ReadingTrust::at("2026-01-01T00:00:00Z".parse().expect("a time"));
    let mut builder = SnapshotBuilder::new(&SchedulerConfig::default());
    for t in TOPOLOGIES.iter() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": t.spec.node_name},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}
        }))
        .expect("a node");
        builder.node(node_input(&node, Some(t), trust).expect("a node input"));
    }
    builder.build().expect("a snapshot")
});

/// The pod using the claim `c`.
static POD: LazyLock<Pod> = LazyLock::new(|| {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
        "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimName": "c"}],
            "containers": [{"name": "main", "resources": {"claims": [{"name": "gpus"}]}}]}
    }))
    .expect("a pod")
});

/// The case's claim: an edited claim document, or the seed claim with
/// another CEL expression.
#[derive(Clone, Debug)]
pub enum ClaimInput {
    Document(String),
    Expression(String),
}

#[derive(Clone, Debug)]
pub struct Case {
    pub slice: String,
    pub claim: ClaimInput,
    pub class_expression: String,
}

pub fn strategy() -> BoxedStrategy<Case> {
    let expressions: Arc<[String]> = EXPRESSIONS.iter().map(|e| e.to_string()).collect();
    (
        prop_oneof![2 => prop::sample::select(SLICES.to_vec()), 1 => SLICE_DOCUMENTS.json()],
        prop_oneof![
            1 => CLAIMS.json().prop_map(ClaimInput::Document),
            2 => texts(expressions.clone(), CEL_WORDS).prop_map(ClaimInput::Expression),
        ],
        prop_oneof![
            3 => Just(EXPRESSIONS[0].to_string()),
            1 => texts(expressions, CEL_WORDS),
        ],
    )
        .prop_map(|(slice, claim, class_expression)| Case {
            slice,
            claim,
            class_expression,
        })
        .boxed()
}

pub fn check(c: &Case) -> Verdict {
    let Ok(slice) = serde_yaml::from_str::<ResourceSlice>(&c.slice) else {
        return Verdict::Rejected;
    };
    let claim_json = match &c.claim {
        ClaimInput::Document(doc) => serde_json::from_str(doc).unwrap_or(Value::Null),
        ClaimInput::Expression(expression) => claim(expression),
    };
    let Ok(claim) = serde_json::from_value::<ResourceClaim>(claim_json) else {
        return Verdict::Rejected;
    };
    let Ok(class) = serde_json::from_value::<DeviceClass>(class(&c.class_expression)) else {
        return Verdict::Rejected;
    };
    let slices = [slice];
    let inventory = DraInventory::build(&DraConfig::default(), &slices, TOPOLOGIES.iter(), &[]);
    let Ok(pod) = DraPod::new("default/p", &[&claim], &[class]) else {
        return Verdict::Rejected;
    };
    let node = slices[0].spec.node_name.clone().unwrap_or_default();
    let spec = TOPOLOGIES.iter().find(|t| t.spec.node_name == node);
    let shape = spec.and_then(|t| NodeShape::from_spec(&t.spec).ok());
    let request = SetRequest::new(3, gputopo_api::Collective::Ring);
    let fit = pod.fit(&inventory, &node, shape.as_ref(), &request);
    decide(&inventory, &pod, &claim, &class_of(c), fit.as_ref().ok());
    match fit {
        Ok(_) => Verdict::Accepted,
        Err(_) => Verdict::Rejected,
    }
}

fn class_of(c: &Case) -> DeviceClass {
    serde_json::from_value(class(&c.class_expression)).expect("read once already")
}

/// The whole-cluster decision, its explanation (which must agree with it),
/// and a review of `fit`'s devices written as another allocator's.
fn decide(
    inventory: &DraInventory,
    dra: &DraPod,
    claim: &ResourceClaim,
    class: &DeviceClass,
    fit: Option<&DraFit>,
) {
    let Ok(pending) = PendingPod::from_k8s(&POD) else {
        return;
    };
    let config = SchedulerConfig::default();
    let mut inventory = inventory.clone();
    hold_snapshot(&mut inventory, &SNAPSHOT);
    let decision = schedule_claims(&SNAPSHOT, &inventory, dra, &pending, &config);
    let explained = explain_claims(&SNAPSHOT, &inventory, dra, &pending, &config);
    match (&decision, explained.decision.placement()) {
        (DraDecision::Placed(d), Some(p)) => assert_eq!(d.placement.node, p.node),
        (DraDecision::Unschedulable { .. }, None) => {}
        (d, p) => panic!("schedule_claims and explain_claims disagree: {d:?} / {p:?}"),
    }
    // The fitted devices, as kube-scheduler's allocator would have written them.
    let Some(fit) = fit else { return };
    let results: Vec<Value> = fit
        .claims
        .iter()
        .flat_map(|c| &c.devices)
        .map(|d| {
            json!({"request": d.request, "driver": d.device.driver,
                "pool": d.device.pool, "device": d.device.device})
        })
        .collect();
    let mut allocated = claim.clone();
    allocated.status = serde_json::from_value(json!({"allocation": {
        "devices": {"results": results},
        "nodeSelector": pin(&fit.node),
    }}))
    .ok();
    let _ = review_allocation(
        &SNAPSHOT,
        &inventory,
        &[&allocated],
        [class],
        &pending,
        &config,
    );
}
