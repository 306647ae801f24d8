//! Every driver's claims end to end on the real 1.37 control plane, with
//! kube-scheduler as the oracle: kwok DGX A100 nodes (the recorded
//! topology) publishing NVIDIA's GPU slice, NVIDIA's ComputeDomain slice
//! (`channel-0`, `daemon-0`) and dranet's RDMA NICs, as their sources build
//! them (`gputopo_topology::dra_slice`). The ComputeDomain controller and
//! its IMEX daemons need GPUs and do not run here; the channel claim comes
//! from a template shaped as the controller's workload template is.
//!
//! The same pod, its GPUs and NICs on one PCIe root (`matchAttribute`) plus
//! an IMEX channel, goes once to kube-scheduler and once to
//! gputopo-scheduler, each on its own node: both must place it, and every
//! allocation must satisfy what the claims state.

mod common;

use common::dra::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";

/// GPUs and NICs on one PCIe root, in one claim.
fn aligned(gpus: u32, nics: u32) -> Value {
    json!({
        "requests": [
            {"name": "gpus", "exactly": {"deviceClassName": CLASS, "count": gpus}},
            {"name": "nics", "exactly": {"deviceClassName": NIC_CLASS, "count": nics}},
        ],
        "constraints": [{"matchAttribute": PCIE_ROOT}],
    })
}

/// The ComputeDomain controller's workload template: one channel request,
/// its opaque config naming the domain.
fn channel_template() -> ResourceClaimTemplate {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "imex-channel", "labels": {
            "resource.nvidia.com/computeDomain": "d6f0e3a0-0000-4000-8000-000000000001",
            "resource.nvidia.com/computeDomainTarget": "Workload"}},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}],
            "config": [{"requests": ["channel"], "opaque": {
                "driver": "compute-domain.nvidia.com",
                "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "ComputeDomainChannelConfig",
                    "domainID": "d6f0e3a0-0000-4000-8000-000000000001",
                    "allocationMode": "Single"}}}],
        }}},
    }))
    .expect("a template")
}

/// A pod for `scheduler` in `group` using the named claim `train` and a
/// channel from the template.
fn trainer(name: &str, scheduler: &str, group: &str, train: &str) -> Pod {
    pod_with_claims(
        name,
        scheduler,
        group,
        &[
            json!({"name": "train", "resourceClaimName": train}),
            json!({"name": "imex", "resourceClaimTemplateName": "imex-channel"}),
        ],
    )
}

/// Every claim the pod uses, once each is allocated and reserved for it.
async fn allocated_claims(client: &kube::Client, ns: &str, pod: &Pod) -> Vec<ResourceClaim> {
    let name = pod.metadata.name.clone().expect("a name");
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), ns);
    wait_for(
        &format!("the claims of {name} allocated and reserved"),
        Duration::from_secs(60),
        || async {
            let pod: Pod = Api::<Pod>::namespaced(client.clone(), ns)
                .get(&name)
                .await
                .ok()?;
            let mut out = Vec::new();
            for entry in pod.spec.as_ref()?.resource_claims.iter().flatten() {
                let claim_name = match &entry.resource_claim_name {
                    Some(n) => n.clone(),
                    None => pod
                        .status
                        .as_ref()?
                        .resource_claim_statuses
                        .iter()
                        .flatten()
                        .find(|s| s.name == entry.name)?
                        .resource_claim_name
                        .clone()?,
                };
                let c = claims.get(&claim_name).await.ok()?;
                let ok = c.status.as_ref().is_some_and(|s| {
                    s.allocation.is_some()
                        && s.reserved_for.iter().flatten().any(|r| r.name == name)
                });
                if !ok {
                    return None;
                }
                out.push(c);
            }
            Some(out)
        },
        String::new,
    )
    .await
}

