//! Random nodes and requests, by proptest: the exact choice is the oracle's.

use crate::oracle::{Oracle, check_case, check_heuristic};
use crate::topo::{Facts, Topo, all, symmetric};
use gputopo_api::{Collective, LinkClass};
use gputopo_scheduler_core::gpuset::SetRequest;
use proptest::prelude::*;

fn class_strategy() -> impl Strategy<Value = LinkClass> {
    prop_oneof![
        Just(LinkClass::Sys),
        Just(LinkClass::Node),
        Just(LinkClass::Phb),
        Just(LinkClass::Pxb),
        Just(LinkClass::Pix),
        Just(LinkClass::XgmiRouted),
        Just(LinkClass::Xgmi),
        Just(LinkClass::Nv(1)),
        Just(LinkClass::Nv(2)),
        Just(LinkClass::Nv(4)),
        Just(LinkClass::Nv(12)),
    ]
}

fn facts_strategy() -> impl Strategy<Value = Facts> {
    (
        prop_oneof![3 => (0i32..3).prop_map(Some), 1 => Just(None)],
        prop_oneof![Just(Some(81_920u64)), Just(Some(40_960)), Just(None)],
        prop_oneof![6 => Just(false), 1 => Just(true)],
    )
        .prop_map(|(numa, memory_mib, mig)| Facts {
            numa,
            memory_mib,
            mig,
        })
}

/// A random node of `n` GPUs whose links come from a small random palette, so
/// that ties (and so the tie-breaks) are common.
fn topo_strategy(n: usize) -> impl Strategy<Value = Topo> {
    (
        proptest::collection::vec(class_strategy(), 1..=4),
        proptest::collection::vec(any::<u8>(), n * (n - 1) / 2),
        proptest::collection::vec(facts_strategy(), n),
    )
        .prop_map(move |(palette, picks, facts)| {
            let mut p = picks.iter();
            let link = symmetric(n, |_, _| {
                palette[usize::from(*p.next().unwrap_or(&0)) % palette.len()]
            });
            Topo { link, facts }
        })
}

/// Requests of 1..=max_k GPUs (0 now and then), constraints now and then.
fn request_strategy(max_k: u32) -> impl Strategy<Value = SetRequest> {
    (
        prop_oneof![1 => Just(0), 12 => 1..=max_k.max(1)],
        prop_oneof![Just(Collective::Ring), Just(Collective::AllToAll)],
        prop_oneof![4 => Just(None), 1 => (0u32..=13).prop_map(Some)],
        prop_oneof![4 => Just(None), 1 => Just(Some(40_960u64)), 1 => Just(Some(81_920u64))],
        prop_oneof![4 => Just(false), 1 => Just(true)],
        prop_oneof![4 => Just(false), 1 => Just(true)],
    )
        .prop_map(
            |(gpus, collective, min_nvlink_level, min_memory_mib, allow_mig, single_numa_node)| {
                SetRequest {
                    gpus,
                    collective,
                    min_nvlink_level,
                    min_memory_mib,
                    allow_mig,
                    single_numa_node,
                }
            },
        )
}

/// A random node of `n` GPUs for `n` in `sizes`, and `queries` requests of up to `max_k` GPUs.
fn case_strategy(
    sizes: std::ops::RangeInclusive<usize>,
    max_k: u32,
    queries: usize,
) -> impl Strategy<Value = (Topo, Vec<(u32, SetRequest)>)> {
    sizes.prop_flat_map(move |n| {
        (
            topo_strategy(n),
            proptest::collection::vec(
                (free_strategy(), request_strategy(max_k.min(n as u32))),
                queries,
            ),
        )
    })
}

/// Free masks, mostly with most GPUs free.
fn free_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![
        1 => any::<u32>(),
        2 => any::<(u32, u32)>().prop_map(|(a, b)| a | b),
        1 => Just(u32::MAX),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(1024)
    })]

    /// Up to 10 GPUs, any request of up to 8: the exact choice is the oracle's,
    /// with every constraint and the full tie-break order.
    #[test]
    fn exact_choice_matches_the_oracle((topo, queries) in case_strategy(1..=10, 8, 4)) {
        let shape = topo.shape();
        let mut oracle = Oracle::new(&topo);
        for (free, req) in &queries {
            check_case(&topo, &shape, &mut oracle, *free, req)?;
            // The cache, and a picker prepared once, answer a repeated query identically.
            prop_assert_eq!(shape.pick(*free, req), shape.pick(*free, req));
            prop_assert_eq!(shape.picker(req).pick(*free), shape.pick(*free, req));
            check_heuristic(&topo, &shape, &mut oracle, *free, req)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(32)
    })]

    /// 11 to 16 GPUs, small requests and at most 11 free GPUs, to keep the
    /// oracle's leftover enumeration cheap in debug builds.
    #[test]
    fn exact_choice_matches_the_oracle_up_to_16_gpus(
        (topo, queries) in case_strategy(11..=16, 4, 3),
    ) {
        let shape = topo.shape();
        let mut oracle = Oracle::new(&topo);
        for (free, req) in &queries {
            let mut free = *free & all(topo.n());
            // Keep the oracle's leftover enumeration cheap: at most 11 free.
            while free.count_ones() > 11 {
                free &= free - 1;
            }
            check_case(&topo, &shape, &mut oracle, free, req)?;
        }
    }
}
