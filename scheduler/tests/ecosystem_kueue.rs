//! Kueue end to end: the real Kueue controller (sigs.k8s.io/kueue, built
//! from its module by scripts/control-plane-binaries; see
//! docs/ecosystem-tests.md) with topology-aware scheduling over gputopo's
//! own leaf labels. A Job sent to a LocalQueue is created suspended; Kueue
//! admits it against the ClusterQueue's quota, unsuspends it with the
//! flavor's node labels, holds its pods with its topology scheduling gate,
//! assigns them a leaf and writes it into their nodeSelector, then
//! ungates them; gputopo-scheduler places them inside that leaf. A Job
//! over the quota stays suspended: it has no pod for gputopo to place or
//! hold GPUs for. On a GB200 NVL72 cluster (`gputopo_testenv::nvl72`),
//! Kueue's levels and gputopo's tiers are spine, leaf and rack
//! (`nvidia.com/gpu.clique`): Kueue picks the rack, gputopo the trays and
//! GPUs inside it.

mod common;

use common::ecosystem::*;
use common::*;
use gputopo_testenv::controllers::kueue::{
    ADMISSION_GATE, POD_GROUP_NAME_LABEL, POD_GROUP_TOTAL_COUNT_ANNOTATION, QUEUE_NAME_LABEL,
    REQUIRED_TOPOLOGY_ANNOTATION, TOPOLOGY_GATE,
};
use gputopo_testenv::nvl72::{self, Layout, Nvl72Cluster};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::PostParams;
use kube::api::{Api, ListParams};
use serde_json::json;
use std::collections::BTreeSet;

const KUEUE_V: &str = "kueue.x-k8s.io/v1beta2";

/// A ResourceFlavor for the test's nodes whose topology has gputopo's
/// tiers as levels, a ClusterQueue with `gpus` GPUs of it, and a LocalQueue
/// named after the group in `ns`.
async fn queues(client: &Client, cluster: &LeafCluster, ns: &str, gpus: u32) {
    let name = cluster.group.as_str();
    create_object(
        client,
        None,
        json!({
            "apiVersion": KUEUE_V, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": SPINE_LABEL}, {"nodeLabel": LEAF_LABEL}]}
        }),
    )
    .await;
    create_object(
        client,
        None,
        json!({
            "apiVersion": KUEUE_V, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": {"e2e-group": name}, "topologyName": name}
        }),
    )
    .await;
    create_object(
        client,
        None,
        json!({
            "apiVersion": KUEUE_V, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [{
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": name, "resources": [
                        {"name": "nvidia.com/gpu", "nominalQuota": gpus.to_string()}
                    ]}]
                }]
            }
        }),
    )
    .await;
    create_object(
        client,
        Some(ns),
        json!({
            "apiVersion": KUEUE_V, "kind": "LocalQueue", "metadata": {"name": name},
            "spec": {"clusterQueue": name}
        }),
    )
    .await;
}

/// An indexed Job of `pods` pods of `gpus` GPUs for LocalQueue `queue`,
/// all in one leaf. No nodeSelector: Kueue's flavor and topology assignment
/// supply it.
fn queued_job(name: &str, queue: &str, pods: u32, gpus: u32) -> serde_json::Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_NAME_LABEL: queue}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {REQUIRED_TOPOLOGY_ANNOTATION: LEAF_LABEL}},
                "spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "train",
                        "image": "registry.invalid/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}
                    }]
                }
            }
        }
    })
}

/// The Workload Kueue made for Job `job`, once `ready` holds for it.
async fn workload_of(
    client: &Client,
    ns: &str,
    job: &str,
    what: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
    s: &SchedulerProcess,
) -> serde_json::Value {
    let api = dynamic_api(client, Some(ns), KUEUE_V, "Workload");
    wait_for(
        &format!("the Workload of Job {job} {what}"),
        CHAIN_TIMEOUT,
        || async {
            let list = api.list(&ListParams::default()).await.ok()?;
            list.items
                .into_iter()
                .filter(|w| {
                    w.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.kind == "Job" && o.name == job)
                })
                .map(|w| serde_json::to_value(w).expect("a Workload as JSON"))
                .find(&ready)
        },
        || s.log(),
    )
    .await
}

