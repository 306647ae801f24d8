//! What the scheduler holds beside the watched objects, part by part, on
//! the `cycle` bench's cluster (DGX A100 nodes, two bound pods each): the
//! heap bytes live after each step, counted by a global allocator.
//!
//! `cargo run --release -p gputopo-scheduler --example cycle_memory -- 5000`

#[path = "../benches/common/cluster.rs"]
mod cluster;

use gputopo_scheduler::cluster::{AssumeCache, Objects, ReadingTrust, build_snapshot};
use gputopo_scheduler::config::Settings;
use gputopo_scheduler::cycle::{Clock, Cycle};
use gputopo_scheduler::gangs::GangObjects;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::snapshot::kube::{bound_pod_input, node_input};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a
// counter is kept beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

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
    let start = LIVE.load(Ordering::Relaxed);
    let cl = cluster::cluster(size);
    let objects_done = LIVE.load(Ordering::Relaxed);
    // The parts of the objects, measured by building each kind alone.
    let (nodes, topologies, pods) = {
        let before = LIVE.load(Ordering::Relaxed);
        let n = cl.nodes.iter().map(|n| (**n).clone()).collect::<Vec<_>>();
        let after_nodes = LIVE.load(Ordering::Relaxed);
        let t = cl
            .topologies
            .iter()
            .map(|t| (**t).clone())
            .collect::<Vec<_>>();
        let after_topologies = LIVE.load(Ordering::Relaxed);
        let p = cl.pods.iter().map(|p| (**p).clone()).collect::<Vec<_>>();
        let after_pods = LIVE.load(Ordering::Relaxed);
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
        gangs: &gangs,
        dra: &dra,
        changed: None,
    };
    // What the live snapshot keeps to rebuild from: each node's and bound
    // pod's input; and a snapshot built from them.
    let trust = ReadingTrust::at(k8s_openapi::jiff::Timestamp::now());
    let before_inputs = LIVE.load(Ordering::Relaxed);
    let inputs = (
        cl.nodes
            .iter()
            .zip(&cl.topologies)
            .filter_map(|(n, t)| node_input(n, Some(t), trust).ok())
            .collect::<Vec<_>>(),
        cl.pods
            .iter()
            .filter_map(|p| bound_pod_input(p).ok().flatten())
            .collect::<Vec<_>>(),
    );
    let after_inputs = LIVE.load(Ordering::Relaxed);
    let node_inputs = {
        let before = LIVE.load(Ordering::Relaxed);
        let n = inputs.0.clone();
        let after = LIVE.load(Ordering::Relaxed);
        drop(n);
        after - before
    };
    drop(inputs);
    let before_snapshot = LIVE.load(Ordering::Relaxed);
    let built = build_snapshot(
        &objects,
        &AssumeCache::default(),
        &SchedulerConfig::default(),
        trust,
    );
    let snapshot = LIVE.load(Ordering::Relaxed) - before_snapshot;
    drop(built);
    let before_cycle = LIVE.load(Ordering::Relaxed);
    let mut cycle = Cycle::new(Settings::default());
    let prepared = cycle.prepare(&objects, Clock::system());
    let with_copy = LIVE.load(Ordering::Relaxed);
    drop(prepared);
    let kept = LIVE.load(Ordering::Relaxed);
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
        mib(node_inputs),
        mib(after_inputs - before_inputs - node_inputs),
        mib(snapshot)
    );
    println!(
        "a cycle's working copy of the snapshot, beside it: {}",
        mib(with_copy - kept)
    );
    std::hint::black_box(&cycle);
}
