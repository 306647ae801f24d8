//! Gang placement across network tiers and the cluster measures, on
//! spine/leaf clusters of hand-written node shapes. (Gangs waiting, queued
//! and holding reservations are the scheduler cycle's bookkeeping: see
//! `scheduler/src/cycle/tests/gangs.rs`.)

mod common;

use gputopo_api::{Collective, GpuTopologySpec, LinkClass, PlacementStrategy};
use gputopo_scheduler_core::gang::metrics::{fragmentation, gang_spans, span_summary};
use gputopo_scheduler_core::gang::{
    GangCluster, GangNoFit, GangNode, GangPlacement, GangSpec, Within, place_gang,
};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

// ---------------------------------------------------------------------------
// Shapes and clusters
// ---------------------------------------------------------------------------

/// `n` GPUs of 80 GiB, the first half on NUMA node 0, the rest on 1.
fn spec(n: u32, class: impl Fn(u32, u32) -> LinkClass) -> GpuTopologySpec {
    common::spec_with(n, class, |i| common::Gpu {
        numa: Some(i32::from(i >= n / 2)),
        memory_mib: Some(81_920),
        mig: false,
    })
}

/// An HGX A100: 8 GPUs, NV12 between every pair (NVSwitch).
fn nv12() -> Arc<NodeShape> {
    Arc::new(NodeShape::from_spec(&spec(8, |_, _| LinkClass::Nv(12))).expect("valid shape"))
}

/// DGX-1 V100 hybrid cube-mesh (docs/references.md); SYS where no NVLink.
fn dgx1() -> Arc<NodeShape> {
    Arc::new(NodeShape::from_spec(&spec(8, common::dgx1_class)).expect("valid shape"))
}

const ALL: u32 = 0xff;

/// `spines × leaves × nodes` nodes, all free; ids count up leaf by leaf.
fn fabric(spines: usize, leaves: usize, nodes: usize, shape: &Arc<NodeShape>) -> GangCluster {
    let mut cluster = GangCluster {
        tier_names: vec!["gputopo.dev/spine".into(), "gputopo.dev/leaf".into()],
        nodes: Vec::new(),
    };
    for s in 0..spines {
        for l in 0..leaves {
            for _ in 0..nodes {
                let id = cluster.nodes.len();
                cluster.nodes.push(GangNode::new(
                    id,
                    vec![Some(format!("spine-{s}")), Some(format!("leaf-{l}"))],
                    Arc::clone(shape),
                    ALL,
                ));
            }
        }
    }
    cluster
}

/// Marks the first `busy` nodes of leaf (s, l) fully busy.
fn occupy(cluster: &mut GangCluster, s: usize, l: usize, busy: usize) {
    let (spine, leaf) = (format!("spine-{s}"), format!("leaf-{l}"));
    for node in cluster
        .nodes
        .iter_mut()
        .filter(|n| n.tiers[0].as_deref() == Some(&spine) && n.tiers[1].as_deref() == Some(&leaf))
        .take(busy)
    {
        node.free = 0;
    }
}

fn whole_node(count: u32) -> GangSpec {
    GangSpec::uniform(count, SetRequest::new(8, Collective::Ring))
}

fn node(cluster: &GangCluster, id: usize) -> &GangNode {
    cluster
        .nodes
        .iter()
        .find(|n| n.id == id)
        .expect("placement names a node of the cluster")
}

/// `(spine, leaf)` of a node.
fn leaf_of(cluster: &GangCluster, id: usize) -> (String, String) {
    let n = node(cluster, id);
    (
        n.tiers[0].clone().unwrap_or_default(),
        n.tiers[1].clone().unwrap_or_default(),
    )
}

fn leaves_used(cluster: &GangCluster, p: &GangPlacement) -> BTreeSet<(String, String)> {
    p.members.iter().map(|m| leaf_of(cluster, m.node)).collect()
}

fn spines_used(cluster: &GangCluster, p: &GangPlacement) -> BTreeSet<String> {
    leaves_used(cluster, p)
        .into_iter()
        .map(|(s, _)| s)
        .collect()
}

/// Free nodes per leaf.
fn free_nodes(cluster: &GangCluster, s: &str, l: &str) -> usize {
    cluster
        .nodes
        .iter()
        .filter(|n| n.free == ALL && leaf_of(cluster, n.id) == (s.to_string(), l.to_string()))
        .count()
}

