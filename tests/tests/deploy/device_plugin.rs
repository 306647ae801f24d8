//! The optional device plugin in the chart (`devicePlugin.*`), its plain
//! manifests (`daemonset/device-plugin/`) and its image:
//!
//! - nothing of it renders by default;
//! - enabled, it is a DaemonSet, a ServiceAccount and exactly one ClusterRole
//!   (pods: get, list, watch) with its binding, nothing else;
//! - its pod: uid 0 (the kubelet's socket directory is root's) with every
//!   capability dropped, no privilege escalation, a read-only root
//!   filesystem, RuntimeDefault seccomp; one host path, the kubelet's
//!   device-plugin directory; the node name from the downward API; NVML as
//!   the agent gets it; `/healthz` and `/readyz` probes on the port it serves;
//! - the real API server admits every object, and the chart's identity can
//!   list and watch the pods of its node and do nothing else;
//! - the plain manifests are the same objects; the Dockerfile builds what
//!   `scripts/static-build` checks.
//!
//! Its metrics Service and ServiceMonitor: `device_plugin_metrics.rs`.

use super::{
    HelmError, NAMESPACE, RELEASE, apply_kinds, container, documents, dry_run_apply,
    ensure_namespace, env_value, find, kind_name, permissions, render, render_ok, root, triples,
    without_helm_labels,
};
use gputopo_testenv::{TestEnv, fake_gpu_node};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub(super) const ENABLED: &str = "devicePlugin:\n  enabled: true\n";
const DIR: &str = "/var/lib/kubelet/device-plugins";

pub(super) fn is_device_plugin(doc: &Value) -> bool {
    doc["metadata"]["labels"]["app.kubernetes.io/component"] == "device-plugin"
}

pub(super) fn device_plugin_docs(docs: &[Value]) -> Vec<&Value> {
    docs.iter().filter(|d| is_device_plugin(d)).collect()
}

pub(super) fn object<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && is_device_plugin(d))
        .unwrap_or_else(|| panic!("no device-plugin {kind}"))
}

