//! The `nvidia-smi topo -m` parser over the recorded fixtures in `fixtures/nvidia/`.
//!
//! Every fixture holding a `topo -m`-shaped matrix is listed in exactly one of [`MUST_PARSE`]
//! and [`MUST_FAIL`]; a new fixture that looks like a matrix and is in neither fails
//! `every_matrix_fixture_is_classified`, so none is skipped silently. The `nvlink -s` and `-q`
//! parsers, and facts from all three texts, are in `nvlink_query_fixtures.rs`.

use gputopo_api::{LinkClass, LinkType, TopologySource};
use gputopo_topology::backend::nvidia_smi::{NvidiaSmiError, facts_from_topo};
use gputopo_topology::parse::topo_matrix::{self, TopoErrorKind, TopoMatrix};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/nvidia")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn matrix(name: &str) -> TopoMatrix {
    topo_matrix::parse(&read(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn nv(k: u32) -> LinkClass {
    LinkClass::Nv(k)
}

/// Complete `topo -m` / `topo -mp` matrices (legend absent, snipped or cut short is fine).
const MUST_PARSE: &[&str] = &[
    "4gpu-nv12-bridged-pairs-4numa-one-gpu-per-numa-matrix-only-NO-LEGEND-captured.txt",
    "a100-4gpu-nv4-1nic-cpu-affinity-0,64-numa-affinity-range-0-3-topo-m.txt",
    "a100-4gpu-nv4-slurm-cgroup-cpu-affinity-0-and-empty-gpu-d-2-topo-m.txt",
    "a100-80gb-pcie-4gpu-nvlink-bridge-nv12-pairs-xeon8470-driver610-NO-LEGEND-topo-m.txt",
    "a100-pcie-2gpu-one-per-socket-della-i14g20-2nic-topo-m.txt",
    "a100-pcie-4gpu-adroit-no-nvlink-interleaved-cpu-affinity-leading-spaces-topo-m.txt",
    "a100-sxm-8gpu-4nic-gpu-numa-id-topo-m.txt",
    // `mlx5_1 CPU Affinity NUMA Affinity`: tabs collapsed to single spaces; no name but the
    // affinity columns holds a blank, so the names still read apart.
    "alcf-polaris-a100-4gpu-nv4-4numa-MALFORMED-header-spaces-no-leading-tab-topo-m.txt",
    "dgx-a100-mlx5-names-12nic-topo-m.txt",
    "dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt",
    "dgx1-v100-topo-mp-pcie-only-view.txt",
    // The matrix is whole; only the legend after it is cut.
    "gb200-4gpu-tray-k8s-test-infra-issue371-space-expanded-topo-m-LEGEND-TRUNCATED.txt",
    "h100-8gpu-nv18-no-nic-nccl-topo-tutorial-space-expanded-topo-m.txt",
    "h100-h200-class-8gpu-numa-off-12nic-aihub0007-topo-m.txt",
    "h20-3e-8gpu-2nic-driver580-space-expanded-topo-m.txt",
    "hgx-a100-4gpu-sxm4-80gb-epyc7532-driver580-roce-nic-rocep49s0-topo-m.txt",
    "hgx-a100-sxm-40gb-epyc7742-10nic-driver525-topo-m.txt",
    "hgx-h100-80gb-hbm3-8gpu-12nic-driver580-header-no-leading-tab-topo-m.txt",
    "k80-2card-4gpu-mlx4-OLD-SOC-legend-no-numa-topo-matrix.txt",
    "pcie-8gpu-all-SYS-2numa-nccl-topo-tutorial-topo-m.txt",
    "rtx3090-2gpu-nvlink-bridge-nv4-5900x-topo-m.txt",
    "rtx3090-2gpu-nvlink-club3090-driver610-space-expanded-topo-m.txt",
    "rtx4090-8gpu-all-SYS-2nic-go-gpuallocator-issue17-topo-m.txt",
    "rtx4090-8gpu-pcie-2socket-space-expanded-topo-m.txt",
    "rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt",
    "rtx5090-2gpu-pcie-phb-threadripper-club3090-issue1140-topo-m.txt",
    // Trimmed parser-test inputs: GPU rows only, no NIC rows (accepted, see topo_matrix docs).
    "testfixture-gb200-grace-4gpu-all-sys-nic-topo-m.txt",
    "testfixture-h100-dgx-8gpu-mlx5-columns-truncated-legend-topo-m.txt",
    "testfixture-h100-oci-4gpu-space-aligned-nic-legend-topo-m.txt",
    "v100-8gpu-nvlink-vm-all-phb-numa-0-1-topo-m.txt",
    "v100-power9-traverse-4gpu-nv3-pairs-numa-node-8-leading-spaces-topo-m.txt",
    "v100-power9-traverse-slurm-1-of-4-gpus-visible-numa-0-8-252-255-topo-m.txt",
];

/// Matrix-shaped texts that must be rejected: (file, line, kind) of the first error.
const MUST_FAIL: &[(&str, usize, TopoErrorKind)] = &[
    (
        "b200-8gpu-13nic-vllm-issue31594-MALFORMED-merged-NIC11NIC12-header-TRUNCATED.txt",
        1,
        TopoErrorKind::BadHeader,
    ),
    (
        "b200-8gpu-4numa-narrow-cpu-affinity-unsloth-issue3872-TRUNCATED.txt",
        7,
        TopoErrorKind::ShortRow,
    ),
    (
        "b200-8gpu-DEGRADED-gpu2-no-nvlink-vllm-issue16336-NO-HEADER-TRUNCATED.txt",
        1,
        TopoErrorKind::MissingHeader,
    ),
    (
        "dgx-a100-slurm-2-of-8-gpus-visible-dask-cuda-issue1358-TRUNCATED.txt",
        7,
        TopoErrorKind::ShortRow,
    ),
    (
        "dgx-h100-8gpu-vllm-issue13855-MALFORMED-merged-NIC8NIC9-NODENODE-TRUNCATED.txt",
        1,
        TopoErrorKind::BadHeader,
    ),
    // The GPU4 row happens to end on a complete CPU list; the rows after it are missing.
    (
        "dgx2-v100-16gpu-nv6-10nic-nccl-tests-issue78-no-numa-column-TRUNCATED.txt",
        7,
        TopoErrorKind::MissingRow,
    ),
    (
        "h100-h200-class-8gpu-numa-off-12nic-aihub0008-MALFORMED-missing-tabs-topo-m.txt",
        7,
        TopoErrorKind::BadCell,
    ),
    // `topo -p2p`: same shape, different meaning.
    (
        "h100-8gpu-ml-engineering-topo-p2p-r-all-ok.txt",
        2,
        TopoErrorKind::P2pMatrix,
    ),
    (
        "l4-2gpu-ml-engineering-topo-p2p-r-CNS-no-legend.txt",
        2,
        TopoErrorKind::P2pMatrix,
    ),
    (
        "pcie-8gpu-pix-pairs-2socket-numa-allreduce-readme-topo-p2p-r.txt",
        2,
        TopoErrorKind::P2pMatrix,
    ),
    (
        "pcie-8gpu-pix-pairs-2socket-numa-allreduce-readme-topo-p2p-w.txt",
        2,
        TopoErrorKind::P2pMatrix,
    ),
    (
        "rtx3090-2gpu-nvlink-club3090-driver610-topo-p2p-DR-legend.txt",
        2,
        TopoErrorKind::P2pMatrix,
    ),
    (
        "rtx5090-2gpu-pcie-club3090-issue1140-topo-p2p-rw-GNS-tab-format.txt",
        2,
        TopoErrorKind::P2pMatrix,
    ),
];

/// A line whose first word is `GPU<n>` and which has an `X` cell: a matrix row.
fn looks_like_matrix(text: &str) -> bool {
    text.lines().any(|l| {
        let mut words = l.split_whitespace();
        words.next().is_some_and(|w| {
            w.strip_prefix("GPU")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        }) && words.any(|w| w == "X")
    })
}

#[test]
fn every_matrix_fixture_is_classified() {
    let listed: BTreeSet<&str> = MUST_PARSE
        .iter()
        .copied()
        .chain(MUST_FAIL.iter().map(|(f, _, _)| *f))
        .collect();
    assert_eq!(
        listed.len(),
        MUST_PARSE.len() + MUST_FAIL.len(),
        "a file is listed twice"
    );
    let mut seen = BTreeSet::new();
    for entry in std::fs::read_dir(dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        if looks_like_matrix(&text) {
            assert!(
                listed.contains(name.as_str()),
                "{name} holds a matrix but is in neither MUST_PARSE nor MUST_FAIL"
            );
        } else {
            assert!(!listed.contains(name.as_str()), "{name} holds no matrix");
            // Whatever else it is, it is not a topo matrix.
            assert!(
                topo_matrix::parse(&text).is_err(),
                "{name} parsed as a matrix"
            );
        }
        seen.insert(name);
    }
    for name in &listed {
        assert!(
            seen.contains(*name),
            "{name} is listed but not in fixtures/nvidia"
        );
    }
}

#[test]
fn must_parse_fixtures_parse_consistently() {
    for name in MUST_PARSE {
        let m = matrix(name);
        let n = m.gpus.len();
        assert!(n >= 1, "{name}");
        for g in &m.gpus {
            assert_eq!(g.gpu_links.len(), n, "{name}");
            assert_eq!(g.nic_links.len(), m.nics.len(), "{name}");
        }
        let facts = facts_from_topo(&read(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(facts.source, TopologySource::NvidiaSmi);
        assert_eq!(facts.gpus.len(), n, "{name}");
        assert_eq!(facts.gpu_pairs.len(), n * (n - 1) / 2, "{name}");
        assert_eq!(facts.nics.len(), m.nics.len(), "{name}");
        for g in &facts.gpus {
            assert!(g.uuid.is_none() && g.product.is_none() && g.pci_bus_id.is_none());
        }
    }
}

#[test]
fn must_fail_fixtures_fail_at_the_line_named() {
    for (name, line, kind) in MUST_FAIL {
        let e = topo_matrix::parse(&read(name)).expect_err(name);
        assert_eq!((e.line, e.kind), (*line, *kind), "{name}: {e}");
        assert!(e.column >= 1, "{name}: {e}");
        assert!(
            matches!(facts_from_topo(&read(name)), Err(NvidiaSmiError::Topo(_))),
            "{name}"
        );
    }
}

#[test]
fn errors_name_line_column_and_token() {
    let e = topo_matrix::parse(&read(
        "dgx-h100-8gpu-vllm-issue13855-MALFORMED-merged-NIC8NIC9-NODENODE-TRUNCATED.txt",
    ))
    .unwrap_err();
    // A leading tab, then 16 names of 4 characters, each with its tab: NIC8NIC9 is at 1 + 16 × 5 + 1.
    assert_eq!((e.line, e.column), (1, 82), "{e}");
    assert!(
        e.to_string()
            .starts_with("line 1, column 82: expected a column name")
    );
    assert!(e.message.contains("\"NIC8NIC9\""), "{e}");

    let e = topo_matrix::parse(&read(
        "h100-h200-class-8gpu-numa-off-12nic-aihub0008-MALFORMED-missing-tabs-topo-m.txt",
    ))
    .unwrap_err();
    assert_eq!(e.line, 7);
    assert_eq!(
        e.message,
        "expected a link class (NV<k>, PIX, PXB, PHB, NODE, SYS) but found \"PIXNODE\""
    );
    let line7 =
        read("h100-h200-class-8gpu-numa-off-12nic-aihub0008-MALFORMED-missing-tabs-topo-m.txt")
            .lines()
            .nth(6)
            .unwrap()
            .to_string();
    let at = line7.find("PIXNODE").unwrap();
    assert_eq!(e.column, line7[..at].chars().count() + 1);

    let e = topo_matrix::parse(&read(
        "b200-8gpu-DEGRADED-gpu2-no-nvlink-vllm-issue16336-NO-HEADER-TRUNCATED.txt",
    ))
    .unwrap_err();
    assert!(e.message.contains("header line is missing"), "{e}");

    let e = topo_matrix::parse(&read(
        "b200-8gpu-4numa-narrow-cpu-affinity-unsloth-issue3872-TRUNCATED.txt",
    ))
    .unwrap_err();
    assert!(
        e.message.contains("row GPU5 ends after 5 of 17 cells"),
        "{e}"
    );

    let e = topo_matrix::parse(&read("l4-2gpu-ml-engineering-topo-p2p-r-CNS-no-legend.txt"))
        .unwrap_err();
    assert!(e.message.contains("P2P-capability matrix"), "{e}");
    assert!(e.message.contains("not a `topo -m`"), "{e}");
}

#[test]
fn dgx1_hybrid_cube_mesh() {
    let m = matrix("dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt");
    assert_eq!(m.gpus.len(), 8);
    assert_eq!(m.gpu_link(0, 3), Some(nv(2)));
    assert_eq!(m.gpu_link(3, 0), Some(nv(2)));
    assert_eq!(m.gpu_link(0, 1), Some(nv(1)));
    assert_eq!(m.gpu_link(0, 5), Some(LinkClass::Sys));
    assert_eq!(m.gpu_link(0, 0), None);
    let names: Vec<&str> = m.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]);
    assert_eq!(m.nic_link("mlx5_0", 0), Some(LinkClass::Pix));
    assert_eq!(m.nic_link("mlx5_1", 0), Some(LinkClass::Phb));
    assert_eq!(m.nic_link("mlx5_2", 4), Some(LinkClass::Pix));
    assert!(!m.columns.numa_affinity && m.columns.cpu_affinity);
    assert_eq!(m.gpus[0].cpu_affinity.as_deref(), Some("0-19,40-59"));
    assert_eq!(m.gpus[7].cpu_affinity.as_deref(), Some("20-39,60-79"));
    assert_eq!(m.gpus[0].numa_affinity, None);
    // NIC rows (with a trailing tab) were read and checked.
    assert_eq!(
        m.nics[0].nic_links.as_deref(),
        Some(
            &[
                None,
                Some(LinkClass::Sys),
                Some(LinkClass::Phb),
                Some(LinkClass::Sys)
            ][..]
        )
    );

    let facts = facts_from_topo(&read(
        "dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt",
    ))
    .unwrap();
    assert!(facts.gpus.iter().all(|g| g.numa_node.is_none()));
    let pair = facts
        .gpu_pairs
        .iter()
        .find(|p| (p.a, p.b) == (0, 3))
        .unwrap();
    assert_eq!((pair.link_type, pair.nvlinks), (LinkType::Nv, 2));
    let nic = &facts.nics[0];
    assert_eq!(nic.name, "mlx5_0");
    assert_eq!(nic.gpu_links[0], (0, LinkType::Pix));
    assert_eq!(nic.gpu_links.len(), 8);
}

#[test]
fn dgx_a100_nv12_all_to_all_eight_numa_nodes() {
    let name = "dgx-a100-mlx5-names-12nic-topo-m.txt";
    let m = matrix(name);
    for a in 0..8 {
        for b in 0..8 {
            if a != b {
                assert_eq!(m.gpu_link(a, b), Some(nv(12)));
            }
        }
    }
    let numa: Vec<&str> = m
        .gpus
        .iter()
        .map(|g| g.numa_affinity.as_deref().unwrap())
        .collect();
    assert_eq!(numa, ["3", "3", "1", "1", "7", "7", "5", "5"]);
    assert_eq!(m.nics.len(), 12);
    assert_eq!(m.nics[11].name, "mlx5_11");
    assert_eq!(m.nic_link("mlx5_0", 0), Some(LinkClass::Pxb));
    assert_eq!(m.nic_link("mlx5_1", 1), Some(LinkClass::Pxb));
    assert_eq!(m.nic_link("mlx5_0", 2), Some(LinkClass::Sys));
    assert_eq!(m.nic_link("mlx5_6", 4), Some(LinkClass::Pxb));
    // mlx5_4/5 (storage) reach no GPU below the root complex.
    assert!(m.gpus.iter().all(|g| g.nic_links[4] == LinkClass::Sys));

    let facts = facts_from_topo(&read(name)).unwrap();
    let nodes: Vec<Option<i32>> = facts.gpus.iter().map(|g| g.numa_node).collect();
    assert_eq!(nodes, [3, 3, 1, 1, 7, 7, 5, 5].map(Some).to_vec());
    assert_eq!(
        facts.gpus[4].cpu_affinity.as_deref(),
        Some("112-127,240-255")
    );
    assert!(facts.gpu_pairs.iter().all(|p| p.nvlinks == 12));
}

#[test]
fn hgx_h100_header_without_leading_tab_and_nic_legend() {
    let name = "hgx-h100-80gb-hbm3-8gpu-12nic-driver580-header-no-leading-tab-topo-m.txt";
    let m = matrix(name);
    assert_eq!(m.gpus.len(), 8);
    assert!(m.columns.gpu_numa_id);
    assert_eq!(m.gpu_link(2, 6), Some(nv(18)));
    assert_eq!(m.nics[0].label, "NIC0");
    assert_eq!(m.nics[0].name, "mlx5_0");
    assert_eq!(m.nics[11].name, "mlx5_11");
    assert_eq!(m.nic_link("mlx5_0", 0), Some(LinkClass::Pix));
    assert_eq!(m.nic_link("mlx5_1", 0), Some(LinkClass::Pxb));
    assert_eq!(m.nic_link("mlx5_6", 4), Some(LinkClass::Pix));
    for g in &m.gpus {
        let numa = if g.index < 4 { "0" } else { "1" };
        assert_eq!(g.numa_affinity.as_deref(), Some(numa));
        assert_eq!(g.gpu_numa_id, None, "N/A");
    }
    assert_eq!(m.gpus[0].cpu_affinity.as_deref(), Some("0-55,112-167"));
    assert_eq!(m.gpus[5].cpu_affinity.as_deref(), Some("56-111,168-223"));

    let facts = facts_from_topo(&read(name)).unwrap();
    let nodes: Vec<Option<i32>> = facts.gpus.iter().map(|g| g.numa_node).collect();
    assert_eq!(nodes, [0, 0, 0, 0, 1, 1, 1, 1].map(Some).to_vec());
    assert_eq!(facts.nics[0].name, "mlx5_0");
    assert_eq!(facts.gpu_pairs.len(), 28);
}

#[test]
fn cgroup_restricted_cpu_affinity_is_unknown_not_shifted() {
    let m = matrix("a100-4gpu-nv4-slurm-cgroup-cpu-affinity-0-and-empty-gpu-d-2-topo-m.txt");
    let cpu: Vec<Option<&str>> = m.gpus.iter().map(|g| g.cpu_affinity.as_deref()).collect();
    assert_eq!(cpu, [Some("0"), Some("0"), None, None]);
    let numa: Vec<Option<&str>> = m.gpus.iter().map(|g| g.numa_affinity.as_deref()).collect();
    assert_eq!(numa, [Some("0"), Some("0"), Some("1"), Some("1")]);
    assert_eq!(m.gpu_link(2, 3), Some(nv(4)));
    let names: Vec<&str> = m.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1", "mlx5_2"]);
}

#[test]
fn numa_ranges_are_kept_as_text_but_give_no_node() {
    let name = "a100-4gpu-nv4-1nic-cpu-affinity-0,64-numa-affinity-range-0-3-topo-m.txt";
    let m = matrix(name);
    assert_eq!(m.gpus[0].cpu_affinity.as_deref(), Some("0,64"));
    assert_eq!(m.gpus[0].numa_affinity.as_deref(), Some("0-3"));
    let facts = facts_from_topo(&read(name)).unwrap();
    assert!(facts.gpus.iter().all(|g| g.numa_node.is_none()));
    assert_eq!(facts.gpus[3].cpu_affinity.as_deref(), Some("0,64"));
    assert_eq!(facts.nics[0].gpu_links[3], (3, LinkType::Phb));

    let facts = facts_from_topo(&read("v100-8gpu-nvlink-vm-all-phb-numa-0-1-topo-m.txt")).unwrap();
    assert!(facts.gpus.iter().all(|g| g.numa_node.is_none()));

    let name = "v100-power9-traverse-slurm-1-of-4-gpus-visible-numa-0-8-252-255-topo-m.txt";
    let m = matrix(name);
    assert_eq!(m.gpus.len(), 1);
    assert_eq!(m.gpus[0].numa_affinity.as_deref(), Some("0,8,252-255"));
    assert_eq!(m.gpus[0].cpu_affinity.as_deref(), Some("0-3"));
    assert_eq!(m.nics.len(), 4);
    let facts = facts_from_topo(&read(name)).unwrap();
    assert_eq!(facts.gpus.len(), 1);
    assert!(facts.gpu_pairs.is_empty());
    assert_eq!(facts.gpus[0].numa_node, None);
    assert_eq!(facts.nics[1].gpu_links, [(0, LinkType::Sys)]);
}

#[test]
fn space_expanded_files_keep_their_empty_fields() {
    let m = matrix(
        "gb200-4gpu-tray-k8s-test-infra-issue371-space-expanded-topo-m-LEGEND-TRUNCATED.txt",
    );
    assert_eq!(m.gpus.len(), 4);
    assert_eq!(m.gpus[2].cpu_affinity.as_deref(), Some("72-143"));
    assert_eq!(m.gpus[2].numa_affinity.as_deref(), Some("1"));
    assert_eq!(m.gpus[2].gpu_numa_id, None);
    assert_eq!(m.gpu_link(1, 3), Some(nv(18)));

    let m = matrix("h20-3e-8gpu-2nic-driver580-space-expanded-topo-m.txt");
    assert_eq!(
        m.nics.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        ["mlx5_0", "mlx5_1"]
    );
    assert_eq!(m.nic_link("mlx5_1", 0), Some(LinkClass::Pix));
    assert_eq!(m.nic_link("mlx5_1", 5), Some(LinkClass::Sys));
    assert_eq!(m.gpus[4].numa_affinity.as_deref(), Some("1"));

    let m = matrix("k80-2card-4gpu-mlx4-OLD-SOC-legend-no-numa-topo-matrix.txt");
    assert_eq!(m.gpu_link(0, 1), Some(LinkClass::Pix));
    assert_eq!(m.gpu_link(1, 2), Some(LinkClass::Phb));
    assert_eq!(m.nics[0].name, "mlx4_0");
    assert_eq!(m.gpus[3].cpu_affinity.as_deref(), Some("0-11"));

    let m = matrix("testfixture-h100-oci-4gpu-space-aligned-nic-legend-topo-m.txt");
    assert_eq!(m.nic_link("mlx5_3", 1), Some(LinkClass::Pxb));
    assert_eq!(m.gpus[3].numa_affinity.as_deref(), Some("0"));
}

#[test]
fn odd_nic_names_and_hidden_gpus() {
    let m = matrix("hgx-a100-4gpu-sxm4-80gb-epyc7532-driver580-roce-nic-rocep49s0-topo-m.txt");
    assert_eq!(m.nics[0].name, "rocep49s0");
    assert_eq!(m.gpu_link(0, 3), Some(nv(12)));

    let m = matrix("v100-power9-traverse-4gpu-nv3-pairs-numa-node-8-leading-spaces-topo-m.txt");
    assert_eq!(m.gpu_link(0, 1), Some(nv(3)));
    assert_eq!(m.gpu_link(1, 2), Some(LinkClass::Sys));
    assert_eq!(m.gpus[3].numa_affinity.as_deref(), Some("8"));

    let m = matrix(
        "a100-pcie-4gpu-adroit-no-nvlink-interleaved-cpu-affinity-leading-spaces-topo-m.txt",
    );
    assert_eq!(m.gpus[2].cpu_affinity.as_deref(), Some("1,3,5,7,9,11"));

    let m = matrix("testfixture-gb200-grace-4gpu-all-sys-nic-topo-m.txt");
    assert_eq!(m.nics.len(), 6);
    assert!(
        m.nics.iter().all(|n| n.nic_links.is_none()),
        "no NIC rows printed"
    );
    assert_eq!(m.nic_link("mlx5_5", 3), Some(LinkClass::Sys));

    let m = matrix("dgx1-v100-topo-mp-pcie-only-view.txt");
    assert_eq!(m.gpu_link(0, 1), Some(LinkClass::Pix));
    assert_eq!(m.gpu_link(0, 3), Some(LinkClass::Phb));
}

#[test]
fn synthetic_edge_cases() {
    // Old drivers' SOC is SYS; hidden GPUs keep their indices.
    let m = topo_matrix::parse(
        "\n\n\tGPU2\tGPU3\tCPU Affinity\nGPU2\t X \tSOC\t0-7\nGPU3\tSOC\t X \t8-15\n",
    )
    .unwrap();
    assert_eq!(m.gpu_link(2, 3), Some(LinkClass::Sys));
    let facts = facts_from_topo("\tGPU2\tGPU3\nGPU2\t X \tNV2\nGPU3\tNV2\t X \n").unwrap();
    assert_eq!((facts.gpu_pairs[0].a, facts.gpu_pairs[0].b), (2, 3));

    // Asymmetric cells.
    let e = topo_matrix::parse("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNV1\t X \n").unwrap_err();
    assert_eq!(
        (e.line, e.column, e.kind),
        (3, 6, TopoErrorKind::Asymmetric),
        "{e}"
    );
    assert!(
        e.message.contains("GPU1→GPU0 is NV1 but GPU0→GPU1 is NV2"),
        "{e}"
    );

    // A GPU↔NIC cell that disagrees with the NIC's row.
    let e = topo_matrix::parse(
        "\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tSYS\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n",
    )
    .unwrap_err();
    assert_eq!(e.kind, TopoErrorKind::Asymmetric);

    // Ends mid-row, on an empty text, a misplaced X, a cell that is not a link.
    let e = topo_matrix::parse("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-3\nGPU1\tNV4")
        .unwrap_err();
    assert_eq!((e.line, e.kind), (3, TopoErrorKind::ShortRow));
    assert_eq!(e.column, 9);
    let e = topo_matrix::parse("\n \n").unwrap_err();
    assert_eq!(e.kind, TopoErrorKind::Empty);
    let e = topo_matrix::parse("\tGPU0\tGPU1\nGPU0\tNV4\t X \nGPU1\tNV4\t X \n").unwrap_err();
    assert_eq!((e.line, e.column, e.kind), (2, 6, TopoErrorKind::BadCell));
    let e = topo_matrix::parse("\tGPU0\tGPU1\nGPU0\t X \tNV0\nGPU1\tNV0\t X \n").unwrap_err();
    assert_eq!(e.kind, TopoErrorKind::BadCell);
    // An extra row after the matrix.
    let e = topo_matrix::parse("\tGPU0\nGPU0\t X \nGPU0\t X \n").unwrap_err();
    assert_eq!((e.line, e.kind), (3, TopoErrorKind::UnexpectedRow));
    // A value where an affinity column is.
    let e = topo_matrix::parse("\tGPU0\tCPU Affinity\nGPU0\t X \tPIX\n").unwrap_err();
    assert_eq!(e.kind, TopoErrorKind::BadAttribute);
    // The extra tab before an N/A NUMA Affinity (older drivers), and before a numeric GPU NUMA ID.
    let m = topo_matrix::parse(
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-11\t\tN/A\nGPU1\tPHB\t X \t0-11\t\tN/A\n",
    )
    .unwrap();
    assert_eq!(m.gpus[1].cpu_affinity.as_deref(), Some("0-11"));
    assert_eq!(m.gpus[1].numa_affinity, None);
    let m = topo_matrix::parse(
        "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-71\t0\t\t4\n",
    )
    .unwrap();
    assert_eq!(m.gpus[0].gpu_numa_id.as_deref(), Some("4"));
    assert_eq!(m.gpus[0].numa_affinity.as_deref(), Some("0"));
    // Prose is not a header.
    let e = topo_matrix::parse("nvidia-smi topo -m\n\tGPU0\nGPU0\t X \n").unwrap_err();
    assert_eq!((e.line, e.kind), (1, TopoErrorKind::MissingHeader));
}
