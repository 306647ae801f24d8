//! `kubectl-gputopo` against a real API server beside a running
//! `gputopo-scheduler`: three kwok DGX A100 nodes with their
//! `GpuTopology`, a pod the scheduler bound (with its GPU record), a gang
//! of two it placed, a gang missing members and a pod that fits nowhere.
//! The plugin's binary runs as a user would run it (KUBECONFIG, -o json),
//! and what it says is compared with what the scheduler wrote: its
//! `FailedScheduling` notes word for word, its bindings and GPU records.
//!
//! The scheduler binary is the workspace's (`cargo build -p
//! gputopo-scheduler` first; `cargo test --workspace` builds it).

use gputopo_api::{GpuTopology, GpuTopologySpec};
use gputopo_testenv::TestEnv;
use gputopo_testenv::process::{Process, tail};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::normalize::normalize;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

const DGX_A100: &str = "nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt";
const CONFIG: &str = "backoff: {initial: 200ms, max: 2s, unschedulableTimeout: 10s}\n";

/// What the tests share: built once, read by each.
struct Scenario {
    env: &'static TestEnv,
    ns: String,
    scheduler_name: String,
    config_file: PathBuf,
    /// The ConfigMap (in `ns`) holding the same configuration.
    config_map: String,
    /// Node name → its leaf.
    leaves: BTreeMap<String, String>,
    scheduler: Process,
}

static SCENARIO: OnceCell<Scenario> = OnceCell::const_new();

async fn scenario() -> &'static Scenario {
    SCENARIO.get_or_init(build).await
}

async fn build() -> Scenario {
    let env = TestEnv::shared().await;
    env.with_controller_manager().await;
    env.with_kwok().await;
    let client = env.client().await;
    let ns = env.create_namespace("kgt").await;
    let group = env.unique_name("kgt-group");
    let mut leaves = BTreeMap::new();
    for (slot, leaf) in [("a", "leaf-1"), ("b", "leaf-1"), ("c", "leaf-2")] {
        let name = env.unique_name(&format!("kgt-{slot}"));
        gpu_node(
            env,
            &name,
            &[
                ("e2e-group", &group),
                ("gputopo.dev/spine", "spine-1"),
                ("gputopo.dev/leaf", leaf),
            ],
        )
        .await;
        leaves.insert(name, leaf.to_string());
    }
    let scheduler_name = env.unique_name("kgt-scheduler");
    let dir = env.dir().join(&scheduler_name);
    std::fs::create_dir_all(&dir).expect("a folder");
    let config_file = dir.join("config.yaml");
    std::fs::write(&config_file, CONFIG).expect("writing the config");
    let config_map = "kgt-scheduler-config".to_string();
    let map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": config_map},
        "data": {"config.yaml": CONFIG}
    }))
    .expect("a ConfigMap");
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &map)
        .await
        .expect("creating the ConfigMap");
    let scheduler = start_scheduler(env, &scheduler_name, &config_file).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let log = || tail(&scheduler.log, 60);
    create(&pods, gpu_pod("solo", &scheduler_name, &group, 2, &[])).await;
    bound(&pods, "solo", &log).await;
    for member in ["pair-0", "pair-1"] {
        let gang = [("gputopo.dev/gang", "pair"), ("gputopo.dev/gang-size", "2")];
        create(&pods, gpu_pod(member, &scheduler_name, &group, 8, &gang)).await;
    }
    bound(&pods, "pair-0", &log).await;
    bound(&pods, "pair-1", &log).await;
    let trio = [("gputopo.dev/gang", "trio"), ("gputopo.dev/gang-size", "3")];
    create(&pods, gpu_pod("trio-0", &scheduler_name, &group, 1, &trio)).await;
    create(&pods, gpu_pod("huge", &scheduler_name, &group, 16, &[])).await;
    for pod in ["trio-0", "huge"] {
        failed_scheduling(&client, &ns, pod, &log).await;
    }
    Scenario {
        env,
        ns,
        scheduler_name,
        config_file,
        config_map,
        leaves,
        scheduler,
    }
}

