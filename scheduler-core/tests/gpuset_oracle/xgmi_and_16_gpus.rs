//! Fixed XGMI (AMD) and 16-GPU shapes: checked against the oracle over a grid
//! of free masks and requests, and a few choices spelled out.

use crate::oracle::{Oracle, check_case};
use crate::shapes::{dgx2, mi300x, routed_xgmi, twin_dgx1, two_hives};
use crate::topo::{all, choose, mask};
use gputopo_api::{Collective, LinkClass};
use gputopo_scheduler_core::gpuset::SetRequest;

#[test]
fn xgmi_shapes_match_the_oracle() {
    for topo in [mi300x(), two_hives(), routed_xgmi()] {
        let shape = topo.shape();
        let mut oracle = Oracle::new(&topo);
        let frees = [all(8), all(8) & !mask(&[0, 5]), mask(&[1, 2, 3, 4, 6])];
        for free in frees {
            for k in 0..=8 {
                for collective in [Collective::Ring, Collective::AllToAll] {
                    let req = SetRequest::new(k, collective);
                    check_case(&topo, &shape, &mut oracle, free, &req)
                        .unwrap_or_else(|e| panic!("free {free:#x}, {req:?}: {e}"));
                }
            }
        }
    }
}

#[test]
fn four_gpus_on_two_hives_take_one_hive() {
    let topo = two_hives();
    for collective in [Collective::Ring, Collective::AllToAll] {
        let choice = choose(&topo, all(8), 4, collective);
        assert_eq!(choice.gpus, vec![0, 1, 2, 3], "{}", choice.explanation);
        assert_eq!(choice.bottleneck, Some(LinkClass::Xgmi));
    }
    // With one GPU of the first hive busy, the intact hive is the only XGMI set.
    let choice = choose(&topo, all(8) & !mask(&[1]), 4, Collective::Ring);
    assert_eq!(choice.gpus, vec![4, 5, 6, 7], "{}", choice.explanation);
    // A pair on the routed box stays on one package.
    let choice = choose(&routed_xgmi(), all(8), 2, Collective::Ring);
    assert_eq!(choice.bottleneck, Some(LinkClass::Xgmi));
}

#[test]
fn sixteen_gpu_shapes_match_the_oracle() {
    for topo in [dgx2(), twin_dgx1()] {
        let shape = topo.shape();
        assert!(shape.is_exact());
        let mut oracle = Oracle::new(&topo);
        let frees = [
            all(16),
            all(16) & !mask(&[0, 3, 9]),
            mask(&[1, 2, 4, 5, 6, 7, 8, 10, 11, 14]),
        ];
        for free in frees {
            for (k, collective) in [
                (1, Collective::Ring),
                (2, Collective::Ring),
                (4, Collective::Ring),
                (4, Collective::AllToAll),
                (8, Collective::Ring),
            ] {
                let req = SetRequest::new(k, collective);
                check_case(&topo, &shape, &mut oracle, free, &req)
                    .unwrap_or_else(|e| panic!("free {free:#x}, {req:?}: {e}"));
            }
        }
    }
}

#[test]
fn twin_dgx1_eight_gpus_take_one_board() {
    let topo = twin_dgx1();
    let shape = topo.shape();
    let choice = shape
        .choose(all(16), &SetRequest::new(8, Collective::Ring))
        .expect("fits");
    // A board's NV2 links form one 8-cycle: 0-3-2-1-5-6-7-4-0.
    assert_eq!(choice.bottleneck, Some(LinkClass::Nv(2)));
    assert!(choice.gpus.iter().all(|&g| g < 8) || choice.gpus.iter().all(|&g| g >= 8));
    assert_eq!(choice.numa_nodes, 2);
}
