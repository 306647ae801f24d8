//! Cost-aware preemption: one test per rule, and "frees a usable set, not a count".

mod common;

use gputopo_api::{Collective, GpuTopologySpec, LinkClass, WorkloadKind};
use gputopo_scheduler_core::gang::{GangNode, Within};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use gputopo_scheduler_core::preempt::{
    Pass, PreemptCluster, PreemptNoFit, PreemptNode, PreemptionPolicy, Preemptor, Proposal, Victim,
    propose,
};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

// ---------------------------------------------------------------------------
// Shapes, clusters, pods
// ---------------------------------------------------------------------------

/// `n` GPUs of 80 GiB, the first half on NUMA node 0, the rest on 1.
fn spec(n: u32, class: impl Fn(u32, u32) -> LinkClass) -> GpuTopologySpec {
    common::spec_with(n, class, |i| common::Gpu {
        numa: Some(i32::from(i >= n / 2)),
        memory_mib: Some(81_920),
        mig: false,
    })
}

/// 8 GPUs, NV12 between every pair.
fn nv12() -> Arc<NodeShape> {
    Arc::new(NodeShape::from_spec(&spec(8, |_, _| LinkClass::Nv(12))).expect("valid shape"))
}

/// Two NVLink islands of four: NV12 inside {0..3} and {4..7}, SYS across.
fn two_quads() -> Arc<NodeShape> {
    let class = |a: u32, b: u32| {
        if a / 4 == b / 4 {
            LinkClass::Nv(12)
        } else {
            LinkClass::Sys
        }
    };
    Arc::new(NodeShape::from_spec(&spec(8, class)).expect("valid shape"))
}

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn minutes_ago(m: u64) -> SystemTime {
    now() - Duration::from_secs(m * 60)
}

fn in_minutes(m: u64) -> SystemTime {
    now() + Duration::from_secs(m * 60)
}

/// A training pod that checkpointed `checkpoint` minutes ago (started long before).
fn training(id: usize, gpus: u32, checkpoint: u64) -> Victim {
    Victim {
        id,
        name: format!("ml/train-{id}"),
        priority: 0,
        workload: Some(WorkloadKind::Training),
        gpus,
        start: minutes_ago(24 * 60),
        checkpoint: Some(minutes_ago(checkpoint)),
        expected_completion: None,
        gang: None,
    }
}

fn inference(id: usize, gpus: u32) -> Victim {
    Victim {
        id,
        name: format!("serve/infer-{id}"),
        priority: 0,
        workload: Some(WorkloadKind::Inference),
        gpus,
        start: minutes_ago(600),
        checkpoint: None,
        expected_completion: None,
        gang: None,
    }
}

/// One leaf per node under one spine; node `i` runs `pods[i]`, its other GPUs free.
fn cluster(shape: &Arc<NodeShape>, pods: Vec<Vec<Victim>>) -> PreemptCluster {
    let nodes = pods
        .into_iter()
        .enumerate()
        .map(|(i, victims)| {
            let held = victims.iter().fold(0, |m, v| m | v.gpus);
            PreemptNode {
                node: GangNode::new(
                    i,
                    vec![Some("spine-0".into()), Some(format!("leaf-{i}"))],
                    Arc::clone(shape),
                    0xff & !held,
                ),
                victims,
                required: Vec::new(),
            }
        })
        .collect();
    PreemptCluster {
        tier_names: vec!["gputopo.dev/spine".into(), "gputopo.dev/leaf".into()],
        nodes,
    }
}

fn pod(priority: i32, gpus: u32) -> Preemptor {
    Preemptor {
        priority,
        request: SetRequest::new(gpus, Collective::Ring),
        members: 1,
        within: Within::Anywhere,
    }
}

fn victim_ids(p: &Proposal) -> BTreeSet<usize> {
    p.victims.iter().map(|v| v.id).collect()
}

fn run(preemptor: &Preemptor, c: &PreemptCluster) -> Result<Proposal, PreemptNoFit> {
    propose(preemptor, c, &PreemptionPolicy::default(), now())
}

/// The members' GPUs after eviction are free or held by a victim.
fn assert_usable(c: &PreemptCluster, p: &Proposal) {
    for m in &p.members {
        let node = &c.nodes[m.node];
        let freed = p
            .victims
            .iter()
            .filter(|v| v.node == m.node)
            .fold(node.node.free, |f, v| f | v.gpus);
        assert_eq!(m.gpus & !freed, 0, "member uses GPUs nobody freed: {m:?}");
    }
}

// ---------------------------------------------------------------------------
// Rules
// ---------------------------------------------------------------------------