/// A kwok node built from the recorded DGX A100, with the `GpuTopology`
/// the agent would publish (owned by the node), once Ready and untainted.
async fn gpu_node(env: &TestEnv, name: &str, labels: &[(&str, &str)]) {
    let path = format!("{}/../fixtures/{DGX_A100}", env!("CARGO_MANIFEST_DIR"));
    let facts = facts_from_topo(&std::fs::read_to_string(path).expect("the fixture"))
        .expect("the fixture parses");
    let spec: GpuTopologySpec = normalize(name, &facts).expect("it normalizes");
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let node = env
        .create_fake_gpu_node(name, spec.gpus.len() as u32, &labels)
        .await;
    let mut topology = GpuTopology::new(name, spec);
    topology.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: name.into(),
        uid: node.metadata.uid.clone().expect("a uid"),
        ..OwnerReference::default()
    }]);
    let client = env.client().await;
    Api::<GpuTopology>::all(client.clone())
        .create(&PostParams::default(), &topology)
        .await
        .expect("creating the GpuTopology");
    // The not-ready taint stays until the node lifecycle controller sees it Ready.
    let nodes = Api::<Node>::all(client);
    wait_for(&format!("node {name} untainted"), String::new, || async {
        let n = nodes.get(name).await.ok()?;
        let tainted = n
            .spec
            .and_then(|s| s.taints)
            .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready"));
        (!tainted).then_some(())
    })
    .await;
}

async fn start_scheduler(env: &TestEnv, name: &str, config: &std::path::Path) -> Process {
    let bin = gputopo_testenv::binaries::workspace_binary("gputopo-scheduler", "gputopo-scheduler");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let args: Vec<String> = [
        "run",
        "--scheduler-name",
        name,
        "--config",
        &config.display().to_string(),
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--leader-elect=false",
    ]
    .map(String::from)
    .to_vec();
    let log = config.with_file_name("scheduler.log");
    let mut process = Process::spawn(
        name,
        &bin,
        &args,
        &[("KUBECONFIG", env.kubeconfig_path().as_os_str())],
        log.clone(),
    )
    .expect("starting gputopo-scheduler");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        process.check_running().expect("gputopo-scheduler runs");
        if let Some((200, _)) = gputopo_testenv::loopback::get(port, "/readyz").await {
            return process;
        }
        assert!(Instant::now() < deadline, "not ready:\n{}", tail(&log, 40));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn gpu_pod(
    name: &str,
    scheduler: &str,
    group: &str,
    gpus: u32,
    annotations: &[(&str, &str)],
) -> Pod {
    let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {"e2e-group": group},
            "containers": [{"name": "main", "image": "registry.invalid/train:1",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]
        }
    }))
    .expect("a pod")
}

async fn create(pods: &Api<Pod>, pod: Pod) {
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("creating {:?}: {e}", pod.metadata.name));
}

