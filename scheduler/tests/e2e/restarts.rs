//! A scheduler killed and started again: pods it bound keep their GPUs, and
//! a gang it left half bound completes without a GPU given twice.

use super::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use std::collections::BTreeSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn after_a_restart_bound_pods_keep_their_gpus() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("restart");
    let node_name = env.unique_name("dgx1");
    fixture_node(env, &node_name, DGX1, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-restart");
    let ns = env.create_namespace("restart").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let mut s = SchedulerProcess::start(env, &sched).await;
    create(&pods, &gpu_pod("before", &sched, &group, 4, &[])).await;
    let before = gpus_of(&bound(&pods, "before", &s).await);
    s.process.kill();
    drop(s);

    create(&pods, &gpu_pod("after-1", &sched, &group, 4, &[])).await;
    create(&pods, &gpu_pod("after-2", &sched, &group, 4, &[])).await;
    let s = SchedulerProcess::start(env, &sched).await;
    let after = gpus_of(&bound(&pods, "after-1", &s).await);
    assert_eq!(after.len(), 4);
    assert!(
        after.iter().all(|g| !before.contains(g)),
        "a restarted scheduler gave away GPUs it had bound: {before:?} then {after:?}"
    );
    assert_eq!(gpus_of(&pods.get("before").await.expect("before")), before);
    let e = one_event(&client, &ns, "after-2", "FailedScheduling", &s).await;
    assert!(note(&e).starts_with("0/"), "{}", note(&e));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_scheduler_killed_mid_gang_completes_it_after_restart_and_assigns_no_gpu_twice() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("midgang");
    for i in 0..4 {
        fixture_node(
            env,
            &env.unique_name(&format!("a100-midgang-{i}")),
            DGX_A100,
            &[
                ("e2e-group", &group),
                ("gputopo.dev/spine", "spine-a"),
                ("gputopo.dev/leaf", "leaf-1"),
            ],
        )
        .await;
    }
    let sched = env.unique_name("sched-midgang");
    let ns = env.create_namespace("midgang").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // The first process dies after its second binding, between members.
    let mut s = SchedulerProcess::start_with(env, &sched, |port| {
        (
            vec![
                "--leader-elect-lease-name".into(),
                format!("{sched}-{port}"),
            ],
            vec![(
                gputopo_scheduler::scheduler::FAILPOINT_EXIT_AFTER_BINDS,
                "2".to_string(),
            )],
        )
    })
    .await;
    for i in 0..4 {
        create(
            &pods,
            &gpu_pod(
                &format!("member-{i}"),
                &sched,
                &group,
                8,
                &[
                    ("gputopo.dev/gang", "midgang"),
                    ("gputopo.dev/gang-size", "4"),
                ],
            ),
        )
        .await;
    }
    s.wait_exit("the first scheduler to abort mid-gang").await;
    let list = pods.list(&ListParams::default()).await.expect("pods").items;
    let bound_now = list.iter().filter(|p| node_of(p).is_some()).count();
    assert_eq!(
        bound_now, 2,
        "the failpoint should stop it after two bindings"
    );
    drop(s);

    let s = SchedulerProcess::start(env, &sched).await;
    let mut seen: BTreeSet<(String, u32)> = BTreeSet::new();
    for i in 0..4 {
        let p = bound(&pods, &format!("member-{i}"), &s).await;
        let node = node_of(&p).expect("bound");
        let gpus = gpus_of(&p);
        assert_eq!(gpus.len(), 8, "member-{i}: {gpus:?}");
        for g in gpus {
            assert!(
                seen.insert((node.clone(), g)),
                "GPU {g} of {node} assigned twice"
            );
        }
    }
}
