//! Every metric the chart's PrometheusRule and Grafana dashboard query is
//! one the real daemons export: the scheduler (`run` and `extender`) and the
//! agent run as processes against the test control plane, are made to move
//! every family a query reads (a family without a series is left out of a
//! scrape: a pod bound on a tiered node, one unschedulable, a node
//! reporting other GPUs than chosen, an object gputopo cannot read, a
//! refused bind), and their `/metrics` are scraped. `up` is Prometheus's own
//! (`observability` checks it selects the scheduler's metrics Service).

use super::chart_process::{free_port, http_get};
use super::cluster::create_pair_topology;
use super::helm::render_ok;
use super::observability::{MONITORING, alert_rules, dashboard_exprs, metric_names};
use super::root;
use super::values::{NAMESPACE, RELEASE};
use gputopo_api::{DeviceForm, GpuAllocation, GpuHolder, GpuTopology, PodResourcesReading};
use gputopo_testenv::binaries::workspace_binary;
use gputopo_testenv::{TestEnv, process::Process};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// The node label the scheduler's network tier reads in this test.
const TIER: &str = "e2e.gputopo.dev/leaf";

/// The sample names a scrape can hold: a `# TYPE` line's family with the
/// suffixes OpenMetrics gives its type, and every sample line's name.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(typed) = line.strip_prefix("# TYPE ") {
            let mut words = typed.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total", "_created"],
                "histogram" => &["_bucket", "_sum", "_count", "_created"],
                "info" => &["_info"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            if end > 0 {
                names.insert(line[..end].to_owned());
            }
        }
    }
    names
}

#[test]
fn exported_names_follow_the_openmetrics_types() {
    let text =
        "# TYPE a counter\n# TYPE h histogram\n# TYPE g gauge\ng 1\nx_total{l=\"v\"} 2\n# EOF\n";
    let names = exported_names(text);
    for name in ["a_total", "h_bucket", "h_sum", "h_count", "g", "x_total"] {
        assert!(names.contains(name), "{name}: {names:?}");
    }
    assert!(!names.contains("a") && !names.contains("h"), "{names:?}");
}

/// `POST path` with a JSON `body` on 127.0.0.1:port: the status code.
fn http_post(port: u16, path: &str, body: &str) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0))
}

