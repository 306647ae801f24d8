//! The snapshot: network domains from each tier preset, shared shapes, GPU
//! accounting as pods come and go, and the warnings for odd inputs.

mod common;

use common::*;
use gputopo_api::GpuShare;
use gputopo_scheduler_core::config::{NetworkTiers, SchedulerConfig};
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::snapshot::{
    BoundPodInput, GpuHolding, NodeInput, NodeTopology, SnapshotBuilder, SnapshotError,
    SnapshotWarning,
};
use std::sync::Arc;

fn config(tiers: NetworkTiers) -> SchedulerConfig {
    SchedulerConfig {
        tiers,
        ..SchedulerConfig::default()
    }
}

fn labelled(name: &str, pairs: &[(&str, &str)]) -> NodeInput {
    let mut n = gpu_node(name, a100());
    for (k, v) in pairs {
        n.labels.insert(k.to_string(), v.to_string());
    }
    n
}

#[test]
fn domains_are_paths_under_each_preset() {
    // Two leaves named alike under different spines are different domains.
    let snap = snapshot(
        vec![
            labelled(
                "a",
                &[("gputopo.dev/spine", "s1"), ("gputopo.dev/leaf", "leaf-1")],
            ),
            labelled(
                "b",
                &[("gputopo.dev/spine", "s1"), ("gputopo.dev/leaf", "leaf-1")],
            ),
            labelled(
                "c",
                &[("gputopo.dev/spine", "s2"), ("gputopo.dev/leaf", "leaf-1")],
            ),
            labelled("d", &[]),
        ],
        vec![],
    );
    let path = |name: &str| {
        snap.node(snap.node_id(name).unwrap())
            .domain_path()
            .to_vec()
    };
    assert_eq!(path("a"), path("b"));
    assert_ne!(path("a")[1], path("c")[1]);
    let leaf = snap.domain(path("c")[1].unwrap());
    assert_eq!((leaf.name(), leaf.tier()), ("leaf-1", 1));
    assert_eq!(snap.domain(leaf.parent().unwrap()).name(), "s2");
    assert_eq!(snap.domain(path("a")[1].unwrap()).nodes().len(), 2);
    assert_eq!(path("d"), vec![None, None]);
    assert_eq!(snap.domains().count(), 4);

    let topograph = snapshot_with(
        &config(NetworkTiers::topograph()),
        vec![labelled(
            "t",
            &[
                ("fabric.topograph.run/tier-0", "sw-0"),
                ("fabric.topograph.run/tier-1", "sw-1"),
                ("accelerator.topograph.run/domain", "nvl-1"),
            ],
        )],
        vec![],
    );
    let n = topograph.node(topograph.node_id("t").unwrap());
    let names: Vec<Option<&str>> = n
        .domain_path()
        .iter()
        .map(|d| d.map(|d| topograph.domain(d).name()))
        .collect();
    assert_eq!(names, [None, Some("sw-1"), Some("sw-0"), Some("nvl-1")]);
    assert_eq!(n.domain_names().collect::<Vec<_>>(), names);
    assert_eq!(
        topograph.domain(n.innermost_domain().unwrap()).name(),
        "nvl-1"
    );

    let aws = snapshot_with(
        &config(NetworkTiers::aws().with_gpu_clique()),
        vec![labelled(
            "e",
            &[
                ("topology.k8s.aws/network-node-layer-1", "nn-1"),
                ("topology.k8s.aws/network-node-layer-2", "nn-2"),
                ("topology.k8s.aws/network-node-layer-3", "nn-3"),
                ("nvidia.com/gpu.clique", "cluster-a.7"),
            ],
        )],
        vec![],
    );
    let n = aws.node(aws.node_id("e").unwrap());
    assert_eq!(n.domain_path().len(), 4);
    assert_eq!(
        aws.domain(n.domain_path()[3].unwrap()).name(),
        "cluster-a.7"
    );
}

