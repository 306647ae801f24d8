//! The DRA differential test: one seeded stream of claim pods (whole GPUs;
//! GPUs and a NIC on one PCIe root; a GPU with an IMEX channel; eight GPUs
//! or failing that two (`firstAvailable`); MIG partitions), placed one at a
//! time once by kube-scheduler and once by gputopo-scheduler, each on its
//! own identical kwok nodes in the one 1.37 control plane: two DGX A100s
//! publishing GPUs, a ComputeDomain channel and dranet NICs, and one DGX
//! A100 publishing its GPUs with dynamic MIG. Every allocation either
//! scheduler writes is read back and checked against what its claim
//! states (device kinds, one PCIe root under `matchAttribute`, MIG memory
//! slices not overlapping, no exclusive device twice); gputopo must break
//! none and place every pod kube-scheduler places, and the figures (pods
//! each placed) are printed for BENCHMARKS.md.
//!
//! `GPUTOPO_DRA_DIFFERENTIAL_PODS` (default 30) pods per seed,
//! `GPUTOPO_DRA_DIFFERENTIAL_SEEDS` (default 2) seeds.

mod common;

use common::dra::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One pod of the stream: its claim's `spec.devices` and whether it also
/// takes an IMEX channel from the template.
#[derive(Clone, Debug)]
struct ClaimPod {
    devices: Value,
    channel: bool,
}

fn gpus(n: u32) -> Value {
    json!({"name": "gpus", "exactly": {"deviceClassName": CLASS, "count": n}})
}

fn stream(seed: u64, pods: usize) -> Vec<ClaimPod> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut below = |n: u64| rng.next_u64() % n;
    (0..pods)
        .map(|_| match below(6) {
            0 => ClaimPod {
                devices: json!({"requests": [gpus([1, 2, 4, 8][below(4) as usize])]}),
                channel: false,
            },
            1 => ClaimPod {
                devices: json!({
                    "requests": [gpus(1 + below(2) as u32),
                        {"name": "nics", "exactly": {"deviceClassName": NIC_CLASS, "count": 1}}],
                    "constraints": [{"matchAttribute": PCIE_ROOT}],
                }),
                channel: false,
            },
            2 => ClaimPod {
                devices: json!({"requests": [gpus(1)]}),
                channel: true,
            },
            3 => ClaimPod {
                devices: json!({"requests": [{"name": "gpus", "firstAvailable": [
                    {"name": "eight", "deviceClassName": CLASS, "count": 8},
                    {"name": "two", "deviceClassName": CLASS, "count": 2}]}]}),
                channel: false,
            },
            _ => {
                let (profile, count) =
                    [("1g.5gb", 1), ("1g.5gb", 2), ("3g.20gb", 1)][below(3) as usize];
                ClaimPod {
                    devices: json!({"requests": [{"name": "gpus", "exactly": {
                        "deviceClassName": MIG_CLASS, "count": count,
                        "selectors": [{"cel": {"expression": format!(
                            "device.attributes['gpu.nvidia.com'].profile == '{profile}'")}}]}}]}),
                    channel: false,
                }
            }
        })
        .collect()
}

/// A pod using its named claim and, if asked, a channel from the template.
fn pod_for(name: &str, scheduler: &str, group: &str, channel: bool) -> Pod {
    let mut entries = vec![json!({"name": "gpus", "resourceClaimName": name})];
    if channel {
        entries.push(json!({"name": "imex", "resourceClaimTemplateName": "imex-channel"}));
    }
    pod_with_claims(name, scheduler, group, &entries)
}

