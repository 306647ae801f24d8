//! The slice of the fuzzing that runs in CI: every harness, a few cases
//! each (`GPUTOPO_FUZZ_CASES`, default 64; `GPUTOPO_FUZZ_SEED` picks the
//! inputs). A panic fails the test with the smallest input found. The full
//! run is `scripts/fuzz` (BENCHMARKS.md, "Fuzzing").

use gputopo_fuzz::harness::{ALL, Harness};
use gputopo_fuzz::{DEFAULT_CASES, DEFAULT_SEED, env_u64};

fn slice(name: &str) {
    let harness: &Harness = ALL
        .iter()
        .find(|h| h.name == name)
        .unwrap_or_else(|| panic!("no harness {name:?}"));
    let cases = env_u64("GPUTOPO_FUZZ_CASES", DEFAULT_CASES);
    let seed = env_u64("GPUTOPO_FUZZ_SEED", DEFAULT_SEED);
    let report = (harness.run)(cases, seed);
    if let Some(p) = &report.first_panic {
        panic!(
            "{name}: {} of {} cases panicked (seed {seed}); smallest input:\n{}\npanic: {}",
            report.panics, report.cases, p.input, p.message
        );
    }
    assert_eq!(report.cases, cases, "{name}: every case ran");
    assert_eq!(report.accepted + report.rejected, report.cases);
}

macro_rules! slices {
    ($($test:ident => $name:literal,)*) => {
        $(#[test] fn $test() { slice($name); })*

        #[test]
        fn every_harness_has_a_slice() {
            let covered = [$($name),*];
            for h in ALL {
                assert!(covered.contains(&h.name), "no slice runs {:?}", h.name);
            }
        }
    };
}

slices! {
    nvidia_smi_topo => "nvidia-smi topo -m",
    nvidia_smi_nvlink => "nvidia-smi nvlink -s",
    nvidia_smi_query => "nvidia-smi -q / -q -x",
    nvml_recording => "NVML recording (YAML)",
    rocm_smi => "rocm-smi --showtopo",
    amd_smi => "amd-smi topology (text, JSON)",
    sysfs => "sysfs cpulists, PCI bus ids",
    pod_annotations => "pod annotations and labels",
    scalars => "quantities, link classes, GPU generations",
    gpu_topology_json => "GpuTopology JSON",
    watched_gpu_topology => "watched GpuTopology",
    watched_pod_group => "watched PodGroup (x-k8s.io)",
    watched_upstream_pod_group => "watched PodGroup (k8s.io)",
    watched_jobset => "watched JobSet",
    watched_leader_worker_set => "watched LeaderWorkerSet",
    snapshot_schedule => "snapshot + schedule",
    dra => "DRA slices, claims, CEL",
    extender_bodies => "extender request bodies",
    scheduler_config => "scheduler config file",
    trace_csv => "trace CSVs (simulate)",
    workload_yaml => "workload YAML (simulate)",
    cluster_files => "cluster files (explain, place)",
    pod_files => "pod files (explain)",
    topology_files => "topology files (place)",
    saved_pod_resources => "saved PodResources answers",
    device_ids => "kubelet device IDs",
    device_plugin => "device plugin claims",
}