#[test]
fn nodes_of_one_model_share_one_shape() {
    let nodes: Vec<NodeInput> = (0..50)
        .map(|i| {
            gpu_node(
                &format!("n{i:02}"),
                if i % 2 == 0 { a100() } else { dgx1() },
            )
        })
        .collect();
    let snap = snapshot(nodes, vec![]);
    assert_eq!(snap.shapes().count(), 2);
    let a = snap.node(snap.node_id("n00").unwrap()).shape().unwrap();
    let b = snap.node(snap.node_id("n48").unwrap()).shape().unwrap();
    assert!(Arc::ptr_eq(a, b));
    assert!(matches!(
        snap.node(snap.node_id("n01").unwrap()).topology(),
        NodeTopology::Known(_)
    ));
}

#[test]
fn gpu_accounting_follows_pods() {
    let mut n = gpu_node("n", a100());
    n.labels.insert("gputopo.dev/leaf".into(), "l".into());
    let mut snap = snapshot(vec![n, labelled("m", &[("gputopo.dev/leaf", "l")])], vec![]);
    let id = snap.node_id("n").unwrap();
    let leaf = snap.node(id).innermost_domain().unwrap();
    assert_eq!(snap.domain(leaf).gpu_count(), 16);

    let whole = snap
        .add_pod(holder("w", "n", &[0, 1, 2], Some("training")))
        .unwrap();
    let mut shared = BoundPodInput::new("default", "s", "n");
    shared.holding = GpuHolding::Shared {
        gpu: Some(5),
        share: GpuShare::Milli(300),
    };
    let s = snap.add_pod(shared).unwrap();
    let node = snap.node(id);
    assert_eq!(node.held_gpus(), 0b111);
    assert_eq!(node.shared_gpus(), 1 << 5);
    assert_eq!(node.free_gpus(), 0xff & !0b111 & !(1 << 5));
    assert_eq!(node.training_pods(), 1);
    assert_eq!(node.requested().gpus, 3);
    assert_eq!(snap.domain(leaf).gpus_used(), 4);
    assert_eq!(snap.node(id).pods().count(), 2);

    assert!(matches!(
        snap.add_pod(holder("w", "n", &[4], None)),
        Err(SnapshotError::DuplicatePod { .. })
    ));
    assert!(matches!(
        snap.add_pod(holder("x", "nowhere", &[4], None)),
        Err(SnapshotError::UnknownNode { .. })
    ));

    let removed = snap.remove_pod(whole).unwrap();
    assert_eq!(removed.gpus, 0b111);
    let node = snap.node(id);
    assert_eq!(node.held_gpus(), 0);
    assert_eq!(node.training_pods(), 0);
    assert_eq!(node.requested().gpus, 0);
    assert_eq!(snap.domain(leaf).gpus_used(), 1);
    snap.remove_pod(s).unwrap();
    assert_eq!(snap.node(id).free_gpus(), 0xff);
    assert_eq!(snap.domain(leaf).gpus_used(), 0);
    assert!(snap.remove_pod(s).is_none());
}

/// Found by fuzzing (scripts/fuzz): a bound pod whose `gpu-share` is more
/// than any GPU has (`1e18` bytes), beside another share of the same GPU,
/// overflowed the GPU's shared use (a panic in debug builds, a nearly free
/// GPU in release ones). The use saturates: the GPU reads as full.
#[test]
fn an_oversized_share_fills_its_gpu() {
    let share = |name: &str, share: GpuShare| {
        let mut p = BoundPodInput::new("default", name, "n");
        p.holding = GpuHolding::Shared {
            gpu: Some(7),
            share,
        };
        p
    };
    let snap = snapshot(
        vec![gpu_node("n", a100())],
        vec![
            share("half", GpuShare::MemoryMiB(40 * 1024)),
            share("huge", GpuShare::MemoryMiB(953_674_316_406)),
        ],
    );
    let used = snap.node(snap.node_id("n").unwrap()).shared_use(7);
    assert_eq!((used.milli, used.pods), (u32::MAX, 2));
    let decision = schedule(
        &snap,
        &pod(1, &[("gputopo.dev/gpu-share", "0.1")]),
        &SchedulerConfig::default(),
    );
    let placed = decision.placement().expect("another GPU has room");
    assert_ne!(placed.gpus, [7], "GPU 7 is full");
    // A pending pod asking as much: no GPU has room, GPU 7 included.
    let decision = schedule(
        &snap,
        &pod(1, &[("gputopo.dev/gpu-share", "1e18")]),
        &SchedulerConfig::default(),
    );
    assert!(decision.placement().is_none(), "{decision:?}");
}

