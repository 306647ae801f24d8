//! The main job (README "Quick start"): a real local control plane (etcd,
//! kube-apiserver, kube-controller-manager, kwok), GPU nodes simulated by kwok
//! from recorded real machines on two leaves of one spine, one
//! `gputopo-agent` per node publishing from its machine's fixture, and the
//! topologies they published; then `gputopo-scheduler` places a mixed
//! workload (a 4-GPU DDP pod, a 2-pod gang of 8-GPU pods, three inference
//! pods sharing GPUs, one impossible pod, and two pods on a node whose GPUs
//! NVIDIA's DRA driver publishes: one through a ResourceClaim template, one
//! a plain `nvidia.com/gpu` request served through DRA), beside a JobSet of
//! two 4-GPU workers made by the real JobSet controller and an inference
//! Deployment whose two replicas a topology spread constraint keeps on
//! different nodes, and a training pod whose dataset claim's only volume is
//! local to one node; the demo prints
//! where each went and why, and each claim's devices beside the GPU
//! indices. The chart's admission policies are installed as `helm install`
//! installs them. The cluster stays up until Ctrl-C.
//!
//!   gputopo-demo --agent target/release/gputopo-agent --scheduler target/release/gputopo-scheduler [--fixtures fixtures] [--once]

use anyhow::{Context, Result, bail};
use gputopo_api::GpuTopology;
use gputopo_testenv::TestEnv;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "demo/deployment.rs"]
mod deployment;
#[path = "demo/dra.rs"]
mod dra;
#[path = "demo/jobset.rs"]
mod jobset;
#[path = "demo/volume.rs"]
mod volume;

/// The simulated nodes: name, leaf, and what the agent reads: a real
/// machine's `nvidia-smi topo -m` (`.txt`) or an NVML recording (`.yaml`).
const NODES: &[(&str, &str, &str)] = &[
    ("dgx1-v100-1", "leaf-1", "recorded/dgx1-v100-nvml.yaml"),
    (
        "dgx-a100-1",
        "leaf-1",
        "nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt",
    ),
    (
        "hgx-h100-1",
        "leaf-1",
        "recorded/hgx-h100-8gpu-nvswitch-nvml.yaml",
    ),
    (
        "dgx-a100-2",
        "leaf-2",
        "nvidia/hgx-a100-sxm-40gb-epyc7742-10nic-driver525-topo-m.txt",
    ),
    (
        "rtx4090-pcie-1",
        "leaf-2",
        "nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt",
    ),
    (
        "a100-bridged-1",
        "leaf-2",
        "nvidia/a100-80gb-pcie-4gpu-nvlink-bridge-nv12-pairs-xeon8470-driver610-NO-LEGEND-topo-m.txt",
    ),
    (DRA_NODE, "leaf-2", "recorded/dgx1-v100-nvml.yaml"),
];

/// The node whose GPUs NVIDIA's DRA driver publishes (a ResourceSlice, no
/// device plugin's `nvidia.com/gpu`).
const DRA_NODE: &str = "dgx1-v100-dra";

struct Args {
    agent: PathBuf,
    scheduler: PathBuf,
    fixtures: PathBuf,
    once: bool,
}

fn args() -> Result<Args> {
    let mut agent = None;
    let mut scheduler = None;
    let mut fixtures = PathBuf::from("fixtures");
    let mut once = false;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--agent" => agent = it.next().map(PathBuf::from),
            "--scheduler" => scheduler = it.next().map(PathBuf::from),
            "--fixtures" => {
                fixtures = it
                    .next()
                    .map(PathBuf::from)
                    .context("--fixtures needs a directory")?
            }
            "--once" => once = true,
            other => {
                bail!(
                    "unknown argument {other:?}; accepted: --agent PATH, --scheduler PATH, --fixtures DIR, --once"
                )
            }
        }
    }
    let agent = agent.context("--agent PATH (the gputopo-agent binary) is required")?;
    let scheduler =
        scheduler.context("--scheduler PATH (the gputopo-scheduler binary) is required")?;
    Ok(Args {
        agent,
        scheduler,
        fixtures,
        once,
    })
}

/// Agents run until the demo ends; they die with it (killed on drop).
struct Agents(Vec<Child>);