/// Checks what every placement must satisfy: one slot per member, GPUs free
/// and of the requested size, no two members sharing a GPU.
fn assert_valid(cluster: &GangCluster, spec: &GangSpec, p: &GangPlacement) {
    assert_eq!(p.members.len(), spec.members.len());
    let mut used: HashMap<usize, u32> = HashMap::new();
    for (i, m) in p.members.iter().enumerate() {
        let request = spec.members.request(i).expect("member exists");
        assert_eq!(m.gpus.count_ones(), request.gpus, "member {i} size");
        let n = node(cluster, m.node);
        assert_eq!(
            m.gpus & !n.free,
            0,
            "member {i} uses a busy GPU on node {}",
            m.node
        );
        let seen = used.entry(m.node).or_default();
        assert_eq!(
            *seen & m.gpus,
            0,
            "member {i} shares GPUs on node {}",
            m.node
        );
        *seen |= m.gpus;
    }
}

// ---------------------------------------------------------------------------
// The rule: 2 → one leaf, 4 → a whole leaf of 4, 8 → two leaves under one
// spine, 16 → four
// ---------------------------------------------------------------------------

#[test]
fn gang_of_two_goes_to_one_leaf_and_prefers_a_leaf_it_fills() {
    let shape = nv12();
    let mut cluster = fabric(2, 4, 4, &shape);
    let spec = whole_node(2);
    let p = place_gang(&spec, &cluster).expect("fits");
    assert_valid(&cluster, &spec, &p);
    assert_eq!(leaves_used(&cluster, &p).len(), 1);
    assert_eq!(p.leaf_domains(), 1);
    assert_eq!(p.spans[0].domains.len(), 1, "one spine");

    // One leaf with exactly two free nodes: the gang fills it and leaves the
    // whole leaves whole.
    occupy(&mut cluster, 1, 2, 2);
    let p = place_gang(&spec, &cluster).expect("fits");
    let used = leaves_used(&cluster, &p);
    assert_eq!(used.len(), 1);
    let (s, l) = used.iter().next().cloned().expect("one leaf");
    assert_eq!(
        free_nodes(&cluster, &s, &l),
        2,
        "took the leaf it fills: {s}/{l}"
    );
    assert!(
        p.explanation.contains("filling them completely"),
        "{}",
        p.explanation
    );
}

#[test]
fn gang_of_four_takes_a_whole_leaf_and_an_empty_leaf_beats_two_half_empty_ones() {
    let shape = nv12();
    let mut cluster = fabric(2, 4, 4, &shape);
    let spec = whole_node(4);
    let p = place_gang(&spec, &cluster).expect("fits");
    assert_valid(&cluster, &spec, &p);
    let used = leaves_used(&cluster, &p);
    assert_eq!(used.len(), 1);
    assert_eq!(p.node_count(), 4, "the leaf's four nodes");

    // Spine 0: leaves half busy. Spine 1: all busy but one empty leaf.
    for l in 0..4 {
        occupy(&mut cluster, 0, l, 2);
        if l != 3 {
            occupy(&mut cluster, 1, l, 4);
        }
    }
    // Make the half-empty leaves' nodes look better, so only the rule can win.
    for n in cluster
        .nodes
        .iter_mut()
        .filter(|n| n.tiers[0].as_deref() == Some("spine-0"))
    {
        n.node_score = 50;
    }
    let p = place_gang(&spec, &cluster).expect("fits");
    assert_valid(&cluster, &spec, &p);
    assert_eq!(
        leaves_used(&cluster, &p),
        BTreeSet::from([("spine-1".to_string(), "leaf-3".to_string())])
    );
}

#[test]
fn gang_of_eight_takes_two_adjacent_leaves() {
    let shape = nv12();
    let cluster = fabric(2, 4, 4, &shape);
    let spec = whole_node(8);
    let p = place_gang(&spec, &cluster).expect("fits");
    assert_valid(&cluster, &spec, &p);
    assert_eq!(leaves_used(&cluster, &p).len(), 2);
    assert_eq!(
        spines_used(&cluster, &p).len(),
        1,
        "adjacent: under one spine"
    );
    assert_eq!(p.spans[0].domains.len(), 1);
    assert_eq!(p.spans[1].domains.len(), 2);
}