#[test]
fn odd_inputs_become_warnings_or_errors() {
    let mut b = SnapshotBuilder::new(&SchedulerConfig::default());
    b.node(gpu_node("n", a100()));
    let mut bad_label = gpu_node("m", a100());
    bad_label.labels.insert(
        "gputopo.dev/topology-manager-policy".into(),
        "strict".into(),
    );
    bad_label
        .labels
        .insert("gputopo.dev/cost-per-hour".into(), "cheap".into());
    b.node(bad_label);
    b.pod(holder("ghost", "absent", &[0], None));
    b.pod(holder("out-of-range", "n", &[9], None));
    b.pod(holder("first", "n", &[0], None));
    b.pod(holder("second", "n", &[0], None));
    let mut unknown = BoundPodInput::new("default", "unknown", "n");
    unknown.holding = GpuHolding::Unknown(2);
    b.pod(unknown);
    let mut bad_request = holder("bad", "n", &[1], None);
    bad_request.request = Err(gputopo_api::RequestError::UnknownKey {
        key: "gputopo.dev/x".into(),
    });
    b.pod(bad_request);
    let snap = b.build().unwrap();
    let w = snap.warnings();
    let has = |f: &dyn Fn(&SnapshotWarning) -> bool| w.iter().any(f);
    assert!(has(&|w| matches!(w, SnapshotWarning::UnknownNode { .. })));
    assert!(has(&|w| matches!(
        w,
        SnapshotWarning::GpuNotOnNode { gpu: 9, .. }
    )));
    assert!(has(&|w| matches!(
        w,
        SnapshotWarning::GpuHeldTwice { gpu: 0, .. }
    )));
    // The out-of-range pod's one GPU still counts: charged to the highest
    // free (7); the pod of unknown GPUs then gets the next two.
    assert!(has(&|w| matches!(
        w,
        SnapshotWarning::ShortAssignment { listed: 0, requested: 1, charged, .. } if charged == "7"
    )));
    assert!(has(
        &|w| matches!(w, SnapshotWarning::UnknownGpus { count: 2, charged, .. } if charged == "5,6")
    ));
    assert!(has(&|w| matches!(w, SnapshotWarning::BadRequest { .. })));
    assert_eq!(
        w.iter()
            .filter(|w| matches!(w, SnapshotWarning::BadLabel { .. }))
            .count(),
        2
    );
    for warning in w {
        assert!(!warning.to_string().is_empty());
    }
    // The pod with a bad request still holds its GPU.
    assert_eq!(
        snap.node(snap.node_id("n").unwrap()).held_gpus(),
        0b1110_0011
    );

    let mut dup = SnapshotBuilder::new(&SchedulerConfig::default());
    dup.node(gpu_node("n", a100())).node(gpu_node("n", dgx1()));
    assert_eq!(
        dup.build().unwrap_err(),
        SnapshotError::DuplicateNode { name: "n".into() }
    );
}

fn at(t: &str) -> gputopo_api::k8s_openapi::jiff::Timestamp {
    t.parse().unwrap()
}

fn whole(gpu: u32, pods: &[&str]) -> gputopo_api::GpuAllocation {
    gputopo_api::GpuAllocation {
        gpu,
        pods: pods.iter().map(|p| p.to_string()).collect(),
        holders: vec![],
    }
}

fn started(mut pod: BoundPodInput, t: &str) -> BoundPodInput {
    pod.start_time = Some(at(t));
    pod
}

