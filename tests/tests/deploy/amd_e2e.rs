//! The AMD pool's agent as the chart renders it (`agent.amd.enabled`): its
//! pod template admitted on an AMD node, a token bound to that pod, its
//! args and environment with a recorded AMD machine's `rocm-smi` output in
//! place of the live AMD SMI. It publishes the machine with the chart's
//! identity, as AMD (vendor, GPU count, XGMI labels, no `nvidia.com/` label).

use super::*;
use gputopo_api::GpuVendor;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A recorded AMD machine: its `rocm-smi --showtopo`, GPUs, largest XGMI hive.
struct Machine {
    fixture: &'static str,
    gpus: u32,
    largest_hive: &'static str,
}

const MACHINES: [Machine; 2] = [
    Machine {
        fixture: "fixtures/amd/amd-mi308x-8gpu-0x74a2-rocm72-rocm-smi-showtopo-lowpower-warning.txt",
        gpus: 8,
        largest_hive: "8",
    },
    Machine {
        fixture: "fixtures/amd/amd-8gpu-two-xgmi-hives-of-4-pcie-between-64gb-likely-mi210-rocm-smi-showtopo.txt",
        gpus: 8,
        largest_hive: "4",
    },
];

/// A kwok node as the AMD GPU Operator's NFD rule labels it, with AMD's resource.
fn amd_node(name: &str, gpus: u32) -> Node {
    let labels = BTreeMap::from([(
        "feature.node.kubernetes.io/amd-gpu".to_owned(),
        "true".to_owned(),
    )]);
    let mut node = fake_gpu_node(name, 0, &labels);
    let status = node.status.as_mut().expect("status");
    for list in [&mut status.capacity, &mut status.allocatable] {
        let list = list.as_mut().expect("resources");
        list.remove(gputopo_api::keys::RESOURCE_GPU);
        list.insert("amd.com/gpu".to_owned(), Quantity(gpus.to_string()));
    }
    node
}

/// The container's args with `--amd-smi` replaced by the recorded output.
fn replayed_args(container: &Value, fixture: &Path) -> Vec<String> {
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    assert_eq!(args, ["run", "--amd-smi"], "the chart's AMD args");
    vec![
        "run".into(),
        "--rocm-smi-topo".into(),
        fixture.display().to_string(),
    ]
}

/// The container's environment: NODE_NAME from the downward API, the
/// listen address moved to a free loopback port.
fn chart_env(container: &Value, node: &str, listen: &str) -> Vec<(String, String)> {
    let vars = container["env"].as_array().expect("env");
    vars.iter()
        .map(|var| {
            let name = var["name"].as_str().expect("a name").to_owned();
            let value = match (name.as_str(), var["value"].as_str()) {
                ("GPUTOPO_LISTEN", _) => listen.to_owned(),
                (_, Some(v)) => v.to_owned(),
                (_, None) => {
                    assert_eq!(var["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");
                    node.to_owned()
                }
            };
            (name, value)
        })
        .collect()
}

async fn wait_ready(process: &mut Process, port: u16, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        process
            .check_running()
            .unwrap_or_else(|e| panic!("the agent died: {e:#}"));
        match http_get(port, "/readyz") {
            Ok((200, _)) => return,
            other => assert!(
                Instant::now() < deadline,
                "agent not ready after 60 s: {other:?}; log:\n{}",
                gputopo_testenv::process::tail(log, 30)
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs the AMD pool's container for `machine` on a new AMD node, with a
/// token bound to the chart's pod there; returns the node's name.
async fn publish_machine(
    env: &TestEnv,
    admin: &kube::Client,
    namespace: &str,
    ds: &Value,
    machine: &Machine,
    dir: &Path,
) -> String {
    let node = env.unique_name("amd-node");
    Api::<Node>::all(admin.clone())
        .create(&PostParams::default(), &amd_node(&node, machine.gpus))
        .await
        .expect("node created");
    let mut spec: PodSpec =
        serde_json::from_value(ds["spec"]["template"]["spec"].clone()).expect("a pod spec");
    spec.node_name = Some(node.clone());
    let account = spec.service_account_name.clone().expect("an account");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("amd-agent-{node}"),
                     "labels": ds["spec"]["template"]["metadata"]["labels"]},
        "spec": spec,
    }))
    .expect("a pod");
    // The API server admits the privileged pod template as the chart renders it.
    let pod = Api::<Pod>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &pod)
        .await
        .expect("the AMD pod template is admitted");
    let kubeconfig = identity::service_account_kubeconfig(
        env,
        admin,
        namespace,
        &account,
        Some(&pod),
        dir,
        &node,
    )
    .await;

    let container = &ds["spec"]["template"]["spec"]["containers"][0];
    let port = free_port();
    let mut vars = chart_env(container, &node, &format!("127.0.0.1:{port}"));
    vars.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    let env_refs: Vec<(&str, &OsStr)> = vars
        .iter()
        .map(|(n, v)| (n.as_str(), OsStr::new(v.as_str())))
        .collect();
    let log = dir.join(format!("{node}.log"));
    let mut process = Process::spawn(
        "gputopo-agent",
        &workspace_binary("gputopo-agent", "gputopo-agent"),
        &replayed_args(container, &root().join(machine.fixture)),
        &env_refs,
        log.clone(),
    )
    .expect("the agent starts");
    wait_ready(&mut process, port, &log).await;
    process.kill();
    node
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_amd_pools_agent_publishes_recorded_amd_machines_with_the_charts_identity() {
    let env = TestEnv::shared().await;
    let admin = env.client().await;
    let namespace = env.create_namespace("gputopo-amd").await;
    let docs = render_ok(
        "amd",
        &namespace,
        Some("agent:\n  amd:\n    enabled: true\n"),
    );
    let identity = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    apply_kinds(&admin, &docs, &identity).await;
    let ds = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet" && d["metadata"]["name"] == "amd-gputopo-agent-amd")
        .expect("the AMD pool's DaemonSet");
    let dir = tempfile::tempdir().expect("temp dir");

    for machine in &MACHINES {
        let node = publish_machine(env, &admin, &namespace, ds, machine, dir.path()).await;
        let topology = Api::<gputopo_api::GpuTopology>::all(admin.clone())
            .get(&node)
            .await
            .expect("its GpuTopology");
        assert_eq!(
            topology.spec.vendor,
            Some(GpuVendor::Amd),
            "{}",
            machine.fixture
        );
        assert_eq!(
            topology.spec.summary.gpu_count, machine.gpus,
            "{}",
            machine.fixture
        );
        let labels = Api::<Node>::all(admin.clone())
            .get(&node)
            .await
            .expect("node")
            .metadata
            .labels
            .unwrap_or_default();
        assert_eq!(labels["gputopo.dev/gpu-vendor"], "amd");
        assert_eq!(labels["gputopo.dev/interconnect"], "xgmi");
        assert_eq!(
            labels["gputopo.dev/xgmi.largest-hive"],
            machine.largest_hive
        );
        // GPUTOPO_GFD_COMPATIBLE_LABELS=true from the chart writes no
        // nvidia.com/ label on an AMD node.
        assert!(
            !labels.keys().any(|k| k.starts_with("nvidia.com/")),
            "{labels:?}"
        );
    }
}