async fn wait_for<T, F, Fut>(what: &str, log: impl Fn() -> String, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within 90 s\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn bound(pods: &Api<Pod>, name: &str, log: &impl Fn() -> String) -> Pod {
    wait_for(&format!("{name} bound"), log, || async {
        let p = pods.get(name).await.ok()?;
        p.spec.as_ref()?.node_name.as_ref()?;
        Some(p)
    })
    .await
}

/// The pod's `FailedScheduling` events, newest last.
async fn failed_events(client: &kube::Client, ns: &str, pod: &str) -> Vec<Event> {
    let mut events: Vec<Event> = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
        .await
        .expect("listing events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .collect();
    events.sort_by_key(|e| {
        e.series
            .as_ref()
            .and_then(|s| s.last_observed_time.clone())
            .map(|t| t.0)
            .or(e.event_time.as_ref().map(|t| t.0))
    });
    events
}

async fn failed_scheduling(client: &kube::Client, ns: &str, pod: &str, log: &impl Fn() -> String) {
    wait_for(
        &format!("a FailedScheduling event for {pod}"),
        log,
        || async { failed_events(client, ns, pod).await.pop().map(|_| ()) },
    )
    .await;
}

/// The newest `FailedScheduling` note the scheduler wrote on `pod`.
async fn scheduler_note(s: &Scenario, pod: &str) -> String {
    let events = failed_events(&s.env.client().await, &s.ns, pod).await;
    let last = events
        .last()
        .unwrap_or_else(|| panic!("no FailedScheduling event for {pod}"));
    last.message.clone().unwrap_or_default()
}

/// Runs the plugin's binary with `args` (as the scenario's user, with its
/// configuration and names); its stdout.
fn plugin(s: &Scenario, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-gputopo"))
        .args(args)
        .args(["--scheduler-name", &s.scheduler_name])
        .env("KUBECONFIG", s.env.kubeconfig_path())
        .output()
        .expect("kubectl-gputopo runs");
    assert!(
        out.status.success(),
        "kubectl-gputopo {args:?}: {}\nscheduler log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        tail(&s.scheduler.log, 30)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn config_file(s: &Scenario) -> String {
    s.config_file.display().to_string()
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn why_pending_says_what_the_scheduler_said() {
    let s = scenario().await;
    // The configuration from its ConfigMap, as a cluster's user reads it.
    let out = plugin(
        s,
        &[
            "why-pending",
            "-n",
            &s.ns,
            "-o",
            "json",
            "--scheduler-namespace",
            &s.ns,
            "--config-map",
            &s.config_map,
        ],
    );
    let report = json_of(&out);
    let line = |pod: &str| -> (String, String) {
        let key = format!("{}/{pod}", s.ns);
        report["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .find_map(|g| {
                let p = g["pods"]
                    .as_array()?
                    .iter()
                    .find(|p| p["pod"] == key.as_str())?;
                Some((
                    g["result"].as_str()?.to_string(),
                    p["message"].as_str()?.to_string(),
                ))
            })
            .unwrap_or_else(|| panic!("{key} not listed: {out}"))
    };
    let (result, message) = line("huge");
    assert_eq!(result, "unschedulable");
    assert_eq!(message, scheduler_note(s, "huge").await);
    assert!(message.starts_with("0/3 nodes are available"), "{message}");
    let (result, message) = line("trio-0");
    assert_eq!(result, "waiting");
    assert_eq!(message, scheduler_note(s, "trio-0").await);
    let listed = out.matches(&format!("\"{}/", s.ns)).count();
    assert_eq!(listed, 2, "only huge and trio-0 are pending: {out}");
    let text = plugin(
        s,
        &["why-pending", "-n", &s.ns, "--config", &config_file(s)],
    );
    assert!(
        text.contains("UNSCHEDULABLE") && text.contains(&format!("{}/huge", s.ns)),
        "{text}"
    );
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn nodes_show_the_bound_pod_holding_its_gpus() {
    let s = scenario().await;
    let pods = Api::<Pod>::namespaced(s.env.client().await, &s.ns);
    let solo = pods.get("solo").await.expect("solo");
    let node = solo
        .spec
        .as_ref()
        .and_then(|p| p.node_name.clone())
        .expect("bound");
    let record = solo
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("gputopo.dev/assigned-gpus").cloned())
        .expect("the scheduler's GPU record");
    let recorded: Vec<u64> = record
        .split(',')
        .map(|g| g.parse().expect("an index"))
        .collect();
    assert_eq!(recorded.len(), 2);
    let report = json_of(&plugin(
        s,
        &["nodes", &node, "-o", "json", "--config", &config_file(s)],
    ));
    let nodes = report["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 1, "{report}");
    let view = &nodes[0];
    assert_eq!(view["interconnect"], "nvswitch");
    let key = format!("{}/solo", s.ns);
    let holding: Vec<u64> = view["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .filter(|g| {
            g["heldBy"]
                .as_array()
                .is_some_and(|h| h.iter().any(|p| p == key.as_str()))
        })
        .map(|g| g["index"].as_u64().expect("an index"))
        .collect();
    assert_eq!(holding, recorded, "{view}");
    assert_eq!(view["freeGpus"].as_array().map(Vec::len), Some(6), "{view}");
    let all = json_of(&plugin(
        s,
        &["nodes", "-o", "json", "--config", &config_file(s)],
    ));
    for name in s.leaves.keys() {
        assert!(
            all["nodes"]
                .as_array()
                .expect("nodes")
                .iter()
                .any(|n| n["name"] == name.as_str()),
            "{name}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn gangs_list_members_domains_and_state() {
    let s = scenario().await;
    let report = json_of(&plugin(
        s,
        &[
            "gangs",
            "-n",
            &s.ns,
            "-o",
            "json",
            "--config",
            &config_file(s),
        ],
    ));
    let gang = |name: &str| {
        report["gangs"]
            .as_array()
            .expect("gangs")
            .iter()
            .find(|g| g["gang"] == format!("gang {}/{name}", s.ns).as_str())
            .unwrap_or_else(|| panic!("no gang {name}: {report}"))
            .clone()
    };
    let pair = gang("pair");
    assert_eq!(pair["state"], "placed", "{pair}");
    assert_eq!(
        (pair["size"].as_u64(), pair["bound"].as_u64()),
        (Some(2), Some(2))
    );
    let pods = Api::<Pod>::namespaced(s.env.client().await, &s.ns);
    let mut nodes = Vec::new();
    for member in ["pair-0", "pair-1"] {
        let p = pods.get(member).await.expect("a member");
        nodes.push(p.spec.and_then(|s| s.node_name).expect("bound"));
    }
    nodes.sort();
    assert_eq!(pair["nodes"], json!(nodes));
    let mut leaves: Vec<&str> = nodes.iter().map(|n| s.leaves[n].as_str()).collect();
    leaves.sort();
    leaves.dedup();
    let domains: Vec<&str> = pair["domains"]
        .as_array()
        .expect("domains")
        .iter()
        .filter(|d| d["tier"] == "gputopo.dev/leaf")
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert_eq!(domains, leaves, "{pair}");
    let trio = gang("trio");
    assert_eq!(trio["state"], "waiting");
    assert_eq!(
        (trio["size"].as_u64(), trio["pending"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(
        trio["verdict"].as_str(),
        Some(scheduler_note(s, "trio-0").await.as_str())
    );
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn explain_names_node_and_gpus_or_the_schedulers_reason() {
    let s = scenario().await;
    let kubeconfig = s.env.kubeconfig_path().display().to_string();
    let solo = json_of(&plugin(
        s,
        &[
            "explain",
            "solo",
            "-n",
            &s.ns,
            "-o",
            "json",
            "--config",
            &config_file(s),
            "--kubeconfig",
            &kubeconfig,
        ],
    ));
    let pods = Api::<Pod>::namespaced(s.env.client().await, &s.ns);
    let pod = pods.get("solo").await.expect("solo");
    let node = pod
        .spec
        .as_ref()
        .and_then(|p| p.node_name.clone())
        .expect("bound");
    let record = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("gputopo.dev/assigned-gpus").cloned());
    assert_eq!(solo["bound"]["node"], node.as_str(), "{solo}");
    let gpus: Vec<String> = solo["bound"]["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .map(|g| g.to_string())
        .collect();
    assert_eq!(Some(gpus.join(",")), record);
    assert_eq!(
        solo["bound"]["record"]["source"],
        "status condition gputopo.dev/gpu-assignment"
    );
    assert!(
        solo["events"]
            .as_array()
            .expect("events")
            .iter()
            .any(|e| e["reason"] == "Scheduled"
                && e["message"].as_str().is_some_and(|m| m.contains(&node))),
        "{solo}"
    );
    let huge = json_of(&plugin(
        s,
        &[
            "explain",
            "huge",
            "-n",
            &s.ns,
            "-o",
            "json",
            "--config",
            &config_file(s),
        ],
    ));
    let note = scheduler_note(s, "huge").await;
    assert_eq!(
        huge["pending"]["decision"]["message"].as_str(),
        Some(note.as_str()),
        "{huge}"
    );
    assert_eq!(huge["pending"]["nodes"].as_array().map(Vec::len), Some(3));
    assert!(
        huge["events"]
            .as_array()
            .expect("events")
            .iter()
            .any(|e| e["message"] == note.as_str()),
        "the recorded event is shown: {huge}"
    );
    let text = plugin(
        s,
        &["explain", "solo", "-n", &s.ns, "--config", &config_file(s)],
    );
    assert!(text.contains(&format!("bound to node {node}")), "{text}");
}
