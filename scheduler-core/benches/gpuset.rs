//! GPU-set choice: per-node cost with warm tables, the 5,000-node filter pass
//! the design targets (≤ 100 µs), cold queries, table builds, and the heuristic.
//! Before the timings it prints the heuristic's gap to the exact optimum.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gputopo_api::{Collective, GpuTopologySpec, LinkClass};
use gputopo_scheduler_core::gpuset::{Method, NodeShape, SetRequest, heuristic_gap};
use std::hint::black_box;
use std::time::Duration;

#[path = "../tests/common/mod.rs"]
mod shared;

use shared::dgx1_class;

/// A spec from a link function and a NUMA node per GPU (80 GiB, MIG off).
fn spec(
    n: u32,
    class: impl Fn(u32, u32) -> LinkClass,
    numa: impl Fn(u32) -> i32,
) -> GpuTopologySpec {
    shared::spec_with(n, class, |i| shared::Gpu {
        numa: Some(numa(i)),
        memory_mib: Some(81_920),
        mig: false,
    })
}

fn dgx1_spec() -> GpuTopologySpec {
    spec(8, dgx1_class, |i| (i / 4) as i32)
}

fn a100_spec() -> GpuTopologySpec {
    spec(8, |_, _| LinkClass::Nv(12), |i| (i / 4) as i32)
}

/// Two DGX-1 boards as one 16-GPU node.
fn twin_dgx1() -> GpuTopologySpec {
    spec(
        16,
        |a, b| {
            if a / 8 == b / 8 {
                dgx1_class(a % 8, b % 8)
            } else {
                LinkClass::Sys
            }
        },
        |i| (i / 4) as i32,
    )
}

/// 32 GPUs behind NVSwitch, two NUMA nodes: beyond the exact tables.
fn nvswitch32() -> GpuTopologySpec {
    spec(32, |_, _| LinkClass::Nv(18), |i| (i / 16) as i32)
}

/// Four DGX-1 boards as one 32-GPU node: the heuristic on a sparse mesh.
fn quad_dgx1() -> GpuTopologySpec {
    spec(
        32,
        |a, b| {
            if a / 8 == b / 8 {
                dgx1_class(a % 8, b % 8)
            } else {
                LinkClass::Sys
            }
        },
        |i| (i / 4) as i32,
    )
}

/// A reproducible random 12- or 16-GPU mesh (linear congruential generator).
fn random_mesh(n: u32, seed: u64) -> GpuTopologySpec {
    let mut state = seed;
    let mut classes = Vec::new();
    for _ in 0..n * n {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        classes.push(
            [
                LinkClass::Sys,
                LinkClass::Node,
                LinkClass::Nv(1),
                LinkClass::Nv(2),
            ][(state >> 33) as usize % 4],
        );
    }
    spec(
        n,
        move |a, b| classes[(a * n + b) as usize],
        move |i| (2 * i / n) as i32,
    )
}

/// Pseudo-random free masks of an 8-GPU node, as 5,000 nodes in a busy cluster might show.
fn cluster_free_masks(nodes: usize) -> Vec<u32> {
    let mut state = 42u64;
    (0..nodes)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as u32 | (state >> 20) as u32) & 0xff
        })
        .collect()
}

fn print_heuristic_gaps() {
    for (name, spec, step) in [
        ("dgx1", dgx1_spec(), 1u32),
        ("twin-dgx1", twin_dgx1(), 257),
        ("random-12", random_mesh(12, 7), 13),
        ("random-16a", random_mesh(16, 11), 257),
        ("random-16b", random_mesh(16, 12), 257),
    ] {
        let Ok(shape) = NodeShape::from_spec(&spec) else {
            continue;
        };
        let n = shape.gpu_count();
        let top = if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
        let mut cases = Vec::new();
        let mut free = top;
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
        if let Some(report) = heuristic_gap(&shape, cases) {
            eprintln!(
                "heuristic gap {name}: {} feasible cases, mean {:.3} rank, worst {} rank, optimal bottleneck in {}, same set in {}, missed {}",
                report.feasible,
                report.mean_gap,
                report.worst_gap,
                report.optimal_quality,
                report.same_set,
                report.missed
            );
        }
    }
}

