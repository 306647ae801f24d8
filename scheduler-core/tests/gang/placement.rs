//! Where a gang goes. The rule: 2 → one leaf, 4 → a whole leaf of 4, 8 → two
//! leaves under one spine, 16 → four; then strategies, NVLink floors and
//! members with their own requests.

use crate::cluster::{
    assert_valid, dgx1, fabric, free_nodes, leaves_used, nv12, occupy, spines_used, whole_node,
};
use gputopo_api::{Collective, PlacementStrategy};
use gputopo_scheduler_core::gang::{GangNoFit, GangSpec, place_gang};
use gputopo_scheduler_core::gpuset::SetRequest;
use std::collections::BTreeSet;

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
