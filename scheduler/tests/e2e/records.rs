//! No GPU given twice, even where the admission policy is not installed:
//! a tenant (a user with the default `edit` role in its namespace) edits a
//! bound pod's GPU record once the policy is removed; the scheduler keeps
//! the record it wrote (and, restarted, the copy in the pod's status, which
//! the tenant cannot write), says so in events and a metric, and the next
//! pod gets other GPUs. And where nobody says which GPUs a pod holds, GPUs
//! are handed out by count.

use super::common::*;
use gputopo_testenv::TestEnv;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Duration;

const POLICY: &str = "gputopo-scheduler-assignment-record";
const CONDITION: &str = "gputopo.dev/gpu-assignment";

/// A client for a user bound to the default `edit` ClusterRole in `ns`.
async fn tenant(env: &TestEnv, admin: &Client, ns: &str) -> Client {
    let user = env.unique_name("tenant");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "tenant-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding the tenant to edit");
    env.client_for_user(&user, &[]).await
}

fn edit(value: &str) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"metadata": {"annotations": {"gputopo.dev/assigned-gpus": value}}}))
}

fn condition_message(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION)?
        .message
        .clone()
}

async fn remove_policy(admin: &Client) {
    let dp = DeleteParams::default();
    let gone = |r: Result<_, kube::Error>| match r {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("removing the policy: {e}"),
    };
    gone(
        Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone())
            .delete(POLICY, &dp)
            .await
            .map(|_| ()),
    );
    gone(
        Api::<ValidatingAdmissionPolicy>::all(admin.clone())
            .delete(POLICY, &dp)
            .await
            .map(|_| ()),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn an_edited_record_never_gives_a_gpu_twice_across_a_restart() {
    let env = env().await;
    let admin = env.client().await;
    let group = env.unique_name("records");
    let node = env.unique_name("h100-records");
    fixture_node(env, &node, HGX_H100, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-records");
    let ns = env.create_namespace("records").await;
    let tenant = tenant(env, &admin, &ns).await;
    let pods = Api::<Pod>::namespaced(tenant.clone(), &ns);
    // As the demo does: the chart's policy first.
    gputopo_testenv::install_admission_policies(&admin, "scheduler-assignment-policy.yaml")
        .await
        .expect("the policy installs");
    let mut s = SchedulerProcess::start(env, &sched).await;

    create(&pods, &gpu_pod("ddp-4gpu", &sched, &group, 4, &[])).await;
    let first = gpus_of(&bound(&pods, "ddp-4gpu", &s).await);
    assert_eq!(first.len(), 4, "{first:?}");
    // The same record in the pod's status, kept once kwok runs the pod.
    let written = format!(
        "gputopo.dev/assigned-gpus={}",
        first
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    wait_for(
        "the record in the running pod's status",
        Duration::from_secs(60),
        || async {
            let p = pods.get("ddp-4gpu").await.ok()?;
            let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
            (running && condition_message(&p)?.starts_with(&written)).then_some(())
        },
        || s.log(),
    )
    .await;
    // The tenant cannot write the status record, nor (with the policy)
    // the annotations.
    let status = pods
        .patch_status(
            "ddp-4gpu",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": CONDITION, "status": "True", "message": "gputopo.dev/assigned-gpus=4,5,6,7"}]}})),
        )
        .await;
    assert!(
        matches!(&status, Err(kube::Error::Api(e)) if e.code == 403),
        "{status:?}"
    );
    assert!(
        pods.patch("ddp-4gpu", &PatchParams::default(), &edit("x"))
            .await
            .is_err()
    );

    // The policy removed (the README's demo, a plain install without it):
    // the tenant's edit goes through once the API server stops enforcing.
    remove_policy(&admin).await;
    wait_for(
        "the edit accepted without the policy",
        Duration::from_secs(60),
        || async {
            pods.patch("ddp-4gpu", &PatchParams::default(), &edit("x"))
                .await
                .ok()
        },
        || s.log(),
    )
    .await;
    let e = event_where(
        &admin,
        &ns,
        "ddp-4gpu",
        "GPURecordEdited",
        |n| n.contains("assigned-gpus=x"),
        &s,
    )
    .await;
    assert!(note(&e).contains(&written), "{}", note(&e));

    // Restarted between the edit and the next pod: the status record wins.
    s.process.kill();
    drop(s);
    let s = SchedulerProcess::start(env, &sched).await;
    create(&pods, &gpu_pod("next", &sched, &group, 4, &[])).await;
    let next = gpus_of(&bound(&pods, "next", &s).await);
    assert_eq!(next.len(), 4, "{next:?}");
    assert!(
        next.iter().all(|g| !first.contains(g)),
        "GPUs given twice: ddp-4gpu holds {first:?}, next got {next:?}"
    );
    event_where(
        &admin,
        &ns,
        "ddp-4gpu",
        "GPURecordDisagrees",
        |n| n.contains(&written),
        &s,
    )
    .await;
    let metrics = wait_for(
        "the finding counted",
        Duration::from_secs(30),
        || async {
            let (_, body) = s.get("/metrics").await?;
            body.contains("gputopo_gpu_record_findings_total{finding=\"disagrees\"} 1")
                .then_some(body)
        },
        || s.log(),
    )
    .await;
    assert!(metrics.contains("gputopo_gpu_record_findings"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn gpus_nobody_named_are_handed_out_by_count() {
    let env = env().await;
    let admin = env.client().await;
    let group = env.unique_name("by-count");
    let node = env.unique_name("h100-by-count");
    fixture_node(env, &node, HGX_H100, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-by-count");
    let ns = env.create_namespace("by-count").await;
    let pods = Api::<Pod>::namespaced(admin.clone(), &ns);
    // Bound by someone else, with no record; no agent reports the node.
    let mut other = gpu_pod("other", "default-scheduler", &group, 4, &[]);
    other.spec.as_mut().expect("a spec").node_name = Some(node.clone());
    create(&pods, &other).await;
    let s = SchedulerProcess::start(env, &sched).await;

    create(&pods, &gpu_pod("counted", &sched, &group, 4, &[])).await;
    let counted = bound(&pods, "counted", &s).await;
    assert_eq!(annotation(&counted, "gputopo.dev/assigned-gpus"), None);
    assert_eq!(condition_message(&counted), None);
    let e = one_event(&admin, &ns, "counted", "Scheduled", &s).await;
    let text = note(&e);
    assert!(
        text.contains("4 GPU(s) by count") && text.contains(&format!("{ns}/other")),
        "{text}"
    );
}
