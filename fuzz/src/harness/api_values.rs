//! The contract's small parsers (what a pod, a node label or sysfs says)
//! and the `GpuTopology` object as JSON.

use crate::mutate::{EXTREMES, arbitrary_text, texts};
use crate::run::Verdict;
use crate::seeds::TOPOLOGY_OBJECTS;
use crate::value::Documents;
use gputopo_api::keys::pod as key;
use gputopo_api::{GpuRequest, GpuTopology, LinkClass, generation, quantity};
use gputopo_scheduler_core::gpuset::NodeShape;
use gputopo_scheduler_core::pod::parse_index_list;
use gputopo_scheduler_core::resources::{Resources, parse_amount};
use gputopo_topology::backend::sysfs::{format_cpulist, parse_cpulist, sysfs_pci_name};
use gputopo_topology::labels::{LabelOptions, label_value, node_labels};
use gputopo_topology::pci::canonical_pci_bus_id;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

/// Single values seen in real inputs, one per line-free seed.
fn values(list: &[&str]) -> Arc<[String]> {
    list.iter()
        .map(|s| s.to_string())
        .chain(EXTREMES.iter().map(|s| s.to_string()))
        .collect()
}

pub mod sysfs {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        texts(
            values(&[
                "0-31,64-95\n",
                "0,64",
                "",
                "0-191",
                "0,2,4,6,8,10",
                "4095",
                "00000000:17:00.0",
                "0000:c1:00.0",
                "17:00.0",
                "0x17",
                "GPU-00000000:06:00.0",
            ]),
            &["-", ",", ":", ".", "0000:", "ffffffff", "0x"],
        )
    }

    pub fn check(text: &str) -> Verdict {
        let _ = canonical_pci_bus_id(text);
        let _ = sysfs_pci_name(text);
        let cpus = parse_cpulist(text);
        if let Ok(cpus) = &cpus {
            // What the agent publishes must read back the same.
            let again = parse_cpulist(&format_cpulist(cpus.iter().copied()));
            assert_eq!(again.as_ref(), Ok(cpus), "cpulist round trip of {text:?}");
        }
        Verdict::from(&cpus)
    }
}

/// What a pod says of its GPUs: the limit, the annotations, the labels
/// that name a gang, and `spec.schedulingGroup`.
#[derive(Clone, Debug)]
pub struct PodSays {
    pub limit: Option<u32>,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub scheduling_group: Option<String>,
}

/// Each key a pod may set, with values that read (damaged in the cases).
const KEYED: &[(&str, &[&str])] = &[
    (key::MIN_NVLINK_LEVEL, &["8", "NV8", "NV64"]),
    (key::COLLECTIVE, &["ring", "all-to-all"]),
    (key::WORKLOAD, &["training", "inference"]),
    (
        key::PLACEMENT_STRATEGY,
        &["consolidated", "distributed", "balanced"],
    ),
    (key::PREFERRED_DOMAIN, &["rack-1", "leaf.2"]),
    (key::GPU_MEMORY, &["15Gi", "40000Mi", "1.5Ti"]),
    (key::LATENCY_SENSITIVE, &["true", "false"]),
    (key::GPU_SHARE, &["0.25", "0.05", "1", "12Gi"]),
    (
        key::CHECKPOINT_TIME,
        &["2026-11-21T08:00:00Z", "2026-11-21T08:00:00.5+01:00"],
    ),
    (key::EXPECTED_COMPLETION, &["2026-11-21T08:00:00Z"]),
    (
        key::NETWORK_BANDWIDTH,
        &["100Gbps", "400G", "800Mbps", "25"],
    ),
    (key::GPU_COUNT, &["4", "0"]),
    (key::GANG, &["llm-train"]),
    (key::GANG_SIZE, &["3", "10000"]),
    (key::GANG_MIXED_MODELS, &["true", "false"]),
    (key::DERIVE_GANG, &["false", "true"]),
    (key::ASSIGNED_GPUS, &["0,1,2,3", ""]),
    (
        key::ASSIGNED_GPU_UUIDS,
        &["GPU-5d6c0001-0000-4000-8000-000000000000"],
    ),
    (key::LWS_SIZE_ANNOTATION, &["4"]),
    ("topology.scheduler/gpu-count", &["4"]),
    ("topology.scheduler/preferred-domain", &["rack-1"]),
    ("gputopo.dev/unknown", &["x"]),
    ("example.com/other", &["x"]),
];

/// The labels that name a gang, with values that read.
const LABELED: &[(&str, &[&str])] = &[
    (key::POD_GROUP_LABEL, &["ddp"]),
    (key::JOBSET_NAME_LABEL, &["llama"]),
    (key::JOBSET_REPLICATED_JOB_LABEL, &["workers"]),
    (key::LWS_NAME_LABEL, &["vllm"]),
    (key::LWS_GROUP_INDEX_LABEL, &["0", "12"]),
    ("app", &["web"]),
];

