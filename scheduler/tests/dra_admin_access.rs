//! Admin access on the real 1.37 control plane, kube-scheduler as the
//! oracle: in a namespace labelled `resource.kubernetes.io/admin-access`,
//! a monitoring pod's claim with `adminAccess: true` gets a GPU another
//! pod's claim holds, the result marked `adminAccess`.

mod common;

use common::dra::*;
use common::*;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn an_admin_claim_gets_a_gpu_another_claim_holds_as_kube_scheduler_allocates_it() {
    let env = env().await;
    env.with_scheduler().await;
    let client = env.client().await;
    let ns = env.create_namespace("dra-admin").await;
    let label = json!({"metadata": {"labels": {"resource.kubernetes.io/admin-access": "true"}}});
    Api::<Namespace>::all(client.clone())
        .patch(&ns, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("the namespace labelled");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let sched = env.unique_name("sched-dra-admin");
    let s = SchedulerProcess::start(env, &sched).await;
    for (who, scheduler) in [("kube", "default-scheduler"), ("ours", sched.as_str())] {
        let group = env.unique_name(&format!("dra-admin-{who}"));
        let node = env.unique_name(&format!("dra-admin-{who}-a100"));
        dra_node(env, &node, DGX_A100, "NVIDIA A100-SXM4-40GB", &group, false).await;
        // Every GPU taken by a training pod.
        let train = format!("{who}-train");
        named_claim(&client, &ns, &train, json!({"requests": [request(8)]})).await;
        create(&pods, &claim_pod(&train, scheduler, &group, &train, false)).await;
        bound(&pods, &train, &s).await;
        // A monitoring pod with admin access to one GPU.
        let watch = format!("{who}-watch");
        let admin = json!({"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": CLASS, "count": 1, "adminAccess": true}}]});
        named_claim(&client, &ns, &watch, admin).await;
        create(&pods, &claim_pod(&watch, scheduler, &group, &watch, false)).await;
        let pod = bound(&pods, &watch, &s).await;
        assert_eq!(node_of(&pod).as_deref(), Some(node.as_str()), "{who}");
        let results = results_of(&claim_of(&client, &ns, &pod).await);
        assert_eq!(results.len(), 1, "{who}: {results:?}");
        assert_eq!(results[0].admin_access, Some(true), "{who}");
        assert!(results[0].device.starts_with("gpu-"), "{who}: {results:?}");
    }
}