#[test]
fn the_kubelets_allocation_wins_over_the_annotation() {
    let mut n = gpu_node("n", a100());
    n.gpu_allocations = vec![
        whole(4, &["default/asked-for-0"]),
        whole(6, &["default/unknown", "default/shared"]),
    ];
    n.allocations_observed_at = Some(at("2026-01-01T00:10:00Z"));
    let mut unknown = BoundPodInput::new("default", "unknown", "n");
    unknown.holding = GpuHolding::Unknown(1);
    let mut shared = BoundPodInput::new("default", "shared", "n");
    shared.holding = GpuHolding::Shared {
        gpu: None,
        share: GpuShare::Milli(100),
    };
    let t = "2026-01-01T00:00:00Z";
    let snap = snapshot(
        vec![n],
        vec![
            started(holder("asked-for-0", "n", &[0], None), t),
            started(unknown, t),
            started(shared, t),
        ],
    );
    let node = snap.node(snap.node_id("n").unwrap());
    assert_eq!(node.held_gpus(), (1 << 4) | (1 << 6));
    assert_eq!(node.shared_gpus(), 1 << 6);
    assert!(
        snap.warnings()
            .iter()
            .any(|w| matches!(w, SnapshotWarning::GpuHeldTwice { gpu: 6, .. })),
        "a GPU reported for a whole and a shared pod is flagged: {:?}",
        snap.warnings()
    );
}

#[test]
fn allocations_without_a_reading_time_or_from_before_the_pod_started_are_not_used() {
    // No reading time: an object that never read the kubelet says nothing.
    let mut unread = gpu_node("n", a100());
    unread.gpu_allocations = vec![whole(4, &["default/p"])];
    let t = "2026-01-01T00:00:00Z";
    let snap = snapshot(vec![unread], vec![started(holder("p", "n", &[0], None), t)]);
    assert_eq!(snap.node(snap.node_id("n").unwrap()).held_gpus(), 1 << 0);

    // Read before this pod started: the reading is about an earlier pod of
    // the same name, so the annotation stands.
    let mut old = gpu_node("n", a100());
    old.gpu_allocations = vec![whole(4, &["default/p"])];
    old.allocations_observed_at = Some(at("2026-01-01T00:00:00Z"));
    let pods = vec![started(
        holder("p", "n", &[0], None),
        "2026-01-01T00:00:01Z",
    )];
    let snap = snapshot(vec![old.clone()], pods);
    assert_eq!(snap.node(snap.node_id("n").unwrap()).held_gpus(), 1 << 0);

    // Not started at all (the kubelet has not taken it): the annotation.
    let snap = snapshot(vec![old], vec![holder("p", "n", &[0], None)]);
    assert_eq!(snap.node(snap.node_id("n").unwrap()).held_gpus(), 1 << 0);
}

#[test]
fn a_mig_slice_or_replica_reported_on_a_gpu_is_not_a_whole_gpu() {
    use gputopo_api::{DeviceForm, GpuHolder};
    let holder_of = |pod: &str, form| GpuHolder {
        pod: pod.into(),
        container: "c".into(),
        resource: "nvidia.com/gpu".into(),
        device: "GPU-x".into(),
        form,
    };
    let mut n = gpu_node("n", a100());
    n.gpu_allocations = vec![
        gputopo_api::GpuAllocation {
            gpu: 2,
            pods: vec!["default/whole".into(), "default/slice".into()],
            holders: vec![
                holder_of("default/whole", DeviceForm::Whole),
                holder_of("default/slice", DeviceForm::Mig),
            ],
        },
        gputopo_api::GpuAllocation {
            gpu: 5,
            pods: vec!["default/whole".into()],
            holders: vec![holder_of("default/whole", DeviceForm::Replica)],
        },
    ];
    n.allocations_observed_at = Some(at("2026-01-01T00:10:00Z"));
    let t = "2026-01-01T00:00:00Z";
    // `slice` asks for no whole GPU; `whole` was chosen GPUs 0 and 1.
    let slice = started(BoundPodInput::new("default", "slice", "n"), t);
    let snap = snapshot(
        vec![n],
        vec![started(holder("whole", "n", &[0, 1], None), t), slice],
    );
    let node = snap.node(snap.node_id("n").unwrap());
    let held = node.held_gpus();
    // GPU 2 is `whole`'s; the replica on 5 is not a whole GPU, and the MIG
    // slice adds nothing. `whole` asked for two: the one the node does not
    // account for is charged to a GPU nobody is known to hold, never to 5.
    assert!(held & (1 << 2) != 0, "{held:#b}");
    assert!(held & (1 << 5) == 0, "{held:#b}");
    assert_eq!(held.count_ones(), 2, "{held:#b}");
}
