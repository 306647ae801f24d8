//! The main job (README "Quick start"): a real local control plane (etcd,
//! kube-apiserver, kube-controller-manager, kwok), GPU nodes simulated by kwok
//! from recorded real machines on two leaves of one spine, one
//! `gputopo-agent` per node publishing from its machine's fixture, and the
//! topologies they published. The cluster stays up until Ctrl-C.
//!
//!   gputopo-demo --agent target/release/gputopo-agent [--fixtures fixtures] [--once]

use anyhow::{Context, Result, bail};
use gputopo_api::GpuTopology;
use gputopo_testenv::TestEnv;
use kube::api::{Api, ListParams};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
];

struct Args {
    agent: PathBuf,
    fixtures: PathBuf,
    once: bool,
}

fn args() -> Result<Args> {
    let mut agent = None;
    let mut fixtures = PathBuf::from("fixtures");
    let mut once = false;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--agent" => agent = it.next().map(PathBuf::from),
            "--fixtures" => {
                fixtures = it
                    .next()
                    .map(PathBuf::from)
                    .context("--fixtures needs a directory")?
            }
            "--once" => once = true,
            other => {
                bail!("unknown argument {other:?}; accepted: --agent PATH, --fixtures DIR, --once")
            }
        }
    }
    let agent = agent.context("--agent PATH (the gputopo-agent binary) is required")?;
    Ok(Args {
        agent,
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

    let mut agents = Agents(Vec::new());
    for (name, leaf, fixture) in NODES {
        let source = args.fixtures.join(fixture);
        let labels = BTreeMap::from([
            ("gputopo.dev/spine".to_string(), "spine-1".to_string()),
            ("gputopo.dev/leaf".to_string(), leaf.to_string()),
        ]);
        env.create_fake_gpu_node(name, gpu_count(&source)?, &labels)
            .await;
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

    let topologies: Api<GpuTopology> = Api::all(env.client().await);
    let deadline = Instant::now() + Duration::from_secs(60);
    let list = loop {
        let list = topologies.list(&ListParams::default()).await?;
        if list.items.len() == NODES.len() {
            break list;
        }
        if Instant::now() > deadline {
            bail!(
                "only {} of {} nodes published a GpuTopology within 60 s",
                list.items.len(),
                NODES.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let leaf_of: BTreeMap<&str, &str> = NODES.iter().map(|(n, l, _)| (*n, *l)).collect();
    println!(
        "{:<16} {:>4}  {:<28} {:<6} {:>6}  {:<13} LEAF",
        "NAME", "GPUS", "PRODUCT", "P2P", "ISLAND", "INTERCONNECT"
    );
    for t in &list.items {
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
    println!();
    println!("The cluster is up (API server {}).", env.apiserver_url());
    println!("  export KUBECONFIG={}", env.kubeconfig_path().display());
    println!(
        "  kubectl get gputopologies   # or: kubectl get nodes -L nvidia.com/nvlink.p2p.level,gputopo.dev/interconnect"
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
