//! `LiveSnapshot`: after any sequence of node, reading, pod and PodGroup
//! changes, the snapshot kept up to date equals a fresh build of the same
//! inputs, node by node, pod by pod, domain by domain, warning by warning,
//! and decides every probe pod the same way.

mod common;

use common::{a100, dgx1, gpu_node, pod, request};
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_api::{GpuAllocation, GpuShare};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::snapshot::{
    BoundPodInput, GpuHolding, LiveSnapshot, NodeImage, NodeInput, PodGroup, Snapshot,
};
use proptest::prelude::*;

const NODES: usize = 5;
const PODS: usize = 14;

/// One change, as a watch event would bring it.
#[derive(Clone, Debug)]
enum Change {
    /// Node `i` (re)appears: `shape` 0/1 picks DGX-1 or A100, `leaf`
    /// its leaf label, `cordoned` its `spec.unschedulable`.
    Node {
        i: usize,
        shape: u8,
        leaf: u8,
        cordoned: bool,
    },
    /// Node `i`'s kubelet reading: which pods hold which GPUs, read at
    /// `at` seconds.
    Reading {
        i: usize,
        held: Vec<(u32, usize)>,
        at: i64,
    },
    RemoveNode(usize),
    /// Pod `p` bound to node `node`, holding `holding`.
    Pod {
        p: usize,
        node: usize,
        holding: Holding,
        training: bool,
    },
    RemovePod(usize),
    Group {
        i: u8,
        min: u32,
    },
}

#[derive(Clone, Debug)]
enum Holding {
    Whole(Vec<u32>),
    Unknown(u32),
    Shared(Option<u32>),
    Cpu,
}

fn node_name(i: usize) -> String {
    // One name outside the pool's order on purpose: ids shift on insert.
    format!("n{}", (i * 7) % NODES)
}

fn node_input(i: usize, shape: u8, leaf: u8, cordoned: bool) -> NodeInput {
    let mut n = gpu_node(&node_name(i), if shape == 0 { dgx1() } else { a100() });
    n.labels
        .insert("gputopo.dev/leaf".into(), format!("leaf-{leaf}"));
    n.unschedulable = cordoned;
    n
}

fn pod_input(p: usize, node: usize, holding: &Holding, training: bool) -> BoundPodInput {
    let mut input = BoundPodInput::new("ml", &format!("p{p:02}"), &node_name(node));
    let workload = if training { "training" } else { "inference" };
    let gpus = match holding {
        Holding::Whole(g) => g.len() as u32,
        Holding::Unknown(n) => *n,
        Holding::Shared(_) | Holding::Cpu => 0,
    };
    let mut annotations = vec![("gputopo.dev/workload", workload)];
    if matches!(holding, Holding::Shared(_)) {
        annotations.push(("gputopo.dev/gpu-share", "0.25"));
    }
    input.request = Ok(request(gpus.max(1), &annotations));
    input.requests = Resources::from_list([("cpu", "2"), ("memory", "8Gi")], "test").expect("ok");
    input.requests.gpus = i64::from(gpus);
    input.requests.pods = 1;
    input.holding = match holding {
        Holding::Whole(g) => GpuHolding::Whole(g.clone()),
        Holding::Unknown(n) => GpuHolding::Unknown(*n),
        Holding::Shared(gpu) => GpuHolding::Shared {
            gpu: *gpu,
            share: GpuShare::Milli(250),
        },
        Holding::Cpu => GpuHolding::None,
    };
    input.start_time = Some(Timestamp::from_second(1_000).expect("a time"));
    // Labels, so the label index is kept up to date as the pods move.
    input.constraints = std::sync::Arc::new(
        gputopo_scheduler_core::pod_constraints::PodConstraints::labelled(&[
            (
                "app",
                if p.is_multiple_of(3) {
                    "serve"
                } else {
                    "train"
                },
            ),
            ("workload", workload),
        ]),
    );
    input
}

