//! Link quality for plain DRA users, with the stock kube-scheduler: nodes
//! publish NVIDIA's GPU slice, dranet's NICs and gputopo's link devices
//! (`gputopo_topology::dra_slice::link_resource_slice`, the slice the agent
//! publishes), and claims written as `docs/contract/dra.md` shows them ask
//! for "two GPUs in one NVLink island" and "a GPU and a NIC under one PCIe
//! switch". kube-scheduler's allocator knows nothing of gputopo: the
//! attributes alone must steer it. Each case also runs a plain claim on a
//! twin node, to show the first devices kube-scheduler finds would not do,
//! and the same claim under gputopo-scheduler.

mod common;

use common::dra::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::Api;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const LINKS: &str = "topology.gputopo.dev";
const UUID: &str = "gpu.nvidia.com/uuid";

/// `n` GPUs in one NVLink island: each GPU paired with its link device by
/// UUID, the link devices in one island.
fn island_claim(n: u32) -> Value {
    let (mut requests, mut constraints, mut links) = (vec![], vec![], vec![]);
    for i in 0..n {
        let (gpu, link) = (format!("gpu-{i}"), format!("link-{i}"));
        requests.push(json!({"name": gpu, "exactly": {"deviceClassName": CLASS}}));
        requests.push(json!({"name": link, "exactly": {"deviceClassName": GPU_LINK_CLASS}}));
        constraints.push(json!({"requests": [gpu, link], "matchAttribute": UUID}));
        links.push(link);
    }
    constraints.push(json!({"requests": links, "matchAttribute": format!("{LINKS}/island")}));
    json!({"requests": requests, "constraints": constraints})
}

/// A GPU and a NIC under one PCIe switch, each paired with its link device.
fn switch_claim() -> Value {
    json!({
        "requests": [
            {"name": "gpu", "exactly": {"deviceClassName": CLASS}},
            {"name": "gpu-link", "exactly": {"deviceClassName": GPU_LINK_CLASS}},
            {"name": "nic", "exactly": {"deviceClassName": NIC_CLASS}},
            {"name": "nic-link", "exactly": {"deviceClassName": NIC_LINK_CLASS}},
        ],
        "constraints": [
            {"requests": ["gpu", "gpu-link"], "matchAttribute": UUID},
            {"requests": ["nic", "nic-link"], "matchAttribute": "dra.net/rdmaDevice"},
            {"requests": ["gpu-link", "nic-link"], "matchAttribute": format!("{LINKS}/pcieSwitch")},
        ],
    })
}

/// A GPU and a NIC, nothing said of where.
fn plain_gpu_and_nic() -> Value {
    json!({"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": CLASS}},
        {"name": "nic", "exactly": {"deviceClassName": NIC_CLASS}},
    ]})
}

/// Creates claim `name` and a pod using it, waits until both are placed;
/// returns `(request, driver, device)` of the allocation.
async fn place(
    env: &gputopo_testenv::TestEnv,
    ns: &str,
    name: &str,
    scheduler: &str,
    group: &str,
    devices: Value,
) -> Vec<(String, String, String)> {
    let client = env.client().await;
    named_claim(&client, ns, name, devices).await;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    create(&pods, &claim_pod(name, scheduler, group, name, false)).await;
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), ns);
    wait_for(
        &format!("{name} bound with its claim allocated"),
        Duration::from_secs(90),
        || async {
            pods.get(name).await.ok().filter(|p| node_of(p).is_some())?;
            let c = claims.get(name).await.ok()?;
            let results = c.status?.allocation?.devices?.results?;
            let mut out: Vec<_> = results
                .into_iter()
                .map(|r| (r.request, r.driver, r.device))
                .collect();
            out.sort();
            Some(out)
        },
        String::new,
    )
    .await
}

/// A linked node of `fixture` for `who`, and the first `taken` GPUs taken
/// there by a claim of `scheduler`'s: `(node, group, that allocation)`.
async fn busy_node(
    env: &gputopo_testenv::TestEnv,
    ns: &str,
    who: &str,
    scheduler: &str,
    fixture: &str,
    taken: u32,
) -> (String, String, Vec<(String, String, String)>) {
    let group = env.unique_name(&format!("{ns}-{who}"));
    let node = env.unique_name(&format!("{ns}-{who}-node"));
    linked_node(env, &node, fixture, &group).await;
    let claim = json!({"requests": [request(taken)]});
    let first = place(env, ns, &format!("{who}-first"), scheduler, &group, claim).await;
    (node, group, first)
}

/// The attribute `attr` of `(driver, device)` on the node, as JSON.
fn attr<'a>(
    devices: &'a BTreeMap<(String, String), Value>,
    driver: &str,
    device: &str,
    attr: &str,
) -> &'a Value {
    let a = &devices[&(driver.to_string(), device.to_string())];
    let v = &a[attr];
    if v.is_null() {
        &a[attr.rsplit('/').next().unwrap_or(attr)]
    } else {
        v
    }
}

/// The GPUs of an allocation, sorted.
fn gpus(results: &[(String, String, String)]) -> Vec<String> {
    let mut out: Vec<String> = results
        .iter()
        .filter(|(_, driver, _)| driver == CLASS)
        .map(|(_, _, d)| d.clone())
        .collect();
    out.sort();
    out
}

