//! The chart's optional monitoring: `metrics.prometheusRule` renders a
//! PrometheusRule whose alerts select the chart's metrics Services and link
//! to their runbooks in docs/operator.md, `metrics.grafanaDashboard` a
//! ConfigMap for Grafana's sidecar holding `dashboards/gputopo.json`; both
//! are absent by default, and the real API server admits them (the rule
//! under a CRD with prometheus-operator's schema for the fields it uses).
//! The helpers here read the PromQL out of both, for
//! `observability_daemons` to check against what the real daemons export.

use super::helm::{render, render_ok};
use super::objects::{find, kind_name};
use super::root;
use super::values::{NAMESPACE, RELEASE};
use super::{dry_run_apply, ensure_namespace};
use serde_json::{Value, json};
use std::collections::BTreeSet;

pub(super) const MONITORING: &str = r#"
metrics:
  prometheusRule:
    enabled: true
    labels: {release: kube-prometheus-stack}
    alertLabels: {team: ml-platform}
    pendingFor: 45m
    fragmentationThreshold: 0.7
    fragmentationFor: 2h
  grafanaDashboard:
    enabled: true
    labels: {team: ml-platform}
    folder: GPU
"#;

/// Every alert's rule in the rendered PrometheusRule.
pub(super) fn alert_rules(docs: &[Value]) -> Vec<Value> {
    let rule = find(docs, "PrometheusRule").expect("a PrometheusRule");
    rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .collect()
}

/// The dashboard ConfigMap (the one labelled for Grafana's sidecar).
pub(super) fn dashboard_config_map(docs: &[Value]) -> Option<&Value> {
    docs.iter().find(|d| {
        d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"].is_string()
    })
}

/// Every panel query of the dashboard the ConfigMap holds.
pub(super) fn dashboard_exprs(docs: &[Value]) -> Vec<String> {
    let map = dashboard_config_map(docs).expect("the dashboard ConfigMap");
    let text = map["data"]["gputopo.json"].as_str().expect("gputopo.json");
    let dashboard: Value = serde_json::from_str(text).expect("the dashboard is JSON");
    dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().expect("targets").clone())
        .map(|t| t["expr"].as_str().expect("an expr").to_owned())
        .collect()
}

/// The metric names a PromQL expression selects: every identifier (outside
/// quoted label values) that is `up` or starts with `gputopo_`. Label names
/// and functions never start so; the `gputopo_…_bucket` a quantile reads
/// stays as written (the exposition's sample name).
pub(super) fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut chars = expr.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c == '"' {
            // Skip a label value (escapes included).
            while let Some((_, c)) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '"' => break,
                    _ => {}
                }
            }
        } else if c.is_ascii_alphabetic() || c == '_' {
            let mut end = start + c.len_utf8();
            while let Some(&(i, c)) = chars.peek() {
                if !(c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                    break;
                }
                end = i + c.len_utf8();
                chars.next();
            }
            let word = &expr[start..end];
            if word == "up" || word.starts_with("gputopo_") {
                names.insert(word.to_owned());
            }
        }
    }
    names
}

