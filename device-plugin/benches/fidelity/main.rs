//! Device-plugin fidelity (issue #11, part 4): the share of pods whose
//! devices equal the scheduler's choice, when the kubelet asks NVIDIA's
//! device plugin (go-gpuallocator's best-effort rule, [`nvidia`]) and when it
//! asks gputopo's (`prefer`), on recorded machines ([`machines`]) under a
//! seeded stream of 1/2/4/8-GPU pods that keeps each node 60-90% busy
//! ([`workload`]), replayed by [`replay`]. Also how often a pod ends up with
//! a worse weakest link than the scheduler chose.
//!
//! `cargo bench -p gputopo-device-plugin --bench fidelity` prints the tables
//! docs/benchmarks/device-plugin-fidelity.md holds (their totals:
//! BENCHMARKS.md, "Device-plugin fidelity"). Two admission orders: the
//! kubelet admitting each burst's pods in creation order (what it does for
//! pods it sees together), and a quarter of the bursts out of order; then a
//! stream where a fifth of the pods come from another scheduler, with no
//! record: what they get (the topology rule's path) and what they take from
//! the pods gputopo placed.

mod machines;
mod nvidia;
mod replay;
mod workload;

use machines::Machine;
use replay::{Rule, Tally, replay};
use workload::Mix;

const SEEDS: [u64; 5] = [1, 2, 3, 4, 5];
const PODS: u32 = 2_000;
/// The share of pods another scheduler placed, in the last table.
const UNPLACED: f64 = 0.2;

/// Both rules over every seed of one machine and mix; the mean busy share.
fn run(machine: &Machine, mix: Mix) -> (Tally, Tally, f64) {
    let (mut nvidia, mut gputopo) = (Tally::default(), Tally::default());
    let mut busy = 0.0;
    for &seed in &SEEDS {
        let stream = workload::stream(machine.gpus, PODS, seed, mix);
        busy += stream.mean_busy / SEEDS.len() as f64;
        nvidia.add(&replay(machine, &stream, Rule::Nvidia, seed));
        gputopo.add(&replay(machine, &stream, Rule::Gputopo, seed));
    }
    (nvidia, gputopo, busy)
}

fn pct(part: u64, whole: u64) -> String {
    format!("{:.1}%", 100.0 * part as f64 / whole.max(1) as f64)
}

/// The rule as the library describes it, on cases whose answer is known.
fn check_nvidia_rule(machines: &[machines::Machine]) {
    let by_name = |n: &str| machines.iter().find(|m| m.name == n).expect(n);
    // DGX-1: two GPUs joined by two NVLinks (0-3 is NV2 there).
    let dgx1 = by_name("DGX-1 V100 cube mesh");
    let pair = dgx1.nvidia.best_effort(&(0..8).collect::<Vec<_>>(), 2);
    assert_eq!(pair.len(), 2);
    assert!(
        dgx1.nvidia.score[pair[0] as usize][pair[1] as usize] >= 200,
        "an NV2 pair, got {pair:?}"
    );
    // Bridged A100 pairs: two GPUs are a bridged pair, whatever the order.
    let bridged = by_name("4x A100 PCIe, NV12 pairs");
    for order in [[0, 1, 2, 3], [3, 1, 2, 0], [2, 0, 3, 1]] {
        let mut pair = bridged.nvidia.best_effort(&order, 2);
        pair.sort_unstable();
        assert!(pair == [0, 1] || pair == [2, 3], "{order:?}: {pair:?}");
    }
    // NVSwitch: NVLinks to the switch do not count, only PCIe (0-1 share one).
    let h100 = by_name("HGX H100 NVSwitch");
    assert_eq!(h100.nvidia.score[0][1], 40);
    assert_eq!(h100.nvidia.best_effort(&[5, 1, 0, 6], 1), [5]);
}

fn main() {
    let machines = machines::all();
    check_nvidia_rule(&machines);
    println!(
        "Device-plugin fidelity: {PODS} pods x {} seeds per machine and order",
        SEEDS.len()
    );
    for (title, out_of_order) in [
        ("admitted in creation order", 0.0),
        ("25% of bursts admitted out of creation order", 0.25),
    ] {
        let mix = Mix {
            out_of_order,
            unplaced: 0.0,
        };
        println!("\n## {title}\n");
        println!(
            "| machine | GPUs | busy | NVIDIA: equal | NVIDIA: worse link | gputopo: equal | gputopo: worse link | gputopo outcomes (matched/ambiguous/topology-rule/none) |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---|");
        let (mut all_nvidia, mut all_gputopo) = (Tally::default(), Tally::default());
        for machine in &machines {
            let (nvidia, gputopo, busy) = run(machine, mix);
            let outcomes = ["matched", "ambiguous", "topology-rule", "none"]
                .map(|k| gputopo.outcomes.get(k).copied().unwrap_or(0).to_string())
                .join("/");
            println!(
                "| {} | {} | {:.0}% | {} | {} | {} | {} | {} |",
                machine.name,
                machine.gpus,
                100.0 * busy,
                pct(nvidia.equal, nvidia.pods),
                pct(nvidia.worse, nvidia.pods),
                pct(gputopo.equal, gputopo.pods),
                pct(gputopo.worse, gputopo.pods),
                outcomes
            );
            all_nvidia.add(&nvidia);
            all_gputopo.add(&gputopo);
        }
        println!(
            "| **all** ({} pods) | | | {} | {} | {} | {} | |",
            all_nvidia.pods,
            pct(all_nvidia.equal, all_nvidia.pods),
            pct(all_nvidia.worse, all_nvidia.pods),
            pct(all_gputopo.equal, all_gputopo.pods),
            pct(all_gputopo.worse, all_gputopo.pods),
        );
    }
    unplaced_table(&machines);
}

/// Pods gputopo placed and pods another scheduler placed, side by side.
fn unplaced_table(machines: &[Machine]) {
    let mix = Mix {
        out_of_order: 0.0,
        unplaced: UNPLACED,
    };
    println!(
        "\n## {:.0}% of pods placed by another scheduler (no record), admitted in creation order\n",
        100.0 * UNPLACED
    );
    println!(
        "| machine | placed by gputopo: NVIDIA equal | gputopo equal | others: NVIDIA worse than best | gputopo worse than best | others took a chosen GPU: NVIDIA | gputopo |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let (mut all_nvidia, mut all_gputopo) = (Tally::default(), Tally::default());
    for machine in machines {
        let (nvidia, gputopo, _) = run(machine, mix);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            machine.name,
            pct(nvidia.equal, nvidia.pods),
            pct(gputopo.equal, gputopo.pods),
            pct(nvidia.unplaced_worse, nvidia.unplaced),
            pct(gputopo.unplaced_worse, gputopo.unplaced),
            pct(nvidia.took_chosen, nvidia.unplaced),
            pct(gputopo.took_chosen, gputopo.unplaced),
        );
        all_nvidia.add(&nvidia);
        all_gputopo.add(&gputopo);
    }
    println!(
        "| **all** ({} placed, {} others) | {} | {} | {} | {} | {} | {} |",
        all_gputopo.pods,
        all_gputopo.unplaced,
        pct(all_nvidia.equal, all_nvidia.pods),
        pct(all_gputopo.equal, all_gputopo.pods),
        pct(all_nvidia.unplaced_worse, all_nvidia.unplaced),
        pct(all_gputopo.unplaced_worse, all_gputopo.unplaced),
        pct(all_nvidia.took_chosen, all_nvidia.unplaced),
        pct(all_gputopo.took_chosen, all_gputopo.unplaced),
    );
}
