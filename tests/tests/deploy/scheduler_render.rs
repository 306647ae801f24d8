//! What the chart renders for the scheduler (a secondary scheduler, by
//! default) and for the extender (`scheduler.extender.enabled`).

use super::helm::render_ok;
use super::objects::{container, env_value, scheduler_object};
use super::values::{EXTENDER_VALUES, NAMESPACE, NON_DEFAULT_VALUES, RELEASE};
use serde_json::{Value, json};

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
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
            "GPUTOPO_LOG_FORMAT",
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
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
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
    // The names served, and nothing else: the scheduler's own defaults hold
    // (scheduler/tests/config_values.rs checks that the file means them).
    assert_eq!(file, json!({"schedulerNames": ["gputopo-scheduler"]}));

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
    assert_eq!(env_value(scheduler, "GPUTOPO_LOG_FORMAT"), Some("json"));
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
    // What the values set, and nothing the chart would add.
    assert_eq!(file["weights"], json!({"gpuSet": 60}));
    assert_eq!(file["backoff"], json!({"max": "10s"}));
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

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn extra_scheduler_names_are_served_with_the_same_settings_and_never_twice() {
    let values = "scheduler:\n  extraSchedulerNames: [scheduler-plugins-scheduler]\n";
    let docs = render_ok(RELEASE, NAMESPACE, Some(values));
    let config = scheduler_object(&docs, "ConfigMap").expect("a ConfigMap");
    let file: Value =
        serde_yaml::from_str(config["data"]["config.yaml"].as_str().expect("config.yaml"))
            .expect("YAML");
    assert_eq!(
        file["schedulerNames"],
        json!(["gputopo-scheduler", "scheduler-plugins-scheduler"])
    );
    // With a ConfigMap of the operator's, the names reach the process too.
    let own = "scheduler:\n  existingConfigMap: mine\n  extraSchedulerNames: [scheduler-plugins-scheduler]\n";
    let docs = render_ok(RELEASE, NAMESPACE, Some(own));
    let deployment = scheduler_object(&docs, "Deployment").expect("a Deployment");
    assert_eq!(
        env_value(container(deployment), "GPUTOPO_SCHEDULER_NAME"),
        Some("gputopo-scheduler,scheduler-plugins-scheduler")
    );
    // A name served twice fails the render, naming both values.
    for (values, names) in [
        (
            "scheduler:\n  extraSchedulerNames: [gputopo-scheduler]\n",
            ["scheduler.extraSchedulerNames", "scheduler.schedulerName"],
        ),
        (
            "scheduler:\n  extraSchedulerNames: [ray]\n  config:\n    profiles:\n      - schedulerName: ray\n",
            ["scheduler.extraSchedulerNames", "scheduler.config.profiles"],
        ),
    ] {
        let err = super::helm::render(RELEASE, NAMESPACE, Some(values))
            .expect_err("a name served twice")
            .to_string();
        assert!(names.iter().all(|n| err.contains(n)), "{err}");
    }
}
