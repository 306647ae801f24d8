//! Gang placement at cluster scale: a gang of 64 × 8-GPU pods on 5,000 nodes of
//! 8 GPUs across 4 spines and 40 leaves (125 nodes per leaf), target ≤ 20 ms;
//! plus a 256-member gang that needs several leaves, a preemption search,
//! and a structured gang on an NVL72 fabric: 256 trays in slices of 16, each
//! required in one rack, the gang preferring one spine, on 5,000 4-GPU nodes
//! in racks of 18, 4 racks per leaf, 8 leaves per spine, partly occupied.

use criterion::{Criterion, criterion_group, criterion_main};
use gputopo_api::{
    Collective, GpuInfo, GpuLink, GpuTopologySpec, Interconnect, LinkClass, TopologySource,
    TopologySummary, WorkloadKind,
};
use gputopo_scheduler_core::gang::{GangCluster, GangNode, GangSpec, Slice, Within, place_gang};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use gputopo_scheduler_core::preempt::{
    PreemptCluster, PreemptNode, PreemptionPolicy, Preemptor, Victim, propose,
};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const SPINES: usize = 4;
const LEAVES_PER_SPINE: usize = 10;
const NODES_PER_LEAF: usize = 125;

/// HGX A100: 8 GPUs, NV12 everywhere, two NUMA nodes.
fn hgx() -> Arc<NodeShape> {
    let gpus = (0..8)
        .map(|i| GpuInfo {
            index: i,
            uuid: None,
            product: Some("A100-SXM4-80GB".into()),
            memory_mib: Some(81_920),
            pci_bus_id: None,
            numa_node: Some(i32::from(i >= 4)),
            cpu_affinity: None,
            mig_enabled: Some(false),
            fabric: None,
        })
        .collect();
    let mut links = Vec::new();
    for a in 0..8 {
        for b in a + 1..8 {
            links.push(GpuLink {
                a,
                b,
                link_type: LinkClass::Nv(12).link_type(),
                nvlinks: 12,
                hops: None,
                weight: None,
                bandwidth: None,
            });
        }
    }
    let spec = GpuTopologySpec {
        node_name: "bench".into(),
        source: TopologySource::Fixture,
        vendor: None,
        driver_version: None,
        cuda_version: None,
        gpus,
        links,
        nics: vec![],
        islands: vec![],
        summary: TopologySummary {
            gpu_count: 8,
            product: None,
            p2p_level: None,
            p2p_bottleneck: None,
            all_to_all_nvlink: true,
            largest_island: 8,
            numa_nodes: None,
            interconnect: Interconnect::Nvswitch,
        },
    };
    Arc::new(NodeShape::from_spec(&spec).expect("valid shape"))
}

/// A deterministic mix: 60 % of nodes free, 25 % half busy, 15 % full.
fn busy_mask(i: usize) -> u32 {
    let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56;
    match h % 20 {
        0..=11 => 0,
        12..=16 => 0x0f << (4 * (h % 2)),
        _ => 0xff,
    }
}

fn cluster() -> GangCluster {
    let shape = hgx();
    let mut nodes = Vec::with_capacity(SPINES * LEAVES_PER_SPINE * NODES_PER_LEAF);
    for s in 0..SPINES {
        for l in 0..LEAVES_PER_SPINE {
            for _ in 0..NODES_PER_LEAF {
                let id = nodes.len();
                nodes.push(GangNode::new(
                    id,
                    vec![Some(format!("spine-{s}")), Some(format!("leaf-{s}-{l}"))],
                    Arc::clone(&shape),
                    0xff & !busy_mask(id),
                ));
            }
        }
    }
    GangCluster {
        tier_names: vec!["gputopo.dev/spine".into(), "gputopo.dev/leaf".into()],
        nodes,
    }
}

/// A GB200 compute tray: 4 GPUs, NV18 between all, one NUMA node.
fn tray() -> Arc<NodeShape> {
    let gpus = (0..4)
        .map(|i| GpuInfo {
            index: i,
            uuid: None,
            product: Some("NVIDIA GB200".into()),
            memory_mib: Some(189_471),
            pci_bus_id: None,
            numa_node: Some(0),
            cpu_affinity: None,
            mig_enabled: Some(false),
            fabric: None,
        })
        .collect();
    let mut links = Vec::new();
    for a in 0..4 {
        for b in a + 1..4 {
            links.push(GpuLink {
                a,
                b,
                link_type: LinkClass::Nv(18).link_type(),
                nvlinks: 18,
                hops: None,
                weight: None,
                bandwidth: None,
            });
        }
    }
    let spec = GpuTopologySpec {
        node_name: "tray".into(),
        source: TopologySource::Fixture,
        vendor: None,
        driver_version: None,
        cuda_version: None,
        gpus,
        links,
        nics: vec![],
        islands: vec![],
        summary: TopologySummary {
            gpu_count: 4,
            product: None,
            p2p_level: None,
            p2p_bottleneck: None,
            all_to_all_nvlink: true,
            largest_island: 4,
            numa_nodes: None,
            interconnect: Interconnect::Nvswitch,
        },
    };
    Arc::new(NodeShape::from_spec(&spec).expect("valid shape"))
}

