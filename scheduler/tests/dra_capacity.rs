//! Consumable capacity end to end on the real 1.37 control plane, with
//! kube-scheduler as the oracle: a kwok node whose NIC (dranet's shape)
//! allows multiple allocations and has 100Gi of bandwidth, policy min 10Gi
//! step 10Gi. Three pods each ask 35Gi (40Gi once rounded): two share the
//! NIC, the third stays pending, under either scheduler; every share is
//! written with its consumed capacity and a share id.

mod common;

use common::dra::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::time::Duration;

async fn shared_nic(client: &kube::Client, node: &str) {
    let slice: ResourceSlice = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-dra.net-0")},
        "spec": {
            "driver": "dra.net",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{
                "name": "pci-0000-80-00-0",
                "allowMultipleAllocations": true,
                "attributes": {"dra.net/rdma": {"bool": true}},
                "capacity": {"bandwidth": {"value": "100Gi", "requestPolicy": {
                    "default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}}}},
            }],
        },
    }))
    .expect("a slice");
    Api::<ResourceSlice>::all(client.clone())
        .create(&PostParams::default(), &slice)
        .await
        .unwrap_or_else(|e| panic!("creating the shared NIC of {node}: {e}"));
    device_class(
        client,
        NIC_CLASS,
        "device.driver == 'dra.net' && device.attributes['dra.net'].rdma == true",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_shared_nic_serves_pods_until_its_bandwidth_is_spent_as_kube_scheduler_does() {
    let env = env().await;
    env.with_scheduler().await;
    let client = env.client().await;
    let ns = env.create_namespace("dra-capacity").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let sched = env.unique_name("sched-dra-capacity");
    let s = SchedulerProcess::start(env, &sched).await;
    for (who, scheduler) in [("kube", "default-scheduler"), ("ours", sched.as_str())] {
        let group = env.unique_name(&format!("dra-capacity-{who}"));
        let node = env.unique_name(&format!("dra-capacity-{who}"));
        fixture_node_with(env, &node, PCIE_2SOCKET, &[("e2e-group", &group)], false).await;
        shared_nic(&client, &node).await;
        for i in 0..3 {
            let name = format!("{who}-{i}");
            named_claim(
                &client,
                &ns,
                &name,
                json!({"requests": [{"name": "gpus", "exactly": {"deviceClassName": NIC_CLASS,
                    "capacity": {"requests": {"bandwidth": "35Gi"}}}}]}),
            )
            .await;
            create(&pods, &claim_pod(&name, scheduler, &group, &name, false)).await;
            if i < 2 {
                let pod = wait_for(
                    &format!("{name} bound"),
                    Duration::from_secs(90),
                    || async { pods.get(&name).await.ok().filter(|p| node_of(p).is_some()) },
                    || s.log(),
                )
                .await;
                let claim = claim_of(&client, &ns, &pod).await;
                let result = claim
                    .status
                    .and_then(|s| s.allocation)
                    .and_then(|a| a.devices)
                    .and_then(|d| d.results)
                    .and_then(|r| r.into_iter().next())
                    .expect("a result");
                let consumed = result.consumed_capacity.expect("consumed capacity");
                let bytes = gputopo_api::quantity::parse_bytes(&consumed["bandwidth"].0)
                    .expect("a quantity");
                assert_eq!(bytes, 40 << 30, "{who}: 35Gi rounds up to 40Gi");
                assert!(result.share_id.is_some(), "{who}: a share id");
            } else {
                let pending = wait_for(
                    &format!("{name} reported unschedulable"),
                    Duration::from_secs(90),
                    || async {
                        let pod = pods.get(&name).await.ok()?;
                        assert!(node_of(&pod).is_none(), "{who}: 120Gi of 100Gi");
                        pod.status?.conditions?.into_iter().find(|c| {
                            c.type_ == "PodScheduled"
                                && c.status == "False"
                                && c.reason.as_deref() == Some("Unschedulable")
                        })
                    },
                    || s.log(),
                )
                .await;
                assert!(
                    pending.message.unwrap_or_default().starts_with("0/"),
                    "{who}"
                );
            }
        }
    }
}