/// Up to six entries, each a key of `table` with one of its values
/// (damaged), or now and then any key.
fn entries(
    table: &'static [(&'static str, &'static [&'static str])],
) -> impl Strategy<Value = BTreeMap<String, String>> {
    let keyed: Vec<BoxedStrategy<(String, String)>> = table
        .iter()
        .map(|(k, vs)| {
            let seeds: Arc<[String]> = vs.iter().map(|v| v.to_string()).collect();
            texts(seeds, &[",", "-", ".", "NV", "Gi", "m", "0", "9"])
                .prop_map(move |v| (k.to_string(), v))
                .boxed()
        })
        .collect();
    let entry = prop_oneof![
        8 => proptest::strategy::Union::new(keyed),
        1 => (arbitrary_text(), arbitrary_text()),
    ];
    prop::collection::vec(entry, 0..7).prop_map(|e| e.into_iter().collect())
}

pub mod annotations {
    use super::*;

    pub fn strategy() -> BoxedStrategy<PodSays> {
        let limit = prop_oneof![
            Just(None),
            (0u32..10).prop_map(Some),
            Just(Some(1024)),
            Just(Some(1025)),
            Just(Some(u32::MAX)),
        ];
        let group = prop_oneof![
            3 => Just(None),
            1 => texts(values(&["llm", "a.b-c"]), &["."]).prop_map(Some),
        ];
        (limit, entries(KEYED), entries(LABELED), group)
            .prop_map(|(limit, annotations, labels, scheduling_group)| PodSays {
                limit,
                annotations,
                labels,
                scheduling_group,
            })
            .boxed()
    }

    pub fn check(p: &PodSays) -> Verdict {
        let r = GpuRequest::parse_with_group(
            p.limit,
            &p.annotations,
            &p.labels,
            p.scheduling_group.as_deref(),
        );
        if let Ok(r) = &r {
            r.wants_gpus();
            if let Some(g) = &r.gang {
                g.name();
            }
        }
        if let Err(e) = &r {
            let _ = (e.key(), e.to_string());
        }
        Verdict::from(&r)
    }
}

pub mod scalars {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        texts(
            values(&[
                "16Gi",
                "1056482492Ki",
                "500m",
                "1.5",
                "2Ti",
                "1e3",
                "80",
                "NV12",
                "SYS",
                "SOC",
                "NODE",
                "X",
                "NVIDIA H100 80GB HBM3",
                "Tesla V100-SXM2-32GB",
                "NVIDIA GB200",
                "AMD Instinct MI300X",
                "NVIDIA-A100-SXM4-80GB",
                "9",
                "0,1,2,3",
            ]),
            &[
                "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "m", "n", "u", "e", "E", "NV",
            ],
        )
    }

    pub fn check(text: &str) -> Verdict {
        let bytes = quantity::parse_bytes(text);
        let _ = quantity::parse_mib(text);
        let link = text.parse::<LinkClass>();
        let _ = generation::generation_of(text);
        let _ = generation::parse_generation_label(text);
        let _ = label_value(text);
        let _ = parse_index_list(text);
        for resource in [
            "cpu",
            "memory",
            "pods",
            "nvidia.com/gpu",
            "amd.com/gpu",
            "example.com/x",
        ] {
            let _ = parse_amount("fuzz", resource, text);
        }
        let list = [("cpu", text), ("memory", text)];
        let _ = Resources::allocatable(list, "status.allocatable");
        let _ = Resources::from_list(list, "requests");
        if bytes.is_ok() || link.is_ok() {
            Verdict::Accepted
        } else {
            Verdict::Rejected
        }
    }
}

static TOPOLOGIES: LazyLock<Documents> = LazyLock::new(|| Documents::new(&TOPOLOGY_OBJECTS));

pub mod gpu_topology {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        prop_oneof![
            3 => TOPOLOGIES.json(),
            1 => texts(TOPOLOGY_OBJECTS.clone(), &["\"index\":", "\"gpus\":", "null", "[]", "{}"]),
        ]
        .boxed()
    }

    pub fn check(text: &str) -> Verdict {
        let topology = serde_json::from_str::<GpuTopology>(text);
        if let Ok(t) = &topology {
            let spec = &t.spec;
            let _ = NodeShape::from_spec(spec);
            node_labels(spec, LabelOptions::default());
            spec.vendor_or_default();
            for g in spec.gpus.iter().take(4) {
                spec.link(g.index, 0);
            }
        }
        Verdict::from(&topology)
    }
}