/// Checks one scheduler's placement against what the claims state; returns
/// the node and the `train` claim's GPU devices.
async fn check(client: &kube::Client, ns: &str, pod: &Pod, who: &str) -> (String, Vec<String>) {
    let node = node_of(pod).expect("bound");
    let claims = allocated_claims(client, ns, pod).await;
    let devices = published(client, &node).await;
    let mut gpus = Vec::new();
    for c in &claims {
        let allocation = c.status.as_ref().and_then(|s| s.allocation.as_ref());
        let results = results_of(c);
        let mut roots = Vec::new();
        for r in &results {
            let attrs = devices
                .get(&(r.driver.clone(), r.device.clone()))
                .unwrap_or_else(|| panic!("{who}: {} is not published on {node}", r.device));
            assert_eq!(r.pool, node, "{who}: node-local devices of its node");
            match r.request.as_str() {
                "gpus" => {
                    assert_eq!(attrs["type"]["string"], "gpu", "{who}: {r:?}");
                    gpus.push(r.device.clone());
                }
                "nics" => assert_eq!(attrs["dra.net/rdma"]["bool"], true, "{who}: {r:?}"),
                "channel" => {
                    assert_eq!(
                        (r.driver.as_str(), attrs["type"]["string"].as_str()),
                        ("compute-domain.nvidia.com", Some("channel")),
                        "{who}: {r:?}"
                    );
                }
                other => panic!("{who}: unexpected request {other}"),
            }
            roots.push(attrs[PCIE_ROOT]["string"].clone());
        }
        let counts: BTreeMap<&str, usize> = results.iter().fold(BTreeMap::new(), |mut m, r| {
            *m.entry(r.request.as_str()).or_default() += 1;
            m
        });
        if counts.contains_key("gpus") {
            assert_eq!(counts, BTreeMap::from([("gpus", 2), ("nics", 1)]), "{who}");
            assert!(
                roots.iter().all(|r| r.is_string() && *r == roots[0]),
                "{who}: GPUs and NICs on one PCIe root: {roots:?}"
            );
        } else {
            assert_eq!(counts, BTreeMap::from([("channel", 1)]), "{who}");
            let config = serde_json::to_value(
                &allocation
                    .and_then(|a| a.devices.as_ref())
                    .expect("devices")
                    .config,
            )
            .expect("json");
            assert_eq!(
                config[0]["opaque"]["parameters"]["kind"], "ComputeDomainChannelConfig",
                "{who}: the template's config is passed through: {config}"
            );
        }
    }
    assert_eq!(claims.len(), 2, "{who}: both claims allocated");
    (node, gpus)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn gpus_nics_on_one_pcie_root_and_an_imex_channel_as_kube_scheduler_allocates_them() {
    let env = env().await;
    env.with_scheduler().await;
    let client = env.client().await;
    let ns = env.create_namespace("dra-drivers").await;
    Api::<ResourceClaimTemplate>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &channel_template())
        .await
        .expect("the channel template");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);

    // kube-scheduler on a node of its own.
    let kube_group = env.unique_name("dra-drivers-kube");
    let kube_node = env.unique_name("dra-drivers-kube-a100");
    let spec = dra_node(
        env,
        &kube_node,
        DGX_A100,
        "NVIDIA A100-SXM4-40GB",
        &kube_group,
        false,
    )
    .await;
    other_drivers(env, &kube_node, &spec).await;
    named_claim(&client, &ns, "train-kube", aligned(2, 1)).await;
    create(
        &pods,
        &trainer("kube", "default-scheduler", &kube_group, "train-kube"),
    )
    .await;

    // gputopo-scheduler on another.
    let group = env.unique_name("dra-drivers");
    let node = env.unique_name("dra-drivers-a100");
    let spec = dra_node(env, &node, DGX_A100, "NVIDIA A100-SXM4-40GB", &group, false).await;
    other_drivers(env, &node, &spec).await;
    let sched = env.unique_name("sched-dra-drivers");
    let s = SchedulerProcess::start(env, &sched).await;
    named_claim(&client, &ns, "train-ours", aligned(2, 1)).await;
    create(&pods, &trainer("ours", &sched, &group, "train-ours")).await;

    let theirs = wait_for(
        "kube-scheduler binds its pod",
        Duration::from_secs(90),
        || async { pods.get("kube").await.ok().filter(|p| node_of(p).is_some()) },
        String::new,
    )
    .await;
    let (their_node, _) = check(&client, &ns, &theirs, "kube-scheduler").await;
    assert_eq!(their_node, kube_node);

    let ours = bound(&pods, "ours", &s).await;
    let (our_node, gpus) = check(&client, &ns, &ours, "gputopo").await;
    assert_eq!(our_node, node);
    // The Scheduled event names every claim's devices, whatever the driver.
    let scheduled = wait_for(
        "gputopo's Scheduled event",
        Duration::from_secs(30),
        || async {
            events(&client, &ns, "ours", "Scheduled")
                .await
                .first()
                .map(note)
        },
        || s.log(),
    )
    .await;
    for claim in allocated_claims(&client, &ns, &ours).await {
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        for r in claim
            .status
            .and_then(|s| s.allocation)
            .and_then(|a| a.devices)
            .and_then(|d| d.results)
            .unwrap_or_default()
        {
            let named = format!("{claim_name}: {}/{}/{}", r.driver, r.pool, r.device);
            assert!(scheduled.contains(&named), "{named} in {scheduled}");
        }
    }
    // The pod's GPU annotation names the claim's GPUs.
    let mut annotated: Vec<String> = gpus_of(&ours).iter().map(|g| format!("gpu-{g}")).collect();
    annotated.sort();
    let mut gpus = gpus;
    gpus.sort();
    assert_eq!(annotated, gpus, "{}", s.log());
}

