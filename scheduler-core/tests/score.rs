//! Score orderings: each strategy and signal moves the choice the way its
//! documentation says, with everything else equal.

mod common;

use common::*;
use gputopo_api::GpuShare;
use gputopo_scheduler_core::config::{SchedulerConfig, ScoreWeights};
use gputopo_scheduler_core::explain::{Verdict, explain};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::selector::{Taint, TaintEffect};
use gputopo_scheduler_core::snapshot::{BoundPodInput, GpuHolding, NodeInput, Snapshot};

fn chosen(snap: &Snapshot, pod: &PendingPod) -> String {
    schedule(snap, pod, &SchedulerConfig::default())
        .placement()
        .expect("placed")
        .node
        .clone()
}

/// Scores by node name.
fn scores(snap: &Snapshot, pod: &PendingPod) -> Vec<(String, f64)> {
    let mut rows: Vec<(String, f64)> = explain(snap, pod, &SchedulerConfig::default())
        .rows
        .into_iter()
        .filter(|r| r.verdict != Verdict::Rejected)
        .map(|r| (r.node, r.parts.expect("feasible").total))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

/// "a-empty" and "b-busy" (4 GPUs held), both NVSwitch; names sort so that a
/// tie would go to the empty node.
fn empty_and_busy() -> Snapshot {
    snapshot(
        vec![gpu_node("a-empty", a100()), gpu_node("b-busy", a100())],
        vec![holder("h", "b-busy", &[0, 1, 2, 3], None)],
    )
}

#[test]
fn strategies_pack_spread_or_lean_to_pack() {
    let snap = empty_and_busy();
    let strategy = |s| pod(2, &[("gputopo.dev/placement-strategy", s)]);
    assert_eq!(chosen(&snap, &strategy("consolidated")), "b-busy");
    assert_eq!(chosen(&snap, &strategy("distributed")), "a-empty");
    assert_eq!(chosen(&snap, &strategy("balanced")), "b-busy");
    assert_eq!(
        chosen(&snap, &pod(2, &[])),
        "b-busy",
        "balanced is the default"
    );

    // Balanced lies between the two on each node.
    let c = scores(&snap, &strategy("consolidated"));
    let b = scores(&snap, &strategy("balanced"));
    let d = scores(&snap, &strategy("distributed"));
    for i in 0..2 {
        let (lo, hi) = if c[i].1 < d[i].1 {
            (c[i].1, d[i].1)
        } else {
            (d[i].1, c[i].1)
        };
        assert!(lo <= b[i].1 && b[i].1 <= hi, "{c:?} {b:?} {d:?}");
    }
}

#[test]
fn consolidated_prefers_busy_domains() {
    // Two empty nodes; one's leaf already has a busy node.
    let mut nodes = Vec::new();
    for (name, leaf) in [("a", "leaf-1"), ("b", "leaf-2"), ("c", "leaf-2")] {
        let mut n = gpu_node(name, a100());
        n.labels.insert("gputopo.dev/leaf".into(), leaf.into());
        nodes.push(n);
    }
    let snap = snapshot(
        nodes,
        vec![holder("h", "c", &[0, 1, 2, 3, 4, 5, 6, 7], None)],
    );
    assert_eq!(
        chosen(
            &snap,
            &pod(4, &[("gputopo.dev/placement-strategy", "consolidated")])
        ),
        "b"
    );
    assert_eq!(
        chosen(
            &snap,
            &pod(4, &[("gputopo.dev/placement-strategy", "distributed")])
        ),
        "a"
    );
}

fn sharer(name: &str, node: &str, gpu: u32, share: GpuShare) -> BoundPodInput {
    let mut p = BoundPodInput::new("default", name, node);
    p.request = Ok(request(0, &[("gputopo.dev/workload", "inference")]));
    p.holding = GpuHolding::Shared {
        gpu: Some(gpu),
        share,
    };
    p
}

#[test]
fn inference_shares_pack_toward_the_memory_target() {
    // 4 GPUs of 40 GiB with 0 %, 50 %, 65 % and 90 % of memory shared.
    let spec = spec_with(
        4,
        |_, _| gputopo_api::LinkClass::Nv(4),
        |_| Gpu {
            numa: Some(0),
            memory_mib: Some(40_960),
            mig: false,
        },
    );
    let snap = snapshot(
        vec![gpu_node("n", spec)],
        vec![
            sharer("s1", "n", 1, GpuShare::MemoryMiB(20_480)),
            sharer("s2", "n", 2, GpuShare::MemoryMiB(26_624)),
            sharer("s3", "n", 3, GpuShare::MemoryMiB(36_864)),
        ],
    );
    // 4 GiB (10 %): GPU 2 goes 65 % -> 75 %, inside the band.
    let p = pod(
        0,
        &[
            ("gputopo.dev/gpu-share", "4Gi"),
            ("gputopo.dev/workload", "inference"),
        ],
    );
    let d = schedule(&snap, &p, &SchedulerConfig::default());
    let placed = d.placement().unwrap();
    assert_eq!(placed.gpus, [2], "{}", placed.explanation);
    assert_eq!(placed.parts.memory_fit, Some(1.0));
    // 10 GiB (25 %): GPU 1 goes 50 % -> 75 %; GPU 2 would reach 90 %.
    let p = pod(0, &[("gputopo.dev/gpu-share", "10Gi")]);
    let d = schedule(&snap, &p, &SchedulerConfig::default());
    assert_eq!(d.placement().unwrap().gpus, [1]);
    // 20 GiB: only the empty GPU has room.
    let p = pod(0, &[("gputopo.dev/gpu-share", "20Gi")]);
    let d = schedule(&snap, &p, &SchedulerConfig::default());
    assert_eq!(d.placement().unwrap().gpus, [0]);
}

#[test]
fn inference_with_gpu_memory_prefers_the_snugger_gpu() {
    let sized = |mib| {
        spec_with(
            8,
            |_, _| gputopo_api::LinkClass::Nv(12),
            move |_| Gpu {
                numa: Some(0),
                memory_mib: Some(mib),
                mig: false,
            },
        )
    };
    let snap = snapshot(
        vec![
            gpu_node("a-80g", sized(81_920)),
            gpu_node("b-24g", sized(24_576)),
        ],
        vec![],
    );
    let p = pod(
        1,
        &[
            ("gputopo.dev/gpu-memory", "18Gi"),
            ("gputopo.dev/workload", "inference"),
        ],
    );
    assert_eq!(chosen(&snap, &p), "b-24g");
    // Without the inference hint, memory fit does not apply and the tie goes by name.
    assert_eq!(
        chosen(&snap, &pod(1, &[("gputopo.dev/gpu-memory", "18Gi")])),
        "a-80g"
    );
}

#[test]
fn latency_sensitive_avoids_training_and_training_avoids_inference() {
    let snap = snapshot(
        vec![
            gpu_node("a-training", a100()),
            gpu_node("b-inference", a100()),
        ],
        vec![
            holder("t", "a-training", &[0, 1], Some("training")),
            holder("i", "b-inference", &[0, 1], Some("inference")),
        ],
    );
    let latency = pod(
        1,
        &[
            ("gputopo.dev/workload", "inference"),
            ("gputopo.dev/latency-sensitive", "true"),
        ],
    );
    assert_eq!(chosen(&snap, &latency), "b-inference");
    let training = pod(2, &[("gputopo.dev/workload", "training")]);
    assert_eq!(chosen(&snap, &training), "a-training");
}

#[test]
fn preferred_domain_is_a_soft_bonus_at_any_tier() {
    let mut nodes = Vec::new();
    for (name, spine, leaf) in [("a", "spine-1", "leaf-1"), ("b", "spine-2", "leaf-7")] {
        let mut n = gpu_node(name, a100());
        n.labels.insert("gputopo.dev/spine".into(), spine.into());
        n.labels.insert("gputopo.dev/leaf".into(), leaf.into());
        nodes.push(n);
    }
    let snap = snapshot(nodes, vec![]);
    assert_eq!(chosen(&snap, &pod(2, &[])), "a");
    assert_eq!(
        chosen(
            &snap,
            &pod(2, &[("gputopo.dev/preferred-domain", "leaf-7")])
        ),
        "b"
    );
    assert_eq!(
        chosen(
            &snap,
            &pod(2, &[("gputopo.dev/preferred-domain", "spine-2")])
        ),
        "b"
    );
    // Soft: a domain that cannot take the pod does not stop it.
    let snap2 = snapshot(
        snap.nodes()
            .map(|n| {
                let mut input = gpu_node(n.name(), a100());
                input.labels = n.labels().map(|(k, v)| (k.into(), v.into())).collect();
                input
            })
            .collect(),
        vec![holder("h", "b", &[0, 1, 2, 3, 4, 5, 6, 7], None)],
    );
    assert_eq!(
        chosen(
            &snap2,
            &pod(2, &[("gputopo.dev/preferred-domain", "leaf-7")])
        ),
        "a"
    );
}

#[test]
fn cheaper_nodes_win_and_training_avoids_spot() {
    let priced = |name: &str, price: &str, spot: bool| {
        let mut n = gpu_node(name, a100());
        n.labels
            .insert("gputopo.dev/cost-per-hour".into(), price.into());
        if spot {
            n.labels
                .insert("karpenter.sh/capacity-type".into(), "spot".into());
        }
        n
    };
    let snap = snapshot(
        vec![
            priced("a-dear", "40", false),
            priced("b-cheap", "20", false),
            priced("c-spot", "8", true),
        ],
        vec![],
    );
    assert_eq!(chosen(&snap, &pod(2, &[])), "c-spot");
    assert_eq!(
        chosen(&snap, &pod(2, &[("gputopo.dev/workload", "training")])),
        "b-cheap"
    );
    let s = scores(&snap, &pod(2, &[]));
    assert!(s[0].1 < s[1].1 && s[1].1 < s[2].1, "{s:?}");
}

#[test]
fn better_wired_nodes_win_when_all_else_is_equal() {
    let snap = snapshot(
        vec![
            gpu_node("a-pcie", pcie()),
            gpu_node("b-dgx1", dgx1()),
            gpu_node("c-a100", a100()),
        ],
        vec![],
    );
    assert_eq!(chosen(&snap, &pod(4, &[])), "c-a100");
    let s = scores(&snap, &pod(4, &[]));
    assert!(s[0].1 < s[1].1 && s[1].1 < s[2].1, "{s:?}");
    // A single GPU has no link: every node's best is equal there.
    let s = scores(&snap, &pod(1, &[]));
    assert!((s[0].1 - s[2].1).abs() < 1e-9, "{s:?}");
}

#[test]
fn prefer_no_schedule_lowers_the_score() {
    let mut soft = gpu_node("a-soft", a100());
    soft.taints = vec![Taint::new("spot", "true", TaintEffect::PreferNoSchedule)];
    let snap = snapshot(vec![soft, gpu_node("b-clean", a100())], vec![]);
    assert_eq!(chosen(&snap, &pod(2, &[])), "b-clean");
}

#[test]
fn nodes_without_topology_score_lowest() {
    let bare = NodeInput {
        name: "a-bare".into(),
        allocatable: gputopo_scheduler_core::resources::Resources::allocatable(
            [("nvidia.com/gpu", "8")],
            "t",
        )
        .unwrap(),
        ..NodeInput::default()
    };
    let snap = snapshot(vec![bare, gpu_node("b-pcie", pcie())], vec![]);
    assert_eq!(chosen(&snap, &pod(4, &[])), "b-pcie");
}

#[test]
fn weights_turn_parts_off() {
    let snap = empty_and_busy();
    let config = SchedulerConfig {
        weights: ScoreWeights {
            allocation: 0,
            ..ScoreWeights::default()
        },
        ..SchedulerConfig::default()
    };
    let p = pod(2, &[("gputopo.dev/placement-strategy", "consolidated")]);
    // Without the allocation part both nodes score the same: the tie goes by name.
    let d = schedule(&snap, &p, &config);
    assert_eq!(d.placement().unwrap().node, "a-empty");
}
