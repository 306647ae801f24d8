//! Gangs with structure through `schedule_gang`: the constraints and ranks
//! read from the members' own annotations (Kueue TAS's and gputopo's), put
//! on the snapshot's network tiers (docs/contract/gang-structure.md).

mod common;

use common::{labels, snapshot};
use gputopo_api::GpuRequest;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::gang_schedule::{GangDecision, schedule_gang};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::Placement;
use gputopo_scheduler_core::snapshot::NodeInput;
use std::collections::{BTreeMap, BTreeSet};

fn fabric() -> Vec<NodeInput> {
    common::spine_leaf_fabric()
}

/// A JobSet-like gang: `jobs` Jobs of `per_job` pods of `gpus` GPUs, each
/// pod with its job and completion index, and `extra` annotations. Returned
/// in a shuffled order (names do not sort by rank).
fn jobset(jobs: u32, per_job: u32, gpus: u32, extra: &[(&str, &str)]) -> Vec<PendingPod> {
    let size = (jobs * per_job).to_string();
    let mut pods = Vec::new();
    for j in 0..jobs {
        for c in 0..per_job {
            let mut annotations: Vec<(&str, &str)> = vec![
                ("gputopo.dev/gang", "train"),
                ("gputopo.dev/gang-size", &size),
            ];
            annotations.extend_from_slice(extra);
            let job = j.to_string();
            let completion = c.to_string();
            let pod_labels = labels(&[
                ("jobset.sigs.k8s.io/job-index", &job),
                ("batch.kubernetes.io/job-completion-index", &completion),
            ]);
            let request =
                GpuRequest::parse(Some(gpus), &labels(&annotations), &pod_labels).expect("valid");
            // Names that sort against the rank: z-0-0 ranks first.
            let name = format!("{}-{j}-{c}", (b'z' - (j * per_job + c) as u8) as char);
            pods.push(PendingPod::new("train", &name, request));
        }
    }
    pods.reverse();
    pods
}

fn placed(d: GangDecision) -> Vec<Placement> {
    match d {
        GangDecision::Placed(p) => p,
        GangDecision::Waiting { message } => panic!("gang waits: {message}"),
    }
}

fn waits(d: GangDecision) -> String {
    match d {
        GangDecision::Placed(p) => panic!("placed: {}", p[0].explanation),
        GangDecision::Waiting { message } => message,
    }
}

fn leaf(node: &str) -> String {
    node.rsplit_once("-n")
        .map(|(l, _)| l.to_string())
        .unwrap_or_default()
}

/// (job index, completion index) of a member, from its name.
fn rank(pod: &PendingPod) -> (u32, u32) {
    let mut parts = pod.name.split('-').skip(1);
    let j = parts.next().unwrap().parse().unwrap();
    let c = parts.next().unwrap().parse().unwrap();
    (j, c)
}

#[test]
fn kueue_slices_on_hostname_keep_each_pair_of_ranks_on_one_node() {
    let snap = snapshot(fabric(), vec![]);
    // 2 Jobs of 4 pods of 4 GPUs: slices of 2 per node, the gang in one leaf.
    let members = jobset(
        2,
        4,
        4,
        &[
            (
                "kueue.x-k8s.io/podset-required-topology",
                "gputopo.dev/leaf",
            ),
            (
                "kueue.x-k8s.io/podset-slice-required-topology",
                "kubernetes.io/hostname",
            ),
            ("kueue.x-k8s.io/podset-slice-size", "2"),
        ],
    );
    let p = placed(schedule_gang(&snap, &members, &SchedulerConfig::default()));
    let by_rank: BTreeMap<(u32, u32), &Placement> = members.iter().map(rank).zip(&p).collect();
    let nodes: Vec<&str> = by_rank.values().map(|p| p.node.as_str()).collect();
    for pair in nodes.chunks(2) {
        assert_eq!(pair[0], pair[1], "ranks in order: {nodes:?}");
    }
    let leaves: BTreeSet<String> = nodes.iter().map(|n| leaf(n)).collect();
    assert_eq!(leaves.len(), 1, "{nodes:?}");
    assert!(
        p[0].explanation.contains("required: one leaf"),
        "{}",
        p[0].explanation
    );
    assert!(
        p[0].explanation
            .contains("slices of 2 each in one hostname (required): held"),
        "{}",
        p[0].explanation
    );
}

#[test]
fn consecutive_ranks_fill_a_node_before_the_next() {
    let snap = snapshot(fabric(), vec![]);
    let members = jobset(1, 4, 4, &[]);
    let p = placed(schedule_gang(&snap, &members, &SchedulerConfig::default()));
    let by_rank: BTreeMap<(u32, u32), &Placement> = members.iter().map(rank).zip(&p).collect();
    let nodes: Vec<&str> = by_rank.values().map(|p| p.node.as_str()).collect();
    assert_eq!(nodes[0], nodes[1], "{nodes:?}");
    assert_eq!(nodes[2], nodes[3], "{nodes:?}");
}

#[test]
fn a_preferred_tier_named_by_its_short_name_falls_back_to_the_spine() {
    let snap = snapshot(fabric(), vec![]);
    // 6 whole nodes: no leaf (4 nodes) holds them, a spine (8) does.
    let members = jobset(1, 6, 8, &[("gputopo.dev/gang-preferred-topology", "leaf")]);
    let p = placed(schedule_gang(&snap, &members, &SchedulerConfig::default()));
    assert!(
        p[0].explanation
            .contains("preferred one leaf: none had room, held at one spine"),
        "{}",
        p[0].explanation
    );
}

#[test]
fn a_required_leaf_without_room_keeps_the_gang_waiting_naming_the_leaf() {
    let snap = snapshot(fabric(), vec![]);
    let members = jobset(
        1,
        5,
        8,
        &[(
            "kueue.x-k8s.io/podset-required-topology",
            "gputopo.dev/leaf",
        )],
    );
    let message = waits(schedule_gang(&snap, &members, &SchedulerConfig::default()));
    assert!(message.contains("all in one leaf"), "{message}");
    assert!(
        message.contains("the most under one leaf is 4"),
        "{message}"
    );
}

#[test]
fn a_label_that_is_no_tier_is_refused_naming_the_tiers() {
    let snap = snapshot(fabric(), vec![]);
    let members = jobset(
        1,
        2,
        8,
        &[(
            "kueue.x-k8s.io/podset-required-topology",
            "example.com/rack",
        )],
    );
    let message = waits(schedule_gang(&snap, &members, &SchedulerConfig::default()));
    assert!(message.contains("example.com/rack"), "{message}");
    assert!(
        message.contains("gputopo.dev/spine, gputopo.dev/leaf"),
        "{message}"
    );
}

#[test]
fn members_stating_different_structures_are_refused_naming_both() {
    let snap = snapshot(fabric(), vec![]);
    let mut members = jobset(
        1,
        2,
        8,
        &[("gputopo.dev/gang-required-topology", "gputopo.dev/leaf")],
    );
    let other = jobset(
        1,
        2,
        8,
        &[("gputopo.dev/gang-required-topology", "gputopo.dev/spine")],
    );
    members[1] = other[1].clone();
    let message = waits(schedule_gang(&snap, &members, &SchedulerConfig::default()));
    assert!(message.contains("state different structures"), "{message}");
    assert!(message.contains("required gputopo.dev/leaf"), "{message}");
    assert!(message.contains("required gputopo.dev/spine"), "{message}");
}