/// GitHub's anchors of docs/operator.md's headings.
fn operator_anchors() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("docs/operator.md")).expect("operator.md");
    text.lines()
        .filter_map(|l| l.strip_prefix("### ").or_else(|| l.strip_prefix("## ")))
        .map(|h| {
            h.trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

#[test]
fn promql_names_are_read_outside_label_values() {
    let names = metric_names(
        r#"sum by (le) (rate(gputopo_x_bucket{job="gputopo_not_a_metric",a="\"up\""}[5m])) / on() up"#,
    );
    assert_eq!(
        names,
        BTreeSet::from(["gputopo_x_bucket".to_owned(), "up".to_owned()])
    );
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_rule_and_the_dashboard_are_off_by_default() {
    let docs = render_ok(RELEASE, NAMESPACE, None);
    assert!(find(&docs, "PrometheusRule").is_none());
    assert!(dashboard_config_map(&docs).is_none());
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn every_alert_is_labelled_and_explained_with_a_runbook_in_the_operator_page() {
    let docs = render_ok(RELEASE, NAMESPACE, Some(MONITORING));
    let rule = find(&docs, "PrometheusRule").expect("a PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let rules = alert_rules(&docs);
    let alerts: BTreeSet<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    assert_eq!(
        alerts,
        BTreeSet::from([
            "GputopoSchedulerDown",
            "GputopoNoLeader",
            "GputopoGpuPodsPendingTooLong",
            "GputopoAssignmentMismatch",
            "GputopoDegradedLinks",
            "GputopoFragmentationHigh",
            "GputopoInvalidObjects",
            "GputopoGpuRecordEdited",
        ])
    );
    let anchors = operator_anchors();
    for rule in &rules {
        let alert = rule["alert"].as_str().expect("an alert");
        assert_eq!(rule["labels"]["team"], "ml-platform", "{alert}");
        assert!(rule["labels"]["severity"].is_string(), "{alert}");
        for key in ["summary", "description"] {
            assert!(
                rule["annotations"][key]
                    .as_str()
                    .is_some_and(|s| s.len() > 10),
                "{alert} has no {key}"
            );
        }
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .expect("runbook_url");
        let (page, anchor) = url.split_once('#').expect("an anchor");
        assert!(page.ends_with("docs/operator.md"), "{url}");
        assert_eq!(anchor, alert.to_lowercase());
        assert!(
            anchors.contains(anchor),
            "docs/operator.md has no ### {alert}"
        );
        assert!(!metric_names(rule["expr"].as_str().expect("expr")).is_empty());
    }
    let expr_of = |alert: &str| {
        rules
            .iter()
            .find(|r| r["alert"] == alert)
            .expect("the alert")["expr"]
            .as_str()
            .expect("expr")
            .to_owned()
    };
    let pending = rules
        .iter()
        .find(|r| r["alert"] == "GputopoGpuPodsPendingTooLong")
        .expect("pending");
    assert_eq!(pending["for"], "45m");
    assert!(expr_of("GputopoFragmentationHigh").ends_with("> 0.7"));
    // `up` and the scheduler's series are selected by the metrics Service's
    // name, which the ServiceMonitor's targets get as `job`; the agent's
    // by the agent's.
    for (component, alert) in [
        ("scheduler", "GputopoSchedulerDown"),
        ("scheduler", "GputopoNoLeader"),
        ("agent", "GputopoDegradedLinks"),
    ] {
        let service = metrics_service(&docs, component);
        let expr = expr_of(alert);
        assert!(
            expr.contains(&format!("{{job=\"{service}\",namespace=\"{NAMESPACE}\"")),
            "{alert}: {expr}"
        );
    }
}

/// The name of `component`'s metrics Service.
fn metrics_service(docs: &[Value], component: &str) -> String {
    docs.iter()
        .find(|d| {
            d["kind"] == "Service"
                && d["metadata"]["labels"]["app.kubernetes.io/component"] == component
                && d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-metrics"))
        })
        .and_then(|d| d["metadata"]["name"].as_str())
        .unwrap_or_else(|| panic!("no {component} metrics Service"))
        .to_owned()
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_extender_and_an_agent_only_release_get_only_the_alerts_that_apply() {
    let extender = format!(
        "{MONITORING}\nscheduler:\n  extender:\n    enabled: true\n    tls:\n      insecurePlainHTTP: true\n"
    );
    let docs = render_ok(RELEASE, NAMESPACE, Some(&extender));
    let alerts: BTreeSet<String> = alert_rules(&docs)
        .iter()
        .filter_map(|r| r["alert"].as_str().map(str::to_owned))
        .collect();
    // One replica without election, kube-scheduler's own queue and no
    // assignment check: those three alerts would mislead.
    for absent in [
        "GputopoNoLeader",
        "GputopoGpuPodsPendingTooLong",
        "GputopoAssignmentMismatch",
    ] {
        assert!(!alerts.contains(absent), "{alerts:?}");
    }
    assert!(alerts.contains("GputopoSchedulerDown"), "{alerts:?}");
    let agent_only = format!("{MONITORING}\nscheduler:\n  enabled: false\n");
    let docs = render_ok(RELEASE, NAMESPACE, Some(&agent_only));
    let rules = alert_rules(&docs);
    let alerts: Vec<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    assert_eq!(alerts, ["GputopoDegradedLinks"]);
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_dashboard_config_map_is_labelled_for_grafanas_sidecar() {
    let docs = render_ok(RELEASE, NAMESPACE, Some(MONITORING));
    let map = dashboard_config_map(&docs).expect("the dashboard ConfigMap");
    assert_eq!(map["metadata"]["namespace"], NAMESPACE);
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(map["metadata"]["labels"]["team"], "ml-platform");
    assert_eq!(map["metadata"]["annotations"]["grafana_folder"], "GPU");
    let shipped = std::fs::read_to_string(root().join("helm/gputopo/dashboards/gputopo.json"))
        .expect("the dashboard file");
    assert_eq!(
        map["data"]["gputopo.json"].as_str(),
        Some(shipped.trim_end())
    );
    let exprs = dashboard_exprs(&docs);
    assert!(exprs.len() >= 10, "{exprs:?}");
    for wanted in [
        "gputopo_placement_decisions_total",
        "gputopo_schedule_attempts_total",
        "gputopo_scheduling_duration_seconds_bucket",
        "gputopo_extender_requests_total",
        "gputopo_fragmentation_ratio",
        "gputopo_domain_utilization_ratio",
        "gputopo_agent_degraded",
        "gputopo_invalid_objects",
        "gputopo_build_info",
    ] {
        assert!(
            exprs.iter().any(|e| metric_names(e).contains(wanted)),
            "no panel reads {wanted}"
        );
    }
}

#[test]
fn the_monitoring_values_refuse_what_cannot_work() {
    for (bad, why) in [
        ("metrics:\n  prometheusRule:\n    bogus: 1\n", "unknown key"),
        (
            "metrics:\n  grafanaDashboard:\n    bogus: 1\n",
            "unknown key",
        ),
        (
            "metrics:\n  prometheusRule:\n    fragmentationThreshold: 1.5\n",
            "a ratio over 1",
        ),
        (
            "metrics:\n  prometheusRule:\n    pendingFor: soon\n",
            "a duration without a unit",
        ),
        (
            "metrics:\n  prometheusRule:\n    runbookBaseURL: docs\n",
            "not a URL",
        ),
    ] {
        assert!(
            render(RELEASE, NAMESPACE, Some(bad)).is_err(),
            "{why} was accepted: {bad}"
        );
    }
}

/// The PrometheusRule CRD's schema, as prometheus-operator's (the fields the
/// chart uses; durations with its pattern; unknown fields refused).
fn prometheus_rule_crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let duration = json!({"type": "string",
        "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"});
    let strings = json!({"type": "object", "additionalProperties": {"type": "string"}});
    let rule = json!({"type": "object", "required": ["expr"], "properties": {
        "alert": {"type": "string"},
        "record": {"type": "string"},
        "expr": {"anyOf": [{"type": "integer"}, {"type": "string"}],
                 "x-kubernetes-int-or-string": true},
        "for": duration.clone(),
        "keep_firing_for": duration.clone(),
        "labels": strings.clone(),
        "annotations": strings
    }});
    let group = json!({"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "minLength": 1},
        "interval": duration,
        "rules": {"type": "array", "items": rule}
    }});
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "prometheusrules.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": "PrometheusRule", "listKind": "PrometheusRuleList",
                      "plural": "prometheusrules", "singular": "prometheusrule"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "groups": {"type": "array", "items": group}
                    }}
                }}}
            }]
        }
    }))
    .expect("a CRD")
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_api_server_admits_the_rule_and_the_dashboard() {
    let env = gputopo_testenv::TestEnv::shared().await;
    let client = env.client().await;
    ensure_namespace(&client, NAMESPACE).await;
    gputopo_testenv::install_crd(&client, prometheus_rule_crd())
        .await
        .expect("the PrometheusRule CRD");
    let docs = render_ok(RELEASE, NAMESPACE, Some(MONITORING));
    let rule = find(&docs, "PrometheusRule").expect("a PrometheusRule");
    let map = dashboard_config_map(&docs).expect("the dashboard ConfigMap");
    for doc in [rule, map] {
        let key = kind_name(doc);
        let applied = dry_run_apply(&client, doc)
            .await
            .unwrap_or_else(|e| panic!("{key:?} refused by the API server: {e}"));
        assert_eq!(applied["metadata"]["name"], key.1, "{key:?}");
    }
}
