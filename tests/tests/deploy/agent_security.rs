//! The agent's pod as the chart and the plain manifests render it: how it
//! reaches the kubelet's PodResources socket with the least it can (uid 0
//! only while it reads the socket, every capability dropped, no privilege
//! escalation, a read-only root filesystem, only the socket's directory
//! mounted, read-only), and the values that cannot work.

use super::{
    HelmError, NAMESPACE, RELEASE, container, env_value, find, plain_manifests, render, render_ok,
};
use serde_json::{Value, json};

/// The hostPath volumes of the agent's pod, each with where and how it is mounted.
fn host_paths(ds: &Value) -> Vec<(String, String, bool)> {
    let pod = &ds["spec"]["template"]["spec"];
    let mounts = container(ds)["volumeMounts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    pod["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|v| {
            let host = v["hostPath"]["path"].as_str()?;
            let mount = mounts
                .iter()
                .find(|m| m["name"] == v["name"])
                .expect("a mount");
            Some((
                host.to_owned(),
                mount["mountPath"].as_str().expect("mountPath").to_owned(),
                mount["readOnly"] == true,
            ))
        })
        .collect()
}

/// What every agent pod must hold, root or not.
fn assert_locked_down(ds: &Value, what: &str) {
    let pod = &ds["spec"]["template"]["spec"];
    let c = container(ds);
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["privileged"], false, "{what}");
    assert_eq!(
        sc["capabilities"],
        json!({"drop": ["ALL"]}),
        "{what}: nothing added"
    );
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "{what}"
    );
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        assert!(pod.get(host).is_none_or(|v| v == false), "{what}: {host}");
    }
    for (host, at, read_only) in host_paths(ds) {
        // The kubelet's plugin directories, where the link devices' plugin
        // binds its sockets, are the only writable ones.
        let plugin_dir = host.starts_with("/var/lib/kubelet/plugins") && host == at;
        assert!(
            read_only || plugin_dir,
            "{what}: {host} at {at} is writable"
        );
    }
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn link_devices_mount_the_kubelets_plugin_directories_where_the_kubelet_dials() {
    let values = "agent:\n  podResources:\n    enabled: false\n  linkDevices:\n    enabled: true\n    pluginsHostPath: /data/kubelet/plugins\n    registryHostPath: /data/kubelet/plugins_registry\n";
    let docs = render_ok(RELEASE, NAMESPACE, Some(values));
    let ds = find(&docs, "DaemonSet").expect("the DaemonSet");
    let c = container(ds);
    // Root for the root-owned directories, every capability still dropped.
    assert_eq!(c["securityContext"]["runAsUser"], 0);
    assert_eq!(
        c["securityContext"]["capabilities"],
        json!({"drop": ["ALL"]})
    );
    // Mounted at the host's paths: the endpoint the agent names is the kubelet's path.
    let mut paths = host_paths(ds);
    paths.sort();
    assert_eq!(
        paths,
        [
            (
                "/data/kubelet/plugins".to_owned(),
                "/data/kubelet/plugins".to_owned(),
                false
            ),
            (
                "/data/kubelet/plugins_registry".to_owned(),
                "/data/kubelet/plugins_registry".to_owned(),
                false
            ),
            ("/sys".to_owned(), "/host/sys".to_owned(), true),
        ]
    );
    assert_eq!(env_value(c, "GPUTOPO_LINK_DEVICES"), Some("true"));
    assert_eq!(
        env_value(c, "GPUTOPO_KUBELET_PLUGINS_DIR"),
        Some("/data/kubelet/plugins")
    );
    assert_eq!(
        env_value(c, "GPUTOPO_KUBELET_REGISTRY_DIR"),
        Some("/data/kubelet/plugins_registry")
    );
    let classes: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "DeviceClass")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    assert_eq!(classes, ["gpu-link.gputopo.dev", "nic-link.gputopo.dev"]);
    // The classes the DRA contract page shows are the chart's.
    let page =
        std::fs::read_to_string(super::root().join("docs/contract/dra.md")).expect("the page");
    let documented: Vec<Value> = page
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .flat_map(|b| b.split("\n---\n").map(str::to_owned).collect::<Vec<_>>())
        .filter_map(|d| serde_yaml::from_str::<Value>(&d).ok())
        .filter(|d| d["kind"] == "DeviceClass")
        .collect();
    assert_eq!(documented.len(), 2, "the page shows both classes");
    for d in &documented {
        let rendered = docs
            .iter()
            .find(|r| r["kind"] == "DeviceClass" && r["metadata"]["name"] == d["metadata"]["name"])
            .expect("the chart renders it");
        assert_eq!(rendered["spec"], d["spec"], "{}", d["metadata"]["name"]);
    }
    // Off (the default): none of it.
    let docs = render_ok(RELEASE, NAMESPACE, None);
    let ds = find(&docs, "DaemonSet").expect("the DaemonSet");
    assert_eq!(env_value(container(ds), "GPUTOPO_LINK_DEVICES"), None);
    assert!(docs.iter().all(|d| d["kind"] != "DeviceClass"));
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_agent_reads_pod_resources_as_root_with_nothing_else() {
    let charted = render_ok(RELEASE, NAMESPACE, None);
    let plain = plain_manifests();
    for (what, docs) in [("chart", &charted), ("daemonset/", &plain)] {
        let ds = find(docs, "DaemonSet").expect("the DaemonSet");
        assert_locked_down(ds, what);
        let c = container(ds);
        // uid 0, on the container, only to connect to the root-owned socket.
        assert_eq!(c["securityContext"]["runAsUser"], 0, "{what}");
        assert_eq!(c["securityContext"]["runAsNonRoot"], false, "{what}");
        assert_eq!(
            ds["spec"]["template"]["spec"]["securityContext"]["runAsUser"], 65532,
            "{what}"
        );
        // Of /var/lib/kubelet, only the socket's directory, read-only.
        assert_eq!(
            host_paths(ds),
            [
                ("/sys".to_owned(), "/host/sys".to_owned(), true),
                (
                    "/var/lib/kubelet/pod-resources".to_owned(),
                    "/var/lib/kubelet/pod-resources".to_owned(),
                    true
                ),
            ],
            "{what}"
        );
        assert_eq!(
            env_value(c, "GPUTOPO_POD_RESOURCES"),
            Some("true"),
            "{what}"
        );
        assert_eq!(
            env_value(c, "GPUTOPO_POD_RESOURCES_SOCKET"),
            Some("/var/lib/kubelet/pod-resources/kubelet.sock"),
            "{what}: the socket inside the mounted directory"
        );
        assert_eq!(
            env_value(c, "GPUTOPO_ALLOCATIONS_HEARTBEAT"),
            Some("5m"),
            "{what}"
        );
        assert_eq!(env_value(c, "GPUTOPO_SCAN_TIMEOUT"), Some("2m"), "{what}");
    }
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn without_pod_resources_the_agent_is_not_root() {
    let docs = render_ok(
        RELEASE,
        NAMESPACE,
        Some("agent:\n  podResources:\n    enabled: false\n"),
    );
    let ds = find(&docs, "DaemonSet").expect("the DaemonSet");
    assert_locked_down(ds, "podResources off");
    let c = container(ds);
    assert!(
        c["securityContext"].get("runAsUser").is_none(),
        "{}",
        c["securityContext"]
    );
    let pod = &ds["spec"]["template"]["spec"]["securityContext"];
    assert_eq!(
        (pod["runAsUser"].clone(), pod["runAsNonRoot"].clone()),
        (json!(65532), json!(true))
    );
    assert_eq!(env_value(c, "GPUTOPO_POD_RESOURCES"), Some("false"));
    assert_eq!(env_value(c, "GPUTOPO_POD_RESOURCES_SOCKET"), None);
    assert_eq!(host_paths(ds).len(), 1, "only /sys");
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn a_heartbeat_shorter_than_a_scan_fails_the_render() {
    let cases = [
        (
            "agent:\n  rescanInterval: 10m\n",
            "agent.podResources.heartbeat (5m) must be at least agent.rescanInterval (10m)",
        ),
        (
            "agent:\n  rescanInterval: 1m30s\n  podResources:\n    heartbeat: 89s\n",
            "agent.podResources.heartbeat (89s) must be at least agent.rescanInterval (1m30s)",
        ),
        (
            "agent:\n  podResources:\n    heartbeat: \"300\"\n",
            "/agent/podResources/heartbeat",
        ),
        ("agent:\n  scanTimeout: 2 minutes\n", "/agent/scanTimeout"),
    ];
    for (values, expected) in cases {
        match render(RELEASE, NAMESPACE, Some(values)) {
            Err(HelmError::Failed { stderr, .. }) => {
                assert!(stderr.contains(expected), "{values}: {stderr}")
            }
            other => panic!("{values}: expected helm to refuse, got {other:?}"),
        }
    }
    // Equal is enough; off, the heartbeat is not read.
    render_ok(
        RELEASE,
        NAMESPACE,
        Some("agent:\n  rescanInterval: 90s\n  podResources:\n    heartbeat: 1m30s\n"),
    );
    render_ok(
        RELEASE,
        NAMESPACE,
        Some("agent:\n  rescanInterval: 10m\n  podResources:\n    enabled: false\n"),
    );
}
