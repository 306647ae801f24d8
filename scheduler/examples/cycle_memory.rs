//! What the scheduler holds beside the watched objects, part by part, on
//! the `cycle` bench's cluster (DGX A100 nodes, two bound pods each): the
//! heap bytes live after each step, counted by a global allocator.
//!
//! `cargo run --release -p gputopo-scheduler --example cycle_memory -- 5000`

#[path = "../benches/common/cluster.rs"]
mod cluster;
#[path = "../../scheduler-core/examples/common/counting.rs"]
mod counting;

use gputopo_scheduler::cluster::{AssumeCache, Objects, ReadingTrust, build_snapshot};
use gputopo_scheduler::config::Settings;
use gputopo_scheduler::cycle::{Clock, Cycle};
use gputopo_scheduler::gangs::GangObjects;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::snapshot::from_k8s::{bound_pod_input, node_input_shared};

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn main() {
    let size: usize = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 5_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: cycle_memory [NODES], NODES a positive whole number (default 5000)");
            std::process::exit(2);
        }
    };
    let start = counting::live_bytes();
    let cl = cluster::cluster(size);
    let objects_done = counting::live_bytes();
    // The parts of the objects, measured by building each kind alone.
    let (nodes, topologies, pods) = {
        let before = counting::live_bytes();
        let n = cl.nodes.iter().map(|n| (**n).clone()).collect::<Vec<_>>();
        let after_nodes = counting::live_bytes();
        let t = cl
            .topologies
            .iter()
            .map(|t| (**t).clone())
            .collect::<Vec<_>>();
        let after_topologies = counting::live_bytes();
        let p = cl.pods.iter().map(|p| (**p).clone()).collect::<Vec<_>>();
        let after_pods = counting::live_bytes();
        drop((n, t, p));
        (
            after_nodes - before,
            after_topologies - after_nodes,
            after_pods - after_topologies,
        )
    };
    let gangs = GangObjects::default();
    let dra = gputopo_scheduler::claims::DraObjects::default();
    let objects = Objects {
        nodes: &cl.nodes,
        topologies: &cl.topologies,
        pods: &cl.pods,
        namespaces: &[],
        workloads: &gputopo_scheduler::workload_objects::NO_WORKLOADS,
        storage: &gputopo_scheduler::storage_objects::NO_STORAGE,
        gangs: &gangs,
        dra: &dra,
        changed: None,
    };
    // What the live snapshot keeps to rebuild from: each node's and bound
    // pod's input; and a snapshot built from them.
    let trust = ReadingTrust::at(k8s_openapi::jiff::Timestamp::now());
    // Node inputs hold the watched objects' specs, as the scheduler's do.
    let before_inputs = counting::live_bytes();
    let node_inputs: Vec<_> = cl
        .nodes
        .iter()
        .zip(&cl.topologies)
        .filter_map(|(n, t)| node_input_shared(n, Some(t), trust).ok())
        .collect();
    let after_nodes = counting::live_bytes();
    let pod_inputs: Vec<_> = cl
        .pods
        .iter()
        .filter_map(|p| bound_pod_input(p).ok().flatten())
        .collect();
    let after_inputs = counting::live_bytes();
    let node_inputs_bytes = after_nodes - before_inputs;
    drop((node_inputs, pod_inputs));
    let before_snapshot = counting::live_bytes();
    let built = build_snapshot(
        &objects,
        &AssumeCache::default(),
        &SchedulerConfig::default(),
        trust,
    );
    let snapshot = counting::live_bytes() - before_snapshot;
    drop(built);
    let before_cycle = counting::live_bytes();
    let mut cycle = Cycle::new(Settings::default());
    let prepared = cycle.prepare(&objects, Clock::system());
    let with_copy = counting::live_bytes();
    drop(prepared);
    let kept = counting::live_bytes();
    println!("{size} nodes, {} pods (heap bytes live)", cl.pods.len());
    println!(
        "watched objects, as the stores hold them: {} (nodes {}, GpuTopology {}, pods {})",
        mib(objects_done - start),
        mib(nodes),
        mib(topologies),
        mib(pods)
    );
    println!(
        "kept by the cycle between cycles (pods by key, pending, the live snapshot and its inputs): {}",
        mib(kept - before_cycle)
    );
    println!(
        "  of which inputs kept to rebuild from: {} (nodes {}, bound pods {}); the snapshot: {}",
        mib(after_inputs - before_inputs),
        mib(node_inputs_bytes),
        mib(after_inputs - after_nodes),
        mib(snapshot)
    );
    println!(
        "a cycle's working copy of the snapshot, beside it: {}",
        mib(with_copy - kept)
    );
    std::hint::black_box(&cycle);
}
