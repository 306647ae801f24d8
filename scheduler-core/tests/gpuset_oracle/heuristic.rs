//! The heuristic, on shapes where the optimum is known (its gap to it) and
//! beyond, on domains too large for exact tables.

use crate::shapes::{dgx1, pcie_pix_pairs, twin_dgx1};
use crate::topo::{Facts, Topo, all, mask, symmetric};
use gputopo_api::{Collective, LinkClass};
use gputopo_scheduler_core::gpuset::{
    Method, SetRequest, full_nvlink_slots, heuristic_gap, stranded_free_gpus,
};

/// A reproducible random node: links from a palette of mesh-like classes,
/// two NUMA nodes (a tiny linear congruential generator; no crate needed).
fn seeded_topo(n: usize, seed: u64) -> Topo {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    let palette = [
        LinkClass::Sys,
        LinkClass::Node,
        LinkClass::Nv(1),
        LinkClass::Nv(2),
    ];
    let link = symmetric(n, |_, _| palette[next() % palette.len()]);
    let facts = (0..n).map(|i| Facts::numa((2 * i / n) as i32)).collect();
    Topo { link, facts }
}

#[test]
fn heuristic_gap_on_real_and_random_shapes() {
    let mut lines = Vec::new();
    for (name, topo, step) in [
        ("dgx1", dgx1(), 1u32),
        ("pcie-pix", pcie_pix_pairs(), 1),
        ("twin-dgx1", twin_dgx1(), 4099),
        ("random-12a", seeded_topo(12, 1), 97),
        ("random-12b", seeded_topo(12, 2), 97),
        ("random-16", seeded_topo(16, 3), 4099),
    ] {
        let shape = topo.shape();
        let n = topo.n() as u32;
        let mut cases = Vec::new();
        let mut free = all(n as usize);
        loop {
            for k in 1..=n.min(8) {
                for collective in [Collective::Ring, Collective::AllToAll] {
                    cases.push((free, SetRequest::new(k, collective)));
                }
            }
            if free < step {
                break;
            }
            free -= step;
        }
        let report = heuristic_gap(&shape, cases).expect("exact shape");
        assert_eq!(report.missed, 0, "{name}: no NVLink floor, nothing to miss");
        lines.push(format!("{name}: {report:?}"));
    }
    eprintln!("{}", lines.join("\n"));
}

#[test]
fn large_domains_use_the_heuristic() {
    // 32 GPUs behind NVSwitch (NV18), two NUMA nodes of 16.
    let n = 32;
    let link = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    if i == j {
                        LinkClass::Sys
                    } else {
                        LinkClass::Nv(18)
                    }
                })
                .collect()
        })
        .collect();
    let topo = Topo {
        link,
        facts: (0..n).map(|i| Facts::numa(i / 16)).collect(),
    };
    let shape = topo.shape();
    assert!(!shape.is_exact());
    let choice = shape
        .choose(!mask(&[0, 1, 2]), &SetRequest::new(8, Collective::Ring))
        .expect("fits");
    assert_eq!(choice.method, Method::Heuristic);
    assert_eq!(choice.bottleneck, Some(LinkClass::Nv(18)));
    assert_eq!(choice.numa_nodes, 1);
    assert_eq!(full_nvlink_slots(&shape, u32::MAX, 8), 4);
    assert_eq!(stranded_free_gpus(&shape, !1, 8), 0);

    // Three DGX-1 boards as one 24-GPU node: 8 GPUs take one board's NV1 ring.
    let one = dgx1();
    let link = (0..24)
        .map(|i| {
            (0..24)
                .map(|j| {
                    if i / 8 == j / 8 {
                        one.link[i % 8][j % 8]
                    } else {
                        LinkClass::Sys
                    }
                })
                .collect()
        })
        .collect();
    let topo = Topo {
        link,
        facts: (0..24).map(|i| Facts::numa(i / 4)).collect(),
    };
    let shape = topo.shape();
    for k in 1..=8 {
        let choice = shape
            .choose(all(24), &SetRequest::new(k, Collective::Ring))
            .expect("fits");
        let best_possible = dgx1()
            .shape()
            .choose(all(8), &SetRequest::new(k, Collective::Ring));
        assert_eq!(
            choice.bottleneck,
            best_possible.expect("fits").bottleneck,
            "k = {k}: {}",
            choice.explanation
        );
    }
    let mut req = SetRequest::new(4, Collective::AllToAll);
    req.min_nvlink_level = Some(1);
    req.single_numa_node = true;
    let quad = shape
        .choose(all(24) & !mask(&[0]), &req)
        .expect("a socket is an NV clique");
    assert_eq!(quad.numa_nodes, 1);
    assert_eq!(quad.bottleneck, Some(LinkClass::Nv(1)));
}