/// Every link device of `results` paired with its GPU (same UUID), and
/// the islands of the GPUs.
fn paired_islands(
    devices: &BTreeMap<(String, String), Value>,
    results: &[(String, String, String)],
    who: &str,
) -> Vec<Value> {
    let device_of = |request: &str| {
        results
            .iter()
            .find(|(r, _, _)| r == request)
            .map(|(_, driver, d)| (driver.clone(), d.clone()))
            .unwrap_or_else(|| panic!("{who}: no device for {request}: {results:?}"))
    };
    let mut islands = Vec::new();
    for (request, _, _) in results.iter().filter(|(r, _, _)| r.starts_with("link-")) {
        let (_, link) = device_of(request);
        let (_, gpu) = device_of(&request.replace("link-", "gpu-"));
        assert_eq!(
            attr(devices, LINKS, &link, UUID),
            attr(devices, CLASS, &gpu, UUID),
            "{who}: {link} pairs with {gpu}"
        );
        islands.push(attr(devices, LINKS, &link, "island").clone());
    }
    islands
}

/// The island of each GPU device, from the node's link devices.
fn islands_of(devices: &BTreeMap<(String, String), Value>, gpus: &[String]) -> Vec<Value> {
    gpus.iter()
        .map(|g| attr(devices, LINKS, g, "island").clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn stock_kube_scheduler_keeps_an_island_claim_inside_one_nvlink_island() {
    let env = env().await;
    env.with_scheduler().await;
    let client = env.client().await;
    let ns = env.create_namespace("dra-links").await;
    let sched = env.unique_name("sched-dra-links");
    let s = SchedulerProcess::start(env, &sched).await;
    // DGX-1: NVLink quads {0..3} and {4..7}. Three GPUs taken first leave
    // gpu-3 and gpu-4, in different quads, as the first free pair.
    let mut pairs = BTreeMap::new();
    for (who, scheduler, pair) in [
        (
            "plain",
            "default-scheduler",
            json!({"requests": [request(2)]}),
        ),
        ("island", "default-scheduler", island_claim(2)),
        ("ours", sched.as_str(), island_claim(2)),
    ] {
        let (node, group, first) = busy_node(env, &ns, who, scheduler, DGX1, 3).await;
        if scheduler == "default-scheduler" {
            assert_eq!(
                gpus(&first),
                ["gpu-0", "gpu-1", "gpu-2"],
                "{who}: first fit"
            );
        }
        let results = place(env, &ns, &format!("{who}-pair"), scheduler, &group, pair).await;
        let devices = published(&client, &node).await;
        let pair = gpus(&results);
        assert_eq!(pair.len(), 2, "{who}: {results:?}");
        assert!(
            pair.iter().all(|g| !gpus(&first).contains(g)),
            "{who}: {pair:?} free"
        );
        let islands = islands_of(&devices, &pair);
        if who == "plain" {
            assert_ne!(
                islands[0], islands[1],
                "first fit spans the quads: {pair:?}"
            );
        } else {
            assert_eq!(
                islands[0],
                islands[1],
                "{who}: {pair:?} in one island; {}",
                s.log()
            );
            assert_eq!(paired_islands(&devices, &results, who), islands, "{who}");
        }
        pairs.insert(who, pair);
    }
    assert_eq!(pairs["plain"], ["gpu-3", "gpu-4"]);
    assert_eq!(pairs["island"], ["gpu-4", "gpu-5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn stock_kube_scheduler_gives_a_gpu_the_nic_under_its_pcie_switch() {
    let env = env().await;
    env.with_scheduler().await;
    let client = env.client().await;
    let ns = env.create_namespace("dra-switch").await;
    let sched = env.unique_name("sched-dra-switch");
    let s = SchedulerProcess::start(env, &sched).await;
    // DGX A100: GPUs 0-1 with mlx5_0-1 under one switch, 2-3 with mlx5_2-3,
    // 4-5 with mlx5_6-7, 6-7 with mlx5_8-9. Four GPUs taken first leave
    // gpu-4, whose switch holds neither of the first NICs.
    let mut nics = BTreeMap::new();
    for (who, scheduler, claim) in [
        ("plain", "default-scheduler", plain_gpu_and_nic()),
        ("switch", "default-scheduler", switch_claim()),
        ("ours", sched.as_str(), switch_claim()),
    ] {
        let (node, group, first) = busy_node(env, &ns, who, scheduler, DGX_A100, 4).await;
        let results = place(env, &ns, &format!("{who}-pair"), scheduler, &group, claim).await;
        let devices = published(&client, &node).await;
        let gpu = gpus(&results);
        assert_eq!(gpu.len(), 1, "{who}: {results:?}");
        assert!(!gpus(&first).contains(&gpu[0]), "{who}: {gpu:?} free");
        let nic = results
            .iter()
            .find(|(r, _, _)| r == "nic")
            .map(|(_, _, d)| d.clone())
            .expect("a NIC");
        let rdma = attr(&devices, "dra.net", &nic, "dra.net/rdmaDevice").clone();
        // The NIC's link device, found by its RDMA name, and the GPU's.
        let switch_of_nic = devices
            .iter()
            .find(|((driver, _), a)| driver == LINKS && a["name"]["string"] == rdma["string"])
            .map(|(_, a)| a["pcieSwitch"].clone())
            .expect("the NIC has a link device");
        let switch_of_gpu = attr(&devices, LINKS, &gpu[0], "pcieSwitch").clone();
        if who == "plain" {
            assert_ne!(
                switch_of_gpu, switch_of_nic,
                "first fit: {gpu:?} with {rdma}"
            );
        } else {
            assert_eq!(
                switch_of_gpu,
                switch_of_nic,
                "{who}: {gpu:?} with {rdma}; {}",
                s.log()
            );
        }
        nics.insert(who, (gpu[0].clone(), rdma["string"].clone()));
    }
    assert_eq!(nics["plain"], ("gpu-4".to_string(), json!("mlx5_0")));
    assert_eq!(nics["switch"], ("gpu-4".to_string(), json!("mlx5_6")));
}
