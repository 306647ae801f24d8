//! Named node shapes written out by hand from the recorded matrices under
//! `fixtures/nvidia/` and `fixtures/amd/`, plus 16-GPU nodes built from them.

use crate::topo::{Facts, Topo, symmetric, topo_from_rows};
use gputopo_api::LinkClass;

/// DGX-1 V100 hybrid cube-mesh (fixtures/nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt);
/// sockets from its CPU affinity column: GPUs 0-3 on 0-19,40-59, 4-7 on 20-39,60-79.
pub(crate) fn dgx1() -> Topo {
    topo_from_rows(
        &[
            "X   NV1 NV1 NV2 NV2 SYS SYS SYS",
            "NV1 X   NV2 NV1 SYS NV2 SYS SYS",
            "NV1 NV2 X   NV2 SYS SYS NV1 SYS",
            "NV2 NV1 NV2 X   SYS SYS SYS NV1",
            "NV2 SYS SYS SYS X   NV1 NV1 NV2",
            "SYS NV2 SYS SYS NV1 X   NV2 NV1",
            "SYS SYS NV1 SYS NV1 NV2 X   NV2",
            "SYS SYS SYS NV1 NV2 NV1 NV2 X  ",
        ],
        &[
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(1),
            Some(1),
            Some(1),
            Some(1),
        ],
    )
}

/// 8x A100 SXM behind NVSwitch (fixtures/nvidia/a100-sxm-8gpu-4nic-gpu-numa-id-topo-m.txt).
pub(crate) fn a100_nv12() -> Topo {
    let row = |i: usize| {
        (0..8)
            .map(|j| if i == j { "X" } else { "NV12" })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let rows: Vec<String> = (0..8).map(row).collect();
    let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
    topo_from_rows(
        &rows,
        &[
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(1),
            Some(1),
            Some(1),
            Some(1),
        ],
    )
}

/// PCIe-only two-socket box with PIX pairs (fixtures/nvidia/dgx1-v100-topo-mp-pcie-only-view.txt).
pub(crate) fn pcie_pix_pairs() -> Topo {
    topo_from_rows(
        &[
            "X   PIX PHB PHB SYS SYS SYS SYS",
            "PIX X   PHB PHB SYS SYS SYS SYS",
            "PHB PHB X   PIX SYS SYS SYS SYS",
            "PHB PHB PIX X   SYS SYS SYS SYS",
            "SYS SYS SYS SYS X   PIX PHB PHB",
            "SYS SYS SYS SYS PIX X   PHB PHB",
            "SYS SYS SYS SYS PHB PHB X   PIX",
            "SYS SYS SYS SYS PHB PHB PIX X  ",
        ],
        &[
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(1),
            Some(1),
            Some(1),
            Some(1),
        ],
    )
}

/// 8x RTX 4090, NODE within a socket, SYS across
/// (fixtures/nvidia/rtx4090-8gpu-pcie-2socket-space-expanded-topo-m.txt).
pub(crate) fn pcie_node_sys() -> Topo {
    topo_from_rows(
        &[
            "X    NODE NODE NODE SYS  SYS  SYS  SYS",
            "NODE X    NODE NODE SYS  SYS  SYS  SYS",
            "NODE NODE X    NODE SYS  SYS  SYS  SYS",
            "NODE NODE NODE X    SYS  SYS  SYS  SYS",
            "SYS  SYS  SYS  SYS  X    NODE NODE NODE",
            "SYS  SYS  SYS  SYS  NODE X    NODE NODE",
            "SYS  SYS  SYS  SYS  NODE NODE X    NODE",
            "SYS  SYS  SYS  SYS  NODE NODE NODE X   ",
        ],
        &[
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(1),
            Some(1),
            Some(1),
            Some(1),
        ],
    )
}

/// 4x A100 80GB PCIe in NVLink-bridged NV12 pairs
/// (fixtures/nvidia/a100-80gb-pcie-4gpu-nvlink-bridge-nv12-pairs-xeon8470-driver610-NO-LEGEND-topo-m.txt).
pub(crate) fn bridged_pairs() -> Topo {
    topo_from_rows(
        &[
            "X    NV12 SYS  SYS",
            "NV12 X    SYS  SYS",
            "SYS  SYS  X    NV12",
            "SYS  SYS  NV12 X   ",
        ],
        &[Some(0), Some(0), Some(1), Some(1)],
    )
}

/// The same wiring, one GPU per NUMA node
/// (fixtures/nvidia/4gpu-nv12-bridged-pairs-4numa-one-gpu-per-numa-matrix-only-NO-LEGEND-captured.txt).
pub(crate) fn bridged_pairs_4numa() -> Topo {
    let mut t = bridged_pairs();
    for (i, f) in t.facts.iter_mut().enumerate() {
        f.numa = Some(i as i32);
    }
    t
}

/// DGX-2: 16 V100 behind NVSwitch, NV6 between every pair
/// (fixtures/nvidia/dgx2-v100-16gpu-nv6-10nic-nccl-tests-issue78-no-numa-column-TRUNCATED.txt,
/// whose GPU block is complete; CPU affinity 0-23,48-71 for GPUs 0-7).
pub(crate) fn dgx2() -> Topo {
    let link = (0..16)
        .map(|i| {
            (0..16)
                .map(|j| {
                    if i == j {
                        LinkClass::Sys
                    } else {
                        LinkClass::Nv(6)
                    }
                })
                .collect()
        })
        .collect();
    let facts = (0..16).map(|i| Facts::numa(i / 8)).collect();
    Topo { link, facts }
}

/// Two DGX-1 boards side by side as one 16-GPU node, joined by SYS, four NUMA nodes.
pub(crate) fn twin_dgx1() -> Topo {
    let one = dgx1();
    let link = (0..16)
        .map(|i| {
            (0..16)
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
    let facts = (0..16).map(|i| Facts::numa(i / 4)).collect();
    Topo { link, facts }
}

/// An MI300X-class box: 8 GPUs, a direct XGMI link between every pair, two NUMA nodes
/// (fixtures/amd/amd-mi308x-8gpu-0x74a2-rocm72-rocm-smi-showtopo-lowpower-warning.txt).
pub(crate) fn mi300x() -> Topo {
    let link = symmetric(8, |_, _| LinkClass::Xgmi);
    let facts = (0..8).map(|i| Facts::numa(i / 4)).collect();
    Topo { link, facts }
}

/// Two XGMI hives of 4, PCIe across sockets between them, each hive on its NUMA node
/// (fixtures/amd/amd-8gpu-two-xgmi-hives-of-4-pcie-between-64gb-likely-mi210-rocm-smi-showtopo.txt).
pub(crate) fn two_hives() -> Topo {
    let link = symmetric(8, |a, b| {
        if a / 4 == b / 4 {
            LinkClass::Xgmi
        } else {
            LinkClass::Sys
        }
    });
    let facts = (0..8).map(|i| Facts::numa(i / 4)).collect();
    Topo { link, facts }
}

/// MI250X-like: pairs of GCDs on one package (direct XGMI), the rest reached
/// through another GCD (routed XGMI), one NUMA node.
pub(crate) fn routed_xgmi() -> Topo {
    let link = symmetric(8, |a, b| {
        if a / 2 == b / 2 {
            LinkClass::Xgmi
        } else {
            LinkClass::XgmiRouted
        }
    });
    let facts = (0..8).map(|_| Facts::numa(0)).collect();
    Topo { link, facts }
}
