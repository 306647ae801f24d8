//! Where one scheduler puts pods: the GPU set scheduler-core chooses, pods
//! that fit nowhere or carry a bad annotation, a race for the last GPUs,
//! GPU sharing, and a fleet of four machine kinds.

use super::common::*;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::schedule::{Decision, schedule};
use gputopo_scheduler_core::snapshot::SnapshotBuilder;
use gputopo_scheduler_core::snapshot::from_k8s::node_input;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_ddp_pod_gets_the_nvlink_quad_scheduler_core_chooses_and_runs() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("ddp");
    let node_name = env.unique_name("dgx1");
    let (node, topology) = fixture_node(env, &node_name, DGX1, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-ddp");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("ddp").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let pod = gpu_pod(
        "ddp",
        &sched,
        &group,
        4,
        &[("gputopo.dev/workload", "training")],
    );
    create(&pods, &pod).await;

    // What scheduler-core picks on the same node, empty.
    let mut b = SnapshotBuilder::new(&SchedulerConfig::default());
    b.node(
        node_input(&node, Some(&topology), ReadingTrust::at(Timestamp::now())).expect("node input"),
    );
    let snapshot = b.build().expect("snapshot");
    let mut k8s_pod = pod.clone();
    k8s_pod.metadata.namespace = Some(ns.clone());
    let pending = PendingPod::from_k8s(&k8s_pod).expect("the pod reads");
    let expected = schedule(&snapshot, &pending, &SchedulerConfig::default());
    let expected = match &expected {
        Decision::Placed(p) => p,
        Decision::Unschedulable(u) => panic!("scheduler-core does not place it: {}", u.message),
    };

    let got = bound(&pods, "ddp", &s).await;
    assert_eq!(node_of(&got).as_deref(), Some(node_name.as_str()));
    assert_eq!(
        gpus_of(&got),
        expected.gpus,
        "the GPUs written are scheduler-core's"
    );
    assert_eq!(gpus_of(&got).len(), 4);
    let bottleneck = annotation(&got, "scheduler.gputopo.dev/bottleneck").unwrap_or_default();
    assert!(
        bottleneck.starts_with("NV"),
        "an NVLink-connected quad: {bottleneck}"
    );
    assert_eq!(
        Some(bottleneck),
        expected.bottleneck.map(|b| b.to_string()),
        "the bottleneck is scheduler-core's"
    );
    // Every pair-wise hop of the chosen ring is NVLink on a DGX-1 quad from one island.
    let e = one_event(&client, &ns, "ddp", "Scheduled", &s).await;
    let text = note(&e);
    assert!(
        text.contains(&format!(
            "to {node_name} with GPUs {}",
            expected.assigned_gpus()
        )),
        "{text}"
    );
    // The GPU-set part of the explanation; the rest counts the cluster's
    // nodes, which other tests share.
    let set_part = expected
        .explanation
        .split("; node score")
        .next()
        .unwrap_or_default();
    assert!(set_part.contains("ring bottleneck NV"), "{set_part}");
    assert!(text.contains(set_part), "{text}\nwanted: {set_part}");

    let running = wait_for(
        "the pod Running under kwok",
        Duration::from_secs(60),
        || async {
            pods.get("ddp")
                .await
                .ok()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        },
        || s.log(),
    )
    .await;
    assert_eq!(gpus_of(&running), expected.gpus);

    let (code, metrics) = s.get("/metrics").await.expect("/metrics answers");
    assert_eq!(code, 200);
    for line in [
        "gputopo_placement_decisions_total 1",
        "gputopo_schedule_attempts_total{result=\"scheduled\",workload=\"training\"} 1",
        "gputopo_scheduling_duration_seconds_count",
        "gputopo_gpu_allocation_ratio",
        "gputopo_fragmentation_ratio",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
    assert!(
        metrics.contains(&format!(
            "gputopo_placement_bottleneck_total{{bottleneck=\"{}\"}} 1",
            expected
                .bottleneck
                .map(|b| b.to_string())
                .unwrap_or_default()
        )),
        "{metrics}"
    );
    assert_eq!(s.get("/healthz").await.map(|r| r.0), Some(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn an_impossible_pod_gets_one_failed_scheduling_event_with_the_reasons() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("impossible");
    let node_name = env.unique_name("dgx1");
    fixture_node(env, &node_name, DGX1, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-impossible");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("impossible").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    create(&pods, &gpu_pod("huge", &sched, &group, 16, &[])).await;
    create(
        &pods,
        &gpu_pod(
            "nv24",
            &sched,
            &group,
            4,
            &[("gputopo.dev/min-nvlink-level", "NV24")],
        ),
    )
    .await;

    let huge = one_event(&client, &ns, "huge", "FailedScheduling", &s).await;
    let text = note(&huge);
    assert!(
        text.starts_with("0/") && text.contains(" nodes are available: "),
        "{text}"
    );
    assert!(text.contains("GPU"), "{text}");
    let nv24 = one_event(&client, &ns, "nv24", "FailedScheduling", &s).await;
    let text = note(&nv24);
    assert!(text.starts_with("0/") && text.contains("NV24"), "{text}");

    // Retries add to an event's series rather than writing new events: one
    // event per distinct message. (The message counts every node of the
    // shared cluster, so it changes while other tests add nodes.)
    tokio::time::sleep(Duration::from_secs(5)).await;
    let all = events(&client, &ns, "huge", "FailedScheduling").await;
    let notes: Vec<String> = all.iter().map(note).collect();
    let distinct: BTreeSet<&String> = notes.iter().collect();
    assert_eq!(distinct.len(), notes.len(), "an event repeated: {notes:?}");
    assert!(
        notes
            .iter()
            .all(|n| n.starts_with("0/") && n.contains("1 too few free GPUs")),
        "{notes:?}"
    );
    let p = pods.get("huge").await.expect("the pod");
    assert!(node_of(&p).is_none());
    let condition = p
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "PodScheduled"))
        .expect("a PodScheduled condition");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_deref()),
        ("False", Some("Unschedulable"))
    );
    assert!(condition.message.unwrap_or_default().starts_with("0/"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_bad_annotation_is_named_and_the_scheduler_keeps_going() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("bad");
    let node_name = env.unique_name("dgx1");
    fixture_node(env, &node_name, DGX1, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-bad");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("bad").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    create(
        &pods,
        &gpu_pod(
            "star",
            &sched,
            &group,
            2,
            &[("gputopo.dev/collective", "star")],
        ),
    )
    .await;
    let e = one_event(&client, &ns, "star", "FailedScheduling", &s).await;
    let text = note(&e);
    assert!(text.contains("gputopo.dev/collective"), "{text}");
    assert!(
        text.contains("ring | all-to-all"),
        "the accepted forms: {text}"
    );

    create(&pods, &gpu_pod("good", &sched, &group, 2, &[])).await;
    let good = bound(&pods, "good", &s).await;
    assert_eq!(gpus_of(&good).len(), 2);
    assert!(node_of(&pods.get("star").await.expect("star")).is_none());
    s.get("/healthz").await.expect("still serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn pods_racing_for_the_last_quad_never_share_a_gpu() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("race");
    let node_name = env.unique_name("dgx1");
    fixture_node(env, &node_name, DGX1, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-race");
    let ns = env.create_namespace("race").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // All three wait before the scheduler starts, so one cycle decides them.
    for name in ["r1", "r2", "r3"] {
        create(&pods, &gpu_pod(name, &sched, &group, 4, &[])).await;
    }
    let s = SchedulerProcess::start(env, &sched).await;
    let first = bound(&pods, "r1", &s).await;
    let second = bound(&pods, "r2", &s).await;
    let (a, b) = (gpus_of(&first), gpus_of(&second));
    assert_eq!((a.len(), b.len()), (4, 4));
    let union: BTreeSet<u32> = a.iter().chain(&b).copied().collect();
    assert_eq!(union.len(), 8, "no GPU given twice: {a:?} {b:?}");
    let e = one_event(&client, &ns, "r3", "FailedScheduling", &s).await;
    assert!(note(&e).starts_with("0/"), "{}", note(&e));
    assert!(node_of(&pods.get("r3").await.expect("r3")).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn inference_pods_sharing_gpus_pack_and_never_touch_a_held_gpu() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("share");
    fixture_node(
        env,
        &env.unique_name("a100-share"),
        DGX_A100,
        &[("e2e-group", &group)],
    )
    .await;
    let sched = env.unique_name("sched-share");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("share").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    create(
        &pods,
        &gpu_pod(
            "train",
            &sched,
            &group,
            4,
            &[("gputopo.dev/workload", "training")],
        ),
    )
    .await;
    let held: BTreeSet<u32> = gpus_of(&bound(&pods, "train", &s).await)
        .into_iter()
        .collect();
    assert_eq!(held.len(), 4);
    // Six quarter-GPU inference pods: no nvidia.com/gpu limit, a share.
    for i in 0..6 {
        let mut p = gpu_pod(
            &format!("infer-{i}"),
            &sched,
            &group,
            0,
            &[
                ("gputopo.dev/workload", "inference"),
                ("gputopo.dev/gpu-share", "0.25"),
            ],
        );
        p.spec.as_mut().expect("spec").containers[0].resources = None;
        create(&pods, &p).await;
    }
    let mut per_gpu: BTreeMap<u32, u32> = BTreeMap::new();
    for i in 0..6 {
        let p = bound(&pods, &format!("infer-{i}"), &s).await;
        let gpus = gpus_of(&p);
        assert_eq!(gpus.len(), 1, "a shared pod names the one GPU it shares");
        assert!(
            !held.contains(&gpus[0]),
            "infer-{i} shares GPU {} held whole by train",
            gpus[0]
        );
        *per_gpu.entry(gpus[0]).or_default() += 1;
    }
    assert!(
        per_gpu.values().all(|&n| n <= 4),
        "a GPU over 100 %: {per_gpu:?}"
    );
    assert!(
        per_gpu.len() <= 2,
        "six quarter-GPU pods spread over {} GPUs instead of packing: {per_gpu:?}",
        per_gpu.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_mixed_fleet_on_four_leaves_places_each_pod_where_its_wires_are() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("fleet");
    // Two spines, four leaves, one machine kind per leaf, two of each.
    let mut leaf_of: BTreeMap<String, &str> = BTreeMap::new();
    for (spine, leaf, kind, fixture_path) in [
        ("spine-a", "leaf-1", "dgx1", DGX1),
        ("spine-a", "leaf-2", "a100", DGX_A100),
        ("spine-b", "leaf-3", "h100", HGX_H100),
        ("spine-b", "leaf-4", "pcie", PCIE_2SOCKET),
    ] {
        for i in 0..2 {
            let name = env.unique_name(&format!("{kind}-{i}"));
            fixture_node(
                env,
                &name,
                fixture_path,
                &[
                    ("e2e-group", &group),
                    ("gputopo.dev/spine", spine),
                    ("gputopo.dev/leaf", leaf),
                ],
            )
            .await;
            leaf_of.insert(name, leaf);
        }
    }
    let sched = env.unique_name("sched-fleet");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("fleet").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let leaf = |p: &Pod| leaf_of[&node_of(p).expect("bound")];

    // Eight GPUs all-to-all at NV18: only the H100s have it.
    create(
        &pods,
        &gpu_pod(
            "nv18",
            &sched,
            &group,
            8,
            &[("gputopo.dev/min-nvlink-level", "NV18")],
        ),
    )
    .await;
    let nv18 = bound(&pods, "nv18", &s).await;
    assert_eq!(leaf(&nv18), "leaf-3");

    // On the PCIe box: a pair behind one host bridge, a quad on one socket.
    let mut pair = gpu_pod("pcie-pair", &sched, &group, 2, &[]);
    let mut quad = gpu_pod("pcie-quad", &sched, &group, 4, &[]);
    for p in [&mut pair, &mut quad] {
        p.spec
            .as_mut()
            .expect("spec")
            .node_selector
            .get_or_insert_default()
            .insert("gputopo.dev/leaf".into(), "leaf-4".into());
    }
    create(&pods, &pair).await;
    let pair = bound(&pods, "pcie-pair", &s).await;
    let gpus = gpus_of(&pair);
    assert!(
        [[0, 1], [2, 3], [4, 5], [6, 7]]
            .iter()
            .any(|p| p[..] == gpus[..]),
        "the pair {gpus:?} is not behind one host bridge"
    );
    assert_eq!(
        annotation(&pair, "scheduler.gputopo.dev/bottleneck").as_deref(),
        Some("PHB")
    );
    create(&pods, &quad).await;
    let quad = bound(&pods, "pcie-quad", &s).await;
    let bottleneck = annotation(&quad, "scheduler.gputopo.dev/bottleneck");
    assert_ne!(
        bottleneck.as_deref(),
        Some("SYS"),
        "the quad {:?} crosses the sockets",
        gpus_of(&quad)
    );

    // A two-node gang needing NV12: one H100 is taken, the DGX-1 and the
    // PCIe boxes lack NV12, so both members go to the A100 leaf.
    for i in 0..2 {
        create(
            &pods,
            &gpu_pod(
                &format!("gang-{i}"),
                &sched,
                &group,
                8,
                &[
                    ("gputopo.dev/min-nvlink-level", "NV12"),
                    ("gputopo.dev/gang", "fleet"),
                    ("gputopo.dev/gang-size", "2"),
                ],
            ),
        )
        .await;
    }
    let mut nodes = BTreeSet::new();
    for i in 0..2 {
        let p = bound(&pods, &format!("gang-{i}"), &s).await;
        assert_eq!(leaf(&p), "leaf-2", "gang-{i}");
        nodes.insert(node_of(&p).expect("bound"));
    }
    assert_eq!(nodes.len(), 2, "one member per node");
}
