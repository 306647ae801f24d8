//! The chart on its own: `helm lint`, the values it refuses, and what
//! non-default values render.

use super::helm::{HelmError, chart_dir, helm, render, render_ok};
use super::objects::{container, env_value, find, kinds};
use super::values::{EXTENDER_VALUES, NAMESPACE, NON_DEFAULT_VALUES, RELEASE};
use serde_json::Value;
use std::ffi::OsStr;

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
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
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
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
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn non_default_values_render_as_asked() {
    let defaults = render_ok(RELEASE, NAMESPACE, None);
    assert_eq!(
        kinds(&defaults),
        [
            "PodDisruptionBudget",
            "ServiceAccount",
            "ServiceAccount",
            "ConfigMap",
            "CustomResourceDefinition",
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