/// `(request, device)` of a claim's allocation, sorted.
fn results(c: &ResourceClaim) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = results_of(c)
        .into_iter()
        .map(|r| (r.request, r.driver))
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn first_available_falls_back_to_the_subrequest_that_fits_as_kube_scheduler_does() {
    let env = env().await;
    env.with_scheduler().await;
    let client = env.client().await;
    let ns = env.create_namespace("dra-prio").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // Eight H100s, or failing that two GPUs of any kind: A100 nodes give the second.
    let prioritized = json!({"requests": [{"name": "gpus", "firstAvailable": [
        {"name": "h100s", "deviceClassName": CLASS, "count": 8, "selectors": [{"cel": {"expression":
            "device.attributes['gpu.nvidia.com'].productName.contains('H100')"}}]},
        {"name": "any", "deviceClassName": CLASS, "count": 2},
    ]}]});
    let sched = env.unique_name("sched-dra-prio");
    let s = SchedulerProcess::start(env, &sched).await;
    let mut placed = Vec::new();
    for (who, scheduler) in [("kube", "default-scheduler"), ("ours", sched.as_str())] {
        let group = env.unique_name(&format!("dra-prio-{who}"));
        let node = env.unique_name(&format!("dra-prio-{who}-a100"));
        dra_node(env, &node, DGX_A100, "NVIDIA A100-SXM4-40GB", &group, false).await;
        let claim = format!("prio-{who}");
        named_claim(&client, &ns, &claim, prioritized.clone()).await;
        create(&pods, &claim_pod(who, scheduler, &group, &claim, false)).await;
        let pod = wait_for(
            &format!("{who}: the pod bound"),
            Duration::from_secs(90),
            || async { pods.get(who).await.ok().filter(|p| node_of(p).is_some()) },
            || s.log(),
        )
        .await;
        assert_eq!(node_of(&pod).as_deref(), Some(node.as_str()));
        let c = claim_of(&client, &ns, &pod).await;
        placed.push(results(&c));
    }
    let expected = vec![("gpus/any".to_string(), CLASS.to_string()); 2];
    assert_eq!(placed[0], expected, "kube-scheduler");
    assert_eq!(placed[1], expected, "gputopo");
}
