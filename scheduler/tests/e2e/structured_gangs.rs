//! Gangs with structure (docs/contract/gang-structure.md) on a GB200 NVL72
//! cluster of kwok nodes (`gputopo_testenv::nvl72`: recorded GB200 trays,
//! racks labelled `nvidia.com/gpu.clique`, on leaves under spines), the
//! scheduler configured with the network tiers `gputopo+gpu-clique`:
//!
//! - a JobSet made into Jobs and pods by the real JobSet controller, its pod
//!   template carrying Kueue's TAS annotations and no Kueue installed: the
//!   gang in one leaf, each slice of ranks in one rack, in rank order; a
//!   JobSet of more slices than any leaf's racks hold waits whole, its
//!   event naming the slices;
//! - an upstream PodGroup (`scheduling.k8s.io/v1beta1`) whose
//!   `spec.schedulingConstraints.topology` names the rack tier: its pods in
//!   one rack, and a group no rack holds pending, its `FailedScheduling`
//!   event naming the tier and the best rack's count.
//!
//! Kueue itself assigning the rack is `ecosystem_kueue.rs`
//! (`kueue_assigns_a_rack_and_gputopo_places_the_pods_inside_it`): Kueue's
//! pod webhooks see every pod created outside kube-system (failure policy
//! Fail), so Kueue runs in that binary of its own, not beside these tests.

use super::common::ecosystem::{create_object, events_in, pod_name, pods_where};
use super::common::*;
use gputopo_scheduler::gangs::UpstreamPodGroup;
use gputopo_testenv::controllers::jobset::{self, JOBSET_NAME_LABEL};
use gputopo_testenv::nvl72::{
    CLIQUE_LABEL, LEAF_LABEL, Layout, NETWORK_TIERS_CONFIG, Nvl72Cluster,
};
use k8s_openapi::api::core::v1::{Pod, PodSchedulingGroup};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const REQUIRED: &str = "kueue.x-k8s.io/podset-required-topology";
const SLICE_REQUIRED: &str = "kueue.x-k8s.io/podset-slice-required-topology";
const SLICE_SIZE: &str = "kueue.x-k8s.io/podset-slice-size";
const JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";
const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// A scheduler of this test's own whose network tiers are the NVL72
/// cluster's: its name and process.
async fn nvl72_scheduler(
    env: &gputopo_testenv::TestEnv,
    prefix: &str,
) -> (String, SchedulerProcess) {
    let name = env.unique_name(prefix);
    let s = SchedulerProcess::start_with_config(env, &name, NETWORK_TIERS_CONFIG).await;
    (name, s)
}

fn label(p: &Pod, key: &str) -> u32 {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{} has no {key} label", pod_name(p)))
}

