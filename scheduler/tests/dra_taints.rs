//! Device taints from `DeviceTaintRule` objects (`resource.k8s.io/v1`,
//! Kubernetes 1.37), on the real control plane with kube-scheduler as the
//! oracle: a rule tainting one GPU of a node keeps every claim off it
//! unless the claim's request tolerates the taint, and a rule of effect
//! `None` taints nothing. Each scheduler gets a node of its own.
//!
//! The rules are created before each node and its slice (and before
//! gputopo-scheduler starts), so both schedulers know them when the
//! claims arrive.

mod common;

use common::dra::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::DeviceTaintRule;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::time::Duration;

async fn rule(client: &kube::Client, name: &str, node: &str, device: &str, effect: &str) {
    let rule: DeviceTaintRule = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": CLASS, "pool": node, "device": device},
            "taint": {"key": "gputopo.dev/maintenance", "value": "hbm-errors", "effect": effect},
        },
    }))
    .expect("a rule");
    Api::<DeviceTaintRule>::all(client.clone())
        .create(&PostParams::default(), &rule)
        .await
        .unwrap_or_else(|e| panic!("creating DeviceTaintRule {name}: {e}"));
}

fn tolerating(count: u32) -> Value {
    json!({"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": CLASS, "count": count,
        "tolerations": [{"key": "gputopo.dev/maintenance", "operator": "Exists", "effect": "NoSchedule"}],
    }}]})
}

/// Creates claim `name` and its pod; waits for the pod bound and returns
/// the claim's devices, sorted.
async fn placed(
    client: &kube::Client,
    ns: &str,
    name: &str,
    scheduler: &str,
    group: &str,
    devices: Value,
    log: impl Fn() -> String,
) -> Vec<String> {
    named_claim(client, ns, name, devices).await;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    create(&pods, &claim_pod(name, scheduler, group, name, false)).await;
    let pod = wait_for(
        &format!("{name} bound"),
        Duration::from_secs(90),
        || async { pods.get(name).await.ok().filter(|p| node_of(p).is_some()) },
        &log,
    )
    .await;
    let claim = claim_of(client, ns, &pod).await;
    let (_, mut devices) = allocated(&claim).expect("allocated");
    devices.sort();
    devices
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_taint_rule_keeps_claims_off_a_gpu_unless_they_tolerate_it_as_kube_scheduler_does() {
    let env = env().await;
    env.with_scheduler().await;
    let client = env.client().await;
    let ns = env.create_namespace("dra-taints").await;
    let sched = env.unique_name("sched-dra-taints");
    let mut scheduler_process = None;
    for who in ["kube", "ours"] {
        let group = env.unique_name(&format!("dra-taints-{who}"));
        let node = env.unique_name(&format!("dra-taints-{who}-a100"));
        rule(
            &client,
            &format!("{node}-gpu-0"),
            &node,
            "gpu-0",
            "NoSchedule",
        )
        .await;
        rule(&client, &format!("{node}-gpu-1"), &node, "gpu-1", "None").await;
        dra_node(env, &node, DGX_A100, "NVIDIA A100-SXM4-40GB", &group, false).await;
        let scheduler = if who == "kube" {
            "default-scheduler".to_string()
        } else {
            scheduler_process = Some(SchedulerProcess::start(env, &sched).await);
            sched.clone()
        };
        let log = || {
            scheduler_process
                .as_ref()
                .map(|s| s.log())
                .unwrap_or_default()
        };
        // Seven GPUs: every GPU but the tainted one (first fit would take gpu-0).
        let seven = placed(
            &client,
            &ns,
            &format!("{who}-seven"),
            &scheduler,
            &group,
            json!({"requests": [request(7)]}),
            log,
        )
        .await;
        assert_eq!(
            seven,
            device_names(&[1, 2, 3, 4, 5, 6, 7]),
            "{who}: {}",
            log()
        );
        // The one left is tainted: a claim that tolerates the taint gets it.
        let last = placed(
            &client,
            &ns,
            &format!("{who}-tolerant"),
            &scheduler,
            &group,
            tolerating(1),
            log,
        )
        .await;
        assert_eq!(last, device_names(&[0]), "{who}");
    }
}