#[test]
fn gang_of_sixteen_takes_four_leaves_of_one_spine() {
    let shape = nv12();
    let cluster = fabric(2, 4, 4, &shape);
    let spec = whole_node(16);
    let p = place_gang(&spec, &cluster).expect("fits");
    assert_valid(&cluster, &spec, &p);
    assert_eq!(leaves_used(&cluster, &p).len(), 4);
    assert_eq!(spines_used(&cluster, &p).len(), 1);
    assert_eq!(p.node_count(), 16);
}

#[test]
fn the_choice_adapts_to_busy_nodes() {
    let shape = nv12();
    let mut cluster = fabric(2, 4, 4, &shape);
    // One busy node in every leaf of spine 0, and in leaf 0 of spine 1.
    for l in 0..4 {
        occupy(&mut cluster, 0, l, 1);
    }
    occupy(&mut cluster, 1, 0, 1);
    let p = place_gang(&whole_node(4), &cluster).expect("fits");
    let used = leaves_used(&cluster, &p);
    assert_eq!(used.len(), 1);
    let (s, l) = used.iter().next().cloned().expect("one leaf");
    assert_eq!(s, "spine-1");
    assert_ne!(l, "leaf-0", "leaf-0 of spine-1 has a busy node");

    // Eight: two whole leaves exist only under spine 1.
    let p = place_gang(&whole_node(8), &cluster).expect("fits");
    assert_eq!(
        spines_used(&cluster, &p),
        BTreeSet::from(["spine-1".to_string()])
    );
    assert_eq!(leaves_used(&cluster, &p).len(), 2);
    for (s, l) in leaves_used(&cluster, &p) {
        assert_eq!(free_nodes(&cluster, &s, &l), 4, "{s}/{l} filled completely");
    }
}

#[test]
fn fewest_leaves_come_before_one_spine() {
    // Each spine has one whole leaf and three with 3 free nodes: two leaves
    // hold 8 only across spines, one spine needs three leaves.
    let shape = nv12();
    let mut cluster = fabric(2, 4, 4, &shape);
    for s in 0..2 {
        for l in 1..4 {
            occupy(&mut cluster, s, l, 1);
        }
    }
    let p = place_gang(&whole_node(8), &cluster).expect("fits");
    assert_eq!(leaves_used(&cluster, &p).len(), 2);
    assert_eq!(spines_used(&cluster, &p).len(), 2);
    assert!(
        p.explanation
            .contains("fewest leaf domains that hold the gang: 2"),
        "{}",
        p.explanation
    );
}

#[test]
fn members_share_nodes_when_requests_are_small() {
    let shape = nv12();
    let cluster = fabric(2, 2, 2, &shape);
    let request = SetRequest::new(2, Collective::Ring);
    let consolidated = GangSpec::uniform(4, request).with_strategy(PlacementStrategy::Consolidated);
    let p = place_gang(&consolidated, &cluster).expect("fits");
    assert_valid(&cluster, &consolidated, &p);
    assert_eq!(p.node_count(), 1, "four 2-GPU members pack one 8-GPU node");

    let balanced = GangSpec::uniform(4, request);
    let p = place_gang(&balanced, &cluster).expect("fits");
    assert_valid(&cluster, &balanced, &p);
    assert_eq!(p.leaf_domains(), 1);

    let distributed = GangSpec::uniform(4, request).with_strategy(PlacementStrategy::Distributed);
    let p = place_gang(&distributed, &cluster).expect("fits");
    assert_valid(&cluster, &distributed, &p);
    assert_eq!(leaves_used(&cluster, &p).len(), 4, "one member per leaf");
    assert_eq!(spines_used(&cluster, &p).len(), 2);
    assert!(p.explanation.contains("distributed"), "{}", p.explanation);
}

#[test]
fn distributed_alternates_spines_before_reusing_one() {
    let shape = nv12();
    let cluster = fabric(2, 4, 2, &shape);
    let spec = whole_node(2).with_strategy(PlacementStrategy::Distributed);
    let p = place_gang(&spec, &cluster).expect("fits");
    assert_eq!(spines_used(&cluster, &p).len(), 2);
}