#[test]
fn never_evicts_equal_or_higher_priority() {
    let shape = nv12();
    let mut equal = training(1, 0xff, 5);
    equal.priority = 100;
    let c = cluster(&shape, vec![vec![equal.clone()]]);
    let err = run(&pod(100, 8), &c).expect_err("an equal priority pod is never evicted");
    let PreemptNoFit::Short(s) = &err else {
        panic!("expected a shortfall, got {err:?}")
    };
    assert_eq!(s.not_lower, 1);
    assert_eq!(s.units, 0);
    assert!(
        err.to_string().contains("equal or higher priority"),
        "{err}"
    );

    // One priority level higher, the same pod is evicted.
    let p = run(&pod(101, 8), &c).expect("a lower-priority pod may be evicted");
    assert_eq!(victim_ids(&p), BTreeSet::from([1]));
}

#[test]
fn evicts_inference_before_training_even_when_training_loses_less() {
    let shape = nv12();
    // The training pod checkpointed a minute ago: 8 GPU-minutes lost. The
    // inference pod costs 8 × 6 GPU-minutes. The rule still picks inference.
    let c = cluster(
        &shape,
        vec![vec![training(1, 0xff, 1)], vec![inference(2, 0xff)]],
    );
    let policy = PreemptionPolicy::default();
    assert!(
        policy.training_loss(now(), 8, Some(minutes_ago(1)), minutes_ago(600))
            < policy.inference_loss(8)
    );
    let p = run(&pod(10, 8), &c).expect("room can be made");
    assert_eq!(victim_ids(&p), BTreeSet::from([2]));
    assert_eq!(p.pass, Pass::Inference);
    assert_eq!(p.cost.inference, 1);
    assert_eq!(p.cost.training, 0);
    assert_eq!(p.members[0].node, 1);
}

#[test]
fn a_training_pod_with_an_old_checkpoint_is_protected_unless_nothing_else_works() {
    let shape = nv12();
    // 45 minutes since checkpoint on 4 GPUs (3 GPU-hours, protected) against
    // 25 minutes on 8 GPUs (3.3 GPU-hours, unprotected).
    let old = training(1, 0x0f, 45);
    let recent = training(2, 0xff, 25);
    let mut high = training(3, 0xf0, 1);
    high.priority = 50;
    // A 4-GPU request fits by evicting either; fewer GPU-hours would pick the
    // protected one.
    let c = cluster(&shape, vec![vec![old.clone(), high.clone()], vec![recent]]);
    let p = run(&pod(10, 4), &c).expect("room can be made");
    assert_eq!(victim_ids(&p), BTreeSet::from([2]), "{}", p.explanation);
    assert_eq!(p.pass, Pass::Training);
    assert_eq!(p.cost.protected, 0);
    assert_eq!(p.members[0].node, 1);

    // Without the unprotected pod only the protected one works, and it is
    // evicted, flagged.
    let c = cluster(&shape, vec![vec![old, high]]);
    let p = run(&pod(10, 4), &c).expect("the protected pod is the last resort");
    assert_eq!(victim_ids(&p), BTreeSet::from([1]));
    assert_eq!(p.pass, Pass::Protected);
    assert_eq!(p.cost.protected, 1);
    assert!(p.victims[0].protected);
    assert!(p.explanation.contains("protected"), "{}", p.explanation);
}

#[test]
fn a_training_pod_near_completion_is_protected() {
    let shape = nv12();
    let mut finishing = training(1, 0xff, 5); // 40 GPU-minutes lost
    finishing.expected_completion = Some(in_minutes(60));
    let other = training(2, 0xff, 20); // 160 GPU-minutes lost
    let c = cluster(&shape, vec![vec![finishing.clone()], vec![other]]);
    let p = run(&pod(10, 8), &c).expect("room can be made");
    assert_eq!(victim_ids(&p), BTreeSet::from([2]));

    // Finishing in three hours is outside the window: the cheaper pod goes.
    finishing.expected_completion = Some(in_minutes(180));
    let c = cluster(&shape, vec![vec![finishing], vec![training(2, 0xff, 20)]]);
    let p = run(&pod(10, 8), &c).expect("room can be made");
    assert_eq!(victim_ids(&p), BTreeSet::from([1]));
}

#[test]
fn protection_thresholds_are_configurable() {
    let default = PreemptionPolicy::default();
    let start = minutes_ago(24 * 60);
    assert!(default.protected(now(), Some(minutes_ago(31)), None, start));
    assert!(!default.protected(now(), Some(minutes_ago(29)), None, start));
    assert!(
        default.protected(now(), None, None, start),
        "no checkpoint: since start"
    );
    assert!(!default.protected(now(), None, None, minutes_ago(10)));
    assert!(default.protected(now(), Some(minutes_ago(1)), Some(in_minutes(119)), start));
    assert!(!default.protected(now(), Some(minutes_ago(1)), Some(in_minutes(121)), start));

    let strict = PreemptionPolicy {
        checkpoint_max_age: Duration::from_secs(10 * 60),
        finish_window: Duration::from_secs(10 * 60),
        ..PreemptionPolicy::default()
    };
    assert!(strict.protected(now(), Some(minutes_ago(11)), None, start));
    assert!(!strict.protected(now(), Some(minutes_ago(1)), Some(in_minutes(30)), start));
}

