//! The deployment artifacts: the Helm chart (`helm/gputopo`), the plain
//! manifests (`daemonset/`) and the Dockerfiles.
//!
//! - `helm lint` passes, and values that cannot work fail the render;
//! - the chart, rendered with default and with non-default values, is
//!   accepted by the real API server (server-side apply, dry run, strict
//!   field validation, so a misspelt field fails);
//! - the chart and the plain manifests describe the same objects;
//! - the agent, given exactly the identity and authority the chart renders
//!   (not cluster-admin), publishes its node, and the chart's admission
//!   policy still binds it to that node;
//! - the scheduler's RBAC is exactly the listed rules, and the scheduler,
//!   given exactly the chart's identity and configuration, binds and
//!   annotates a pod that names the chart's scheduler;
//! - with `scheduler.extender.enabled`, the chart runs the extender (one
//!   replica, its Service, the smaller RBAC it uses, TLS from the named
//!   Secrets, the NetworkPolicy, the KubeSchedulerConfiguration snippet in
//!   NOTES), and the extender, given exactly that identity and those
//!   files, filters and binds over TLS a pod as kube-scheduler asks;
//! - `helm install`, `upgrade` and `uninstall` work on the real API server,
//!   and the uninstall leaves the CRD;
//! - the Dockerfiles build what `scripts/static-build` checks in CI;
//! - the optional device plugin (`devicePlugin.enabled`): `deploy/device_plugin.rs`.
//!
//! Helm is the one `scripts/control-plane-binaries` builds (v3.19).

use gputopo_testenv::binaries::workspace_binary;
use gputopo_testenv::loopback::TlsClient;
use gputopo_testenv::pki::Pki;
use gputopo_testenv::{TestEnv, binaries, fake_gpu_node, process::Process};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, PodSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::discovery::{Scope, pinned_kind};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `helm install gputopo helm/gputopo -n gputopo-system`, as the README says:
/// the names the plain manifests use.
const RELEASE: &str = "gputopo";
const NAMESPACE: &str = "gputopo-system";

/// Values that change something in every template: what an operator of a
/// cluster with GFD, the GPU Operator's RuntimeClass and Prometheus sets.
const NON_DEFAULT_VALUES: &str = r#"
agent:
  gfdCompatibleLabels: false
  runtimeClassName: nvidia
  nodeBoundPolicy: false
  priorityClassName: ""
  nvmlLibrary: /usr/lib64/libnvidia-ml.so.1
  rescanInterval: 5m
  podResources:
    enabled: false
  extraTolerations:
    - key: dedicated
      operator: Equal
      value: gpu
      effect: NoSchedule
  image:
    digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
metrics:
  serviceMonitor:
    enabled: true
    labels:
      release: kube-prometheus-stack
scheduler:
  schedulerName: gpu-topology
  replicas: 1
  leaderElection:
    leaseName: gpu-topology-leader
  logJson: true
  priorityClassName: ""
  config:
    networkTiers:
      keys: [example.com/spine, example.com/rack]
    weights:
      gpuSet: 60
    defaultTopologyManagerPolicy: single-numa-node
    backoff:
      max: 10s
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - key: node-role.kubernetes.io/control-plane
                operator: Exists
  tolerations:
    - key: node-role.kubernetes.io/control-plane
      operator: Exists
      effect: NoSchedule
"#;

/// The extender mode, with values the extender mode ignores (replicas) or
/// moves (port, weight, served profiles, TLS Secrets, limits, who may call).
const EXTENDER_VALUES: &str = r#"
scheduler:
  replicas: 3
  extender:
    enabled: true
    port: 8888
    weight: 10
    schedulerNames: [gpu-profile, default-scheduler]
    tls:
      secretName: gputopo-extender-tls
      clientCASecretName: kube-scheduler-client-ca
    limits:
      requestTimeout: 20s
      maxConcurrentBinds: 16
    networkPolicy:
      extraFrom:
        - ipBlock:
            cidr: 10.0.0.10/32
      metricsNamespace: prometheus
"#;

#[path = "deploy/agent_e2e.rs"]
mod agent_e2e;
#[path = "deploy/agent_security.rs"]
mod agent_security;
#[path = "deploy/device_plugin.rs"]
mod device_plugin;
#[path = "deploy/device_plugin_metrics.rs"]
mod device_plugin_metrics;
#[path = "deploy/extender_security.rs"]
mod extender_security;
#[path = "deploy/identity.rs"]
mod identity;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart_dir() -> PathBuf {
    root().join("helm/gputopo")
}

/// Why a `helm` run did not give manifests.
#[derive(Debug)]
enum HelmError {
    Missing(String),
    Spawn(std::io::Error),
    Failed { args: String, stderr: String },
    Yaml(serde_yaml::Error),
}

impl std::fmt::Display for HelmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HelmError::Missing(e) => write!(f, "no helm binary: {e}"),
            HelmError::Spawn(e) => write!(f, "running helm: {e}"),
            HelmError::Failed { args, stderr } => write!(f, "helm {args} failed:\n{stderr}"),
            HelmError::Yaml(e) => write!(f, "helm's output is not YAML: {e}"),
        }
    }
}

impl std::error::Error for HelmError {}

/// Runs the built helm with its cache, config and data kept out of `$HOME`.
fn helm(args: &[&OsStr]) -> Result<String, HelmError> {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    let home = HOME.get_or_init(|| tempfile::tempdir().expect("a temp dir for helm"));
    let bin = binaries::locate(binaries::HELM, "helm")
        .map_err(|e| HelmError::Missing(format!("{e:#}")))?;
    let out = Command::new(bin)
        .args(args)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .map_err(HelmError::Spawn)?;
    if !out.status.success() {
        return Err(HelmError::Failed {
            args: args
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every non-empty document of a multi-document YAML text.
fn documents(text: &str) -> Result<Vec<Value>, serde_yaml::Error> {
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = Value::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// `helm template` of the chart, CRDs included, for the control plane's
/// Kubernetes version; `values` is a values file's text.
fn render(release: &str, namespace: &str, values: Option<&str>) -> Result<Vec<Value>, HelmError> {
    let file = tempfile::NamedTempFile::new().map_err(HelmError::Spawn)?;
    let mut args: Vec<&OsStr> = [
        "template",
        release,
        "--namespace",
        namespace,
        "--include-crds",
        "--kube-version",
        gputopo_testenv::kubernetes_version(),
    ]
    .into_iter()
    .map(OsStr::new)
    .collect();
    let chart = chart_dir();
    args.push(chart.as_os_str());
    if let Some(values) = values {
        std::fs::write(file.path(), values).map_err(HelmError::Spawn)?;
        args.push(OsStr::new("--values"));
        args.push(file.path().as_os_str());
    }
    documents(&helm(&args)?).map_err(HelmError::Yaml)
}

fn render_ok(release: &str, namespace: &str, values: Option<&str>) -> Vec<Value> {
    render(release, namespace, values).unwrap_or_else(|e| panic!("{e}"))
}

/// The documents of every manifest in `daemonset/`.
fn plain_manifests() -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("daemonset"))
        .expect("daemonset/ readable")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).expect("manifest readable");
            documents(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        })
        .collect()
}

fn kind_name(doc: &Value) -> (String, String) {
    (
        doc["kind"].as_str().unwrap_or_default().to_owned(),
        doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

fn find<'a>(docs: &'a [Value], kind: &str) -> Option<&'a Value> {
    docs.iter().find(|d| d["kind"] == kind)
}

fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().filter_map(|d| d["kind"].as_str()).collect()
}