fn change() -> impl Strategy<Value = Change> {
    let holding = prop_oneof![
        4 => proptest::collection::vec(0u32..9, 1..4).prop_map(Holding::Whole),
        2 => (1u32..5).prop_map(Holding::Unknown),
        2 => proptest::option::of(0u32..8).prop_map(Holding::Shared),
        1 => Just(Holding::Cpu),
    ];
    prop_oneof![
        3 => (0..NODES, 0u8..2, 0u8..2, proptest::bool::weighted(0.1)).prop_map(
            |(i, shape, leaf, cordoned)| Change::Node { i, shape, leaf, cordoned }
        ),
        2 => (0..NODES, proptest::collection::vec((0u32..8, 0..PODS), 0..5), 900i64..1100)
            .prop_map(|(i, held, at)| Change::Reading { i, held, at }),
        1 => (0..NODES).prop_map(Change::RemoveNode),
        8 => (0..PODS, 0..NODES, holding, any::<bool>()).prop_map(
            |(p, node, holding, training)| Change::Pod { p, node, holding, training }
        ),
        3 => (0..PODS).prop_map(Change::RemovePod),
        1 => (0u8..2, 1u32..4).prop_map(|(i, min)| Change::Group { i, min }),
    ]
}

/// Applies `c`, keeping `nodes` (the inputs last given per node) current.
fn apply(live: &mut LiveSnapshot, nodes: &mut [Option<NodeInput>], c: &Change) {
    match c {
        Change::Node {
            i,
            shape,
            leaf,
            cordoned,
        } => {
            let mut n = node_input(*i, *shape, *leaf, *cordoned);
            if let Some(old) = &nodes[*i] {
                n.gpu_allocations = old.gpu_allocations.clone();
                n.allocations_observed_at = old.allocations_observed_at;
            }
            nodes[*i] = Some(n.clone());
            live.set_node(n);
        }
        Change::Reading { i, held, at } => {
            let Some(mut n) = nodes[*i].clone() else {
                return;
            };
            n.gpu_allocations = held
                .iter()
                .map(|(gpu, p)| GpuAllocation {
                    gpu: *gpu,
                    pods: vec![format!("ml/p{p:02}")],
                    holders: Vec::new(),
                })
                .collect();
            n.allocations_observed_at = Some(Timestamp::from_second(*at).expect("a time"));
            nodes[*i] = Some(n.clone());
            live.set_node(n);
        }
        Change::RemoveNode(i) => {
            nodes[*i] = None;
            live.remove_node(&node_name(*i));
        }
        Change::Pod {
            p,
            node,
            holding,
            training,
        } => live.set_pod(pod_input(*p, *node, holding, *training)),
        Change::RemovePod(p) => live.remove_pod("ml", &format!("p{p:02}")),
        Change::Group { i, min } => live.set_pod_group(PodGroup {
            namespace: "ml".into(),
            name: format!("g{i}"),
            min_member: *min,
            schedule_timeout_seconds: None,
        }),
    }
}

/// Everything a decision can read, by name.
fn view(s: &Snapshot) -> String {
    s.state_text()
}

fn probes() -> Vec<PendingPod> {
    let mut shared = pod(1, &[("gputopo.dev/gpu-share", "0.5")]);
    shared.requests.gpus = 1;
    let mut list = vec![shared];
    for k in [1u32, 2, 4, 8] {
        let mut p = pod(k, &[("gputopo.dev/workload", "training")]);
        p.requests.gpus = i64::from(k);
        list.push(p);
    }
    list
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_live_snapshot_equals_a_fresh_build_after_every_change(
        changes in proptest::collection::vec(change(), 1..40)
    ) {
        let config = SchedulerConfig::default();
        let mut live = LiveSnapshot::new(&config);
        let mut nodes: Vec<Option<NodeInput>> = vec![None; NODES];
        // Built once, so that the changes after are applied to it.
        live.snapshot().expect("an empty cluster builds");
        for (step, c) in changes.iter().enumerate() {
            apply(&mut live, &mut nodes, c);
            let fresh = live.fresh().expect("no duplicate names");
            let kept = live.snapshot().expect("no duplicate names");
            prop_assert_eq!(view(kept), view(&fresh), "after step {} ({:?})", step, c);
            for p in probes() {
                prop_assert_eq!(
                    schedule(kept, &p, &config),
                    schedule(&fresh, &p, &config),
                    "probe {:?} after step {}", p.request, step
                );
            }
        }
    }
}

