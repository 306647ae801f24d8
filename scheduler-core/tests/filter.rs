//! One test per filter predicate, the aggregated message's exact format, and
//! the compiled selector checked against the reference string matcher.

mod common;

use common::*;
use gputopo_api::{GpuShare, LinkClass};
use gputopo_scheduler_core::config::{SchedulerConfig, TopologyManagerPolicy};
use gputopo_scheduler_core::filter::FilterReason;
use gputopo_scheduler_core::gpuset::NoFitReason;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::schedule::{Decision, failed_scheduling_message, schedule};
use gputopo_scheduler_core::selector::{
    LabelRequirement, NameRequirement, NodeAffinity, SelectorOperator, SelectorTerm, Taint,
    TaintEffect, Toleration,
};
use gputopo_scheduler_core::snapshot::{BoundPodInput, GpuHolding, NodeInput, Snapshot};

/// The reason each node was rejected, or `None` for the node the pod went to.
fn verdicts(snapshot: &Snapshot, pod: &PendingPod) -> Vec<(String, Option<FilterReason>)> {
    verdicts_with(snapshot, pod, &SchedulerConfig::default())
}

fn verdicts_with(
    snapshot: &Snapshot,
    pod: &PendingPod,
    config: &SchedulerConfig,
) -> Vec<(String, Option<FilterReason>)> {
    let explanation = gputopo_scheduler_core::explain::explain(snapshot, pod, config);
    let mut rows: Vec<(String, Option<FilterReason>)> = explanation
        .rows
        .into_iter()
        .map(|r| (r.node, r.filter_reason))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

fn only_reason(snapshot: &Snapshot, pod: &PendingPod) -> FilterReason {
    let v = verdicts(snapshot, pod);
    assert_eq!(v.len(), 1);
    v[0].1.clone().expect("the node should be rejected")
}

fn fits(snapshot: &Snapshot, pod: &PendingPod) -> bool {
    matches!(
        schedule(snapshot, pod, &SchedulerConfig::default()),
        Decision::Placed(_)
    )
}

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
fn node_selector_must_match_every_pair() {
    let mut n = gpu_node("n", a100());
    n.labels.insert("pool".into(), "train".into());
    n.labels.insert("zone".into(), "a".into());
    let snap = snapshot(vec![n], vec![]);
    let mut p = pod(1, &[]);
    p.node_selector = labels(&[("pool", "train"), ("zone", "a")]);
    assert!(fits(&snap, &p));
    p.node_selector = labels(&[("pool", "train"), ("zone", "b")]);
    assert_eq!(only_reason(&snap, &p), FilterReason::NodeAffinity);
    p.node_selector = labels(&[("never-seen-key", "x")]);
    assert_eq!(
        only_reason(&snap, &p).summaries(),
        ["node(s) didn't match Pod's node affinity/selector"]
    );
}

fn term(reqs: Vec<LabelRequirement>) -> SelectorTerm {
    SelectorTerm {
        labels: reqs,
        fields: vec![],
    }
}

fn req(key: &str, operator: SelectorOperator) -> LabelRequirement {
    LabelRequirement {
        key: key.into(),
        operator,
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn affinity_operators() {
    let mut n = gpu_node("gpu-1", a100());
    n.labels.insert("tier".into(), "gold".into());
    n.labels.insert("gpus".into(), "8".into());
    let snap = snapshot(vec![n], vec![]);
    let check = |terms: Vec<SelectorTerm>, expect: bool| {
        let mut p = pod(1, &[]);
        p.affinity = Some(NodeAffinity { terms });
        assert_eq!(fits(&snap, &p), expect, "{:?}", p.affinity);
    };
    use SelectorOperator::*;
    check(
        vec![term(vec![req("tier", In(strings(&["gold", "silver"])))])],
        true,
    );
    check(
        vec![term(vec![req("tier", In(strings(&["silver"])))])],
        false,
    );
    check(
        vec![term(vec![req("tier", NotIn(strings(&["silver"])))])],
        true,
    );
    check(
        vec![term(vec![req("tier", NotIn(strings(&["gold"])))])],
        false,
    );
    check(
        vec![term(vec![req("absent", NotIn(strings(&["x"])))])],
        true,
    );
    check(vec![term(vec![req("tier", Exists)])], true);
    check(vec![term(vec![req("absent", Exists)])], false);
    check(vec![term(vec![req("absent", DoesNotExist)])], true);
    check(vec![term(vec![req("tier", DoesNotExist)])], false);
    check(vec![term(vec![req("gpus", Gt(4))])], true);
    check(vec![term(vec![req("gpus", Gt(8))])], false);
    check(vec![term(vec![req("gpus", Lt(9))])], true);
    check(vec![term(vec![req("gpus", Lt(8))])], false);
    check(vec![term(vec![req("tier", Gt(1))])], false); // not an integer
    // Expressions in a term are ANDed; terms are ORed.
    check(
        vec![term(vec![req("tier", Exists), req("gpus", Gt(8))])],
        false,
    );
    check(
        vec![
            term(vec![req("gpus", Gt(8))]),
            term(vec![req("tier", In(strings(&["gold"])))]),
        ],
        true,
    );
    // An empty term and an empty term list match nothing.
    check(vec![SelectorTerm::default()], false);
    check(vec![], false);
    // matchFields metadata.name.
    let names = |within, n: &[&str]| SelectorTerm {
        labels: vec![],
        fields: vec![NameRequirement {
            within,
            names: strings(n),
        }],
    };
    check(vec![names(true, &["gpu-1"])], true);
    check(vec![names(true, &["gpu-2"])], false);
    check(vec![names(false, &["gpu-1"])], false);
    check(vec![names(false, &["gpu-2"])], true);
}

/// The filter's compiled matcher agrees with the reference on random labels and terms.
#[test]
fn compiled_affinity_agrees_with_reference() {
    let keys = ["a", "b", "c"];
    let values = ["1", "2", "10", "x"];
    let mut rng = Rng(7);
    let mut nodes = Vec::new();
    for i in 0..24 {
        let mut n = gpu_node(&format!("n{i:02}"), a100());
        for k in keys {
            if rng.below(3) > 0 {
                n.labels
                    .insert(k.into(), values[rng.below(4) as usize].into());
            }
        }
        nodes.push(n);
    }
    let snap = snapshot(nodes.clone(), vec![]);
    for _ in 0..300 {
        let mut terms = Vec::new();
        for _ in 0..=rng.below(2) {
            let mut reqs = Vec::new();
            for _ in 0..=rng.below(2) {
                let key = keys[rng.below(3) as usize];
                let some = |rng: &mut Rng| {
                    (0..=rng.below(2))
                        .map(|_| values[rng.below(4) as usize].to_string())
                        .collect::<Vec<_>>()
                };
                let op = match rng.below(6) {
                    0 => SelectorOperator::In(some(&mut rng)),
                    1 => SelectorOperator::NotIn(some(&mut rng)),
                    2 => SelectorOperator::Exists,
                    3 => SelectorOperator::DoesNotExist,
                    4 => SelectorOperator::Gt(rng.below(5) as i64),
                    _ => SelectorOperator::Lt(rng.below(5) as i64),
                };
                reqs.push(req(key, op));
            }
            terms.push(term(reqs));
        }
        let affinity = NodeAffinity { terms };
        let mut p = pod(1, &[]);
        p.affinity = Some(affinity.clone());
        for (name, reason) in verdicts(&snap, &p) {
            let node = nodes.iter().find(|n| n.name == name).unwrap();
            let expected = affinity.matches(&node.name, &node.labels);
            assert_eq!(reason.is_none(), expected, "{name} {affinity:?}");
        }
    }
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

#[test]
fn mig_gpus_only_for_pods_asking_for_mig() {
    let spec = spec_with(
        8,
        |_, _| LinkClass::Nv(12),
        |i| Gpu {
            numa: Some(0),
            memory_mib: Some(81_920),
            mig: i >= 4,
        },
    );
    let mut node = gpu_node("n", spec);
    node.allocatable.set("nvidia.com/mig-1g.10gb", 28);
    let snap = snapshot(vec![node], vec![]);
    let p = pod(6, &[]);
    assert_eq!(
        only_reason(&snap, &p),
        FilterReason::GpuSet(NoFitReason::MigEnabled {
            requested: 6,
            usable: 4
        })
    );
    assert!(fits(&snap, &pod(4, &[])));
    let mut mig = pod(6, &[]);
    mig.requests.set("nvidia.com/mig-1g.10gb", 1);
    assert!(fits(&snap, &mig));
}

#[test]
fn gpu_memory_is_per_gpu() {
    let spec = spec_with(
        8,
        |_, _| LinkClass::Nv(12),
        |i| Gpu {
            numa: Some(0),
            memory_mib: Some(if i < 2 { 81_920 } else { 40_960 }),
            mig: false,
        },
    );
    let snap = snapshot(vec![gpu_node("n", spec)], vec![]);
    assert!(fits(&snap, &pod(2, &[("gputopo.dev/gpu-memory", "80Gi")])));
    let r = only_reason(&snap, &pod(4, &[("gputopo.dev/gpu-memory", "80Gi")]));
    assert_eq!(
        r,
        FilterReason::GpuSet(NoFitReason::InsufficientMemory {
            requested: 4,
            min_memory_mib: 81_920,
            eligible: 2
        })
    );
    assert_eq!(r.summaries(), ["too few free GPUs with 81920 MiB"]);
}

#[test]
fn single_numa_node_policy_from_label_or_default() {
    let mut labelled = gpu_node("labelled", a100());
    labelled.labels.insert(
        "gputopo.dev/topology-manager-policy".into(),
        "single-numa-node".into(),
    );
    let plain = gpu_node("plain", a100());
    let snap = snapshot(vec![labelled, plain], vec![]);
    let v = verdicts(&snap, &pod(6, &[]));
    assert_eq!(
        v[0].1,
        Some(FilterReason::GpuSet(NoFitReason::SingleNumaNode {
            requested: 6,
            largest_group: 4
        }))
    );
    assert_eq!(v[1].1, None);
    let d = schedule(&snap, &pod(4, &[]), &SchedulerConfig::default());
    assert!(d.placement().is_some());

    let config = SchedulerConfig {
        default_topology_manager_policy: TopologyManagerPolicy::SingleNumaNode,
        ..SchedulerConfig::default()
    };
    let v = verdicts_with(&snap, &pod(6, &[]), &config);
    assert!(v.iter().all(|(_, r)| r.is_some()), "{v:?}");
    // A 4-GPU set on a single-numa-node node lies in one NUMA node.
    let d = schedule(&snap, &pod(4, &[]), &config);
    let gpus = &d.placement().unwrap().gpus;
    assert!(gpus.iter().all(|&g| g / 4 == gpus[0] / 4), "{gpus:?}");
}

#[test]
fn min_nvlink_level_is_hard() {
    let snap = snapshot(vec![gpu_node("dgx1", dgx1())], vec![]);
    let r = only_reason(&snap, &pod(4, &[("gputopo.dev/min-nvlink-level", "NV2")]));
    assert_eq!(r.summaries(), ["no 4-GPU set with NV2"]);
    // Pairs with NV2 exist.
    let d = schedule(
        &snap,
        &pod(2, &[("gputopo.dev/min-nvlink-level", "2")]),
        &SchedulerConfig::default(),
    );
    assert_eq!(d.placement().unwrap().bottleneck, Some(LinkClass::Nv(2)));
}

fn sharer(name: &str, node: &str, gpu: u32, share: GpuShare) -> BoundPodInput {
    let mut p = BoundPodInput::new("default", name, node);
    p.holding = GpuHolding::Shared {
        gpu: Some(gpu),
        share,
    };
    p
}

#[test]
fn shared_pods_fit_within_capacity_and_never_on_whole_gpus() {
    let spec = spec_with(
        2,
        |_, _| LinkClass::Nv(4),
        |_| Gpu {
            numa: Some(0),
            memory_mib: Some(40_960),
            mig: false,
        },
    );
    // GPU 0 held whole; GPU 1 has 0.6 in shared use.
    let snap = snapshot(
        vec![gpu_node("n", spec.clone())],
        vec![
            holder("whole", "n", &[0], None),
            sharer("s1", "n", 1, GpuShare::Milli(600)),
        ],
    );
    let d = schedule(
        &snap,
        &pod(0, &[("gputopo.dev/gpu-share", "0.4")]),
        &SchedulerConfig::default(),
    );
    let placed = d.placement().expect("0.4 fits next to 0.6");
    assert_eq!(placed.gpus, [1]);
    assert_eq!(placed.shared.unwrap().milli, 400);

    let r = only_reason(&snap, &pod(0, &[("gputopo.dev/gpu-share", "0.5")]));
    assert_eq!(r.summaries(), ["no GPU with room for a 0.5 share"]);
    assert!(r.to_string().contains("0.4"), "{r}");
    // Memory: 20 GiB on top of 0.6·40 GiB = 24 GiB exceeds 40 GiB.
    let r = only_reason(&snap, &pod(0, &[("gputopo.dev/gpu-share", "20Gi")]));
    assert_eq!(r.summaries(), ["no GPU with 20480 MiB free to share"]);
    assert!(fits(&snap, &pod(0, &[("gputopo.dev/gpu-share", "16Gi")])));

    // A whole-GPU pod cannot take a GPU in shared use.
    let r = only_reason(&snap, &pod(1, &[]));
    assert_eq!(
        r,
        FilterReason::GpuSet(NoFitReason::TooFewFreeGpus {
            requested: 1,
            free: 0
        })
    );
}

#[test]
fn nodes_without_topology() {
    let mut bare = NodeInput {
        name: "bare".into(),
        allocatable: Resources::allocatable([("nvidia.com/gpu", "4")], "t").unwrap(),
        ..NodeInput::default()
    };
    bare.labels = labels(&[("x", "y")]);
    let cpu_only = NodeInput {
        name: "cpu".into(),
        ..NodeInput::default()
    };
    let mut bad = gpu_node("broken", a100());
    if let Some(t) = bad.topology.as_mut() {
        t.make_mut().links[0].b = 40; // a link to a GPU the node does not list
    }
    let snap = snapshot(
        vec![bare, cpu_only, bad],
        vec![holder("h", "bare", &[0], None)],
    );
    assert_eq!(snap.warnings().len(), 1, "{:?}", snap.warnings());

    let v = verdicts(&snap, &pod(2, &[]));
    assert_eq!(v[0].1, None, "bare node takes plain whole-GPU pods");
    assert!(
        matches!(v[1].1, Some(FilterReason::InvalidTopology(_))),
        "{v:?}"
    );
    assert_eq!(
        v[2].1.as_ref().unwrap().summaries(),
        ["Insufficient nvidia.com/gpu"]
    );
    let d = schedule(&snap, &pod(2, &[]), &SchedulerConfig::default());
    let p = d.placement().unwrap();
    assert_eq!((p.node.as_str(), p.gpus.as_slice()), ("bare", &[1, 2][..]));
    assert!(!p.topology_known && p.bottleneck.is_none());

    let v = verdicts(&snap, &pod(2, &[("gputopo.dev/min-nvlink-level", "2")]));
    assert_eq!(
        v[0].1,
        Some(FilterReason::UnknownTopology {
            needs: "min-nvlink-level"
        })
    );
    // A CPU pod goes anywhere with room.
    assert!(
        verdicts(&snap, &pod(0, &[]))
            .iter()
            .all(|(_, r)| r.is_none())
    );
}

#[test]
fn aggregated_message_counts_reasons_like_kube_scheduler() {
    let mut nodes = Vec::new();
    let mut pods = Vec::new();
    for i in 0..40 {
        let name = format!("a100-{i:02}");
        nodes.push(gpu_node(&name, a100()));
        pods.push(holder(
            &format!("busy-{i}"),
            &name,
            &[0, 1, 2, 3, 4, 5],
            None,
        ));
    }
    for i in 0..24 {
        nodes.push(gpu_node(&format!("dgx1-{i:02}"), dgx1()));
    }
    let snap = snapshot(nodes, pods);
    let d = schedule(
        &snap,
        &pod(4, &[("gputopo.dev/min-nvlink-level", "NV12")]),
        &SchedulerConfig::default(),
    );
    let u = d.unschedulable().expect("nothing fits");
    assert_eq!(
        u.message,
        "0/64 nodes are available: 40 too few free GPUs, 24 no 4-GPU set with NV12."
    );
    assert_eq!(u.rejections.len(), 64);

    // Equal counts order by text; one node counts once per short resource.
    let reasons = [
        FilterReason::NodeAffinity,
        FilterReason::Unschedulable,
        FilterReason::GpuSet(NoFitReason::TooFewFreeGpus {
            requested: 1,
            free: 0,
        }),
    ];
    assert_eq!(
        failed_scheduling_message(3, &reasons),
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were unschedulable, 1 too few free GPUs."
    );
    assert_eq!(
        failed_scheduling_message(0, &[]),
        "no nodes available to schedule pods"
    );
}

/// A node whose `GpuTopology` claims absurd NVLink counts (a compromised
/// agent, or anyone who may write the object) neither panics the
/// scheduler nor wins: its topology is refused with the reason, and the
/// other nodes score exactly as they would without it.
#[test]
fn a_node_lying_about_its_nvlinks_is_not_trusted_and_changes_no_other_score() {
    let honest = || vec![gpu_node("a100-1", a100()), gpu_node("dgx1", dgx1())];
    let mut liar = gpu_node("liar", a100());
    if let Some(t) = liar.topology.as_mut() {
        for link in &mut t.make_mut().links {
            link.link_type = gputopo_api::LinkType::Nv;
            link.nvlinks = u32::MAX;
        }
    }
    let with_liar = snapshot([honest(), vec![liar]].concat(), vec![]);
    let without = snapshot(honest(), vec![]);
    assert!(
        with_liar
            .warnings()
            .iter()
            .any(|w| w.to_string().contains("claims NV4294967295")),
        "{:?}",
        with_liar.warnings()
    );
    let request = pod(4, &[]);
    let v = verdicts(&with_liar, &request);
    let liar_verdict = v.iter().find(|(n, _)| n == "liar").expect("the liar node");
    assert!(
        matches!(&liar_verdict.1, Some(FilterReason::InvalidTopology(e)) if e.to_string().contains("not trusted")),
        "{v:?}"
    );
    let config = SchedulerConfig::default();
    let a = schedule(&with_liar, &request, &config);
    let b = schedule(&without, &request, &config);
    let (a, b) = (
        a.placement().expect("placed"),
        b.placement().expect("placed"),
    );
    assert_ne!(a.node, "liar");
    assert_eq!((&a.node, &a.gpus, a.score), (&b.node, &b.gpus, b.score));
}
