//! Gangs with structure (docs/contract/gang-structure.md): a required or
//! preferred domain, slices each inside one domain, rank order — on an
//! NVL72-like fabric: spines of leaves of racks (GPU cliques) of 4-GPU nodes.

use crate::common;
use gputopo_api::{Collective, LinkClass};
use gputopo_scheduler_core::gang::{
    GangCluster, GangNoFit, GangNode, GangPlacement, GangSpec, Slice, Within, place_gang,
};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::sync::Arc;

const SPINE: usize = 0;
const LEAF: usize = 1;
const RACK: usize = 2;
const HOST: usize = 3;

/// A GB200 compute tray as the scheduler sees it: 4 GPUs, NV18 between all.
fn tray() -> Arc<NodeShape> {
    let spec = common::spec_with(
        4,
        |_, _| LinkClass::Nv(18),
        |_| common::Gpu {
            numa: Some(0),
            memory_mib: Some(189_471),
            mig: false,
        },
    );
    Arc::new(NodeShape::from_spec(&spec).expect("valid shape"))
}

/// `spines × leaves × racks` racks of `nodes` trays each, all free; with
/// the hostname as a fourth, innermost tier.
fn nvl72(spines: usize, leaves: usize, racks: usize, nodes: usize) -> GangCluster {
    let shape = tray();
    let mut cluster = GangCluster {
        tier_names: vec![
            "gputopo.dev/spine".into(),
            "gputopo.dev/leaf".into(),
            "nvidia.com/gpu.clique".into(),
            "kubernetes.io/hostname".into(),
        ],
        nodes: Vec::new(),
    };
    for s in 0..spines {
        for l in 0..leaves {
            for r in 0..racks {
                for _ in 0..nodes {
                    let id = cluster.nodes.len();
                    cluster.nodes.push(GangNode::new(
                        id,
                        vec![
                            Some(format!("spine-{s}")),
                            Some(format!("leaf-{s}-{l}")),
                            Some(format!("rack-{s}-{l}-{r}")),
                            Some(format!("node-{id}")),
                        ],
                        Arc::clone(&shape),
                        0xf,
                    ));
                }
            }
        }
    }
    cluster
}

/// Marks the first `busy` nodes of rack `rack` fully busy.
fn occupy(cluster: &mut GangCluster, rack: &str, busy: usize) {
    for node in cluster
        .nodes
        .iter_mut()
        .filter(|n| n.tiers[RACK].as_deref() == Some(rack))
        .take(busy)
    {
        node.free = 0;
    }
}

fn trays(count: u32) -> GangSpec {
    GangSpec::uniform(count, SetRequest::new(4, Collective::Ring))
}

fn domain(cluster: &GangCluster, node: usize, tier: usize) -> String {
    cluster.nodes[node].tiers[tier].clone().unwrap_or_default()
}

fn domains(cluster: &GangCluster, p: &GangPlacement, tier: usize) -> BTreeSet<String> {
    p.members
        .iter()
        .map(|m| domain(cluster, m.node, tier))
        .collect()
}

/// Every run of `size` consecutive members inside one domain of `tier`.
fn slices_hold(cluster: &GangCluster, p: &GangPlacement, size: usize, tier: usize) -> bool {
    p.members.chunks(size).all(|slice| {
        slice
            .iter()
            .map(|m| domain(cluster, m.node, tier))
            .collect::<BTreeSet<_>>()
            .len()
            == 1
    })
}

/// No GPU given twice.
fn disjoint(p: &GangPlacement) -> bool {
    let mut seen = BTreeSet::new();
    p.members.iter().all(|m| {
        (0..32)
            .filter(|b| m.gpus & (1 << b) != 0)
            .all(|b| seen.insert((m.node, b)))
    })
}

#[test]
fn a_required_rack_holds_the_whole_gang_or_the_gang_waits_naming_the_best_rack() {
    let mut cluster = nvl72(1, 2, 2, 18);
    occupy(&mut cluster, "rack-0-0-0", 3);
    let p = place_gang(
        &trays(18).within(Within::OneDomainAt { tier: RACK }),
        &cluster,
    )
    .unwrap();
    assert_eq!(domains(&cluster, &p, RACK).len(), 1);
    assert!(
        p.explanation.contains("required: one gpu.clique"),
        "{}",
        p.explanation
    );

    let e = place_gang(
        &trays(19).within(Within::OneDomainAt { tier: RACK }),
        &cluster,
    )
    .unwrap_err();
    let GangNoFit::Short(short) = &e else {
        panic!("{e}")
    };
    assert_eq!(short.fit, 18, "{e}");
    let text = e.to_string();
    assert!(text.contains("all in one gpu.clique"), "{text}");
    assert!(
        text.contains("the most under one gpu.clique is 18"),
        "{text}"
    );
}

