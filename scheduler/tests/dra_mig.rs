//! MIG partitions end to end on the real 1.37 control plane, kube-scheduler
//! the oracle: kwok DGX A100 nodes whose GPUs NVIDIA's driver publishes
//! with dynamic MIG (a counters slice and a slice per GPU, as its
//! `partitions.go` lays them out on 1.35+). No driver prepares the
//! partitions here (no GPU); what is checked is what the API server holds.
//!
//! On each scheduler's own node: two 3g.20gb partitions and a 1g.5gb are
//! allocated within the GPUs' counters, and then a pod asking all eight
//! whole GPUs stays pending, as partitions hold their GPUs.

mod common;

use common::dra::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

fn migs(profile: &str, count: u32) -> Value {
    json!({"requests": [{"name": "parts", "exactly": {"deviceClassName": MIG_CLASS, "count": count,
        "selectors": [{"cel": {"expression":
            format!("device.attributes['gpu.nvidia.com'].profile == '{profile}'")}}]}}]})
}

/// The PodScheduled=False message once a scheduler gave one.
async fn pending_message(pods: &Api<Pod>, name: &str, log: impl Fn() -> String) -> String {
    wait_for(
        &format!("{name} reported unschedulable"),
        Duration::from_secs(90),
        || async {
            let pod = pods.get(name).await.ok()?;
            assert!(node_of(&pod).is_none(), "{name} must not be bound");
            let c = pod
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
            (c.reason.as_deref() == Some("Unschedulable")).then(|| c.message.unwrap_or_default())
        },
        log,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn mig_partitions_fit_their_gpus_counters_and_hold_the_gpus_as_kube_scheduler_does() {
    let env = env().await;
    env.with_scheduler().await;
    let client = env.client().await;
    let ns = env.create_namespace("dra-mig").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let sched = env.unique_name("sched-dra-mig");
    let s = SchedulerProcess::start(env, &sched).await;
    for (who, scheduler) in [("kube", "default-scheduler"), ("ours", sched.as_str())] {
        let group = env.unique_name(&format!("dra-mig-{who}"));
        let node = env.unique_name(&format!("dra-mig-{who}-a100"));
        mig_node(env, &node, DGX_A100, &group).await;
        let mut placed: Vec<String> = Vec::new();
        for (i, (profile, count)) in [("3g.20gb", 2), ("1g.5gb", 1)].into_iter().enumerate() {
            let name = format!("{who}-part-{i}");
            named_claim(&client, &ns, &name, migs(profile, count)).await;
            create(&pods, &claim_pod(&name, scheduler, &group, &name, false)).await;
            let pod = wait_for(
                &format!("{name} bound"),
                Duration::from_secs(90),
                || async { pods.get(&name).await.ok().filter(|p| node_of(p).is_some()) },
                || s.log(),
            )
            .await;
            let (on, devices) = allocated(&claim_of(&client, &ns, &pod).await).expect("allocated");
            assert_eq!(on, node, "{who}");
            assert_eq!(devices.len(), count as usize, "{who}: {devices:?}");
            placed.extend(devices);
        }
        // Within each GPU: memory slices [start, start + size) never overlap.
        let mut slices: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for d in &placed {
            let (gpu, rest) = d.split_once("-mig-").expect("a partition");
            let parts: Vec<&str> = rest.split('-').collect();
            let start: u32 = parts[2].parse().expect("a start");
            let size = if parts[0] == "3g20gb" { 4 } else { 1 };
            slices
                .entry(gpu.to_string())
                .or_default()
                .extend(start..start + size);
        }
        for (gpu, used) in &slices {
            let mut unique = used.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(
                unique.len(),
                used.len(),
                "{who}: {gpu} slices overlap: {placed:?}"
            );
        }
        // Partitions hold their GPUs: eight whole GPUs do not fit.
        let whole = format!("{who}-whole");
        named_claim(&client, &ns, &whole, json!({"requests": [request(8)]})).await;
        create(&pods, &claim_pod(&whole, scheduler, &group, &whole, false)).await;
        let message = pending_message(&pods, &whole, || s.log()).await;
        assert!(message.starts_with("0/"), "{who}: {message}");
    }
}
