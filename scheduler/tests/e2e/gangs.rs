//! Gangs: all members on adjacent leaves or none bound, and a waiting gang
//! holding the GPUs a stream of small pods would take.

use super::common::*;
use super::slot_pod;
use gputopo_scheduler::gangs::{PodGroup, PodGroupSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_gang_lands_on_two_adjacent_leaves_or_binds_none() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("gang");
    // 4 leaves of 4 DGX A100 under 2 spines.
    let mut leaf_of = BTreeMap::new();
    for (spine, leaves) in [
        ("spine-a", ["leaf-1", "leaf-2"]),
        ("spine-b", ["leaf-3", "leaf-4"]),
    ] {
        for leaf in leaves {
            for i in 0..4 {
                let name = env.unique_name(&format!("a100-{leaf}-{i}"));
                fixture_node(
                    env,
                    &name,
                    DGX_A100,
                    &[
                        ("e2e-group", &group),
                        ("gputopo.dev/spine", spine),
                        ("gputopo.dev/leaf", leaf),
                    ],
                )
                .await;
                leaf_of.insert(name, (spine, leaf));
            }
        }
    }
    let sched = env.unique_name("sched-gang");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("gang").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    Api::<PodGroup>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &PodGroup::new(
                "train",
                PodGroupSpec {
                    min_member: 8,
                    schedule_timeout_seconds: None,
                },
            ),
        )
        .await
        .expect("creating the PodGroup");
    // Seven members first: none may bind until the eighth exists.
    for i in 0..7 {
        let mut p = gpu_pod(&format!("train-{i}"), &sched, &group, 8, &[]);
        p.metadata.labels = Some(BTreeMap::from([(
            "scheduling.x-k8s.io/pod-group".to_string(),
            "train".to_string(),
        )]));
        create(&pods, &p).await;
    }
    let e = one_event(&client, &ns, "train-0", "FailedScheduling", &s).await;
    assert!(note(&e).contains("PodGroup"), "{}", note(&e));
    assert!(
        pods.list(&ListParams::default())
            .await
            .expect("pods")
            .items
            .iter()
            .all(|p| node_of(p).is_none()),
        "a member bound before the gang was complete"
    );
    let mut p = gpu_pod("train-7", &sched, &group, 8, &[]);
    p.metadata.labels = Some(BTreeMap::from([(
        "scheduling.x-k8s.io/pod-group".to_string(),
        "train".to_string(),
    )]));
    create(&pods, &p).await;
    let mut nodes = BTreeSet::new();
    for i in 0..8 {
        let pod = bound(&pods, &format!("train-{i}"), &s).await;
        assert_eq!(gpus_of(&pod).len(), 8);
        nodes.insert(node_of(&pod).expect("bound"));
    }
    assert_eq!(nodes.len(), 8, "one member per node");
    let leaves: BTreeSet<_> = nodes.iter().map(|n| leaf_of[n]).collect();
    let spines: BTreeSet<_> = leaves.iter().map(|(s, _)| *s).collect();
    assert_eq!(leaves.len(), 2, "two whole leaves: {leaves:?}");
    assert_eq!(
        spines.len(),
        1,
        "adjacent leaves, under one spine: {leaves:?}"
    );

    // Eight nodes are left: a gang of nine 8-GPU pods cannot fit, and binds none.
    for i in 0..9 {
        create(
            &pods,
            &gpu_pod(
                &format!("big-{i}"),
                &sched,
                &group,
                8,
                &[("gputopo.dev/gang", "big"), ("gputopo.dev/gang-size", "9")],
            ),
        )
        .await;
    }
    for i in 0..9 {
        one_event(&client, &ns, &format!("big-{i}"), "FailedScheduling", &s).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bound_big = bound_named(&pods, "big-").await.len();
    assert_eq!(bound_big, 0, "a gang that cannot fit binds none");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_waiting_gang_holds_the_gpus_a_stream_of_small_pods_would_take() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("reserve");
    for slot in ["a", "b"] {
        fixture_node(
            env,
            &env.unique_name(&format!("a100-reserve-{slot}")),
            DGX_A100,
            &[
                ("e2e-group", &group),
                ("e2e-slot", slot),
                ("gputopo.dev/spine", "spine-a"),
                ("gputopo.dev/leaf", "leaf-1"),
            ],
        )
        .await;
    }
    let sched = env.unique_name("sched-reserve");
    // The shared cluster's size varies with the tests running beside this
    // one: allow any fraction, so that only this test's nodes matter.
    let s = SchedulerProcess::start_with_config(
        env,
        &sched,
        "gangs: {reservations: {maxFraction: 1.0}}\n",
    )
    .await;
    let ns = env.create_namespace("reserve").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // Both nodes full of one-GPU pods of the gang's own priority:
    // preemption cannot help, only waiting can.
    for slot in ["a", "b"] {
        for i in 0..8 {
            create(
                &pods,
                &slot_pod(&format!("fill-{slot}-{i}"), &sched, &group, slot, 1, &[]),
            )
            .await;
        }
    }
    for slot in ["a", "b"] {
        for i in 0..8 {
            bound(&pods, &format!("fill-{slot}-{i}"), &s).await;
        }
    }
    for i in 0..2 {
        create(
            &pods,
            &gpu_pod(
                &format!("big-{i}"),
                &sched,
                &group,
                8,
                &[
                    ("gputopo.dev/workload", "training"),
                    ("gputopo.dev/gang", "big"),
                    ("gputopo.dev/gang-size", "2"),
                ],
            ),
        )
        .await;
    }
    let e = wait_for(
        "a FailedScheduling event saying the gang reserved its GPUs",
        Duration::from_secs(60),
        || async {
            events(&client, &ns, "big-0", "FailedScheduling")
                .await
                .into_iter()
                .find(|e| note(e).contains("reserved 16 GPUs"))
        },
        || s.log(),
    )
    .await;
    assert!(
        note(&e).contains("no other pod may take them"),
        "{}",
        note(&e)
    );
    // The stream: each time a GPU frees up, a new one-GPU pod arrives.
    for slot in ["a", "b"] {
        for i in 0..8 {
            pods.delete(
                &format!("fill-{slot}-{i}"),
                &kube::api::DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await
            .expect("deleting a filler");
            create(
                &pods,
                &gpu_pod(&format!("small-{slot}-{i}"), &sched, &group, 1, &[]),
            )
            .await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    for i in 0..2 {
        let p = bound(&pods, &format!("big-{i}"), &s).await;
        assert_eq!(gpus_of(&p).len(), 8);
    }
    let small_bound = bound_named(&pods, "small-").await;
    assert!(
        small_bound.is_empty(),
        "small pods took GPUs reserved for the gang: {small_bound:?}"
    );
    let metrics = s.get("/metrics").await.expect("metrics").1;
    assert!(
        metrics.contains("gputopo_gang_wait_seconds_count 1"),
        "{metrics}"
    );
}
