//! Hand-checked facts about real machines, read off their recorded
//! `nvidia-smi topo -m` outputs (fixtures/INDEX.md gives each source).

use gputopo_api::{GpuTopologySpec, Interconnect, LinkClass, LinkType};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::discover::{Discovered, build};
use gputopo_topology::labels::{LabelOptions, node_labels};

fn discover(fixture: &str) -> Discovered {
    let path = format!(
        "{}/../fixtures/nvidia/{fixture}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("fixture readable");
    let facts = facts_from_topo(&text).unwrap_or_else(|e| panic!("{fixture}: {e}"));
    build("node-under-test", facts).unwrap_or_else(|e| panic!("{fixture}: {e}"))
}

fn class(spec: &GpuTopologySpec, a: u32, b: u32) -> LinkClass {
    spec.link(a, b).expect("every pair has a link").class()
}

#[test]
fn dgx1_v100_hybrid_cube_mesh() {
    let d = discover("dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt");
    let s = &d.spec;
    assert_eq!(s.gpus.len(), 8);
    assert_eq!(s.links.len(), 28);
    assert_eq!(class(s, 0, 3), LinkClass::Nv(2));
    assert_eq!(class(s, 0, 1), LinkClass::Nv(1));
    assert_eq!(class(s, 0, 5), LinkClass::Sys);
    assert_eq!(class(s, 4, 7), LinkClass::Nv(2));
    assert_eq!(s.summary.p2p_level, None, "some pairs have no NVLink");
    // The printer column's P2P: the weakest pair (GPU0-GPU5 over SYS), not nothing.
    assert_eq!(s.summary.p2p_bottleneck.as_deref(), Some("SYS"));
    assert_eq!(s.islands, vec![(0..8).collect::<Vec<u32>>()]);
    assert_eq!(s.summary.largest_island, 8);
    assert_eq!(s.summary.interconnect, Interconnect::NvlinkMesh);
    // No NUMA column on this old driver: unknown, not invented.
    assert!(s.gpus.iter().all(|g| g.numa_node.is_none()));
    assert_eq!(s.summary.numa_nodes, None);
    assert_eq!(s.gpus[0].cpu_affinity.as_deref(), Some("0-19,40-59"));
    let names: Vec<&str> = s.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]);
    assert_eq!(s.nics[0].gpu_links[0].link_type, LinkType::Pix);
    assert!(d.findings.is_empty(), "{:?}", d.findings);
    let labels = node_labels(s, LabelOptions::default());
    assert!(!labels.contains_key("nvidia.com/nvlink.p2p.level"));
    assert_eq!(labels["gputopo.dev/nvlink.all-to-all"], "false");
}

#[test]
fn dgx_a100_nvswitch_with_numa_per_gpu_and_nic_affinity() {
    let d = discover("dgx-a100-mlx5-names-12nic-topo-m.txt");
    let s = &d.spec;
    assert!(s.links.iter().all(|l| l.class() == LinkClass::Nv(12)));
    assert_eq!(s.summary.p2p_level.as_deref(), Some("NV12"));
    assert_eq!(s.summary.p2p_bottleneck, s.summary.p2p_level);
    assert!(s.summary.all_to_all_nvlink);
    assert_eq!(s.summary.interconnect, Interconnect::Nvswitch);
    let numa: Vec<Option<i32>> = s.gpus.iter().map(|g| g.numa_node).collect();
    assert_eq!(numa, [3, 3, 1, 1, 7, 7, 5, 5].map(Some));
    assert_eq!(s.summary.numa_nodes, Some(4));
    assert_eq!(s.nics.len(), 12);
    // Each pair of GPUs shares a PCIe switch complex with two HCAs.
    let pxb = |nic: &str| -> Vec<u32> {
        let n = s.nics.iter().find(|n| n.name == nic).expect("NIC listed");
        n.gpu_links
            .iter()
            .filter(|l| l.link_type == LinkType::Pxb)
            .map(|l| l.gpu)
            .collect()
    };
    assert_eq!(pxb("mlx5_0"), [0, 1]);
    assert_eq!(pxb("mlx5_2"), [2, 3]);
    assert_eq!(pxb("mlx5_6"), [4, 5]);
    assert_eq!(pxb("mlx5_8"), [6, 7]);
    assert!(
        pxb("mlx5_10").is_empty(),
        "storage NICs reach GPUs only through SYS"
    );
    let labels = node_labels(s, LabelOptions::default());
    assert_eq!(labels["nvidia.com/nvlink.p2p.level"], "NV12");
    assert_eq!(labels["gputopo.dev/numa-nodes"], "4");
}