/// 5,000 trays, 18 per rack (the last rack holds 14), 4 racks per leaf, 8
/// leaves per spine (9 spines, the last partial), tiers spine, leaf, rack
/// (`nvidia.com/gpu.clique`). Three racks in five are nearly empty (0–2
/// trays busy), the others busy (6–17 trays); a busy tray has 2 or 4 GPUs
/// taken.
fn nvl72_cluster() -> GangCluster {
    let shape = tray();
    let mut nodes = Vec::with_capacity(5_000);
    for id in 0..5_000usize {
        let rack = id / 18;
        let (leaf, spine) = (rack / 4, rack / 32);
        let h = (rack as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56;
        let busy = if h % 5 < 3 { h % 3 } else { 6 + h % 12 } as usize;
        let slot = id % 18;
        let free = if slot < busy {
            if slot % 2 == 0 { 0 } else { 0xc }
        } else {
            0xf
        };
        nodes.push(GangNode::new(
            id,
            vec![
                Some(format!("spine-{spine}")),
                Some(format!("leaf-{spine}-{leaf}")),
                Some(format!("rack-{spine}-{leaf}-{rack}")),
            ],
            Arc::clone(&shape),
            free,
        ));
    }
    GangCluster {
        tier_names: vec![
            "gputopo.dev/spine".into(),
            "gputopo.dev/leaf".into(),
            "nvidia.com/gpu.clique".into(),
        ],
        nodes,
    }
}

fn bench_gang(c: &mut Criterion) {
    let cluster = cluster();
    let request = SetRequest::new(8, Collective::Ring);
    let mut group = c.benchmark_group("gang");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for members in [64u32, 256] {
        let spec = GangSpec::uniform(members, request);
        let p = place_gang(&spec, &cluster).expect("the bench gang fits");
        println!(
            "gang of {members}: {} leaf domain(s); {}",
            p.leaf_domains(),
            p.explanation
        );
        group.bench_function(format!("{members}x8gpu_on_5000_nodes"), |b| {
            b.iter(|| place_gang(black_box(&spec), black_box(&cluster)))
        });
    }

    // Structured: 256 trays in 16 slices of 16, each slice required in one
    // rack, the gang preferring one spine.
    let nvl72 = nvl72_cluster();
    let structured = GangSpec::uniform(256, SetRequest::new(4, Collective::Ring))
        .preferring(0)
        .sliced(vec![Slice {
            size: 16,
            tier: 2,
            required: true,
        }]);
    let p = place_gang(&structured, &nvl72).expect("the structured bench gang fits");
    println!(
        "structured gang of 256: {} rack(s); {}",
        p.leaf_domains(),
        p.explanation
    );
    group.bench_function(
        "256x4gpu_16_slices_per_rack_prefer_spine_on_5000_nodes",
        |b| b.iter(|| place_gang(black_box(&structured), black_box(&nvl72))),
    );

    // Preemption: every node full of low-priority training; a 4 × 8-GPU gang
    // needs evictions in one leaf.
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let preempt = PreemptCluster {
        tier_names: cluster.tier_names.clone(),
        nodes: cluster
            .nodes
            .iter()
            .map(|n| {
                let minutes = 1 + (n.id as u64 * 7) % 29;
                PreemptNode {
                    node: GangNode {
                        free: 0,
                        ..n.clone()
                    },
                    victims: vec![
                        Victim {
                            id: 2 * n.id,
                            name: format!("ml/a-{}", n.id),
                            priority: 0,
                            workload: Some(WorkloadKind::Training),
                            gpus: 0x0f,
                            start: now - Duration::from_secs(86_400),
                            checkpoint: Some(now - Duration::from_secs(minutes * 60)),
                            expected_completion: None,
                            gang: None,
                        },
                        Victim {
                            id: 2 * n.id + 1,
                            name: format!("serve/b-{}", n.id),
                            priority: 0,
                            workload: Some(WorkloadKind::Inference),
                            gpus: 0xf0,
                            start: now - Duration::from_secs(86_400),
                            checkpoint: None,
                            expected_completion: None,
                            gang: None,
                        },
                    ],
                    required: Vec::new(),
                }
            })
            .collect(),
    };
    let gang = Preemptor {
        priority: 10,
        request: SetRequest::new(8, Collective::Ring),
        members: 4,
        within: Within::OneDomainAt { tier: 1 },
    };
    let policy = PreemptionPolicy::default();
    group.bench_function("preempt_4x8gpu_in_one_leaf_of_5000_full_nodes", |b| {
        b.iter(|| propose(black_box(&gang), black_box(&preempt), &policy, now))
    });
    group.finish();
}

criterion_group!(benches, bench_gang);
criterion_main!(benches);
