//! One harness per parser of untrusted input. Each module has a
//! `strategy()` (the inputs: recorded fixtures damaged, documents edited,
//! arbitrary text) and a `check()` (the parser, and what runs on what it
//! read, down to a scheduling decision where there is one). `check` returns
//! whether the input was read or refused; it must never panic.
//!
//! [`ALL`] lists them in the order the figures are printed.

use crate::run::{self, Report};

mod agent;
mod amd;
mod api_values;
mod cli_cluster;
mod cli_trace;
mod config;
mod device_plugin;
mod dra;
mod extender;
mod nvidia_smi;
mod recording;
mod schedule;
mod watched;

/// A harness: its name in the figures, what it feeds, and how to run it.
pub struct Harness {
    pub name: &'static str,
    /// The parser (and what runs after it).
    pub target: &'static str,
    /// Runs `cases` inputs drawn with `seed`.
    pub run: fn(cases: u64, seed: u64) -> Report,
    /// The input of one case, as `{:?}` (to replay a case that hung).
    pub input: fn(seed: u64, case: u64) -> Option<String>,
}

macro_rules! harness {
    ($name:literal, $target:literal, $module:path) => {{
        use $module as m;
        Harness {
            name: $name,
            target: $target,
            run: |cases, seed| run::run($name, &m::strategy(), cases, seed, |v| m::check(v)),
            input: |seed, case| {
                run::nth_input(&m::strategy(), seed, case).map(|v| format!("{v:?}"))
            },
        }
    }};
}

pub static ALL: &[Harness] = &[
    harness!(
        "nvidia-smi topo -m",
        "topo_matrix::parse, facts, normalize, health, labels",
        nvidia_smi::topo
    ),
    harness!(
        "nvidia-smi nvlink -s",
        "nvlink_status::parse, facts_from_texts with a topo -m",
        nvidia_smi::nvlink
    ),
    harness!(
        "nvidia-smi -q / -q -x",
        "smi_query::parse (text and XML), facts_from_texts with a topo -m",
        nvidia_smi::query
    ),
    harness!(
        "NVML recording (YAML)",
        "Recording::from_yaml_str, replay (NVML, AMD SMI, commands), normalize",
        recording::nvml_recording
    ),
    harness!(
        "rocm-smi --showtopo",
        "rocm_smi::parse, AMD facts, normalize",
        amd::rocm_smi
    ),
    harness!(
        "amd-smi topology (text, JSON)",
        "amd_smi::parse, AMD facts, normalize",
        amd::amd_smi
    ),
    harness!(
        "sysfs cpulists, PCI bus ids",
        "parse_cpulist, canonical_pci_bus_id, sysfs_pci_name",
        api_values::sysfs
    ),
    harness!(
        "pod annotations and labels",
        "GpuRequest::parse_with_group (gang.rs included)",
        api_values::annotations
    ),
    harness!(
        "quantities, link classes, GPU generations",
        "quantity::parse_bytes/parse_mib, LinkClass, generation_of, the label, resources",
        api_values::scalars
    ),
    harness!(
        "GpuTopology JSON",
        "serde GpuTopology, NodeShape::from_spec, node_labels",
        api_values::gpu_topology
    ),
    harness!(
        "watched GpuTopology",
        "Checked<GpuTopology>, node_input",
        watched::gpu_topology
    ),
    harness!(
        "watched PodGroup (x-k8s.io)",
        "Checked<PodGroup>, GangObjects::size, to_core",
        watched::pod_group
    ),
    harness!(
        "watched PodGroup (k8s.io)",
        "Checked<scheduling/v1beta1 PodGroup>, GangObjects::size",
        watched::upstream_pod_group
    ),
    harness!(
        "watched JobSet",
        "Checked<JobSet>, GangObjects::size",
        watched::jobset
    ),
    harness!(
        "watched LeaderWorkerSet",
        "Checked<LeaderWorkerSet>, GangObjects::size",
        watched::leader_worker_set
    ),
    harness!(
        "snapshot + schedule",
        "build_snapshot over decoded nodes, topologies, pods; schedule_pod",
        schedule
    ),
    harness!(
        "DRA slices, claims, CEL",
        "DraInventory::build, DraPod::new (CEL compile), fit",
        dra
    ),
    harness!(
        "extender request bodies",
        "decode_args, filter, prioritize; decode_binding, plan_binding",
        extender
    ),
    harness!("scheduler config file", "Settings::from_yaml", config),
    harness!(
        "trace CSVs (simulate)",
        "read_node_csv, read_pod_csv, simulate",
        cli_trace::csv
    ),
    harness!(
        "workload YAML (simulate)",
        "read_workload_yaml, simulate",
        cli_trace::workload
    ),
    harness!(
        "cluster files (explain, place)",
        "cluster::load (compact and kind: List), explain_pod, the report",
        cli_cluster::cluster
    ),
    harness!(
        "pod files (explain)",
        "cluster::load_pod, explain_pod, the report",
        cli_cluster::pod_file
    ),
    harness!(
        "topology files (place)",
        "topology::load (object, spec, recording, topo -m), parse_free, parse_level, place",
        cli_cluster::topology_file
    ),
    harness!(
        "saved PodResources answers",
        "podres::saved::parse, map_answer",
        agent::saved_answer
    ),
    harness!("kubelet device IDs", "NodeGpus::resolve", agent::device_ids),
    harness!(
        "device plugin claims",
        "claim_of, Inventory::from_spec, mask_of, prefer, DeviceListStrategy",
        device_plugin
    ),
];
