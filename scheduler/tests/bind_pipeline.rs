//! The bind pipeline on a real control plane: a scheduler that dies with
//! bindings in flight leaves every pod either bound (with its GPUs) or
//! pending, and the next scheduler places the rest without promising a GPU
//! twice. (The pipeline's limit, failures and conflicts are unit-tested in
//! `src/cycle/tests/binds.rs`.)

mod common;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use std::collections::BTreeSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_scheduler_killed_with_bindings_in_flight_assigns_no_gpu_twice_after_restart() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("inflight");
    for i in 0..2 {
        fixture_node(
            env,
            &env.unique_name(&format!("a100-inflight-{i}")),
            DGX_A100,
            &[("e2e-group", &group)],
        )
        .await;
    }
    let sched = env.unique_name("sched-inflight");
    let ns = env.create_namespace("inflight").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // Eight 2-GPU pods fill both nodes exactly. They exist before the
    // scheduler starts, so its first cycle decides all of them and sends
    // their bindings together; it aborts once three are answered, with the
    // others sent and unanswered.
    for i in 0..8 {
        create(&pods, &gpu_pod(&format!("p{i}"), &sched, &group, 2, &[])).await;
    }
    let mut s = SchedulerProcess::spawn(env, &sched, "", |port| {
        (
            vec![
                "--leader-elect-lease-name".into(),
                format!("{sched}-{port}"),
                "--max-binds-in-flight".into(),
                "8".into(),
            ],
            vec![(
                gputopo_scheduler::scheduler::FAILPOINT_EXIT_AFTER_BINDS,
                "3".to_string(),
            )],
        )
    })
    .await;
    s.wait_exit("the first scheduler to abort with bindings in flight")
        .await;
    let list = pods.list(&ListParams::default()).await.expect("pods").items;
    let bound_before: BTreeSet<(String, String)> = list
        .iter()
        .filter_map(|p| Some((p.metadata.name.clone()?, node_of(p)?)))
        .collect();
    assert!(
        bound_before.len() >= 3,
        "at least the three answered bindings took effect: {bound_before:?}"
    );
    eprintln!(
        "{} of 8 bound when the first scheduler aborted",
        bound_before.len()
    );
    drop(s);

    let s = SchedulerProcess::start(env, &sched).await;
    let mut seen: BTreeSet<(String, u32)> = BTreeSet::new();
    for i in 0..8 {
        let name = format!("p{i}");
        let p = bound(&pods, &name, &s).await;
        let node = node_of(&p).expect("bound");
        if let Some((_, before)) = bound_before.iter().find(|(n, _)| *n == name) {
            assert_eq!(*before, node, "{name} moved after the restart");
        }
        let gpus = gpus_of(&p);
        assert_eq!(gpus.len(), 2, "{name}: {gpus:?}");
        for g in gpus {
            assert!(
                seen.insert((node.clone(), g)),
                "GPU {g} of {node} assigned twice"
            );
        }
    }
    assert_eq!(seen.len(), 16);
}
