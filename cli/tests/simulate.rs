//! `gputopo simulate`: invariants of small simulations, determinism, and
//! input errors that name the file, line and column.

use gputopo::simulate::policy::PolicyKind;
use gputopo::simulate::{self, Order, SimOptions, SimResult};
use std::path::{Path, PathBuf};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
n-0,96000,393216,8,G2
n-1,96000,393216,8,G2
n-2,64000,262144,8,V100M32
n-3,104000,524288,2,T4
n-4,104000,524288,2,T4
n-5,32000,131072,4,V100M16
";

/// A pod list in the openb format: shares, whole GPUs, multi-GPU, CPU-only, gpu_spec.
fn pods() -> String {
    let mut s = String::from(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n",
    );
    let shapes = [
        (6000, 12288, 1, 460, ""),
        (12000, 16384, 1, 1000, ""),
        (4000, 8192, 1, 230, "T4"),
        (24000, 65536, 2, 1000, ""),
        (16000, 32768, 0, 0, ""),
        (8000, 16384, 1, 810, "G2|V100M32"),
        (48000, 131072, 4, 1000, ""),
        (64000, 262144, 8, 1000, ""),
    ];
    for i in 0..40 {
        let (cpu, mem, n, m, spec) = shapes[i % shapes.len()];
        s.push_str(&format!(
            "p-{i},{cpu},{mem},{n},{m},{spec},LS,Running,{i},{},{i}\n",
            i + 100
        ));
    }
    s
}

fn options(policy: PolicyKind, seed: u64) -> SimOptions {
    SimOptions {
        policy,
        seed,
        inflate: Some(1.3),
        order: Order::Shuffle,
        popularity_pct: 95.0,
        progress: false,
        omit_runtime: true,
    }
}

fn run_csv(dir: &Path, policy: PolicyKind, seed: u64) -> SimResult {
    let nodes = write(dir, "nodes.csv", NODES);
    let pods = write(dir, "pods.csv", &pods());
    let mut cluster = simulate::load_cluster(&nodes).unwrap();
    let workload = simulate::load_workload(&pods, &mut cluster).unwrap();
    simulate::simulate(&cluster, &workload, &options(policy, seed)).unwrap()
}

#[test]
fn every_policy_keeps_gpus_within_capacity() {
    let dir = tempfile::tempdir().unwrap();
    for policy in PolicyKind::ALL {
        // The engine checks every placement (milli per GPU <= 1000, whole GPUs
        // exclusive, CPU, memory, models) and fails the run on a breach.
        let r = run_csv(dir.path(), policy, 42);
        assert_eq!(r.pods_placed + r.pods_failed, r.pods_arrived, "{policy:?}");
        assert!(
            r.arrived_gpu_pct >= 130.0,
            "{policy:?}: {}",
            r.arrived_gpu_pct
        );
        assert!(r.final_gpu_allocation_pct <= 100.0);
        assert!(r.pods_placed > 0, "{policy:?} placed nothing");
        let pcts: Vec<u32> = r.points.iter().map(|p| p.arrived_pct).collect();
        assert_eq!(pcts, (1..=13).map(|i| i * 10).collect::<Vec<_>>());
        for w in r.points.windows(2) {
            // Nothing ends under the FGD protocol: allocation never drops.
            assert!(w[1].gpu_allocation_pct >= w[0].gpu_allocation_pct);
        }
    }
}

#[test]
fn same_seed_same_bytes_other_seed_differs() {
    let dir = tempfile::tempdir().unwrap();
    for policy in [PolicyKind::Random, PolicyKind::Fgd, PolicyKind::Gputopo] {
        let a = serde_json::to_string(&run_csv(dir.path(), policy, 7)).unwrap();
        let b = serde_json::to_string(&run_csv(dir.path(), policy, 7)).unwrap();
        assert_eq!(a, b, "{policy:?}");
        let c = serde_json::to_string(&run_csv(dir.path(), policy, 8)).unwrap();
        assert_ne!(a, c, "{policy:?}");
    }
}

