//! AMD through the chart: `agent.amd.enabled` adds a DaemonSet for the AMD
//! nodes (their labels, their taint, AMD SMI, the device access it needs, no
//! NVIDIA runtime), `agent.backend` picks what the first DaemonSet reads
//! (nvidia, amd, auto), values that cannot work fail the render, the API
//! server accepts what renders, and the AMD pool's container, run as the
//! chart renders it with recorded AMD machines in place of the live AMD SMI,
//! publishes them with the chart's identity.

use super::*;

/// What an operator of a mixed cluster sets: the NVIDIA DaemonSet as it
/// was, and the AMD pool with an image that carries AMD SMI.
const AMD_POOL: &str = r#"
agent:
  amd:
    enabled: true
    library: /opt/rocm-6.4.0/lib/libamd_smi.so
    image:
      repository: registry.example.com/gputopo/gputopo-agent-rocm
      tag: 0.1.0-rocm6.4
"#;

/// A cluster of AMD nodes only, whose runtime class gives pods the devices.
const AMD_ONLY_UNPRIVILEGED: &str = r#"
agent:
  backend: amd
  amd:
    privileged: false
    runtimeClassName: amd
"#;

const AUTO: &str = "agent:\n  backend: auto\n";

const NVIDIA_NODE: [(&str, &str); 1] = [("nvidia.com/gpu.present", "true")];
const AMD_NODE: [(&str, &str); 1] = [("feature.node.kubernetes.io/amd-gpu", "true")];

fn daemonsets(docs: &[Value]) -> Vec<&Value> {
    docs.iter().filter(|d| d["kind"] == "DaemonSet").collect()
}

/// Whether the DaemonSet's required node affinity admits a node with these
/// labels (the operators the chart uses: In, Exists).
fn selects(ds: &Value, labels: &[(&str, &str)]) -> bool {
    let terms = &ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    terms
        .as_array()
        .expect("nodeSelectorTerms")
        .iter()
        .any(|t| {
            t["matchExpressions"]
                .as_array()
                .expect("matchExpressions")
                .iter()
                .all(|e| {
                    let value = labels.iter().find(|(k, _)| e["key"] == *k).map(|(_, v)| v);
                    match e["operator"].as_str() {
                        Some("Exists") => value.is_some(),
                        Some("In") => value.is_some_and(|v| {
                            e["values"].as_array().expect("values").contains(&json!(v))
                        }),
                        other => panic!("operator {other:?} not handled here"),
                    }
                })
        })
}

