//! Property: all or nothing, free GPUs only, disjoint, and the fewest leaves
//! (then spines, then best fit) by brute force over node subsets.

use crate::cluster::nv12;
use gputopo_api::{Collective, PlacementStrategy};
use gputopo_scheduler_core::gang::{GangCluster, GangNoFit, GangNode, GangSpec, place_gang};
use gputopo_scheduler_core::gpuset::SetRequest;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

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
    // Failures persist beside this file (`properties.proptest-regressions`),
    // as before the split; the default would find `main.rs` one folder up and
    // write `tests/proptest-regressions/properties.txt`, shared by every target.
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    })]

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
