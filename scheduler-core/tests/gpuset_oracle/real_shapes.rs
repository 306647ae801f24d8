//! The choice on real node shapes, each expectation written out by hand: the
//! set, its bottleneck, the deciding rule, the typed reason when nothing fits,
//! and the explanation's wording.

use crate::shapes::{
    a100_nv12, bridged_pairs, bridged_pairs_4numa, dgx1, pcie_node_sys, pcie_pix_pairs,
};
use crate::topo::{Facts, Topo, all, choose, mask};
use gputopo_api::{Collective, LinkClass};
use gputopo_scheduler_core::gpuset::{DecidedBy, NoFitReason, SetRequest};

fn one_socket(gpus: &[u32]) -> bool {
    gpus.iter().all(|&g| g < 4) || gpus.iter().all(|&g| g >= 4)
}

#[test]
fn dgx1_quad_on_an_empty_node_is_an_nv1_ring_in_one_socket() {
    let choice = choose(&dgx1(), all(8), 4, Collective::Ring);
    assert_eq!(choice.bottleneck, Some(LinkClass::Nv(1)));
    assert!(one_socket(&choice.gpus), "{choice:?}");
    assert_eq!(choice.numa_nodes, 1);
    assert_eq!(choice.gpus, vec![0, 1, 2, 3]);
    assert_eq!(
        choice.decided_by,
        DecidedBy::LowestIndices,
        "GPUs 4-7 are its mirror image"
    );
    assert!(
        choice.explanation.contains("ring bottleneck NV1"),
        "{}",
        choice.explanation
    );
    assert!(
        choice.explanation.contains("1 NUMA node"),
        "{}",
        choice.explanation
    );
    assert_eq!(choice.score, 100, "{}", choice.explanation);
}

#[test]
fn dgx1_pair_is_an_nv2_pair_in_one_socket() {
    let choice = choose(&dgx1(), all(8), 2, Collective::Ring);
    assert_eq!(choice.bottleneck, Some(LinkClass::Nv(2)));
    assert!(one_socket(&choice.gpus));
    // {0,4} is NV2 too, but spans both sockets.
    let across = dgx1()
        .shape()
        .choose(mask(&[0, 4]), &SetRequest::new(2, Collective::Ring));
    assert_eq!(across.map(|c| c.numa_nodes).ok(), Some(2));
}

#[test]
fn dgx1_single_gpu_after_one_socket_is_taken_keeps_nv2_pairs() {
    let topo = dgx1();
    let shape = topo.shape();
    let free = mask(&[0, 1, 2, 3]);
    let choice = shape
        .choose(free, &SetRequest::new(1, Collective::Ring))
        .expect("fits");
    assert_eq!(choice.bottleneck, None, "a single GPU crosses no link");
    let pairs = choice.leftover.slot(2).expect("pair slot");
    assert_eq!(pairs.best_ring, Some(LinkClass::Nv(2)));
    // Every other single GPU would leave at most as many NV2 pairs.
    for g in 0..4 {
        let left = shape.leftover(free & !(1 << g));
        let other = left.slot(2).expect("pair slot");
        assert!((other.best_ring, other.sets) <= (pairs.best_ring, pairs.sets));
    }
    assert_eq!(
        pairs.sets, 2,
        "taking 0 or 1 keeps two NV2 pairs; 2 or 3 keeps one"
    );
    assert!(choice.gpus == vec![0] || choice.gpus == vec![1]);
}

#[test]
fn a100_nvswitch_all_to_all() {
    let topo = a100_nv12();
    let quad = choose(&topo, all(8), 4, Collective::AllToAll);
    assert_eq!(quad.bottleneck, Some(LinkClass::Nv(12)));
    assert_eq!(quad.numa_nodes, 1);
    let eight = choose(&topo, all(8), 8, Collective::AllToAll);
    assert_eq!(
        (eight.bottleneck, eight.numa_nodes, eight.score),
        (Some(LinkClass::Nv(12)), 2, 100)
    );

    let shape = topo.shape();
    let mut req = SetRequest::new(4, Collective::AllToAll);
    req.min_nvlink_level = Some(12);
    assert!(shape.choose(all(8), &req).is_ok());
    req.min_nvlink_level = Some(18);
    let err = shape.choose(all(8), &req).expect_err("no NV18 on A100");
    assert_eq!(err.summary(), "no 4-GPU set with NV18");

    let mut req = SetRequest::new(5, Collective::Ring);
    req.single_numa_node = true;
    assert!(matches!(
        shape.choose(all(8), &req),
        Err(NoFitReason::SingleNumaNode {
            requested: 5,
            largest_group: 4
        })
    ));
    // A 3-GPU request next to a busy GPU 0: {1,2,3} and {4,5,6} leave equally
    // good NV12 sets (the leftover measure does not look at NUMA); lower indices win.
    let three = shape
        .choose(all(8) & !1, &SetRequest::new(3, Collective::Ring))
        .expect("fits");
    assert_eq!(three.gpus, vec![1, 2, 3]);
}