#[test]
fn hgx_h100_nv18() {
    let d = discover("hgx-h100-80gb-hbm3-8gpu-12nic-driver580-header-no-leading-tab-topo-m.txt");
    let s = &d.spec;
    assert_eq!(s.summary.gpu_count, 8);
    assert!(s.links.iter().all(|l| l.class() == LinkClass::Nv(18)));
    assert_eq!(s.summary.p2p_level.as_deref(), Some("NV18"));
    assert_eq!(s.summary.interconnect, Interconnect::Nvswitch);
    assert_eq!(s.nics[0].name, "mlx5_0");
    let numa: Vec<Option<i32>> = s.gpus.iter().map(|g| g.numa_node).collect();
    assert_eq!(numa, [0, 0, 0, 0, 1, 1, 1, 1].map(Some));
    assert!(d.findings.is_empty());
}

#[test]
fn pcie_two_socket_box() {
    let d = discover("rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt");
    let s = &d.spec;
    assert!(s.links.iter().all(|l| l.link_type != LinkType::Nv));
    assert_eq!(s.islands.len(), 8);
    assert!(s.islands.iter().all(|i| i.len() == 1));
    assert_eq!(s.summary.largest_island, 1);
    assert_eq!(s.summary.p2p_level, None);
    assert_eq!(s.summary.interconnect, Interconnect::Pcie);
    // Six GPUs on socket 0, two on socket 1; across sockets is SYS.
    let numa: Vec<Option<i32>> = s.gpus.iter().map(|g| g.numa_node).collect();
    assert_eq!(numa, [0, 0, 0, 0, 0, 0, 1, 1].map(Some));
    assert_eq!(s.summary.numa_nodes, Some(2));
    assert_eq!(class(s, 0, 1), LinkClass::Phb);
    assert_eq!(class(s, 0, 2), LinkClass::Node);
    assert_eq!(class(s, 5, 6), LinkClass::Sys);
    assert_eq!(s.gpus[6].cpu_affinity.as_deref(), Some("36-71,108-143"));
}

#[test]
fn nvlink_bridged_pairs_form_islands_of_two() {
    let d = discover(
        "a100-80gb-pcie-4gpu-nvlink-bridge-nv12-pairs-xeon8470-driver610-NO-LEGEND-topo-m.txt",
    );
    let s = &d.spec;
    assert_eq!(s.islands, vec![vec![0, 1], vec![2, 3]]);
    assert_eq!(class(s, 0, 1), LinkClass::Nv(12));
    assert_eq!(class(s, 1, 2), LinkClass::Sys);
    assert_eq!(s.summary.largest_island, 2);
    assert_eq!(s.summary.p2p_level, None);
    assert_eq!(s.summary.interconnect, Interconnect::NvlinkBridge);
    assert!(
        d.findings.is_empty(),
        "bridged pairs are healthy: {:?}",
        d.findings
    );
}

#[test]
fn gpus_hidden_by_cgroups() {
    // Slurm gave this job 1 of 4 GPUs: one GPU, no pairs, no p2p level.
    let d = discover("v100-power9-traverse-slurm-1-of-4-gpus-visible-numa-0-8-252-255-topo-m.txt");
    assert_eq!(d.spec.gpus.len(), 1);
    assert!(d.spec.links.is_empty());
    assert_eq!(d.spec.summary.p2p_level, None);
    // The cgroup's CPU set, as nvidia-smi printed it; `NUMA Affinity` lists
    // several nodes (0,8,252-255), so no single NUMA node is claimed.
    assert_eq!(d.spec.gpus[0].cpu_affinity.as_deref(), Some("0-3"));
    assert_eq!(d.spec.gpus[0].numa_node, None);
}