#[test]
fn nvlink_constraint_takes_whole_quads_on_dgx1() {
    let shape = dgx1();
    let mut cluster = fabric(1, 2, 2, &shape);
    // Node 0: a quad broken on each side; node 1: the 0-3 quad free.
    cluster.nodes[0].free = 0b0111_0111;
    cluster.nodes[1].free = 0b0000_1111;
    let request = SetRequest {
        min_nvlink_level: Some(1),
        ..SetRequest::new(4, Collective::AllToAll)
    };
    let spec = GangSpec::uniform(3, request);
    let p = place_gang(&spec, &cluster).expect("fits");
    assert_valid(&cluster, &spec, &p);
    for m in &p.members {
        assert!(
            m.gpus == 0x0f || m.gpus == 0xf0,
            "member on node {} got {:#x}, not a quad",
            m.node,
            m.gpus
        );
        assert_ne!(m.node, 0, "node 0 has no free quad");
    }
}

#[test]
fn members_with_their_own_requests_all_fit_or_none() {
    let shape = nv12();
    let mut cluster = fabric(1, 2, 2, &shape);
    cluster.nodes[0].free = 0x0f;
    let leader = SetRequest::new(1, Collective::Ring);
    let worker = SetRequest::new(8, Collective::Ring);
    let spec = GangSpec::each(vec![leader, worker, worker]);
    let p = place_gang(&spec, &cluster).expect("fits");
    assert_valid(&cluster, &spec, &p);
    assert_eq!(p.members[0].gpus.count_ones(), 1);

    let too_many = GangSpec::each(vec![leader, worker, worker, worker, worker]);
    match place_gang(&too_many, &cluster) {
        Err(GangNoFit::Short(s)) => {
            assert_eq!(s.members, 5);
            assert!(s.fit < 5);
        }
        other => panic!("expected a shortage, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// No fit: typed reasons that name what was short and where
// ---------------------------------------------------------------------------

#[test]
fn a_shortage_names_the_hosts_and_the_best_domains() {
    let shape = nv12();
    let mut cluster = fabric(2, 2, 4, &shape);
    // Five whole nodes free: three under spine 0, two under spine 1.
    for n in cluster.nodes.iter_mut() {
        n.free = 0x3f;
    }
    for id in [0, 1, 4, 8, 12] {
        cluster.nodes[id].free = ALL;
    }
    let request = SetRequest {
        min_nvlink_level: Some(12),
        ..SetRequest::new(8, Collective::Ring)
    };
    let err = place_gang(&GangSpec::uniform(8, request), &cluster).expect_err("5 < 8");
    let GangNoFit::Short(s) = &err else {
        panic!("expected a shortage, got {err:?}")
    };
    assert_eq!(s.fit, 5);
    assert_eq!(s.hosts, 5);
    assert_eq!(s.best[0].members, 3);
    assert_eq!(s.best[0].domain, "spine-0");
    assert_eq!(s.best[1].members, 2);
    assert_eq!(s.node_reasons, vec![("too few free GPUs".to_string(), 11)]);
    let message = err.to_string();
    assert!(
        message.starts_with("8 members need 8 free GPUs with NV12 between every pair each"),
        "{message}"
    );
    assert!(
        message.contains("the most under one spine is 3 (spine-0)"),
        "{message}"
    );
}

#[test]
fn a_required_tier_keeps_the_gang_in_one_domain_or_says_it_cannot() {
    let shape = nv12();
    let cluster = fabric(2, 4, 4, &shape);
    let in_one_leaf = whole_node(4).within(Within::OneDomainAt { tier: 1 });
    let p = place_gang(&in_one_leaf, &cluster).expect("a leaf holds 4");
    assert_eq!(p.leaf_domains(), 1);

    let err = place_gang(
        &whole_node(5).within(Within::OneDomainAt { tier: 1 }),
        &cluster,
    )
    .expect_err("no leaf holds 5");
    let message = err.to_string();
    assert!(message.contains("all in one leaf"), "{message}");
    assert!(
        message.contains("the most under one leaf is 4"),
        "{message}"
    );

    let named = whole_node(4).within(Within::Domain {
        tier: 0,
        name: "spine-1".into(),
    });
    let p = place_gang(&named, &cluster).expect("fits in spine-1");
    assert_eq!(
        spines_used(&cluster, &p),
        BTreeSet::from(["spine-1".to_string()])
    );

    assert_eq!(
        place_gang(
            &whole_node(1).within(Within::OneDomainAt { tier: 2 }),
            &cluster
        ),
        Err(GangNoFit::NoSuchTier { tier: 2, tiers: 2 })
    );
    assert!(matches!(
        place_gang(
            &whole_node(1).within(Within::Domain {
                tier: 0,
                name: "spine-9".into()
            }),
            &cluster
        ),
        Err(GangNoFit::NoSuchDomain { .. })
    ));
    assert_eq!(
        place_gang(&whole_node(0), &cluster),
        Err(GangNoFit::NoMembers)
    );
}

#[test]
fn nodes_without_labels_are_leaves_of_their_own() {
    let shape = nv12();
    let mut cluster = fabric(1, 1, 2, &shape);
    for n in &mut cluster.nodes {
        n.tiers = vec![Some("spine-0".into()), None];
    }
    let p = place_gang(&whole_node(2), &cluster).expect("fits");
    assert_eq!(
        p.leaf_domains(),
        2,
        "no locality assumed between unlabelled nodes"
    );
    assert_eq!(p.spans[0].domains, vec!["spine-0".to_string()]);
}

// ---------------------------------------------------------------------------
// Measures
// ---------------------------------------------------------------------------

#[test]
fn the_cluster_summary_adds_up_node_measures() {
    let nv = nv12();
    let mesh = dgx1();
    let nodes: Vec<(&NodeShape, u32)> = vec![
        (&nv, ALL),           // one whole 8-slot, nothing stranded
        (&nv, 0x3f),          // 6 free: stranded for 8
        (&mesh, 0b1001_0110), // DGX-1 GPUs 1,2,4,7: pairs 1-2 (NV2) and 4-7 (NV2)
        (&nv, 0),
    ];
    let s = fragmentation(nodes.iter().copied());
    assert_eq!(s.nodes, 4);
    assert_eq!(s.free_gpus, 8 + 6 + 4);
    assert_eq!(s.empty_nodes, 1);
    assert_eq!(s.full_nvlink_slots_8, 1);
    assert_eq!(s.stranded(8), 6 + 4);
    assert_eq!(s.stranded(2), 0);
    assert_eq!(
        s.stranded(4),
        4,
        "no DGX-1 quad of the best class in 1,2,4,7"
    );
    assert!((s.stranded_fraction(8) - 10.0 / 18.0).abs() < 1e-9);
}

#[test]
fn gang_spans_count_domains_per_tier() {
    let names = vec![
        "gputopo.dev/spine".to_string(),
        "gputopo.dev/leaf".to_string(),
    ];
    let p = |s: &str, l: &str| vec![Some(s.to_string()), Some(l.to_string())];
    let members = [p("s1", "l1"), p("s1", "l1"), p("s1", "l2"), p("s2", "l1")];
    let spans = gang_spans(&names, members.iter().map(Vec::as_slice));
    assert_eq!(spans[0].domains, vec!["s1", "s2"]);
    assert_eq!(spans[1].domains, vec!["s1/l1", "s1/l2", "s2/l1"]);
    let one = gang_spans(&names, members[..2].iter().map(Vec::as_slice));
    let summary = span_summary([spans.as_slice(), one.as_slice()]);
    assert_eq!(summary.gangs, 2);
    assert_eq!(summary.max_leaves, 3);
    assert_eq!(summary.across_outer, 1);
    assert!((summary.mean_leaves - 2.0).abs() < 1e-9);
}

// ---------------------------------------------------------------------------
// Property: all or nothing, free GPUs only, disjoint, and the fewest leaves
// (then spines, then best fit) by brute force over node subsets
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Case {
    /// Per node: (spine, leaf label or None, free mask).
    nodes: Vec<(usize, Option<usize>, u8)>,
    gpus: u32,
    members: u32,
    strategy: PlacementStrategy,
}

fn case() -> impl Strategy<Value = Case> {
    let node = (
        0usize..2,
        prop::option::weighted(0.9, 0usize..2),
        any::<u8>(),
    );
    (
        prop::collection::vec(node, 1..=10),
        1u32..=4,
        1u32..=6,
        prop_oneof![
            Just(PlacementStrategy::Balanced),
            Just(PlacementStrategy::Consolidated),
            Just(PlacementStrategy::Distributed)
        ],
    )
        .prop_map(|(nodes, gpus, members, strategy)| Case {
            nodes,
            gpus,
            members,
            strategy,
        })
}

/// A node's leaf as the module docs define it: (spine, leaf) or the node alone.
fn leaf_key(case: &Case, i: usize) -> (usize, Option<usize>, Option<usize>) {
    let (s, l, _) = case.nodes[i];
    match l {
        Some(l) => (s, Some(l), None),
        None => (s, None, Some(i)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn placement_is_whole_valid_and_uses_the_fewest_leaves(case in case()) {
        let shape = nv12();
        let cluster = GangCluster {
            tier_names: vec!["spine".into(), "leaf".into()],
            nodes: case
                .nodes
                .iter()
                .enumerate()
                .map(|(i, &(s, l, free))| {
                    GangNode::new(
                        i,
                        vec![Some(format!("s{s}")), l.map(|l| format!("l{l}"))],
                        Arc::clone(&shape),
                        u32::from(free),
                    )
                })
                .collect(),
        };
        let spec = GangSpec::uniform(case.members, SetRequest::new(case.gpus, Collective::Ring))
            .with_strategy(case.strategy);
        let n = case.members as u64;
        // NV12 everywhere: any k free GPUs form a set, so a node hosts free / k.
        let cap: Vec<u64> = case
            .nodes
            .iter()
            .map(|&(_, _, f)| u64::from(f.count_ones() / case.gpus))
            .collect();
        let mut leaf_cap: BTreeMap<(usize, Option<usize>, Option<usize>), u64> = BTreeMap::new();
        for (i, c) in cap.iter().enumerate() {
            *leaf_cap.entry(leaf_key(&case, i)).or_default() += c;
        }
        // Brute force over node subsets: (leaves, spines, leftover) at best.
        let mut best: Option<(usize, usize, u64)> = None;
        for subset in 1u32..(1 << case.nodes.len()) {
            let members: Vec<usize> = (0..case.nodes.len()).filter(|i| subset & (1 << i) != 0).collect();
            if members.iter().map(|&i| cap[i]).sum::<u64>() < n {
                continue;
            }
            let leaves: BTreeSet<_> = members.iter().map(|&i| leaf_key(&case, i)).collect();
            let spines: BTreeSet<usize> = leaves.iter().map(|l| l.0).collect();
            let held: u64 = leaves.iter().map(|l| leaf_cap[l]).sum();
            let key = (leaves.len(), spines.len(), held - n);
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        match place_gang(&spec, &cluster) {
            Err(GangNoFit::Short(s)) => {
                prop_assert!(best.is_none(), "brute force fits: {best:?}, got {s}");
                prop_assert_eq!(u64::from(s.fit), cap.iter().sum::<u64>().min(u64::from(u32::MAX)));
            }
            Err(other) => prop_assert!(false, "unexpected {other:?}"),
            Ok(p) => {
                let best = best.expect("placed, so the brute force must fit");
                prop_assert_eq!(p.members.len() as u64, n);
                let mut used: HashMap<usize, u32> = HashMap::new();
                for m in &p.members {
                    prop_assert_eq!(m.gpus.count_ones(), case.gpus);
                    prop_assert_eq!(m.gpus & !u32::from(case.nodes[m.node].2), 0, "busy GPU");
                    let seen = used.entry(m.node).or_default();
                    prop_assert_eq!(*seen & m.gpus, 0, "two members share GPUs");
                    *seen |= m.gpus;
                }
                let leaves: BTreeSet<_> = p.members.iter().map(|m| leaf_key(&case, m.node)).collect();
                prop_assert_eq!(p.leaf_domains(), leaves.len());
                match case.strategy {
                    PlacementStrategy::Distributed => {
                        let hosting = leaf_cap.values().filter(|&&c| c > 0).count();
                        prop_assert_eq!(leaves.len(), hosting.min(n as usize));
                    }
                    _ => {
                        prop_assert_eq!(leaves.len(), best.0, "fewest leaves");
                        let spines: BTreeSet<usize> = leaves.iter().map(|l| l.0).collect();
                        prop_assert_eq!(spines.len(), best.1, "fewest spines");
                        let held: u64 = leaves.iter().map(|l| leaf_cap[l]).sum();
                        prop_assert_eq!(held - n, best.2, "best fit");
                    }
                }
            }
        }
    }
}