/// A JobSet of `jobs` Jobs of four 4-GPU pods (a whole tray each) with
/// Kueue's TAS annotations in its pod template: all in one leaf, slices of
/// four (one Job) each in one rack. No Kueue runs: gputopo reads them.
fn tas_jobset(name: &str, jobs: u32, sched: &str, cluster: &Nvl72Cluster) -> serde_json::Value {
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [{
            "name": "workers",
            "replicas": jobs,
            "template": {"spec": {
                "parallelism": 4,
                "completions": 4,
                "completionMode": "Indexed",
                "backoffLimit": 0,
                "template": {
                    "metadata": {"annotations": {
                        REQUIRED: LEAF_LABEL,
                        SLICE_REQUIRED: CLIQUE_LABEL,
                        SLICE_SIZE: "4",
                    }},
                    "spec": {
                        "schedulerName": sched,
                        "restartPolicy": "Never",
                        "nodeSelector": {"e2e-group": cluster.group},
                        "containers": [{
                            "name": "train",
                            "image": "registry.invalid/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": "4"}}
                        }]
                    }
                }
            }}
        }]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_kueue_tas_jobset_without_kueue_is_one_leaf_with_each_slice_in_one_rack() {
    let env = env().await;
    // Started before the scheduler, so that it finds JobSets served.
    let _jobset = jobset::start(env).await.unwrap_or_else(|e| panic!("{e}"));
    let client = env.client().await;
    // 2 spines x 2 leaves x 2 racks x 4 GB200 trays of 4 GPUs.
    let cluster = Nvl72Cluster::create(env, "nvl-js", Layout::new(2, 2, 2, 4)).await;
    let (sched, s) = nvl72_scheduler(env, "sched-nvl-js").await;
    let ns = env.create_namespace("nvl-js").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);

    // One tray of the first leaf's first rack is taken: that leaf holds one
    // whole free rack, one slice, and the gang needs two.
    let busy = cluster
        .trays
        .values()
        .find(|t| t.position == [0, 0, 0, 0])
        .expect("the first tray");
    let mut filler = gpu_pod("filler", &sched, &cluster.group, 4, &[]);
    filler
        .spec
        .as_mut()
        .expect("spec")
        .node_selector
        .get_or_insert_default()
        .insert("kubernetes.io/hostname".into(), busy.name.clone());
    create(&pods, &filler).await;
    let filler = bound(&pods, "filler", &s).await;
    assert_eq!(node_of(&filler).as_deref(), Some(busy.name.as_str()));

    // Two Jobs of four 4-GPU pods (a whole tray each), written for Kueue
    // TAS: the JobSet in one leaf, slices of four pods each in one rack.
    create_object(&client, Some(&ns), tas_jobset("train", 2, &sched, &cluster)).await;
    let selector = format!("{JOBSET_NAME_LABEL}=train");
    let mut bound = pods_where(
        &client,
        &ns,
        &selector,
        8,
        "bound",
        |p| node_of(p).is_some(),
        &s,
    )
    .await;

    // Rank order: job index, then completion index.
    bound.sort_by_key(|p| (label(p, JOB_INDEX), label(p, COMPLETION_INDEX)));
    let placement: Vec<String> = bound
        .iter()
        .map(|p| {
            let t = cluster.tray("the JobSet", &node_of(p).unwrap_or_default());
            format!("{} -> {} ({})", pod_name(p), t.name, t.rack_path())
        })
        .collect();
    let trays: Vec<_> = bound
        .iter()
        .map(|p| cluster.tray("the JobSet", &node_of(p).unwrap_or_default()))
        .collect();

    // The gang in one leaf (its required domain), not the one with a busy tray.
    let leaves: BTreeSet<String> = trays.iter().map(|t| t.leaf_path()).collect();
    assert_eq!(leaves.len(), 1, "one leaf: {placement:#?}");
    assert_ne!(
        trays[0].leaf_path(),
        busy.leaf_path(),
        "the leaf with a busy tray holds one slice, not two: {placement:#?}"
    );
    // Each slice (a Job: ranks 4k..4k+3) in one rack, the two in two racks.
    let mut slice_racks = Vec::new();
    for slice in trays.chunks(4) {
        let racks: BTreeSet<&str> = slice.iter().map(|t| t.clique.as_str()).collect();
        assert_eq!(racks.len(), 1, "each slice in one rack: {placement:#?}");
        slice_racks.push(slice[0].clique.clone());
    }
    assert_ne!(
        slice_racks[0], slice_racks[1],
        "a rack holds one slice of four trays"
    );
    // Laid out in rank order: consecutive ranks on consecutive places,
    // racks in name order, then nodes.
    let places: Vec<(String, String)> = trays
        .iter()
        .map(|t| (t.rack_path(), t.name.clone()))
        .collect();
    let mut sorted = places.clone();
    sorted.sort();
    assert_eq!(places, sorted, "ranks in domain order: {placement:#?}");
    // One pod per tray, its four GPUs.
    let nodes: BTreeSet<&str> = trays.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(nodes.len(), 8, "{placement:#?}");
    for p in &bound {
        assert_eq!(gpus_of(p), [0, 1, 2, 3], "{}", pod_name(p));
    }

    // Four slices in one leaf: a leaf has two racks. 23 trays are free, so
    // only the structure keeps it waiting, whole, and its event says so.
    create_object(&client, Some(&ns), tas_jobset("wide", 4, &sched, &cluster)).await;
    let selector = format!("{JOBSET_NAME_LABEL}=wide");
    pods_where(&client, &ns, &selector, 16, "created", |_| true, &s).await;
    let event = wait_for(
        "a FailedScheduling event for the JobSet wide naming its slices",
        Duration::from_secs(90),
        || async {
            events_in(&client, &ns).await.into_iter().find(|e| {
                e.reason.as_deref() == Some("FailedScheduling")
                    && note(e).contains("gang wide")
                    && note(e).contains("in slices of 4 each inside one gpu.clique")
            })
        },
        || s.log(),
    )
    .await;
    let text = note(&event);
    assert!(text.contains("all in one leaf"), "{text}");
    assert!(text.contains("nothing bound"), "{text}");
    let wide = pods_where(&client, &ns, &selector, 16, "listed", |_| true, &s).await;
    let bound: Vec<String> = wide.iter().filter_map(node_of).collect();
    assert!(bound.is_empty(), "a partial gang was bound: {bound:?}");
}