#[test]
fn gangs_are_whole_or_absent_and_pods_end() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write(
        dir.path(),
        "w.yaml",
        &gputopo::simulate::generate::workload_yaml(120, 3),
    );
    let cluster_file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/clusters/mixed-12.yaml");
    for policy in [PolicyKind::Gputopo, PolicyKind::Fgd, PolicyKind::K8sDefault] {
        let mut cluster = simulate::load_cluster(&cluster_file).unwrap();
        let w = simulate::load_workload(&workload, &mut cluster).unwrap();
        let gangs = w.gangs.len() as u64;
        assert!(gangs > 0);
        let mut o = options(policy, 1);
        o.inflate = None;
        o.order = Order::Arrival;
        let r = simulate::simulate(&cluster, &w, &o).unwrap();
        assert_eq!(r.gangs_placed + r.gangs_failed, gangs, "{policy:?}");
        assert!(r.pods_ended > 0, "{policy:?}: durations end pods");
        assert_eq!(r.pods_placed + r.pods_failed, r.pods_arrived);
    }
}

#[test]
fn csv_errors_name_file_line_column_and_what_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad-pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np-0,1000,1024,1,500\np-1,1000,1024,two,500\n",
    );
    let mut cluster = simulate::load_cluster(&write(dir.path(), "n.csv", NODES)).unwrap();
    let e = simulate::load_workload(&bad, &mut cluster)
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad-pods.csv"), "{e}");
    assert!(e.contains("line 3"), "{e}");
    assert!(e.contains("\"num_gpu\""), "{e}");
    assert!(e.contains("accepted: a GPU count"), "{e}");

    let missing = write(
        dir.path(),
        "nodes-bad.csv",
        "sn,cpu,memory_mib,gpu,model\nn,1,1,1,T4\n",
    );
    let e = simulate::load_cluster(&missing).err().unwrap().to_string();
    assert!(
        e.contains("nodes-bad.csv") && e.contains("cpu_milli"),
        "{e}"
    );

    let share = write(
        dir.path(),
        "share.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,500\n",
    );
    let e = simulate::load_workload(&share, &mut cluster)
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2") && e.contains("gpu_milli"), "{e}");
}

#[test]
fn trace_pods_arrive_shuffled_before_their_resampled_copies() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = write(dir.path(), "nodes.csv", NODES);
    let pods = write(dir.path(), "pods.csv", &pods());
    let mut cluster = simulate::load_cluster(&nodes).unwrap();
    let workload = simulate::load_workload(&pods, &mut cluster).unwrap();
    // As for a cluster of 100 GPUs: the 40 pods ask 82.5, so copies follow.
    let total_milli = 100 * 1000;
    let (all, units) =
        simulate::arrival_plan(&workload, total_milli, &options(PolicyKind::Fgd, 5)).unwrap();
    let originals = workload.pods.len();
    assert!(all.len() > originals, "inflation adds copies");
    let mut first: Vec<usize> = units[..originals].iter().map(|u| u[0]).collect();
    assert_ne!(first, (0..originals).collect::<Vec<_>>(), "shuffled");
    first.sort_unstable();
    assert_eq!(
        first,
        (0..originals).collect::<Vec<_>>(),
        "every trace pod first, once"
    );
    assert!(units[originals..].iter().all(|u| u[0] >= originals));
}

