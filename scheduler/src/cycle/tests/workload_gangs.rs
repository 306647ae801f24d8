//! Gangs the ecosystem declares without gputopo annotations: the upstream
//! `scheduling.k8s.io` PodGroup (what the Job controller writes), JobSet
//! and LeaderWorkerSet pods; and the PodGroup statuses the cycle writes.

use super::fake::Write;
use super::fixtures::{World, group_member, pod, pod_group};
use super::{Harness, binds, message};
use crate::cycle::gang_status::{GangStatusWrite, INITIALLY_SCHEDULED};
use crate::gangs::{JobSet, UpstreamPodGroup};
use k8s_openapi::api::core::v1::{Pod, PodSchedulingGroup};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;

fn upstream_member(group: &str, i: u32, gpus: u32) -> Pod {
    let mut p = pod(&format!("{group}-{i}"), gpus, None, 0);
    p.spec.get_or_insert_default().scheduling_group = Some(PodSchedulingGroup {
        pod_group_name: Some(group.into()),
    });
    p
}

fn upstream_group(name: &str, policy: serde_json::Value) -> Arc<UpstreamPodGroup> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml", "resourceVersion": "1", "generation": 1},
            "spec": {"schedulingPolicy": policy}
        }))
        .expect("an upstream PodGroup"),
    )
}

fn labelled(mut p: Pod, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Pod {
    let l = p.metadata.labels.get_or_insert_default();
    for (k, v) in labels {
        l.insert(k.to_string(), v.to_string());
    }
    let a = p.metadata.annotations.get_or_insert_default();
    for (k, v) in annotations {
        a.insert(k.to_string(), v.to_string());
    }
    p
}

fn upstream_writes(writes: &[Write]) -> Vec<(String, String, String)> {
    writes
        .iter()
        .filter_map(|w| match w {
            Write::GangStatus(GangStatusWrite::Upstream {
                name, condition, ..
            }) => {
                assert_eq!(condition.type_, INITIALLY_SCHEDULED);
                Some((
                    name.clone(),
                    condition.status.clone(),
                    condition.reason.clone(),
                ))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn an_upstream_gang_waits_for_min_count_then_binds_whole_and_says_so_on_its_pod_group() {
    let mut w = World::dgx(4, 2);
    w.gangs
        .upstream_groups
        .push(upstream_group("train", json!({"gang": {"minCount": 2}})));
    w.add(upstream_member("train", 0, 8));
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty());
    assert!(
        message(&report, "ml/train-0")
            .contains("PodGroup ml/train (scheduling.k8s.io): 1 of 2 members present"),
        "{:?}",
        report.outcomes
    );
    h.world.add(upstream_member("train", 1, 8));
    let (_, writes) = h.cycle();
    let bound = h.bound();
    assert_eq!(binds(&writes).len(), 2);
    let nodes: BTreeSet<&String> = ["train-0", "train-1"].iter().map(|p| &bound[*p]).collect();
    assert!(
        nodes == BTreeSet::from([&"n1".to_string(), &"n2".to_string()])
            || nodes == BTreeSet::from([&"n3".to_string(), &"n4".to_string()]),
        "one leaf: {nodes:?}"
    );
    // The binds show on the pods in the next cycle: the group is Scheduled.
    let (_, writes) = h.cycle();
    assert_eq!(
        upstream_writes(&writes),
        [("train".into(), "True".into(), "Scheduled".into())]
    );
}

#[test]
fn an_upstream_gang_that_cannot_fit_is_unschedulable_on_its_pod_group() {
    let mut w = World::dgx(2, 2);
    w.gangs
        .upstream_groups
        .push(upstream_group("big", json!({"gang": {"minCount": 3}})));
    for i in 0..3 {
        w.add(upstream_member("big", i, 8));
    }
    let mut h = Harness::new(w, Harness::no_preemption());
    let (_, writes) = h.cycle();
    assert!(binds(&writes).is_empty());
    assert_eq!(
        upstream_writes(&writes),
        [("big".into(), "False".into(), "Unschedulable".into())]
    );
    // Nothing changed: the same condition is not written again.
    let (_, writes) = h.cycle();
    assert!(upstream_writes(&writes).is_empty(), "{writes:?}");
}

#[test]
fn a_basic_policy_group_places_its_pods_one_by_one() {
    let mut w = World::dgx(2, 2);
    w.gangs
        .upstream_groups
        .push(upstream_group("svc", json!({"basic": {}})));
    w.add(upstream_member("svc", 0, 8));
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    assert_eq!(binds(&writes).len(), 1, "{:?}", report.outcomes);
}

#[test]
fn a_negative_min_count_holds_the_gang_and_names_the_field() {
    let mut w = World::dgx(2, 2);
    w.gangs
        .upstream_groups
        .push(upstream_group("bad", json!({"gang": {"minCount": -1}})));
    w.add(upstream_member("bad", 0, 8));
    w.add(pod("other", 8, None, 0));
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    let text = message(&report, "ml/bad-0");
    assert!(
        text.contains("spec.schedulingPolicy.gang.minCount is -1"),
        "{text}"
    );
    let bound: Vec<_> = binds(&writes);
    assert_eq!(bound.len(), 1, "everyone else is still served: {bound:?}");
}

#[test]
fn a_jobset_is_one_gang_sized_from_the_jobset_without_annotations() {
    let mut w = World::dgx(4, 2);
    let set: JobSet = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {"replicatedJobs": [{
            "name": "workers",
            "replicas": 2,
            "template": {"spec": {"parallelism": 1, "template": {"spec": {
                "schedulerName": "gputopo-scheduler", "containers": [{"name": "c"}]
            }}}}
        }]}
    }))
    .expect("a JobSet");
    w.gangs.jobsets.push(Arc::new(set));
    let member = |i: u32| {
        labelled(
            pod(&format!("llama-workers-{i}-0"), 8, None, 0),
            &[
                ("jobset.sigs.k8s.io/jobset-name", "llama"),
                ("jobset.sigs.k8s.io/replicatedjob-name", "workers"),
            ],
            &[],
        )
    };
    w.add(member(0));
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty());
    assert!(
        message(&report, "ml/llama-workers-0-0").contains("JobSet ml/llama: 1 of 2 members"),
        "{:?}",
        report.outcomes
    );
    h.world.add(member(1));
    let (_, writes) = h.cycle();
    assert_eq!(binds(&writes).len(), 2);
}