/// Starts `bin args` with `vars`, and waits for `path` on `port` to answer 200.
async fn start(
    name: &str,
    bin: &Path,
    args: &[&str],
    vars: &[(&str, String)],
    port: u16,
    path: &str,
    dir: &Path,
) -> Process {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let env_refs: Vec<(&str, &OsStr)> = vars.iter().map(|(n, v)| (*n, OsStr::new(v))).collect();
    let log = dir.join(format!("{name}.log"));
    let mut process =
        Process::spawn(name, bin, &args, &env_refs, log.clone()).expect("the daemon starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        process
            .check_running()
            .unwrap_or_else(|e| panic!("{name} died: {e:#}"));
        match http_get(port, path) {
            Ok((200, _)) => return process,
            other => assert!(
                Instant::now() < deadline,
                "{name}: {path} after 60 s: {other:?}; log:\n{}",
                gputopo_testenv::process::tail(&log, 30)
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Scrapes every one of `ports` until together they export every one of
/// `wanted`, or `within` passes: each port's last scrape.
async fn scrape_until(ports: &[u16], wanted: &BTreeSet<String>, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let texts: Vec<String> = ports
            .iter()
            .map(|&port| {
                let (code, text) = http_get(port, "/metrics").expect("/metrics answers");
                assert_eq!(code, 200, "{text}");
                text
            })
            .collect();
        let names: BTreeSet<String> = texts.iter().flat_map(|t| exported_names(t)).collect();
        if wanted.is_subset(&names) || Instant::now() >= deadline {
            return texts;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every metric the rendered rule and dashboard query, `up` aside.
fn queried_metrics() -> BTreeSet<String> {
    let docs = render_ok(RELEASE, NAMESPACE, Some(MONITORING));
    let mut exprs: Vec<String> = alert_rules(&docs)
        .iter()
        .map(|r| r["expr"].as_str().expect("an expr").to_owned())
        .collect();
    exprs.extend(dashboard_exprs(&docs));
    let mut names: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    assert!(names.remove("up"), "no rule reads up: {names:?}");
    names
}

/// A kwok node of four GPUs in two NVLink pairs, in network domain
/// `leaf-1` of [`TIER`], with its GpuTopology; then a 2-GPU pod bound there
/// by `scheduler` and an 8-GPU pod that fits nowhere. The node's name and
/// the bound pod's `namespace/name` and chosen GPUs.
async fn bind_one_and_refuse_one(
    env: &TestEnv,
    admin: &kube::Client,
    scheduler: &str,
) -> (String, String, Vec<u32>) {
    let node = env.unique_name("obs-node");
    let group = env.unique_name("obs-group");
    let labels = BTreeMap::from([
        ("e2e-group".to_owned(), group.clone()),
        (TIER.to_owned(), "leaf-1".to_owned()),
    ]);
    env.create_fake_gpu_node(&node, 4, &labels).await;
    create_pair_topology(admin, &node).await;
    let namespace = env.create_namespace("obs").await;
    let pods = Api::<Pod>::namespaced(admin.clone(), &namespace);
    for (name, gpus) in [("train", 2), ("too-big", 8)] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "schedulerName": scheduler,
                "nodeSelector": {"e2e-group": group},
                "tolerations": [{"operator": "Exists"}],
                "containers": [{
                    "name": "main",
                    "image": "registry.invalid/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}
                }]
            }
        }))
        .expect("a pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("pod created");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let train = pods.get("train").await.expect("pod");
        let assigned = train
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("gputopo.dev/assigned-gpus").cloned());
        if let Some(assigned) = assigned {
            let gpus = assigned
                .split(',')
                .map(|g| g.trim().parse().expect("a GPU index"))
                .collect();
            return (node, format!("{namespace}/train"), gpus);
        }
        assert!(
            Instant::now() < deadline,
            "train not placed after 60 s: {train:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The node's GpuTopology reports, freshly read from the kubelet, `pod` on
/// the two GPUs it was not given: an assignment mismatch.
async fn report_other_gpus(admin: &kube::Client, node: &str, pod: &str, chosen: &[u32]) {
    let allocations: Vec<GpuAllocation> = (0..4)
        .filter(|g| !chosen.contains(g))
        .take(chosen.len())
        .map(|gpu| GpuAllocation {
            gpu,
            pods: vec![pod.to_owned()],
            holders: vec![GpuHolder {
                pod: pod.to_owned(),
                container: "main".into(),
                resource: "nvidia.com/gpu".into(),
                device: format!("GPU-{gpu}"),
                form: DeviceForm::Whole,
            }],
        })
        .collect();
    let reading = PodResourcesReading {
        observed_at: Time(k8s_openapi::jiff::Timestamp::now()),
        last_error: None,
        unknown_devices: vec![],
    };
    let patch = json!({"status": {
        "conditions": [],
        "allocations": allocations,
        "podResources": reading,
    }});
    Api::<GpuTopology>::all(admin.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("GpuTopology status patched");
}

/// A GpuTopology the API server admits and gputopo's type refuses (one
/// number beyond what it holds; which one the API server lets in depends
/// on its release, as in scheduler/tests/hostile_objects.rs).
async fn create_unreadable_topology(env: &TestEnv, admin: &kube::Client, good_node: &str) {
    let resource = ApiResource::erase::<GpuTopology>(&());
    let dynamic: Api<DynamicObject> = Api::all_with(admin.clone(), &resource);
    let good = serde_json::to_value(
        Api::<GpuTopology>::all(admin.clone())
            .get(good_node)
            .await
            .expect("the good node's GpuTopology")
            .spec,
    )
    .expect("a spec serializes");
    let name = env.unique_name("obs-unreadable");
    let corruptions: [fn(&mut Value); 3] = [
        |s| s["gpus"][0]["numaNode"] = 5_000_000_000u64.into(),
        |s| s["gpus"][0]["fabric"] = json!({"cliqueId": 5_000_000_000u64}),
        |s| s["gpus"][0]["memoryMiB"] = (-1i64).into(),
    ];
    let mut refused = Vec::new();
    for corrupt in corruptions {
        let mut spec = good.clone();
        spec["nodeName"] = name.clone().into();
        corrupt(&mut spec);
        let mut bad = DynamicObject::new(&name, &resource);
        bad.data = json!({ "spec": spec });
        match dynamic.create(&PostParams::default(), &bad).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 422 => refused.push(e.message),
            Err(e) => panic!("creating the unreadable object: {e}"),
        }
    }
    panic!("the API server refuses every corruption tried: {refused:#?}");
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn every_metric_the_rule_and_the_dashboard_query_is_exported_by_a_daemon() {
    let env = TestEnv::shared().await;
    env.with_controller_manager().await;
    env.with_kwok().await;
    let admin = env.client().await;
    let wanted = queried_metrics();
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = env.kubeconfig_path().display().to_string();
    let scheduler_bin = workspace_binary("gputopo-scheduler", "gputopo-scheduler");
    let name = env.unique_name("obs-scheduler");
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, format!("networkTiers: {{keys: [{TIER}]}}\n")).expect("config");
    let config = config.display().to_string();

    let run_port = free_port();
    let run_listen = format!("127.0.0.1:{run_port}");
    let vars = [("KUBECONFIG", kubeconfig.clone())];
    let _run = start(
        "obs-scheduler-run",
        &scheduler_bin,
        &[
            "run",
            "--config",
            &config,
            "--scheduler-name",
            &name,
            "--listen",
            &run_listen,
            "--leader-elect=false",
        ],
        &vars,
        run_port,
        "/readyz",
        dir.path(),
    )
    .await;
    let (node, pod, chosen) = bind_one_and_refuse_one(env, &admin, &name).await;
    report_other_gpus(&admin, &node, &pod, &chosen).await;
    create_unreadable_topology(env, &admin, &node).await;

    // The extender, plain HTTP on one port; a bind it cannot read.
    let ext_port = free_port();
    let ext_listen = format!("127.0.0.1:{ext_port}");
    let _extender = start(
        "obs-scheduler-extender",
        &scheduler_bin,
        &[
            "extender",
            "--config",
            &config,
            "--scheduler-name",
            &name,
            "--listen",
            &ext_listen,
            "--extender-listen",
            &ext_listen,
            "--insecure-plain-http",
        ],
        &vars,
        ext_port,
        "/readyz",
        dir.path(),
    )
    .await;
    assert_eq!(http_post(ext_port, "/bind", "{").expect("POST /bind"), 400);

    // The agent, a DGX A100's recorded `nvidia-smi topo -m` in place of NVML.
    let agent_bin = workspace_binary("gputopo-agent", "gputopo-agent");
    let agent_node = env.unique_name("obs-agent-node");
    env.create_fake_gpu_node(&agent_node, 8, &BTreeMap::new())
        .await;
    let agent_port = free_port();
    let fixture = root().join("fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt");
    let agent_vars = [
        ("KUBECONFIG", kubeconfig),
        ("NODE_NAME", agent_node),
        ("GPUTOPO_LISTEN", format!("127.0.0.1:{agent_port}")),
        ("GPUTOPO_POD_RESOURCES", "false".to_owned()),
    ];
    let _agent = start(
        "obs-agent",
        &agent_bin,
        &["run", "--nvidia-smi-topo", &fixture.display().to_string()],
        &agent_vars,
        agent_port,
        "/readyz",
        dir.path(),
    )
    .await;

    // The scheduler checks reported GPUs every 10 s; give it a few rounds.
    let texts = scrape_until(
        &[run_port, ext_port, agent_port],
        &wanted,
        Duration::from_secs(90),
    )
    .await;
    let exported: BTreeSet<String> = texts.iter().flat_map(|t| exported_names(t)).collect();
    let missing: Vec<&String> = wanted.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the rule or the dashboard queries metrics no daemon exports: {missing:?}\n\
         exported: {exported:?}"
    );
    for (component, text) in ["scheduler", "extender", "agent"].iter().zip(&texts) {
        let info = format!("gputopo_build_info{{component=\"{component}\",version=\"");
        assert!(text.contains(&info), "{component}: no {info}\n{text}");
    }
}
