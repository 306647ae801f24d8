//! `logFormat`: one value sets every daemon's log format through
//! `GPUTOPO_LOG_FORMAT`, and the scheduler's deprecated `scheduler.logJson:
//! true` still means JSON.

use super::helm::{HelmError, render, render_ok};
use super::objects::{container, env_value};
use super::values::{NAMESPACE, RELEASE};
use serde_json::Value;

/// Each daemon's workload in the render: the scheduler's Deployment, the
/// agent's and the device plugin's DaemonSets, by component label.
fn log_formats(docs: &[Value]) -> Vec<(String, Option<String>)> {
    docs.iter()
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "DaemonSet")
        .map(|d| {
            let component = d["metadata"]["labels"]["app.kubernetes.io/component"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let format = env_value(container(d), "GPUTOPO_LOG_FORMAT").map(str::to_owned);
            (component, format)
        })
        .collect()
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn log_format_reaches_every_daemon() {
    let cases = [
        ("", ["text", "text", "text"]),
        ("logFormat: json\n", ["json", "json", "json"]),
        // Deprecated, and the scheduler's alone.
        ("scheduler:\n  logJson: true\n", ["text", "text", "json"]),
    ];
    for (values, expected) in cases {
        let values = format!("{values}devicePlugin:\n  enabled: true\n");
        let mut got = log_formats(&render_ok(RELEASE, NAMESPACE, Some(&values)));
        got.sort();
        let components: Vec<&str> = got.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(
            components,
            ["agent", "device-plugin", "scheduler"],
            "{values}"
        );
        let formats: Vec<Option<&str>> = got.iter().map(|(_, f)| f.as_deref()).collect();
        assert_eq!(formats, expected.map(Some), "{values}");
    }
    match render(RELEASE, NAMESPACE, Some("logFormat: logfmt\n")) {
        Err(HelmError::Failed { stderr, .. }) => {
            assert!(stderr.contains("/logFormat"), "{stderr}")
        }
        other => panic!("expected helm to refuse logfmt, got {other:?}"),
    }
}