fn args(ds: &Value) -> Vec<&str> {
    container(ds)["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

fn env_names(ds: &Value) -> Vec<&str> {
    container(ds)["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect()
}

fn toleration_keys(ds: &Value) -> Vec<&str> {
    ds["spec"]["template"]["spec"]["tolerations"]
        .as_array()
        .expect("tolerations")
        .iter()
        .filter_map(|t| t["key"].as_str())
        .collect()
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn an_amd_pool_installs_beside_the_nvidia_one_with_amd_selectors_devices_and_flag() {
    let docs = render_ok(RELEASE, NAMESPACE, Some(AMD_POOL));
    let [nvidia, amd] = daemonsets(&docs)[..] else {
        panic!("two DaemonSets: {:?}", daemonsets(&docs).len());
    };
    // The NVIDIA DaemonSet is the default one, unchanged.
    let defaults = render_ok(RELEASE, NAMESPACE, None);
    assert_eq!(Some(nvidia), find(&defaults, "DaemonSet"));
    assert_eq!(amd["metadata"]["name"], "gputopo-agent-amd");

    // Each pool on its vendor's nodes only; selectors that differ, with the
    // pool label on the pods (the first selector is immutable and unchanged).
    assert!(selects(amd, &AMD_NODE) && !selects(amd, &NVIDIA_NODE));
    assert!(selects(
        amd,
        &[("feature.node.kubernetes.io/pci-1002.present", "true")]
    ));
    assert!(selects(nvidia, &NVIDIA_NODE) && !selects(nvidia, &AMD_NODE));
    let selector = &amd["spec"]["selector"]["matchLabels"];
    assert_eq!(selector["gputopo.dev/agent-pool"], "amd");
    for (k, v) in selector.as_object().expect("matchLabels") {
        assert_eq!(&amd["spec"]["template"]["metadata"]["labels"][k], v, "{k}");
    }
    assert_eq!(toleration_keys(amd), ["amd.com/gpu"]);

    // AMD SMI, from the image that has it, without the NVIDIA runtime's env.
    assert_eq!(args(amd), ["run", "--amd-smi"]);
    assert!(
        !env_names(amd).iter().any(|n| n.starts_with("NVIDIA_")),
        "{:?}",
        env_names(amd)
    );
    assert!(!env_names(amd).contains(&"GPUTOPO_NVML_LIBRARY"));
    assert_eq!(
        env_value(container(amd), "GPUTOPO_AMD_SMI_LIBRARY"),
        Some("/opt/rocm-6.4.0/lib/libamd_smi.so")
    );
    assert_eq!(
        container(amd)["image"],
        "registry.example.com/gputopo/gputopo-agent-rocm:0.1.0-rocm6.4"
    );
    assert_eq!(
        container(nvidia)["image"],
        "ghcr.io/gputopo/gputopo-agent:0.1.0"
    );

    // /dev/dri/renderD* (AMD SMI opens them read-write): privileged, uid 0;
    // the rest of the lockdown stays.
    let sc = &container(amd)["securityContext"];
    assert_eq!(sc["privileged"], true);
    assert_eq!(
        sc["allowPrivilegeEscalation"], true,
        "the API server's rule"
    );
    assert_eq!(sc["runAsUser"], 0);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(container(nvidia)["securityContext"]["privileged"], false);
    assert!(
        amd["spec"]["template"]["spec"]
            .get("runtimeClassName")
            .is_none()
    );
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn an_amd_only_cluster_with_a_device_runtime_runs_the_agent_unprivileged() {
    let docs = render_ok(RELEASE, NAMESPACE, Some(AMD_ONLY_UNPRIVILEGED));
    let [ds] = daemonsets(&docs)[..] else {
        panic!("one DaemonSet");
    };
    assert_eq!(ds["metadata"]["name"], "gputopo-agent");
    assert!(selects(ds, &AMD_NODE) && !selects(ds, &NVIDIA_NODE));
    assert_eq!(args(ds), ["run", "--amd-smi"]);
    assert_eq!(ds["spec"]["template"]["spec"]["runtimeClassName"], "amd");
    let sc = &container(ds)["securityContext"];
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"], json!({"drop": ["ALL"]}));
    assert!(!env_names(ds).iter().any(|n| n.starts_with("NVIDIA_")));
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn auto_is_one_daemonset_on_both_vendors_nodes_with_both_vendors_access() {
    let docs = render_ok(RELEASE, NAMESPACE, Some(AUTO));
    let [ds] = daemonsets(&docs)[..] else {
        panic!("one DaemonSet");
    };
    assert_eq!(args(ds), ["run", "--backend=auto"]);
    assert!(selects(ds, &AMD_NODE) && selects(ds, &NVIDIA_NODE));
    assert!(!selects(ds, &[("kubernetes.io/os", "linux")]));
    assert_eq!(toleration_keys(ds), ["nvidia.com/gpu", "amd.com/gpu"]);
    // NVML through the NVIDIA runtime on NVIDIA nodes, AMD SMI's devices on
    // AMD ones: one pod spec holds both.
    assert_eq!(
        env_value(container(ds), "NVIDIA_VISIBLE_DEVICES"),
        Some("all")
    );
    assert_eq!(container(ds)["securityContext"]["privileged"], true);
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn amd_values_that_cannot_work_fail_the_render_naming_both() {
    let cases = [
        (
            "agent:\n  backend: amd\n  amd:\n    enabled: true\n",
            ["agent.amd.enabled=true", "agent.backend=amd"],
        ),
        (
            "agent:\n  backend: auto\n  amd:\n    enabled: true\n",
            ["agent.amd.enabled=true", "agent.backend=auto"],
        ),
        (
            "agent:\n  backend: auto\n  runtimeClassName: nvidia\n",
            ["agent.backend=auto", "agent.runtimeClassName=\"nvidia\""],
        ),
        (
            "agent:\n  backend: amd\n  runtimeClassName: nvidia\n",
            ["agent.runtimeClassName=nvidia", "agent.backend=amd"],
        ),
        (
            "agent:\n  backend: rocm\n",
            ["/agent/backend", "'nvidia', 'amd', 'auto'"],
        ),
        (
            "agent:\n  amd:\n    privilege: false\n",
            [
                "additional properties 'privilege' not allowed",
                "/agent/amd",
            ],
        ),
    ];
    for (values, says) in cases {
        match render(RELEASE, NAMESPACE, Some(values)) {
            Err(HelmError::Failed { stderr, .. }) => {
                for s in says {
                    assert!(stderr.contains(s), "{values}: no {s:?} in {stderr}");
                }
            }
            other => panic!("{values}: rendered: {:?}", other.map(|d| d.len())),
        }
    }
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_api_server_accepts_the_amd_renders() {
    let env = TestEnv::shared().await;
    let client = env.client().await;
    ensure_namespace(&client, NAMESPACE).await;
    for values in [AMD_POOL, AMD_ONLY_UNPRIVILEGED, AUTO] {
        let docs = render_ok(RELEASE, NAMESPACE, Some(values));
        assert!(!daemonsets(&docs).is_empty());
        for doc in &docs {
            let key = kind_name(doc);
            let applied = dry_run_apply(&client, doc)
                .await
                .unwrap_or_else(|e| panic!("{values}: {key:?} refused: {e}"));
            assert_eq!(applied["metadata"]["name"], key.1);
        }
    }
    // The check can fail: privileged with no privilege escalation is refused.
    let mut docs = render_ok(RELEASE, NAMESPACE, Some(AMD_POOL));
    let amd = docs
        .iter_mut()
        .find(|d| d["metadata"]["name"] == "gputopo-agent-amd")
        .expect("the AMD DaemonSet");
    amd["spec"]["template"]["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] =
        json!(false);
    let e = dry_run_apply(&client, amd).await.expect_err("refused");
    assert!(e.to_string().contains("allowPrivilegeEscalation"), "{e}");
}
