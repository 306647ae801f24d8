//! The Kubernetes node predicates: resources, taints and tolerations,
//! unschedulable nodes, and `nodeName`.

use crate::common::*;
use crate::{fits, only_reason, verdicts};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::filter::FilterReason;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::selector::{Taint, TaintEffect, Toleration};
use gputopo_scheduler_core::snapshot::BoundPodInput;

#[test]
fn resources_each_short_resource_is_named() {
    let mut node = gpu_node("n", a100());
    node.allocatable = Resources::allocatable(
        [
            ("cpu", "4"),
            ("memory", "16Gi"),
            ("ephemeral-storage", "100Gi"),
            ("pods", "1"),
            ("nvidia.com/gpu", "8"),
            ("example.com/rdma", "1"),
        ],
        "t",
    )
    .unwrap();
    let mut busy = BoundPodInput::new("default", "busy", "n");
    busy.requests =
        Resources::from_list([("cpu", "3"), ("memory", "8Gi"), ("pods", "1")], "t").unwrap();
    let snap = snapshot(vec![node], vec![busy]);

    let mut p = pod(1, &[]);
    p.requests = Resources::from_list(
        [
            ("cpu", "2"),
            ("memory", "10Gi"),
            ("ephemeral-storage", "1Gi"),
            ("pods", "1"),
            ("nvidia.com/gpu", "1"),
            ("example.com/rdma", "2"),
            ("example.com/unknown", "1"),
        ],
        "t",
    )
    .unwrap();
    let reason = only_reason(&snap, &p);
    let FilterReason::Insufficient(short) = &reason else {
        panic!("{reason:?}");
    };
    let names: Vec<&str> = short.iter().map(|s| s.resource.as_str()).collect();
    assert_eq!(
        names,
        [
            "cpu",
            "memory",
            "pods",
            "example.com/rdma",
            "example.com/unknown"
        ]
    );
    assert_eq!((short[0].requested, short[0].free), (2000, 1000));
    assert_eq!(
        reason.summaries(),
        [
            "Insufficient cpu",
            "Insufficient memory",
            "Too many pods",
            "Insufficient example.com/rdma",
            "Insufficient example.com/unknown"
        ]
    );
    assert!(
        reason.to_string().contains("cpu: requested 2, free 1"),
        "{reason}"
    );

    // Within allocatable it fits; the GPU count is a resource too.
    let mut small = pod(1, &[]);
    small.requests = Resources::from_list([("cpu", "1"), ("nvidia.com/gpu", "1")], "t").unwrap();
    let snap = snapshot(vec![gpu_node("n", a100())], vec![]);
    assert!(fits(&snap, &small));
    small.requests.gpus = 9;
    assert_eq!(
        only_reason(&snap, &small).summaries(),
        ["Insufficient nvidia.com/gpu"]
    );
}

#[test]
fn taints_block_unless_tolerated() {
    let tainted = |name: &str, taints: Vec<Taint>| {
        let mut n = gpu_node(name, a100());
        n.taints = taints;
        n
    };
    let gpu = Taint::new("nvidia.com/gpu", "present", TaintEffect::NoSchedule);
    let drain = Taint::new("drain", "", TaintEffect::NoExecute);
    let soft = Taint::new("soft", "", TaintEffect::PreferNoSchedule);
    let snap = snapshot(
        vec![
            tainted("a-noschedule", vec![gpu.clone()]),
            tainted("b-noexecute", vec![drain.clone()]),
            tainted("c-prefer", vec![soft]),
        ],
        vec![],
    );
    let rows = |tolerations: Vec<Toleration>| {
        let mut p = pod(1, &[]);
        p.tolerations = tolerations;
        verdicts(&snap, &p)
    };
    let v = rows(vec![]);
    assert_eq!(v[0].1, Some(FilterReason::UntoleratedTaint(gpu.clone())));
    assert_eq!(
        v[0].1.as_ref().unwrap().summaries(),
        ["node(s) had untolerated taint {nvidia.com/gpu: present}"]
    );
    assert_eq!(v[1].1, Some(FilterReason::UntoleratedTaint(drain.clone())));
    assert_eq!(v[2].1, None, "PreferNoSchedule only scores");

    let v = rows(vec![Toleration::equal(
        "nvidia.com/gpu",
        "present",
        Some(TaintEffect::NoSchedule),
    )]);
    assert_eq!(v[0].1, None);
    assert!(v[1].1.is_some());
    let v = rows(vec![Toleration::equal("nvidia.com/gpu", "absent", None)]);
    assert!(v[0].1.is_some(), "a different value is not tolerated");
    let v = rows(vec![Toleration::exists(
        "nvidia.com/gpu",
        Some(TaintEffect::NoExecute),
    )]);
    assert!(v[0].1.is_some(), "a different effect is not tolerated");
    let v = rows(vec![Toleration::exists("drain", None)]);
    assert_eq!(v[1].1, None);
    let v = rows(vec![Toleration::everything()]);
    assert!(
        v.iter().all(|(_, r)| r.is_none()),
        "empty key + Exists tolerates all"
    );
}

#[test]
fn unschedulable_nodes_need_the_toleration() {
    let mut n = gpu_node("n", a100());
    n.unschedulable = true;
    let snap = snapshot(vec![n], vec![]);
    let mut p = pod(1, &[]);
    assert_eq!(only_reason(&snap, &p), FilterReason::Unschedulable);
    assert_eq!(
        only_reason(&snap, &p).summaries(),
        ["node(s) were unschedulable"]
    );
    p.tolerations = vec![Toleration::exists(
        "node.kubernetes.io/unschedulable",
        Some(TaintEffect::NoSchedule),
    )];
    assert!(fits(&snap, &p));
}

#[test]
fn node_name_pins_the_pod() {
    let snap = snapshot(vec![gpu_node("a", a100()), gpu_node("b", a100())], vec![]);
    let mut p = pod(1, &[]);
    p.node_name = Some("b".into());
    let v = verdicts(&snap, &p);
    assert_eq!(
        v[0].1,
        Some(FilterReason::NodeName {
            requested: "b".into()
        })
    );
    assert_eq!(v[1].1, None);
    let d = schedule(&snap, &p, &SchedulerConfig::default());
    assert_eq!(d.placement().unwrap().node, "b");
}
