//! Gangs with structure through the cycle (docs/contract/gang-structure.md):
//! the upstream PodGroup's topology constraint, Kueue TAS annotations on
//! the members, and a replacement member sent to its slice's domain.

use super::fixtures::{World, pod};
use super::{Harness, binds, message};
use crate::gangs::UpstreamPodGroup;
use k8s_openapi::api::core::v1::{Pod, PodSchedulingGroup};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;

fn member(group: &str, i: u32, gpus: u32, annotations: &[(&str, &str)]) -> Pod {
    let mut p = pod(&format!("{group}-{i}"), gpus, None, 0);
    p.spec.get_or_insert_default().scheduling_group = Some(PodSchedulingGroup {
        pod_group_name: Some(group.into()),
    });
    let a = p.metadata.annotations.get_or_insert_default();
    for (k, v) in annotations {
        a.insert(k.to_string(), v.to_string());
    }
    p.metadata.labels.get_or_insert_default().insert(
        "batch.kubernetes.io/job-completion-index".into(),
        i.to_string(),
    );
    p
}

fn group(name: &str, min: u32, topology: Option<&str>) -> Arc<UpstreamPodGroup> {
    let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": min}}});
    if let Some(key) = topology {
        spec["schedulingConstraints"] = json!({"topology": [{"key": key}]});
    }
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml", "resourceVersion": "1", "generation": 1},
            "spec": spec
        }))
        .expect("an upstream PodGroup"),
    )
}

#[test]
fn a_pod_groups_topology_constraint_keeps_the_gang_in_one_leaf_or_waiting() {
    // Two leaves of three DGX A100.
    let mut w = World::dgx(6, 3);
    w.gangs
        .upstream_groups
        .push(group("big", 4, Some("gputopo.dev/leaf")));
    w.gangs
        .upstream_groups
        .push(group("fits", 3, Some("gputopo.dev/leaf")));
    for i in 0..4 {
        w.add(member("big", i, 8, &[]));
    }
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty());
    let text = message(&report, "ml/big-0");
    assert!(text.contains("all in one leaf"), "{text}");
    assert!(text.contains("the most under one leaf is 3"), "{text}");

    for i in 0..3 {
        h.world.add(member("fits", i, 8, &[]));
    }
    let (_, writes) = h.cycle();
    let bound = h.bound();
    let leaves: BTreeSet<bool> = (0..3)
        .map(|i| ["n1", "n2", "n3"].contains(&bound[&format!("fits-{i}")].as_str()))
        .collect();
    assert_eq!(binds(&writes).len(), 3);
    assert_eq!(leaves.len(), 1, "one leaf: {bound:?}");
}

#[test]
fn a_member_stating_another_domain_than_its_pod_group_waits_naming_both() {
    let mut w = World::dgx(2, 2);
    w.gangs
        .upstream_groups
        .push(group("train", 2, Some("gputopo.dev/leaf")));
    w.add(member("train", 0, 8, &[]));
    w.add(member(
        "train",
        1,
        8,
        &[(
            "kueue.x-k8s.io/podset-required-topology",
            "gputopo.dev/spine",
        )],
    ));
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    assert!(binds(&writes).is_empty());
    let text = message(&report, "ml/train-0");
    assert!(
        text.contains("requires one domain of gputopo.dev/leaf"),
        "{text}"
    );
    assert!(text.contains("required gputopo.dev/spine"), "{text}");
}

#[test]
fn a_replacement_member_goes_to_its_slices_node() {
    let slices = [
        (
            "kueue.x-k8s.io/podset-slice-required-topology",
            "kubernetes.io/hostname",
        ),
        ("kueue.x-k8s.io/podset-slice-size", "2"),
    ];
    let mut w = World::dgx(3, 3);
    for node in &mut w.nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        Arc::make_mut(node)
            .metadata
            .labels
            .get_or_insert_default()
            .insert("kubernetes.io/hostname".into(), name);
    }
    // n1 half used: no slice of two fits there, but a lone member would.
    w.add(pod("other", 4, Some("n1"), 0));
    w.gangs.upstream_groups.push(group("tp", 4, None));
    for i in 0..4 {
        w.add(member("tp", i, 4, &slices));
    }
    let mut h = Harness::new(w, Harness::no_preemption());
    let (report, writes) = h.cycle();
    assert_eq!(binds(&writes).len(), 4, "{:?}", report.outcomes);
    let bound = h.bound();
    assert_eq!(bound["tp-0"], bound["tp-1"], "{bound:?}");
    assert_eq!(bound["tp-2"], bound["tp-3"], "{bound:?}");
    let slice_node = bound["tp-0"].clone();
    assert_ne!(slice_node, "n1");

    // Rank 1 dies; its Job makes a replacement with the same index.
    h.world.remove("tp-1");
    let mut again = member("tp", 1, 4, &slices);
    again.metadata.name = Some("tp-1-again".into());
    again.metadata.uid = Some("uid-tp-1-again".into());
    h.world.add(again);
    h.cycle.cluster_changed();
    let (report, writes) = h.cycle();
    assert_eq!(binds(&writes).len(), 1, "{:?}", report.outcomes);
    assert_eq!(h.bound()["tp-1-again"], slice_node);
}