fn container(daemonset: &Value) -> &Value {
    &daemonset["spec"]["template"]["spec"]["containers"][0]
}

fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

/// The quoted strings of the admission policy's `ownedLabels` variable.
fn owned_labels(policy: &Value) -> Vec<String> {
    let expression = policy["spec"]["variables"]
        .as_array()
        .expect("policy variables")
        .iter()
        .find(|v| v["name"] == "ownedLabels")
        .expect("an ownedLabels variable")["expression"]
        .as_str()
        .expect("an expression");
    expression
        .split('\'')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn helm_lint_passes_with_default_and_non_default_values() {
    let chart = chart_dir();
    let out = helm(&[
        OsStr::new("lint"),
        OsStr::new("--strict"),
        chart.as_os_str(),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("0 chart(s) failed"), "{out}");

    let values = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(values.path(), NON_DEFAULT_VALUES).expect("values written");
    let out = helm(&[
        OsStr::new("lint"),
        OsStr::new("--strict"),
        chart.as_os_str(),
        OsStr::new("--values"),
        values.path().as_os_str(),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("0 chart(s) failed"), "{out}");

    std::fs::write(values.path(), EXTENDER_VALUES).expect("values written");
    let out = helm(&[
        OsStr::new("lint"),
        OsStr::new("--strict"),
        chart.as_os_str(),
        OsStr::new("--values"),
        values.path().as_os_str(),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("0 chart(s) failed"), "{out}");
}

#[test]
fn values_that_cannot_work_fail_the_render_with_a_reason() {
    let cases = [
        // A misspelt key is refused by values.schema.json, not ignored.
        (
            "agent:\n  gfdCompatibleLables: false\n",
            "additional properties 'gfdCompatibleLables' not allowed",
        ),
        // The agent's clap parser wants a unit.
        (
            "agent:\n  rescanInterval: \"60\"\n",
            "/agent/rescanInterval",
        ),
        // One port serves the probes, the other kube-scheduler.
        (
            "scheduler:\n  port: 9000\n  extender:\n    enabled: true\n    port: 9000\n",
            "scheduler.extender.port (9000) must differ from scheduler.port",
        ),
        (
            "scheduler:\n  enabled: false\n  extender:\n    enabled: true\n",
            "scheduler.extender.enabled needs scheduler.enabled",
        ),
        (
            "scheduler:\n  extender:\n    enabled: true\n    weight: 0\n",
            "/scheduler/extender/weight",
        ),
        (
            "scheduler:\n  extender:\n    enabled: true\n    url: http://x\n",
            "additional properties 'url' not allowed",
        ),
        // The scheduler's configuration file refuses unknown fields; so does the chart.
        (
            "scheduler:\n  config:\n    weights:\n      gpuset: 10\n",
            "additional properties 'gpuset' not allowed",
        ),
        (
            "scheduler:\n  config:\n    defaultTopologyManagerPolicy: strict\n",
            "/scheduler/config/defaultTopologyManagerPolicy",
        ),
        (
            "metrics:\n  service:\n    enabled: false\n  serviceMonitor:\n    enabled: true\n",
            "metrics.serviceMonitor.enabled needs metrics.service.enabled",
        ),
        (
            "agent:\n  serviceAccount:\n    create: false\n",
            "agent.serviceAccount.name",
        ),
        (
            "scheduler:\n  maxBindsInFlight: 0\n",
            "/scheduler/maxBindsInFlight",
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

#[test]
fn non_default_values_render_as_asked() {
    let defaults = render_ok(RELEASE, NAMESPACE, None);
    assert_eq!(
        kinds(&defaults),
        [
            "CustomResourceDefinition",
            "PodDisruptionBudget",
            "ServiceAccount",
            "ServiceAccount",
            "ConfigMap",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Service",
            "Service",
            "DaemonSet",
            "Deployment",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
        ]
    );
    let record_policy = |docs: &[Value]| {
        docs.iter().any(|d| {
            d["kind"] == "ValidatingAdmissionPolicy"
                && d["metadata"]["name"] == format!("{RELEASE}-scheduler-assignment-record")
        })
    };
    assert!(
        record_policy(&defaults),
        "the GPU-record policy is on by default"
    );
    let without = render_ok(
        RELEASE,
        NAMESPACE,
        Some("scheduler:\n  assignmentRecordPolicy: false\n"),
    );
    assert!(
        !record_policy(&without),
        "scheduler.assignmentRecordPolicy=false renders it"
    );
    let off = render_ok(RELEASE, NAMESPACE, Some("scheduler:\n  enabled: false\n"));
    assert!(
        off.iter()
            .all(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] != "scheduler"),
        "scheduler.enabled=false still renders scheduler objects: {:?}",
        kinds(&off)
    );
    let ds = find(&defaults, "DaemonSet").expect("a DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert!(pod.get("runtimeClassName").is_none());
    assert_eq!(
        env_value(container(ds), "GPUTOPO_GFD_COMPATIBLE_LABELS"),
        Some("true")
    );
    assert_eq!(
        container(ds)["image"],
        format!(
            "ghcr.io/gputopo/gputopo-agent:{}",
            env!("CARGO_PKG_VERSION")
        )
    );

    let custom = render_ok(RELEASE, NAMESPACE, Some(NON_DEFAULT_VALUES));
    let custom_kinds = kinds(&custom);
    assert!(custom_kinds.contains(&"ServiceMonitor"), "{custom_kinds:?}");
    assert!(
        !custom.iter().any(|d| {
            d["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("ValidatingAdmission"))
                && d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-own-node"))
        }),
        "nodeBoundPolicy=false still renders the agent's policy: {custom_kinds:?}"
    );
    let ds = find(&custom, "DaemonSet").expect("a DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    let agent = container(ds);
    assert_eq!(pod["runtimeClassName"], "nvidia");
    assert!(pod.get("priorityClassName").is_none(), "{pod}");
    assert_eq!(
        env_value(agent, "GPUTOPO_GFD_COMPATIBLE_LABELS"),
        Some("false")
    );
    assert_eq!(env_value(agent, "GPUTOPO_RESCAN_INTERVAL"), Some("5m"));
    assert_eq!(
        env_value(agent, "GPUTOPO_NVML_LIBRARY"),
        Some("/usr/lib64/libnvidia-ml.so.1")
    );
    assert!(
        agent["image"].as_str().is_some_and(|i| i.ends_with(
            "gputopo-agent@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        )),
        "{}",
        agent["image"]
    );
    // The GPU toleration stays when extra ones are added.
    let tolerations: Vec<&str> = pod["tolerations"]
        .as_array()
        .expect("tolerations")
        .iter()
        .filter_map(|t| t["key"].as_str())
        .collect();
    assert_eq!(tolerations, ["nvidia.com/gpu", "dedicated"]);
    let volumes = pod["volumes"].to_string();
    assert!(!volumes.contains("pod-resources"), "{volumes}");
    assert!(!agent["volumeMounts"].to_string().contains("pod-resources"));
    let monitor = find(&custom, "ServiceMonitor").expect("a ServiceMonitor");
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http-metrics");
    let service = find(&custom, "Service").expect("the metrics Service");
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"],
        service["spec"]["selector"]
    );
    assert_eq!(service["spec"]["clusterIP"], "None");
}

/// Drops the labels only Helm sets, so a chart object compares to its
/// plain twin.
fn without_helm_labels(mut doc: Value) -> Value {
    for pointer in ["/metadata/labels", "/spec/template/metadata/labels"] {
        if let Some(labels) = doc.pointer_mut(pointer).and_then(Value::as_object_mut) {
            labels.remove("helm.sh/chart");
            labels.remove("app.kubernetes.io/managed-by");
        }
    }
    doc
}

#[test]
fn the_chart_and_the_plain_manifests_describe_the_same_objects() {
    let chart: BTreeMap<(String, String), Value> = render_ok(RELEASE, NAMESPACE, None)
        .into_iter()
        .map(|d| (kind_name(&d), without_helm_labels(d)))
        .collect();
    // helm --create-namespace makes the namespace; the plain manifests must.
    let plain: BTreeMap<(String, String), Value> = plain_manifests()
        .into_iter()
        .filter(|d| d["kind"] != "Namespace")
        .map(|d| (kind_name(&d), d))
        .collect();
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        plain.keys().collect::<Vec<_>>(),
        "the chart and daemonset/ hold different objects"
    );
    for (key, plain_doc) in &plain {
        let mut chart_doc = chart[key].clone();
        // agent-rbac.yaml and agent-admission-policy.yaml carry no labels;
        // where a plain object has labels, they must match.
        if plain_doc["metadata"].get("labels").is_none()
            && let Some(meta) = chart_doc["metadata"].as_object_mut()
        {
            meta.remove("labels");
        }
        assert!(
            &chart_doc == plain_doc,
            "{key:?} differs between the chart and daemonset/:\nchart: {}\nplain: {}",
            serde_json::to_string_pretty(&chart_doc).unwrap_or_default(),
            serde_json::to_string_pretty(plain_doc).unwrap_or_default()
        );
    }
    let namespace = find(&plain_manifests(), "Namespace").cloned();
    assert_eq!(
        namespace.as_ref().map(kind_name),
        Some(("Namespace".to_owned(), NAMESPACE.to_owned()))
    );
}

#[test]
fn the_policys_owned_labels_are_the_agents() {
    let expected: Vec<String> = gputopo_api::keys::node::OWNED
        .iter()
        .map(|s| s.to_string())
        .collect();
    let chart = render_ok(RELEASE, NAMESPACE, None);
    let policy = find(&chart, "ValidatingAdmissionPolicy").expect("the chart's policy");
    assert_eq!(owned_labels(policy), expected, "chart policy");
    let plain = plain_manifests();
    let policy = find(&plain, "ValidatingAdmissionPolicy").expect("daemonset/'s policy");
    assert_eq!(owned_labels(policy), expected, "daemonset/ policy");
}

#[test]
fn the_policy_follows_the_release_namespace_and_service_account() {
    let docs = render_ok(
        "team-a",
        "gpu-infra",
        Some("agent:\n  serviceAccount:\n    name: topo\n"),
    );
    let policy = find(&docs, "ValidatingAdmissionPolicy").expect("policy");
    assert_eq!(
        policy["spec"]["matchConditions"][0]["expression"],
        "request.userInfo.username == 'system:serviceaccount:gpu-infra:topo'"
    );
    let binding = find(&docs, "ClusterRoleBinding").expect("binding");
    assert_eq!(
        binding["subjects"][0],
        json!({"kind": "ServiceAccount", "name": "topo", "namespace": "gpu-infra"})
    );
    let ds = find(&docs, "DaemonSet").expect("daemonset");
    assert_eq!(ds["metadata"]["namespace"], "gpu-infra");
    assert_eq!(ds["metadata"]["name"], "team-a-gputopo-agent");
    assert_eq!(ds["spec"]["template"]["spec"]["serviceAccountName"], "topo");
    assert_eq!(
        find(&docs, "ValidatingAdmissionPolicyBinding").expect("binding")["spec"]["policyName"],
        policy["metadata"]["name"]
    );
}

#[test]
fn the_images_match_the_manifests_and_the_ci_build() {
    let read = |p: &str| std::fs::read_to_string(root().join(p)).expect(p);
    let chart: Value = serde_yaml::from_str(&read("helm/gputopo/Chart.yaml")).expect("Chart.yaml");
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));

    let plain = plain_manifests();
    let ds = find(&plain, "DaemonSet").expect("the plain DaemonSet");
    let uid = ds["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
        .as_u64()
        .expect("runAsUser");
    let port = container(ds)["ports"][0]["containerPort"]
        .as_u64()
        .expect("containerPort");

    let agent = read("agent/Dockerfile");
    assert!(
        agent.contains("\nFROM gcr.io/distroless/cc-debian12:nonroot\n"),
        "the agent dlopens NVML: it needs glibc"
    );
    assert!(agent.contains("scripts/static-build --arch \"$TARGETARCH\" --out /out agent"));
    assert!(agent.contains("COPY --from=build /out/${TARGETARCH}/gputopo-agent "));
    assert!(
        agent.contains(&format!("\nUSER {uid}:{uid}\n")),
        "uid {uid}"
    );
    assert!(agent.contains(&format!("\nEXPOSE {port}\n")), "port {port}");

    let scheduler = read("scheduler/Dockerfile");
    assert!(scheduler.contains("\nFROM gcr.io/distroless/static-debian12:nonroot\n"));
    assert!(scheduler.contains("scripts/static-build --arch \"$TARGETARCH\" --out /out scheduler"));
    assert!(scheduler.contains("COPY --from=build /out/${TARGETARCH}/gputopo-scheduler "));

    // CI builds the images without a container engine (scripts/images runs
    // scripts/static-build for the binaries the Dockerfiles copy too).
    let test_script = read("scripts/test");
    assert!(
        test_script
            .lines()
            .any(|l| l.trim_start().starts_with("./scripts/images")),
        "scripts/test must run scripts/images"
    );
    assert!(read("scripts/images").contains("./scripts/static-build "));
}

/// A minimal prometheus-operator ServiceMonitor CRD: the fields the chart
/// sets, typed as upstream types them, and nothing else, so that strict
/// field validation refuses a misspelt one. (The upstream CRD is not
/// vendored; this checks the chart's use of it, not the operator.)
fn service_monitor_crd() -> CustomResourceDefinition {
    let relabel = json!({"type": "array", "items": {"type": "object", "properties": {
        "action": {"type": "string"},
        "sourceLabels": {"type": "array", "items": {"type": "string"}},
        "separator": {"type": "string"},
        "regex": {"type": "string"},
        "targetLabel": {"type": "string"},
        "replacement": {"type": "string"},
        "modulus": {"type": "integer"}
    }}});
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": "ServiceMonitor", "listKind": "ServiceMonitorList",
                      "plural": "servicemonitors", "singular": "servicemonitor"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["selector"], "properties": {
                        "jobLabel": {"type": "string"},
                        "selector": {"type": "object", "properties": {
                            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}
                        }},
                        "namespaceSelector": {"type": "object", "properties": {
                            "any": {"type": "boolean"},
                            "matchNames": {"type": "array", "items": {"type": "string"}}
                        }},
                        "endpoints": {"type": "array", "items": {"type": "object", "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "scheme": {"type": "string", "enum": ["http", "https"]},
                            "interval": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                            "honorLabels": {"type": "boolean"},
                            "relabelings": relabel.clone(),
                            "metricRelabelings": relabel
                        }}}
                    }}
                }}}
            }]
        }
    }))
    .expect("a CRD")
}