/// Bound (`Some(node)`) or reported unschedulable (`None`).
async fn settle(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    log: impl Fn() -> String,
) -> Option<String> {
    wait_for(
        &format!("{what}: {name} bound or unschedulable"),
        Duration::from_secs(90),
        || async {
            let pod = pods.get(name).await.ok()?;
            if let Some(node) = node_of(&pod) {
                return Some(Some(node));
            }
            // A pod whose template claim is not created yet waits for it
            // (kube-scheduler's PreEnqueue); that is not a verdict.
            let unschedulable = pod.status?.conditions?.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
                    && !c
                        .message
                        .as_deref()
                        .unwrap_or_default()
                        .contains("waiting for its ResourceClaim")
            });
            unschedulable.then_some(None)
        },
        log,
    )
    .await
}

/// Checks every allocation in `ns` against its claim; returns the broken
/// statements.
async fn violations(client: &kube::Client, ns: &str) -> Vec<String> {
    let slices = Api::<ResourceSlice>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("slices");
    let mut attrs: BTreeMap<(String, String, String), Value> = BTreeMap::new();
    for s in &slices.items {
        for d in s.spec.devices.iter().flatten() {
            attrs.insert(
                (
                    s.spec.driver.clone(),
                    s.spec.pool.name.clone(),
                    d.name.clone(),
                ),
                serde_json::to_value(&d.attributes).expect("json"),
            );
        }
    }
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("claims");
    let mut out = Vec::new();
    let mut exclusive: BTreeSet<(String, String, String)> = BTreeSet::new();
    let mut mig_slices: BTreeMap<(String, String), Vec<u32>> = BTreeMap::new();
    for c in &claims.items {
        let name = c.metadata.name.clone().unwrap_or_default();
        let spec = serde_json::to_value(&c.spec).expect("json");
        let Some(allocation) = c.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
            continue;
        };
        let results = allocation
            .devices
            .as_ref()
            .and_then(|d| d.results.clone())
            .unwrap_or_default();
        let mut roots = BTreeSet::new();
        let summary: Vec<String> = results
            .iter()
            .map(|r| {
                format!(
                    "{}:{}",
                    r.pool.rsplit('-').next().unwrap_or_default(),
                    r.device
                )
            })
            .collect();
        println!("  {name}: {summary:?}");
        for r in &results {
            let key = (r.driver.clone(), r.pool.clone(), r.device.clone());
            let Some(a) = attrs.get(&key) else {
                out.push(format!("{name}: {} is not published", r.device));
                continue;
            };
            if !exclusive.insert(key.clone()) {
                out.push(format!("{name}: {} allocated twice", r.device));
            }
            let kind = a["type"]["string"].as_str().unwrap_or_default();
            let wants = match r.request.as_str() {
                "nics" => a["dra.net/rdma"]["bool"] == true,
                "imex" | "channel" => kind == "channel",
                _ if spec.to_string().contains(MIG_CLASS) => kind == "mig",
                _ => kind == "gpu",
            };
            if !wants {
                out.push(format!(
                    "{name}: {} does not serve request {}",
                    r.device, r.request
                ));
            }
            if kind == "mig"
                && let Some((gpu, rest)) = r.device.split_once("-mig-")
            {
                let parts: Vec<&str> = rest.split('-').collect();
                let start: u32 = parts.get(2).and_then(|p| p.parse().ok()).unwrap_or(99);
                let size = if parts[0] == "3g20gb" { 4 } else { 1 };
                mig_slices
                    .entry((r.pool.clone(), gpu.to_string()))
                    .or_default()
                    .extend(start..start + size);
            }
            roots.insert(a[PCIE_ROOT]["string"].to_string());
        }
        if spec.to_string().contains(PCIE_ROOT) && roots.len() > 1 {
            out.push(format!("{name}: devices on {} PCIe roots", roots.len()));
        }
    }
    for ((pool, gpu), used) in mig_slices {
        let distinct: BTreeSet<&u32> = used.iter().collect();
        if distinct.len() != used.len() {
            out.push(format!("{pool}/{gpu}: MIG memory slices overlap: {used:?}"));
        }
    }
    out
}