impl Drop for Agents {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn is_recording(source: &Path) -> bool {
    source.extension().is_some_and(|e| e == "yaml")
}

/// GPUs the node advertises as `nvidia.com/gpu`, as its device plugin would.
fn gpu_count(source: &Path) -> Result<u32> {
    let text =
        std::fs::read_to_string(source).with_context(|| format!("reading {}", source.display()))?;
    if is_recording(source) {
        let doc: serde_yaml::Value = serde_yaml::from_str(&text)?;
        return Ok(doc["nvml"]["devices"]
            .as_sequence()
            .map_or(0, |d| d.len() as u32));
    }
    // The header names one column per GPU.
    let header = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    Ok(header
        .split_whitespace()
        .filter(|w| w.starts_with("GPU") && w[3..].parse::<u32>().is_ok())
        .count() as u32)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = args()?;
    let t0 = Instant::now();
    eprintln!("starting etcd, kube-apiserver, kube-controller-manager and kwok ...");
    let env = TestEnv::start().await?;
    env.with_controller_manager().await;
    env.with_kwok().await;
    eprintln!("control plane up in {:.1} s", t0.elapsed().as_secs_f64());

    // What the chart installs beside the daemons: its admission policies.
    let client = env.client().await;
    for file in gputopo_testenv::ADMISSION_POLICY_FILES {
        gputopo_testenv::install_admission_policies(&client, file).await?;
    }
    let mut agents = start_agents(&env, &args).await?;
    let topologies = wait_topologies(&env).await?;
    print_topologies(&topologies);
    println!();

    wait_untainted(&env).await?;
    dra::publish(&env, &topologies, DRA_NODE).await?;
    eprintln!("starting the JobSet controller ...");
    let _jobset_controller = jobset::start(&env).await?;
    let scheduler = start_scheduler(&env, &args.scheduler).await?;
    agents.0.push(scheduler);
    let placed = run_workload(&env).await?;
    print_placements(&placed);
    dra::print_claims(&env, DEMO_NAMESPACE).await?;
    println!();
    println!("The cluster is up (API server {}).", env.apiserver_url());
    println!("  export KUBECONFIG={}", env.kubeconfig_path().display());
    println!(
        "  kubectl get gputopologies   # or: kubectl get nodes -L nvidia.com/nvlink.p2p.level,gputopo.dev/interconnect"
    );
    println!(
        "  kubectl -n {DEMO_NAMESPACE} get pods -o wide; kubectl -n {DEMO_NAMESPACE} get events"
    );
    if args.once {
        return Ok(());
    }
    println!("Press Ctrl-C to stop it.");
    tokio::signal::ctrl_c().await?;
    eprintln!("stopping");
    drop(agents);
    Ok(())
}

/// Per node of [`NODES`]: a fake kwok node and a gputopo agent publishing
/// its topology from the node's fixture.
async fn start_agents(env: &TestEnv, args: &Args) -> Result<Agents> {
    let mut agents = Agents(Vec::new());
    for (name, leaf, fixture) in NODES {
        let source = args.fixtures.join(fixture);
        let labels = BTreeMap::from([
            ("gputopo.dev/spine".to_string(), "spine-1".to_string()),
            ("gputopo.dev/leaf".to_string(), leaf.to_string()),
        ]);
        let plugin_gpus = if *name == DRA_NODE {
            0
        } else {
            gpu_count(&source)?
        };
        env.create_fake_gpu_node(name, plugin_gpus, &labels).await;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(&args.agent)
            .args(["run", "--node", name])
            .arg(if is_recording(&source) {
                "--fixture"
            } else {
                "--nvidia-smi-topo"
            })
            .arg(&source)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("KUBECONFIG", env.kubeconfig_path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", args.agent.display()))?;
        agents.0.push(child);
    }
    Ok(agents)
}

/// Every node's GpuTopology, once all agents have published one (60 s at most).
async fn wait_topologies(env: &TestEnv) -> Result<Vec<GpuTopology>> {
    let topologies: Api<GpuTopology> = Api::all(env.client().await);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = topologies.list(&ListParams::default()).await?;
        if list.items.len() == NODES.len() {
            return Ok(list.items);
        }
        if Instant::now() > deadline {
            bail!(
                "only {} of {} nodes published a GpuTopology within 60 s",
                list.items.len(),
                NODES.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A table of the published topologies, one node a row.
fn print_topologies(topologies: &[GpuTopology]) {
    let leaf_of: BTreeMap<&str, &str> = NODES.iter().map(|(n, l, _)| (*n, *l)).collect();
    println!(
        "{:<16} {:>4}  {:<28} {:<6} {:>6}  {:<13} LEAF",
        "NAME", "GPUS", "PRODUCT", "P2P", "ISLAND", "INTERCONNECT"
    );
    for t in topologies {
        let s = &t.spec.summary;
        println!(
            "{:<16} {:>4}  {:<28} {:<6} {:>6}  {:<13} {}",
            t.spec.node_name,
            s.gpu_count,
            s.product.as_deref().unwrap_or("<unknown>"),
            s.p2p_level.as_deref().unwrap_or("<none>"),
            s.largest_island,
            s.interconnect.as_str(),
            leaf_of.get(t.spec.node_name.as_str()).unwrap_or(&"?"),
        );
    }
}

/// A table of where each pod of the workload landed and why.
fn print_placements(placed: &[Placed]) {
    let width = placed
        .iter()
        .map(|r| r.pod.len())
        .max()
        .unwrap_or(0)
        .max(14);
    println!(
        "{:<width$} {:<16} {:<16} {:<10} REASON",
        "POD", "NODE", "GPUS", "BOTTLENECK"
    );
    for row in placed {
        println!(
            "{:<width$} {:<16} {:<16} {:<10} {}",
            row.pod, row.node, row.gpus, row.bottleneck, row.reason
        );
    }
    println!();
}

/// The namespace the demo's workload runs in.
const DEMO_NAMESPACE: &str = "demo";

/// The `schedulerName` of the demo's pods.
const SCHEDULER_NAME: &str = "gputopo-scheduler";

/// Starts `gputopo-scheduler run` against the cluster and waits for `/readyz`.
async fn start_scheduler(env: &TestEnv, bin: &Path) -> Result<Child> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let log = env.dir().join("gputopo-scheduler.log");
    let out = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut child = Command::new(bin)
        .args(["run", "--listen", &format!("127.0.0.1:{port}")])
        // One replica, but leader election as deployed: its Lease in `default`.
        .args(["--leader-elect-namespace", "default"])
        .env("KUBECONFIG", env.kubeconfig_path())
        .stdout(Stdio::null())
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("gputopo-scheduler exited ({status}); see {}", log.display());
        }
        let ready = tokio::task::spawn_blocking(move || http_status(port, "/readyz"))
            .await
            .ok()
            .flatten();
        if ready == Some(200) {
            return Ok(child);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!(
                "gputopo-scheduler not ready within 60 s; see {}",
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The HTTP status of `GET path` on 127.0.0.1:port, if it answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// A workload pod for gputopo-scheduler: `gpus` whole GPUs (none when 0),
/// with `annotations`.
fn demo_pod(name: &str, gpus: u32, annotations: &[(&str, &str)]) -> Result<Pod> {
    let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    let limits = if gpus > 0 {
        serde_json::json!({"nvidia.com/gpu": gpus.to_string()})
    } else {
        serde_json::json!({})
    };
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "containers": [{"name": "main", "image": "registry.invalid/demo:1",
                            "resources": {"limits": limits}}]
        }
    }))?)
}

/// The demo's workload, in submission order.
fn workload() -> Result<Vec<Pod>> {
    let gang = [
        ("gputopo.dev/gang", "allreduce"),
        ("gputopo.dev/gang-size", "2"),
        ("gputopo.dev/workload", "training"),
    ];
    let inference = |share: &'static str| {
        [
            ("gputopo.dev/workload", "inference"),
            ("gputopo.dev/gpu-share", share),
        ]
    };
    Ok(vec![
        demo_pod("ddp-4gpu", 4, &[("gputopo.dev/workload", "training")])?,
        demo_pod("gang-0", 8, &gang)?,
        demo_pod("gang-1", 8, &gang)?,
        demo_pod("infer-1", 0, &inference("20Gi"))?,
        demo_pod("infer-2", 0, &inference("0.25"))?,
        demo_pod("infer-3", 0, &inference("20Gi"))?,
        demo_pod("too-big", 16, &[])?,
        dra::claim_pod("dra-claim", "four-gpus")?,
        dra::plain_pod(demo_pod("dra-plain", 2, &[])?, DRA_NODE),
        volume::with_dataset(demo_pod(
            volume::POD,
            2,
            &[("gputopo.dev/workload", "training")],
        )?)?,
    ])
}