#[test]
fn minimises_gpu_hours_lost() {
    let shape = nv12();
    let mut fresh_start = training(3, 0xff, 0);
    fresh_start.checkpoint = None;
    fresh_start.start = minutes_ago(15); // 8 × 15 min = 2 GPU-hours
    let c = cluster(
        &shape,
        vec![
            vec![training(1, 0xff, 20)], // 8 × 20 min
            vec![training(2, 0xff, 10)], // 8 × 10 min
            vec![fresh_start],
        ],
    );
    let p = run(&pod(10, 8), &c).expect("room can be made");
    assert_eq!(victim_ids(&p), BTreeSet::from([2]));
    assert_eq!(p.cost.gpu_seconds, 8 * 10 * 60);
    assert!((p.cost.gpu_hours() - 8.0 * 10.0 / 60.0).abs() < 1e-9);

    // Inference costs its GPUs × the restart constant: the smaller pod goes.
    let c = cluster(
        &shape,
        vec![
            vec![inference(4, 0x0f), inference(5, 0xf0)],
            vec![inference(6, 0x03), training(7, 0xfc, 10)],
        ],
    );
    let p = run(&pod(10, 2), &c).expect("room can be made");
    assert_eq!(victim_ids(&p), BTreeSet::from([6]));
    assert_eq!(p.cost.gpu_seconds, 2 * 6 * 60);
}

#[test]
fn a_gang_is_evicted_whole_or_not_at_all() {
    let shape = nv12();
    let member = |id: usize| Victim {
        gang: Some("job-a".into()),
        name: format!("ml/job-a-{id}"),
        ..training(id, 0xff, 10)
    };
    // One gang member costs 80 GPU-minutes, the gang 160; the lone pod 120.
    let c = cluster(
        &shape,
        vec![
            vec![member(1)],
            vec![member(2)],
            vec![training(3, 0xff, 15)],
        ],
    );
    let p = run(&pod(10, 8), &c).expect("room can be made");
    assert_eq!(
        victim_ids(&p),
        BTreeSet::from([3]),
        "the gang costs both members"
    );

    // Without the lone pod, the whole gang goes, on both nodes.
    let c = cluster(&shape, vec![vec![member(1)], vec![member(2)]]);
    let p = run(&pod(10, 8), &c).expect("room can be made");
    assert_eq!(victim_ids(&p), BTreeSet::from([1, 2]));
    let nodes: BTreeSet<usize> = p.victims.iter().map(|v| v.node).collect();
    assert_eq!(nodes, BTreeSet::from([0, 1]));
    assert_eq!(p.cost.pods, 2);
    assert_eq!(p.cost.gpus, 16);
    assert_eq!(p.cost.units(), 1);
    assert_eq!(p.cost.gpu_seconds, 2 * 8 * 10 * 60);

    // A gang with one member of higher priority is never a victim.
    let mut guarded = member(2);
    guarded.priority = 20;
    let c = cluster(&shape, vec![vec![member(1)], vec![guarded]]);
    let err = run(&pod(10, 8), &c).expect_err("the gang is protected by its member");
    let PreemptNoFit::Short(s) = err else {
        panic!("expected a shortfall")
    };
    assert_eq!(s.not_lower, 2);
}

// ---------------------------------------------------------------------------
// A usable set, not a count (kueue#5243)
// ---------------------------------------------------------------------------

#[test]
fn frees_a_usable_set_not_a_count() {
    let shape = two_quads();
    // Free: GPUs 0,1 (quad A) and 4,5 (quad B): four GPUs, no NV12 quad.
    // Cheap: an inference pod on GPU 6. Count-wise its eviction gives 5 free
    // GPUs, but quad B would still miss GPU 7 (held at high priority).
    // The quad-A pod on GPUs 2,3 is what makes a usable set.
    let mut guard = inference(7, 1 << 7);
    guard.priority = 1_000;
    let c = cluster(
        &shape,
        vec![vec![training(3, 0b1100, 10), inference(6, 1 << 6), guard]],
    );
    assert_eq!(
        c.nodes[0].node.free.count_ones(),
        4,
        "four GPUs are free already"
    );
    let request = SetRequest {
        min_nvlink_level: Some(12),
        ..SetRequest::new(4, Collective::AllToAll)
    };
    let preemptor = Preemptor {
        request,
        ..pod(10, 4)
    };
    let p = run(&preemptor, &c).expect("room can be made");
    assert_eq!(victim_ids(&p), BTreeSet::from([3]), "{}", p.explanation);
    assert_eq!(p.members[0].gpus, 0x0f, "quad A");
    assert_eq!(p.pass, Pass::Training, "no inference-only eviction works");
    assert_usable(&c, &p);
}

