//! The upstream gang API end to end on the real 1.37 control plane (with
//! `GenericWorkload` and `WorkloadWithJob` on, as gputopo-testenv starts
//! it): a `batch/v1` Job asking for a gang in its own `spec.scheduling`
//! (nothing gputopo-specific), for which the real Job controller writes a
//! Workload, a `scheduling.k8s.io` PodGroup and the pods' `schedulingGroup`,
//! is placed as one gang on one leaf, and gputopo-scheduler writes the
//! PodGroup's `PodGroupInitiallyScheduled` condition; a group that cannot
//! fit binds nothing and says why; a pod naming two gangs is refused with
//! an event naming both fields.

mod common;

use common::*;
use gputopo_scheduler::gangs::UpstreamPodGroup;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

/// Two leaves of two DGX A100 each; returns the leaf of each node.
async fn two_leaves(env: &gputopo_testenv::TestEnv, group: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for leaf in ["leaf-1", "leaf-2"] {
        for i in 0..2 {
            let name = env.unique_name(&format!("a100-{leaf}-{i}"));
            fixture_node(
                env,
                &name,
                DGX_A100,
                &[("e2e-group", group), ("gputopo.dev/leaf", leaf)],
            )
            .await;
            out.push((name, leaf.to_string()));
        }
    }
    out
}

fn condition(g: &UpstreamPodGroup) -> Option<(String, String, String)> {
    g.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodGroupInitiallyScheduled")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_gang_job_is_one_upstream_gang_on_one_leaf_and_its_pod_group_says_scheduled() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("wl-job");
    let nodes = two_leaves(env, &group).await;
    let sched = env.unique_name("sched-wl-job");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("wl-job").await;
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ddp"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "scheduling": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            "template": {"spec": {
                "schedulerName": sched,
                "restartPolicy": "Never",
                "nodeSelector": {"e2e-group": group},
                "containers": [{
                    "name": "train",
                    "image": "registry.invalid/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}
                }]
            }}
        }
    }))
    .expect("a Job");
    Api::<Job>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &job)
        .await
        .expect("the Job is created");

    let groups = Api::<UpstreamPodGroup>::namespaced(client.clone(), &ns);
    let pg = wait_for(
        "the Job controller's PodGroup with a gang policy",
        Duration::from_secs(60),
        || async {
            groups
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|g| g.spec.scheduling_policy.gang.is_some())
        },
        || s.log(),
    )
    .await;
    let min = pg.spec.scheduling_policy.gang.as_ref().map(|g| g.min_count);
    assert_eq!(min, Some(2), "the Job's spec.scheduling gang");
    let pg_name = pg.metadata.name.clone().expect("named");

    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let bound = wait_for(
        "both Job pods bound",
        Duration::from_secs(90),
        || async {
            let list = pods.list(&ListParams::default()).await.ok()?.items;
            let bound: Vec<Pod> = list.into_iter().filter(|p| node_of(p).is_some()).collect();
            (bound.len() == 2).then_some(bound)
        },
        || s.log(),
    )
    .await;
    for p in &bound {
        let named = p
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_group.as_ref())
            .and_then(|g| g.pod_group_name.clone());
        assert_eq!(
            named.as_deref(),
            Some(pg_name.as_str()),
            "the Job controller linked it"
        );
        assert_eq!(gpus_of(p).len(), 8);
    }
    let leaves: BTreeSet<&String> = bound
        .iter()
        .map(|p| {
            let node = node_of(p).expect("bound");
            &nodes.iter().find(|(n, _)| *n == node).expect("our node").1
        })
        .collect();
    assert_eq!(leaves.len(), 1, "one leaf: {leaves:?}");

    let (status, reason, message) = wait_for(
        "the PodGroup's PodGroupInitiallyScheduled condition true",
        Duration::from_secs(60),
        || async { condition(&groups.get(&pg_name).await.ok()?).filter(|(s, _, _)| s == "True") },
        || s.log(),
    )
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Scheduled"));
    assert!(message.contains("2 of 2 members bound"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn an_upstream_gang_that_cannot_fit_binds_nothing_and_its_pod_group_says_why() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("wl-big");
    two_leaves(env, &group).await;
    let sched = env.unique_name("sched-wl-big");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("wl-big").await;
    let pg: UpstreamPodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "big"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}}
    }))
    .expect("a PodGroup");
    let groups = Api::<UpstreamPodGroup>::namespaced(client.clone(), &ns);
    groups
        .create(&PostParams::default(), &pg)
        .await
        .expect("the PodGroup is created");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // Five 8-GPU members; the four nodes hold four.
    for i in 0..5 {
        let mut p = gpu_pod(&format!("big-{i}"), &sched, &group, 8, &[]);
        p.spec.as_mut().expect("spec").scheduling_group =
            Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
                pod_group_name: Some("big".into()),
            });
        create(&pods, &p).await;
    }
    let (_, reason, message) = wait_for(
        "the PodGroup's condition Unschedulable",
        Duration::from_secs(90),
        || async { condition(&groups.get("big").await.ok()?).filter(|(s, _, _)| s == "False") },
        || s.log(),
    )
    .await;
    assert_eq!(reason, "Unschedulable");
    assert!(
        message.contains("big") && message.contains("nothing bound"),
        "names the gang and says none is bound: {message}"
    );
    let list = pods.list(&ListParams::default()).await.expect("pods").items;
    assert!(
        list.iter().all(|p| node_of(p).is_none()),
        "all or nothing: none bound"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_pod_naming_two_gangs_is_refused_with_both_fields_and_others_are_served() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("wl-two");
    two_leaves(env, &group).await;
    let sched = env.unique_name("sched-wl-two");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("wl-two").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let mut both = gpu_pod(
        "both",
        &sched,
        &group,
        8,
        &[("gputopo.dev/gang", "g"), ("gputopo.dev/gang-size", "2")],
    );
    both.spec.as_mut().expect("spec").scheduling_group =
        Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
            pod_group_name: Some("up".into()),
        });
    create(&pods, &both).await;
    create(&pods, &gpu_pod("plain", &sched, &group, 8, &[])).await;
    event_where(
        &client,
        &ns,
        "both",
        "FailedScheduling",
        |n| n.contains("spec.schedulingGroup.podGroupName") && n.contains("gputopo.dev/gang"),
        &s,
    )
    .await;
    bound(&pods, "plain", &s).await;
}