/// One row of the placement table.
struct Placed {
    pod: String,
    node: String,
    gpus: String,
    bottleneck: String,
    reason: String,
}

/// Submits the workload and waits (60 s at most) until every pod is bound
/// or has a `FailedScheduling` event.
async fn run_workload(env: &TestEnv) -> Result<Vec<Placed>> {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::events::v1::Event;
    use kube::api::PostParams;
    let client = env.client().await;
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": DEMO_NAMESPACE}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .context("creating the demo namespace")?;
    dra::create_template(env, DEMO_NAMESPACE).await?;
    volume::create_storage(env, DEMO_NAMESPACE).await?;
    let pods = Api::<Pod>::namespaced(client.clone(), DEMO_NAMESPACE);
    let events = Api::<Event>::namespaced(client, DEMO_NAMESPACE);
    let submitted = workload()?;
    let mut names: Vec<String> = submitted
        .iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    // The ServiceAccount admission plugin needs the namespace's default
    // ServiceAccount, which the controller manager creates in a moment.
    let deadline = Instant::now() + Duration::from_secs(60);
    for pod in &submitted {
        loop {
            match pods.create(&PostParams::default(), pod).await {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline && e.to_string().contains("serviceaccount") => {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("creating pod {:?}", pod.metadata.name.as_deref())
                    });
                }
            }
        }
    }
    jobset::create(env, DEMO_NAMESPACE, SCHEDULER_NAME).await?;
    deployment::create(env, DEMO_NAMESPACE, SCHEDULER_NAME, DRA_NODE).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // The JobSet's pods, once its controller and the Job controller made them.
        let jobset_pods = jobset::pod_names(&pods).await?;
        let replicas = deployment::pod_names(&pods).await?;
        names.truncate(submitted.len());
        names.extend(jobset_pods.iter().cloned());
        names.extend(replicas.iter().cloned());
        let listed = events.list(&ListParams::default()).await?.items;
        let note = |pod: &str| {
            listed
                .iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
                .filter(|e| matches!(e.reason.as_deref(), Some("Scheduled" | "FailedScheduling")))
                .max_by_key(|e| e.event_time.as_ref().map(|t| t.0))
                .and_then(|e| e.note.clone())
        };
        let mut rows = Vec::new();
        for name in &names {
            let name = name.clone();
            let now = pods.get(&name).await?;
            let node = now.spec.as_ref().and_then(|s| s.node_name.clone());
            let annotation = |k: &str| {
                now.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(k).cloned())
            };
            let Some(reason) = note(&name) else { break };
            // Bound but the event not yet seen, a gang member waiting for
            // the rest of its gang, or a pod waiting for the resourceclaim
            // controller to create its claim: not final yet.
            if node.is_some() != reason.starts_with("Successfully")
                || reason.contains("waiting for the rest")
                || reason.contains("waiting for its ResourceClaim")
            {
                break;
            }
            rows.push(Placed {
                node: node.unwrap_or_else(|| "<pending>".into()),
                gpus: annotation("gputopo.dev/assigned-gpus").unwrap_or_else(|| "-".into()),
                bottleneck: annotation("scheduler.gputopo.dev/bottleneck")
                    .unwrap_or_else(|| "-".into()),
                reason,
                pod: name,
            });
        }
        if jobset_pods.len() == jobset::PODS
            && replicas.len() == deployment::PODS
            && rows.len() == names.len()
        {
            return Ok(rows);
        }
        if Instant::now() > deadline {
            bail!(
                "after 60 s, only {} of {} pods were placed or refused; see {}",
                rows.len(),
                submitted.len() + jobset::PODS + deployment::PODS,
                env.dir().join("gputopo-scheduler.log").display()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits (60 s at most) until the node lifecycle controller has lifted the
/// `node.kubernetes.io/not-ready` taint every new node starts with, so the
/// workload meets the nodes as a running cluster has them.
async fn wait_untainted(env: &TestEnv) -> Result<()> {
    use k8s_openapi::api::core::v1::Node;
    let nodes = Api::<Node>::all(env.client().await);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let tainted: Vec<String> = nodes
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready"))
            })
            .filter_map(|n| n.metadata.name)
            .collect();
        if tainted.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "nodes still tainted not-ready after 60 s: {}",
                tainted.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
