//! The `nvidia-smi` texts the agent reads (`topo -m`, `nvlink -s`, `-q`
//! and `-q -x`), from the recorded fixtures. What a text reads into goes
//! on through the agent's pipeline: facts, the normalized spec, NVLink
//! health, node labels, the published object, and the scheduler's shape of
//! the node.

use crate::mutate::texts;
use crate::run::Verdict;
use crate::seeds::NVIDIA_TEXTS;
use gputopo_scheduler_core::gpuset::NodeShape;
use gputopo_topology::backend::nvidia_smi::facts_from_texts;
use gputopo_topology::facts::NodeFacts;
use gputopo_topology::health::{assess, degraded_condition};
use gputopo_topology::labels::{LabelOptions, node_labels};
use gputopo_topology::normalize::normalize;
use gputopo_topology::object::gpu_topology;
use gputopo_topology::parse::{nvlink_status, smi_query, topo_matrix};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;
use std::sync::{Arc, LazyLock};

/// Words of the three outputs, for insertions.
const WORDS: &[&str] = &[
    "GPU0",
    "GPU7",
    "GPU31",
    "GPU32",
    "NIC0",
    "NIC Legend",
    "mlx5_0",
    "X",
    " X ",
    "NV1",
    "NV18",
    "NV64",
    "NV4294967296",
    "SYS",
    "NODE",
    "PHB",
    "PXB",
    "PIX",
    "SOC",
    "CPU Affinity",
    "NUMA Affinity",
    "GPU NUMA ID",
    "0-63",
    "0,64",
    "0-1",
    "N/A",
    "Legend:",
    "Link 0:",
    "<inactive>",
    "25.781 GB/s",
    "GB/s",
    "GPU 0:",
    "(UUID: GPU-",
    "Bus Id",
    "00000000:17:00.0",
    "Product Name",
    "Memory",
    "MiB",
    "FB Memory Usage",
    "Total",
    ": ",
    "<gpu id=\"",
    "</gpu>",
    "<nvidia_smi_log>",
    "</nvidia_smi_log>",
    "<uuid>",
    "<total>",
    "&amp;",
    "&#x0;",
    "<![CDATA[",
];

/// A small `nvidia-smi -q -x` document (two GB200 GPUs).
const QUERY_XML: &str = r#"<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
	<driver_version>570.124.06</driver_version>
	<cuda_version>12.8</cuda_version>
	<attached_gpus>2</attached_gpus>
	<gpu id="00000000:17:00.0">
		<product_name>NVIDIA GB200</product_name>
		<mig_mode><current_mig>Enabled</current_mig></mig_mode>
		<uuid>GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde</uuid>
		<pci><pci_bus_id>00000000:17:00.0</pci_bus_id></pci>
		<numa_node>0</numa_node>
		<fb_memory_usage><total>189471 MiB</total></fb_memory_usage>
		<fabric><state>Completed</state><status>Success</status><cliqueId>32766</cliqueId>
		<clusterUuid>4a5e1c8b-0f3e-4f4e-9d3b-2a1b3c4d5e6f</clusterUuid></fabric>
	</gpu>
	<gpu id="00000000:AB:00.0">
		<product_name>NVIDIA GB200</product_name>
		<uuid>GPU-39ac7bce-e3d6-b426-008e-fa47897c72d5</uuid>
		<pci><pci_bus_id>00000000:AB:00.0</pci_bus_id></pci>
		<fb_memory_usage><total>189471 MiB</total></fb_memory_usage>
	</gpu>
</nvidia_smi_log>
"#;

/// A two-GPU matrix matching [`QUERY_XML`].
const TOPO_2GPU: &str = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n\
                         GPU0\t X \tNV18\t0-71\t0\nGPU1\tNV18\t X \t72-143\t1\n";

/// The `nvlink -s` fixtures.
static NVLINK_TEXTS: LazyLock<Arc<[String]>> = LazyLock::new(|| {
    NVIDIA_TEXTS
        .iter()
        .filter(|t| t.contains("Link 0") || t.contains("inActive"))
        .cloned()
        .collect()
});