/// Server-side apply of one rendered object, dry run, strict field
/// validation: what `kubectl apply --server-side --dry-run=server
/// --validate=strict` does.
async fn dry_run_apply(client: &kube::Client, doc: &Value) -> Result<Value, kube::Error> {
    let (group, version) = match doc["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .split_once('/')
    {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (
            String::new(),
            doc["apiVersion"].as_str().unwrap_or_default().to_owned(),
        ),
    };
    let (kind, name) = kind_name(doc);
    let gvk = GroupVersionKind::gvk(&group, &version, &kind);
    let (resource, caps) = pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            doc["metadata"]["namespace"].as_str().unwrap_or("default"),
            &resource,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let params = PatchParams::apply("gputopo-deploy-test")
        .dry_run()
        .validation_strict();
    let applied = api.patch(&name, &params, &Patch::Apply(doc)).await?;
    Ok(serde_json::to_value(applied).expect("an object serializes"))
}

/// Installs [`service_monitor_crd`] once per test binary (the tests share
/// one API server; a second create would be refused).
async fn ensure_service_monitor_crd(client: &kube::Client) {
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            gputopo_testenv::install_crd(client, service_monitor_crd())
                .await
                .expect("the ServiceMonitor CRD");
        })
        .await;
}

async fn ensure_namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