fn bench(c: &mut Criterion) {
    print_heuristic_gaps();

    let dgx1 = NodeShape::from_spec(&dgx1_spec()).expect("valid");
    let a100 = NodeShape::from_spec(&a100_spec()).expect("valid");
    let ring4 = SetRequest::new(4, Collective::Ring);
    let a2a4 = SetRequest::new(4, Collective::AllToAll);

    let mut group = c.benchmark_group("pick-warm-8gpu");
    group.throughput(Throughput::Elements(256));
    for (name, shape, request) in [("dgx1-ring-k4", &dgx1, ring4), ("a100-a2a-k4", &a100, a2a4)] {
        for free in 0..256u32 {
            let _ = shape.pick(free, &request);
        }
        group.bench_function(format!("{name}/all-256-free-masks"), |b| {
            b.iter(|| {
                for free in 0..256u32 {
                    let _ = black_box(shape.pick(black_box(free), &request));
                }
            })
        });
    }
    group.finish();

    // One pod against 5,000 identical 8-GPU nodes with assorted free masks:
    // what the filter and score plugins do per scheduling cycle.
    let mut group = c.benchmark_group("filter-5000-nodes");
    let masks = cluster_free_masks(5_000);
    group.throughput(Throughput::Elements(masks.len() as u64));
    for k in [1u32, 2, 4, 8] {
        let request = SetRequest::new(k, Collective::Ring);
        group.bench_function(format!("dgx1-ring-k{k}/picker"), |b| {
            b.iter(|| {
                let picker = dgx1.picker(&request);
                let mut fits = 0u32;
                let mut best = 0u8;
                for &free in &masks {
                    if let Ok(pick) = picker.pick(black_box(free)) {
                        fits += 1;
                        best = best.max(pick.score);
                    }
                }
                black_box((fits, best))
            })
        });
    }
    group.bench_function("dgx1-ring-k4/pick-per-node", |b| {
        b.iter(|| {
            let mut fits = 0u32;
            for &free in &masks {
                fits += u32::from(dgx1.pick(black_box(free), &ring4).is_ok());
            }
            black_box(fits)
        })
    });
    group.finish();

    let mut group = c.benchmark_group("choose-explained");
    group.bench_function("dgx1-ring-k4-empty-node", |b| {
        b.iter(|| black_box(dgx1.choose(black_box(0xff), &ring4)))
    });
    group.finish();

    let twin = NodeShape::from_spec(&twin_dgx1()).expect("valid");
    let mut group = c.benchmark_group("pick-16gpu");
    for k in [1u32, 4, 8] {
        let request = SetRequest::new(k, Collective::Ring);
        group.bench_function(format!("twin-dgx1-ring-k{k}/cold-exact-search"), |b| {
            b.iter(|| {
                black_box(twin.pick_with(black_box(0xffff & !0x0101), &request, Method::Exact))
            })
        });
        group.bench_function(format!("twin-dgx1-ring-k{k}/warm-cache"), |b| {
            b.iter(|| black_box(twin.pick(black_box(0xffff & !0x0101), &request)))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("table-build");
    for (name, spec) in [
        ("dgx1-8gpu", dgx1_spec()),
        ("twin-dgx1-16gpu", twin_dgx1()),
        ("nvswitch-32gpu", nvswitch32()),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| black_box(NodeShape::from_spec(black_box(&spec))))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("heuristic-32gpu-cold");
    for (name, spec) in [("nvswitch32", nvswitch32()), ("quad-dgx1", quad_dgx1())] {
        let shape = NodeShape::from_spec(&spec).expect("valid");
        for k in [4u32, 8] {
            let request = SetRequest::new(k, Collective::Ring);
            group.bench_function(format!("{name}-ring-k{k}"), |b| {
                b.iter(|| {
                    black_box(shape.pick_with(black_box(!0x0000_0301), &request, Method::Heuristic))
                })
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
