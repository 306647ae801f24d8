//! `helm install`, `upgrade` (to extender mode too) and `uninstall` on the
//! real API server; the uninstall leaves the CRD (its keep policy).

use super::helm::helm_on;
use super::objects::{container, env_value};
use gputopo_testenv::TestEnv;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use serde_json::{Value, json};

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn helm_installs_upgrades_and_uninstalls_leaving_the_crd() {
    let env = TestEnv::shared().await;
    let client = env.client().await;
    let namespace = env.unique_name("gputopo-helm");
    let release = "lifecycle";
    let agent_name = "lifecycle-gputopo-agent";
    let daemonsets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(client.clone(), &namespace);
    let gfd_env = |ds: &k8s_openapi::api::apps::v1::DaemonSet| {
        let value = serde_json::to_value(ds).expect("serializes");
        env_value(container(&value), "GPUTOPO_GFD_COMPATIBLE_LABELS").map(str::to_owned)
    };

    // The shared control plane installed the CRD itself, as plain manifests
    // or another release would have: the release takes it over
    // (docs/upgrades.md, "A CRD Helm did not install").
    let out = helm_on(
        env,
        &[
            "install",
            release,
            "CHART",
            "-n",
            &namespace,
            "--create-namespace",
            "--take-ownership",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("STATUS: deployed"), "{out}");
    assert!(
        out.contains(&format!("rollout status daemonset/{agent_name}")),
        "NOTES: {out}"
    );
    assert!(
        out.contains("The GpuTopology CRD is kept by `helm uninstall`"),
        "NOTES: {out}"
    );
    let ds = daemonsets.get(agent_name).await.expect("the DaemonSet");
    assert_eq!(gfd_env(&ds).as_deref(), Some("true"));

    let out = helm_on(
        env,
        &[
            "upgrade",
            release,
            "CHART",
            "-n",
            &namespace,
            "--set",
            "agent.gfdCompatibleLabels=false",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.contains("left to GPU Feature Discovery"),
        "NOTES: {out}"
    );
    let ds = daemonsets.get(agent_name).await.expect("the DaemonSet");
    assert_eq!(gfd_env(&ds).as_deref(), Some("false"));

    // To extender mode: NOTES print the KubeSchedulerConfiguration pointing
    // at the extender's Service; the lease Role goes.
    let out = helm_on(
        env,
        &[
            "upgrade",
            release,
            "CHART",
            "-n",
            &namespace,
            "--reuse-values",
            "--set",
            "scheduler.extender.enabled=true",
            "--set",
            "scheduler.extender.tls.secretName=lifecycle-extender-tls",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let service = "lifecycle-gputopo-scheduler-extender";
    for line in [
        "apiVersion: kubescheduler.config.k8s.io/v1".to_string(),
        "kind: KubeSchedulerConfiguration".to_string(),
        format!("- urlPrefix: https://{service}.{namespace}.svc:10262"),
        "enableHTTPS: true".to_string(),
        "binds only pods whose schedulerName is default-scheduler".to_string(),
        "filterVerb: filter".to_string(),
        "prioritizeVerb: prioritize".to_string(),
        "bindVerb: bind".to_string(),
        "weight: 5".to_string(),
        "nodeCacheCapable: true".to_string(),
        "- name: nvidia.com/gpu".to_string(),
    ] {
        assert!(out.contains(&line), "NOTES lack {line:?}: {out}");
    }
    // The snippet is a valid KubeSchedulerConfiguration fragment.
    let snippet: String = out
        .lines()
        .skip_while(|l| !l.contains("apiVersion: kubescheduler.config.k8s.io/v1"))
        .take_while(|l| l.starts_with("  "))
        .map(|l| format!("{}\n", &l[2..]))
        .collect();
    let config: Value = serde_yaml::from_str(&snippet).expect("the NOTES snippet is YAML");
    assert_eq!(
        config["extenders"][0]["managedResources"][0]["ignoredByScheduler"],
        false
    );
    assert_eq!(config["extenders"][0]["httpTimeout"], "30s");
    assert_eq!(
        config["extenders"][0]["tlsConfig"],
        json!({
            "certFile": "/etc/kubernetes/gputopo-extender/client.crt",
            "keyFile": "/etc/kubernetes/gputopo-extender/client.key",
            "caFile": "/etc/kubernetes/gputopo-extender/server-ca.crt"
        })
    );
    let policies: Api<k8s_openapi::api::networking::v1::NetworkPolicy> =
        Api::namespaced(client.clone(), &namespace);
    assert!(policies.get_opt(service).await.expect("get").is_some());
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), &namespace);
    assert!(services.get_opt(service).await.expect("get").is_some());
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &namespace);
    let deployment = deployments
        .get("lifecycle-gputopo-scheduler")
        .await
        .expect("the scheduler Deployment");
    let value = serde_json::to_value(&deployment).expect("serializes");
    assert_eq!(container(&value)["args"][0], "extender");
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(client.clone(), &namespace);
    assert!(
        roles
            .get_opt("lifecycle-gputopo-scheduler")
            .await
            .expect("get")
            .is_none()
    );

    helm_on(env, &["uninstall", release, "-n", &namespace]).unwrap_or_else(|e| panic!("{e}"));
    assert!(daemonsets.get_opt(agent_name).await.expect("get").is_none());
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    assert!(roles.get_opt(agent_name).await.expect("get").is_none());
    // The CRD template's keep policy: the GpuTopology CRD, and so every
    // node's object, survives an uninstall (docs/upgrades.md), though the
    // release held it.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .get_opt("gputopologies.gputopo.dev")
        .await
        .expect("get")
        .expect("the CRD survives the uninstall");
    let annotations = crd.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations
            .get("meta.helm.sh/release-name")
            .map(String::as_str),
        Some(release)
    );
}
