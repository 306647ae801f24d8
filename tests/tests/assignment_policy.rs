//! The shipped admission policy (`daemonset/scheduler-assignment-policy.yaml`,
//! the chart's twin) on the real API server: once a pod is bound, nobody
//! but the scheduler may edit its GPU record; before that, and for any
//! other annotation, nothing changes.

use gputopo_api::k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_testenv::TestEnv;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::json;
use std::time::{Duration, Instant};

fn manifests() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../daemonset/scheduler-assignment-policy.yaml"
    );
    let text = std::fs::read_to_string(path).expect("the shipped policy");
    let docs: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_json::Value::deserialize(d).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect();
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} in {path}"))
    };
    (
        serde_json::from_value(find("ValidatingAdmissionPolicy")).expect("a policy"),
        serde_json::from_value(find("ValidatingAdmissionPolicyBinding")).expect("a binding"),
    )
}

fn annotate(key: &str, value: &str) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"metadata": {"annotations": {key: value}}}))
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_bound_pods_gpu_record_cannot_be_edited() {
    let env = TestEnv::shared().await;
    let client = env.client().await;
    let (policy, binding) = manifests();
    let create = |e: kube::Error| match e {
        kube::Error::Api(s) if s.code == 409 => Ok(()),
        other => Err(other),
    };
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .map(|_| ())
        .or_else(create)
        .expect("the policy is accepted");
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .map(|_| ())
        .or_else(create)
        .expect("its binding is accepted");

    let ns = env.create_namespace("record").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = |name: &str, node: Option<&str>| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {"gputopo.dev/assigned-gpus": "0,1,2,3"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}
        }))
        .expect("a pod")
    };
    pods.create(&PostParams::default(), &pod("bound", Some("node-1")))
        .await
        .expect("a bound pod");
    pods.create(&PostParams::default(), &pod("pending", None))
        .await
        .expect("a pending pod");
    let params = PatchParams::default();

    // The API server loads new policies asynchronously: wait for the
    // denial, bounded, rather than reading once. The probe is a dry run
    // (admission runs, nothing is stored), so the record is never left
    // edited when the policy takes effect between two requests.
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match pods
            .patch(
                "bound",
                &dry_run,
                &annotate("gputopo.dev/assigned-gpus", "x"),
            )
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 403 => break,
            Ok(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Ok(_) => panic!("the policy never refused editing a bound pod's record"),
            Err(e) => panic!("patching (dry run): {e}"),
        }
    }
    let refused = match pods
        .patch(
            "bound",
            &params,
            &annotate("gputopo.dev/assigned-gpus", "x"),
        )
        .await
    {
        Err(kube::Error::Api(s)) => s,
        other => panic!("editing the record once the policy is in force: {other:?}"),
    };
    assert!(
        refused.message.contains("recorded by its binding")
            && refused.message.contains("gputopo.dev/assigned-gpus"),
        "{refused:?}"
    );
    for (key, value) in [
        ("gputopo.dev/assigned-gpu-uuids", "GPU-x"),
        ("scheduler.gputopo.dev/bottleneck", "NV18"),
    ] {
        let e = pods
            .patch("bound", &params, &annotate(key, value))
            .await
            .expect_err("adding to the record is an edit too");
        assert!(e.to_string().contains(key), "{e}");
    }
    let removal =
        Patch::Merge(json!({"metadata": {"annotations": {"gputopo.dev/assigned-gpus": null}}}));
    pods.patch("bound", &params, &removal)
        .await
        .expect_err("removing the record is an edit too");

    // Other annotations of a bound pod, and the record of a pod not bound
    // yet (the extender writes it before binding), stay editable.
    pods.patch("bound", &params, &annotate("team", "ml"))
        .await
        .expect("an unrelated annotation");
    pods.patch(
        "pending",
        &params,
        &annotate("gputopo.dev/assigned-gpus", "4,5"),
    )
    .await
    .expect("a pending pod's record");
    let bound = pods.get("bound").await.expect("the pod");
    assert_eq!(
        bound
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("gputopo.dev/assigned-gpus"))
            .map(String::as_str),
        Some("0,1,2,3")
    );
}
