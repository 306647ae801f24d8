//! The extender's hardening in the chart: TLS from the named Secrets, the
//! served profiles and limits passed to the container, the NetworkPolicy,
//! and the values that cannot work.

use super::{
    EXTENDER_VALUES, HelmError, NAMESPACE, RELEASE, container, env_value, render, render_ok,
    scheduler_object,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The files of the Secret volumes `container` mounts, copied under `dir`
/// from `secrets` (name → key → file) as the kubelet would project them:
/// each (mountPath, where it now is). Panics when the chart names a Secret
/// or a key `secrets` lacks.
pub fn secret_mounts(
    deployment: &Value,
    container: &Value,
    secrets: &BTreeMap<&str, BTreeMap<&str, PathBuf>>,
    dir: &Path,
) -> Vec<(String, PathBuf)> {
    let volumes = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes");
    let mut mounted = Vec::new();
    for mount in container["volumeMounts"].as_array().expect("volumeMounts") {
        let volume = volumes
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap_or_else(|| panic!("no volume for {mount}"));
        let Some(secret) = volume.get("secret") else {
            continue;
        };
        let name = secret["secretName"].as_str().expect("a secretName");
        let data = secrets
            .get(name)
            .unwrap_or_else(|| panic!("the chart mounts Secret {name}"));
        let mount_path = mount["mountPath"].as_str().expect("a mountPath");
        let local = dir.join(mount_path.trim_start_matches('/'));
        std::fs::create_dir_all(&local).expect("a mount dir");
        for item in secret["items"].as_array().expect("items") {
            let key = item["key"].as_str().expect("a key");
            let from = data
                .get(key)
                .unwrap_or_else(|| panic!("Secret {name} has no key {key}"));
            let path = item["path"].as_str().expect("a path");
            std::fs::copy(from, local.join(path)).expect("copying a Secret's file");
        }
        mounted.push((mount_path.to_owned(), local));
    }
    mounted
}

/// `value` with a mounted directory's path moved to where the files are.
pub fn remount(value: &str, mounts: &[(String, PathBuf)]) -> String {
    mounts
        .iter()
        .find_map(|(at, local)| {
            value
                .strip_prefix(&format!("{at}/"))
                .map(|rest| local.join(rest).display().to_string())
        })
        .unwrap_or_else(|| value.to_owned())
}

fn network_policy(docs: &[Value]) -> Option<&Value> {
    scheduler_object(docs, "NetworkPolicy")
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_extender_port_admits_kube_scheduler_only_and_the_metrics_one_namespace() {
    let docs = render_ok(
        RELEASE,
        NAMESPACE,
        Some("scheduler:\n  extender:\n    enabled: true\n    tls:\n      secretName: x\n"),
    );
    let policy = network_policy(&docs).expect("a NetworkPolicy");
    let deployment = scheduler_object(&docs, "Deployment").expect("the Deployment");
    assert_eq!(policy["metadata"]["name"], "gputopo-scheduler-extender");
    assert_eq!(
        policy["spec"],
        json!({
            "podSelector": {"matchLabels": deployment["spec"]["selector"]["matchLabels"]},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    // kubeadm's labels on its kube-scheduler static pod.
                    "from": [{
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                        "podSelector": {"matchLabels": {"component": "kube-scheduler"}}
                    }],
                    "ports": [{"port": "http-extender", "protocol": "TCP"}]
                },
                {
                    "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
                    "ports": [{"port": "http-metrics", "protocol": "TCP"}]
                }
            ]
        })
    );
    // The container's ports carry the names the policy admits.
    let ports: Vec<&str> = container(deployment)["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(ports, ["http-metrics", "http-extender"]);

    // More peers (a host-network kube-scheduler's node), another metrics namespace.
    let docs = render_ok(RELEASE, NAMESPACE, Some(EXTENDER_VALUES));
    let ingress = &network_policy(&docs).expect("a NetworkPolicy")["spec"]["ingress"];
    assert_eq!(
        ingress[0]["from"][1],
        json!({"ipBlock": {"cidr": "10.0.0.10/32"}})
    );
    assert_eq!(
        ingress[1]["from"],
        json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prometheus"}}}])
    );
    // Metrics from anywhere: an empty namespaceSelector, never an empty `from`.
    let docs = render_ok(
        RELEASE,
        NAMESPACE,
        Some(
            "scheduler:\n  extender:\n    enabled: true\n    tls: {secretName: x}\n    networkPolicy: {metricsNamespace: \"\"}\n",
        ),
    );
    assert_eq!(
        network_policy(&docs).expect("a NetworkPolicy")["spec"]["ingress"][1]["from"],
        json!([{"namespaceSelector": {}}])
    );
    // Off when asked; never in the secondary scheduler's (default) render.
    let docs = render_ok(
        RELEASE,
        NAMESPACE,
        Some(
            "scheduler:\n  extender:\n    enabled: true\n    tls: {secretName: x}\n    networkPolicy: {enabled: false}\n",
        ),
    );
    assert!(network_policy(&docs).is_none());
    assert!(network_policy(&render_ok(RELEASE, NAMESPACE, None)).is_none());
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_extender_serves_tls_from_the_named_secrets_with_its_limits_and_profiles() {
    let docs = render_ok(RELEASE, NAMESPACE, Some(EXTENDER_VALUES));
    let deployment = scheduler_object(&docs, "Deployment").expect("the Deployment");
    let extender = container(deployment);
    let env = |name| env_value(extender, name);
    assert_eq!(
        env("GPUTOPO_SCHEDULER_NAME"),
        Some("gpu-profile,default-scheduler")
    );
    assert_eq!(
        env("GPUTOPO_SCHEDULER_TLS_CERT_FILE"),
        Some("/etc/gputopo-extender/tls/tls.crt")
    );
    assert_eq!(
        env("GPUTOPO_SCHEDULER_TLS_KEY_FILE"),
        Some("/etc/gputopo-extender/tls/tls.key")
    );
    assert_eq!(
        env("GPUTOPO_SCHEDULER_CLIENT_CA_FILE"),
        Some("/etc/gputopo-extender/client-ca/ca.crt")
    );
    assert_eq!(env("GPUTOPO_SCHEDULER_INSECURE_PLAIN_HTTP"), None);
    assert_eq!(env("GPUTOPO_SCHEDULER_MAX_REQUEST_BYTES"), Some("8388608"));
    assert_eq!(env("GPUTOPO_SCHEDULER_REQUEST_TIMEOUT"), Some("20s"));
    assert_eq!(env("GPUTOPO_SCHEDULER_MAX_CONCURRENT_FILTERS"), Some("8"));
    assert_eq!(env("GPUTOPO_SCHEDULER_MAX_CONCURRENT_BINDS"), Some("16"));
    // The files the variables name are the Secrets' keys, mounted read-only.
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = |name: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, name).expect("a file");
        path
    };
    let secrets = BTreeMap::from([
        (
            "gputopo-extender-tls",
            BTreeMap::from([("tls.crt", file("crt")), ("tls.key", file("key"))]),
        ),
        (
            "kube-scheduler-client-ca",
            BTreeMap::from([("ca.crt", file("ca"))]),
        ),
    ]);
    let mounts = secret_mounts(deployment, extender, &secrets, &dir.path().join("root"));
    assert_eq!(mounts.len(), 2);
    for (var, content) in [
        ("GPUTOPO_SCHEDULER_TLS_CERT_FILE", "crt"),
        ("GPUTOPO_SCHEDULER_TLS_KEY_FILE", "key"),
        ("GPUTOPO_SCHEDULER_CLIENT_CA_FILE", "ca"),
    ] {
        let path = remount(env(var).expect("set"), &mounts);
        assert_eq!(
            std::fs::read_to_string(&path).ok().as_deref(),
            Some(content),
            "{var}"
        );
    }
    for mount in extender["volumeMounts"].as_array().expect("mounts") {
        assert_eq!(mount["readOnly"], true, "{mount}");
    }
    // Without clientCASecretName, the client CA is the TLS Secret's ca.crt.
    let docs = render_ok(
        RELEASE,
        NAMESPACE,
        Some("scheduler:\n  extender:\n    enabled: true\n    tls: {secretName: one}\n"),
    );
    let volumes = &scheduler_object(&docs, "Deployment").expect("the Deployment")["spec"]["template"]
        ["spec"]["volumes"];
    assert_eq!(
        volumes[2],
        json!({"name": "extender-client-ca", "secret": {"secretName": "one", "items": [{"key": "ca.crt", "path": "ca.crt"}]}})
    );
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn plain_http_is_rendered_only_when_asked_for() {
    let docs = render_ok(
        RELEASE,
        NAMESPACE,
        Some("scheduler:\n  extender:\n    enabled: true\n    tls: {insecurePlainHTTP: true}\n"),
    );
    let deployment = scheduler_object(&docs, "Deployment").expect("the Deployment");
    let extender = container(deployment);
    assert_eq!(
        env_value(extender, "GPUTOPO_SCHEDULER_INSECURE_PLAIN_HTTP"),
        Some("true")
    );
    assert_eq!(env_value(extender, "GPUTOPO_SCHEDULER_TLS_CERT_FILE"), None);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "the config only"
    );
    let cases = [
        (
            "scheduler:\n  extender:\n    enabled: true\n",
            "scheduler.extender.tls.secretName: name the Secret",
        ),
        (
            "scheduler:\n  extender:\n    enabled: true\n    tls: {insecurePlainHTTP: true, secretName: x}\n",
            "scheduler.extender.tls.insecurePlainHTTP and scheduler.extender.tls.secretName/clientCASecretName exclude each other",
        ),
        (
            "scheduler:\n  extender:\n    enabled: true\n    tls: {secretName: x}\n    networkPolicy:\n      kubeScheduler: {namespaceSelector: null, podSelector: null}\n",
            "an empty `from` would admit everyone",
        ),
        (
            "scheduler:\n  extender:\n    enabled: true\n    tls: {secretName: x}\n    schedulerNames: []\n",
            "/scheduler/extender/schedulerNames",
        ),
        (
            "scheduler:\n  extender:\n    enabled: true\n    tls: {secretName: x}\n    limits: {requestTimeout: \"25\"}\n",
            "/scheduler/extender/limits/requestTimeout",
        ),
    ];
    for (values, expected) in cases {
        match render(RELEASE, NAMESPACE, Some(values)) {
            Err(HelmError::Failed { stderr, .. }) => {
                assert!(stderr.contains(expected), "{values}: {stderr}")
            }
            other => panic!("{values}: expected helm to refuse, got {other:?}"),
        }
    }
}