#[tokio::test]
async fn every_rendered_object_passes_a_server_side_dry_run() {
    let env = TestEnv::shared().await;
    let client = env.client().await;
    ensure_namespace(&client, NAMESPACE).await;
    ensure_service_monitor_crd(&client).await;

    for (what, docs) in [
        ("default values", render_ok(RELEASE, NAMESPACE, None)),
        (
            "non-default values",
            render_ok(RELEASE, NAMESPACE, Some(NON_DEFAULT_VALUES)),
        ),
        (
            "extender values",
            render_ok(RELEASE, NAMESPACE, Some(EXTENDER_VALUES)),
        ),
        ("daemonset/", plain_manifests()),
    ] {
        for doc in &docs {
            let key = kind_name(doc);
            let applied = dry_run_apply(&client, doc)
                .await
                .unwrap_or_else(|e| panic!("{what}: {key:?} refused by the API server: {e}"));
            assert_eq!(applied["metadata"]["name"], key.1, "{what}: {key:?}");
        }
        // A dry run persists nothing: the DaemonSet is not there.
        let daemonsets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
            Api::namespaced(client.clone(), NAMESPACE);
        assert!(
            daemonsets
                .get_opt("gputopo-agent")
                .await
                .expect("get")
                .is_none()
        );
    }

    // The check can fail: a misspelt field is refused, not dropped.
    let mut docs = render_ok(RELEASE, NAMESPACE, None);
    let ds = docs
        .iter_mut()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    ds["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = json!({});
    let e = dry_run_apply(&client, ds)
        .await
        .expect_err("an unknown field");
    assert!(e.to_string().contains("readinesProbe"), "{e}");
}

/// A free loopback port (a race with other processes is possible but harmless
/// here: the agent would fail to bind and the test would say so).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `GET path` on 127.0.0.1:port: the status code and body.
fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// Applies (for real) the rendered objects of the given kinds.
async fn apply_kinds(client: &kube::Client, docs: &[Value], wanted: &[&str]) {
    for doc in docs {
        let (kind, name) = kind_name(doc);
        if !wanted.contains(&kind.as_str()) {
            continue;
        }
        let gvk = match doc["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .split_once('/')
        {
            Some((g, v)) => GroupVersionKind::gvk(g, v, &kind),
            None => GroupVersionKind::gvk("", doc["apiVersion"].as_str().unwrap_or(""), &kind),
        };
        let (resource, caps) = pinned_kind(client, &gvk).await.expect("discovery");
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                doc["metadata"]["namespace"].as_str().expect("a namespace"),
                &resource,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        api.patch(
            &name,
            &PatchParams::apply("helm").validation_strict(),
            &Patch::Apply(doc),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
    }
}

/// `helm` against the test control plane, as the README's commands run it.
fn helm_on(env: &TestEnv, args: &[&str]) -> Result<String, HelmError> {
    let chart = chart_dir();
    let mut all: Vec<&OsStr> = args
        .iter()
        .map(|a| {
            if *a == "CHART" {
                chart.as_os_str()
            } else {
                OsStr::new(a)
            }
        })
        .collect();
    all.push(OsStr::new("--kubeconfig"));
    all.push(env.kubeconfig_path().as_os_str());
    helm(&all)
}

#[tokio::test]
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

    let out = helm_on(
        env,
        &[
            "install",
            release,
            "CHART",
            "-n",
            &namespace,
            "--create-namespace",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("STATUS: deployed"), "{out}");
    assert!(
        out.contains(&format!("rollout status daemonset/{agent_name}")),
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
    // Helm leaves crds/ alone: the GpuTopology CRD, and so every node's
    // object, survives an uninstall (README, "Deploy").
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(
        crds.get_opt("gputopologies.gputopo.dev")
            .await
            .expect("get")
            .is_some()
    );
}

/// The rendered object of `kind` that belongs to the scheduler.
fn scheduler_object<'a>(docs: &'a [Value], kind: &str) -> Option<&'a Value> {
    docs.iter().find(|d| {
        d["kind"] == kind && d["metadata"]["labels"]["app.kubernetes.io/component"] == "scheduler"
    })
}

/// Every (apiGroup, resource, verb) a Role or ClusterRole grants; panics on
/// anything but apiGroups/resources/verbs (resourceNames, nonResourceURLs),
/// which these roles do not use.
fn permissions(role: &Value) -> std::collections::BTreeSet<(String, String, String)> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("a list")
            .iter()
            .map(|s| s.as_str().expect("a string").to_owned())
            .collect()
    };
    let mut all = std::collections::BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        let keys: Vec<&String> = rule.as_object().expect("a rule").keys().collect();
        assert_eq!(keys, ["apiGroups", "resources", "verbs"], "{rule}");
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    all.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    all
}

fn triples(list: &[(&str, &str, &[&str])]) -> std::collections::BTreeSet<(String, String, String)> {
    list.iter()
        .flat_map(|(group, resource, verbs)| {
            verbs
                .iter()
                .map(move |v| (group.to_string(), resource.to_string(), v.to_string()))
        })
        .collect()
}

