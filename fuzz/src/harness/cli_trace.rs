//! `gputopo simulate`'s inputs: the openb trace CSVs (node list, pod list)
//! and the workload YAML. The reader takes paths, so each case is written
//! to a scratch directory first. What reads is simulated, under each policy
//! in turn, when it is small enough to finish in milliseconds (at most
//! [`MAX_SIMULATED_NODES`] nodes and [`MAX_SIMULATED_PODS`] pods): the
//! engine checks every placement against capacity and fails the run on a
//! breach, so a bad row that slips through shows there.

use crate::mutate::texts;
use crate::run::Verdict;
use crate::value::Documents;
use gputopo::simulate::policy::PolicyKind;
use gputopo::simulate::{self, Order, SimOptions};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

pub const MAX_SIMULATED_NODES: usize = 64;
pub const MAX_SIMULATED_PODS: usize = 512;

const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
n-0,96000,393216,8,G2
n-1,96000,393216,8,G2
n-2,64000,262144,8,V100M32
n-3,104000,524288,2,T4
n-4,32000,131072,4,V100M16
n-5,64000,262144,0,
";

const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p-0,6000,12288,1,460,,LS,Running,0,100,0
p-1,12000,16384,1,1000,,LS,Running,1,101,1
p-2,4000,8192,1,230,T4,BE,Running,2,102,2
p-3,24000,65536,2,1000,,LS,Running,3,,3
p-4,16000,32768,0,0,,LS,Running,4,104,4
p-5,8000,16384,1,810,G2|V100M32,LS,Running,5,105,5
p-6,48000,131072,4,1000,,LS,Running,6,106,6
p-7,64000,262144,8,1000,,LS,Running,7,107,7
";

const WORKLOAD: &str = "\
pods:
  - {name: \"train-{i:02}\", count: 4, gpus: 2, cpuMilli: 8000, memoryMiB: 65536, models: [G2], arrival: 0, duration: 3600}
  - {name: chat, count: 6, share: \"0.25\", cpuMilli: 2000, memoryMiB: 8192, arrival: 10.5}
  - {name: tiny, share: 250m}
  - {name: cpu-only, cpuMilli: 1000}
gangs:
  - {name: llm, members: 4, gpus: 8, cpuMilli: 32000, models: [G2, V100M32], arrival: 20, duration: 7200}
";

const WORDS: &[&str] = &[
    "sn",
    "cpu_milli",
    "memory_mib",
    "gpu",
    "model",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "creation_time",
    "deletion_time",
    "\"",
    "\"\"",
    "|",
    "G2",
    "T4",
    "1000",
    "1001",
    "32",
    "33",
    "count: ",
    "members: ",
    "share: ",
    "gpus: ",
    "models: ",
    "arrival: ",
    "duration: ",
    "{i}",
    "{i:02}",
];

/// Trace files and the policy to simulate them with.
#[derive(Clone, Debug)]
pub struct Trace {
    pub nodes: String,
    pub pods: String,
    pub policy: usize,
}

/// A scratch directory per thread, holding the files of the case being run.
fn scratch() -> PathBuf {
    thread_local! {
        static DIR: tempfile::TempDir = tempfile::tempdir().expect("a scratch directory");
    }
    DIR.with(|d| d.path().to_path_buf())
}

fn write(name: &str, text: &str) -> PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, text).expect("the scratch directory is writable");
    path
}

/// Loads and, when small, simulates.
fn load_and_simulate(nodes: &Path, pods: &Path, policy: usize) -> Verdict {
    let Ok(mut cluster) = simulate::load_cluster(nodes) else {
        return Verdict::Rejected;
    };
    let Ok(workload) = simulate::load_workload(pods, &mut cluster) else {
        return Verdict::Rejected;
    };
    if cluster.nodes.len() <= MAX_SIMULATED_NODES && workload.pods.len() <= MAX_SIMULATED_PODS {
        let options = SimOptions {
            policy: PolicyKind::ALL[policy % PolicyKind::ALL.len()],
            seed: 7,
            inflate: None,
            order: Order::Arrival,
            popularity_pct: 95.0,
            progress: false,
            omit_runtime: true,
        };
        if let Ok(result) = simulate::simulate(&cluster, &workload, &options) {
            assert_eq!(
                result.pods_placed + result.pods_failed,
                result.pods_arrived,
                "every arrived pod is placed or failed"
            );
        }
    }
    Verdict::Accepted
}

static NODE_SEEDS: LazyLock<Arc<[String]>> = LazyLock::new(|| vec![NODES.to_string()].into());
static POD_SEEDS: LazyLock<Arc<[String]>> = LazyLock::new(|| vec![PODS.to_string()].into());
static WORKLOAD_SEEDS: LazyLock<Arc<[String]>> =
    LazyLock::new(|| vec![WORKLOAD.to_string()].into());
static WORKLOADS: LazyLock<Documents> = LazyLock::new(|| Documents::new(&WORKLOAD_SEEDS));

pub mod csv {
    use super::*;

    pub fn strategy() -> BoxedStrategy<Trace> {
        (
            texts(NODE_SEEDS.clone(), WORDS),
            texts(POD_SEEDS.clone(), WORDS),
            0usize..16,
        )
            .prop_map(|(nodes, pods, policy)| Trace {
                nodes,
                pods,
                policy,
            })
            .boxed()
    }

    pub fn check(t: &Trace) -> Verdict {
        let nodes = write("nodes.csv", &t.nodes);
        let pods = write("pods.csv", &t.pods);
        load_and_simulate(&nodes, &pods, t.policy)
    }
}

pub mod workload {
    use super::*;

    pub fn strategy() -> BoxedStrategy<Trace> {
        (
            prop_oneof![texts(WORKLOAD_SEEDS.clone(), WORDS), WORKLOADS.yaml()],
            0usize..16,
        )
            .prop_map(|(pods, policy)| Trace {
                nodes: NODES.to_string(),
                pods,
                policy,
            })
            .boxed()
    }

    pub fn check(t: &Trace) -> Verdict {
        let nodes = write("nodes.csv", &t.nodes);
        let pods = write("workload.yaml", &t.pods);
        load_and_simulate(&nodes, &pods, t.policy)
    }
}