#[test]
fn a_leader_worker_set_group_is_one_gang() {
    let w = World::dgx(4, 2);
    let mut h = Harness::new(w, Harness::no_preemption());
    let member = |i: u32| {
        labelled(
            pod(&format!("vllm-0-{i}"), 8, None, 0),
            &[
                ("leaderworkerset.sigs.k8s.io/name", "vllm"),
                ("leaderworkerset.sigs.k8s.io/group-index", "0"),
            ],
            &[("leaderworkerset.sigs.k8s.io/size", "2")],
        )
    };
    h.world.add(member(0));
    let (_, writes) = h.cycle();
    assert!(binds(&writes).is_empty(), "the leader waits for its worker");
    h.world.add(member(1));
    let (_, writes) = h.cycle();
    assert_eq!(binds(&writes).len(), 2);
}

#[test]
fn a_scheduler_plugins_pod_group_gets_phase_and_counts() {
    let mut w = World::dgx(2, 2);
    w.gangs
        .pod_groups
        .push(Arc::new(pod_group("job", 2, Some(30))));
    for i in 0..2 {
        w.add(group_member("job", i, 8, 0));
    }
    let mut h = Harness::new(w, Harness::no_preemption());
    let statuses = |writes: &[Write]| -> Vec<(String, u32)> {
        writes
            .iter()
            .filter_map(|w| match w {
                Write::GangStatus(GangStatusWrite::SchedulerPlugins { status, .. }) => Some((
                    status.phase.clone().unwrap_or_default(),
                    status.scheduled.unwrap_or_default(),
                )),
                _ => None,
            })
            .collect()
    };
    let (_, writes) = h.cycle();
    assert_eq!(binds(&writes).len(), 2);
    // Written from the pods as the watch showed them: both pending.
    assert_eq!(statuses(&writes), [("PreScheduling".to_string(), 0)]);
    let (_, writes) = h.cycle();
    assert_eq!(statuses(&writes), [("Scheduled".to_string(), 2)]);
}