/// A member of upstream PodGroup `group`: a whole tray's four GPUs.
fn member(name: &str, sched: &str, cluster: &Nvl72Cluster, group: &str) -> Pod {
    let mut p = gpu_pod(name, sched, &cluster.group, 4, &[]);
    p.spec.as_mut().expect("spec").scheduling_group = Some(PodSchedulingGroup {
        pod_group_name: Some(group.into()),
    });
    p
}

/// A gang PodGroup of `min` members, all in one domain of `CLIQUE_LABEL`.
fn rack_group(name: &str, min: u32) -> UpstreamPodGroup {
    serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min}},
            "schedulingConstraints": {"topology": [{"key": CLIQUE_LABEL}]}
        }
    }))
    .expect("a PodGroup")
}

fn topology_key(g: &UpstreamPodGroup) -> Option<String> {
    g.spec
        .scheduling_constraints
        .as_ref()?
        .topology
        .as_ref()?
        .first()
        .map(|t| t.key.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_pod_groups_rack_constraint_keeps_its_gang_in_one_rack_or_pending() {
    let env = env().await;
    let client = env.client().await;
    // One leaf of two racks of four trays: eight nodes, at most four in a rack.
    let cluster = Nvl72Cluster::create(env, "nvl-pg", Layout::new(1, 1, 2, 4)).await;
    let (sched, s) = nvl72_scheduler(env, "sched-nvl-pg").await;
    let ns = env.create_namespace("nvl-pg").await;
    let groups = Api::<UpstreamPodGroup>::namespaced(client.clone(), &ns);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);

    // Five trays' worth in one rack: the cluster has eight free trays, but
    // no rack more than four.
    let created = groups
        .create(&PostParams::default(), &rack_group("big", 5))
        .await
        .expect("the PodGroup is created");
    assert_eq!(
        topology_key(&created).as_deref(),
        Some(CLIQUE_LABEL),
        "kube-apiserver keeps spec.schedulingConstraints (TopologyAwareWorkloadScheduling on)"
    );
    let read = groups.get("big").await.expect("the PodGroup read back");
    assert_eq!(topology_key(&read).as_deref(), Some(CLIQUE_LABEL));
    for i in 0..5 {
        create(&pods, &member(&format!("big-{i}"), &sched, &cluster, "big")).await;
    }
    let event = event_where(
        &client,
        &ns,
        "big-0",
        "FailedScheduling",
        |n| n.contains("all in one gpu.clique"),
        &s,
    )
    .await;
    let text = note(&event);
    assert!(
        text.contains("8 nodes can host members, at most 4 of them inside one gpu.clique"),
        "names the tier and the best rack's count: {text}"
    );
    // Both racks hold four: either may be named, by its whole domain path.
    let racks: Vec<String> = cluster
        .racks()
        .values()
        .map(|trays| trays[0].rack_path())
        .collect();
    assert!(
        racks
            .iter()
            .any(|r| text.contains(&format!("the most under one gpu.clique is 4 ({r})"))),
        "names the best rack, one of {racks:?}: {text}"
    );

    // Four trays' worth fits one rack.
    groups
        .create(&PostParams::default(), &rack_group("fits", 4))
        .await
        .expect("the PodGroup is created");
    for i in 0..4 {
        create(
            &pods,
            &member(&format!("fits-{i}"), &sched, &cluster, "fits"),
        )
        .await;
    }
    let placed = wait_for(
        "the four members of fits bound",
        Duration::from_secs(90),
        || async {
            let list = pods.list(&ListParams::default()).await.ok()?.items;
            let fits: Vec<Pod> = list
                .into_iter()
                .filter(|p| pod_name(p).starts_with("fits-") && node_of(p).is_some())
                .collect();
            (fits.len() == 4).then_some(fits)
        },
        || s.log(),
    )
    .await;
    let racks: BTreeMap<String, usize> = placed.iter().fold(BTreeMap::new(), |mut racks, p| {
        let t = cluster.tray("fits", &node_of(p).unwrap_or_default());
        *racks.entry(t.rack_path()).or_default() += 1;
        racks
    });
    assert_eq!(racks.len(), 1, "all in one rack: {racks:?}");

    // The big group still waits whole: no rack has five trays.
    let list = pods.list(&ListParams::default()).await.expect("pods").items;
    let big_bound: Vec<String> = list
        .iter()
        .filter(|p| pod_name(p).starts_with("big-"))
        .filter_map(node_of)
        .collect();
    assert!(big_bound.is_empty(), "nothing of big bound: {big_bound:?}");
    for i in 0..5 {
        let scheduled = events(&client, &ns, &format!("big-{i}"), "Scheduled").await;
        assert!(scheduled.is_empty(), "big-{i} was never scheduled");
    }
}