fn condition<'a>(workload: &'a serde_json::Value, type_: &str) -> Option<&'a serde_json::Value> {
    workload["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn kueue_admits_ungates_and_gputopo_places_inside_the_leaf_kueue_assigned() {
    let env = ecosystem_env().await;
    kueue_controller(env).await;
    let s = scheduler(env).await;
    let client = env.client().await;
    // Two leaves of two DGX A100s: Kueue chooses the leaf, gputopo the nodes and GPUs in it.
    let cluster = LeafCluster::create(env, "kq", DGX_A100, &[2, 2]).await;
    let ns = env.create_namespace("kueue").await;
    queues(&client, &cluster, &ns, 16).await;
    let queue = cluster.group.as_str();
    create_object(&client, Some(&ns), queued_job("admitted", queue, 2, 8)).await;

    let admitted = workload_of(
        &client,
        &ns,
        "admitted",
        "admitted",
        |w| condition(w, "Admitted").is_some_and(|c| c["status"] == "True"),
        s,
    )
    .await;
    assert_eq!(admitted["status"]["admission"]["clusterQueue"], queue);
    let selector = "batch.kubernetes.io/job-name=admitted";
    let pods = pods_bound(&client, &ns, selector, 2, s).await;
    let jobs = Api::<Job>::namespaced(client.clone(), &ns);
    let job = jobs.get("admitted").await.expect("the Job");
    assert_eq!(
        job.spec.and_then(|s| s.suspend),
        Some(false),
        "Kueue unsuspends what it admits"
    );

    assert_placed_in_kueues_leaf(&cluster, "the admitted Job", &pods);

    // The quota is spent: a second Job waits, suspended, with no pods.
    create_object(&client, Some(&ns), queued_job("over-quota", queue, 1, 8)).await;
    let pending = workload_of(
        &client,
        &ns,
        "over-quota",
        "refused quota",
        |w| condition(w, "QuotaReserved").is_some_and(|c| c["status"] == "False"),
        s,
    )
    .await;
    let message =
        condition(&pending, "QuotaReserved").expect("the condition")["message"].to_string();
    assert!(message.contains("nvidia.com/gpu"), "{message}");
    let job = jobs.get("over-quota").await.expect("the Job");
    assert_eq!(
        job.spec.and_then(|s| s.suspend),
        Some(true),
        "the Job stays suspended"
    );
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=over-quota"))
        .await
        .expect("listing pods");
    assert!(
        pods.items.is_empty(),
        "a suspended Job has no pods for gputopo to place or hold GPUs for"
    );
}

/// Every pod ungated, bound in one leaf, the leaf Kueue wrote into its
/// nodeSelector (with the flavor's node label), on scheduler-core's best GPUs.
fn assert_placed_in_kueues_leaf(cluster: &LeafCluster, what: &str, pods: &[Pod]) {
    let leaf = cluster.assert_one_leaf(what, pods);
    for p in pods {
        let spec = p.spec.as_ref().expect("a pod spec");
        assert!(
            spec.scheduling_gates.as_ref().is_none_or(|g| g.is_empty()),
            "{what}: Kueue ungated {}: {:?}",
            pod_name(p),
            spec.scheduling_gates
        );
        let selector = spec.node_selector.clone().unwrap_or_default();
        assert_eq!(
            selector.get("e2e-group"),
            Some(&cluster.group),
            "{selector:?}"
        );
        assert_eq!(
            selector.get(LEAF_LABEL),
            Some(&leaf),
            "{what}: {} is in the leaf Kueue assigned: {selector:?}",
            pod_name(p)
        );
    }
    cluster.assert_optimal_sets(what, pods);
}