/// Runs the stream under `scheduler` on fresh nodes; returns per pod
/// whether it was placed, or its pending message.
async fn run(
    scheduler: &str,
    tag: &str,
    stream: &[ClaimPod],
    log: &dyn Fn() -> String,
) -> Vec<Result<(), String>> {
    let env = env().await;
    let client = env.client().await;
    let ns = env.create_namespace(&format!("dra-diff-{tag}")).await;
    Api::<ResourceClaimTemplate>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &imex_template())
        .await
        .expect("the channel template");
    let group = env.unique_name(&format!("dra-diff-{tag}"));
    for i in 0..2 {
        let node = env.unique_name(&format!("dra-diff-{tag}-a100-{i}"));
        let spec = dra_node(env, &node, DGX_A100, "NVIDIA A100-SXM4-40GB", &group, false).await;
        other_drivers(env, &node, &spec).await;
    }
    mig_node(
        env,
        &env.unique_name(&format!("dra-diff-{tag}-mig")),
        DGX_A100,
        &group,
    )
    .await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let mut placed = Vec::new();
    for (i, p) in stream.iter().enumerate() {
        let name = format!("p{i}");
        named_claim(&client, &ns, &name, p.devices.clone()).await;
        create(&pods, &pod_for(&name, scheduler, &group, p.channel)).await;
        placed.push(
            match settle(&pods, &name, &format!("{tag} ({scheduler})"), log).await {
                Some(node) => {
                    println!(
                        "{tag} {name}: {}",
                        node.rsplit('-').next().unwrap_or_default()
                    );
                    Ok(())
                }
                None => Err(pods
                    .get(&name)
                    .await
                    .ok()
                    .and_then(|p| {
                        p.status?
                            .conditions?
                            .into_iter()
                            .find(|c| c.type_ == "PodScheduled")
                    })
                    .and_then(|c| c.message)
                    .unwrap_or_default()),
            },
        );
    }
    let broken = violations(&client, &ns).await;
    assert!(
        broken.is_empty(),
        "{tag} ({scheduler}): {broken:#?}\n{}",
        log()
    );
    // Pending pods left behind would keep both schedulers busy in later runs.
    pods.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("deleting the run's pods");
    placed
}

fn imex_template() -> ResourceClaimTemplate {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "imex-channel"},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}]}}},
    }))
    .expect("a template")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn claim_pods_placed_by_gputopo_keep_every_claims_statement_as_kube_schedulers_do() {
    let env = env().await;
    env.with_scheduler().await;
    let pods = env_usize("GPUTOPO_DRA_DIFFERENTIAL_PODS", 30);
    let seeds = env_usize("GPUTOPO_DRA_DIFFERENTIAL_SEEDS", 2);
    let sched = env.unique_name("sched-dra-diff");
    let s = SchedulerProcess::start(env, &sched).await;
    for seed in 0..seeds as u64 {
        let stream = stream(40 + seed, pods);
        let kube_runs = run(
            "default-scheduler",
            &format!("k{seed}"),
            &stream,
            &String::new,
        )
        .await;
        let our_runs = run(&sched, &format!("g{seed}"), &stream, &|| s.log()).await;
        for (i, (k, o)) in kube_runs.iter().zip(&our_runs).enumerate() {
            if k.is_ok() != o.is_ok() {
                println!(
                    "seed {} pod p{i} {:?}: kube {k:?}, gputopo {o:?}",
                    40 + seed,
                    stream[i]
                );
            }
        }
        let kube = kube_runs.iter().filter(|r| r.is_ok()).count();
        let ours = our_runs.iter().filter(|r| r.is_ok()).count();
        println!(
            "dra differential seed {}: {} pods; kube-scheduler placed {kube}, gputopo {ours}; 0 broken claims",
            40 + seed,
            stream.len()
        );
        assert!(
            kube > 0 && ours > 0,
            "both place pods: kube {kube}, ours {ours}"
        );
    }
}