/// A topology-rich cluster on two leaves, written with absolute fixture paths.
fn rich_cluster(dir: &Path) -> PathBuf {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let f = |p: &str| fixtures.join(p).display().to_string();
    let text = format!(
        "tiers: gputopo
topologies:
  dgx1: {{file: {}}}
  a100: {{file: {}}}
  pcie: {{file: {}}}
nodes:
  - {{name: \"dgx1-{{i}}\", count: 3, topology: dgx1, labels: {{gputopo.dev/spine: s, gputopo.dev/leaf: l1}}, allocatable: {{cpu: 80, memory: 512Gi}}}}
  - {{name: \"pcie-{{i}}\", count: 2, topology: pcie, labels: {{gputopo.dev/spine: s, gputopo.dev/leaf: l1}}, allocatable: {{cpu: 64, memory: 256Gi}}}}
  - {{name: \"a100-{{i}}\", count: 4, topology: a100, labels: {{gputopo.dev/spine: s, gputopo.dev/leaf: l2}}, allocatable: {{cpu: 128, memory: 1Ti}}}}
",
        f("recorded/dgx1-v100-nvml.yaml"),
        f("nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt"),
        f("nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt"),
    );
    write(dir, "rich.yaml", &text)
}

#[test]
fn topology_metrics_hold_their_invariants() {
    let dir = tempfile::tempdir().unwrap();
    let cluster_file = rich_cluster(dir.path());
    let workload = write(
        dir.path(),
        "w.yaml",
        &gputopo::simulate::generate::workload_yaml(80, 11),
    );
    for policy in [
        PolicyKind::Gputopo,
        PolicyKind::Fgd,
        PolicyKind::BestFit,
        PolicyKind::Random,
        PolicyKind::GpuAllocator,
    ] {
        let mut cluster = simulate::load_cluster(&cluster_file).unwrap();
        let w = simulate::load_workload(&workload, &mut cluster).unwrap();
        let last_arrival = w.pods.iter().map(|p| p.arrival).fold(0.0, f64::max);
        let mut o = options(policy, 3);
        o.inflate = None;
        o.order = Order::Arrival;
        let r = simulate::simulate(&cluster, &w, &o).unwrap();
        let t = r
            .topology
            .as_ref()
            .expect("wired nodes give topology metrics");
        // Queued units start once room appears; every unit fits the empty cluster.
        assert_eq!(r.pods_failed, 0, "{policy:?}");
        assert_eq!(r.pods_placed, r.pods_arrived);
        let (p50, p99) = (r.queue_time_p50_s.unwrap(), r.queue_time_p99_s.unwrap());
        assert!(0.0 <= p50 && p50 <= p99, "{policy:?}: {p50} {p99}");
        assert!(r.makespan_s.unwrap() > last_arrival, "{policy:?}");
        assert!(t.multi_gpu_pods > 0);
        let optimal = t.on_optimal_set_pct.unwrap();
        assert!((0.0..=100.0).contains(&optimal));
        assert_eq!(t.bottlenecks.values().sum::<u64>(), t.multi_gpu_pods);
        let rank = t.mean_bottleneck_rank.unwrap();
        assert!((1.0..=25.0).contains(&rank), "{rank}");
        assert_eq!(t.gangs_placed, r.gangs_placed);
        assert!(t.gangs_spanning_leaves <= t.gangs_placed);
        // Pods only take slots away from the empty cluster (4 NVSwitch nodes;
        // a DGX-1 has no 8-GPU all-NVLink set, a PCIe box none).
        assert_eq!(t.full_nvlink_slots8_at_start, 4);
        let (min, mean) = (
            t.full_nvlink_slots8_min.unwrap(),
            t.full_nvlink_slots8_mean.unwrap(),
        );
        assert!(min as f64 <= mean && mean <= 4.0, "{min} {mean}");
        assert!(t.full_nvlink_slots8_at_end <= 4);
        assert!(
            r.points
                .iter()
                .all(|p| p.full_nvlink_slots8.is_some_and(|s| s <= 4))
        );
        if policy == PolicyKind::Gputopo {
            // scheduler-core's set choice is exact: always the node's best.
            assert_eq!(optimal, 100.0);
        }
        // Whole domains free: one spine, two leaves, all free at the start.
        let tiers: Vec<(&str, u64)> = r
            .whole_domains_free
            .iter()
            .map(|d| (d.tier.as_str(), d.domains))
            .collect();
        assert_eq!(
            tiers,
            [("gputopo.dev/spine", 1), ("gputopo.dev/leaf", 2)],
            "{policy:?}"
        );
        for d in &r.whole_domains_free {
            assert_eq!(d.at_start, d.domains, "{policy:?}");
            assert!(
                d.min as f64 <= d.mean && d.mean <= d.domains as f64,
                "{d:?}"
            );
            assert!(d.min <= d.at_end && d.at_end <= d.domains, "{d:?}");
        }
    }
}

#[test]
fn trace_clusters_have_no_domains_to_report() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_csv(dir.path(), PolicyKind::Gputopo, 1);
    assert!(r.whole_domains_free.is_empty());
    let json = serde_json::to_string(&r).unwrap();
    assert!(!json.contains("wholeDomainsFree"), "{json}");
}