/// A member of a plain pod group for LocalQueue `queue` (Kueue's pod integration).
fn group_member(name: &str, queue: &str, group: &str, size: u32, gpus: u32) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {QUEUE_NAME_LABEL: queue, POD_GROUP_NAME_LABEL: group},
            "annotations": {
                POD_GROUP_TOTAL_COUNT_ANNOTATION: size.to_string(),
                REQUIRED_TOPOLOGY_ANNOTATION: LEAF_LABEL,
            }
        },
        "spec": {
            "schedulerName": SCHEDULER,
            "restartPolicy": "Never",
            "containers": [{
                "name": "serve",
                "image": "registry.invalid/serve:1",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}
            }]
        }
    }))
    .expect("a pod")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn kueue_gates_plain_pods_until_admitted_and_gputopo_places_them_in_its_leaf() {
    let env = ecosystem_env().await;
    kueue_controller(env).await;
    let s = scheduler(env).await;
    let client = env.client().await;
    let cluster = LeafCluster::create(env, "kp", DGX1, &[2, 2]).await;
    let ns = env.create_namespace("kueue-pods").await;
    queues(&client, &cluster, &ns, 16).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    for i in 0..2 {
        let member = group_member(&format!("serve-{i}"), &cluster.group, "serve", 2, 8);
        let created = pods
            .create(&PostParams::default(), &member)
            .await
            .unwrap_or_else(|e| panic!("creating serve-{i}: {e}"));
        // Kueue's webhook gated it at creation: nothing may place it before admission.
        let gates: Vec<String> = created
            .spec
            .and_then(|s| s.scheduling_gates)
            .unwrap_or_default()
            .into_iter()
            .map(|g| g.name)
            .collect();
        assert!(
            gates.iter().any(|g| g == ADMISSION_GATE) && gates.iter().any(|g| g == TOPOLOGY_GATE),
            "serve-{i} was created with gates {gates:?}"
        );
    }
    let selector = format!("{POD_GROUP_NAME_LABEL}=serve");
    let bound = pods_bound(&client, &ns, &selector, 2, s).await;
    assert_placed_in_kueues_leaf(&cluster, "the admitted pod group", &bound);
}

/// Kueue's `Topology` whose levels are the NVL72 cluster's tiers (spine,
/// leaf, rack), a ResourceFlavor for its nodes, a ClusterQueue of `gpus`
/// GPUs and a LocalQueue in `ns`, all named after the cluster's group.
async fn rack_queues(client: &Client, cluster: &Nvl72Cluster, ns: &str, gpus: u32) {
    let name = cluster.group.as_str();
    create_object(
        client,
        None,
        json!({
            "apiVersion": KUEUE_V, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [
                {"nodeLabel": nvl72::SPINE_LABEL},
                {"nodeLabel": nvl72::LEAF_LABEL},
                {"nodeLabel": nvl72::CLIQUE_LABEL}
            ]}
        }),
    )
    .await;
    create_object(
        client,
        None,
        json!({
            "apiVersion": KUEUE_V, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": {nvl72::GROUP_LABEL: name}, "topologyName": name}
        }),
    )
    .await;
    create_object(
        client,
        None,
        json!({
            "apiVersion": KUEUE_V, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [{
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": name, "resources": [
                        {"name": "nvidia.com/gpu", "nominalQuota": gpus.to_string()}
                    ]}]
                }]
            }
        }),
    )
    .await;
    create_object(
        client,
        Some(ns),
        json!({
            "apiVersion": KUEUE_V, "kind": "LocalQueue", "metadata": {"name": name},
            "spec": {"clusterQueue": name}
        }),
    )
    .await;
}

