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