#[test]
fn the_schedulers_rbac_is_exactly_the_least_it_needs() {
    // Widening either role (a verb, a resource, a wildcard) fails here: say
    // in the README and the template why the scheduler needs it first.
    let cluster_wide = triples(&[
        ("", "pods", &["get", "list", "watch"]),
        ("", "nodes", &["get", "list", "watch"]),
        ("gputopo.dev", "gputopologies", &["get", "list", "watch"]),
        (
            "scheduling.x-k8s.io",
            "podgroups",
            &["get", "list", "watch"],
        ),
        ("scheduling.k8s.io", "podgroups", &["get", "list", "watch"]),
        ("scheduling.x-k8s.io", "podgroups/status", &["patch"]),
        ("scheduling.k8s.io", "podgroups/status", &["patch"]),
        ("jobset.x-k8s.io", "jobsets", &["get", "list", "watch"]),
        (
            "leaderworkerset.x-k8s.io",
            "leaderworkersets",
            &["get", "list", "watch"],
        ),
        (
            "resource.k8s.io",
            "resourceslices",
            &["get", "list", "watch"],
        ),
        (
            "resource.k8s.io",
            "deviceclasses",
            &["get", "list", "watch"],
        ),
        (
            "resource.k8s.io",
            "resourceclaims",
            &["get", "list", "watch", "update", "create", "delete"],
        ),
        ("resource.k8s.io", "resourceclaims/status", &["update"]),
        ("", "pods/binding", &["create"]),
        ("", "nodes/status", &["patch"]),
        ("", "pods/status", &["patch"]),
        ("", "pods/eviction", &["create"]),
        ("events.k8s.io", "events", &["create", "patch"]),
        ("", "events", &["create", "patch"]),
    ]);
    let leases = triples(&[(
        "coordination.k8s.io",
        "leases",
        &["get", "create", "update"],
    )]);
    for (what, docs) in [
        ("the chart", render_ok("team-a", "gpu-infra", None)),
        ("daemonset/", plain_manifests()),
    ] {
        let role = scheduler_object(&docs, "ClusterRole").expect("a scheduler ClusterRole");
        assert_eq!(permissions(role), cluster_wide, "{what}: ClusterRole");
        let role = scheduler_object(&docs, "Role").expect("a scheduler Role");
        assert_eq!(permissions(role), leases, "{what}: Role");
        let namespace = role["metadata"]["namespace"].clone();
        let account = scheduler_object(&docs, "ServiceAccount").expect("a ServiceAccount");
        let subject = json!([{
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": namespace,
        }]);
        for (binding, role_kind) in [
            ("ClusterRoleBinding", "ClusterRole"),
            ("RoleBinding", "Role"),
        ] {
            let binding = scheduler_object(&docs, binding).expect("a binding");
            assert_eq!(binding["subjects"], subject, "{what}: {binding}");
            assert_eq!(binding["roleRef"]["kind"], role_kind, "{what}");
            assert_eq!(
                binding["roleRef"]["name"],
                scheduler_object(&docs, role_kind).expect("the role")["metadata"]["name"],
                "{what}"
            );
        }
        // Nothing else in the chart grants the scheduler anything.
        let bound_to_it = docs
            .iter()
            .filter(|d| {
                d["kind"].as_str().is_some_and(|k| k.ends_with("Binding"))
                    && d["subjects"]
                        .as_array()
                        .is_some_and(|s| s.iter().any(|s| s["name"] == account["metadata"]["name"]))
            })
            .count();
        assert_eq!(bound_to_it, 2, "{what}");
    }
}

#[test]
fn the_extenders_rbac_is_exactly_what_it_uses() {
    // The extender watches what it decides from (DRA's objects read only:
    // kube-scheduler allocates claims) and posts the binding, which carries
    // the GPU annotations; kube-scheduler writes the pod conditions and
    // does preemption; the extender's one event says when kube-scheduler
    // allocated a worse GPU set than gputopo would have. No PodGroups (no
    // gangs in extender mode), no lease (one replica).
    // `the_extender_binds_a_pod_with_exactly_the_charts_rbac` runs it under
    // exactly these rules.
    let cluster_wide = triples(&[
        ("", "pods", &["get", "list", "watch"]),
        ("", "nodes", &["get", "list", "watch"]),
        ("gputopo.dev", "gputopologies", &["get", "list", "watch"]),
        (
            "resource.k8s.io",
            "resourceslices",
            &["get", "list", "watch"],
        ),
        (
            "resource.k8s.io",
            "deviceclasses",
            &["get", "list", "watch"],
        ),
        (
            "resource.k8s.io",
            "resourceclaims",
            &["get", "list", "watch"],
        ),
        ("", "pods/binding", &["create"]),
        ("events.k8s.io", "events", &["create", "patch"]),
    ]);
    let docs = render_ok("team-a", "gpu-infra", Some(EXTENDER_VALUES));
    let role = scheduler_object(&docs, "ClusterRole").expect("a scheduler ClusterRole");
    assert_eq!(permissions(role), cluster_wide);
    assert!(scheduler_object(&docs, "Role").is_none(), "a lease Role");
    assert!(scheduler_object(&docs, "RoleBinding").is_none());
    let account = scheduler_object(&docs, "ServiceAccount").expect("a ServiceAccount");
    let binding = scheduler_object(&docs, "ClusterRoleBinding").expect("a binding");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "gpu-infra"}])
    );
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let bound_to_it = docs
        .iter()
        .filter(|d| {
            d["kind"].as_str().is_some_and(|k| k.ends_with("Binding"))
                && d["subjects"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s["name"] == account["metadata"]["name"]))
        })
        .count();
    assert_eq!(bound_to_it, 1);
}

#[test]
fn the_extender_renders_as_asked() {
    let docs = render_ok(RELEASE, NAMESPACE, Some(EXTENDER_VALUES));
    let deployment = scheduler_object(&docs, "Deployment").expect("a Deployment");
    let extender = container(deployment);
    // One replica, whatever `replicas` says, replaced all at once: two
    // extenders would each hand out GPUs the other just gave away.
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(deployment["spec"]["strategy"], json!({"type": "Recreate"}));
    assert!(
        scheduler_object(&docs, "PodDisruptionBudget").is_none(),
        "one replica with minAvailable 1 would block every drain"
    );
    assert_eq!(
        extender["args"],
        json!(["extender", "--config", "/etc/gputopo/config.yaml"])
    );
    assert_eq!(
        env_value(extender, "GPUTOPO_SCHEDULER_EXTENDER_LISTEN"),
        Some("0.0.0.0:8888")
    );
    assert_eq!(
        env_value(extender, "GPUTOPO_SCHEDULER_LISTEN"),
        Some("0.0.0.0:10261")
    );
    // Nothing of the secondary scheduler's leader election.
    let names: Vec<&str> = extender["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "GPUTOPO_SCHEDULER_EXTENDER_LISTEN",
            "GPUTOPO_SCHEDULER_NAME",
            "GPUTOPO_SCHEDULER_TLS_CERT_FILE",
            "GPUTOPO_SCHEDULER_TLS_KEY_FILE",
            "GPUTOPO_SCHEDULER_CLIENT_CA_FILE",
            "GPUTOPO_SCHEDULER_MAX_REQUEST_BYTES",
            "GPUTOPO_SCHEDULER_REQUEST_TIMEOUT",
            "GPUTOPO_SCHEDULER_MAX_CONCURRENT_FILTERS",
            "GPUTOPO_SCHEDULER_MAX_CONCURRENT_BINDS",
            "GPUTOPO_SCHEDULER_LISTEN",
            "GPUTOPO_SCHEDULER_LOG_JSON",
            "RUST_LOG"
        ]
    );
    assert_eq!(
        extender["ports"],
        json!([
            {"name": "http-metrics", "containerPort": 10261, "protocol": "TCP"},
            {"name": "http-extender", "containerPort": 8888, "protocol": "TCP"}
        ])
    );
    assert_eq!(extender["readinessProbe"]["httpGet"]["path"], "/readyz");
    // The Service kube-scheduler's urlPrefix names, and the metrics one.
    let services: Vec<&Value> = docs
        .iter()
        .filter(|d| {
            d["kind"] == "Service"
                && d["metadata"]["labels"]["app.kubernetes.io/component"] == "scheduler"
        })
        .collect();
    let names: Vec<&str> = services
        .iter()
        .filter_map(|s| s["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["gputopo-scheduler-extender", "gputopo-scheduler-metrics"]
    );
    let service = services[0];
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "http-extender", "port": 8888, "targetPort": "http-extender", "protocol": "TCP"}])
    );
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    // The default render has no extender Service.
    let defaults = render_ok(RELEASE, NAMESPACE, None);
    assert!(
        !defaults
            .iter()
            .any(|d| d["metadata"]["name"] == "gputopo-scheduler-extender")
    );
}