/// Kueue's topology-aware scheduling with the rack (`nvidia.com/gpu.clique`)
/// as its innermost level, and gputopo as the pods' scheduler with the
/// same tiers (`gputopo+gpu-clique`): Kueue admits the Job, picks one rack
/// for all its pods (`kueue.x-k8s.io/podset-required-topology`), writes
/// the rack's spine, leaf and clique labels into each pod's nodeSelector
/// and removes its `kueue.x-k8s.io/topology` gate; gputopo then chooses
/// the trays and the GPUs inside that rack. One tray of the first rack is
/// taken before, so the racks differ in free GPUs (12 and 16).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn kueue_assigns_a_rack_and_gputopo_places_the_pods_inside_it() {
    let env = ecosystem_env().await;
    kueue_controller(env).await;
    // A second gputopo-scheduler, whose network tiers are the NVL72 racks'.
    let sched = env.unique_name("gputopo-nvl72");
    let s = SchedulerProcess::start_with_config(env, &sched, nvl72::NETWORK_TIERS_CONFIG).await;
    let client = env.client().await;
    // One leaf of two racks of four GB200 trays (4 GPUs each).
    let cluster = Nvl72Cluster::create(env, "kq-nvl", Layout::new(1, 1, 2, 4)).await;
    let ns = env.create_namespace("kueue-nvl").await;
    rack_queues(&client, &cluster, &ns, 32).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);

    let busy = cluster
        .trays
        .values()
        .find(|t| t.position == [0, 0, 0, 0])
        .expect("the first tray");
    let mut filler = common::gpu_pod("filler", &sched, &cluster.group, 4, &[]);
    filler
        .spec
        .as_mut()
        .expect("spec")
        .node_selector
        .get_or_insert_default()
        .insert("kubernetes.io/hostname".into(), busy.name.clone());
    pods.create(&PostParams::default(), &filler)
        .await
        .expect("creating the filler");
    pods_bound(&client, &ns, "!batch.kubernetes.io/job-name", 1, &s).await;

    // Six pods of two GPUs: 12 GPUs, in one rack.
    let mut job = queued_job("racked", &cluster.group, 6, 2);
    job["spec"]["template"]["metadata"]["annotations"][REQUIRED_TOPOLOGY_ANNOTATION] =
        json!(nvl72::CLIQUE_LABEL);
    job["spec"]["template"]["spec"]["schedulerName"] = json!(sched);
    create_object(&client, Some(&ns), job).await;
    let admitted = workload_of(
        &client,
        &ns,
        "racked",
        "admitted",
        |w| condition(w, "Admitted").is_some_and(|c| c["status"] == "True"),
        &s,
    )
    .await;
    assert_eq!(
        admitted["status"]["admission"]["clusterQueue"],
        cluster.group
    );
    let bound = pods_bound(&client, &ns, "batch.kubernetes.io/job-name=racked", 6, &s).await;

    let mut racks = BTreeSet::new();
    for p in &bound {
        let spec = p.spec.as_ref().expect("a pod spec");
        assert!(
            spec.scheduling_gates.as_ref().is_none_or(|g| g.is_empty()),
            "Kueue ungated {}: {:?}",
            pod_name(p),
            spec.scheduling_gates
        );
        let selector = spec.node_selector.clone().unwrap_or_default();
        let node = node_of(p).expect("bound");
        let tray = cluster.tray("the Kueue Job", &node);
        // Kueue's assignment: every level of the rack's domain.
        for (key, value) in [
            (nvl72::SPINE_LABEL, &tray.spine),
            (nvl72::LEAF_LABEL, &tray.leaf),
            (nvl72::CLIQUE_LABEL, &tray.clique),
        ] {
            assert_eq!(
                selector.get(key),
                Some(value),
                "{} on {node} is inside the domain Kueue assigned: {selector:?}",
                pod_name(p)
            );
        }
        assert_ne!(node, busy.name, "the busy tray has no free GPU");
        racks.insert(tray.clique.clone());
    }
    assert_eq!(racks.len(), 1, "one rack: {racks:?}");
    // gputopo's part: the GPUs inside each tray, as scheduler-core chooses
    // them (two GPUs on one Grace socket).
    let topology = cluster
        .trays
        .iter()
        .map(|(n, t)| (n.clone(), t.topology.clone()))
        .collect();
    assert_optimal_sets(&topology, "the Kueue Job", &bound);
}
