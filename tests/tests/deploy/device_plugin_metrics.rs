//! The device plugin's metrics in the chart, as the agent's: a headless
//! Service on the port the plugin serves `/metrics` on (and in
//! `daemonset/device-plugin/`), and a prometheus-operator ServiceMonitor
//! with the same monitoring values, adding the pod's node as `node`; each
//! only with `devicePlugin.enabled` and its `metrics.*` switch; the real API
//! server admits the ServiceMonitor under a CRD that refuses unknown fields.

use super::device_plugin::{ENABLED, device_plugin_docs, is_device_plugin, object};
use super::{
    HelmError, NAMESPACE, RELEASE, container, dry_run_apply, ensure_namespace,
    ensure_service_monitor_crd, kind_name, render, render_ok,
};
use gputopo_testenv::TestEnv;
use serde_json::{Value, json};

const MONITORED: &str = r#"
devicePlugin:
  enabled: true
  port: 9400
metrics:
  serviceMonitor:
    enabled: true
    labels: {release: kube-prometheus-stack}
    interval: 30s
    scrapeTimeout: 5s
    relabelings:
      - {action: replace, sourceLabels: [__meta_kubernetes_namespace], targetLabel: namespace}
    metricRelabelings:
      - {action: drop, sourceLabels: [__name__], regex: go_.*}
"#;

fn kinds_of_device_plugin(docs: &[Value]) -> Vec<String> {
    let mut kinds: Vec<String> = device_plugin_docs(docs)
        .iter()
        .filter_map(|d| d["kind"].as_str().map(str::to_owned))
        .collect();
    kinds.sort();
    kinds
}

/// Whether `selector` (a label map) selects an object labelled `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| &labels[k] == v))
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_device_plugins_metrics_service_selects_its_pods_on_the_port_they_serve() {
    let docs = render_ok(RELEASE, NAMESPACE, Some(MONITORED));
    let service = object(&docs, "Service");
    let ds = object(&docs, "DaemonSet");
    assert_eq!(
        service["metadata"]["name"],
        format!(
            "{}-metrics",
            ds["metadata"]["name"].as_str().expect("a name")
        )
    );
    assert_eq!(service["metadata"]["namespace"], NAMESPACE);
    assert_eq!(service["spec"]["clusterIP"], "None", "headless");
    assert_eq!(
        service["spec"]["selector"],
        ds["spec"]["selector"]["matchLabels"]
    );
    let plugin_port = &container(ds)["ports"][0];
    assert_eq!(plugin_port["containerPort"], 9400);
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "http-metrics", "port": 9400,
                "targetPort": plugin_port["name"], "protocol": "TCP"}])
    );
    // The plugin's pods are selected by its Service only, and its Service
    // selects no other component's pods.
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
    let selecting: Vec<_> = docs
        .iter()
        .filter(|d| d["kind"] == "Service" && selects(&d["spec"]["selector"], pod_labels))
        .map(kind_name)
        .collect();
    assert_eq!(selecting, [kind_name(service)]);
    for other in docs.iter().filter(|d| !is_device_plugin(d)) {
        let labels = &other["spec"]["template"]["metadata"]["labels"];
        assert!(
            !selects(&service["spec"]["selector"], labels),
            "{:?}",
            kind_name(other)
        );
    }
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_device_plugins_service_monitor_scrapes_that_service_with_the_monitoring_values() {
    let docs = render_ok(RELEASE, NAMESPACE, Some(MONITORED));
    let monitor = object(&docs, "ServiceMonitor");
    let service = object(&docs, "Service");
    assert_eq!(monitor["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    // A ServiceMonitor selects Services by their labels.
    let selector = &monitor["spec"]["selector"]["matchLabels"];
    assert!(
        selects(selector, &service["metadata"]["labels"]),
        "{selector}"
    );
    assert_eq!(selector, &service["spec"]["selector"]);
    assert_eq!(
        monitor["spec"]["namespaceSelector"],
        json!({"matchNames": [NAMESPACE]})
    );
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], service["spec"]["ports"][0]["name"]);
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["interval"], "30s");
    assert_eq!(endpoint["scrapeTimeout"], "5s");
    assert_eq!(
        endpoint["relabelings"],
        json!([
            {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"],
             "targetLabel": "node"},
            {"action": "replace", "sourceLabels": ["__meta_kubernetes_namespace"],
             "targetLabel": "namespace"}
        ])
    );
    assert_eq!(
        endpoint["metricRelabelings"],
        json!([{"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"}])
    );
    // The agent's ServiceMonitor, from the same values, is another object.
    let monitors: Vec<_> = docs
        .iter()
        .filter(|d| d["kind"] == "ServiceMonitor")
        .map(kind_name)
        .collect();
    assert_eq!(
        monitors.len(),
        3,
        "agent, scheduler, device plugin: {monitors:?}"
    );
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_device_plugins_metrics_objects_follow_their_switches() {
    let cases = [
        // Monitoring on, the plugin off: nothing of it.
        ("metrics:\n  serviceMonitor:\n    enabled: true\n", vec![]),
        (
            ENABLED,
            vec![
                "ClusterRole",
                "ClusterRoleBinding",
                "DaemonSet",
                "Service",
                "ServiceAccount",
            ],
        ),
        (
            "devicePlugin:\n  enabled: true\nmetrics:\n  service:\n    enabled: false\n",
            vec![
                "ClusterRole",
                "ClusterRoleBinding",
                "DaemonSet",
                "ServiceAccount",
            ],
        ),
        (
            MONITORED,
            vec![
                "ClusterRole",
                "ClusterRoleBinding",
                "DaemonSet",
                "Service",
                "ServiceAccount",
                "ServiceMonitor",
            ],
        ),
    ];
    for (values, want) in cases {
        let docs = render_ok(RELEASE, NAMESPACE, Some(values));
        assert_eq!(kinds_of_device_plugin(&docs), want, "{values}");
    }
    // A ServiceMonitor without its Service is refused, naming why.
    let values = "devicePlugin:\n  enabled: true\nmetrics:\n  service:\n    enabled: false\n  serviceMonitor:\n    enabled: true\n";
    match render(RELEASE, NAMESPACE, Some(values)) {
        Err(HelmError::Failed { stderr, .. }) => assert!(
            stderr.contains("metrics.serviceMonitor.enabled needs metrics.service.enabled"),
            "{stderr}"
        ),
        other => panic!("expected helm to refuse, got {other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_api_server_admits_the_device_plugins_service_monitor() {
    let env = TestEnv::shared().await;
    let client = env.client().await;
    ensure_namespace(&client, NAMESPACE).await;
    ensure_service_monitor_crd(&client).await;
    let docs = render_ok(RELEASE, NAMESPACE, Some(MONITORED));
    for kind in ["Service", "ServiceMonitor"] {
        let doc = object(&docs, kind);
        let applied = dry_run_apply(&client, doc)
            .await
            .unwrap_or_else(|e| panic!("{kind} refused by the API server: {e}"));
        assert_eq!(applied["metadata"]["name"], doc["metadata"]["name"]);
    }
}
