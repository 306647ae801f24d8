//! The ecosystem controllers harness (`gputopo_testenv::controllers`) on a
//! control plane of its own: a controller's webhooks answer through the
//! API server, and dropping it leaves neither its process nor a webhook
//! configuration pointing at a dead port. (What the controllers do with
//! gputopo is tested in scheduler/tests/ecosystem_*.rs.)

use gputopo_testenv::TestEnv;
use gputopo_testenv::controllers;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

fn jobset(name: &str, depends_on_first: bool) -> DynamicObject {
    let mut first = json!({
        "name": "workers",
        "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.invalid/c:1"}]
        }}}}
    });
    if depends_on_first {
        first["dependsOn"] = json!([{"name": "workers", "status": "Ready"}]);
    }
    serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicatedJobs": [first]}
    }))
    .expect("a JobSet")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_controller_answers_through_its_webhooks_and_leaves_nothing_when_dropped() {
    let env = TestEnv::start().await.expect("a control plane");
    let client = env.client().await;
    let controller = controllers::jobset::start(&env)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (mutating, validating) = controller.webhook_configurations();
    let (mutating, validating) = (mutating.to_vec(), validating.to_vec());
    assert!(!mutating.is_empty() && !validating.is_empty());
    let registered = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(&validating[0])
        .await
        .expect("the validating webhooks are registered");
    let url = format!("https://127.0.0.1:{}/", controller.webhook_port());
    for w in registered.webhooks.iter().flatten() {
        let at = w.client_config.url.as_deref().unwrap_or_default();
        assert!(at.starts_with(&url), "{} points at {at}", w.name);
    }

    // Refused by JobSet's validating webhook (not by the CRD's schema).
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "jobset.x-k8s.io",
        "v1alpha2",
        "JobSet",
    ));
    let jobsets = Api::<DynamicObject>::namespaced_with(client.clone(), "default", &resource);
    let refused = jobsets
        .create(&PostParams::default(), &jobset("first-depends", true))
        .await
        .expect_err("the first replicated job may not depend on another");
    let text = refused.to_string();
    assert!(
        text.contains("DependsOn can't be set for the first ReplicatedJob"),
        "{text}"
    );
    jobsets
        .create(&PostParams::default(), &jobset("plain", false))
        .await
        .expect("a valid JobSet is admitted");

    let pid = controller.pid();
    drop(controller);
    // SAFETY: kill with signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(pid as i32, 0) } == 0;
    assert!(!alive, "the controller (pid {pid}) outlived its handle");
    let left: Vec<String> = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("listing")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .chain(
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .list(&ListParams::default())
                .await
                .expect("listing")
                .items
                .into_iter()
                .filter_map(|c| c.metadata.name),
        )
        .filter(|n| mutating.contains(n) || validating.contains(n))
        .collect();
    assert!(
        left.is_empty(),
        "webhook configurations left behind: {left:?}"
    );
    // With its webhooks gone, the API server no longer calls the dead port.
    jobsets
        .create(&PostParams::default(), &jobset("after", false))
        .await
        .expect("a JobSet is created without the controller's webhooks");
}