fn pod_spec(docs: &[Value]) -> &Value {
    &object(docs, "DaemonSet")["spec"]["template"]["spec"]
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn nothing_of_the_device_plugin_renders_by_default() {
    let default = render_ok(RELEASE, NAMESPACE, None);
    assert!(!default.is_empty());
    let leaked: Vec<_> = default
        .iter()
        .filter(|d| {
            is_device_plugin(d)
                || serde_json::to_string(d)
                    .expect("json")
                    .contains("device-plugin")
        })
        .map(kind_name)
        .collect();
    assert!(leaked.is_empty(), "rendered by default: {leaked:?}");
    // Enabling it adds exactly its objects (its metrics Service too, as
    // `metrics.service.enabled` is on by default), and changes no other.
    let enabled = render_ok(RELEASE, NAMESPACE, Some(ENABLED));
    let others: Vec<&Value> = enabled.iter().filter(|d| !is_device_plugin(d)).collect();
    assert_eq!(others, default.iter().collect::<Vec<_>>());
    let mut kinds: Vec<&str> = device_plugin_docs(&enabled)
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "DaemonSet",
            "Service",
            "ServiceAccount"
        ]
    );
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_device_plugins_rbac_is_reading_pods_and_nothing_else() {
    let docs = render_ok(RELEASE, NAMESPACE, Some(ENABLED));
    let role = object(&docs, "ClusterRole");
    assert_eq!(
        permissions(role),
        triples(&[("", "pods", &["get", "list", "watch"])])
    );
    let binding = object(&docs, "ClusterRoleBinding");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
               "name": role["metadata"]["name"]})
    );
    let account = object(&docs, "ServiceAccount");
    assert_eq!(account["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                "namespace": NAMESPACE}])
    );
    assert_eq!(
        pod_spec(&docs)["serviceAccountName"],
        account["metadata"]["name"]
    );
    // No namespaced Role of its own either.
    assert!(
        device_plugin_docs(&docs)
            .iter()
            .all(|d| d["kind"] != "Role" && d["kind"] != "RoleBinding")
    );
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_device_plugin_pod_is_as_tight_as_the_kubelet_socket_allows() {
    let docs = render_ok(RELEASE, NAMESPACE, Some(ENABLED));
    let spec = pod_spec(&docs);
    // uid 0 for the root-owned socket directory, and nothing more.
    assert_eq!(
        spec["securityContext"],
        json!({"runAsNonRoot": false, "runAsUser": 0, "runAsGroup": 0,
               "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let plugin = container(object(&docs, "DaemonSet"));
    assert_eq!(
        plugin["securityContext"],
        json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
               "privileged": false, "capabilities": {"drop": ["ALL"]}})
    );
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        assert!(spec.get(host).is_none(), "{host}");
    }
    // One volume: the kubelet's device-plugin directory, where the plugin
    // looks for it.
    assert_eq!(
        spec["volumes"],
        json!([{"name": "device-plugins", "hostPath": {"path": DIR, "type": "Directory"}}])
    );
    assert_eq!(
        plugin["volumeMounts"],
        json!([{"name": "device-plugins", "mountPath": DIR}])
    );
    assert_eq!(env_value(plugin, "GPUTOPO_DEVICE_PLUGIN_DIR"), Some(DIR));
    // The node's name from the downward API.
    let node = plugin["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "GPUTOPO_NODE_NAME")
        .expect("GPUTOPO_NODE_NAME");
    assert_eq!(node["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");
    // NVML as the agent gets it, and no GPU taken.
    assert_eq!(plugin["args"], json!(["--nvml"]));
    assert_eq!(env_value(plugin, "NVIDIA_VISIBLE_DEVICES"), Some("all"));
    assert_eq!(
        env_value(plugin, "NVIDIA_DRIVER_CAPABILITIES"),
        Some("utility")
    );
    assert!(
        plugin["resources"]["limits"]
            .get("nvidia.com/gpu")
            .is_none()
    );
    // Probes on the port the plugin listens on.
    let port = &plugin["ports"][0];
    assert_eq!(port["name"], "http-metrics");
    assert_eq!(
        env_value(plugin, "GPUTOPO_LISTEN"),
        Some(format!("0.0.0.0:{}", port["containerPort"]).as_str())
    );
    assert_eq!(
        plugin["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "http-metrics"})
    );
    assert_eq!(
        plugin["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "http-metrics"})
    );
    // Node selection and priority as the agent's.
    let agent = &find(&docs, "DaemonSet").expect("the agent")["spec"]["template"]["spec"];
    assert_eq!(agent["serviceAccountName"], "gputopo-agent");
    for key in ["affinity", "tolerations", "priorityClassName"] {
        assert_eq!(spec[key], agent[key], "{key}");
    }
    assert_eq!(spec["priorityClassName"], "system-node-critical");
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn non_default_device_plugin_values_render_as_asked() {
    let values = r#"
devicePlugin:
  enabled: true
  runtimeClassName: nvidia
  deviceListStrategy: [envvar, cdi-cri]
  healthInterval: 30s
  nvmlLibrary: /usr/lib64/libnvidia-ml.so.1
  port: 9400
  kubeletDevicePluginDir:
    hostPath: /data/kubelet/device-plugins
  nodeSelector:
    gputopo.dev/device-plugin: "true"
  serviceAccount:
    create: false
    name: gpu-plugin
  image:
    digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
"#;
    let docs = render_ok("team-a", "gpu-infra", Some(values));
    let ds = object(&docs, "DaemonSet");
    assert_eq!(ds["metadata"]["name"], "team-a-gputopo-device-plugin");
    assert_eq!(ds["metadata"]["namespace"], "gpu-infra");
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["runtimeClassName"], "nvidia");
    assert_eq!(spec["serviceAccountName"], "gpu-plugin");
    assert_eq!(spec["nodeSelector"]["gputopo.dev/device-plugin"], "true");
    assert!(
        !device_plugin_docs(&docs)
            .iter()
            .any(|d| d["kind"] == "ServiceAccount"),
        "serviceAccount.create: false makes none"
    );
    assert_eq!(
        object(&docs, "ClusterRoleBinding")["subjects"][0],
        json!({"kind": "ServiceAccount", "name": "gpu-plugin", "namespace": "gpu-infra"})
    );
    let plugin = container(ds);
    assert!(
        plugin["image"]
            .as_str()
            .expect("image")
            .ends_with("gputopo-device-plugin@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
    );
    // The host directory moves; the container still finds it where it looks.
    assert_eq!(
        spec["volumes"][0]["hostPath"]["path"],
        "/data/kubelet/device-plugins"
    );
    assert_eq!(plugin["volumeMounts"][0]["mountPath"], DIR);
    for (name, value) in [
        ("GPUTOPO_DEVICE_LIST_STRATEGY", "envvar,cdi-cri"),
        ("GPUTOPO_HEALTH_INTERVAL", "30s"),
        ("GPUTOPO_NVML_LIBRARY", "/usr/lib64/libnvidia-ml.so.1"),
        ("GPUTOPO_LISTEN", "0.0.0.0:9400"),
    ] {
        assert_eq!(env_value(plugin, name), Some(value), "{name}");
    }
    assert_eq!(plugin["ports"][0]["containerPort"], 9400);
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn device_plugin_values_that_cannot_work_fail_the_render_with_a_reason() {
    let cases = [
        (
            "devicePlugin:\n  enabled: true\n  deviceListStrategy: [volume-mounts]\n",
            "value must be one of 'envvar', 'cdi-cri'",
        ),
        (
            "devicePlugin:\n  enabled: true\n  deviceListStrategy: []\n",
            "/devicePlugin/deviceListStrategy",
        ),
        (
            "devicePlugin:\n  enabled: true\n  kubeletDevicePluginDir:\n    hostPath: var/lib/kubelet\n",
            "/devicePlugin/kubeletDevicePluginDir/hostPath",
        ),
        (
            "devicePlugin:\n  enabled: true\n  healthInterval: \"10\"\n",
            "/devicePlugin/healthInterval",
        ),
        (
            "devicePlugin:\n  enabled: true\n  serviceAccount:\n    create: false\n",
            "devicePlugin.serviceAccount.name",
        ),
        (
            "devicePlugin:\n  enable: true\n",
            "additional properties 'enable' not allowed",
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

/// The documents of `daemonset/device-plugin/*.yaml`.
fn plain_device_plugin() -> Vec<Value> {
    let dir = root().join("daemonset/device-plugin");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("daemonset/device-plugin/ readable")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).expect("manifest readable");
            documents(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        })
        .collect()
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_chart_and_the_plain_device_plugin_manifests_describe_the_same_objects() {
    let chart: BTreeMap<_, _> = render_ok(RELEASE, NAMESPACE, Some(ENABLED))
        .into_iter()
        .filter(is_device_plugin)
        .map(|d| (kind_name(&d), without_helm_labels(d)))
        .collect();
    let plain: BTreeMap<_, _> = plain_device_plugin()
        .into_iter()
        .map(|d| (kind_name(&d), d))
        .collect();
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        plain.keys().collect::<Vec<_>>()
    );
    for (key, doc) in &plain {
        assert!(
            &chart[key] == doc,
            "{key:?} differs between the chart and daemonset/device-plugin/:\nchart: {}\nplain: {}",
            serde_json::to_string_pretty(&chart[key]).unwrap_or_default(),
            serde_json::to_string_pretty(doc).unwrap_or_default()
        );
    }
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_device_plugin_image_is_built_as_ci_checks() {
    let read = |p: &str| std::fs::read_to_string(root().join(p)).expect(p);
    let docs = render_ok(RELEASE, NAMESPACE, Some(ENABLED));
    let uid = pod_spec(&docs)["securityContext"]["runAsUser"]
        .as_u64()
        .expect("runAsUser");
    let port = container(object(&docs, "DaemonSet"))["ports"][0]["containerPort"]
        .as_u64()
        .expect("containerPort");
    let dockerfile = read("device-plugin/Dockerfile");
    // glibc for NVML's dlopen, as the agent.
    assert!(dockerfile.contains("\nFROM gcr.io/distroless/cc-debian12\n"));
    assert!(
        dockerfile.contains("scripts/static-build --arch \"$TARGETARCH\" --out /out device-plugin")
    );
    assert!(dockerfile.contains("COPY --from=build /out/${TARGETARCH}/gputopo-device-plugin "));
    assert!(dockerfile.contains(&format!("\nUSER {uid}:{uid}\n")));
    assert!(dockerfile.contains(&format!("\nEXPOSE {port}\n")));
    assert!(dockerfile.contains("\nCMD [\"--nvml\"]\n"));
    assert!(
        read("device-plugin/Dockerfile.dockerignore").contains("target/"),
        "the build context leaves target/ out"
    );
    // scripts/test runs images (and so static-build) with no component: all of them.
    let script = read("scripts/static-build");
    assert!(script.contains("components=(agent device-plugin scheduler)"));
    assert!(script.contains("build_device-plugin() { build_glibc gputopo-device-plugin \"$1\"; }"));
    assert!(read("scripts/images").contains("components=(agent device-plugin scheduler)"));
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_api_server_admits_the_device_plugin_and_its_identity_reads_pods_only() {
    let env = TestEnv::shared().await;
    let admin = env.client().await;
    ensure_namespace(&admin, NAMESPACE).await;
    let rendered = render_ok(RELEASE, NAMESPACE, Some(ENABLED));
    let plain = plain_device_plugin();
    for (what, docs) in [
        ("chart", device_plugin_docs(&rendered)),
        ("daemonset/device-plugin/", plain.iter().collect()),
    ] {
        for doc in docs {
            let applied = dry_run_apply(&admin, doc)
                .await
                .unwrap_or_else(|e| panic!("{what}: {:?} refused: {e}", kind_name(doc)));
            assert_eq!(applied["metadata"]["name"], doc["metadata"]["name"]);
        }
    }

    // A release of its own, applied for real, and the pod the DaemonSet
    // would make on a GPU node, admitted by the real API server.
    let namespace = env.create_namespace("gputopo-dp").await;
    let docs = render_ok("dp", &namespace, Some(ENABLED));
    let identity: Vec<Value> = device_plugin_docs(&docs).into_iter().cloned().collect();
    apply_kinds(
        &admin,
        &identity,
        &["ServiceAccount", "ClusterRole", "ClusterRoleBinding"],
    )
    .await;
    let node = env.unique_name("gpu-node");
    let labels = BTreeMap::from([("nvidia.com/gpu.present".to_owned(), "true".to_owned())]);
    Api::<Node>::all(admin.clone())
        .create(&PostParams::default(), &fake_gpu_node(&node, 8, &labels))
        .await
        .expect("node created");
    let mut spec: PodSpec = serde_json::from_value(pod_spec(&docs).clone()).expect("a pod spec");
    spec.node_name = Some(node.clone());
    let account = spec
        .service_account_name
        .clone()
        .expect("a service account");
    let pods = Api::<Pod>::namespaced(admin.clone(), &namespace);
    let plugin_pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("dp-device-plugin-{node}")},
        "spec": spec,
    }))
    .expect("a pod");
    let plugin_pod = pods
        .create(&PostParams::default(), &plugin_pod)
        .await
        .expect("the chart's pod template is admitted");

    // The token the kubelet would mount for that pod.
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = super::identity::service_account_kubeconfig(
        env,
        &admin,
        &namespace,
        &account,
        Some(&plugin_pod),
        dir.path(),
        "dp",
    )
    .await;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("config");
    let plugin = kube::Client::try_from(config).expect("client");

    // What the plugin's pod watch does: list, then watch, this node's pods.
    let on_node = format!("spec.nodeName={node}");
    let all_pods = Api::<Pod>::all(plugin.clone());
    let listed = all_pods
        .list(&ListParams::default().fields(&on_node))
        .await
        .expect("the plugin's identity lists its node's pods");
    assert_eq!(listed.items.len(), 1, "the plugin's own pod");
    let version = listed.metadata.resource_version.clone().expect("a version");
    let watch = all_pods
        .watch(
            &WatchParams::default().fields(&on_node).timeout(20),
            &version,
        )
        .await
        .expect("the plugin's identity watches its node's pods");
    let claimant: Pod = serde_json::from_value(json!({
        "metadata": {"name": "claimant", "annotations": {"gputopo.dev/assigned-gpus": "0,1"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &claimant)
        .await
        .expect("a pod on the node");
    let mut watch = Box::pin(watch);
    let deadline = Instant::now() + Duration::from_secs(20);
    let seen = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, futures::StreamExt::next(&mut watch)).await {
            Ok(Some(Ok(WatchEvent::Added(pod)))) => break pod,
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(e))) => panic!("watch failed: {e}"),
            Ok(None) | Err(_) => panic!("no event for the pod created on {node}"),
        }
    };
    assert_eq!(seen.metadata.name.as_deref(), Some("claimant"));
    Api::<Pod>::namespaced(plugin.clone(), &namespace)
        .get("claimant")
        .await
        .expect("the plugin's identity gets a pod");

    // And nothing else: no write to pods, no nodes, no secrets.
    let forbidden = |r: Result<(), kube::Error>, what: &str| match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    };
    forbidden(
        Api::<Pod>::namespaced(plugin.clone(), &namespace)
            .patch(
                "claimant",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
            )
            .await
            .map(drop),
        "patching a pod",
    );
    forbidden(
        Api::<Pod>::namespaced(plugin.clone(), &namespace)
            .delete("claimant", &Default::default())
            .await
            .map(drop),
        "deleting a pod",
    );
    forbidden(
        Api::<Node>::all(plugin.clone()).get(&node).await.map(drop),
        "reading a node",
    );
    forbidden(
        Api::<Secret>::namespaced(plugin.clone(), &namespace)
            .list(&ListParams::default())
            .await
            .map(drop),
        "listing secrets",
    );
}