#[test]
fn pcie_box_pairs_take_a_pix_switch_and_quads_stay_in_a_socket() {
    let topo = pcie_pix_pairs();
    let pair = choose(&topo, all(8), 2, Collective::Ring);
    assert_eq!(pair.bottleneck, Some(LinkClass::Pix));
    let quad = choose(&topo, all(8), 4, Collective::Ring);
    assert!(one_socket(&quad.gpus), "{quad:?}");
    assert_eq!(quad.bottleneck, Some(LinkClass::Phb));
    // With one GPU of each socket busy, a quad must still avoid SYS if it can't: it can't.
    let split = choose(&topo, all(8) & !mask(&[0, 4]), 4, Collective::Ring);
    assert_eq!(split.bottleneck, Some(LinkClass::Sys));
    // A single GPU next to a busy GPU 0 takes its PIX partner, keeping 2-3, 4-5, 6-7 whole.
    let single = choose(&topo, all(8) & !1, 1, Collective::Ring);
    assert_eq!(single.gpus, vec![1]);

    let node = pcie_node_sys();
    let quad = choose(&node, all(8), 4, Collective::Ring);
    assert!(one_socket(&quad.gpus));
    assert_eq!(quad.bottleneck, Some(LinkClass::Node));
    let quad = choose(&node, all(8) & !mask(&[1]), 4, Collective::Ring);
    assert_eq!(quad.gpus, vec![4, 5, 6, 7], "socket 0 has only 3 free");
}

#[test]
fn bridged_pairs_single_gpu_takes_the_orphan() {
    for topo in [bridged_pairs(), bridged_pairs_4numa()] {
        let all_free = choose(&topo, all(4), 1, Collective::Ring);
        assert_eq!(
            all_free.gpus,
            vec![0],
            "either pair is equivalent; lowest index"
        );
        let orphan = choose(&topo, all(4) & !mask(&[0]), 1, Collective::Ring);
        assert_eq!(orphan.gpus, vec![1], "{}", orphan.explanation);
        assert_eq!(orphan.decided_by, DecidedBy::Leftover);
        assert!(
            orphan.explanation.contains("best pair NV12"),
            "{}",
            orphan.explanation
        );
        let orphan = choose(&topo, all(4) & !mask(&[3]), 1, Collective::Ring);
        assert_eq!(orphan.gpus, vec![2]);
        let pair = choose(&topo, all(4) & !mask(&[0]), 2, Collective::Ring);
        assert_eq!(
            (pair.gpus, pair.bottleneck),
            (vec![2, 3], Some(LinkClass::Nv(12)))
        );
    }
}

#[test]
fn eight_bridged_pairs_keep_intact_pairs_whole() {
    // Four NV12 bridged pairs (0-1, 2-3, 4-5, 6-7), SYS otherwise; GPU 6 busy:
    // a single GPU must take 7, not break the lower-indexed pair 0-1.
    let link = (0..8)
        .map(|i: usize| {
            (0..8)
                .map(|j: usize| {
                    if i / 2 == j / 2 {
                        LinkClass::Nv(12)
                    } else {
                        LinkClass::Sys
                    }
                })
                .collect()
        })
        .collect();
    let topo = Topo {
        link,
        facts: (0..8).map(|i| Facts::numa(i / 4)).collect(),
    };
    let choice = choose(&topo, all(8) & !mask(&[6]), 1, Collective::Ring);
    assert_eq!(choice.gpus, vec![7], "{}", choice.explanation);
}

