//! The GPU predicates: MIG, per-GPU memory, single NUMA node, NVLink floor,
//! shared GPUs, nodes without a (trusted) topology.

use crate::common::*;
use crate::{fits, only_reason, verdicts, verdicts_with};
use gputopo_api::{GpuShare, LinkClass};
use gputopo_scheduler_core::config::{SchedulerConfig, TopologyManagerPolicy};
use gputopo_scheduler_core::filter::FilterReason;
use gputopo_scheduler_core::gpuset::NoFitReason;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::snapshot::{BoundPodInput, GpuHolding, NodeInput};

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
