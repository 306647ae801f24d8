//! Dynamic Resource Allocation's inputs (scheduler-core `dra/`, not yet
//! wired into the scheduler's watches): a driver's ResourceSlice, a user's
//! ResourceClaim with its CEL selectors and constraints, a DeviceClass;
//! then the inventory built and one pod fitted on the slice's node.

use crate::mutate::texts;
use crate::run::Verdict;
use crate::seeds::{SPECS, fixture_texts};
use crate::value::Documents;
use gputopo_api::GpuTopology;
use gputopo_api::k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use gputopo_scheduler_core::dra::{DraConfig, DraInventory, DraPod};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
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

#[derive(Clone, Debug)]
pub struct Case {
    pub slice: String,
    /// Either an edited claim document, or the seed claim with this expression.
    pub claim: Result<String, String>,
    pub class_expression: String,
}

pub fn strategy() -> BoxedStrategy<Case> {
    let expressions: Arc<[String]> = EXPRESSIONS.iter().map(|e| e.to_string()).collect();
    (
        prop_oneof![2 => prop::sample::select(SLICES.to_vec()), 1 => SLICE_DOCUMENTS.json()],
        prop_oneof![
            1 => CLAIMS.json().prop_map(Ok),
            2 => texts(expressions.clone(), CEL_WORDS).prop_map(Err),
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
        Ok(doc) => serde_json::from_str(doc).unwrap_or(Value::Null),
        Err(expression) => claim(expression),
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
    match pod.fit(&inventory, &node, shape.as_ref(), &request) {
        Ok(_) => Verdict::Accepted,
        Err(_) => Verdict::Rejected,
    }
}
