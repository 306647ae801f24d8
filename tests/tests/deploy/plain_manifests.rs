//! `daemonset/` against the chart (the same objects) and against the
//! Dockerfiles and the CI build (the same images).

use super::helm::render_ok;
use super::objects::{container, find, kind_name, plain_manifests, without_helm_labels};
use super::root;
use super::values::{NAMESPACE, RELEASE};
use serde_json::Value;
use std::collections::BTreeMap;

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
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
        // The CRD's keep policy is for Helm's uninstall; kubectl has no use for it.
        if let Some(annotations) = chart_doc
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
            && annotations.remove("helm.sh/resource-policy").is_some()
            && annotations.is_empty()
            && let Some(meta) = chart_doc["metadata"].as_object_mut()
        {
            meta.remove("annotations");
        }
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
fn the_images_match_the_manifests_and_the_ci_build() {
    let read = |p: &str| std::fs::read_to_string(root().join(p)).expect(p);
    let chart: Value = serde_yaml::from_str(&read("helm/gputopo/Chart.yaml")).expect("Chart.yaml");
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    // The chart's version moves with the chart's shape (0.2.0: the CRD a
    // template), not with the images; never behind them.
    let version = |v: &Value| -> Vec<u64> {
        v.as_str()
            .expect("a version string")
            .split('.')
            .map(|n| n.parse().expect("a numeric x.y.z"))
            .collect()
    };
    assert!(
        version(&chart["version"]) >= version(&chart["appVersion"]),
        "chart version {} behind appVersion {}",
        chart["version"],
        chart["appVersion"]
    );

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