#[test]
fn a_pod_change_touches_its_node_and_a_reading_alone_never_rebuilds() {
    let config = SchedulerConfig::default();
    let mut live = LiveSnapshot::new(&config);
    for i in 0..NODES {
        live.set_node(node_input(i, 1, 0, false));
    }
    live.snapshot().expect("builds");
    assert_eq!(live.counts().full_builds, 1);
    live.set_pod(pod_input(0, 0, &Holding::Whole(vec![0, 1]), true));
    live.set_pod(pod_input(1, 0, &Holding::Unknown(2), false));
    live.remove_pod("ml", "p00");
    let mut reading = node_input(0, 1, 0, false);
    reading.gpu_allocations = vec![GpuAllocation {
        gpu: 5,
        pods: vec!["ml/p01".into()],
        holders: Vec::new(),
    }];
    reading.allocations_observed_at = Some(Timestamp::from_second(2_000).expect("a time"));
    live.set_node(reading.clone());
    live.set_node(reading);
    let counts = live.counts();
    assert_eq!(counts.full_builds, 1, "{counts:?}");
    assert_eq!(counts.node_updates, 4, "{counts:?}");
    assert_eq!(counts.unchanged, 1, "{counts:?}");
    let kept = view(live.snapshot().expect("builds"));
    assert_eq!(kept, view(&live.fresh().expect("builds")));
    // The reading names GPU 5 for the 2-GPU pod: 5, and 7 charged for the rest.
    assert!(kept.contains("ml/p01 gpus 10100000 "), "{kept}");
    // A label change moves domains: built whole on the next read.
    live.set_node(node_input(0, 1, 1, false));
    live.snapshot().expect("builds");
    assert_eq!(live.counts().full_builds, 2);
}

/// A pod changed over and over (each change takes its node's pods off and
/// inserts them again) does not grow the snapshot: the ids the node's pods
/// leave are reused, and it is never built whole again.
#[test]
fn a_new_image_list_touches_its_node_and_the_counts_only() {
    let mut live = LiveSnapshot::new(&SchedulerConfig::default());
    for i in 0..3 {
        live.set_node(node_input(i, 1, 0, false));
    }
    live.snapshot().expect("builds");
    let image = |names: &[&str], mb: i64| NodeImage {
        names: names.iter().map(|n| (*n).to_string()).collect(),
        size_bytes: mb << 20,
    };
    // Two nodes pull the trainer; one of them drops it again for the server.
    for (i, images) in [
        (0, vec![image(&["trainer:v1"], 9000)]),
        (1, vec![image(&["trainer:v1", "trainer@sha256:ab"], 9000)]),
        (1, vec![image(&["server:v2"], 800)]),
    ] {
        let mut n = node_input(i, 1, 0, false);
        n.images = images;
        live.set_node(n);
    }
    let counts = live.counts();
    assert_eq!(counts.full_builds, 1, "{counts:?}");
    assert_eq!(counts.node_updates, 3, "{counts:?}");
    let kept = view(live.snapshot().expect("builds"));
    assert_eq!(kept, view(&live.fresh().expect("builds")));
    assert!(
        kept.contains(r#"images [("trainer:v1", 9437184000, 1)]"#),
        "{kept}"
    );
    assert!(
        kept.contains(r#"images [("server:v2", 838860800, 1)]"#),
        "{kept}"
    );
}

#[test]
fn churn_on_one_node_keeps_the_snapshot_bounded() {
    let mut live = LiveSnapshot::new(&SchedulerConfig::default());
    live.set_node(gpu_node("n1", a100()));
    let mut steady = BoundPodInput::new("ml", "steady", "n1");
    steady.requests.gpus = 4;
    steady.holding = GpuHolding::Whole(vec![4, 5, 6, 7]);
    live.set_pod(steady);
    live.snapshot().expect("builds");
    for i in 0..20_000u32 {
        let mut p = BoundPodInput::new("ml", "churn", "n1");
        p.requests.gpus = 1;
        p.holding = GpuHolding::Whole(vec![i % 4]);
        live.set_pod(p);
        if i % 7 == 0 {
            live.remove_pod("ml", "churn");
        }
        let s = live.snapshot().expect("builds");
        assert_eq!(s.pod_count(), if i % 7 == 0 { 1 } else { 2 }, "step {i}");
        assert!(s.pod_holes() <= 1, "step {i}: {} holes", s.pod_holes());
    }
    assert_eq!(
        live.counts().full_builds,
        1,
        "only the first read built it whole"
    );
}
