//! Hand-written assertions on AMD machines: what the scheduler relies on,
//! stated outright rather than only in snapshots.

use gputopo_api::{GpuTopologySpec, GpuVendor, Interconnect, LinkClass, TopologySource};
use gputopo_topology::backend::amd_smi::facts_from_answers;
use gputopo_topology::discover::build;
use gputopo_topology::parse::{amd_smi, rocm_smi};

fn fixture(name: &str) -> String {
    let path = format!("{}/../fixtures/amd/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn spec_of(answers: gputopo_topology::backend::amd_smi::AmdSmiAnswers) -> GpuTopologySpec {
    let facts = facts_from_answers(&answers, TopologySource::RocmSmi).expect("facts");
    build("n", facts).expect("normalized").spec
}

fn rocm(name: &str) -> GpuTopologySpec {
    spec_of(rocm_smi::parse(&fixture(name)).expect("parses"))
}

#[test]
fn mi300x_class_box_is_one_hive_of_eight_all_xgmi() {
    let s = rocm("amd-mi308x-8gpu-0x74a2-rocm72-rocm-smi-showtopo-lowpower-warning.txt");
    assert_eq!(s.vendor, Some(GpuVendor::Amd));
    assert_eq!(s.summary.gpu_count, 8);
    assert_eq!(s.links.len(), 28);
    assert!(s.links.iter().all(|l| l.class() == LinkClass::Xgmi));
    assert!(
        s.links
            .iter()
            .all(|l| l.hops == Some(1) && l.weight == Some(15))
    );
    assert_eq!(s.islands, vec![(0..8).collect::<Vec<u32>>()]);
    assert_eq!(s.summary.largest_island, 8);
    assert_eq!(s.summary.interconnect, Interconnect::Xgmi);
    assert_eq!(s.summary.p2p_level, None, "p2pLevel is NVLink only");
    assert_eq!(s.summary.p2p_bottleneck.as_deref(), Some("XGMI"));
    assert_eq!(s.summary.numa_nodes, Some(2));
    assert_eq!(s.gpus[4].numa_node, Some(1));

    // amd-smi's tables of an 8-GPU all-XGMI box say the same wiring.
    let t = spec_of(
        amd_smi::parse(&fixture(
            "amd-smi-8gpu-all-xgmi-mi300x-class-changelog-sample-RECONSTRUCTED-topology.txt",
        ))
        .expect("parses"),
    );
    assert_eq!(t.islands, s.islands);
    assert!(t.links.iter().all(|l| l.class() == LinkClass::Xgmi));
    let bw = t.links[0].bandwidth.expect("NUMA BW table");
    assert_eq!((bw.min_mbps, bw.max_mbps), (50000, 50000));
    assert_eq!(t.gpus[7].pci_bus_id.as_deref(), Some("00000000:df:00.0"));
}

#[test]
fn two_hive_box_is_two_hives_of_four_with_pcie_between() {
    let s =
        rocm("amd-8gpu-two-xgmi-hives-of-4-pcie-between-64gb-likely-mi210-rocm-smi-showtopo.txt");
    assert_eq!(s.islands, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    assert_eq!(s.summary.largest_island, 4);
    assert_eq!(s.link(0, 1).map(|l| l.class()), Some(LinkClass::Xgmi));
    let across = s.link(3, 4).expect("a link");
    // Different NUMA nodes, so the PCIe path crosses sockets: SYS.
    assert_eq!(across.class(), LinkClass::Sys);
    assert_eq!((across.hops, across.weight), (Some(3), Some(72)));
    assert_eq!(s.summary.interconnect, Interconnect::Xgmi);
}

#[test]
fn mi100_pair_without_bridge_is_pcie_only() {
    let s = rocm("amd-mi100-2gpu-pcie-no-xgmi-bridge-WHITESPACE-COLLAPSED-rocm-smi-linktype.txt");
    assert_eq!(s.summary.gpu_count, 2);
    // No NUMA facts: the worst PCIe class, never a better guess.
    assert_eq!(s.link(0, 1).map(|l| l.class()), Some(LinkClass::Sys));
    assert_eq!(s.islands, vec![vec![0], vec![1]]);
    assert_eq!(s.summary.interconnect, Interconnect::Pcie);
}

#[test]
fn showtopo_and_showtoponuma_of_one_node_read_together() {
    let numa = fixture("amd-8gpu-2numa-rocm-smi-showtoponuma-issue4740.txt");
    let links =
        "=== Link Type between two GPUs ===\n       GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7\n"
            .to_string()
            + &(0..8)
                .map(|r| {
                    let cells: Vec<&str> =
                        (0..8).map(|c| if r == c { "0" } else { "XGMI" }).collect();
                    format!("GPU{r}   {}\n", cells.join("  "))
                })
                .collect::<String>();
    let s = spec_of(rocm_smi::parse(&format!("{links}\n{numa}")).expect("parses"));
    assert_eq!(s.summary.numa_nodes, Some(2));
    assert_eq!(s.islands.len(), 1);
}

#[test]
fn broken_rocm_smi_matrices_are_errors_naming_line_and_column() {
    let good =
        fixture("amd-4gpu-xgmi-4numa-hpc-docs-OLD-rocm-smi-format-GPU-space-idx-showtopo.txt");
    let cases = [
        // A merged cell (a lost separator).
        (
            "GPU1   15           0            15           15",
            "GPU1   15           015           15",
            "3 of 4 cells",
        ),
        // A cell that is neither a number nor a link type.
        (
            "GPU2   XGMI         XGMI         0            XGMI",
            "GPU2   XGMI         XGMI         0            NVLINK",
            "XGMI or PCIE",
        ),
        // Asymmetric hops.
        (
            "GPU3   1            1            1            0",
            "GPU3   1            2            1            0",
            "symmetric",
        ),
    ];
    for (from, to, says) in cases {
        assert!(good.contains(from), "{from}");
        let bad = good.replacen(from, to, 1);
        let e = rocm_smi::parse(&bad).expect_err("refused");
        let text = e.to_string();
        assert!(
            text.starts_with("line ") && text.contains("column"),
            "{text}"
        );
        assert!(text.contains(says), "{text}");
    }
    // Cut inside the last matrix.
    let cut = &good[..good.find("GPU3   XGMI").expect("row")];
    let e = rocm_smi::parse(cut).expect_err("truncated");
    assert!(e.to_string().contains("stops after 3 of 4 rows"), "{e}");
    assert!(rocm_smi::parse("hello\n").is_err());
    assert!(amd_smi::parse("[{\"gpu\": \"x\"}]").is_err());
    assert!(amd_smi::parse("WEIGHT TABLE:\n             0000:0c:00.0\n0000:0c:00.0 1\n").is_err());
}