#[test]
fn a_preferred_rack_falls_back_outward_and_says_which_tier_held() {
    let cluster = nvl72(2, 2, 2, 18);
    let held = place_gang(&trays(12).preferring(RACK), &cluster).unwrap();
    assert_eq!(domains(&cluster, &held, RACK).len(), 1);
    assert!(
        held.explanation.contains("preferred one gpu.clique: held"),
        "{}",
        held.explanation
    );

    let wider = place_gang(&trays(30).preferring(RACK), &cluster).unwrap();
    assert_eq!(
        domains(&cluster, &wider, LEAF).len(),
        1,
        "two racks of one leaf"
    );
    assert!(
        wider
            .explanation
            .contains("preferred one gpu.clique: none had room, held at one leaf"),
        "{}",
        wider.explanation
    );
    // Why not a rack: the best rack's count.
    assert!(
        wider
            .explanation
            .contains("the fullest-fitting gpu.clique held 18 of 30 members"),
        "{}",
        wider.explanation
    );

    let everywhere = place_gang(&trays(100).preferring(RACK), &cluster).unwrap();
    assert_eq!(domains(&cluster, &everywhere, SPINE).len(), 2);
    assert!(
        everywhere
            .explanation
            .contains("preferred one gpu.clique: no domain of it or of a tier outward had room"),
        "{}",
        everywhere.explanation
    );
}

#[test]
fn a_preference_inside_a_requirement_never_leaves_it() {
    let cluster = nvl72(2, 2, 2, 18);
    let spec = trays(40)
        .within(Within::OneDomainAt { tier: SPINE })
        .preferring(RACK);
    let p = place_gang(&spec, &cluster).unwrap();
    assert_eq!(domains(&cluster, &p, SPINE).len(), 1);
    assert!(
        p.explanation.contains("held at one spine") || p.explanation.contains("no domain of it"),
        "{}",
        p.explanation
    );
    // 80 trays do not fit one spine (72): the requirement wins over every fallback.
    let spec = trays(80)
        .within(Within::OneDomainAt { tier: SPINE })
        .preferring(RACK);
    assert!(matches!(
        place_gang(&spec, &cluster),
        Err(GangNoFit::Short(_))
    ));
}

#[test]
fn required_slices_each_take_one_rack_in_rank_order() {
    let mut cluster = nvl72(1, 2, 3, 18);
    // One rack too full for a slice of 16, another just right.
    occupy(&mut cluster, "rack-0-0-0", 4);
    occupy(&mut cluster, "rack-0-0-1", 2);
    let slice = Slice {
        size: 16,
        tier: RACK,
        required: true,
    };
    let p = place_gang(&trays(48).sliced(vec![slice]), &cluster).unwrap();
    assert!(slices_hold(&cluster, &p, 16, RACK), "{:?}", p.members);
    assert!(disjoint(&p));
    let racks = domains(&cluster, &p, RACK);
    assert_eq!(racks.len(), 3, "{racks:?}");
    assert!(
        !racks.contains("rack-0-0-0"),
        "14 free trays hold no slice of 16"
    );
    assert!(
        p.explanation
            .contains("slices of 16 each in one gpu.clique (required): held"),
        "{}",
        p.explanation
    );

    // Four slices do not fit: five racks hold a slice each, one none.
    let e = place_gang(&trays(96).sliced(vec![slice]), &cluster).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("in slices of 16 each inside one gpu.clique: 5 of 6 slices fit"),
        "{text}"
    );
}

#[test]
fn slices_of_one_gang_may_share_a_rack() {
    let cluster = nvl72(1, 1, 2, 18);
    let slice = Slice {
        size: 8,
        tier: RACK,
        required: true,
    };
    let p = place_gang(&trays(16).sliced(vec![slice]), &cluster).unwrap();
    assert!(slices_hold(&cluster, &p, 8, RACK));
    assert_eq!(
        domains(&cluster, &p, RACK).len(),
        1,
        "two slices of 8 in one rack of 18"
    );
}

#[test]
fn nested_slices_keep_pairs_on_a_node_inside_racks() {
    let mut cluster = nvl72(1, 1, 2, 18);
    // A node with 3 free GPUs hosts one member of 2 GPUs: no slice of two.
    for node in cluster.nodes.iter_mut().take(6) {
        node.free = 0b0111;
    }
    let pair = SetRequest::new(2, Collective::Ring);
    let spec = GangSpec::uniform(32, pair).sliced(vec![
        Slice {
            size: 16,
            tier: RACK,
            required: true,
        },
        Slice {
            size: 2,
            tier: HOST,
            required: true,
        },
    ]);
    let p = place_gang(&spec, &cluster).unwrap();
    assert!(slices_hold(&cluster, &p, 16, RACK));
    assert!(slices_hold(&cluster, &p, 2, HOST), "{:?}", p.members);
    let half_free: BTreeSet<usize> = (0..6).collect();
    assert!(p.members.iter().all(|m| !half_free.contains(&m.node)));
    assert!(disjoint(&p));
}

