//! Binding conditions (KEP-5007, `resource.k8s.io/v1` beta fields, on by
//! default in 1.37): a device whose slice lists `bindingConditions` is
//! allocated, the conditions copied into the allocation result, and the
//! pod is bound only once the driver has set every one of them `True` in
//! the claim's `status.devices`. Real drivers doing this attach a device
//! over a fabric; here the test plays the driver, writing the condition as
//! such a driver's controller would. kube-scheduler is the oracle.

mod common;

use common::dra::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, PostParams};
use serde_json::json;
use std::time::Duration;

const READY: &str = "dra.example.com/attached";
const FAILED: &str = "dra.example.com/attach-failed";

/// A kwok DGX A100 whose GPU devices wait for `READY` before a pod binds.
async fn attachable_node(env: &gputopo_testenv::TestEnv, name: &str, group: &str) {
    let (_, topology) =
        fixture_node_with(env, name, DGX_A100, &[("e2e-group", group)], false).await;
    let client = env.client().await;
    let mut facts =
        gputopo_topology::dra_slice::DriverFacts::for_product("NVIDIA A100-SXM4-40GB", "40Gi")
            .expect("known");
    facts.publish_index = true;
    let mut slice =
        gputopo_topology::dra_slice::nvidia_resource_slice(name, &topology.spec, &facts);
    for d in slice["spec"]["devices"].as_array_mut().expect("devices") {
        d["bindingConditions"] = json!([READY]);
        d["bindingFailureConditions"] = json!([FAILED]);
    }
    let slice: ResourceSlice = serde_json::from_value(slice).expect("a slice");
    let created = Api::<ResourceSlice>::all(client.clone())
        .create(&PostParams::default(), &slice)
        .await
        .expect("the slice");
    let kept = created.spec.devices.as_ref().expect("devices")[0]
        .binding_conditions
        .clone();
    assert_eq!(
        kept,
        Some(vec![READY.to_string()]),
        "the API server keeps bindingConditions"
    );
    device_class(&client, CLASS, "device.driver == 'gpu.nvidia.com'").await;
}

/// Sets `READY` (or `FAILED`) True on every allocated device of `claim`, as the driver would.
async fn report(client: &kube::Client, ns: &str, claim: &ResourceClaim, condition: &str) {
    let results = results_of(claim);
    let devices: Vec<_> = results
        .iter()
        .map(|r| {
            json!({
                "driver": r.driver, "pool": r.pool, "device": r.device,
                "conditions": [{"type": condition, "status": "True", "reason": "Test",
                    "message": "set by the test", "lastTransitionTime": "2026-11-29T12:00:00Z"}],
            })
        })
        .collect();
    let mut updated = claim.clone();
    let mut status = serde_json::to_value(updated.status.take()).expect("json");
    status["devices"] = json!(devices);
    updated.status = Some(serde_json::from_value(status).expect("a status"));
    Api::<ResourceClaim>::namespaced(client.clone(), ns)
        .replace_status(
            claim.metadata.name.as_deref().expect("a name"),
            &PostParams::default(),
            &updated,
        )
        .await
        .expect("the driver's status");
}

/// On a node of its own, a pod of `scheduler` with a claim `who` for
/// `gpus` attachable GPUs; returns the node and the claim once allocated.
async fn allocated_for(
    env: &gputopo_testenv::TestEnv,
    ns: &str,
    who: &str,
    scheduler: &str,
    gpus: u32,
    log: impl Fn() -> String,
) -> (String, ResourceClaim) {
    let client = env.client().await;
    let group = env.unique_name(&format!("{ns}-{who}"));
    let node = env.unique_name(&format!("{ns}-{who}-a100"));
    attachable_node(env, &node, &group).await;
    named_claim(&client, ns, who, json!({"requests": [request(gpus)]})).await;
    create(
        &Api::<Pod>::namespaced(client.clone(), ns),
        &claim_pod(who, scheduler, &group, who, false),
    )
    .await;
    let claims = Api::<ResourceClaim>::namespaced(client, ns);
    let claim = wait_for(
        &format!("{who}: the claim allocated"),
        Duration::from_secs(90),
        || async {
            claims
                .get(who)
                .await
                .ok()
                .filter(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some()))
        },
        log,
    )
    .await;
    (node, claim)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_pod_binds_once_its_devices_binding_conditions_are_true_as_kube_scheduler_does() {
    let env = env().await;
    env.with_scheduler().await;
    let client = env.client().await;
    let ns = env.create_namespace("dra-binding").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let sched = env.unique_name("sched-dra-binding");
    let s = SchedulerProcess::start(env, &sched).await;
    for (who, scheduler) in [("kube", "default-scheduler"), ("ours", sched.as_str())] {
        // Allocated and reserved, the conditions copied, the pod not yet bound.
        let (node, claim) = allocated_for(env, &ns, who, scheduler, 2, || s.log()).await;
        let results = results_of(&claim);
        assert_eq!(results.len(), 2, "{who}");
        assert!(
            results
                .iter()
                .all(|r| r.binding_conditions.as_deref() == Some(&[READY.to_string()][..])),
            "{who}: {results:?}"
        );
        assert!(results.iter().all(|r| r.binding_failure_conditions.as_deref() == Some(&[FAILED.to_string()][..])), "{who}: {results:?}");
        let allocation = claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .expect("allocated");
        assert!(
            allocation.allocation_timestamp.is_some(),
            "{who}: the wait's start is written"
        );
        let pod = pods.get(who).await.expect("the pod");
        assert!(
            node_of(&pod).is_none(),
            "{who}: bound before the conditions"
        );
        report(&client, &ns, &claim, READY).await;
        let pod = wait_for(
            &format!("{who}: the pod bound"),
            Duration::from_secs(90),
            || async { pods.get(who).await.ok().filter(|p| node_of(p).is_some()) },
            || s.log(),
        )
        .await;
        assert_eq!(node_of(&pod).as_deref(), Some(node.as_str()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_failed_binding_condition_gives_the_devices_up_as_kube_scheduler_does() {
    let env = env().await;
    env.with_scheduler().await;
    let client = env.client().await;
    let ns = env.create_namespace("dra-binding-failed").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), &ns);
    let sched = env.unique_name("sched-dra-binding-failed");
    let s = SchedulerProcess::start(env, &sched).await;
    for (who, scheduler) in [("kube", "default-scheduler"), ("ours", sched.as_str())] {
        let (_, claim) = allocated_for(env, &ns, who, scheduler, 1, || s.log()).await;
        report(&client, &ns, &claim, FAILED).await;
        // The failed allocation is given up: the claim is deallocated (and
        // may be allocated afresh, its status.devices gone with the old
        // allocation); the pod is never bound on the failed devices.
        let before = claim.metadata.resource_version.clone();
        wait_for(
            &format!("{who}: the failed allocation given up"),
            Duration::from_secs(90),
            || async {
                let c = claims.get(who).await.ok()?;
                let reported = c
                    .status
                    .as_ref()
                    .and_then(|s| s.devices.as_ref())
                    .is_some_and(|d| !d.is_empty());
                (c.metadata.resource_version != before && !reported).then_some(())
            },
            || s.log(),
        )
        .await;
        let pod = pods.get(who).await.expect("the pod");
        assert!(
            node_of(&pod).is_none(),
            "{who}: not bound on failed devices"
        );
    }
}