/// The `-q` fixtures and the XML one.
static QUERY_TEXTS: LazyLock<Arc<[String]>> = LazyLock::new(|| {
    NVIDIA_TEXTS
        .iter()
        .filter(|t| t.contains("Product Name") || t.contains("Bus Id"))
        .cloned()
        .chain([QUERY_XML.to_string()])
        .collect()
});

fn all_texts() -> Arc<[String]> {
    NVIDIA_TEXTS
        .iter()
        .cloned()
        .chain([QUERY_XML.to_string(), TOPO_2GPU.to_string()])
        .collect()
}

/// A `topo -m` matrix of `n` GPUs (NV2 between neighbours, SYS otherwise),
/// the partner of a second text that names `n` GPUs, so that the two are
/// checked against each other rather than refused for their counts.
fn matrix_of(n: usize) -> String {
    let mut t: String = (0..n).map(|i| format!("\tGPU{i}")).collect();
    t.push_str("\tCPU Affinity\tNUMA Affinity\n");
    for a in 0..n {
        t.push_str(&format!("GPU{a}"));
        for b in 0..n {
            let cell = match a.abs_diff(b) {
                0 => " X ",
                1 => "NV2",
                _ => "SYS",
            };
            t.push_str(&format!("\t{cell}"));
        }
        t.push_str(&format!("\t0-15\t{}\n", a % 2));
    }
    t
}

/// GPU lists longer than this are not paired with a matrix (the CRD holds 64).
const MAX_PAIRED_GPUS: usize = 64;

/// Everything downstream of facts, as the agent runs it.
pub(super) fn publish(facts: &NodeFacts) -> Verdict {
    let Ok(spec) = normalize("node-1", facts) else {
        return Verdict::Rejected;
    };
    let findings = assess(&spec, facts);
    let now = Time("2026-01-01T00:00:00Z".parse().expect("a timestamp"));
    degraded_condition(&findings, now.clone());
    node_labels(&spec, LabelOptions::default());
    let _ = NodeShape::from_spec(&spec);
    gpu_topology(spec, &findings, now);
    Verdict::Accepted
}

pub mod topo {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        texts(all_texts(), WORDS)
    }

    pub fn check(text: &str) -> Verdict {
        if topo_matrix::parse(text).is_err() {
            return Verdict::Rejected;
        }
        match facts_from_texts(text, None, None) {
            Ok(facts) => publish(&facts),
            Err(_) => Verdict::Rejected,
        }
    }
}

pub mod nvlink {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        prop_oneof![3 => texts(NVLINK_TEXTS.clone(), WORDS), 1 => texts(all_texts(), WORDS)].boxed()
    }

    pub fn check(text: &str) -> Verdict {
        let Ok(status) = nvlink_status::parse(text) else {
            return Verdict::Rejected;
        };
        let n = status
            .gpus
            .iter()
            .map(|g| g.index as usize + 1)
            .max()
            .unwrap_or(1);
        if n > MAX_PAIRED_GPUS {
            return Verdict::Accepted;
        }
        match facts_from_texts(&matrix_of(n), Some(text), None) {
            Ok(facts) => publish(&facts),
            Err(_) => Verdict::Rejected,
        }
    }
}

pub mod query {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        prop_oneof![3 => texts(QUERY_TEXTS.clone(), WORDS), 1 => texts(all_texts(), WORDS)].boxed()
    }

    pub fn check(text: &str) -> Verdict {
        // Both readers, whatever the text looks like.
        let _ = smi_query::parse_text(text);
        let _ = smi_query::parse_xml(text);
        let Ok(query) = smi_query::parse(text) else {
            return Verdict::Rejected;
        };
        let n = query.gpus.len().max(1);
        if n > MAX_PAIRED_GPUS {
            return Verdict::Accepted;
        }
        match facts_from_texts(&matrix_of(n), None, Some(text)) {
            Ok(facts) => publish(&facts),
            Err(_) => Verdict::Rejected,
        }
    }
}