#[test]
fn consecutive_ranks_share_a_node_where_it_holds_several() {
    let cluster = nvl72(1, 1, 1, 4);
    let p = place_gang(
        &GangSpec::uniform(6, SetRequest::new(2, Collective::Ring)),
        &cluster,
    )
    .unwrap();
    for pair in p.members.chunks(2) {
        assert_eq!(pair[0].node, pair[1].node, "{:?}", p.members);
    }
    // Within a node, lower ranks take the lower GPUs.
    assert!(p.members[0].gpus < p.members[1].gpus);
}

#[test]
fn preferred_slices_fall_back_outward_then_go_unsliced() {
    let mut cluster = nvl72(1, 2, 2, 18);
    for rack in ["rack-0-0-0", "rack-0-0-1", "rack-0-1-0", "rack-0-1-1"] {
        occupy(&mut cluster, rack, 10);
    }
    // 8 free trays per rack, 16 per leaf: a slice of 12 fits no rack, one leaf.
    let slice = Slice {
        size: 12,
        tier: RACK,
        required: false,
    };
    let p = place_gang(&trays(24).sliced(vec![slice]), &cluster).unwrap();
    assert!(slices_hold(&cluster, &p, 12, LEAF));
    assert!(
        p.explanation
            .contains("none fit one gpu.clique, held at one leaf"),
        "{}",
        p.explanation
    );
    let required = Slice {
        required: true,
        ..slice
    };
    assert!(place_gang(&trays(24).sliced(vec![required]), &cluster).is_err());
}

#[test]
fn slices_that_do_not_cut_evenly_or_nest_are_refused() {
    let cluster = nvl72(1, 1, 1, 18);
    let s = |size, tier| Slice {
        size,
        tier,
        required: true,
    };
    assert!(matches!(
        place_gang(&trays(10).sliced(vec![s(4, RACK)]), &cluster),
        Err(GangNoFit::SlicesUneven {
            members: 10,
            size: 4
        })
    ));
    assert!(matches!(
        place_gang(&trays(16).sliced(vec![s(8, RACK), s(3, HOST)]), &cluster),
        Err(GangNoFit::SlicesNotNested { .. })
    ));
    assert!(matches!(
        place_gang(&trays(16).sliced(vec![s(8, HOST), s(4, RACK)]), &cluster),
        Err(GangNoFit::SlicesOutward { .. })
    ));
    assert!(matches!(
        place_gang(&trays(8).sliced(vec![s(4, 9)]), &cluster),
        Err(GangNoFit::NoSuchTier { tier: 9, .. })
    ));
    let mixed = GangSpec::each(vec![
        SetRequest::new(4, Collective::Ring),
        SetRequest::new(2, Collective::Ring),
    ])
    .sliced(vec![s(2, RACK)]);
    assert!(matches!(
        place_gang(&mixed, &cluster),
        Err(GangNoFit::SlicesNeedOneRequest { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// On any occupancy, a placement with required slices keeps every
    /// slice in one domain of its tier, gives no GPU twice, and a required
    /// leaf holds the whole gang; when it fails, no rack set could.
    #[test]
    fn required_structure_always_holds(
        busy in proptest::collection::vec(0usize..=18, 8),
        slices in 1u32..=6,
        size in prop_oneof![Just(2u32), Just(4), Just(8), Just(16)],
        within_leaf in any::<bool>(),
    ) {
        let mut cluster = nvl72(1, 2, 4, 18);
        for (i, &b) in busy.iter().enumerate() {
            occupy(&mut cluster, &format!("rack-0-{}-{}", i / 4, i % 4), b);
        }
        let slice = Slice { size, tier: RACK, required: true };
        let mut spec = trays(slices * size).sliced(vec![slice]);
        if within_leaf {
            spec = spec.within(Within::OneDomainAt { tier: LEAF });
        }
        let whole: Vec<u32> = busy.iter().map(|&b| (18 - b as u32) / size).collect();
        let fits = if within_leaf {
            whole[..4].iter().sum::<u32>() >= slices || whole[4..].iter().sum::<u32>() >= slices
        } else {
            whole.iter().sum::<u32>() >= slices
        };
        match place_gang(&spec, &cluster) {
            Ok(p) => {
                prop_assert!(fits);
                prop_assert!(slices_hold(&cluster, &p, size as usize, RACK));
                prop_assert!(disjoint(&p));
                if within_leaf {
                    prop_assert_eq!(domains(&cluster, &p, LEAF).len(), 1);
                }
            }
            Err(e) => prop_assert!(!fits, "{}", e),
        }
    }
}