#[test]
fn the_scheduler_renders_as_asked() {
    let defaults = render_ok(RELEASE, NAMESPACE, None);
    let deployment = scheduler_object(&defaults, "Deployment").expect("a Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let scheduler = container(deployment);
    assert_eq!(deployment["metadata"]["name"], "gputopo-scheduler");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        scheduler["args"],
        json!(["run", "--config", "/etc/gputopo/config.yaml"])
    );
    assert_eq!(
        env_value(scheduler, "GPUTOPO_SCHEDULER_LEADER_ELECT"),
        Some("true")
    );
    assert_eq!(
        env_value(scheduler, "GPUTOPO_SCHEDULER_LEASE_NAME"),
        Some("gputopo-scheduler")
    );
    assert_eq!(
        env_value(scheduler, "GPUTOPO_SCHEDULER_MAX_BINDS_IN_FLIGHT"),
        Some("32"),
        "the binary's default"
    );
    let fewer = render_ok(
        RELEASE,
        NAMESPACE,
        Some("scheduler:\n  maxBindsInFlight: 4\n"),
    );
    let fewer = scheduler_object(&fewer, "Deployment").expect("a Deployment");
    assert_eq!(
        env_value(container(fewer), "GPUTOPO_SCHEDULER_MAX_BINDS_IN_FLIGHT"),
        Some("4")
    );
    let pod_namespace = scheduler["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "POD_NAMESPACE")
        .expect("POD_NAMESPACE");
    assert_eq!(
        pod_namespace["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(
        env_value(scheduler, "GPUTOPO_SCHEDULER_LISTEN"),
        Some("0.0.0.0:10261")
    );
    assert_eq!(scheduler["ports"][0]["containerPort"], 10261);
    assert_eq!(scheduler["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(scheduler["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(
        scheduler["image"],
        format!(
            "ghcr.io/gputopo/gputopo-scheduler:{}",
            env!("CARGO_PKG_VERSION")
        )
    );
    // As the agent: uid 65532 (distroless's nonroot), nothing to escalate to.
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(scheduler["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        scheduler["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(
        scheduler["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    // Two replicas never share a node.
    let anti =
        &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(anti["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        anti["labelSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let pdb = scheduler_object(&defaults, "PodDisruptionBudget").expect("a PDB");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let service = scheduler_object(&defaults, "Service").expect("a metrics Service");
    assert_eq!(service["spec"]["ports"][0]["port"], 10261);
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let config = scheduler_object(&defaults, "ConfigMap").expect("a ConfigMap");
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"],
        config["metadata"]["name"]
    );
    let file: Value =
        serde_yaml::from_str(config["data"]["config.yaml"].as_str().expect("config.yaml"))
            .expect("YAML");
    assert_eq!(file["schedulerNames"], json!(["gputopo-scheduler"]));
    assert_eq!(file["networkTiers"], json!({"preset": "gputopo"}));
    assert_eq!(
        file["backoff"],
        json!({"initial": "1s", "max": "30s", "unschedulableTimeout": "60s"})
    );

    let custom = render_ok(RELEASE, NAMESPACE, Some(NON_DEFAULT_VALUES));
    let deployment = scheduler_object(&custom, "Deployment").expect("a Deployment");
    let scheduler = container(deployment);
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert!(
        scheduler_object(&custom, "PodDisruptionBudget").is_none(),
        "one replica with minAvailable 1 would block every drain"
    );
    assert_eq!(
        env_value(scheduler, "GPUTOPO_SCHEDULER_LEASE_NAME"),
        Some("gpu-topology-leader")
    );
    assert_eq!(
        env_value(scheduler, "GPUTOPO_SCHEDULER_LOG_JSON"),
        Some("true")
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert!(pod.get("priorityClassName").is_none(), "{pod}");
    assert!(pod["affinity"].get("podAntiAffinity").is_none(), "{pod}");
    let config = scheduler_object(&custom, "ConfigMap").expect("a ConfigMap");
    let file: Value =
        serde_yaml::from_str(config["data"]["config.yaml"].as_str().expect("config.yaml"))
            .expect("YAML");
    assert_eq!(file["schedulerNames"], json!(["gpu-topology"]));
    assert_eq!(
        file["networkTiers"]["keys"],
        json!(["example.com/spine", "example.com/rack"])
    );
    // A value overrides one weight; the others keep the chart's defaults.
    assert_eq!(file["weights"]["gpuSet"], 60);
    assert_eq!(file["weights"]["allocation"], 20);
    assert!(file["networkTiers"].get("preset").is_none(), "{file}");
    assert_eq!(file["defaultTopologyManagerPolicy"], "single-numa-node");
    // The pod template's checksum follows the configuration.
    assert_ne!(
        deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"],
        scheduler_object(&defaults, "Deployment").expect("a Deployment")["spec"]["template"]["metadata"]
            ["annotations"]["checksum/config"]
    );
    let monitor = scheduler_object(&custom, "ServiceMonitor").expect("a ServiceMonitor");
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"],
        scheduler_object(&custom, "Service").expect("a Service")["spec"]["selector"]
    );
}

#[tokio::test]
async fn the_scheduler_binds_a_pod_with_exactly_the_charts_rbac() {
    let env = TestEnv::shared().await;
    // The node lifecycle controller lifts the not-ready taint the API
    // server puts on a new node; kwok keeps the node Ready.
    env.with_controller_manager().await;
    env.with_kwok().await;
    let admin = env.client().await;
    let scheduler_bin = workspace_binary("gputopo-scheduler", "gputopo-scheduler");

    // A release of its own, with a scheduler name no other test's pods use.
    let namespace = env.create_namespace("gputopo-sched").await;
    let name = env.unique_name("gputopo-scheduler");
    let docs = render_ok(
        "sched",
        &namespace,
        Some(&format!("scheduler:\n  schedulerName: {name}\n")),
    );
    let identity: Vec<Value> = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ]
    .iter()
    .map(|kind| {
        scheduler_object(&docs, kind)
            .unwrap_or_else(|| panic!("the chart renders no scheduler {kind}"))
            .clone()
    })
    .collect();
    apply_kinds(
        &admin,
        &identity,
        &[
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ],
    )
    .await;
    let deployment = scheduler_object(&docs, "Deployment").expect("the Deployment");
    let service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("a service account");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = identity::service_account_kubeconfig(
        env,
        &admin,
        &namespace,
        service_account,
        None,
        dir.path(),
        "scheduler",
    )
    .await;

    // A kwok GPU node (4 GPUs, two NVLink pairs) with its GpuTopology, as
    // the agent would publish it.
    let node = env.unique_name("sched-node");
    let group = env.unique_name("sched-group");
    env.create_fake_gpu_node(
        &node,
        4,
        &BTreeMap::from([("e2e-group".to_owned(), group.clone())]),
    )
    .await;
    let nodes = Api::<Node>::all(admin.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    while nodes
        .get(&node)
        .await
        .expect("node")
        .spec
        .and_then(|s| s.taints)
        .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready"))
    {
        assert!(
            Instant::now() < deadline,
            "node {node} still tainted not-ready after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    create_pair_topology(&admin, &node).await;

    // The scheduler as the chart's container runs it: its args (the config
    // file is the chart's ConfigMap's, at a temporary path) and its
    // environment (POD_NAMESPACE from the downward API; the port moved to a
    // free loopback one). Leader election off: the test runs one replica.
    let scheduler = container(deployment);
    let args = chart_args(&docs, scheduler, dir.path());
    assert_eq!(args.len(), 3, "{args:?}");
    let mut args = args;
    args.push("--leader-elect=false".to_owned());
    let port = free_port();
    let mut vars: Vec<(String, String)> = Vec::new();
    for var in scheduler["env"].as_array().expect("env") {
        let var_name = var["name"].as_str().expect("a name").to_owned();
        let value = match (var_name.as_str(), var["value"].as_str()) {
            ("GPUTOPO_SCHEDULER_LISTEN", _) => format!("127.0.0.1:{port}"),
            (_, Some(v)) => v.to_owned(),
            (_, None) => match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.namespace") => namespace.clone(),
                Some("metadata.name") => "sched-e2e-replica".to_owned(),
                other => panic!("{var_name} from {other:?}"),
            },
        };
        vars.push((var_name, value));
    }
    vars.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    let env_refs: Vec<(&str, &OsStr)> = vars
        .iter()
        .map(|(n, v)| (n.as_str(), OsStr::new(v.as_str())))
        .collect();
    let log = dir.path().join("scheduler.log");
    let mut process = Process::spawn(
        "gputopo-scheduler",
        &scheduler_bin,
        &args,
        &env_refs,
        log.clone(),
    )
    .expect("the scheduler starts");

    // Ready: every watch listed, under the chart's ClusterRole.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        process
            .check_running()
            .unwrap_or_else(|e| panic!("the scheduler died: {e:#}"));
        match http_get(port, "/readyz") {
            Ok((200, _)) => break,
            other => assert!(
                Instant::now() < deadline,
                "scheduler not ready after 60 s: {other:?}; log:\n{}",
                gputopo_testenv::process::tail(&log, 30)
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let pod_for = |pod_name: &str, gpus: u32| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": pod_name},
            "spec": {
                "schedulerName": name,
                "nodeSelector": {"e2e-group": group},
                "containers": [{
                    "name": "main",
                    "image": "registry.invalid/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}
                }]
            }
        }))
        .expect("a pod")
    };
    let pods = Api::<Pod>::namespaced(admin.clone(), &namespace);
    pods.create(&PostParams::default(), &pod_for("train", 2))
        .await
        .expect("pod created");
    pods.create(&PostParams::default(), &pod_for("too-big", 8))
        .await
        .expect("pod created");

    // Bound with its GPU annotations (pods/binding), Scheduled event
    // (events.k8s.io create); the one that fits nowhere gets
    // PodScheduled=False (pods/status patch).
    let deadline = Instant::now() + Duration::from_secs(60);
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(admin.clone(), &namespace);
    loop {
        process
            .check_running()
            .unwrap_or_else(|e| panic!("the scheduler died: {e:#}"));
        let train = pods.get("train").await.expect("pod");
        let too_big = pods.get("too-big").await.expect("pod");
        let annotations = train.metadata.annotations.clone().unwrap_or_default();
        let bound = train.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str());
        let unschedulable = too_big
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            });
        let reasons: Vec<String> = events
            .list(&kube::api::ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter_map(|e| Some(format!("{}: {}", e.reason?, e.note.unwrap_or_default())))
            .collect();
        if bound
            && annotations.contains_key("gputopo.dev/assigned-gpus")
            && annotations.contains_key("scheduler.gputopo.dev/bottleneck")
            && unschedulable
            && reasons.iter().any(|r| r.starts_with("Scheduled:"))
            && reasons.iter().any(|r| r.starts_with("FailedScheduling:"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 60 s: bound {bound}, annotations {annotations:?}, too-big unschedulable \
             {unschedulable}, events {reasons:?}; log:\n{}",
            gputopo_testenv::process::tail(&log, 40)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The GpuTopology was read (under the chart's ClusterRole): the pair is
    // one of the node's NVLink pairs.
    let train = pods.get("train").await.expect("pod");
    let annotations = train.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations["scheduler.gputopo.dev/bottleneck"], "NV12",
        "{annotations:?}"
    );
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log_text.contains("forbidden"),
        "the chart's RBAC refused something:\n{log_text}"
    );
    process.kill();

    // With leader election on, as the chart runs it: the chart's Role lets
    // a replica take the Lease in the release namespace.
    let lease_name = env_value(scheduler, "GPUTOPO_SCHEDULER_LEASE_NAME").expect("a lease name");
    let port = free_port();
    let mut elect_vars = vars.clone();
    for (var_name, value) in &mut elect_vars {
        if var_name == "GPUTOPO_SCHEDULER_LISTEN" {
            *value = format!("127.0.0.1:{port}");
        }
    }
    let elect_refs: Vec<(&str, &OsStr)> = elect_vars
        .iter()
        .map(|(n, v)| (n.as_str(), OsStr::new(v.as_str())))
        .collect();
    let elect_log = dir.path().join("scheduler-elect.log");
    let mut elected = Process::spawn(
        "gputopo-scheduler-elect",
        &scheduler_bin,
        &args[..3],
        &elect_refs,
        elect_log.clone(),
    )
    .expect("the scheduler starts");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(admin.clone(), &namespace);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        elected
            .check_running()
            .unwrap_or_else(|e| panic!("the scheduler died: {e:#}"));
        let holder = leases
            .get_opt(lease_name)
            .await
            .expect("get lease")
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity);
        if holder
            .as_deref()
            .is_some_and(|h| h.starts_with("sched-e2e-replica"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no Lease {namespace}/{lease_name} held after 30 s (holder {holder:?}); log:\n{}",
            gputopo_testenv::process::tail(&elect_log, 30)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    elected.kill();
}

#[tokio::test]
async fn the_extender_binds_a_pod_with_exactly_the_charts_rbac() {
    let env = TestEnv::shared().await;
    env.with_controller_manager().await;
    env.with_kwok().await;
    let admin = env.client().await;
    let scheduler_bin = workspace_binary("gputopo-scheduler", "gputopo-scheduler");

    // A release of its own in extender mode; only its identity is applied.
    let namespace = env.create_namespace("gputopo-ext").await;
    let docs = render_ok("ext", &namespace, Some(EXTENDER_VALUES));
    let identity: Vec<Value> = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
        .iter()
        .map(|kind| {
            scheduler_object(&docs, kind)
                .unwrap_or_else(|| panic!("the chart renders no scheduler {kind}"))
                .clone()
        })
        .collect();
    apply_kinds(
        &admin,
        &identity,
        &["ServiceAccount", "ClusterRole", "ClusterRoleBinding"],
    )
    .await;
    let deployment = scheduler_object(&docs, "Deployment").expect("the Deployment");
    let service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("a service account");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = identity::service_account_kubeconfig(
        env,
        &admin,
        &namespace,
        service_account,
        None,
        dir.path(),
        "extender",
    )
    .await;

    // A kwok node with 4 GPUs in two NVLink pairs and its GpuTopology.
    let node = env.unique_name("ext-node");
    env.create_fake_gpu_node(&node, 4, &BTreeMap::new()).await;
    create_pair_topology(&admin, &node).await;

    // The Secrets the values name, from a CA of the extender's own: the
    // serving certificate (for 127.0.0.1 here) and the CA that signed
    // kube-scheduler's client certificate.
    let pki = Pki::create(&dir.path().join("pki")).expect("the extender's CA");
    let scheduler_cert = pki
        .client("kube-scheduler", "kube-scheduler", &[])
        .expect("kube-scheduler's client certificate");
    let secrets = BTreeMap::from([
        (
            "gputopo-extender-tls",
            BTreeMap::from([
                ("tls.crt", pki.serving.cert.clone()),
                ("tls.key", pki.serving.key.clone()),
            ]),
        ),
        (
            "kube-scheduler-client-ca",
            BTreeMap::from([("ca.crt", pki.ca_files.cert.clone())]),
        ),
    ]);
    let tls = TlsClient::new(&pki.ca_files.cert, Some(&scheduler_cert)).expect("a TLS client");

    // The extender as the chart's container runs it: its args (the config
    // file is the chart's ConfigMap's), environment and Secret volumes
    // (files where the variables name them), ports moved to free loopback
    // ones.
    let extender = container(deployment);
    let args = chart_args(&docs, extender, dir.path());
    let mounts =
        extender_security::secret_mounts(deployment, extender, &secrets, &dir.path().join("root"));
    let (port, extender_port) = (free_port(), free_port());
    let mut vars: Vec<(String, String)> = Vec::new();
    for var in extender["env"].as_array().expect("env") {
        let var_name = var["name"].as_str().expect("a name").to_owned();
        let value = match var_name.as_str() {
            "GPUTOPO_SCHEDULER_LISTEN" => format!("127.0.0.1:{port}"),
            "GPUTOPO_SCHEDULER_EXTENDER_LISTEN" => format!("127.0.0.1:{extender_port}"),
            _ => extender_security::remount(
                var["value"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{var_name} has no plain value: {var}")),
                &mounts,
            ),
        };
        vars.push((var_name, value));
    }
    vars.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    let env_refs: Vec<(&str, &OsStr)> = vars
        .iter()
        .map(|(n, v)| (n.as_str(), OsStr::new(v.as_str())))
        .collect();
    let log = dir.path().join("extender.log");
    let mut process = Process::spawn(
        "gputopo-extender",
        &scheduler_bin,
        &args,
        &env_refs,
        log.clone(),
    )
    .expect("the extender starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        process
            .check_running()
            .unwrap_or_else(|e| panic!("the extender died: {e:#}"));
        match http_get(port, "/readyz") {
            Ok((200, _)) => break,
            other => assert!(
                Instant::now() < deadline,
                "extender not ready after 60 s: {other:?}; log:\n{}",
                gputopo_testenv::process::tail(&log, 30)
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // What kube-scheduler would send for a 2-GPU pod of a profile the
    // values name (no scheduler serves it here).
    let pods = Api::<Pod>::namespaced(admin.clone(), &namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "train"},
        "spec": {
            "schedulerName": "gpu-profile",
            "containers": [{
                "name": "main",
                "image": "registry.invalid/train:1",
                "resources": {"limits": {"nvidia.com/gpu": "2"}}
            }]
        }
    }))
    .expect("a pod");
    let pod = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("pod created");
    let filter = json!({"Pod": pod, "NodeNames": [node]}).to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, body) = tls
            .request(extender_port, "POST", "/filter", &filter)
            .await
            .expect("/filter answers");
        assert_eq!(code, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).expect("JSON");
        // The node and its GpuTopology reach the cache a moment apart.
        if answer["NodeNames"] == json!([node]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the node never passed: {answer}; log:\n{}",
            gputopo_testenv::process::tail(&log, 30)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let bind = json!({
        "PodName": "train",
        "PodNamespace": namespace,
        "PodUID": pod.metadata.uid,
        "Node": node,
    })
    .to_string();
    let (code, body) = tls
        .request(extender_port, "POST", "/bind", &bind)
        .await
        .expect("/bind answers");
    assert_eq!(
        (code, body.as_str()),
        (200, r#"{"Error":""}"#),
        "log:\n{}",
        gputopo_testenv::process::tail(&log, 30)
    );
    let train = pods.get("train").await.expect("pod");
    assert_eq!(
        train.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(node.as_str())
    );
    let annotations = train.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations["scheduler.gputopo.dev/bottleneck"], "NV12",
        "one of the node's NVLink pairs: {annotations:?}"
    );
    assert_eq!(
        annotations["gputopo.dev/assigned-gpus"].split(',').count(),
        2,
        "{annotations:?}"
    );
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log_text.contains("forbidden"),
        "the chart's RBAC refused something:\n{log_text}"
    );
    process.kill();
}

/// Creates a `GpuTopology` for `node`: four GPUs in two NVLink pairs, the
/// `gpu-a` machine of `fixtures/clusters/kube-list.yaml`.
async fn create_pair_topology(admin: &kube::Client, node: &str) {
    let list: Value = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("fixtures/clusters/kube-list.yaml")).expect("fixture"),
    )
    .expect("YAML");
    let mut topology = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["kind"] == "GpuTopology" && i["metadata"]["name"] == "gpu-a")
        .expect("gpu-a's GpuTopology")
        .clone();
    topology["metadata"]["name"] = json!(node);
    topology["spec"]["nodeName"] = json!(node);
    topology
        .as_object_mut()
        .expect("an object")
        .remove("status");
    let topology: gputopo_api::GpuTopology =
        serde_json::from_value(topology).expect("a GpuTopology");
    Api::<gputopo_api::GpuTopology>::all(admin.clone())
        .create(&PostParams::default(), &topology)
        .await
        .expect("GpuTopology created");
}

/// The chart container's args, its config file (the chart's ConfigMap's
/// `config.yaml`) written under `dir` and named in their place.
fn chart_args(docs: &[Value], container: &Value, dir: &Path) -> Vec<String> {
    let config = scheduler_object(docs, "ConfigMap").expect("the ConfigMap");
    let config_file = dir.join("config.yaml");
    std::fs::write(
        &config_file,
        config["data"]["config.yaml"].as_str().expect("config.yaml"),
    )
    .expect("config written");
    container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .map(|a| {
            if a == "/etc/gputopo/config.yaml" {
                config_file.display().to_string()
            } else {
                a.to_owned()
            }
        })
        .collect()
}
