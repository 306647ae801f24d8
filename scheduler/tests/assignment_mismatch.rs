//! A node whose kubelet gave a pod other GPUs than gputopo chose, on the
//! real control plane: the pod gets a `GPUAssignmentMismatch` event naming
//! both sets, the node's counter goes up, and the next pod is placed by what
//! the node reports, not by the annotation. (No agent runs here: the test
//! writes the `GpuTopology` status an agent would, after reading the kubelet.)

mod common;

use common::*;
use gputopo_api::GpuTopology;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_node_reporting_other_gpus_is_believed_and_the_pod_is_told() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("mismatch");
    let node = env.unique_name("a100-mismatch");
    fixture_node(env, &node, DGX_A100, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-mismatch");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("mismatch").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);

    create(&pods, &gpu_pod("first", &sched, &group, 4, &[])).await;
    bound(&pods, "first", &s).await;
    // kwok runs it: wait for its start, which a reading must follow.
    let first = wait_for(
        "first started",
        Duration::from_secs(60),
        || async {
            pods.get("first").await.ok().filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .is_some()
            })
        },
        || s.log(),
    )
    .await;
    let chosen = gpus_of(&first);
    assert_eq!(chosen.len(), 4, "{chosen:?}");
    let got: Vec<u32> = (0..8).filter(|g| !chosen.contains(g)).collect();

    // The kubelet gave it the other four, as the agent reports.
    let pod_key = format!("{ns}/first");
    let allocations: Vec<_> = got
        .iter()
        .map(|&gpu| {
            json!({"gpu": gpu, "pods": [pod_key], "holders": [{
                "pod": pod_key, "container": "main", "resource": "nvidia.com/gpu",
                "device": format!("GPU-{gpu}"), "form": "whole"}]})
        })
        .collect();
    Api::<GpuTopology>::all(client.clone())
        .patch_status(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "allocations": allocations,
                "podResources": {"observedAt": Timestamp::now().to_string()}
            }})),
        )
        .await
        .expect("writing the GpuTopology status");

    let list = |g: &[u32]| g.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let (chosen_text, got_text) = (list(&chosen), list(&got));
    let event = event_where(
        &client,
        &ns,
        "first",
        "GPUAssignmentMismatch",
        |n| {
            n.contains(&format!("GPUs {chosen_text}")) && n.contains(&format!("reports {got_text}"))
        },
        &s,
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let metric = format!("gputopo_assignment_mismatch_total{{node=\"{node}\"}} 1");
    wait_for(
        "the mismatch counted",
        Duration::from_secs(30),
        || async { s.get("/metrics").await?.1.contains(&metric).then_some(()) },
        || s.log(),
    )
    .await;

    // The node says the chosen four are free: the next pod gets them.
    create(&pods, &gpu_pod("second", &sched, &group, 4, &[])).await;
    let second = bound(&pods, "second", &s).await;
    assert_eq!(gpus_of(&second), chosen, "placed by what the node reports");

    // Reported once, not every cycle.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let all = events(&client, &ns, "first", "GPUAssignmentMismatch").await;
    let count: i32 = all
        .iter()
        .map(|e| e.deprecated_count.unwrap_or(1).max(1))
        .sum();
    assert_eq!(count, 1, "{all:?}");
}