#[test]
fn constraints_and_reasons() {
    let mut topo = dgx1();
    topo.facts[0].mig = true;
    topo.facts[1].memory_mib = Some(16_384);
    topo.facts[2].memory_mib = None;
    topo.facts[5].numa = None;
    let shape = topo.shape();

    let req = SetRequest::new(9, Collective::Ring);
    assert!(matches!(
        shape.choose(all(8), &req),
        Err(NoFitReason::TooFewFreeGpus {
            requested: 9,
            free: 8
        })
    ));

    let req = SetRequest::new(8, Collective::Ring);
    assert!(matches!(
        shape.choose(all(8), &req),
        Err(NoFitReason::MigEnabled { usable: 7, .. })
    ));
    let req = SetRequest {
        allow_mig: true,
        ..req
    };
    assert!(shape.choose(all(8), &req).is_ok());

    let req = SetRequest {
        min_memory_mib: Some(32_768),
        ..SetRequest::new(6, Collective::Ring)
    };
    let err = shape
        .choose(all(8), &req)
        .expect_err("GPU 0 MIG, 1 small, 2 unknown");
    assert_eq!(
        err,
        NoFitReason::InsufficientMemory {
            requested: 6,
            min_memory_mib: 32_768,
            eligible: 5
        }
    );
    assert_eq!(err.summary(), "too few free GPUs with 32768 MiB");

    // Socket 1 has 4 GPUs but GPU 5's NUMA node is unknown: no single node holds 4.
    let req = SetRequest {
        single_numa_node: true,
        ..SetRequest::new(4, Collective::Ring)
    };
    assert!(matches!(
        shape.choose(all(8), &req),
        Err(NoFitReason::SingleNumaNode {
            largest_group: 3,
            ..
        })
    ));
    let three = shape
        .choose(all(8), &SetRequest { gpus: 3, ..req })
        .expect("3 fit in one NUMA node");
    assert!(!three.gpus.contains(&5) && !three.gpus.contains(&0));

    let req = SetRequest {
        min_nvlink_level: Some(2),
        ..SetRequest::new(3, Collective::Ring)
    };
    assert!(matches!(
        shape.choose(all(8), &req),
        Err(NoFitReason::NoNvlinkSet { level: 2, .. })
    ));
    let single = shape
        .choose(all(8), &SetRequest { gpus: 1, ..req })
        .expect("vacuous");
    assert_eq!(single.gpus.len(), 1);
    let none = shape
        .choose(0, &SetRequest::new(0, Collective::Ring))
        .expect("nothing asked");
    assert!(none.gpus.is_empty());
}

#[test]
fn explanations_name_the_bottleneck_and_the_deciding_rule() {
    let cases = [
        (dgx1(), all(8), SetRequest::new(4, Collective::Ring)),
        (dgx1(), all(8), SetRequest::new(2, Collective::Ring)),
        (
            dgx1(),
            mask(&[0, 4, 5]),
            SetRequest::new(2, Collective::Ring),
        ),
        (
            pcie_pix_pairs(),
            all(8) & !mask(&[0, 4]),
            SetRequest::new(4, Collective::Ring),
        ),
        (
            bridged_pairs(),
            all(4) & !1,
            SetRequest::new(1, Collective::Ring),
        ),
        (
            a100_nv12(),
            all(8) & !1,
            SetRequest::new(4, Collective::AllToAll),
        ),
        (
            a100_nv12(),
            mask(&[3, 4]),
            SetRequest::new(2, Collective::AllToAll),
        ),
    ];
    for (topo, free, request) in cases {
        let choice = topo.shape().choose(free, &request).expect("fits");
        eprintln!("{}  [score {}]", choice.explanation, choice.score);
        let class = choice.bottleneck.map(|c| c.to_string());
        match class {
            Some(class) => assert!(
                choice.explanation.contains(&class),
                "{}",
                choice.explanation
            ),
            None => assert!(
                choice.explanation.contains("no link"),
                "{}",
                choice.explanation
            ),
        }
        let rule = match choice.decided_by {
            DecidedBy::OnlyCandidate => "only feasible set",
            DecidedBy::Bottleneck => "the strongest",
            DecidedBy::NumaNodes => "fewer NUMA nodes",
            DecidedBy::Leftover => "better connected",
            DecidedBy::LowestIndices => "lower indices",
        };
        assert!(choice.explanation.contains(rule), "{}", choice.explanation);
        assert_eq!(
            choice.assigned_gpus(),
            choice
                .gpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
    }
}
