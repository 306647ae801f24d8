//! Snapshot memory per node: builds the bench cluster (5,000 GPU nodes, 12
//! labels and a taint each, ~2 bound pods per node, two GPU models) under a
//! counting allocator and prints the bytes the snapshot holds.
//!
//! `cargo run --release -p gputopo-scheduler-core --example snapshot_memory [NODES]`

#[path = "../benches/common/cluster.rs"]
mod cluster;
#[path = "common/counting.rs"]
mod counting;

fn main() {
    let nodes: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5_000);
    let before = counting::live_bytes();
    let snapshot = cluster::cluster(nodes);
    let total = counting::live_bytes() - before;
    let shapes: usize = snapshot.shapes().map(|s| s.table_bytes()).sum();
    let pods = snapshot.pods().count();
    println!(
        "{nodes} nodes, {pods} bound pods, {} shapes, {} interned strings",
        snapshot.shapes().count(),
        snapshot.interned_strings()
    );
    println!(
        "snapshot: {total} bytes = {:.0} bytes per node (link and NUMA tables {shapes} bytes; the rest is nodes, pods, strings and each shape's answer cache)",
        total as f64 / nodes as f64
    );
    drop(snapshot);
    let before = counting::live_bytes();
    // Five nodes hold both models: what does not grow with the cluster.
    let small = cluster::cluster(5);
    let fixed = counting::live_bytes() - before;
    println!(
        "fixed (5 nodes: shapes, tables, answer caches): {fixed} bytes; marginal per node: {:.0} bytes",
        total.saturating_sub(fixed) as f64 / (nodes.saturating_sub(5).max(1)) as f64
    );
    drop(small);
    let before = counting::live_bytes();
    let bare = cluster::cluster_with(nodes, false);
    let without_pods = counting::live_bytes() - before;
    println!(
        "without bound pods: {:.0} bytes per node; so about {:.0} bytes per bound pod",
        without_pods as f64 / nodes as f64,
        total.saturating_sub(without_pods) as f64 / pods.max(1) as f64
    );
    drop(bare);
}