#[test]
fn a_gang_preemptor_gets_a_whole_required_domain() {
    // KAI-Scheduler#1591: a gang that must stay in one leaf evicts inside one.
    let shape = nv12();
    let leaf = |l: usize, ckpt: u64, base: usize| -> Vec<PreemptNode> {
        (0..2)
            .map(|i| PreemptNode {
                node: GangNode::new(
                    base + i,
                    vec![Some("spine-0".into()), Some(format!("leaf-{l}"))],
                    Arc::clone(&shape),
                    0,
                ),
                victims: vec![training(base + i, 0xff, ckpt)],
                required: Vec::new(),
            })
            .collect()
    };
    let mut nodes = leaf(0, 20, 0);
    nodes.extend(leaf(1, 5, 2)); // cheaper
    // A free node in a third leaf: spreading would be cheaper, but not allowed.
    nodes.push(PreemptNode {
        node: GangNode::new(
            4,
            vec![Some("spine-0".into()), Some("leaf-2".into())],
            Arc::clone(&shape),
            0xff,
        ),
        victims: vec![],
        required: Vec::new(),
    });
    let c = PreemptCluster {
        tier_names: vec!["spine".into(), "leaf".into()],
        nodes,
    };
    let gang = Preemptor {
        priority: 10,
        request: SetRequest::new(8, Collective::Ring),
        members: 2,
        within: Within::OneDomainAt { tier: 1 },
    };
    let p = run(&gang, &c).expect("a leaf can be emptied");
    assert_eq!(victim_ids(&p), BTreeSet::from([2, 3]));
    assert_eq!(p.spans[1].domains, vec!["spine-0/leaf-1".to_string()]);
    assert_eq!(p.members.len(), 2);
    assert_usable(&c, &p);

    // Anywhere: the free node plus the cheapest single eviction.
    let anywhere = Preemptor {
        within: Within::Anywhere,
        ..gang.clone()
    };
    let p = run(&anywhere, &c).expect("room can be made");
    assert_eq!(p.victims.len(), 1);
    assert_eq!(p.cost.gpu_seconds, 8 * 5 * 60);
    assert_usable(&c, &p);

    // Three members cannot fit in one leaf of two nodes, whatever is evicted.
    let three = Preemptor { members: 3, ..gang };
    let err = run(&three, &c).expect_err("no leaf holds three");
    let message = err.to_string();
    assert!(message.contains("in one leaf"), "{message}");
    assert!(message.contains("at most 2 would fit"), "{message}");
}

#[test]
fn the_greedy_search_beyond_the_exact_bound_still_frees_a_usable_set() {
    let shape = two_quads();
    // Eight single-GPU inference pods, all costing the same: the greedy path
    // must still end on one whole quad, with no victim to spare.
    let pods: Vec<Victim> = (0..8).map(|g| inference(g, 1 << g)).collect();
    let c = cluster(&shape, vec![pods]);
    let policy = PreemptionPolicy {
        exact_units_per_node: 2,
        ..PreemptionPolicy::default()
    };
    let request = SetRequest {
        min_nvlink_level: Some(12),
        ..SetRequest::new(4, Collective::AllToAll)
    };
    let preemptor = Preemptor {
        request,
        ..pod(10, 4)
    };
    let p = propose(&preemptor, &c, &policy, now()).expect("room can be made");
    assert_eq!(p.victims.len(), 4, "no unneeded victim: {}", p.explanation);
    let gpus = p.members[0].gpus;
    assert!(gpus == 0x0f || gpus == 0xf0, "a quad, got {gpus:#x}");
    assert_usable(&c, &p);
    let exact = run(&preemptor, &c).expect("room can be made");
    assert_eq!(exact.cost, p.cost, "greedy matches exact here");
}

#[test]
fn a_preemptor_that_fits_evicts_nothing() {
    let shape = nv12();
    let c = cluster(&shape, vec![vec![training(1, 0x0f, 10)]]);
    let p = run(&pod(10, 4), &c).expect("fits");
    assert!(p.victims.is_empty());
    assert_eq!(p.members[0].gpus, 0xf0);
    assert!(
        p.explanation.starts_with("fits without eviction"),
        "{}",
        p.explanation
    );
    assert_eq!(run(&pod(10, 0), &c).map(|p| p.victims.len()), Ok(0));
    assert!(matches!(
        run(
            &Preemptor {
                members: 0,
                ..pod(10, 1)
            },
            &c
        ),
        Err(PreemptNoFit::NoMembers)
    ));
}
